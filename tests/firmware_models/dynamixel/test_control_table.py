"""Control-table data (SDK maps + config/dynamixel/*.toml) and the engine's read/write rules.

Numbers checked against: the e-manual control tables of each model (defaults), Protocol 2.0 §Status Packet
(error numbers), §Operating Mode(11) and §Bus Watchdog(98) (mode switch, Bus Watchdog).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from firmware_models.dynamixel.control_table import (
    Access,
    ControlTable,
    ControlTableError,
    ErrorCode,
    load_model,
    model_names,
    sdk_map,
)
from hil.params import catalog
from hil.params.config_file import ConfigError

MODELS = ["mx64", "mx106", "xm430_w350", "xh540_w270", "xl330_m288"]
X_LIKE = ["xm430_w350", "xh540_w270", "xl330_m288"]
ACCESS, LENGTH, RANGE, LIMIT = ErrorCode.ACCESS, ErrorCode.DATA_LENGTH, ErrorCode.DATA_RANGE, ErrorCode.DATA_LIMIT


def u(value: int, size: int) -> bytes:
    """Little-endian two's-complement bytes, as on the wire."""
    return value.to_bytes(size, "little", signed=value < 0)


def error_of(fn, *args) -> int:
    """The Protocol 2.0 error number `fn(*args)` raises (fails the test if it raises none)."""
    with pytest.raises(ControlTableError) as exc:
        fn(*args)
    return exc.value.code


@pytest.fixture(params=MODELS)
def table(request) -> ControlTable:
    return ControlTable(load_model(request.param))


def fresh(name: str) -> ControlTable:
    return ControlTable(load_model(name))


# ------------------------------------------------------------------------------------------ data


TITLES = {"mx64": "MX-64(2.0)", "mx106": "MX-106(2.0)", "xm430_w350": "XM430-W350", "xh540_w270": "XH540-W270",
          "xl330_m288": "XL330-M288-T"}


def test_every_model_loads_and_is_listed():
    assert set(MODELS) <= set(model_names())
    for name in MODELS:
        spec = load_model(name)
        assert (spec.name, spec.title) == (name, TITLES[name])
        assert load_model(name) is spec  # cached
        t = ControlTable(spec)
        assert len(t.data) == spec.size == spec.items[-1].address + spec.items[-1].size


@pytest.mark.parametrize(("name", "number", "sdk"), [
    ("mx64", 311, "mx_64.model"), ("mx106", 321, "mx_106.model"), ("xm430_w350", 1020, "xm430_w350.model"),
    ("xh540_w270", 1100, "xh540_w270.model"), ("xl330_m288", 1200, "xl330_m288_fw52.model")])
def test_model_numbers_and_maps(name, number, sdk):
    spec = load_model(name)
    assert spec.model_number == number
    assert spec.sdk_model == sdk
    t = ControlTable(spec)
    assert t.read(0, 2) == number.to_bytes(2, "little")
    assert t.get("Firmware Version") == spec.firmware_version
    assert t.read(6, 1)[0] == spec.firmware_version


@pytest.mark.parametrize("name", MODELS)
def test_every_sdk_row_is_in_the_table(name):
    spec = load_model(name)
    rename = {"BUS Watchdog": "Bus Watchdog"}
    rows = sdk_map(spec.sdk_model)
    assert len(rows) > 50
    for addr, size, row in rows:
        if re.search(r"Indirect (Address|Data) (Write|Read)$", row):
            continue  # the SDK's aliases
        item = spec.item(rename.get(row, row))
        assert (item.address, item.size) == (addr, size), row
        assert spec.item_at(addr) is item


def test_xl330_indirect_layout_follows_the_emanual_not_the_plain_sdk_map():
    spec = load_model("xl330_m288")
    assert spec.size == 228  # RAM ends at 227
    assert spec.item("Indirect Address 20").address == 206
    assert spec.item("Indirect Data 1").address == 208
    assert spec.item("Indirect Data 20").address == 227
    assert not spec.has("Indirect Data 21") and not spec.has("Indirect Address 29")
    assert spec.item("Indirect Address 1").default == 208 and spec.item("Indirect Address 1").max == 227
    # the plain map (which dynamixel.model names) disagrees, which is why the TOML picks the _fw52 one
    plain = {row: addr for addr, _, row in sdk_map("xl330_m288.model")}
    assert plain["Indirect Data 1"] == 224


