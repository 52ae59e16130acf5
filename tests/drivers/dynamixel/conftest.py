"""Fixtures for the SDK integration tests: `servo-hil run` as a subprocess (`DxlLauncher`) and the real dynamixel-sdk
4.1.0 on its pty (`Dxl`). Expected values come from the ROBOTIS e-manual (Protocol 2.0 page, model control
tables), never from the code under test. Only one daemon runs at a time in these modules: the SDK busy-waits on one
of the two cores."""

from __future__ import annotations

import contextlib
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import dynamixel_sdk as sdk
import pytest

from tests.daemon_process import BusDaemon, BusLauncher
from tests.drivers import read_serial
from tests.drivers.sdk_ports import SlackPortHandler
from tests.servo_hil.daemon import free_port, rig_head

CONFIG = Path(__file__).resolve().parents[3] / "config"

# ------------------------------------------------------------------------------------- e-manual facts
# (joint, catalog, ID, model number (e-manual control tables, Model Number(0)), actuator extras)
SERVOS = (
    ("mx64", "mx64", 1, 311, 'model = "m6"\nload = { mass = 0.5, length = 0.1 }\n'),
    ("mx106", "mx106", 2, 321, 'model = "m6"\nload = { mass = 0.8, length = 0.1 }\n'),
    ("xm430", "xm430_w350", 3, 1020, "load = { mass = 0.3, length = 0.1 }\n"),
    ("xl330", "xl330_m288", 4, 1200,
     'model = "m6"\nfirmware = { supply_v = 5.0 }\nload = { mass = 0.1, length = 0.1 }\n'),
)
IDS = tuple(s[2] for s in SERVOS)
JOINT = {s[2]: s[0] for s in SERVOS}
CATALOG = {s[2]: s[1] for s in SERVOS}
MODEL = {s[2]: s[3] for s in SERVOS}
X_IDS = (3, 4)       # Fast Sync / Bulk Read: X430 FW45+, X330 FW46+ (e-manual Protocol 2.0 §Fast Sync Read)
MX_IDS = (1, 2)      # MX(2.0): no fast reads


def mx64_pendulum_rig(tmp: Path, name: str, model: str) -> tuple[Path, str]:
    """A rig `name` in `tmp`: one MX-64 (bam `model`) lifting a pendulum at ID 1 on a fast Dynamixel bus; the
    rig's path and its command endpoint."""
    cmd = f"tcp://127.0.0.1:{free_port()}"
    path = tmp / f"{name}.toml"
    path.write_text(rig_head(name, cmd) + f"""[[buses]]
name = "dxl"
protocol = "dynamixel"
fast = true
[[actuators]]
joint = "mx64"
catalog = "mx64"
model = "{model}"
load = {{ mass = 0.5, length = 0.1 }}
bus = "dxl"
id = 1
""")
    return path, cmd


def firmware_version(dxl_id: int) -> int:
    """The firmware version the model's control-table TOML declares (what Ping must report)."""
    with (CONFIG / "dynamixel" / f"{CATALOG[dxl_id]}.toml").open("rb") as fh:
        return tomllib.load(fh)["firmware_version"]


