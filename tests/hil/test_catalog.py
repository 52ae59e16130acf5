"""The actuator catalog (`config/actuators/*.toml`): it loads, it matches its sources, it is self-consistent.

* every entry and every identified model resolves to an ActuatorSpec;
* each `[models.mN]` is bam's `params/<actuator>/mN.json`, key by key and bit for bit;
* the `[motor]` built from the datasheet reproduces the datasheet's stall torque and no-load speed;
* `nominal` resolves to (K, R) by MuJoCo's `<dcmotor>` rule (XML reference, `nominal`; user_api.cc `mjs_setToDCMotor`);
* every section names its source.
"""

from __future__ import annotations

import json
import math
import tomllib

import pytest

from hil.params import catalog
from hil.params.bam import BAM_DEFAULT_R_OHM
from hil.params.dcmotor import RPM, DCMotor

# catalog entry -> bam parameter directory (None: bam has no identified set for it)
BAM_DIR = {
    "mx64": "mx64",
    "mx106": "mx106",
    "xl330_m288": "xl330",
    "erob80_50": "erob80_50",
    "erob80_100": "erob80_100",
    "xm430_w350": None,
    "xh540_w270": None,
    "xl430_w250": None,
    "xl330_m077": None,
    "sts3215": "feetech_sts3215_7_4V",
    "sts3215_12v": None,
    "ax12a": None,
    "scs0009": None,
}
ALL_MODELS = ["m1", "m2", "m3", "m4", "m5", "m6"]
MODELS = {"feetech_sts3215_7_4V": ["m1"]}   # bam directories without m1–m6 (bam identified only m1)
WITH_MODELS = [name for name, d in BAM_DIR.items() if d]


def raw(name: str) -> dict:
    """The catalog file as plain TOML (no defaults filled in, no validation)."""
    with (catalog.config_dir() / "actuators" / f"{name}.toml").open("rb") as fh:
        return tomllib.load(fh)


def test_catalog_lists_exactly_the_expected_entries():
    assert catalog.names() == sorted(BAM_DIR)


@pytest.mark.parametrize("name", sorted(BAM_DIR))
def test_entry_loads_and_resolves(name):
    entry = catalog.entry(name)
    assert entry.name == name
    assert entry.family == ("erob" if name.startswith("erob") else "feetech" if name.startswith(("sts", "scs"))
                            else "dynamixel")
    spec = entry.actuator()
    assert spec.name == name
    assert spec.friction is None
    assert spec.motor.resistance > 0 and spec.motor.kt > 0
    assert spec.motor.gear == 1.0  # output-side equivalent motor, as bam models it
    assert spec.motor.thermal_r > 0 and spec.motor.thermal_c > 0
    assert spec.motor.reftemp == spec.motor.ambient  # R(T) = R at the start
    assert spec.motor.torque_limit > 0
    assert spec.encoder_counts == entry.datasheet.encoder_counts
    assert sorted(entry.models) == (MODELS.get(BAM_DIR[name], ALL_MODELS) if BAM_DIR[name] else [])
    for m, model in entry.models.items():
        with_bam = entry.actuator(m)
        assert with_bam.friction is not None and with_bam.friction.model == m
        assert with_bam.motor.kt == model.kt
        assert with_bam.motor.resistance == model.R
        assert with_bam.motor.armature == model.armature


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="no identified model 'm1'"):
        catalog.entry("xm430_w350").actuator("m1")


@pytest.mark.parametrize("name", WITH_MODELS)
def test_models_are_bam_files_exactly(name, bam_params):
    files = sorted((bam_params / BAM_DIR[name]).glob("m*.json"))
    expected = MODELS.get(BAM_DIR[name], ALL_MODELS)
    assert [f.stem for f in files] == expected
    models = raw(name)["models"]
    assert sorted(models) == expected
    loaded = catalog.entry(name).models
    for f in files:
        bam = json.loads(f.read_text())
        bam.pop("actuator", None)
        ours = dict(models[f.stem])
        assert ours.pop("source").startswith(f"bam/params/{BAM_DIR[name]}/{f.name}")
        assert sorted(ours) == sorted(bam), f"{name} {f.stem}: keys differ from {f}"
        for key, value in bam.items():
            assert ours[key] == value, f"{name} {f.stem}.{key}: {ours[key]!r} != {value!r} in {f}"
            assert type(ours[key]) is type(value), f"{name} {f.stem}.{key}: type differs"
        # the loaded model: the same values, and bam's default R where a file has none
        model = loaded[f.stem]
        expected_r = bam.get("R", BAM_DEFAULT_R_OHM)
        assert (model.kt, model.R) == (bam["kt"], expected_r)


def test_erob80_100_files_have_no_resistance(bam_params):
    # The catalog must not invent an R that bam never fitted (bam/params/erob80_100/m*.json have no "R").
    for m in ALL_MODELS:
        assert "R" not in json.loads((bam_params / "erob80_100" / f"{m}.json").read_text())
        assert "R" not in raw("erob80_100")["models"][m]
        assert catalog.entry("erob80_100").models[m].R == 2.0


def _has_nameplate(name: str) -> bool:
    sheet = raw(name)["datasheet"]
    return all(sheet.get(k) for k in ("voltage_v", "stall_torque_nm", "no_load_speed_rpm"))


NAMEPLATED = [n for n in sorted(BAM_DIR) if _has_nameplate(n)]


def test_every_dynamixel_has_a_nameplate():
    dynamixels = sorted(n for n in BAM_DIR if not n.startswith("erob"))
    assert dynamixels == NAMEPLATED


