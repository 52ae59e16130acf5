"""Protocol 1.0 Dynamixel firmware (firmware_models/dynamixel/protocol1/) on an offline kernel: the control tables
as the e-manual prints them, and what the firmware does with a write. Expected values come from the ROBOTIS e-manual
(AX-12A, MX-64, MX-106 Protocol 1.0 pages, Protocol 1.0 §Status Packet), never from the code under test."""

from __future__ import annotations

import math
import struct

import pytest

from firmware_models.dynamixel.protocol1.servo import Dynamixel1Servo
from firmware_models.dynamixel.protocol1.table import baud_value, load_model, model_names
from hil.joint import KernelJoint
from hil.kernel import Kernel
from hil.params.catalog import entry
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

# Protocol 1.0 §Status Packet, Error
INPUT_VOLTAGE, ANGLE_LIMIT, OVERHEATING, RANGE, INSTRUCTION = 0x01, 0x02, 0x04, 0x08, 0x40
# e-manual control tables: (address, size)
MODEL, ID, BAUD, CW_LIMIT, CCW_LIMIT, MIN_VOLT, MAX_TORQUE, SHUTDOWN = (0, 2), (3, 1), (4, 1), (6, 2), (8, 2), \
    (12, 1), (14, 2), (18, 1)
MULTI_OFFSET, DIVIDER = (20, 2), (22, 1)
TORQUE_ENABLE, CW_SLOPE, CCW_SLOPE, P_GAIN = (24, 1), (28, 1), (29, 1), (28, 1)
GOAL, SPEED, TORQUE_LIMIT, PRESENT, PRESENT_SPEED, PRESENT_LOAD = (30, 2), (32, 2), (34, 2), (36, 2), (38, 2), (40, 2)
REGISTERED, LOCK, CURRENT, TORQUE_MODE, GOAL_TORQUE = (44, 1), (47, 1), (68, 2), (70, 1), (71, 2)
AX_DEG, MX_DEG = 300 / 1024, 360 / 4096       # position units [deg] (AX-12A §Present Position; MX §Goal Position)


def servo(catalog: str, **load) -> tuple[Dynamixel1Servo, KernelJoint]:
    kernel = Kernel(1, 1e-3)
    kernel.set_params(0, kernel_params(entry(catalog).actuator(), LoadConfig(**load), EncoderConfig(), FaultConfig(),
                                       "euler"))
    joint = KernelJoint(kernel)
    return Dynamixel1Servo(load_model(catalog), joint, {"ID": 1}), joint


def write(s: Dynamixel1Servo, item: tuple[int, int], value: int) -> int:
    """Write `value` to `item`; the status error byte."""
    address, size = item
    return s.write(address, value.to_bytes(size, "little", signed=value < 0)).error


def read(s: Dynamixel1Servo, item: tuple[int, int], signed: bool = False) -> int:
    reply = s.read(*item)
    assert reply.error & RANGE == 0, reply
    return int.from_bytes(reply.params, "little", signed=signed)


# ------------------------------------------------------------------------------------------ tables
@pytest.mark.parametrize(("name", "model_number", "baud_default", "size"),
                         [("ax12a", 12, 1, 50), ("mx64", 310, 34, 74), ("mx106", 320, 34, 74)])
def test_table_as_the_e_manual_prints_it(name, model_number, baud_default, size):
    s, _ = servo(name)
    assert s.ping() == (0, b"")                       # Protocol 1.0 §Ping: an empty status packet
    assert read(s, MODEL) == model_number
    assert read(s, BAUD) == baud_default
    assert read(s, (5, 1)) == 250                      # Return Delay Time 250 = 500 µs
    assert read(s, TORQUE_LIMIT) == read(s, MAX_TORQUE) == 1023
    assert s.spec.size == size
    assert s.read(size - 1, 2).error & RANGE           # past the table's end


def test_the_three_models_have_tables():
    assert set(model_names()) >= {"ax12a", "mx64", "mx106"}


@pytest.mark.parametrize(("name", "bps", "value"), [
    ("ax12a", 1_000_000, 1), ("ax12a", 57_600, 34), ("ax12a", 115_200, 16), ("ax12a", 9_600, 207),
    ("ax12a", 4_000_000, None), ("mx64", 3_000_000, 252), ("mx64", 2_250_000, 250), ("mx106", 4_500_000, None)])
def test_baud_rate_values(name, bps, value):
    # e-manual §Baud Rate: 2 000 000 / (value + 1), within 3 %; MX 250..252 = 2.25, 2.5, 3 Mbps
    assert baud_value(load_model(name), bps) == value