# Control-table addresses and sizes (e-manual §Control Table of RAM Area; the same for MX(2.0), XM430 and XL330
# at these addresses)
class A:
    MODEL_NUMBER = (0, 2)
    FIRMWARE_VERSION = (6, 1)
    ID = (7, 1)
    BAUD_RATE = (8, 1)
    RETURN_DELAY = (9, 1)
    DRIVE_MODE = (10, 1)
    OPERATING_MODE = (11, 1)
    SECONDARY_ID = (12, 1)
    HOMING_OFFSET = (20, 4)
    TEMPERATURE_LIMIT = (31, 1)
    PWM_LIMIT = (36, 2)
    CURRENT_LIMIT = (38, 2)
    VELOCITY_LIMIT = (44, 4)
    MAX_POSITION = (48, 4)
    MIN_POSITION = (52, 4)
    SHUTDOWN = (63, 1)
    TORQUE_ENABLE = (64, 1)
    LED = (65, 1)
    STATUS_RETURN_LEVEL = (68, 1)
    REGISTERED = (69, 1)
    HW_ERROR = (70, 1)
    VELOCITY_I = (76, 2)
    VELOCITY_P = (78, 2)
    POSITION_D = (80, 2)
    POSITION_I = (82, 2)
    POSITION_P = (84, 2)
    BUS_WATCHDOG = (98, 1)
    GOAL_PWM = (100, 2)
    GOAL_CURRENT = (102, 2)
    GOAL_VELOCITY = (104, 4)
    PROFILE_ACCELERATION = (108, 4)
    PROFILE_VELOCITY = (112, 4)
    GOAL_POSITION = (116, 4)
    REALTIME_TICK = (120, 2)
    MOVING = (122, 1)
    MOVING_STATUS = (123, 1)
    PRESENT_PWM = (124, 2)
    PRESENT_CURRENT = (126, 2)
    PRESENT_VELOCITY = (128, 4)
    PRESENT_POSITION = (132, 4)
    VELOCITY_TRAJECTORY = (136, 4)
    POSITION_TRAJECTORY = (140, 4)
    PRESENT_TEMPERATURE = (146, 1)


# Protocol 2.0 error numbers (e-manual Protocol 2.0 §Status Packet, Error)
RESULT_FAIL, INSTRUCTION_ERROR, CRC_ERROR, DATA_RANGE, DATA_LENGTH, DATA_LIMIT, ACCESS = 1, 2, 3, 4, 5, 6, 7
ALERT = 0x80
BAUD_VALUE = {57_600: 1, 115_200: 2, 1_000_000: 3, 2_000_000: 4}   # e-manual §Baud Rate(8) values




# ------------------------------------------------------------------------------------- rig files
@dataclass
class DxlRig:
    path: Path
    port: str          # the pty link the daemon creates (--port)
    cmd: str           # ZeroMQ command endpoint
    pub: str
    lockstep: bool
    fast: bool
    rate_hz: float


def write_dxl_rig(directory: Path, name: str, *, fast: bool = True, lockstep: bool = False, baud: int = 1_000_000,
                  registers: dict[int, dict[str, int]] | None = None, actuator_extra: dict[int, str] | None = None,
                  servos=SERVOS, rate_hz: float = 1000.0) -> DxlRig:
    """A rig TOML in `directory` with `servos` on bus "dxl" (by default the four demo servos: MX-64(2.0) ID 1,
    MX-106(2.0) ID 2, XM430-W350 ID 3, XL330-M288 ID 4), ZeroMQ on free loopback ports, MQTT disabled, the pty
    link in `directory`. `fast` (no return delay, no wire pacing) and `lockstep` are per rig."""
    pub = f"tcp://127.0.0.1:{free_port()}"
    cmd = f"tcp://127.0.0.1:{free_port()}"
    port = str(directory / f"tty-{name}")
    parts = [
        f'name = "{name}"\n',
        f"[loop]\nrate_hz = {rate_hz}\nmlockall = false\nlockstep = {str(lockstep).lower()}\n",
        f'[zmq]\npub = "{pub}"\ncommand = "{cmd}"\n',
        "[mqtt]\nenabled = false\n",
        f'[[buses]]\nname = "dxl"\nprotocol = "dynamixel"\nport = "{directory / "unused-link"}"\n'
        f"baud = {baud}\nfast = {str(fast).lower()}\n",
    ]
    for joint, catalog, dxl_id, _, extra in servos:
        body = f'joint = "{joint}"\ncatalog = "{catalog}"\n{extra}bus = "dxl"\nid = {dxl_id}\n'
        body += (actuator_extra or {}).get(dxl_id, "")
        regs = (registers or {}).get(dxl_id)
        if regs:
            body += "registers = { " + ", ".join(f'"{k}" = {v}' for k, v in regs.items()) + " }\n"
        parts.append("\n[[actuators]]\n" + body)
    path = directory / f"{name}.toml"
    path.write_text("".join(parts))
    return DxlRig(path, port, cmd, pub, lockstep, fast, rate_hz)


