"""The Dynamixel firmware's C core (servo_core.pyx and the C files it uses) never calls its Python subclass: read from
the source, no name servo.py defines is reached through `self` there; and run through the bus, a goal write stays in
C while a Torque Enable write goes to servo.py's `write`, which acts on what changed."""

from __future__ import annotations

import ast
import re
import struct
from pathlib import Path

import pytest

from drivers.emulated.dynamixel.bus import DynamixelBus
from drivers.emulated.dynamixel.protocol import Instruction, Packet
from firmware_models.dynamixel.control_table import load_model
from firmware_models.dynamixel.servo import DynamixelServo
from hil.joint import KernelJoint
from hil.kernel import Kernel
from hil.params.catalog import entry
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

ROOT = Path(__file__).resolve().parents[3]
ROOM = ROOT / "firmware_models" / "dynamixel"
CORE_FILES = ("servo_core.pyx", "write_checks.pyx", "present.pyx", "joint_link.pyx")
TORQUE_ENABLE, GOAL_POSITION = 64, 116   # XM430 addresses (e-manual §Control Table)
_SELF_ATTRIBUTE = re.compile(r"\bself\.(\w+)")


def _python_methods() -> set[str]:
    """Names of the methods the Python subclass(es) of ServoCore define in servo.py."""
    tree = ast.parse((ROOM / "servo.py").read_text())
    names = set()
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id in ("ServoCore", "DynamixelServo")
                                                 for b in cls.bases):
            names |= {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
    return names


def test_servo_py_defines_the_methods_the_check_looks_for():
    names = _python_methods()
    assert {"write", "read", "housekeeping", "trip_watchdog", "_torque", "_kernel_params", "_cache"} <= names


@pytest.mark.parametrize("name", CORE_FILES)
def test_core_file_reaches_no_method_of_servo_py(name):
    source = (ROOM / name).read_text()
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())   # comments may name them
    called = set(_SELF_ATTRIBUTE.findall(re.sub(r'"""(.|\n)*?"""', "", code)))   # and docstrings
    assert called & _python_methods() == set(), f"{name} calls up into servo.py"


class CountingServo(DynamixelServo):
    """The real servo, counting the packets its Python `write` handles."""

    def __init__(self, *args, **kwargs):
        self.python_writes = 0
        super().__init__(*args, **kwargs)

    def write(self, address, data):
        self.python_writes += 1
        return super().write(address, data)


def _bus() -> tuple[DynamixelBus, CountingServo]:
    kernel = Kernel(1, 1e-3)
    kernel.set_params(0, kernel_params(entry("xm430_w350").actuator(), LoadConfig(), EncoderConfig(), FaultConfig(),
                                       "euler"))
    servo = CountingServo(load_model("xm430_w350"), KernelJoint(kernel), {"ID": 1})
    return DynamixelBus([servo]), servo


def _write(bus: DynamixelBus, address: int, data: bytes) -> int:
    params = struct.pack("<H", address) + data
    (tx,) = bus.handle(Packet(1, Instruction.WRITE, params, 10 + len(params)), None)
    return tx[0][8]   # the status packet's error byte


def test_goal_write_stays_in_c_and_torque_write_goes_to_python():
    bus, servo = _bus()
    assert _write(bus, TORQUE_ENABLE, b"\x01") == 0
    assert servo.python_writes == 1                        # a torque change: servo.py acts on it
    assert servo.joint.enable == 1.0
    goal = 2048 + 1024                                      # a quarter turn from the middle (4096 pulses/rev)
    assert _write(bus, GOAL_POSITION, goal.to_bytes(4, "little")) == 0
    assert servo.python_writes == 1                        # a new goal only: the C core did it all
    assert servo.joint.u == pytest.approx(servo._units.position_si(goal))   # the kernel goal [rad]
    sync = struct.pack("<HH", GOAL_POSITION, 4) + bytes([1]) + (goal + 100).to_bytes(4, "little")
    assert bus.handle(Packet(0xFE, Instruction.SYNC_WRITE, sync, 10 + len(sync)), None) == []
    assert servo.python_writes == 1
    assert servo.joint.u == pytest.approx(servo._units.position_si(goal + 100))
    assert _write(bus, TORQUE_ENABLE, b"\x00") == 0
    assert servo.python_writes == 2 and servo.joint.enable == 0.0
