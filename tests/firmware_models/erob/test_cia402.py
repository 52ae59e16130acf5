"""The eRob CiA 402 drive (firmware_models/cia402.py) and its object dictionary, offline.

Numbers checked against: CiA 402-2 finite state automaton (controlword commands, statusword masks, transitions), the
units of ZeroErr's demos (counts 524 288/rev, ‰ of 0x6075/0x6076), the EDS itself (identity, ratings), and the catalog
(config/actuators/erob80_*.toml). The kernel runs the catalog's eRob80:100 m6 parameters at 1 kHz, one drive tick per
kernel step.
"""

from __future__ import annotations

import dataclasses
import math
import shutil

import pytest
from canopen.objectdictionary import INTEGER16, UNSIGNED16, ODVariable

from firmware_models.cia402 import (
    ABORT_VALUE_RANGE,
    Cia402Drive,
    Mode,
    State,
    Units,
    decode_controlword,
    default_values,
    error_register,
    profile_step,
)
from firmware_models.erob import object_dictionary as eod
from firmware_models.erob.drive import new_drive
from hil.joint import KernelJoint
from hil.kernel import LAWS, Kernel
from hil.params import catalog
from hil.params.config_file import ConfigError
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

S = State
LOCKED = 1e30      # [kg·m²] load inertia that keeps the rotor at rest
DT = 1e-3
TWO_PI = 2.0 * math.pi

# statusword of each state with the DC link powered, remote, mode 0 (no mode-specific bits)
SW = {S.NOT_READY_TO_SWITCH_ON: 0x0010, S.SWITCH_ON_DISABLED: 0x0250, S.READY_TO_SWITCH_ON: 0x0231,
      S.SWITCHED_ON: 0x0233, S.OPERATION_ENABLED: 0x0237, S.QUICK_STOP_ACTIVE: 0x0217,
      S.FAULT_REACTION_ACTIVE: 0x021F, S.FAULT: 0x0218}
# and the canopen State402 / CiA 402-2 masks they must satisfy
MASKS = {S.NOT_READY_TO_SWITCH_ON: (0x4F, 0x00), S.SWITCH_ON_DISABLED: (0x4F, 0x40),
         S.READY_TO_SWITCH_ON: (0x6F, 0x21), S.SWITCHED_ON: (0x6F, 0x23), S.OPERATION_ENABLED: (0x6F, 0x27),
         S.QUICK_STOP_ACTIVE: (0x6F, 0x07), S.FAULT_REACTION_ACTIVE: (0x4F, 0x0F), S.FAULT: (0x4F, 0x08)}

DISABLE_VOLTAGE, QUICK_STOP, SHUTDOWN, SWITCH_ON, ENABLE, FAULT_RESET = 0x00, 0x02, 0x06, 0x07, 0x0F, 0x80


class Rig:
    """A drive on a one-actuator kernel; `run(n)` = n × (tick, one kernel step)."""

    def __init__(self, variant: str = "erob80_100", model: str = "m6", **params):
        spec = catalog.entry(variant).actuator(model)
        self.kernel = Kernel(1, DT)
        p = kernel_params(spec, LoadConfig(), EncoderConfig(), FaultConfig(), "bam")
        p.update(params)
        self.kernel.set_params(0, p)
        self.joint = KernelJoint(self.kernel)
        self.drive = new_drive(variant, 2, self.joint)
        self.u: Units = self.drive.units

    def run(self, n: int, each=None) -> None:
        for _ in range(n):
            if each is not None:
                each(self.joint.time_s())
            self.drive.tick()
            self.joint.step()

    def cw(self, *words: int) -> None:
        for w in words:
            assert self.drive.write(0x6040, 0, w) is None

    def w(self, index: int, value: int, sub: int = 0) -> None:
        assert self.drive.write(index, sub, value) is None

    def r(self, index: int, sub: int = 0) -> int:
        return self.drive.read(index, sub)

    @property
    def sw(self) -> int:
        return self.drive.statusword

    @property
    def st(self) -> dict:
        return self.kernel.get_state(0)

    def enable(self, mode: Mode | int = 0) -> None:
        self.run(1)
        self.w(0x6060, int(mode))
        self.cw(SHUTDOWN, SWITCH_ON, ENABLE)
        assert self.drive.state == S.OPERATION_ENABLED

    def sag(self, volts: float) -> None:
        self.joint.command(params={"supply_override": volts})


def to_state(rig: Rig, state: State) -> None:
    """Bring a fresh rig's drive to `state` by legal commands (and a supply fault for the fault states)."""
    rig.run(1)
    if state in (S.FAULT_REACTION_ACTIVE, S.FAULT):
        rig.sag(30.0)
        rig.run(1 if state == S.FAULT_REACTION_ACTIVE else 2)
        rig.sag(math.nan)           # supply back: only the reset is missing
    else:
        path = {S.SWITCH_ON_DISABLED: (), S.READY_TO_SWITCH_ON: (SHUTDOWN,),
                S.SWITCHED_ON: (SHUTDOWN, SWITCH_ON), S.OPERATION_ENABLED: (SHUTDOWN, SWITCH_ON, ENABLE),
                S.QUICK_STOP_ACTIVE: (SHUTDOWN, SWITCH_ON, ENABLE, QUICK_STOP)}[state]
        rig.cw(*path)
    assert rig.drive.state == state
    assert rig.sw == SW[state]