# ------------------------------------------------------------------------------------------ joint mode
def test_ax_joint_move_reaches_the_goal_and_reports_speed():
    s, j = servo("ax12a")
    assert write(s, TORQUE_ENABLE, 1) == 0
    assert write(s, GOAL, 700) == 0
    j.step(60)
    assert 0 < read(s, PRESENT_SPEED) < 1024         # moving CCW: bit 10 clear
    assert read(s, (46, 1)) == 1
    j.step(1500)
    assert abs(read(s, PRESENT) - 700) <= 3
    theta = j.read_state()["theta"]
    assert theta == pytest.approx(math.radians((700 - 512) * AX_DEG), abs=math.radians(3 * AX_DEG))


def test_goal_write_turns_torque_on():
    s, j = servo("ax12a")
    assert read(s, TORQUE_ENABLE) == 0
    assert write(s, GOAL, 600) == 0
    assert read(s, TORQUE_ENABLE) == 1
    j.step(1500)
    assert abs(read(s, PRESENT) - 600) <= 3


def test_moving_speed_limits_the_joint_speed():
    # MX §Moving Speed: 0.114 rpm per unit; 100 units = 11.4 rpm = 1.194 rad/s
    s, j = servo("mx64")
    write(s, SPEED, 100)
    write(s, GOAL, 2048 + 1024)
    j.step(400)
    assert j.read_state()["omega"] == pytest.approx(100 * 0.114 * 2 * math.pi / 60, rel=0.05)


def test_goal_outside_the_angle_limits_is_an_angle_limit_error_and_clamped():
    s, j = servo("ax12a")
    assert write(s, CW_LIMIT, 400) == 0
    assert write(s, GOAL, 300) == ANGLE_LIMIT         # Protocol 1.0 §Status Packet bit 1
    assert read(s, GOAL) == 300                      # kept in the table
    j.step(2000)
    assert abs(read(s, PRESENT) - 400) <= 3          # the servo stops at the limit


def test_compliance_slope_sets_the_stiffness():
    # e-manual §Compliance Slope: the higher the value, the more flexibility; 128 is 4 × softer than 32 (the
    # output reaches its maximum at 4 × the error beyond the margin, from Punch), and 128..254 all mean 128
    deflection = []
    for slope in (32, 130):
        s, j = servo("ax12a")
        write(s, CW_SLOPE, slope)
        write(s, CCW_SLOPE, slope)
        write(s, TORQUE_ENABLE, 1)
        j.step(3000, external_torque=0.3)             # 1/5 of the 1.5 N·m stall torque
        deflection.append(abs(j.read_state()["theta"]))
    margin = 1 * 300 / 1024 * math.pi / 180          # the CW/CCW Compliance Margin at power-up, 1 unit [rad]
    assert deflection[1] - margin == pytest.approx(4 * (deflection[0] - margin), rel=0.1)


def test_mx_p_gain_is_the_position_gain():
    s, _ = servo("mx64")
    kpp32 = s._kernel_params()["dxl_kpp"]
    write(s, P_GAIN, 64)
    assert s._kernel_params()["dxl_kpp"] == pytest.approx(2 * kpp32)


# ------------------------------------------------------------------------------------------ other modes
def test_ax_wheel_mode_is_output_control():
    # e-manual §Moving Speed, wheel mode: 0.1 % of the maximum output, bit 10 = CW
    s, j = servo("ax12a")
    write(s, CW_LIMIT, 0)
    write(s, CCW_LIMIT, 0)
    assert write(s, SPEED, 1024 + 512) == 0
    j.step(1500)
    st = j.read_state()
    assert st["duty"] == pytest.approx(-512 / 1023, rel=1e-6)
    assert st["omega"] < -1.0
    assert read(s, PRESENT_SPEED) == 1024 + 512     # wheel mode Present Speed: the output, 0.1 %
    assert read(s, PRESENT_LOAD) >> 10 == 1           # CW


def test_mx_wheel_mode_is_speed_control():
    s, j = servo("mx64")
    write(s, CW_LIMIT, 0)
    write(s, CCW_LIMIT, 0)
    write(s, SPEED, 300)
    j.step(1500)
    assert j.read_state()["omega"] == pytest.approx(300 * 0.114 * 2 * math.pi / 60, rel=0.03)
    assert abs(read(s, PRESENT_SPEED) - 300) <= 10


def test_mx_torque_control_mode_drives_goal_torque_current():
    # MX §Goal Torque: 4.5 mA per unit, bit 10 = CW; §Current: 2048 + I / 4.5 mA
    s, j = servo("mx64")
    write(s, TORQUE_MODE, 1)
    write(s, GOAL_TORQUE, 1024 + 200)
    write(s, TORQUE_ENABLE, 1)
    j.step(5)
    assert j.read_state()["i_out"] == pytest.approx(-0.9, rel=0.02)
    assert read(s, CURRENT) == pytest.approx(2048 - 200, abs=5)