# ------------------------------------------------------------------------------------- the daemon
@dataclass
class DxlDaemon(BusDaemon):
    ids: tuple[int, ...] = field(default_factory=tuple)

    def step(self, n: int) -> dict:
        """Lock-step: advance the loop n ticks (the physics and the servos' clocks); the state reply."""
        assert self.rig.lockstep, "step needs a lock-step rig"
        return self.ok("step", n=n)

    def tick(self) -> int:
        return self.ok("status")["status"].get("tick", -1)


class DxlLauncher(BusLauncher):
    """Starts `servo-hil run RIG --port PATH` daemons, ready once one has printed `servo-hil: dynamixel bus 'dxl'
    at PATH (IDs 1, 2, 3, 4, ...)`; `finish()` SIGTERMs them and checks exit 0 within 3 s (else kills it and fails),
    the pty link removed and a clean log (daemons that already ended are left to the test that ended them)."""

    banner = re.compile(r"servo-hil: dynamixel bus 'dxl' at (\S+) \(IDs ([0-9, ]+?), (\d+) bit/s")
    daemon_type = DxlDaemon
    check_exited = False

    def argv(self, rig: DxlRig) -> list[str]:
        return [*super().argv(rig), "--port", rig.port]

    def ready(self, daemon: DxlDaemon, match: re.Match) -> None:
        daemon.ids = tuple(int(x) for x in match.group(2).split(","))

    def after_exit(self, daemon: DxlDaemon) -> str | None:
        if os.path.lexists(daemon.rig.port):
            return f"{daemon.rig.path.name}: the pty link {daemon.rig.port} is still there after exit"
        return None


@pytest.fixture(scope="module")
def module_launcher(tmp_path_factory):
    """A launcher whose daemons live for the whole test module."""
    launcher = DxlLauncher(tmp_path_factory.mktemp("dxl"))
    yield launcher
    launcher.finish()


@pytest.fixture
def launcher(tmp_path):
    """A launcher whose daemons live for one test (tests that change persistent state)."""
    launcher = DxlLauncher(tmp_path)
    yield launcher
    launcher.finish()


# ------------------------------------------------------------------------------------- the SDK side
def to_bytes(value: int, size: int) -> list[int]:
    """Little-endian, two's complement for negatives (e-manual Protocol 2.0 §Instruction Packet, Parameters)."""
    return list((value & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))


def describe(ph, comm: int, error: int) -> str:
    return f"comm {comm} ({ph.getTxRxResult(comm)}), error {error:#04x} ({ph.getRxPacketError(error)})"


DEFAULT_SLACK_MS = 500.0


