"""Fixtures: a real daemon with `[console]` (an `arm` and an MX-64 on a Dynamixel bus), one per serial family besides
Dynamixel 2.0 (Feetech, Dynamixel Protocol 1.0) with the vendor's client on its bus, and headless Chromium.

Browser tests need Debian's Chromium and Playwright for Python (`make browser` installs both); without them they
skip with that hint. Screenshots go to $SERVO_HIL_SCREENSHOTS, else a folder under pytest's tmp dir.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import dynamixel_sdk as dxl
import pytest
import scservo_sdk as scs

from tests.drivers.sdk_ports import SlackTimeout
from tests.servo_hil.daemon import free_port
from tests.servo_hil.daemon.conftest import Launcher, RigFile, write_rig

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MX_ON_BUS = 'bus = "dxl"\nid = 1\n'
# added to the vendor clients' ~34 ms packet timeout: a daemon starved of CPU by the browser and other tests answers
# late, which is the host's stall, not a lost reply (tests/drivers/sdk_ports.py)
SLACK_MS = 300.0


class DxlSlackPort(SlackTimeout, dxl.PortHandler):
    slack_ms = SLACK_MS


class ScsSlackPort(SlackTimeout, scs.PortHandler):
    slack_ms = SLACK_MS


def console_rig(path: Path, name: str, console: str = "", joints=("arm", "mx"), port: int | None = None) -> tuple:
    """A rig with the MX-64 on a fast Dynamixel bus and `[console]` on `port` (default: a free one), more
    `[console]` keys in `console`; (RigFile, console URL)."""
    port = port or free_port()
    extra = (f'[console]\nport = {port}\n{console}\n'
             f'[[buses]]\nname = "dxl"\nprotocol = "dynamixel"\nport = "{path.parent / (name + "-dxl")}"\n'
             'baud = 1000000\nfast = true\n')
    rig = write_rig(path, name, joints=joints, extra=extra, actuator_extra={"mx": MX_ON_BUS})
    return rig, f"http://127.0.0.1:{port}/"


# ------------------------------------------------------------------ serial families' rigs
@dataclass(frozen=True)
class Servo:
    """One servo of a family's rig and what its page shows (model numbers: the makers' tables)."""

    joint: str
    catalog: str      # catalog entry and the keys after it in the rig's [[actuators]] table
    id: int
    title: str        # the model as the page names it
    model_number: int


@dataclass(frozen=True)
class Family:
    """A serial family's rig: its bus protocol, servos, and the registers the tests write and check."""

    protocol: str
    servos: tuple[Servo, ...]
    goal_item: str
    goal_address: int
    center: int           # the Goal Position register at 0 rad
    rad_per_step: float
    eeprom_item: str      # an EEPROM item of the first servo, and a RAM one
    ram_item: str


FAMILIES = {
    "feetech": Family(
        "feetech",
        # model numbers: LeRobot MODEL_NUMBER_TABLE
        (Servo("shoulder", 'catalog = "sts3215"\nmodel = "m1"', 1, "Feetech STS3215", 777),
         Servo("wrist", 'catalog = "scs0009"', 2, "Feetech SCS0009", 1284)),
        "Goal_Position", 42, 2048, 2 * math.pi / 4096,   # STS memory table: Goal_Position at 42, 4096 steps per turn
        "Max_Temperature_Limit", "Torque_Enable"),
    "dynamixel1": Family(
        "dynamixel1",
        (Servo("ax12a", 'catalog = "ax12a"', 1, "AX-12A", 12),                  # AX-12A e-manual: Model Number 12
         Servo("mx64", 'catalog = "mx64"\nmodel = "m6"', 2, "MX-64(1.0)", 310)),  # MX-64 e-manual (1.0): 310
        "Goal Position", 30, 512, math.radians(300 / 1024),   # AX-12A e-manual: 0..1023 over 300°, 512 the middle
        "CW Angle Limit", "Torque Enable"),
}


@dataclass
class SerialRig:
    """A running family rig: its daemon, console URL and the vendor's client on its bus."""

    family: Family
    daemon: object
    url: str
    port: object          # the vendor client's PortHandler on the bus
    packets: object       # its PacketHandler

    def read_word(self, sid: int, address: int) -> int:
        """A two-byte read over the bus by the vendor's client, which must succeed."""
        value, comm, _error = self.packets.read2ByteTxRx(self.port, sid, address)
        assert comm == 0, f"{self.family.protocol} read of {address} from ID {sid}: communication result {comm}"
        return value


def _rig_text(family: Family, name: str, tty, console_port: int, pub: str, cmd: str) -> str:
    text = (f'name = "{name}"\n[loop]\nrate_hz = 1000\nmlockall = false\n[zmq]\npub = "{pub}"\ncommand = "{cmd}"\n'
            f'[mqtt]\nenabled = false\n[console]\nport = {console_port}\n'
            f'[[buses]]\nname = "bus"\nprotocol = "{family.protocol}"\nport = "{tty}"\nbaud = 1000000\nfast = true\n')
    for s in family.servos:
        text += (f'\n[[actuators]]\njoint = "{s.joint}"\n{s.catalog}\nload = {{ mass = 0.1, length = 0.05 }}\n'
                 f'bus = "bus"\nid = {s.id}\n')
    return text


@contextlib.contextmanager
def serial_rig(tmp_path_factory, protocol: str):
    """A daemon serving FAMILIES[`protocol`]'s bus and console, and the vendor's client on that bus."""
    family = FAMILIES[protocol]
    tmp = tmp_path_factory.mktemp(f"console-{family.protocol}")
    console_port, tty = free_port(), tmp / "tty"
    pub, cmd = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    name = f"console-{family.protocol}"
    path = tmp / "rig.toml"
    path.write_text(_rig_text(family, name, tty, console_port, pub, cmd))
    launcher = Launcher(tmp)
    try:
        daemon = launcher.start(RigFile(path, name, pub, cmd, None, [s.joint for s in family.servos]))
        deadline = time.monotonic() + 10
        while not tty.exists() and time.monotonic() < deadline and daemon.alive:
            time.sleep(0.05)
        assert tty.exists(), daemon.stderr()
        if family.protocol == "feetech":
            port, packets = ScsSlackPort(str(tty)), scs.PacketHandler(0)   # 0: the STS byte order (SDK SCS_END)
        else:
            port, packets = DxlSlackPort(str(tty)), dxl.PacketHandler(1.0)
        assert port.openPort() and port.setBaudRate(1_000_000)
        try:
            yield SerialRig(family, daemon, f"http://127.0.0.1:{console_port}/", port, packets)
        finally:
            port.closePort()
    finally:
        launcher.finish()


@pytest.fixture(scope="module")
def console_daemon(tmp_path_factory, request):
    """(DaemonProcess, console URL) of one daemon for the module."""
    launcher = Launcher(tmp_path_factory.mktemp("console"))
    name = "console-" + request.module.__name__.rsplit("_", 1)[-1]
    rig, url = console_rig(launcher.dir / "rig.toml", name)
    yield launcher.start(rig), url
    launcher.finish()


@pytest.fixture(scope="session")
def shots(tmp_path_factory) -> Path:
    """Where screenshots are kept: $SERVO_HIL_SCREENSHOTS, else `screenshots` under pytest's tmp dir."""
    path = Path(os.environ.get("SERVO_HIL_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Debian Chromium driven by Playwright (a fresh, empty profile)."""
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        pytest.skip("no Chromium at /usr/bin/chromium: run `make browser` (apt chromium + playwright)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: run `make browser` (apt chromium + playwright)")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 800}, accept_downloads=True)
        yield context
        context.close()
