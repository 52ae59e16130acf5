"""Present items computed in C (firmware_models/dynamixel/present.pyx) from the kernel state, read through a servo on an
offline kernel. Expected values from the e-manual units (control tables, §Present Position(132), §Present
Velocity(128)): 4096 pulses per turn with 0 rad at 2048, Present Velocity in 0.229 rev/min, Realtime Tick in ms modulo
32768, registers that saturate at their width."""

from __future__ import annotations

import math

import pytest

from firmware_models.dynamixel.control_table import load_model
from firmware_models.dynamixel.servo import DynamixelServo
from hil.joint import KernelJoint
from hil.kernel import Kernel
from hil.params.catalog import entry
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

PRESENT_VELOCITY, PRESENT_POSITION, REALTIME_TICK = (128, 4), (132, 4), (120, 2)
DRIVE_MODE, HOMING_OFFSET = 10, 20


@pytest.fixture
def servo():
    kernel = Kernel(1, 1e-3)
    kernel.set_params(0, kernel_params(entry("xm430_w350").actuator(), LoadConfig(mass=0.3, length=0.1),
                                       EncoderConfig(), FaultConfig(), "euler"))
    return DynamixelServo(load_model("xm430_w350"), KernelJoint(kernel), {"ID": 1, "Baud Rate": 3})


def register(servo: DynamixelServo, item: tuple[int, int]) -> int:
    reply = servo.read(*item)
    assert reply.error == 0
    return int.from_bytes(reply.params, "little", signed=True)


def put(servo: DynamixelServo, theta: float, omega: float) -> None:
    """The shaft at `theta` [rad], `omega` [rad/s], before any step (the encoder reads the shaft itself)."""
    servo.joint.kernel.set_state(0, theta=theta, omega=omega)


def test_position_and_velocity_units(servo):
    put(servo, 1.0, 0.5)
    assert register(servo, PRESENT_POSITION) == 2048 + 652          # 1 rad = 651.9 pulses
    assert register(servo, PRESENT_VELOCITY) == 21                  # 0.5 rad/s = 20.85 × 0.229 rev/min
    put(servo, -2.5 * math.pi, -0.5)                                  # -1.25 turns: -5120 pulses
    assert register(servo, PRESENT_POSITION) == 2048 - 5120
    assert register(servo, PRESENT_VELOCITY) == -21


def test_reverse_mode_and_homing_offset(servo):
    assert servo.write(DRIVE_MODE, bytes([0x01])).error == 0          # reverse: the count runs the other way
    assert servo.write(HOMING_OFFSET, (100).to_bytes(4, "little")).error == 0
    put(servo, 1.0, 0.5)
    assert register(servo, PRESENT_POSITION) == 2048 - 652 + 100
    assert register(servo, PRESENT_VELOCITY) == -21


def test_registers_saturate_instead_of_wrapping(servo):
    put(servo, 1e7, -1e9)                                             # 6.5e9 pulses, -4e10 units
    assert register(servo, PRESENT_POSITION) == 2**31 - 1
    assert register(servo, PRESENT_VELOCITY) == -2**31


def test_realtime_tick_counts_milliseconds_modulo_32768(servo):
    kernel = servo.joint.kernel
    for _ in range(1500):
        kernel.step(0.0)
    assert register(servo, REALTIME_TICK) == 1500
    for _ in range(32768):
        kernel.step(0.0)
    assert register(servo, REALTIME_TICK) == 1500
