"""Fixtures for the Feetech bus tests: `servo-hil run` of an STS3215 rig as a subprocess, its pty link in the test's
folder, ready once the daemon has printed `servo-hil: feetech bus 'sts' at PATH (IDs ...)`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import scservo_sdk as scs

from tests.daemon_process import BusDaemon, BusLauncher
from tests.drivers.sdk_ports import SlackTimeout
from tests.servo_hil.daemon import rig_head


@dataclass
class StsRig:
    path: Path
    port: str          # the pty link the daemon creates
    cmd: str = ""
    lockstep: bool = False


def write_sts_rig(directory: Path, name: str, ids=(1, 2), *, fast: bool = False, baud: int = 1_000_000,
                  lockstep: bool = False, registers: dict[int, str] | None = None,
                  eeprom: Path | None = None) -> StsRig:
    """A rig in `directory`: STS3215s (catalog sts3215, bam m1, a small pendulum each) at `ids` on bus 'sts'."""
    head = rig_head(name)
    cmd = re.search(r'command = "([^"]+)"', head).group(1)
    port = str(directory / f"tty-{name}")
    text = head + f"[loop]\nmlockall = false\nlockstep = {str(lockstep).lower()}\nintegrator = \"bam\"\n"
    text += f'[[buses]]\nname = "sts"\nprotocol = "feetech"\nport = "{port}"\nbaud = {baud}\n' \
            f"fast = {str(fast).lower()}\n"
    if eeprom is not None:
        text += f'eeprom = "{eeprom}"\n'
    for k, sid in enumerate(ids):
        text += (f'[[actuators]]\njoint = "j{k}"\ncatalog = "sts3215"\nmodel = "m1"\n'
                 f'load = {{ mass = 0.1, length = 0.1 }}\nbus = "sts"\nid = {sid}\n')
        if registers and sid in registers:
            text += f"registers = {{ {registers[sid]} }}\n"
    path = directory / f"{name}.toml"
    path.write_text(text)
    return StsRig(path, port, cmd, lockstep)


class ScsSlackPort(SlackTimeout, scs.PortHandler):
    """scservo_sdk's PortHandler waiting 300 ms longer per packet than its own ~34 ms (tests/drivers/sdk_ports)."""

    slack_ms = 300.0


class StsLauncher(BusLauncher):
    banner = re.compile(r"servo-hil: feetech bus 'sts' at (\S+) \(IDs ([0-9, ]+?), (\d+) bit/s")
    daemon_type = BusDaemon


@pytest.fixture(scope="module")
def module_launcher(tmp_path_factory):
    launcher = StsLauncher(tmp_path_factory.mktemp("sts"))
    yield launcher
    launcher.finish()
