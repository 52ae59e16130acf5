"""The STS3215 firmware model: control-table data, Lock, sign-magnitude items, goal limits, Homing_Offset,
REG WRITE / ACTION, and the protections. Expected values from the Feetech STS memory table and LeRobot's
tables.py (addresses, sign bits), never from the code under test."""

from __future__ import annotations

import pytest

from firmware_models.feetech.control_table import decode_sign, encode_sign, load_model
from tests.firmware_models.feetech.servo_kit import read, run, sts_servo, write

# addresses (LeRobot src/lerobot/motors/feetech/tables.py STS_SMS_SERIES_CONTROL_TABLE)
MODEL_NUMBER, ID, BAUD, RETURN_DELAY, MIN_POS, MAX_POS = 3, 5, 6, 7, 9, 11
P_COEF, HOMING, MODE, OVERLOAD_TORQUE, PROTECTION_TIME = 21, 31, 33, 36, 35
TORQUE_ENABLE, ACCELERATION, GOAL_POSITION, GOAL_TIME, GOAL_VELOCITY, TORQUE_LIMIT = 40, 41, 42, 44, 46, 48
LOCK, PRESENT_POSITION, PRESENT_VELOCITY, PRESENT_LOAD, STATUS, MOVING = 55, 56, 58, 60, 65, 66
UNLOADING, ASYNC_FLAG = 19, 64


def test_model_data():
    spec = load_model("sts3215")
    assert spec.model_number == 777
    assert spec.byte_order == "little"
    # Feetech's codes (memory table, sms_sts.py), not LeRobot's 5..7
    assert spec.baud_rates[5] == 76_800 and spec.baud_rates[6] == 57_600 and spec.baud_rates[7] == 38_400
    assert spec.item("Homing_Offset").sign_bit == 11
    assert spec.item("Present_Load").sign_bit == 10
    assert spec.item("Goal_Position").sign_bit == 15 and spec.item("Goal_Velocity").sign_bit == 15
    assert spec.item("Present_Position").access == "R"


@pytest.mark.parametrize("bit,value,raw", [(15, -100, 0x8064), (15, 100, 100), (11, -5, 0x805), (10, -1, 0x401),
                                           (15, 0, 0)])
def test_sign_magnitude_round_trip(bit, value, raw):
    assert encode_sign(value, bit) == raw
    assert decode_sign(raw, bit) == value


def test_power_up_values():
    s = sts_servo()
    assert read(s, MODEL_NUMBER, 2) == 777
    assert read(s, ID, 1) == 1
    assert read(s, RETURN_DELAY, 1) == 250
    assert read(s, LOCK, 1) == 1
    assert read(s, TORQUE_LIMIT, 2) == 1000
    assert read(s, PRESENT_POSITION, 2, 15) == 2048     # the pendulum hangs at 0 rad, the middle of the range
    assert s.return_delay_s == pytest.approx(500e-6)


def test_write_to_a_read_only_item_is_ignored_without_error():
    s = sts_servo()
    assert write(s, MODEL_NUMBER, 1234, 2) == 0
    assert read(s, MODEL_NUMBER, 2) == 777


def test_read_past_the_table_is_not_answered():
    s = sts_servo()
    size = load_model("sts3215").size
    assert s.read(size - 1, 2) is None
    assert s.read(250, 4) is None
    assert s.read(size - 1, 1) is not None


def test_lock_decides_whether_eeprom_survives_a_power_cycle():
    s = sts_servo()
    # Lock = 1 (power-up): the write takes effect but is not saved
    write(s, P_COEF, 20, 1)
    assert read(s, P_COEF, 1) == 20
    s.reboot()
    assert read(s, P_COEF, 1) == 32
    # Lock = 0: saved
    write(s, LOCK, 0, 1)
    write(s, P_COEF, 16, 1)
    write(s, LOCK, 1, 1)
    s.reboot()
    assert read(s, P_COEF, 1) == 16
    assert read(s, LOCK, 1) == 1        # RAM: back at its power-up value


def test_id_change_takes_effect_at_once():
    s = sts_servo()
    write(s, ID, 7, 1)
    assert s.id == 7