@pytest.mark.parametrize("name", ["mx64", "mx106", "xm430_w350", "xh540_w270"])
def test_56_indirect_slots_on_12v_models(name):
    spec = load_model(name)
    assert spec.size == 662
    for n, addr, data in [(1, 168, 224), (28, 222, 251), (29, 578, 634), (56, 632, 661)]:
        a, d = spec.item(f"Indirect Address {n}"), spec.item(f"Indirect Data {n}")
        assert (a.address, a.size, a.default, d.address, d.size) == (addr, 2, data, data, 1)
        assert (a.min, a.max) == (64, 661)
    assert spec.item_at(300) is None


# e-manual control tables of MX-64(2.0) / MX-106(2.0) / XM430-W350 / XH540-W270 / XL330-M288
DEFAULTS = {
    #                   Vel.Lim CurLim PosP VelI  VelP  TempL MaxV MinV Shutdown
    "mx64":            (435, 1941, 850, 1920, 100, 80, 160, 95, 52),
    "mx106":           (360, 2047, 850, 1920, 100, 80, 160, 95, 52),
    "xm430_w350":      (200, 1193, 800, 1920, 100, 80, 160, 95, 52),
    "xh540_w270":      (167, 2047, 800, 1920, 100, 80, 160, 95, 52),
    "xl330_m288":      (445, 1750, 400, 1600, 180, 70, 70, 35, 53),
}
DEFAULT_NAMES = ("Velocity Limit", "Current Limit", "Position P Gain", "Velocity I Gain", "Velocity P Gain",
                 "Temperature Limit", "Max Voltage Limit", "Min Voltage Limit", "Shutdown")


@pytest.mark.parametrize("name", MODELS)
def test_key_defaults(name):
    t = fresh(name)
    for item, want in zip(DEFAULT_NAMES, DEFAULTS[name], strict=True):
        assert t.get(item) == want, item
        it = t.spec.item(item)
        assert t.read(it.address, it.size) == u(want, it.size), item
    common = {"ID": 1, "Baud Rate": 1, "Return Delay Time": 250, "Drive Mode": 0, "Operating Mode": 3,
              "Secondary(Shadow) ID": 255, "Protocol Type": 2, "Moving Threshold": 10, "PWM Limit": 885,
              "Max Position Limit": 4095, "Min Position Limit": 0, "Torque Enable": 0, "Status Return Level": 2,
              "Bus Watchdog": 0, "Profile Velocity": 0, "Profile Acceleration": 0, "Position D Gain": 0}
    for item, want in common.items():
        assert t.get(item) == want, item
    # Goal PWM / Goal Current start at their limits (the mode-switch rule, e-manual §Operating Mode(11))
    assert t.get("Goal PWM") == 885 and t.get("Goal Current") == DEFAULTS[name][1]


@pytest.mark.parametrize(("name", "amps"), [("mx64", 0.00336), ("mx106", 0.00336), ("xm430_w350", 0.00269),
                                            ("xh540_w270", 0.00269), ("xl330_m288", 0.001)])
def test_current_unit_per_model(name, amps):
    spec = load_model(name)
    for item in ("Current Limit", "Goal Current", "Present Current"):
        assert spec.item(item).si_per_unit == pytest.approx(amps)
    assert spec.item("Present Position").si_per_unit == pytest.approx(2 * 3.141592653589793 / 4096)
    assert spec.item("Present Velocity").si_per_unit == pytest.approx(0.229 * 2 * 3.141592653589793 / 60)
    t = ControlTable(spec)
    t.set("Present Current", -100)
    assert t.value_si("Present Current") == pytest.approx(-100 * amps)


