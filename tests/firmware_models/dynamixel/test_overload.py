"""Overload Error from a spent i²t budget, offline: a locked MX-64(2.0) in PWM mode (Operating Mode 16) draws more
than the kernel's peak current; the peak flows while the budget (i_peak² − i_cont²)·peak_time lasts, then the
current is held to the continuous limit and Hardware Error Status bit 5 (Overload) latches (e-manual
§Hardware Error Status(70)). Shutdown (63) decides whether the torque goes off; the alert bit (Protocol 2.0
§Status Packet) and the error stay until a reboot (e-manual §Shutdown(63)).

Expected values: the budget's closed form (MuJoCo DC motor model §1.1: the peak for peak_time from a full
budget, when the continuous current is the saturation's), the e-manual's bits and units (Present Current 3.36 mA).
"""

from __future__ import annotations

import pytest

from firmware_models.dynamixel.control_table import load_model
from firmware_models.dynamixel.servo import DynamixelServo
from hil.joint import KernelJoint
from hil.kernel import Kernel, peak_spent
from hil.params.catalog import entry
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params
from tests.firmware_models.dynamixel.registers import read, write

DT = 1e-3
I_CONT, I_PEAK, T_PEAK = 1.0, 2.0, 0.5       # [A], [A], [s]: spent after 0.5 s at the peak
OVERLOAD, OVERHEATING = 0x20, 0x04           # e-manual §Hardware Error Status(70) bits 5, 2
CURRENT_UNIT_A = 3.36e-3                      # MX-64(2.0) Present Current (e-manual §Present Current(126))


def servo_locked(registers: dict[str, int] | None = None) -> DynamixelServo:
    p = kernel_params(entry("mx64").actuator(), LoadConfig(), EncoderConfig(), FaultConfig(), "euler")
    p.update(load_inertia=1e30, tau_max=p["kt"] * I_CONT, peak_current=I_PEAK, peak_time=T_PEAK)
    kernel = Kernel(1, DT)
    kernel.set_params(0, p)
    return DynamixelServo(load_model("mx64"), KernelJoint(kernel), {"ID": 1, **(registers or {})})






def drive_full_pwm(servo: DynamixelServo) -> None:
    assert write(servo, "Operating Mode", 16) == 0
    assert write(servo, "Torque Enable", 1) == 0
    assert write(servo, "Goal PWM", 885) == 0     # 96 % of 12 V on 2.3-3.6 Ω: well above the peak current


def run(servo: DynamixelServo, steps: int) -> None:
    """`steps` kernel steps, the firmware's housekeeping after each (what the bus server does between packets)."""
    for _ in range(steps):
        servo.joint.step()
        servo.housekeeping()


def test_peak_spent_is_the_budgets_closed_form():
    p = kernel_params(entry("mx64").actuator(), LoadConfig(), EncoderConfig(), FaultConfig(), "euler")
    p.update(tau_max=p["kt"] * I_CONT, peak_current=I_PEAK, peak_time=T_PEAK)
    budget = (I_PEAK**2 - I_CONT**2) * T_PEAK
    assert not peak_spent(p, budget * (1 - 1e-12))
    assert peak_spent(p, budget)
    assert not peak_spent(p | {"peak_current": 0.0}, 1e9), "no peak limit, nothing to spend"


def test_overload_latches_when_the_budget_is_spent_and_shutdown_turns_torque_off():
    servo = servo_locked()
    assert read(servo, "Shutdown") == 0x34          # the default includes Overload (e-manual §Shutdown(63))
    drive_full_pwm(servo)
    run(servo, round(0.9 * T_PEAK / DT))
    assert read(servo, "Hardware Error Status") == 0 and not servo.alert
    assert read(servo, "Present Current") == round(I_PEAK / CURRENT_UNIT_A)
    run(servo, round(0.1 * T_PEAK / DT) + 2)
    assert read(servo, "Hardware Error Status") == OVERLOAD
    assert servo.alert, "the alert bit of every status packet"
    assert read(servo, "Torque Enable") == 0
    servo.joint.step(2)
    assert read(servo, "Present Current") == 0 and read(servo, "Present PWM") == 0
    write(servo, "Torque Enable", 1)
    assert read(servo, "Torque Enable") == 0, "torque on refused until a reboot"


def test_budget_spent_time_matches_the_closed_form():
    """The error comes within a step of (i_peak² − i_cont²)·peak_time / (i_peak² − i_cont²) = peak_time."""
    servo = servo_locked()
    drive_full_pwm(servo)
    k = 0
    while not read(servo, "Hardware Error Status"):
        run(servo, 1)
        k += 1
        assert k < 2 * T_PEAK / DT, "no overload within twice the peak time"
    assert abs(k * DT - T_PEAK) <= 2 * DT


def test_without_overload_in_shutdown_the_torque_stays_on_at_the_continuous_current():
    servo = servo_locked({"Shutdown": OVERHEATING})
    drive_full_pwm(servo)
    run(servo, round(1.2 * T_PEAK / DT))
    assert read(servo, "Hardware Error Status") == OVERLOAD and servo.alert
    assert read(servo, "Torque Enable") == 1
    assert read(servo, "Present Current") == round(I_CONT / CURRENT_UNIT_A)
    run(servo, 200)
    assert read(servo, "Hardware Error Status") == OVERLOAD, "latched while it lasts"


@pytest.mark.parametrize("shutdown", [0x34, OVERHEATING])
def test_only_a_reboot_clears_it(shutdown):
    servo = servo_locked({"Shutdown": shutdown})
    drive_full_pwm(servo)
    run(servo, round(1.2 * T_PEAK / DT))
    assert read(servo, "Hardware Error Status") == OVERLOAD
    assert write(servo, "Goal PWM", 0) == 0
    run(servo, 100)
    assert read(servo, "Hardware Error Status") == OVERLOAD, "latched after the load is gone"
    assert servo.reboot().error == 0
    servo.joint.step()
    assert read(servo, "Hardware Error Status") == 0 and not servo.alert
    assert write(servo, "Torque Enable", 1) == 0 and read(servo, "Torque Enable") == 1