def test_goal_moves_the_shaft_and_present_items_follow():
    s = sts_servo()
    write(s, TORQUE_ENABLE, 1, 1)
    write(s, GOAL_POSITION, 2048 + 400, 2, 15)
    run(s, 0.05)
    assert read(s, MOVING, 1) == 1
    assert read(s, PRESENT_VELOCITY, 2, 15) > 0
    assert read(s, PRESENT_LOAD, 2, 10) > 0
    run(s, 1.5)
    assert abs(read(s, PRESENT_POSITION, 2, 15) - 2448) <= 15
    assert read(s, MOVING, 1) == 0


def test_position_limits_clamp_the_goal():
    s = sts_servo({"Max_Position_Limit": 2148})
    write(s, TORQUE_ENABLE, 1, 1)
    write(s, GOAL_POSITION, 3000, 2, 15)
    run(s, 1.5)
    assert read(s, GOAL_POSITION, 2, 15) == 3000            # the register keeps what was written
    assert abs(read(s, PRESENT_POSITION, 2, 15) - 2148) <= 10


def test_present_position_is_actual_minus_homing_offset():
    s = sts_servo()
    write(s, HOMING, -100, 2, 11)
    assert read(s, HOMING, 2, 11) == -100
    assert read(s, PRESENT_POSITION, 2, 15) == 2048 + 100
    write(s, HOMING, 300, 2, 11)
    assert read(s, PRESENT_POSITION, 2, 15) == 2048 - 300
    # the goal is in the same frame: the shaft goes to actual = goal + offset
    write(s, TORQUE_ENABLE, 1, 1)
    write(s, GOAL_POSITION, 2048 - 300, 2, 15)
    run(s, 1.0)
    assert abs(s.joint.read_state()["theta"]) < 0.02


def test_torque_enable_128_makes_the_present_position_2048():
    s = sts_servo()
    write(s, HOMING, 500, 2, 11)
    assert read(s, PRESENT_POSITION, 2, 15) == 1548
    write(s, TORQUE_ENABLE, 128, 1)
    assert read(s, PRESENT_POSITION, 2, 15) == 2048
    assert read(s, HOMING, 2, 11) == 0


def test_reg_write_waits_for_action():
    s = sts_servo()
    s.reg_write(TORQUE_LIMIT, (300).to_bytes(2, "little"))
    assert read(s, ASYNC_FLAG, 1) == 1
    assert read(s, TORQUE_LIMIT, 2) == 1000
    s.action()
    assert read(s, TORQUE_LIMIT, 2) == 300
    assert read(s, ASYNC_FLAG, 1) == 0


def test_goal_velocity_sign_magnitude_in_wheel_mode():
    s = sts_servo()
    write(s, MODE, 1, 1)
    write(s, TORQUE_ENABLE, 1, 1)
    write(s, GOAL_VELOCITY, -1000, 2, 15)
    assert read(s, GOAL_VELOCITY, 2, 15) == -1000
    run(s, 0.5)
    assert read(s, PRESENT_VELOCITY, 2, 15) < -300


def test_overload_sets_the_error_bit_and_unloads():
    # a goal the pendulum cannot reach with a tenth of the torque: the load stays at the limit
    s = sts_servo({"Overload_Torque": 5, "Protection_Time": 20}, )
    write(s, TORQUE_LIMIT, 60, 2)
    write(s, TORQUE_ENABLE, 1, 1)
    write(s, GOAL_POSITION, 3072, 2, 15)
    run(s, 0.1)
    assert s.ping()[0] & 32 == 0                # not yet: Protection_Time is 200 ms
    run(s, 0.4)
    assert s.ping()[0] & 32                     # overload bit (feetech-servo-sdk ERRBIT_OVERLOAD)
    assert read(s, STATUS, 1) & 32
    assert read(s, TORQUE_ENABLE, 1) == 0       # Unloading_Condition has bit 5 by default
    write(s, TORQUE_ENABLE, 1, 1)               # enabling again clears it
    assert s.ping()[0] == 0


def test_voltage_outside_the_limits_sets_bit_0():
    s = sts_servo({"Max_Voltage_Limit": 60})    # the catalog's supply is 7.4 V
    s.housekeeping()
    assert s.ping()[0] & 1


def _peak_speed(registers: dict[str, int], writes: list[tuple[int, int, int, int | None]], seconds: float) -> float:
    """The largest |Present_Velocity| [step/s] over a 400-step move after `writes`."""
    s = sts_servo(registers)
    for address, value, size, bit in writes:
        write(s, address, value, size, bit)
    write(s, TORQUE_ENABLE, 1, 1)
    write(s, GOAL_POSITION, 2048 + 1000, 2, 15)
    peak = 0
    for _ in range(round(seconds / 0.01)):
        run(s, 0.01)
        peak = max(peak, abs(read(s, PRESENT_VELOCITY, 2, 15)))
    return peak


