"""Firmware behaviour through the real SDK: Reboot, hardware-error latching, operating modes and their side effects.

A lock-step fast daemon for the module (the tests step the physics themselves). After each test: injected
faults cleared, rig `reset`, every servo rebooted. Expected values: the e-manual control tables (items cited by name).
"""

from __future__ import annotations

import statistics

import dynamixel_sdk as sdk
import pytest

from .conftest import (
    ALERT,
    IDS,
    JOINT,
    MODEL,
    A,
    describe,
    write_dxl_rig,
)

OK = sdk.COMM_SUCCESS
TIMEOUT = sdk.COMM_RX_TIMEOUT
# Position P Gain (84) defaults: MX-64/MX-106 850, XM430 800 (e-manual control tables); XL330-M288 400
# (its e-manual page)
P_GAIN_DEFAULT = {1: 850, 2: 850, 3: 800, 4: 400}
CURRENT_LIMIT_DEFAULT = {1: 1941, 2: 2047, 3: 1193, 4: 1750}
MAX_VOLTAGE_LIMIT = {1: 160, 2: 160, 3: 160, 4: 70}     # 0.1 V; XL330: 7.0 V
# Shutdown (63) defaults: 0x34 (e-manual §Shutdown(63)); the XL330-M288 page gives 53 (0x35: Input Voltage Error
# shuts it down too)
SHUTDOWN_DEFAULT = {1: 0x34, 2: 0x34, 3: 0x34, 4: 0x35}


@pytest.fixture(scope="module")
def daemon(module_launcher):
    return module_launcher.start(write_dxl_rig(module_launcher.dir, "sdk-firmware", fast=True, lockstep=True))


@pytest.fixture(autouse=True)
def clean(daemon, dxl):
    yield
    assert daemon.alive, daemon.stderr()
    for i in IDS:   # bus faults and kernel faults injected by a test
        for fault in ("supply_sag", "overheat"):
            daemon.command("clear_fault", actuator=JOINT[i], fault=fault)
    daemon.ok("reset")
    daemon.step(1)
    for i in IDS:
        dxl.reboot(i)
        if dxl.read(i, A.OPERATING_MODE) != 3:       # the mode tests leave theirs (EEPROM): undo
            dxl.write(i, A.OPERATING_MODE, 3)
        assert dxl.read(i, A.RETURN_DELAY) == 250, f"ID {i}: the test left Return Delay Time changed"
        assert dxl.read(i, A.OPERATING_MODE) == 3
        assert dxl.read(i, A.HW_ERROR) == 0


# ------------------------------------------------------------------------------------------------ 6. reboot
@pytest.mark.parametrize("dxl_id", IDS)
def test_reboot_resets_ram_keeps_eeprom(dxl, dxl_id):
    dxl.write(dxl_id, A.RETURN_DELAY, 100)              # EEPROM (torque still off)
    dxl.write(dxl_id, A.POSITION_P, 1000)
    dxl.write(dxl_id, A.LED, 1)
    dxl.write(dxl_id, A.PROFILE_VELOCITY, 123)
    dxl.write(dxl_id, A.TORQUE_ENABLE, 1)
    assert dxl.read(dxl_id, A.TORQUE_ENABLE) == 1
    try:
        dxl.reboot(dxl_id)
        assert dxl.read(dxl_id, A.TORQUE_ENABLE) == 0
        assert dxl.read(dxl_id, A.LED) == 0
        assert dxl.read(dxl_id, A.POSITION_P) == P_GAIN_DEFAULT[dxl_id]
        assert dxl.read(dxl_id, A.PROFILE_VELOCITY) == 0
        assert dxl.read(dxl_id, A.RETURN_DELAY) == 100, "EEPROM survives a reboot"
        assert dxl.ping(dxl_id)[:2] == (MODEL[dxl_id], OK)
    finally:
        dxl.write(dxl_id, A.TORQUE_ENABLE, 0)
        dxl.write(dxl_id, A.RETURN_DELAY, 250)


@pytest.mark.parametrize("dxl_id", IDS)
def test_input_voltage_error_latched_until_reboot(daemon, dxl, dxl_id):
    """Input Voltage Error (bit 0): the bit and the alert are set; torque stays on unless bit 0 is in Shutdown
    (e-manual §Shutdown(63)); the error stays latched after the voltage is back, and a reboot clears it."""
    joint = JOINT[dxl_id]
    shutdown = dxl.read(dxl_id, A.SHUTDOWN)
    assert shutdown == SHUTDOWN_DEFAULT[dxl_id]
    dxl.write(dxl_id, A.TORQUE_ENABLE, 1)
    high_v = MAX_VOLTAGE_LIMIT[dxl_id] / 10 + 2.0
    daemon.ok("inject_fault", actuator=joint, fault="supply_sag", args={"voltage_v": high_v})
    daemon.step(1)
    data, comm, err = dxl.try_read(dxl_id, A.HW_ERROR)
    assert comm == OK
    assert data == [0x01], "Input Voltage Error"
    assert err == ALERT, f"the alert bit in every status packet: {describe(dxl.ph, comm, err)}"
    assert dxl.try_read(dxl_id, A.PRESENT_POSITION)[2] == ALERT
    assert dxl.try_read(dxl_id, A.TORQUE_ENABLE)[0] == [0 if shutdown & 0x01 else 1]
    _, comm, err = dxl.ping(dxl_id)
    assert (comm, err) == (OK, ALERT)
    daemon.ok("clear_fault", actuator=joint, fault="supply_sag")
    daemon.step(1)
    assert dxl.try_read(dxl_id, A.HW_ERROR)[::2] == ([0x01], ALERT), "latched until reboot"
    dxl.reboot(dxl_id)
    data, comm, err = dxl.try_read(dxl_id, A.HW_ERROR)
    assert (data, comm, err) == ([0], OK, 0)
    assert dxl.read(dxl_id, A.TORQUE_ENABLE) == 0