# ------------------------------------------------------------------------------- object dictionary


@pytest.mark.parametrize(("variant", "current_ma", "torque_mnm", "node"), [
    ("erob80_50", 5500, 21000, 2), ("erob80_100", 5500, 31000, 127)])
def test_eds_loads_with_identity_and_variant_values(variant, current_ma, torque_mnm, node):
    od = eod.load_object_dictionary(variant, node)
    assert od.node_id == node
    values = default_values(od)
    # identity and device type (EDS [DeviceInfo], [1000])
    assert values[(0x1018, 1)] == 0x5A65726F == int.from_bytes(b"Zero", "big")
    assert values[(0x1018, 2)] == 0x26483052
    assert values[(0x1018, 3)] == 0x00020111
    assert values[(0x1018, 0)] == 3
    assert values[(0x1000, 0)] == 0x00420192 and values[(0x1000, 0)] & 0xFFFF == 402
    assert values[(0x6502, 0)] == 909 == 0x38D
    # node-relative COB-IDs ($NodeID in ZeroErr's EDS, plus_node_id in objects.toml)
    assert values[(0x1014, 0)] == 0x80 + node
    assert values[(0x1200, 1)] == 0x600 + node and values[(0x1200, 2)] == 0x580 + node
    assert values[(0x1400, 1)] == 0x200 + node and values[(0x1800, 1)] == 0x180 + node
    assert values[(0x1401, 1)] == 0x80000000 | (0x300 + node)          # PDO2..4 invalid (bit 31)
    # what ZeroErr's EDS leaves open, from config/erob/<variant>.toml
    assert values[(0x6075, 0)] == current_ma and values[(0x6076, 0)] == torque_mnm
    assert values[(0x608F, 1)] == 524288 and values[(0x608F, 2)] == 1
    assert values[(0x6065, 0)] == 32768 and values[(0x605A, 0)] == 2
    # every object has a value: canopen's LocalNode would otherwise abort an upload with 0x060A0023
    for obj in od.values():
        if obj.index >= 0x1000:
            for var in [obj] if isinstance(obj, ODVariable) else obj.values():
                assert var.default is not None, hex(var.index)
    # the CiA 402 objects beyond ZeroErr's EDS (config/erob/objects.toml `added`)
    assert (od[0x6072].data_type, od[0x6072].access_type) == (UNSIGNED16, "rw")
    assert (od[0x605A].data_type, od[0x6066].data_type) == (INTEGER16, UNSIGNED16)
    assert od[0x608F][1].access_type == "ro"
    # agrees with the actuator catalog
    entry = catalog.entry(eod.load_config(variant).catalog)
    assert values[(0x6076, 0)] == round(entry.datasheet.rated_torque_nm * 1000)
    assert eod.load_config(variant).units.gear_ratio == entry.datasheet.gear_ratio
    assert values[(0x608F, 1)] == entry.datasheet.encoder_counts
    assert values[(0x607F, 0)] == round(entry.datasheet.max_speed_rpm / 60 * 524288)


def test_od_errors_name_the_key(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"unknown eRob variant .*erob80_100, erob80_50"):
        eod.load_config("erob80_1000")
    with pytest.raises(ValueError, match=r"1\.\.127"):
        eod.load_object_dictionary("erob80_100", 128)
    shutil.copytree(catalog.config_dir(), tmp_path / "config")
    monkeypatch.setenv("SERVO_HIL_CONFIG", str(tmp_path / "config"))
    path = tmp_path / "config" / "erob" / "erob80_100.toml"
    good = path.read_text()
    cases = [("rated_current_ma = 5500", "rated_current_ma = -1", "ratings.rated_current_ma"),
             ("kp = 200.0", "kp = 200.0\nkd = 3.0", "loop.kd: unknown key"),
             ("save_all_parameters = 1   ", "#", "defaults.save_all_parameters: required key is missing"),
             ("dc_link_max_v = 55.0", "dc_link_max_v = 40.0", "dc_link_min_v must be below"),
             ("sources = { encoder_counts", "sources = { encoder_count = 'x', encoder_counts",
              "units: sources names unknown keys: encoder_count")]
    try:
        for old, new, message in cases:
            assert old in good
            path.write_text(good.replace(old, new))
            eod.load_config.cache_clear()
            with pytest.raises(ConfigError, match=message) as exc:
                eod.load_object_dictionary("erob80_100", 2)
            assert str(path) in str(exc.value)
    finally:
        eod.load_config.cache_clear()


