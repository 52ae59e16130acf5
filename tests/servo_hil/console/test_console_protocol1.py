"""The console's register grid for Dynamixel Protocol 1.0 servos (an AX-12A and an MX-64 with its 1.0 firmware)
against a real daemon: rows as the control tables give them, and edits that take the servo's own Write path, checked
with dynamixel-sdk's PacketHandler(1.0) on the same bus. Expected values come from the e-manuals
(config/dynamixel/protocol1/*.toml cite them) and docs/dynamixel-protocol1.md, never from the code under test."""

from __future__ import annotations

import time

import pytest

from tests.servo_hil.console.conftest import serial_rig
from tests.servo_hil.console.test_console_api import fetch


@pytest.fixture(scope="module")
def p1(tmp_path_factory):
    with serial_rig(tmp_path_factory, "dynamixel1") as rig:
        yield rig


def _rows(url: str) -> dict[str, dict]:
    status, table = fetch(url)
    assert status == 200, table
    return {r["name"]: r for r in table["rows"]}


def _write(url: str, name: str, value) -> dict:
    status, reply = fetch(url + "/write", {"name": name, "value": value})
    assert status == 200 and reply.pop("ok"), reply
    return reply


def test_the_grid_lists_the_control_table(p1):
    status, table = fetch(p1.url + "api/servo/ax12a")
    assert status == 200 and table["kind"] == "dynamixel1" and table["id"] == 1
    assert (table["model"], table["goal_item"], table["operating_mode"]) == ("AX-12A", "Goal Position", "joint")
    rows = {r["name"]: r for r in table["rows"]}
    assert rows["Model Number"]["value"] == 12 and not rows["Model Number"]["writable"]      # AX-12A e-manual
    assert (rows["CW Angle Limit"]["address"], rows["CW Angle Limit"]["size"]) == (6, 2)
    assert rows["Shutdown"]["area"] == "EEPROM" and rows["Torque Enable"]["area"] == "RAM"   # RAM from 24
    assert rows["Present Voltage"]["si"] == pytest.approx(rows["Present Voltage"]["value"] * 0.1)
    assert table["hardware_error"] == 0 and table["status_text"] == ""
    mx = fetch(p1.url + "api/servo/mx64")[1]
    model_number = {r["name"]: r for r in mx["rows"]}["Model Number"]["value"]
    assert (mx["model"], mx["id"], model_number) == ("MX-64(1.0)", 2, 310)                 # MX-64 e-manual (1.0)
    overview = fetch(p1.url + "api/overview")[1]
    assert {a["joint"]: a["table"] for a in overview["actuators"]} == {"ax12a": "dynamixel1", "mx64": "dynamixel1"}


def test_edits_take_the_servos_write_path(p1):
    url = p1.url + "api/servo/mx64"
    assert _write(url, "Goal Position", 2148) == {"error": 0, "error_text": "", "alert": False, "status_text": ""}
    assert p1.read_word(2, 30) == 2148                        # the bus serves what the console wrote
    assert fetch(url)[1]["torque"] == 1                       # a goal write turns the torque on (docs)
    # the goal item follows the operation type: both angle limits 0 is wheel mode, Torque Ctrl Mode Enable torque
    # mode (MX-64 e-manual §CW/CCW Angle Limit, §Torque Ctrl Mode Enable)
    _write(url, "Torque Ctrl Mode Enable", 1)
    assert fetch(url)[1]["goal_item"] == "Goal Torque"
    _write(url, "Torque Ctrl Mode Enable", 0)
    _write(url, "CW Angle Limit", 0)
    _write(url, "CCW Angle Limit", 0)
    assert fetch(url)[1]["goal_item"] == "Moving Speed"
    _write(url, "CCW Angle Limit", 4095)
    assert fetch(url)[1]["goal_item"] == "Goal Position"


def test_errors_are_the_error_bits_the_servo_sends(p1):
    url = p1.url + "api/servo/ax12a"
    assert _write(url, "CCW Angle Limit", 800)["error"] == 0
    # a goal beyond the angle limits: Angle Limit Error (bit 1), the goal kept (e-manual §Goal Position)
    assert _write(url, "Goal Position", 900) == {"error": 2, "error_text": "Angle Limit Error", "alert": False,
                                                 "status_text": ""}
    assert p1.read_word(1, 30) == 900
    # a read-only item, or a value outside its range: Range Error (bit 3, Protocol 1.0 §Status Packet)
    assert _write(url, "Present Position", 10)["error_text"] == "Range Error"
    assert _write(url, "Temperature Limit", 200)["error"] == 8 and _rows(url)["Temperature Limit"]["value"] == 70
    _write(url, "Goal Position", 512)
    _write(url, "CCW Angle Limit", 1023)


def test_reboot_is_a_power_cycle_and_factory_reset_resets_the_id(p1):
    url = p1.url + "api/servo/mx64"
    assert _write(url, "Lock", 1)["error"] == 0
    assert _write(url, "Return Delay Time", 0)["error_text"] == "Range Error"   # Lock = 1: EEPROM refused
    assert fetch(url + "/reboot", {})[1]["error"] == 0
    rows = _rows(url)
    assert (rows["Lock"]["value"], rows["Torque Enable"]["value"]) == (0, 0)  # RAM at power-up values
    assert _write(url, "Return Delay Time", 0)["error"] == 0
    delay, comm, _ = p1.packets.read1ByteTxRx(p1.port, 2, 5)   # Return Delay Time
    assert (comm, delay) == (0, 0)
    # Factory Reset (0x06) resets the whole table, ID included (Protocol 1.0 §Factory Reset): ID 1, 57 142 bit/s
    assert fetch(url + "/factory_reset", {})[1]["error"] == 0
    rows = _rows(url)
    assert (rows["ID"]["value"], rows["Baud Rate"]["value"], rows["Return Delay Time"]["value"]) == (1, 34, 250)


def test_bad_edits_are_one_line_errors(p1):
    url = p1.url + "api/servo/ax12a"
    for name, value, says in (("No Such Item", 1, "no item 'No Such Item'"),
                              ("Goal Position", 70000, "does not fit"),
                              ("Torque Enable", True, "integer"),
                              ("Torque Enable", 1.5, "integer")):
        status, reply = fetch(url + "/write", {"name": name, "value": value})
        assert status == 400 and says in reply["error"] and "\n" not in reply["error"], (name, value, reply)
    status, reply = fetch(url + "/spin", {})
    assert status == 400 and "unknown servo action 'spin'" in reply["error"]


def test_the_bus_monitor_names_protocol_1_instructions(p1):
    """The monitor decodes the FF FF frame's instructions by Protocol 1.0's set (e-manual Protocol 1.0
    §Instruction Packet): a READ by name, and 0x10, which 1.0 lacks (2.0's CLEAR), by its number."""
    assert p1.read_word(1, 36) >= 0                                # a READ of Present Position
    p1.port.ser.write(bytes([0xFF, 0xFF, 0x01, 0x02, 0x10, 0xEC]))  # ID 1, instruction 0x10, checksum ~0x13
    p1.port.ser.flush()
    for _ in range(50):
        bus = fetch(p1.url + "api/bus")[1]["buses"][0]
        names = [row["instruction"] for row in bus["last"]]
        if "0x10" in names:
            break
        time.sleep(0.05)
    assert "0x10" in names and "READ" in names and "CLEAR" not in names, names
    time.sleep(0.05)
    p1.port.ser.reset_input_buffer()       # the servo's Instruction Error status, unread by the SDK