# ------------------------------------------------------------------------------------------------ 8. operating modes
@pytest.mark.parametrize("dxl_id", IDS)
def test_mode_switch_side_effects(dxl, dxl_id):
    """A mode switch zeroes Profile Velocity/Acceleration and sets Goal PWM = PWM Limit and Goal Current =
    Current Limit (e-manual §Operating Mode(11))."""
    try:
        dxl.write(dxl_id, A.PWM_LIMIT, 700)
        dxl.write(dxl_id, A.CURRENT_LIMIT, 900)
        for mode in (1, 0, 16, 4, 3):
            dxl.write(dxl_id, A.PROFILE_VELOCITY, 100)
            dxl.write(dxl_id, A.PROFILE_ACCELERATION, 50)
            dxl.write(dxl_id, A.GOAL_PWM, 300)
            dxl.write(dxl_id, A.GOAL_CURRENT, 200)
            dxl.write(dxl_id, A.OPERATING_MODE, mode)
            got = {n: dxl.read(dxl_id, item, signed=True) for n, item in (
                ("pv", A.PROFILE_VELOCITY), ("pa", A.PROFILE_ACCELERATION), ("pwm", A.GOAL_PWM),
                ("cur", A.GOAL_CURRENT))}
            assert got == {"pv": 0, "pa": 0, "pwm": 700, "cur": 900}, f"after switching to mode {mode}"
    finally:
        dxl.write(dxl_id, A.OPERATING_MODE, 3)
        dxl.write(dxl_id, A.PWM_LIMIT, 885)
        dxl.write(dxl_id, A.CURRENT_LIMIT, CURRENT_LIMIT_DEFAULT[dxl_id])


def test_writing_the_same_mode_is_no_switch(dxl):
    dxl.write(3, A.PROFILE_VELOCITY, 100)
    dxl.write(3, A.OPERATING_MODE, 3)
    assert dxl.read(3, A.PROFILE_VELOCITY) == 100


def test_velocity_mode_reaches_goal_velocity(daemon, dxl):
    for i in IDS:
        dxl.write(i, A.OPERATING_MODE, 1)
        dxl.write(i, A.TORQUE_ENABLE, 1)
        dxl.write(i, A.GOAL_VELOCITY, 100)         # 22.9 rpm: below every model's Velocity Limit
    samples = {i: [] for i in IDS}
    daemon.step(1000)
    for _ in range(20):
        daemon.step(100)
        for i in IDS:
            samples[i].append(dxl.read(i, A.PRESENT_VELOCITY, signed=True))
    for i in IDS:
        assert abs(statistics.mean(samples[i]) - 100) <= 10, (i, samples[i])
        assert all(60 <= v <= 140 for v in samples[i]), (i, samples[i])   # the pendulum's gravity load ripples it
        assert dxl.read(i, A.MOVING) == 1
        assert dxl.read(i, A.VELOCITY_TRAJECTORY, signed=True) == 100      # ends at Goal Velocity
    for i in IDS:
        dxl.write(i, A.GOAL_VELOCITY, -100)
    daemon.step(1500)
    for i in IDS:
        v = [dxl.read(i, A.PRESENT_VELOCITY, signed=True) for _ in range(1)]
        assert -140 <= v[0] <= -60, (i, v)


def test_pwm_mode_goal_pwm_reaches_the_inverter(daemon, dxl):
    for i in IDS:
        dxl.write(i, A.OPERATING_MODE, 16)
        dxl.write(i, A.TORQUE_ENABLE, 1)
        dxl.write(i, A.GOAL_PWM, 200)
    daemon.step(20)     # the motor side first crosses the gear's backlash (catalog: 15–20 arcmin) on its own
    for i in IDS:
        assert dxl.read(i, A.PRESENT_PWM, signed=True) == 200
        assert dxl.read(i, A.PRESENT_VELOCITY, signed=True) > 0
    for i in IDS:
        dxl.write(i, A.GOAL_PWM, -150)
    daemon.step(5)
    for i in IDS:
        assert dxl.read(i, A.PRESENT_PWM, signed=True) == -150


def test_current_mode_holds_goal_current(daemon, dxl):
    """Goal Current below what lifts the pendulum: it settles where gravity balances the torque, at that current."""
    goal = {1: 50, 2: 50, 3: 30, 4: 60}   # 0.17 A, 0.17 A, 0.08 A, 0.06 A
    for i in IDS:
        dxl.write(i, A.OPERATING_MODE, 0)
        dxl.write(i, A.TORQUE_ENABLE, 1)
        dxl.write(i, A.GOAL_CURRENT, goal[i])
    daemon.step(10_000)                   # the XM430's lightly damped swing takes ~9 s to settle
    for i in IDS:
        cur = dxl.read(i, A.PRESENT_CURRENT, signed=True)
        assert abs(cur - goal[i]) <= max(2, 0.05 * goal[i]), (i, cur)
        assert abs(dxl.read(i, A.PRESENT_VELOCITY, signed=True)) <= 3, i
        assert dxl.read(i, A.PRESENT_POSITION, signed=True) != 2048, "the torque lifted it off the bottom"
    for i in IDS:
        dxl.write(i, A.GOAL_CURRENT, -goal[i])
    daemon.step(12_000)
    for i in IDS:
        cur = dxl.read(i, A.PRESENT_CURRENT, signed=True)
        assert abs(cur + goal[i]) <= max(2, 0.05 * goal[i]), (i, cur)