@pytest.mark.parametrize("name", NAMEPLATED)
def test_motor_reproduces_the_datasheet(name):
    sheet = catalog.entry(name).datasheet
    derived = catalog.entry(name).actuator().motor.derived(sheet.voltage_v)
    assert derived["stall_torque_nm"] == pytest.approx(sheet.stall_torque_nm, rel=0.01)
    assert derived["no_load_speed_rad_s"] == pytest.approx(sheet.no_load_speed_rpm * RPM, rel=0.01)


def test_nominal_rule_by_hand():
    # `<dcmotor>` nominal, as mjs_setToDCMotor resolves it:
    # nominal="12 0.3 240" damping="1e-4": K = V/ω0 − V·B/τ0, R = K·V/τ0.
    c = DCMotor(nominal=[12.0, 0.3, 240.0], damping=[1e-4]).resolve()
    assert c.kt == pytest.approx(12 / 240 - 12 * 1e-4 / 0.3, rel=1e-12)
    assert c.kt == pytest.approx(0.046, rel=1e-12)
    assert c.resistance == pytest.approx(1.84, rel=1e-12)
    # Without damping K = V/ω0 exactly.
    c = DCMotor(nominal=[12.0, 0.3, 240.0]).resolve()
    assert c.kt == pytest.approx(0.05, rel=1e-12)
    assert c.resistance == pytest.approx(2.0, rel=1e-12)


def test_mx64_nominal_by_hand():
    # [motor] of mx64: nominal = [12 V, 6.0 N·m, 6.5973 rad/s], B = 0.011691602145974832 (bam m1 Kv).
    # K = 12/6.5973 − 12·0.0116916/6.0 = 1.818926 − 0.023383 = 1.795543; R = K·12/6.0 = 3.591085.
    motor = catalog.entry("mx64").actuator().motor
    assert motor.kt == pytest.approx(1.795543, rel=1e-6)
    assert motor.resistance == pytest.approx(3.591085, rel=1e-6)
    assert motor.damping[0] == 0.011691602145974832


@pytest.mark.parametrize("name", [n for n in sorted(BAM_DIR) if raw(n)["motor"].get("nominal")])
def test_catalog_nominal_follows_mujoco_rule(name):
    m = raw(name)["motor"]
    V, tau0, w0 = m["nominal"]
    B = m.get("damping", [0.0])[0]
    K = V / w0 - V * B / tau0
    motor = catalog.entry(name).actuator().motor
    assert motor.kt == pytest.approx(K, rel=1e-12)
    assert motor.resistance == pytest.approx(K * V / tau0, rel=1e-12)


def test_nominal_rule_with_resistance_by_hand():
    # With R given, MuJoCo (3.11) solves the no-load balance ω0(K² + RB) = VK for K (larger root).
    # ω0(K² + RB) = VK with V = 12, ω0 = 240, R = 1.84, B = 1e-4: K = (12 + √(144 − 4·240·1.84e-4·240))/480.
    c = DCMotor(nominal=[12.0, 0.3, 240.0], damping=[1e-4], resistance=1.84).resolve()
    assert c.kt == pytest.approx((12 + math.sqrt(144 - 4 * 240 * 1.84e-4 * 240)) / 480, rel=1e-12)
    assert c.kt == pytest.approx(0.046, rel=1e-9)


@pytest.mark.parametrize("name", [n for n in sorted(BAM_DIR) if raw(n)["motor"].get("nominal")])
def test_catalog_nominal_matches_mujoco(name):
    mujoco = pytest.importorskip("mujoco")
    m = raw(name)["motor"]
    attrs = 'nominal="{}"'.format(" ".join(repr(v) for v in m["nominal"]))
    if "damping" in m:
        attrs += ' damping="{}"'.format(" ".join(repr(v) for v in m["damping"]))
    xml = (
        '<mujoco><worldbody><body><joint name="j" type="hinge"/><geom size="0.1" mass="1"/></body>'
        f'</worldbody><actuator><dcmotor joint="j" {attrs}/></actuator></mujoco>'
    )
    model = mujoco.MjModel.from_xml_string(xml)
    motor = catalog.entry(name).actuator().motor
    assert motor.resistance == pytest.approx(model.actuator_gainprm[0][0], rel=1e-12)
    assert motor.kt == pytest.approx(model.actuator_gainprm[0][1], rel=1e-12)


def _sections(data: dict):
    yield "datasheet", data["datasheet"]
    yield "motor", data["motor"]
    yield "firmware", data["firmware"]
    for m, section in data.get("models", {}).items():
        yield f"models.{m}", section


@pytest.mark.parametrize("name", sorted(BAM_DIR))
def test_every_section_names_its_source(name):
    data = raw(name)
    assert set(data) >= {"name", "title", "family", "datasheet", "motor", "firmware"}
    for where, section in _sections(data):
        source = section.get("source")
        assert isinstance(source, str) and source.strip(), f"{name}: [{where}] has no source"
        for key, text in section.get("sources", {}).items():
            assert key in section, f"{name}: [{where}] sources names {key!r}, which the section does not set"
            assert isinstance(text, str) and text.strip(), f"{name}: [{where}] sources.{key} is empty"


@pytest.mark.parametrize("name", sorted(BAM_DIR))
def test_thermal_is_marked_as_an_estimate(name):
    # No thermal constants are published for these servos: the catalog must say so.
    motor = raw(name)["motor"]
    assert motor["thermal"][3:] == [0.0039, 25.0, 25.0]
    assert motor["sources"]["thermal"].startswith("estimate")