class Dxl:
    """dynamixel-sdk 4.1.0 on a daemon's pty, opened the way a controller opens a U2D2 (`PortHandler(path)`,
    `openPort()`, `setBaudRate(1000000)`, `PacketHandler(2.0)`), with helpers that check the comm result and the
    status error of every exchange."""

    def __init__(self, path: str, baud: int = 1_000_000, slack_ms: float = DEFAULT_SLACK_MS):
        self.port = SlackPortHandler(path, slack_ms)
        assert self.port.openPort(), f"openPort({path}) failed"
        assert self.port.setBaudRate(baud), f"setBaudRate({baud}) failed"
        self.ph = sdk.PacketHandler(2.0)

    def close(self) -> None:
        self.port.closePort()

    def set_baud(self, baud: int) -> None:
        assert self.port.setBaudRate(baud), f"setBaudRate({baud}) refused"

    # raw results -----------------------------------------------------------------------------
    def try_read(self, dxl_id: int, item: tuple[int, int] | int, length: int | None = None):
        """(data, comm, error) of a Read; `readTxRx` so an error reply does not raise (read1/2/4ByteTxRx would
        index the CRC as data)."""
        address, size = item if isinstance(item, tuple) else (item, length)
        return self.ph.readTxRx(self.port, dxl_id, address, size if length is None else length)

    def try_write(self, dxl_id: int, item: tuple[int, int], value: int, size: int | None = None):
        """(comm, error) of a Write of `value` (`size` bytes; default: the item's size)."""
        address, isize = item
        n = size or isize
        return self.ph.writeTxRx(self.port, dxl_id, address, n, to_bytes(value, n))

    # checked ---------------------------------------------------------------------------------
    def read(self, dxl_id: int, item: tuple[int, int], signed: bool = False) -> int:
        data, comm, err = self.try_read(dxl_id, item)
        assert comm == sdk.COMM_SUCCESS and err == 0, f"read {item} of ID {dxl_id}: {describe(self.ph, comm, err)}"
        assert len(data) == item[1], f"read {item} of ID {dxl_id}: {len(data)} bytes back"
        return int.from_bytes(bytes(data), "little", signed=signed)

    def write(self, dxl_id: int, item: tuple[int, int], value: int) -> None:
        comm, err = self.try_write(dxl_id, item, value)
        assert comm == sdk.COMM_SUCCESS and err == 0, \
            f"write {value} to {item} of ID {dxl_id}: {describe(self.ph, comm, err)}"

    def reboot(self, dxl_id: int) -> None:
        comm, err = self.ph.reboot(self.port, dxl_id)
        assert comm == sdk.COMM_SUCCESS and err & 0x7F == 0, f"reboot ID {dxl_id}: {describe(self.ph, comm, err)}"

    def ping(self, dxl_id: int) -> tuple[int, int, int]:
        return self.ph.ping(self.port, dxl_id)

    def raw_exchange(self, dxl_id: int, instruction: int, params: list[int] = (), rx_bytes: int = 11):
        """Send an instruction the SDK's own method would not read the reply of (e.g. a unicast Action: dynamixel-sdk
        protocol2_packet_handler.py `action` only transmits) and read one status packet: (rxpacket, comm) with the SDK's
        parser."""
        tx = [0] * (10 + len(params))
        tx[sdk.protocol2_packet_handler.PKT_ID] = dxl_id
        tx[sdk.protocol2_packet_handler.PKT_LENGTH_L] = (len(params) + 3) & 0xFF
        tx[sdk.protocol2_packet_handler.PKT_LENGTH_H] = (len(params) + 3) >> 8
        tx[sdk.protocol2_packet_handler.PKT_INSTRUCTION] = instruction
        for k, p in enumerate(params):
            tx[sdk.protocol2_packet_handler.PKT_PARAMETER0 + k] = p
        comm = self.ph.txPacket(self.port, tx)
        if comm != sdk.COMM_SUCCESS:
            return [], comm
        self.port.setPacketTimeout(rx_bytes)
        return self.ph.rxPacket(self.port, False)


@contextlib.contextmanager
def open_dxl(path: str, baud: int = 1_000_000, slack_ms: float = DEFAULT_SLACK_MS):
    d = Dxl(path, baud, slack_ms)
    try:
        yield d
    finally:
        d.close()


def crc16(data: bytes) -> int:
    """CRC-16/UMTS (poly 0x8005, init 0, MSB first; e-manual "CRC Calculation"), bitwise: independent of the
    product's tables."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def read_raw(port, n: int, timeout_s: float = 2.0) -> bytes:
    """Up to `n` bytes from the SDK's port (its non-blocking pyserial), waiting at most `timeout_s`; then
    the port is free again (the SDK's *Tx calls leave `is_using` set for the Rx they expect)."""
    port.is_using = False
    return read_serial(port.ser, n, timeout_s)


@pytest.fixture(scope="module")
def dxl(daemon):
    """dynamixel-sdk on the bus of the test module's `daemon` fixture (one port per module)."""
    d = Dxl(daemon.rig.port)
    yield d
    d.close()