def test_description_errors_name_the_object_and_key(tmp_path, monkeypatch):
    """config/erob/objects.toml: a wrong table names the file, the object and the key, in one line."""
    shutil.copytree(catalog.config_dir(), tmp_path / "config")
    monkeypatch.setenv("SERVO_HIL_CONFIG", str(tmp_path / "config"))
    path = tmp_path / "config" / "erob" / "objects.toml"
    good = path.read_text()
    controlword = '[objects.0x6040]\nname = "Controlword"\ntype = "UNSIGNED16"\naccess = "rww"\npdo = true\nlive = true'
    cases = [(controlword, controlword.replace("UNSIGNED16", "UNSIGNED12"), r"objects\.0x6040: type: "),
             (controlword, controlword.replace("live = true", "live = true\ndefault = 0"),
              r"objects\.0x6040: give exactly one of default, variant, live \(got default, live\)"),
             (controlword, controlword.replace("live = true", "default = 70000"),
              r"objects\.0x6040: default 70000 is outside UNSIGNED16 \(0\.\.65535\)"),
             (controlword, controlword.replace("live = true", 'variant = "ratings.rated_current"'),
              r"objects\.0x6040: variant 'ratings\.rated_current' is not an integer key"),
             ("[objects.0x6040]", "[objects.0x6040x]", r"objects\.0x6040x: an object index is 0x1000\.\.0xFFFF"),
             ('{ sub = 0, name = "Number of entries", type = "UNSIGNED8", access = "ro", default = 3 },', "",
              r"objects\.0x1018: subs must start at sub 0")]
    assert eod.variants() == ["erob80_100", "erob80_50"]        # the description is not a variant
    try:
        for old, new, message in cases:
            assert old in good, old
            path.write_text(good.replace(old, new))
            eod._description.cache_clear()
            with pytest.raises(ConfigError, match=message) as exc:
                eod.load_object_dictionary("erob80_100", 2)
            assert str(exc.value).startswith(f"{path}: ") and "\n" not in str(exc.value)
    finally:
        eod._description.cache_clear()


# ------------------------------------------------------------------------------- units


def test_units():
    u = Rig().u
    assert (u.position_counts(TWO_PI), u.position_counts(-math.pi / 2), u.position_counts(0.0)) == (524288, -131072, 0)
    assert u.position_rad(262144) == pytest.approx(math.pi)
    assert u.velocity_counts(TWO_PI / 60) == round(524288 / 60) == 8738            # 1 rpm
    assert u.velocity_rad(524288) == pytest.approx(TWO_PI)
    assert (u.torque_permille(31.0), u.torque_permille(-15.5), u.torque_nm(250)) == (1000, -500, 7.75)
    assert (u.current_permille(5.5), u.current_permille(1.1), u.current_a(2000)) == (1000, 200, 11.0)
    assert Units(524288, 262144, 21.0, 5.5).position_counts(0.0) == 262144       # factory mid-range zero


def test_units_saturate_at_the_objects_range():
    """Beyond its object's data type (0x607A / 0x60FF INTEGER32, 0x6071 / 0x6078 INTEGER16) a value saturates,
    infinities too; NaN has no value in drive units."""
    i32, i16 = (-(1 << 31), (1 << 31) - 1), (-(1 << 15), (1 << 15) - 1)
    u = Units(524288, 262144, 31.0, 5.5)
    assert (u.position_counts(1e305), u.position_counts(-math.inf)) == (i32[1], i32[0])
    assert u.position_counts((i32[1] - 262144) / u.counts_per_rad) == i32[1]        # the last count in range
    assert (u.velocity_counts(-1e308), u.velocity_counts(3e4)) == (i32[0], i32[1])    # 3e4 rad/s > 2^31 counts/s
    assert (u.torque_permille(1e308), u.torque_permille(-1e4), u.current_permille(math.inf)) == (i16[1], i16[0],
                                                                                                 i16[1])
    for convert in (u.position_counts, u.velocity_counts, u.torque_permille, u.current_permille):
        with pytest.raises(ValueError, match="NaN"):
            convert(math.nan)


def test_actual_values_from_the_kernel_state():
    rig = Rig(load_inertia=LOCKED)
    rig.kernel.set_state(0, theta=1.0, omega=0.5)
    rig.run(1)
    assert rig.r(0x6064) == rig.r(0x6063) == rig.r(0x20A0) == round(1.0 * 524288 / TWO_PI) == 83443
    assert rig.r(0x606C) == round(0.5 * 524288 / TWO_PI)
    assert rig.r(0x2240) == round(1.0 * 101 * 131072 / TWO_PI)       # motor encoder through 101:1
    assert rig.r(0x6079) == 48000                                     # DC link [mV]
    assert rig.r(0x22A2) == 25                                        # ambient [°C]
    assert rig.r(0x6077) == rig.r(0x6078) == 0                        # torque off


def test_the_generic_drive_writes_no_product_object_itself():
    """The eRob's manufacturer objects come from its DriveConfig's hook: without it the same drive on the same
    dictionary keeps them at their power-up value while the CiA 402 actual values follow the shaft."""
    rig = Rig(load_inertia=LOCKED)
    config = dataclasses.replace(rig.drive.config, vendor_values=None)
    drive = Cia402Drive(rig.drive.od, rig.joint, config)
    rig.kernel.set_state(0, theta=1.0, omega=0.0)
    drive.tick()
    rig.joint.step()
    drive.tick()
    assert drive.read(0x6064) == round(1.0 * 524288 / TWO_PI)
    assert [drive.read(i) for i in (0x20A0, 0x2240, 0x22A2, 0x3B69)] == [0, 0, 0, 0]
    assert config.loop.law == LAWS["erob_pd"] and rig.kernel.get_params(0)["law"] == LAWS["erob_pd"]


