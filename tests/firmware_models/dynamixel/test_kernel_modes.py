"""The Operating Mode register selects what the kernel's Dynamixel law regulates (servo.py KERNEL_MODES):
every mode a model lists maps, and in PWM mode the duty applied is Goal PWM itself (e-manual, Operating
Mode 16: Present PWM follows Goal PWM, no position or current loop), whatever the shaft's position."""

from __future__ import annotations

import pytest

from firmware_models.dynamixel.control_table import load_model, model_names
from firmware_models.dynamixel.servo import KERNEL_MODES, DynamixelServo
from hil.joint import KernelJoint
from hil.kernel import DXL_MODES, Kernel
from hil.params.catalog import entry
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params
from tests.firmware_models.dynamixel.registers import read
from tests.firmware_models.dynamixel.registers import write_ok as write


def servo_of(model: str) -> DynamixelServo:
    kernel = Kernel(1, 1e-3)
    kernel.set_params(0, kernel_params(entry(model).actuator(), LoadConfig(mass=0.3, length=0.1),
                                       EncoderConfig(), FaultConfig(), "euler"))
    return DynamixelServo(load_model(model), KernelJoint(kernel), {"ID": 1})






@pytest.mark.parametrize("model", model_names())
def test_every_operating_mode_maps_to_a_kernel_mode(model):
    spec = load_model(model)
    modes = spec.operating_modes
    assert modes <= KERNEL_MODES.keys()
    laws = set(DXL_MODES.values())
    if not spec.has("Goal Current"):   # XL430: no current sensor, no current modes (e-manual §Operating Mode(11))
        laws -= {DXL_MODES["current"], DXL_MODES["current_position"]}
    assert {KERNEL_MODES[m] for m in modes} == laws   # each law the kernel has is reachable


@pytest.mark.parametrize("model", ["xm430_w350", "xh540_w270", "mx64"])
def test_pwm_mode_applies_goal_pwm(model):
    servo = servo_of(model)
    write(servo, "Operating Mode", 16)
    write(servo, "Torque Enable", 1)
    assert servo.joint.params()["dxl_mode"] == DXL_MODES["pwm"]
    write(servo, "Goal PWM", 300)
    servo.joint.step(5)
    assert read(servo, "Present PWM") == 300
    write(servo, "Goal PWM", -120)
    servo.joint.step(5)
    assert read(servo, "Present PWM") == -120