def test_multi_turn_offset_and_divider():
    # MX §Resolution Divider: Present Position = Real Position / divider + Multi Turn Offset (multi-turn mode)
    s, j = servo("mx64")
    write(s, CW_LIMIT, 4095)
    write(s, CCW_LIMIT, 4095)
    write(s, DIVIDER, 2)
    write(s, MULTI_OFFSET, 1000)
    j.kernel.set_state(0, theta=2 * math.pi * 3)      # three turns CCW
    assert read(s, PRESENT, signed=True) == pytest.approx((2048 + 3 * 4096) / 2 + 1000, abs=1)


def test_reverse_mode_mx106():
    s, j = servo("mx106")
    write(s, (10, 1), 1)                              # Drive Mode bit 0: reverse
    write(s, GOAL, 2048 + 512)
    j.step(1500)
    assert j.read_state()["theta"] == pytest.approx(-math.radians(512 * MX_DEG), abs=0.02)
    assert abs(read(s, PRESENT) - (2048 + 512)) <= 8


# ------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize(("item", "value"), [(PRESENT, 5), ((10, 1), 1), (ID, 254), (CW_SLOPE, 255)])
def test_bad_writes_are_range_errors_and_change_nothing(item, value):
    s, _ = servo("ax12a")
    before = bytes(s.table.data)
    assert write(s, item, value) & RANGE
    assert bytes(s.table.data) == before


def test_half_an_item_is_a_range_error():
    s, _ = servo("ax12a")
    assert s.write(30, b"\x10").error & RANGE


def test_lock_keeps_eeprom_until_power_off():
    # e-manual §Lock(47): 1 = EEPROM cannot be modified; back to 0 only by a power cycle
    s, _ = servo("ax12a")
    assert write(s, LOCK, 1) == 0
    assert write(s, ID, 5) & RANGE
    assert write(s, LOCK, 0) & RANGE
    assert write(s, GOAL, 600) == 0                  # RAM still writable
    assert read(s, ID) == 1
    s.power_cycle()
    assert read(s, LOCK) == 0
    assert write(s, ID, 5) == 0


def test_reg_write_waits_for_action_and_action_alone_is_an_instruction_error():
    s, _ = servo("ax12a")
    assert s.action().error == INSTRUCTION
    assert s.reg_write(GOAL[0], struct.pack("<H", 600)).error == 0
    assert read(s, REGISTERED) == 1 and read(s, GOAL) != 600
    assert s.action().error == 0
    assert read(s, REGISTERED) == 0 and read(s, GOAL) == 600


def test_factory_reset_answers_from_the_old_id_then_resets():
    s, _ = servo("ax12a")
    write(s, ID, 7)
    write(s, CW_LIMIT, 100)
    assert s.id == 7
    assert s.reset().error == 0
    assert s.id == 7                                  # the reply still comes from ID 7
    s.housekeeping()
    assert s.id == 1 and read(s, CW_LIMIT) == 0


# ------------------------------------------------------------------------------------------ errors
def test_input_voltage_error_in_every_reply_and_alarm_shutdown():
    # §Min/Max Voltage Limit: outside → Input Voltage Error bit; with that bit in Shutdown, Torque Limit → 0
    s, j = servo("ax12a")
    write(s, SHUTDOWN, 36 | INPUT_VOLTAGE)
    write(s, MIN_VOLT, 120)                           # 12.0 V; the catalog supply is 11.1 V
    assert s.ping().error == INPUT_VOLTAGE
    assert read(s, TORQUE_LIMIT) == 0
    assert j.params()["max_duty"] == 0.0
    write(s, MIN_VOLT, 60)
    assert s.ping().error == 0
    assert write(s, TORQUE_LIMIT, 1023) == 0          # the motor runs again (§Torque Limit note)
    assert j.params()["max_duty"] > 0


def test_overheating_error_and_shutdown():
    s, _ = servo("ax12a")
    write(s, (11, 1), 20)                              # Temperature Limit 20 °C, below the 25 °C ambient
    assert s.ping().error & OVERHEATING
    assert read(s, TORQUE_LIMIT) == 0                  # Overheating is in the default Shutdown (36)


def test_overload_error_shuts_down_until_torque_limit_is_written():
    # §Alarm LED/Shutdown: Overload (bit 5) is in the default Shutdown (36): output 0 % by Torque Limit 0; the
    # motor runs again once Torque Limit is written non-zero (§Torque Limit note). A labouring servo: goal far
    # CCW, 1.2 N·m against it (80 % of the 1.5 N·m stall torque), longer than the 1 s overload time
    s, j = servo("ax12a")
    write(s, GOAL, 1000)
    j.step(1500, external_torque=-1.2)
    s.housekeeping()
    assert s.ping().error & 0x20
    assert read(s, TORQUE_LIMIT) == 0 and j.params()["max_duty"] == 0.0
    assert write(s, TORQUE_LIMIT, 1023) == 0
    assert j.params()["max_duty"] > 0 and s.ping().error == 0