# ------------------------------------------------------------------------------- state machine


def test_power_up_transitions_0_and_1():
    rig = Rig()
    assert rig.drive.state == S.NOT_READY_TO_SWITCH_ON and rig.sw == 0x0010
    rig.cw(SHUTDOWN)                       # ignored while initialising
    assert rig.drive.state == S.NOT_READY_TO_SWITCH_ON
    rig.run(1)
    assert rig.drive.state == S.SWITCH_ON_DISABLED and rig.sw == 0x0250
    assert rig.r(0x6061) == 0 and rig.joint.enable == 0.0


# (state, controlword) → state; every pair not listed stays put (CiA 402-2 finite state automaton,
# transitions 2–12, 15, 16)
TRANSITIONS = {
    (S.SWITCH_ON_DISABLED, SHUTDOWN): S.READY_TO_SWITCH_ON,              # 2
    (S.READY_TO_SWITCH_ON, SWITCH_ON): S.SWITCHED_ON,                    # 3
    (S.READY_TO_SWITCH_ON, ENABLE): S.OPERATION_ENABLED,                 # 3 + 4
    (S.READY_TO_SWITCH_ON, DISABLE_VOLTAGE): S.SWITCH_ON_DISABLED,       # 7
    (S.READY_TO_SWITCH_ON, QUICK_STOP): S.SWITCH_ON_DISABLED,            # 7
    (S.SWITCHED_ON, ENABLE): S.OPERATION_ENABLED,                        # 4
    (S.SWITCHED_ON, SHUTDOWN): S.READY_TO_SWITCH_ON,                     # 6
    (S.SWITCHED_ON, DISABLE_VOLTAGE): S.SWITCH_ON_DISABLED,              # 10
    (S.SWITCHED_ON, QUICK_STOP): S.SWITCH_ON_DISABLED,                   # 10
    (S.OPERATION_ENABLED, SWITCH_ON): S.SWITCHED_ON,                     # 5
    (S.OPERATION_ENABLED, SHUTDOWN): S.READY_TO_SWITCH_ON,               # 8
    (S.OPERATION_ENABLED, DISABLE_VOLTAGE): S.SWITCH_ON_DISABLED,        # 9
    (S.OPERATION_ENABLED, QUICK_STOP): S.QUICK_STOP_ACTIVE,              # 11
    (S.QUICK_STOP_ACTIVE, DISABLE_VOLTAGE): S.SWITCH_ON_DISABLED,        # 12
    (S.FAULT, FAULT_RESET): S.SWITCH_ON_DISABLED,                        # 15
    (S.FAULT, 0x86): S.SWITCH_ON_DISABLED,                               # 15: any rising edge of bit 7
}
COMMANDS = (DISABLE_VOLTAGE, QUICK_STOP, SHUTDOWN, SWITCH_ON, ENABLE, FAULT_RESET,
            0x0B,   # xxxx 1011: quick stop too (bit 2 = 0)
            0x86)   # bit 7 set: no command; a fault reset in Fault
STATES = (S.SWITCH_ON_DISABLED, S.READY_TO_SWITCH_ON, S.SWITCHED_ON, S.OPERATION_ENABLED, S.QUICK_STOP_ACTIVE,
          S.FAULT_REACTION_ACTIVE, S.FAULT)


@pytest.mark.parametrize("state", STATES, ids=lambda s: s.name)
def test_state_machine_table(state):
    for cw in COMMANDS:
        rig = Rig()
        to_state(rig, state)
        rig.cw(cw)
        key = (state, 0x02 if cw == 0x0B else cw)
        expected = TRANSITIONS.get(key, state)
        assert rig.drive.state == expected, (state.name, hex(cw))
        assert rig.sw == SW[expected], (state.name, hex(cw), hex(rig.sw))
        mask, value = MASKS[expected]
        assert rig.sw & mask == value
        assert rig.joint.enable == (1.0 if expected in (S.OPERATION_ENABLED, S.QUICK_STOP_ACTIVE) else 0.0)


def test_decode_controlword():
    assert [decode_controlword(w) for w in (0x00, 0x02, 0x06, 0x07, 0x0F, 0x0B, 0x0D, 0x1F)] == [0, 1, 2, 3, 4, 1, 0, 4]
    assert decode_controlword(0x80) is None and decode_controlword(0x8F) is None


@pytest.mark.parametrize("option", [5, 6])
def test_quick_stop_option_5_6_holds_and_allows_transition_16(option):
    rig = Rig()
    rig.w(0x605A, option)
    rig.enable(Mode.PV)
    rig.w(0x6083, 500000)
    rig.w(0x60FF, 100000)
    rig.run(500)
    rig.w(0x6085, 1000000)
    rig.w(0x6084, 1000000)
    rig.cw(QUICK_STOP)
    assert rig.drive.state == S.QUICK_STOP_ACTIVE and rig.sw == 0x0217
    rig.run(300)
    assert rig.drive.state == S.QUICK_STOP_ACTIVE
    assert rig.sw == 0x0617                                  # bit 10: stopped
    assert rig.r(0x606B) == 0 and abs(rig.r(0x60F4)) < 200    # holding where the ramp ended
    assert rig.joint.enable == 1.0
    rig.cw(ENABLE)                                           # 16
    assert rig.drive.state == S.OPERATION_ENABLED