def test_instructions_modes_drive_bits_baud_tables():
    fast = {0x8A, 0x9A, 0x20}
    for name in ("mx64", "mx106"):
        spec = load_model(name)
        assert not fast & spec.instructions
        assert {0x01, 0x02, 0x03, 0x10, 0x82, 0x83, 0x92, 0x93} <= spec.instructions
        assert spec.has("Acceleration Limit") and not spec.has("Startup Configuration")
        assert not spec.has("Backup Ready")
    for name in X_LIKE:
        spec = load_model(name)
        assert fast <= spec.instructions
        assert spec.item("Startup Configuration").address == 60
        assert spec.item("Backup Ready").address == 147 and spec.item("Backup Ready").access is Access.R
        assert not spec.has("Acceleration Limit")
    for spec in map(load_model, MODELS):
        assert spec.operating_modes == {0, 1, 3, 4, 5, 16}
    assert {n: load_model(n).drive_mode_mask for n in MODELS} == {
        "mx64": 0x05, "mx106": 0x07, "xm430_w350": 0x0D, "xh540_w270": 0x0F, "xl330_m288": 0x0D}
    assert load_model("xm430_w350").baud_rates[7] == 4_500_000
    assert dict(load_model("xl330_m288").baud_rates) == {
        0: 9600, 1: 57600, 2: 115200, 3: 1_000_000, 4: 2_000_000, 5: 3_000_000, 6: 4_000_000}
    assert load_model("xl330_m288").item("PWM Slope").default == 140
    assert load_model("xh540_w270").item("External Port Mode 1").default == 3


# ------------------------------------------------------------------------------------------ reads


def test_every_item_reads_back_its_default_encoding(table):
    for it in table.spec.items:
        raw = table.read(it.address, it.size)
        assert len(raw) == it.size
        if it.name.startswith("Indirect Data"):
            continue  # reads through its slot
        assert raw == it.default.to_bytes(it.size, "little", signed=it.signed), it.name
        assert table.get(it.name) == it.default


@pytest.mark.parametrize(("item", "value"), [("Homing Offset", -1000), ("Homing Offset", -1_044_479),
                                             ("Goal PWM", -885), ("Goal Velocity", -100), ("Goal Current", -1)])
def test_signed_write_read_round_trip(table, item, value):
    it = table.spec.item(item)
    assert it.signed
    assert table.write(it.address, u(value, it.size)) == [item]
    assert table.read(it.address, it.size) == u(value, it.size)
    assert table.get(item) == value


def test_signed_and_unsigned_present_items(table):
    table.set("Present Position", -123_456)
    table.set("Present Current", -5)
    table.set("Present PWM", -885)
    table.set("Present Input Voltage", 121)
    table.set("Hardware Error Status", 0x24)
    assert table.read(132, 4) == u(-123_456, 4)
    assert table.read(126, 2) == b"\xfb\xff"
    assert table.get("Present Current") == -5 and table.get("Present PWM") == -885
    assert table.get("Present Input Voltage") == 121 and table.get("Hardware Error Status") == 0x24
    with pytest.raises(ValueError):
        table.set("Present Current", 70000)


def test_read_spans_items_and_gaps(table):
    table.write(65, b"\x01")  # LED
    assert table.read(64, 7) == b"\x00\x01\x00\x00\x02\x00\x00"  # 66, 67 reserved read 0
    table.set("Present Velocity", -2)
    table.set("Present Position", 4000)
    assert table.read(128, 8) == u(-2, 4) + u(4000, 4)
    assert table.read(14, 6) == bytes(6)  # reserved gap in EEPROM


def test_read_outside_the_table_is_access_error(table):
    size = table.spec.size
    assert len(table.read(size - 1, 1)) == 1
    for addr, n in [(size, 1), (size - 2, 4), (-1, 1), (size + 100, 2)]:
        assert error_of(table.read, addr, n) == ACCESS


# ------------------------------------------------------------------------------------------ writes


def test_eeprom_lock(table):
    assert table.write(7, b"\x05") == ["ID"]
    assert table.write(64, b"\x01") == ["Torque Enable"]
    assert error_of(table.write, 7, b"\x06") == ACCESS
    assert error_of(table.write, 20, u(100, 4)) == ACCESS  # Homing Offset
    assert table.get("ID") == 5
    assert table.write(116, u(2000, 4)) == ["Goal Position"]  # RAM still writable
    assert table.write(64, b"\x00") == ["Torque Enable"]
    assert table.write(7, b"\x06") == ["ID"]


def test_access_errors(table):
    assert error_of(table.write, 132, u(1, 4)) == ACCESS         # Present Position is read-only
    assert error_of(table.write, 0, u(1, 2)) == ACCESS           # Model Number
    assert error_of(table.write, 69, b"\x01") == ACCESS          # Registered Instruction
    assert error_of(table.write, 66, b"\x00") == ACCESS          # reserved
    assert error_of(table.write, 64, b"\x01\x00\x00") == ACCESS  # runs into the reserved 66
    assert error_of(table.write, table.spec.size - 1, b"\x00\x00") == ACCESS
    assert error_of(table.write, table.spec.size, b"\x00") == ACCESS
    assert table.get("Torque Enable") == 0


