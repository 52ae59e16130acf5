"""A Dynamixel Protocol 1.0 rig for the driver tests: `servo-hil run` serving an AX-12A (ID 1), an MX-64 (ID 2) and an
MX-106 (ID 3) in their 1.0 firmware on bus 'ax', and the facts the tests check against (ROBOTIS e-manual AX-12A,
MX-64, MX-106 Protocol 1.0 pages; Protocol 1.0 §Status Packet)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.daemon_process import BusDaemon, BusLauncher
from tests.drivers import sdk_ports
from tests.servo_hil.daemon import free_port

AX, MX64, MX106 = 1, 2, 3
MODEL_NUMBER = {AX: 12, MX64: 310, MX106: 320}          # Model Number (0) initial values
SERVOS = (("ax12a", "ax12a", AX, "load = { mass = 0.1, length = 0.05 }\n"),
          ("mx64", "mx64", MX64, 'model = "m6"\nload = { mass = 0.5, length = 0.1 }\n'),
          ("mx106", "mx106", MX106, 'model = "m6"\nload = { mass = 0.8, length = 0.1 }\n'))

# control-table items (address, size): the same on the three models at these addresses
MODEL, ID, RETURN_DELAY, CW_LIMIT, CCW_LIMIT = (0, 2), (3, 1), (5, 1), (6, 2), (8, 2)
STATUS_RETURN_LEVEL, TORQUE_ENABLE, LED = (16, 1), (24, 1), (25, 1)
CW_SLOPE, P_GAIN = (28, 1), (28, 1)            # AX Compliance Slope, MX P Gain share address 28
GOAL, MOVING_SPEED, TORQUE_LIMIT, PRESENT = (30, 2), (32, 2), (34, 2), (36, 2)

# status error byte (Protocol 1.0 §Status Packet, Error)
ANGLE_LIMIT, RANGE, CHECKSUM, INSTRUCTION = 0x02, 0x08, 0x10, 0x40


@dataclass
class Dxl1Rig:
    path: Path
    port: str      # the pty link (--port)
    cmd: str       # ZeroMQ command endpoint


def write_rig(directory: Path, name: str, *, fast: bool = True, baud: int = 1_000_000,
              eeprom: Path | None = None, lockstep: bool = False) -> Dxl1Rig:
    """The three servos on bus 'ax' (dynamixel1), ZeroMQ on free loopback ports, MQTT off; `eeprom`: the bus's
    EEPROM state file; `lockstep`: the loop advances only on `step` commands."""
    cmd = f"tcp://127.0.0.1:{free_port()}"
    parts = [f'name = "{name}"\n[loop]\nrate_hz = 1000\nmlockall = false\nlockstep = {str(lockstep).lower()}\n',
             f'[zmq]\npub = "tcp://127.0.0.1:{free_port()}"\ncommand = "{cmd}"\n[mqtt]\nenabled = false\n',
             f'[[buses]]\nname = "ax"\nprotocol = "dynamixel1"\nbaud = {baud}\nfast = {str(fast).lower()}\n'
             + (f'eeprom = "{eeprom}"\n' if eeprom else "")]
    for joint, catalog, dxl_id, extra in SERVOS:
        parts.append(f'\n[[actuators]]\njoint = "{joint}"\ncatalog = "{catalog}"\n{extra}bus = "ax"\nid = {dxl_id}\n')
    path = directory / f"{name}.toml"
    path.write_text("".join(parts))
    return Dxl1Rig(path, str(directory / f"tty-{name}"), cmd)


class Dxl1Launcher(BusLauncher):
    """`servo-hil run RIG --port PATH`, ready at its `dynamixel1 bus 'ax' at PATH (IDs ...)` line."""

    banner = re.compile(r"servo-hil: dynamixel1 bus 'ax' at (\S+) \(IDs ([0-9, ]+?), ")
    daemon_type = BusDaemon

    def argv(self, rig: Dxl1Rig) -> list[str]:
        return [*super().argv(rig), "--port", rig.port]


class SlackPortHandler(sdk_ports.SlackPortHandler):
    """dynamixel-sdk's PortHandler with 200 ms of slack per packet unless told otherwise (tests/drivers/sdk_ports)."""

    def __init__(self, path: str, slack_ms: float = 200.0):
        super().__init__(path, slack_ms)