def test_quick_stop_ramps_down_then_switch_on_disabled():
    rig = Rig()                                              # 0x605A = 2: quick-stop ramp 0x6085
    rig.enable(Mode.PV)
    rig.w(0x6083, 500000)
    rig.w(0x60FF, 100000)
    rig.run(500)
    rig.w(0x6085, 250000)                                    # 100000 counts/s → 0 in 0.4 s
    rig.cw(QUICK_STOP)
    rig.run(200)
    assert rig.drive.state == S.QUICK_STOP_ACTIVE
    assert 30000 < rig.r(0x606B) < 70000                     # halfway down the ramp
    rig.run(300)
    assert rig.drive.state == S.SWITCH_ON_DISABLED and rig.sw == 0x0250   # 12
    assert rig.joint.enable == 0.0


def test_quick_stop_option_0_coasts():
    rig = Rig()
    rig.w(0x605A, 0)
    rig.enable()
    rig.cw(QUICK_STOP)
    assert rig.drive.state == S.QUICK_STOP_ACTIVE and rig.joint.enable == 0.0
    rig.run(1)
    assert rig.drive.state == S.SWITCH_ON_DISABLED


def test_writes_refused_at_the_cia402_level():
    rig = Rig()
    rig.run(1)
    for mode in (2, 6, 7, -1, 11):                           # VL, homing, IP: not in 0x6502 = 909
        assert rig.drive.write(0x6060, 0, mode) == ABORT_VALUE_RANGE
    assert rig.r(0x6060) == rig.r(0x6061) == 0
    for mode in Mode:
        assert rig.drive.write(0x6060, 0, int(mode)) is None
        assert rig.r(0x6061) == int(mode)
    assert rig.drive.write(0x605A, 0, 3) == ABORT_VALUE_RANGE
    assert rig.drive.write(0x605E, 0, 4) == ABORT_VALUE_RANGE
    assert rig.drive.write(0x1003, 0, 1) == ABORT_VALUE_RANGE


# ------------------------------------------------------------------------------- modes


def test_csp_follows_a_moving_target():
    rig = Rig()
    rig.enable(Mode.CSP)
    assert rig.sw == 0x1237                                  # bit 12: drive follows the command value

    def target(t: float) -> float:
        return 0.5 * math.sin(TWO_PI * 0.5 * t)            # peak 1.57 rad/s

    worst = 0.0

    def each(t: float) -> None:
        nonlocal worst
        rig.w(0x607A, rig.u.position_counts(target(t)))
        if t > 1.0:
            worst = max(worst, abs(rig.st["theta"] - target(t)))

    rig.run(2500, each)
    assert worst < 0.012                                      # rad, settled
    assert rig.r(0x6061) == 8 and rig.sw & 0x2000 == 0
    assert abs(rig.r(0x6062) - rig.r(0x607A)) <= 1            # demand = the last target
    assert rig.kernel.get_params(0)["law"] == LAWS["erob_pd"]


def test_pp_move_with_set_point_handshake():
    rig = Rig()
    rig.enable(Mode.PP)
    rig.w(0x6081, 100000)
    rig.w(0x6083, 200000)
    rig.w(0x6084, 200000)
    rig.w(0x607A, 200000)
    rig.run(20)
    assert rig.sw & 0x0400 and rig.r(0x6064) == pytest.approx(0, abs=10)   # holding, target reached
    rig.cw(0x1F)                                              # new set-point (bit 4 rising)
    assert rig.sw & 0x1000 and not rig.sw & 0x0400            # acknowledged, target not reached
    rig.cw(0x0F)
    assert not rig.sw & 0x1000                                # buffer free: acknowledge drops
    rig.run(1000)
    assert rig.r(0x6062) == pytest.approx(25000 + 0.5 * 100000, abs=200)     # 0.5 s ramp, then cruise
    assert rig.r(0x606B) == 100000                                            # at 0x6081
    assert not rig.sw & 0x0400
    rig.run(2500)
    assert rig.r(0x6062) == 200000 and rig.sw & 0x0400         # reached, within 0x6067 for 0x6068
    assert abs(rig.r(0x6064) - 200000) <= rig.r(0x6067) == 100
    assert rig.sw == 0x0637

    # relative set-point (bit 6), and one buffered behind it (bit 5 = 0 while moving)
    rig.w(0x607A, -50000)
    rig.cw(0x5F, 0x4F)                                        # 200000 − 50000
    rig.run(100)
    rig.w(0x607A, 300000)
    rig.cw(0x1F)
    assert rig.sw & 0x1000
    rig.cw(0x0F)
    assert rig.sw & 0x1000                                    # buffer full: acknowledge stays
    rig.w(0x607A, 0)
    rig.cw(0x1F, 0x0F)                                        # ignored while the buffer is full
    rig.run(1500)
    assert not rig.sw & 0x1000                                # the buffered set-point started
    rig.run(3000)
    assert rig.r(0x6062) == 300000 and rig.sw & 0x0400

    # change immediately (bit 5) replaces the move at once
    rig.w(0x607A, 100000)
    rig.cw(0x3F, 0x2F)
    rig.run(100)
    rig.w(0x607A, 250000)
    rig.cw(0x3F, 0x2F)
    rig.run(4000)
    assert rig.r(0x6062) == 250000 and abs(rig.r(0x6064) - 250000) <= 100