def test_length_errors(table):
    assert error_of(table.write, 116, u(100, 2)) == LENGTH   # 2 bytes into the 4-byte Goal Position
    assert error_of(table.write, 117, u(100, 3)) == LENGTH   # starts inside it
    assert error_of(table.write, 100, b"\x00\x00\x00") == LENGTH  # Goal PWM + half of Goal Current
    assert error_of(table.write, 116, b"") == LENGTH
    assert table.get("Goal Position") == 0


def test_range_errors():
    t = fresh("xm430_w350")
    for addr, raw in [(11, b"\x02"), (11, b"\x11"), (8, b"\x08"), (10, b"\x02"), (31, b"\x65"), (64, b"\x02"),
                      (98, b"\x80"), (98, b"\xff"), (13, b"\x03"), (60, b"\x04"), (32, u(94, 2)), (7, b"\xfd"),
                      (84, u(16384, 2)), (168, u(63, 2)), (168, u(662, 2))]:
        assert error_of(t.write, addr, raw) == RANGE, (addr, raw)
    # an item bounded by a limit item has that limit as its range: beyond it is a Limit error, even past
    # the limit item's own maximum (e-manual §Goal PWM(100): range ±PWM Limit)
    for addr, raw in [(100, u(886, 2)), (102, u(1194, 2)), (104, u(1024, 4)), (116, u(1_048_576, 4))]:
        assert error_of(t.write, addr, raw) == LIMIT, (addr, raw)
    assert t.write(10, b"\x0d") == ["Drive Mode"]  # bits 0, 2, 3 are valid on X430
    assert fresh("mx106").write(10, b"\x02") == ["Drive Mode"]  # dual joint: MX-106 only
    assert error_of(fresh("mx64").write, 10, b"\x02") == RANGE
    assert error_of(fresh("mx64").write, 10, b"\x08") == RANGE  # torque-on-by-goal is X FW45+ only
    xl = fresh("xl330_m288")
    assert error_of(xl.write, 8, b"\x07") == RANGE    # no 4.5 Mbps
    assert error_of(xl.write, 13, b"\x01") == RANGE   # no Protocol 1.0
    assert xl.write(13, b"\x14") == ["Protocol Type"]  # 20 = S.BUS
    assert error_of(xl.write, 32, u(71, 2)) == RANGE   # 5 V servo
    assert error_of(xl.write, 168, u(228, 2)) == RANGE  # XL330 RAM ends at 227
    assert xl.write(168, u(227, 2)) == ["Indirect Address 1"]
    assert error_of(xl.write, 62, b"\x00") == RANGE    # PWM Slope 1..255
    assert t.get("Operating Mode") == 3 and t.get("Baud Rate") == 1


def test_limit_errors():
    t = fresh("xm430_w350")
    t.write(36, u(500, 2))                          # PWM Limit
    assert error_of(t.write, 100, u(501, 2)) == LIMIT
    assert error_of(t.write, 100, u(-501, 2)) == LIMIT
    assert t.write(100, u(-500, 2)) == ["Goal PWM"]
    t.write(38, u(300, 2))                          # Current Limit
    assert error_of(t.write, 102, u(301, 2)) == LIMIT
    assert error_of(t.write, 104, u(201, 4)) == LIMIT  # Velocity Limit 200
    assert t.write(104, u(-200, 4)) == ["Goal Velocity"]
    t.write(48, u(3000, 4))                         # Max Position Limit
    t.write(52, u(1000, 4))                         # Min Position Limit
    assert error_of(t.write, 116, u(3001, 4)) == LIMIT
    assert error_of(t.write, 116, u(999, 4)) == LIMIT
    assert t.write(116, u(3000, 4)) == ["Goal Position"]
    t.write(11, b"\x04")                            # Extended Position: no position limit, +-1,048,575
    assert t.write(116, u(-1_048_575, 4)) == ["Goal Position"]
    assert error_of(t.write, 116, u(-1_048_576, 4)) == RANGE
    mx = fresh("mx64")
    mx.write(40, u(100, 4))                         # Acceleration Limit bounds Profile Acceleration
    assert error_of(mx.write, 108, u(101, 4)) == LIMIT
    assert mx.write(108, u(100, 4)) == ["Profile Acceleration"]


