"""`servo-hil actuator export`: the MJCF loads in MuJoCo 3.11 and a MuJoCo rollout of it matches the kernel with the
same terms to 1e-9 rad; the Isaac Lab DCMotor parameters reproduce the kernel's torque through Isaac Lab's own
clip (isaaclab/actuators/actuator_pd.py `DCMotor._clip_effort`: the four-quadrant line τ0·(±1 − ω/ω0) within
±effort_limit, on the PD τ = stiffness·(q* − q) − damping·ω); each target lists what it cannot represent; bad
input is one line, exit 2.

"The same terms": the kernel runs the catalog actuator with what the export lists as lost switched off (the
friction budget's clipped Coulomb torque, which MuJoCo's frictionloss replaces by a soft constraint, is off on both
sides; its viscous term is the joint damping MuJoCo integrates implicitly, the kernel's damping_b1), Euler.
"""

from __future__ import annotations

import json
import os
import subprocess

import mujoco
import numpy as np
import pytest
import yaml

from hil.kernel import INTEGRATORS, Kernel
from hil.params import catalog
from hil.params.mjcf import pendulum_inertial
from servo_hil.offline.actuator_export import export, isaaclab, mjcf
from tests.daemon_process import SERVO_HIL, assert_one_cli_line

DT = 1e-3
GRAVITY = 9.81
Q_TOL = 1e-9
PLACEHOLDER = '<inertial pos="0 0 0" mass="0.1" diaginertia="1e-05 1e-05 1e-05"/>'


def every_export() -> list[tuple[str, str | None]]:
    return [(name, model) for name in catalog.names() for model in (None, *sorted(catalog.entry(name).models))]


@pytest.mark.parametrize(("name", "model"), every_export())
def test_every_catalog_actuator_exports_an_mjcf_that_mujoco_loads(tmp_path, name, model):
    out = tmp_path / "a.xml"
    lost = export(name, model, out, None)["mjcf"]
    m = mujoco.MjModel.from_xml_path(str(out))
    assert (m.nu, m.njnt) == (1, 1)
    assert m.actuator_gaintype[0] == mujoco.mjtGain.mjGAIN_DCMOTOR
    spec = catalog.entry(name).actuator(model)
    p = spec.kernel_params()
    assert m.actuator_gainprm[0, 0] == p["resistance"] and m.actuator_gainprm[0, 1] == p["kt"]
    assert m.dof_armature[0] == p["armature"] * p["gear"] ** 2
    assert any("temperature limit" in line for line in lost) == (p["temp_limit"] > 0)
    assert any("encoder" in line for line in lost)
    if model:
        assert m.dof_frictionloss[0] == p["friction_base"] and m.dof_damping[0] == p["friction_viscous"]
        assert any("bam's integrator" in line for line in lost)
    if model in ("m2", "m4", "m6"):
        assert any("Stribeck" in line for line in lost)
    if model in ("m3", "m4", "m5", "m6"):
        assert any("load-dependent" in line for line in lost)


def pendulum_model(text: str, mass: float, length: float, inertia: float) -> mujoco.MjModel:
    """The exported model with its placeholder link replaced by a pendulum, at DT under gravity."""
    total, com, j = pendulum_inertial(mass, length)
    option = '<option integrator="Euler" timestep="0.001"/>'
    assert PLACEHOLDER in text and option in text
    text = text.replace(PLACEHOLDER, f'<inertial pos="0 0 {-com!r}" mass="{total!r}" '
                                     f'diaginertia="{j + inertia!r} {j + inertia!r} {j + inertia!r}"/>')
    text = text.replace(option, f'<option integrator="Euler" timestep="{DT!r}" gravity="0 0 {-GRAVITY!r}"/>')
    return mujoco.MjModel.from_xml_string(text)


def same_terms(name: str, model: str | None, mass: float, length: float, inertia: float) -> dict:
    """The kernel parameters of the catalog actuator with the terms the export loses switched off."""
    p = catalog.entry(name).actuator(model).kernel_params()
    g2 = p["gear"] ** 2
    if p["budget"]:
        p["damping_b1"] += p["friction_viscous"] / g2
    p.update(budget=0, friction_base=0.0, friction_viscous=0.0, encoder_counts=0.0, temp_limit=0.0, q_offset=0.0,
             max_current=0.0, backlash=0.0,
             integrator=INTEGRATORS["euler"], load_inertia=inertia, mass=mass, length=length, gravity=GRAVITY)
    if catalog.entry(name).firmware["law"] == "erob_pd":   # a current law: R(T) moves the exported gains
        p["tempcoef"] = 0.0
    return p