def test_pp_software_limit_clamps_the_target():
    rig = Rig()
    rig.w(0x607D, -10000, 1)
    rig.w(0x607D, 20000, 2)
    rig.enable(Mode.PP)
    rig.w(0x6081, 100000)
    rig.w(0x6083, 400000)
    rig.w(0x6084, 400000)
    rig.w(0x607A, 60000)
    rig.cw(0x1F, 0x0F)
    rig.run(1500)
    assert rig.r(0x6062) == 20000 and rig.sw & 0x0800        # bit 11: internal limit active
    assert abs(rig.r(0x6064) - 20000) <= 100


def test_pv_reaches_the_target_velocity():
    rig = Rig()
    rig.enable(Mode.PV)
    assert rig.sw & 0x1000                                    # bit 12: speed = 0
    rig.w(0x6083, 200000)
    rig.w(0x6084, 200000)
    rig.w(0x60FF, 50000)
    rig.run(100)
    assert not rig.sw & 0x1400 and 15000 < rig.r(0x606B) < 25000   # ramping at 0x6083
    rig.run(900)
    assert abs(rig.r(0x606C) - 50000) <= rig.r(0x606D) == 100
    assert rig.sw == 0x0637
    rig.w(0x60FF, -20000)
    rig.run(1000)
    assert abs(rig.r(0x606C) + 20000) <= 100 and rig.sw & 0x0400
    rig.cw(0x10F)                                             # halt: ramp down with 0x6084
    rig.run(500)
    assert rig.r(0x606B) == 0 and abs(rig.r(0x606C)) <= 100 and rig.sw & 0x1400 == 0x1400


def test_csv_follows_the_target_velocity():
    rig = Rig()
    rig.enable(Mode.CSV)
    assert rig.sw == 0x1237                                   # bit 12: drive follows the command value

    def each(t: float) -> None:
        rig.w(0x60FF, round(min(t, 0.2) / 0.2 * 60000))     # the master's own 0.2 s ramp

    rig.run(600, each)
    assert abs(rig.r(0x606C) - 60000) <= 100
    rig.w(0x60FF, 10**7)                                      # above 0x6080 = 3000 rpm at the motor
    rig.run(1)
    assert rig.r(0x606B) == round(3000 / 60 / 101 * 524288) and rig.sw & 0x0800
    rig.w(0x60FF, 0)
    rig.run(300)
    assert abs(rig.r(0x606C)) <= 100


def test_cst_holds_a_torque_against_a_locked_rotor():
    rig = Rig(load_inertia=LOCKED)
    rig.enable(Mode.CST)
    rig.w(0x6071, 500)                                        # 500 ‰ of 31 N·m
    rig.run(50)
    kt = rig.kernel.get_params(0)["kt"]
    assert rig.kernel.get_params(0)["law"] == LAWS["current"]
    assert rig.joint.u == pytest.approx(15.5 / kt)            # current = torque/kt
    assert rig.st["i_out"] == pytest.approx(15.5 / kt)
    assert rig.st["torque"] == pytest.approx(15.5)
    assert rig.r(0x6077) == rig.r(0x6074) == 500
    assert rig.r(0x6078) == round(15.5 / kt / 5.5 * 1000)     # ‰ of 0x6075
    assert rig.sw == 0x1237
    rig.w(0x6072, 300)                                        # max torque below the target
    rig.run(5)
    assert rig.r(0x6077) == 300 and rig.sw & 0x0800
    rig.w(0x6060, int(Mode.CSP))                              # back to the position law, holding
    rig.run(5)
    assert rig.kernel.get_params(0)["law"] == LAWS["erob_pd"]


def test_pt_ramps_with_the_torque_slope():
    rig = Rig(load_inertia=LOCKED)
    rig.enable(Mode.PT)
    rig.w(0x6087, 2000)                                       # ‰/s
    rig.w(0x6071, -400)
    rig.run(100)
    assert rig.r(0x6074) == -200 and not rig.sw & 0x0400
    rig.run(150)
    assert rig.r(0x6074) == rig.r(0x6077) == -400 and rig.sw & 0x0400


def test_profile_step_is_a_trapezoid():
    p = v = 0.0
    vmax, a, steps = 1000.0, 10000.0, 0
    peak = 0.0
    done = False
    while not done:
        p, v, done = profile_step(p, v, 5000.0, vmax, a, a, 1e-3)
        peak = max(peak, v)
        steps += 1
    assert p == 5000.0 and v == 0.0 and peak == vmax
    assert steps == round(5000 / vmax * 1000 + vmax / a * 1000)    # 5.1 s at 1 kHz