def test_time_based_profile_range():
    t = fresh("mx64")
    t.write(40, u(10, 4))
    assert t.write(10, b"\x04") == ["Drive Mode"]   # time-based profile: ms, 0..32737, no Acceleration Limit
    assert t.write(108, u(5000, 4)) == ["Profile Acceleration"]
    assert error_of(t.write, 108, u(32738, 4)) == RANGE
    assert error_of(t.write, 112, u(32738, 4)) == RANGE
    t.write(10, b"\x00")
    assert error_of(t.write, 112, u(32768, 4)) == RANGE
    assert t.write(112, u(32767, 4)) == ["Profile Velocity"]


def test_error_precedence_access_length_range_limit():
    t = fresh("xm430_w350")
    t.write(36, u(100, 2))  # PWM Limit 100
    # Limit (Goal PWM 200) + Range (Profile Acceleration 40000) -> Range, whichever comes first
    assert error_of(t.write, 100, u(200, 2) + u(0, 2) + u(0, 4) + u(40000, 4)) == RANGE
    t.write(38, u(10, 2))
    assert error_of(t.write, 100, u(886, 2) + u(11, 2)) == LIMIT
    assert error_of(t.write, 100, u(200, 2) + u(0, 2)) == LIMIT
    # Range (Goal Current 5000) + Length (half of Profile Acceleration) -> Length
    assert error_of(t.write, 102, u(5000, 2) + u(0, 4) + u(0, 2)) == LENGTH
    # Length (half of Realtime Tick / starting inside Goal Position) + Access (Realtime Tick is read-only) -> Access
    assert error_of(t.write, 116, u(0, 4) + b"\x00") == ACCESS
    assert error_of(t.write, 118, u(0, 2) + u(0, 2)) == ACCESS


def test_multi_item_write_is_atomic_and_reports_changes_in_order():
    t = fresh("xh540_w270")
    before = bytes(t.data)
    # Goal PWM ok, Goal Current ok, Goal Velocity over Velocity Limit 167
    assert error_of(t.write, 100, u(10, 2) + u(20, 2) + u(168, 4)) == LIMIT
    assert bytes(t.data) == before
    assert t.write(100, u(10, 2) + u(2047, 2) + u(50, 4)) == ["Goal PWM", "Goal Velocity"]  # Current unchanged
    assert (t.get("Goal PWM"), t.get("Goal Current"), t.get("Goal Velocity")) == (10, 2047, 50)
    assert t.write(100, u(10, 2)) == []
    gains = u(1, 2) + u(2, 2) + u(3, 2) + u(4, 2) + u(5, 2)  # 76..85
    assert t.write(76, gains) == ["Velocity I Gain", "Velocity P Gain", "Position D Gain", "Position I Gain",
                                  "Position P Gain"]


# ------------------------------------------------------------------------------------------ indirect


def test_indirect_one_byte_item(table):
    d1 = table.spec.item("Indirect Data 1").address
    assert table.write(168, u(65, 2)) == ["Indirect Address 1"]  # LED
    assert table.indirect_target(1) == 65
    assert table.write(d1, b"\x01") == ["LED"]
    assert table.get("LED") == 1 and table.read(d1, 1) == b"\x01" and table.get("Indirect Data 1") == 1
    assert table.write(d1, b"\x01") == []
    assert error_of(table.write, d1, b"\x02") == RANGE  # LED's range applies