def test_goal_velocity_limits_the_move_and_0_is_the_maximum():
    slow = _peak_speed({}, [(GOAL_VELOCITY, 500, 2, 15)], 1.0)
    fast = _peak_speed({}, [(GOAL_VELOCITY, 0, 2, 15)], 1.0)
    assert 400 <= slow <= 650          # the setpoint runs at 500 step/s, the shaft follows it
    assert fast > 1.5 * slow


def test_acceleration_slows_the_start_and_maximum_acceleration_caps_it():
    def reached(writes):
        s = sts_servo()
        for address, value, size, bit in writes:
            write(s, address, value, size, bit)
        write(s, TORQUE_ENABLE, 1, 1)
        write(s, GOAL_POSITION, 2048 + 1000, 2, 15)
        run(s, 0.2)
        return read(s, PRESENT_POSITION, 2, 15) - 2048
    free = reached([])
    gentle = reached([(ACCELERATION, 10, 1, None)])                 # 1000 step/s²: ≈ 20 steps in 0.2 s
    capped = reached([(ACCELERATION, 254, 1, None), (85, 10, 1, None)])   # Maximum_Acceleration 10
    assert gentle < 60 < free
    assert abs(capped - gentle) <= 10


def test_pwm_mode_drives_goal_time_as_a_duty_with_bit_10_for_direction():
    s = sts_servo()
    write(s, MODE, 2, 1)
    write(s, TORQUE_ENABLE, 1, 1)
    write(s, GOAL_TIME, -500, 2, 10)
    run(s, 0.2)
    assert read(s, PRESENT_LOAD, 2, 10) == pytest.approx(-500, abs=5)
    assert read(s, PRESENT_VELOCITY, 2, 15) < 0


def test_over_current_sets_bit_3_after_its_protection_time():
    # a stalled shaft (a goal against a heavy pendulum) draws more than a low Protection_Current
    s = sts_servo({"Protection_Current": 20, "Over_Current_Protection_Time": 10, "Overload_Torque": 100})
    write(s, TORQUE_ENABLE, 1, 1)
    write(s, GOAL_POSITION, 3072, 2, 15)
    run(s, 0.3)
    assert s.ping()[0] & 8
    assert read(s, TORQUE_ENABLE, 1) == 0     # Unloading_Condition 44 has bit 3


def test_a_big_endian_scs_table_stores_the_high_byte_first():
    # SCS models store words high byte first (feetech-servo-sdk SCS_SETEND(1): SCS_MAKEWORD swaps the bytes)
    from dataclasses import replace

    from firmware_models.feetech.control_table import ControlTable

    spec = replace(load_model("sts3215"), byte_order="big")
    t = ControlTable(spec)
    t.set("Goal_Position", -0x0123)
    assert bytes(t.data[42:44]) == bytes([0x81, 0x23])
    assert t.get("Goal_Position") == -0x0123


def test_the_saved_eeprom_is_what_lock_let_through():
    s = sts_servo()
    seen = []
    s.on_eeprom_change = lambda servo: seen.append(servo.eeprom_items()["P_Coefficient"])
    write(s, P_COEF, 20, 1)                 # Lock = 1: in effect, not saved
    assert seen == [] and s.eeprom_items()["P_Coefficient"] == 32
    write(s, LOCK, 0, 1)
    write(s, P_COEF, 18, 1)
    assert seen == [18]
    write(s, LOCK, 1, 1)
    write(s, HOMING, 300, 2, 11)            # locked again: not saved
    write(s, P_COEF, 25, 1)
    assert seen == [18] and s.eeprom_items()["Homing_Offset"] == 0
    write(s, TORQUE_ENABLE, 128, 1)         # a calibration saves the offset alone (0 at the hanging rest)...
    write(s, HOMING, 300, 2, 11)
    write(s, TORQUE_ENABLE, 128, 1)         # ...and again after the offset moved: saved, P's unsaved 25 is not
    assert s.eeprom_items()["Homing_Offset"] == read(s, HOMING, 2, 11) == 0
    assert s.eeprom_items()["P_Coefficient"] == 18