# ------------------------------------------------------------------------------- faults


@pytest.mark.parametrize(("inject", "restore", "code", "register"), [
    ({"supply_override": 30.0}, {"supply_override": math.nan}, 0x3220, 0x05),
    ({"supply_override": 60.0}, {"supply_override": math.nan}, 0x3210, 0x05),
    ({"oc_fraction": 0.5, "oc_time": 0.0}, {"oc_fraction": 0.0}, 0x2310, 0x03),
    ({"temp_limit": 60.0}, {}, 0x4310, 0x09),
], ids=["undervoltage", "overvoltage", "open_circuit", "overheat"])
def test_kernel_faults_emcy_and_fault_reset(inject, restore, code, register):
    rig = Rig()
    rig.enable(Mode.CSP)
    rig.run(10)
    assert rig.drive.emcy_pending() == []
    rig.joint.command(params=inject)
    if "temp_limit" in inject:
        rig.kernel.set_state(0, temperature=80.0)
    for _ in range(3):
        rig.run(1)
        if rig.drive.state != S.OPERATION_ENABLED:
            break
    assert rig.drive.state == S.FAULT_REACTION_ACTIVE and rig.sw == 0x021F     # transition 13
    assert rig.joint.enable == 0.0                                              # power fault: torque off
    assert rig.drive.emcy_pending() == [(code, register, bytes(5))]
    assert (rig.r(0x603F), rig.r(0x1001), rig.r(0x1003, 1), rig.r(0x1003)) == (code, register, code, 1)
    rig.run(1)
    assert rig.drive.state == S.FAULT and rig.sw == 0x0218                      # transition 14
    rig.cw(ENABLE, SHUTDOWN)                                                    # ignored in Fault
    assert rig.drive.state == S.FAULT
    rig.cw(FAULT_RESET)                 # the condition is still there: refused, or back at once
    rig.run(3)
    assert rig.drive.state == S.FAULT and rig.r(0x603F) == code
    rig.joint.command(params=restore)
    if "temp_limit" in inject:
        rig.kernel.set_state(0, temperature=25.0)
    rig.cw(FAULT_RESET)                                                         # no rising edge
    assert rig.drive.state == S.FAULT
    rig.cw(DISABLE_VOLTAGE, FAULT_RESET)                                        # transition 15
    assert rig.drive.state == S.SWITCH_ON_DISABLED and rig.sw == 0x0250
    assert (rig.r(0x603F), rig.r(0x1001)) == (0, 0)
    assert rig.drive.emcy_pending()[-1] == (0x0000, 0, bytes(5))
    assert rig.st["latched"] == 0 and rig.st["oc_active"] == 0
    rig.run(5)
    rig.cw(SHUTDOWN, ENABLE)
    rig.run(20)
    assert rig.drive.state == S.OPERATION_ENABLED and rig.joint.enable == 1.0
    assert rig.r(0x1003, 1) == code                                             # history survives the reset
    assert rig.drive.write(0x1003, 0, 0) is None and rig.r(0x1003) == rig.r(0x1003, 1) == 0


def test_following_error_fault_and_reset():
    rig = Rig(load_inertia=LOCKED)
    rig.enable(Mode.CSP)
    rig.run(10)
    start = rig.r(0x6064)
    rig.w(0x607A, start + 40000)                             # > 0x6065 = 32768 away, the rotor cannot follow
    # interpolated over the 10 ms since the last target (the enable): above the window from 9 ms on
    rig.run(12)
    assert rig.drive.state == S.OPERATION_ENABLED            # not yet 0x6066 = 10 ms above it
    assert rig.r(0x60F4) == pytest.approx(40000, abs=5)
    ticks = 0
    while rig.drive.state == S.OPERATION_ENABLED and ticks < 20:
        rig.run(1)
        ticks += 1
    assert 6 <= ticks <= 9
    assert rig.drive.state == S.FAULT_REACTION_ACTIVE
    assert rig.sw == 0x221F                                  # bit 13 following error
    assert rig.drive.emcy_pending() == [(0x8611, 0x21, bytes(5))]
    assert rig.r(0x603F) == 0x8611
    rig.run(2)                                               # quick-stop ramp from standstill: done at once
    assert rig.drive.state == S.FAULT and rig.sw == 0x2218 and rig.joint.enable == 0.0
    rig.cw(FAULT_RESET)
    assert rig.drive.state == S.SWITCH_ON_DISABLED and rig.sw == 0x0250
    rig.cw(SHUTDOWN, SWITCH_ON)
    rig.w(0x607A, rig.r(0x6064))                             # the master re-syncs its target first
    rig.cw(ENABLE)
    rig.run(50)
    assert rig.drive.state == S.OPERATION_ENABLED and abs(rig.r(0x60F4)) < 100


def test_error_register_bits():
    assert [error_register(c) for c in (0x0000, 0x2310, 0x3210, 0x4310, 0x8611, 0xFF00)] == \
        [0x00, 0x03, 0x05, 0x09, 0x21, 0x01]