def test_indirect_four_byte_item_through_four_slots(table):
    """e-manual example 2: Goal Position through Indirect Data 2..5."""
    d2 = table.spec.item("Indirect Data 2").address
    assert table.write(170, u(116, 2) + u(117, 2) + u(118, 2) + u(119, 2)) == [
        "Indirect Address 2", "Indirect Address 3", "Indirect Address 4", "Indirect Address 5"]
    assert table.write(d2, u(1024, 4)) == ["Goal Position"]
    assert table.get("Goal Position") == 1024
    assert table.read(d2, 4) == u(1024, 4)
    assert error_of(table.write, d2, b"\x00") == LENGTH          # one byte of a 4-byte item
    assert error_of(table.write, d2, u(7, 2)) == LENGTH
    assert error_of(table.write, d2, u(4096, 4)) == LIMIT        # mode 3: Max Position Limit 4095
    assert table.get("Goal Position") == 1024
    table.set("Bus Watchdog", -1)
    assert error_of(table.write, d2, u(100, 4)) == RANGE        # watchdog rule applies through slots too
    table.set("Bus Watchdog", 0)
    # read-only target: reads work, writes are Access errors
    table.write(170, u(132, 2) + u(133, 2) + u(134, 2) + u(135, 2))
    table.set("Present Position", -70_000)
    assert table.read(d2, 4) == u(-70_000, 4)
    assert error_of(table.write, d2, u(0, 4)) == ACCESS


def test_indirect_mixed_packet_and_scattered_slots():
    t = fresh("xm430_w350")
    # slot 1 -> LED, slots 2..3 -> Goal PWM (2 bytes, reversed order), slot 4 -> Torque Enable
    t.write(168, u(65, 2) + u(101, 2) + u(100, 2) + u(64, 2))
    assert t.write(224, b"\x01" + u(300, 2)[::-1] + b"\x01") == ["Torque Enable", "LED", "Goal PWM"]
    assert (t.get("LED"), t.get("Goal PWM"), t.get("Torque Enable")) == (1, 300, 1)
    before = bytes(t.data)
    assert error_of(t.write, 224, b"\x00" + u(900, 2)[::-1] + b"\x00") == LIMIT  # atomic
    assert bytes(t.data) == before
    # a slot pointing at a gap: reads 0, writes are Access errors
    t.write(168, u(66, 2))
    assert t.read(224, 1) == b"\x00"
    assert error_of(t.write, 224, b"\x00") == ACCESS


def test_indirect_block_29_to_56_and_its_absence_on_xl330():
    t = fresh("xm430_w350")
    t.write(578, u(132, 2) + u(133, 2) + u(134, 2) + u(135, 2))  # Indirect Address 29..32
    t.set("Present Position", 123_456)
    assert t.read(634, 4) == u(123_456, 4)
    assert t.read(600, 40)[34:38] == u(123_456, 4)  # a read spanning the address block and the data slots
    xl = fresh("xl330_m288")
    assert error_of(xl.write, 578, u(132, 2)) == ACCESS
    xl.write(168, u(132, 2) + u(133, 2))
    xl.set("Present Position", 0x0102)
    assert xl.read(208, 2) == b"\x02\x01"


# ------------------------------------------------------------------------------------------ watchdog, resets, modes


def test_bus_watchdog_tripped_makes_goal_items_read_only(table):
    assert table.write(98, b"\x05") == ["Bus Watchdog"]
    table.set("Bus Watchdog", -1)
    assert table.get("Bus Watchdog") == -1 and table.read(98, 1) == b"\xff"
    for addr, raw in [(100, u(0, 2)), (102, u(0, 2)), (104, u(0, 4)), (116, u(100, 4))]:
        assert error_of(table.write, addr, raw) == RANGE
    assert table.write(112, u(10, 4)) == ["Profile Velocity"]  # not a Goal item
    assert table.write(98, b"\x00") == ["Bus Watchdog"]        # writing 0 clears the trip
    assert table.write(116, u(100, 4)) == ["Goal Position"]


def test_reset_ram_keeps_eeprom(table):
    table.write(7, b"\x09")
    table.write(20, u(-50, 4))
    table.write(65, b"\x01")
    table.write(84, u(1234, 2))
    table.write(168, u(65, 2))
    table.set("Present Position", 777)
    table.set("Hardware Error Status", 0x04)
    table.reset_ram()
    assert table.get("ID") == 9 and table.get("Homing Offset") == -50
    assert table.get("LED") == 0 and table.get("Hardware Error Status") == 0 and table.get("Present Position") == 0
    assert table.get("Position P Gain") == table.spec.item("Position P Gain").default
    assert table.indirect_target(1) == table.spec.item("Indirect Data 1").address
    assert table.data[64:] == bytearray(table._default[64:])


@pytest.mark.parametrize(("option", "id_kept", "baud_kept"), [(0xFF, False, False), (0x01, True, False),
                                                             (0x02, True, True)])