def goal(t: np.ndarray) -> np.ndarray:
    """Steps of ±1 rad (the duty or the current saturates) with a 1 Hz sine on top."""
    return 1.0 * np.where((t // 0.5) % 2 == 0, 1.0, -1.0) + 0.2 * np.sin(2 * np.pi * t)


@pytest.mark.parametrize(("name", "model", "mass"), [("mx64", "m1", 0.5), ("mx64", None, 0.5),
                                                     ("xm430_w350", None, 0.3), ("erob80_100", "m1", 2.0),
                                                     ("erob80_50", None, 1.0), ("mx106", "m6", 0.8),
                                                     ("xl330_m288", "m6", 0.1)])
def test_mujoco_rollout_of_the_export_matches_the_kernel(tmp_path, name, model, mass):
    length, inertia, n = 0.1, 1e-4, 2000
    out = tmp_path / "a.xml"
    lost = export(name, model, out, None)["mjcf"]
    if name == "xl330_m288":      # what same_terms switches off beyond the friction budget is listed
        assert any("current limiter" in line for line in lost) and any("q_offset" in line for line in lost)
    if catalog.entry(name).motor.backlash:
        assert any("backlash" in line for line in lost)
    m = pendulum_model(out.read_text(), mass, length, inertia)
    m.dof_frictionloss[:] = 0.0
    p = same_terms(name, model, mass, length, inertia)
    if p["tempcoef"] == 0.0:
        m.actuator_gainprm[0, 2] = 0.0           # α (MuJoCo stores it in gainprm[2])
    d = mujoco.MjData(m)
    u = goal(np.arange(n) * DT)
    q = np.empty(n)
    for k in range(n):
        q[k] = d.qpos[0]
        d.ctrl[0] = u[k]
        mujoco.mj_step(m, d)
    kern = Kernel(1, DT)
    kern.set_params(0, p)
    theta = kern.run(u)["theta"][:, 0]
    assert np.ptp(q) > 0.5, "the rollout must move"
    assert np.max(np.abs(theta - q)) < Q_TOL
    # the saturation is exercised: without the PWM limit / current clamp the trajectory is another one
    free = dict(p, max_duty=1e3, max_amps=1e3, tau_max=0.0)
    kern = Kernel(1, DT)
    kern.set_params(0, free)
    assert np.max(np.abs(kern.run(u)["theta"][:, 0] - q)) > 1e-3


def isaac_torque(cfg: dict, e: float, w: float) -> float:
    """Isaac Lab's DCMotor: the PD, then `_clip_effort`'s four-quadrant torque-speed line within ±effort_limit."""
    tau = cfg["stiffness"] * e - cfg["damping"] * w
    top = min(cfg["saturation_effort"] * (1.0 - w / cfg["velocity_limit"]), cfg["effort_limit"])
    bottom = max(cfg["saturation_effort"] * (-1.0 - w / cfg["velocity_limit"]), -cfg["effort_limit"])
    return min(max(tau, bottom), top)


@pytest.mark.parametrize(("name", "model"), [("mx64", "m1"), ("xm430_w350", None), ("erob80_100", "m6")])
def test_isaaclab_parameters_reproduce_the_kernels_torque(name, model):
    """Table 9: saturation_effort = τ0 (stall at full command), velocity_limit = ω0, effort_limit = τmax; with the
    PD gains, Isaac Lab's clip gives the kernel's torque (its first step, R at T0) over errors and speeds below
    the no-load speed."""
    spec = catalog.entry(name).actuator(model)
    cfg, lost = isaaclab(spec)
    p = spec.kernel_params()
    R, K, vs = p["resistance"], p["kt"], spec.firmware.supply_v
    full = vs * getattr(spec.firmware, "max_duty", 1.0)
    assert cfg["saturation_effort"] == pytest.approx(K * full / R, rel=1e-12)
    assert cfg["velocity_limit"] == pytest.approx(full / K, rel=1e-12)
    assert any("thermal model" in line for line in lost)
    rng = np.random.default_rng(7)
    errors = rng.uniform(-1.0, 1.0, 60)
    speeds = rng.uniform(-0.9, 0.9, 60) * cfg["velocity_limit"]
    p.update(encoder_counts=0.0, budget=0, load_inertia=1e30)
    for e, w in zip(errors, speeds, strict=True):
        kern = Kernel(1, DT)
        kern.set_params(0, p)
        kern.set_state(0, theta=0.0, omega=float(w))
        tau = kern.run(np.array([e]))["torque"][0, 0]
        assert tau == pytest.approx(isaac_torque(cfg, e, w), rel=1e-9, abs=1e-9 * cfg["saturation_effort"])


def test_isaaclab_yaml_and_json_hold_the_same_parameters(tmp_path):
    lost = export("mx64", "m6", None, tmp_path / "a.yaml")["isaaclab"]
    export("mx64", "m6", None, tmp_path / "a.json")
    text = (tmp_path / "a.yaml").read_text()
    assert yaml.safe_load(text) == json.loads((tmp_path / "a.json").read_text())
    assert all(f"#   - {line}" in text for line in lost)
    assert any("Stribeck" in line for line in lost)


def test_cli_writes_both_and_prints_what_each_cannot_represent(tmp_path):
    res = subprocess.run([*SERVO_HIL, "actuator", "export", "mx64", "--model", "m6", "--mjcf", tmp_path / "a.xml",
                          "--isaaclab", tmp_path / "a.json"], capture_output=True, text=True,
                         env=os.environ | {"COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert "MuJoCo <dcmotor> →" in res.stdout and "Isaac Lab DCMotor →" in res.stdout
    assert res.stdout.count("Stribeck") == 2
    mujoco.MjModel.from_xml_path(str(tmp_path / "a.xml"))
    assert json.loads((tmp_path / "a.json").read_text())["saturation_effort"] > 0


@pytest.mark.parametrize(("args", "needles"), [
    (["mx65", "--mjcf", "o.xml"], ["unknown actuator 'mx65'"]),
    (["mx64", "--model", "m9", "--mjcf", "o.xml"], ["--model", "m9"]),
    (["xm430_w350", "--model", "m1", "--mjcf", "o.xml"], ["no identified model 'm1'"]),
    (["mx64"], ["--mjcf", "--isaaclab"]),
    (["mx64", "--isaaclab", "o.txt"], ["o.txt", ".json"]),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, needles):
    res = subprocess.run([*SERVO_HIL, "actuator", "export", *args], capture_output=True, text=True, cwd=tmp_path)
    assert_one_cli_line(res, *needles)
    assert not list(tmp_path.iterdir()), "nothing written"


def test_mjcf_keeps_the_class_for_reuse():
    doc = mjcf(catalog.entry("erob80_100").actuator("m1"), "erob")
    assert '<default class="erob">' in doc.text and 'class="erob"' in doc.text
    assert any("max_amps" in line for line in doc.lost)