def peak_rig(**params) -> tuple[Rig, float, float]:
    """A locked eRob80:100 whose kernel allows a peak current above the continuous one for 50 ms (MuJoCo DC motor
    model §1.1), in CST asking 500 ‰ of 31 N·m, more than either limit; (rig, i_cont, i_peak) [A]."""
    rig = Rig(load_inertia=LOCKED, **params)
    p = rig.kernel.get_params(0)
    kt, g = p["kt"], p["gear"]
    i_ask = 15.5 / (kt * g * p["efficiency"])
    i_cont, i_peak = 0.4 * i_ask, 0.8 * i_ask
    rig.joint.command(params={"tau_max": kt * i_cont, "peak_current": i_peak, "peak_time": 0.05})
    rig.enable(Mode.CST)
    rig.w(0x6071, 500)
    return rig, i_cont, i_peak


def run_until_fault(rig: Rig, limit: int = 200) -> int:
    ticks = 0
    while rig.drive.state == S.OPERATION_ENABLED:
        rig.run(1)
        ticks += 1
        assert ticks < limit, "no fault"
    return ticks


def test_cst_peak_current_then_overcurrent_emcy_when_the_budget_is_spent():
    """The drive's Current actual value 0x6078 shows the peak while the i²t budget lasts; once it is spent (after
    peak_time at the peak: (i_pk² − i_c²)·t_pk spent at i_pk² − i_c² per second) the drive faults with EMCY 0x2310
    continuous over-current (CiA 301 §7.2.7), 0x1001 bits 0 and 1, and reacts per 0x605E: 2 (the EDS default), a
    quick-stop ramp with the torque on, from standstill done at the next tick, then Fault with the torque off."""
    rig, _, i_peak = peak_rig()
    assert rig.r(0x605E) == 2
    rig.run(20)
    assert rig.st["i_out"] == pytest.approx(i_peak)
    assert rig.r(0x6078) == round(i_peak / 5.5 * 1000)       # ‰ of 0x6075
    assert rig.drive.emcy_pending() == []
    ticks = 20 + run_until_fault(rig)
    assert abs(ticks - 50) <= 2, "the budget lasts peak_time = 50 ms at the peak"
    assert rig.drive.state == S.FAULT_REACTION_ACTIVE
    assert rig.drive.emcy_pending() == [(0x2310, 0x03, bytes(5))]
    assert (rig.r(0x603F), rig.r(0x1001), rig.r(0x1003, 1)) == (0x2310, 0x03, 0x2310)
    assert rig.joint.enable == 1.0, "0x605E = 2: the drive ramps down with the torque on"
    rig.run(2)
    assert rig.drive.state == S.FAULT and rig.joint.enable == 0.0
    rig.run(2)
    assert rig.st["i_out"] == 0.0
    rig.cw(FAULT_RESET)
    assert rig.drive.state == S.SWITCH_ON_DISABLED
    assert rig.drive.emcy_pending() == [(0x0000, 0, bytes(5))]


def test_spent_budget_with_fault_reaction_0_switches_the_torque_off_at_once():
    rig, _, _ = peak_rig()
    rig.w(0x605E, 0)
    run_until_fault(rig)
    assert rig.drive.state == S.FAULT_REACTION_ACTIVE and rig.joint.enable == 0.0
    assert rig.drive.emcy_pending() == [(0x2310, 0x03, bytes(5))]


def test_no_peak_limit_no_overcurrent_fault():
    """The continuous limit alone (no peak, nothing to spend) limits the current without a fault."""
    rig = Rig(load_inertia=LOCKED)
    p = rig.kernel.get_params(0)
    i_cont = 0.4 * 15.5 / (p["kt"] * p["gear"] * p["efficiency"])
    rig.joint.command(params={"tau_max": p["kt"] * i_cont, "current_limiter": 1})
    rig.enable(Mode.CST)
    rig.w(0x6071, 500)
    rig.run(300)
    assert rig.drive.state == S.OPERATION_ENABLED and rig.drive.emcy_pending() == []
    assert rig.st["i_out"] == pytest.approx(i_cont)


def test_drive_temperature_reads_the_winding_with_one_node_and_the_housing_with_two():
    """0x22A2 (UNSIGNED16, °C): the winding with one thermal node; with the two-node model (MuJoCo DC motor model
    §1.3, R_th1 + R_th2) the housing, where the drive's sensor sits, which lags the winding."""
    one = Rig(load_inertia=LOCKED)
    one.kernel.set_state(0, temperature=60.0)
    one.run(1)
    one.drive.refresh()                                      # the actual values as of the kernel's last step
    assert one.r(0x22A2) == round(one.kernel.get_params(0)["ambient"] + one.st["temp_rise"]) == 60
    two = Rig(load_inertia=LOCKED, thermal_r2=1.0, thermal_c2=2.0)
    two.kernel.set_state(0, temperature=60.0)
    two.run(1)
    ambient = two.kernel.get_params(0)["ambient"]
    assert two.r(0x22A2) == 25 == round(ambient)             # the housing starts at ambient
    two.run(500)                                             # the housing warms from the winding (τ ≈ 1 s)
    two.drive.refresh()
    housing, winding = ambient + two.st["housing_rise"], ambient + two.st["temp_rise"]
    assert winding - housing > 5
    assert two.r(0x22A2) == round(housing)