def test_factory_reset_options(table, option, id_kept, baud_kept):
    table.write(7, b"\x09")
    table.write(8, b"\x03")
    table.write(9, b"\x00")
    table.write(65, b"\x01")
    table.factory_reset(option)
    assert table.get("ID") == (9 if id_kept else 1)
    assert table.get("Baud Rate") == (3 if baud_kept else 1)
    assert table.get("Return Delay Time") == 250 and table.get("LED") == 0


def test_factory_reset_bad_option(table):
    assert error_of(table.factory_reset, 0x03) == RANGE


def test_mode_defaults():
    t = fresh("xm430_w350")
    t.write(36, u(500, 2))
    t.write(38, u(700, 2))
    d = t.mode_defaults(1)
    assert d == {"Velocity I Gain": 1920, "Velocity P Gain": 100, "Position D Gain": 0, "Position I Gain": 0,
                 "Position P Gain": 800, "Feedforward 2nd Gain": 0, "Feedforward 1st Gain": 0, "Goal PWM": 500,
                 "Goal Current": 700, "Profile Acceleration": 0, "Profile Velocity": 0}
    assert list(d) == sorted(d, key=lambda n: t.spec.item(n).address)
    d5 = t.mode_defaults(5)
    assert d5["PWM Limit"] == 885 and d5["Goal PWM"] == 885 and d5["Goal Current"] == 700
    xl = fresh("xl330_m288").mode_defaults(3)
    assert (xl["Position P Gain"], xl["Velocity I Gain"], xl["Velocity P Gain"]) == (400, 1600, 180)
    assert fresh("mx106").mode_defaults(4)["Position P Gain"] == 850
    with pytest.raises(ValueError):
        t.mode_defaults(2)


def test_item_lookup():
    spec = load_model("mx64")
    assert spec.item_at(133).name == "Present Position"
    assert spec.item_at(66) is None and spec.item_at(10_000) is None
    assert spec.item("Bus Watchdog").address == 98  # renamed from the SDK's "BUS Watchdog"
    with pytest.raises(KeyError, match="Startup Configuration"):
        spec.item("Startup Configuration")
    assert [it.address for it in spec.items] == sorted(it.address for it in spec.items)
    assert all(it.eeprom == (it.address < 64) for it in spec.items)


# ------------------------------------------------------------------------------------------ bad config


@pytest.fixture
def config_copy(tmp_path, monkeypatch) -> Path:
    dst = tmp_path / "config"
    shutil.copytree(catalog.config_dir(), dst)
    monkeypatch.setenv("SERVO_HIL_CONFIG", str(dst))
    return dst / "dynamixel" / "xm430_w350.toml"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(("old", "new", "key"), [
    ('"LED"                   = { access = "RW", default = 0, min = 0, max = 1 }',
     '"LED"                   = { access = "RW", default = 0, min = 0, max = 1, colour = 3 }', "items.LED.colour"),
    ('"LED"                   = { access = "RW", default = 0, min = 0, max = 1 }\n', "", "items.LED"),
    ('"ID"                    = { access = "RW", default = 1, min = 0, max = 252 }',
     '"ID"                    = { access = "RW", default = 300, min = 0, max = 252 }', "items.ID.default"),
    ('"LED"                   = { access = "RW"', '"Blink"                 = { access = "RW"', "items.Blink"),
    ('limit = "PWM Limit"', 'limit = "PWM Limt"', "items.Goal PWM.limit"),
    ('access = "RW", default = 0, min = 0, max = 1 }', 'access = "W", default = 0, min = 0, max = 1 }',
     "items.Torque Enable.access"),
    ("firmware_version = 48", 'firmware_version = "new"', "firmware_version"),
    ('sdk_model = "xm430_w350.model"', 'sdk_model = "xm430_w210.model"', "sdk_model"),
    ("data = 224 }", "data = 225 }", "indirect.blocks"),
])
def test_bad_toml_names_the_file_and_key(config_copy, old, new, key):
    _edit(config_copy, old, new)
    with pytest.raises(ConfigError) as exc:
        load_model("xm430_w350")
    msg = str(exc.value)
    assert str(config_copy) in msg
    assert f": {key}:" in msg or f": {key}." in msg, msg


def test_unknown_model_lists_known_ones():
    with pytest.raises(ConfigError, match="xm430_w350"):
        load_model("ax12")
