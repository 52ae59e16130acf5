"""The kernel's Feetech laws: bam's STS3215 law (LAW_STS_PWM) against bam's own rollouts, and the STS firmware
(LAW_STS): its reduction to bam's law, the setpoint profile, the modes, dead band and torque limit.

Oracle: tests/data/bam_rollouts/bam_sts3215_rollouts.json, made with bam's simulator (tests/data/README.md).
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hil.kernel import LAWS, STS_MODES, Kernel
from hil.params import catalog
from hil.params.firmware import StsLaw
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

from .kernel_helpers import LOCKED, params, trajectory

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "bam_rollouts" / "bam_sts3215_rollouts.json"
STEP_RAD = 2 * math.pi / 4096      # one STS position step
DT = 1e-3
MOTOR = dict(resistance=2.0, kt=0.5, armature=1e-3, supply_v=12.0, max_duty=1.0)


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())


def bam_rig(setup: dict, law: dict | None = None) -> dict:
    """Kernel parameters of the catalog's STS3215 with bam's set m1 on the rollouts' pendulum."""
    fw = law or {"kp": setup["kp"], "supply_v": setup["vin"]}
    spec = catalog.entry("sts3215").actuator("m1", fw).bam_only()
    load = LoadConfig(mass=setup["mass"], arm_mass=setup["arm_mass"], length=setup["length"])
    return kernel_params(spec, load, EncoderConfig(), FaultConfig(), "bam")


def rollout(p: dict, dt: float, goal, enable):
    k = Kernel(1, dt)
    k.set_params(0, p)
    return k.run(np.asarray(goal, dtype=float), np.asarray(enable, dtype=float))


@pytest.mark.parametrize("setup", ["sts3215", "sts3215_kp16"])
def test_bam_sts3215_rollouts_to_round_off(golden, setup):
    s = golden["setups"][setup]
    p = bam_rig(s["setup"])
    assert p["law"] == LAWS["sts_pwm"]
    for name, traj in s["trajectories"].items():
        out = rollout(p, s["dt"], traj["goal_position"], traj["torque_enable"])
        ref = traj["models"]["m1"]
        assert np.ptp(ref["q"]) > 0.5, f"{name}: the reference should move"
        err_q = np.max(np.abs(out["theta"][:, 0] - ref["q"]))
        err_dq = np.max(np.abs(out["omega"][:, 0] - ref["dq"]))
        assert err_q <= 1e-12, f"{setup} {name}: |q - q_bam| = {err_q:.3g} rad"
        assert err_dq <= 1e-11, f"{setup} {name}: |dq - dq_bam| = {err_dq:.3g} rad/s"


def test_the_rollout_comparison_can_fail(golden):
    """kp 32 does not reproduce the kp 16 rollout, nor does a setpoint without bam's speed limit."""
    s = golden["setups"]["sts3215_kp16"]
    traj = s["trajectories"]["goal_steps"]
    ref = np.array(traj["models"]["m1"]["q"])
    for law in ({"kp": 32, "supply_v": 7.4}, {"kp": 16, "supply_v": 7.4, "max_velocity": math.inf}):
        out = rollout(bam_rig(s["setup"], law), s["dt"], traj["goal_position"], traj["torque_enable"])
        assert np.max(np.abs(out["theta"][:, 0] - ref)) > 1e-3


def test_firmware_law_with_bams_registers_is_bams_law_bit_for_bit(golden):
    """LAW_STS in position mode with P 32, I 0, D 0 (bam's recorder writes D 0), Goal Speed 3400 steps/s,
    Acceleration 0 and no dead zone gives LAW_STS_PWM's bits while the torque is on."""
    s = golden["setups"]["sts3215"]
    bam = bam_rig(s["setup"])
    fw = catalog.entry("sts3215").firmware
    sts = dict(bam) | StsLaw(kp=32, error_gain=fw["error_gain"], max_duty=fw["max_duty"],
                             max_velocity=fw["max_velocity"], supply_v=7.4).kernel_params()
    assert sts["law"] == LAWS["sts"] and sts["sts_mode"] == STS_MODES["position"]
    for name in ("sin_sin", "up_and_down", "sin_time_square"):
        traj = s["trajectories"][name]
        assert all(traj["torque_enable"])
        a = rollout(bam, s["dt"], traj["goal_position"], 1.0)
        b = rollout(sts, s["dt"], traj["goal_position"], 1.0)
        assert np.array_equal(a["theta"], b["theta"]) and np.array_equal(a["voltage"], b["voltage"])
    # a D gain makes it differ (the comparison above can fail)
    traj = s["trajectories"]["sin_sin"]
    c = rollout(sts | {"sts_kd": 0.05}, s["dt"], traj["goal_position"], 1.0)
    assert np.max(np.abs(c["theta"] - rollout(bam, s["dt"], traj["goal_position"], 1.0)["theta"])) > 1e-6


def sts(**kw) -> dict:
    return params(law=LAWS["sts"], sts_p=32.0, sts_error_gain=0.166, **(MOTOR | kw))


def ramps_within(vel, a: float) -> bool:
    """The setpoint's speed changes by at most a·DT a step, but for the landing on the goal (feetech.pxi
    `sts_setpoint`: at most 2·a·DT there, what the step grid leaves over)."""
    dv = np.abs(np.diff(vel))
    over = dv > a * DT * (1 + 1e-9)
    return int(over.sum()) <= 1 and bool(np.all(dv <= 2 * a * DT))


def test_setpoint_speed_and_acceleration_limits_and_landing_on_the_goal():
    v, a, goal = 3.0, 20.0, 2.0
    st = trajectory(sts(sts_speed=v, sts_acc=a, load_inertia=LOCKED), [goal] * 2000)
    vel = np.array([s["traj_vel"] for s in st])
    assert vel.max() == pytest.approx(v, abs=1e-12)
    assert ramps_within(vel, a)
    t_done = next(k for k, s in enumerate(st) if s["traj_pos"] == goal) * DT
    assert t_done == pytest.approx(goal / v + v / a, abs=5 * DT)          # d/v + one ramp's time
    assert st[-1]["traj_pos"] == goal and st[-1]["traj_vel"] == 0.0
    pos = np.array([s["traj_pos"] for s in st])
    assert np.all(np.diff(pos) >= 0) and pos.max() == goal               # no overshoot


def test_goal_behind_a_running_setpoint_brakes_then_returns():
    st = trajectory(sts(sts_speed=3.0, sts_acc=20.0, load_inertia=LOCKED), [2.0] * 300 + [0.0] * 1500)
    vel = np.array([s["traj_vel"] for s in st])
    assert ramps_within(vel, 20.0) and vel.min() < -2.9       # it turned and ran back at the speed limit
    assert st[-1]["traj_pos"] == 0.0 and st[-1]["traj_vel"] == 0.0


def test_position_mode_holds_the_goal_and_the_torque_limit_clamps_the_duty():
    st = trajectory(sts(sts_speed=5.0), [0.5] * 3000)
    assert st[-1]["theta"] == pytest.approx(0.5, abs=1e-3)
    k = Kernel(1, DT)
    k.set_params(0, sts(max_duty=0.3, load_inertia=LOCKED))
    k.step([1.0], [1.0], [0.0])
    assert k.get_state(0)["duty"] == 0.3 and k.get_state(0)["v_out"] == pytest.approx(0.3 * 12.0)


def test_dead_band_drives_nothing_inside_and_everything_outside():
    k = Kernel(1, DT)
    k.set_params(0, sts(sts_dead_pos=3 * STEP_RAD, sts_dead_neg=1 * STEP_RAD, load_inertia=LOCKED))
    for goal, driven in ((2.5 * STEP_RAD, False), (-0.5 * STEP_RAD, False), (-1.5 * STEP_RAD, True),
                         (3.5 * STEP_RAD, True)):
        k.step([goal], [1.0], [0.0])
        duty = k.get_state(0)["duty"]
        assert (duty != 0.0) == driven, (goal / STEP_RAD, duty)
        if driven:
            assert duty == pytest.approx(goal * 32 * 0.166, rel=1e-12)


def test_minimum_startup_force_is_the_least_duty_of_a_still_shaft():
    # Minimum Startup Force (24): a still shaft (|ω| ≤ sts_rest_speed) gets at least sts_punch outside the dead
    # band, in the error's direction; none inside it, and a larger duty passes unchanged
    k = Kernel(1, DT)
    k.set_params(0, sts(sts_punch=0.05, sts_rest_speed=0.01, sts_dead_pos=STEP_RAD, sts_dead_neg=STEP_RAD,
                        load_inertia=LOCKED))
    for goal, duty in ((0.5 * STEP_RAD, 0.0), (2 * STEP_RAD, 0.05), (-2 * STEP_RAD, -0.05),
                       (0.02, 0.02 * 32 * 0.166)):
        k.step([goal], [1.0], [0.0])
        assert k.get_state(0)["duty"] == pytest.approx(duty, rel=1e-12), goal / STEP_RAD
    # a moving shaft gets the law's own duty
    k = Kernel(1, DT)
    k.set_params(0, sts(sts_punch=0.05, sts_rest_speed=0.01, load_inertia=LOCKED))
    k.set_state(0, omega=0.5)
    k.step([2 * STEP_RAD], [1.0], [0.0])
    assert abs(k.get_state(0)["duty"]) < 0.05


def test_polarity_turns_the_duty_and_one_leaves_every_bit():
    goals = [0.3] * 200 + [-0.2] * 200
    a = trajectory(sts(sts_speed=4.0, load_inertia=LOCKED), goals)
    b = trajectory(sts(sts_speed=4.0, sts_polarity=1.0, load_inertia=LOCKED), goals)
    c = trajectory(sts(sts_speed=4.0, sts_polarity=-1.0, load_inertia=LOCKED), goals)
    assert [s["duty"] for s in a] == [s["duty"] for s in b]
    # (the locked shaft still moves by round-off, the other way: the duties agree to that)
    assert [s["duty"] for s in c] == pytest.approx([-s["duty"] for s in a], rel=1e-9, abs=1e-12)
    # on a free shaft the turned loop runs away from its goal instead of holding it
    free = trajectory(sts(sts_speed=4.0, sts_polarity=-1.0), [0.1] * 300)
    assert free[-1]["theta"] < -0.5


def test_wheel_mode_reaches_the_goal_velocity_at_the_acceleration():
    a = 10.0
    st = trajectory(sts(sts_mode=STS_MODES["wheel"], sts_kvp=0.2, sts_kvi=5.0, sts_acc=a, armature=1e-2),
                [2.0] * 3000)
    vel = np.array([s["traj_vel"] for s in st])
    assert np.all(np.diff(vel) <= a * DT * (1 + 1e-9)) and vel[-1] == 2.0
    assert st[-1]["omega"] == pytest.approx(2.0, rel=1e-3)
    st = trajectory(sts(sts_mode=STS_MODES["wheel"], sts_kvp=0.2, sts_kvi=5.0, sts_speed=1.0, armature=1e-2),
                [-3.0] * 3000)
    assert st[-1]["omega"] == pytest.approx(-1.0, rel=1e-3)              # Goal Speed beyond the limit


def test_pwm_mode_is_open_loop_duty_within_the_limit():
    k = Kernel(1, DT)
    k.set_params(0, sts(sts_mode=STS_MODES["pwm"], max_duty=0.5, load_inertia=LOCKED))
    k.step([0.25], [1.0], [0.0])
    assert k.get_state(0)["v_out"] == pytest.approx(0.25 * 12.0)
    k.step([-0.9], [1.0], [0.0])
    assert k.get_state(0)["v_out"] == pytest.approx(-0.5 * 12.0)


def test_step_mode_regulates_like_position():
    a = trajectory(sts(sts_mode=STS_MODES["step"], sts_speed=4.0), [1.0] * 1500)
    b = trajectory(sts(sts_mode=STS_MODES["position"], sts_speed=4.0), [1.0] * 1500)
    assert [s["theta"] for s in a] == [s["theta"] for s in b]


def test_torque_off_lets_the_setpoint_follow_the_shaft():
    k = Kernel(1, DT)
    k.set_params(0, sts(sts_speed=1.0, gravity=9.81, mass=0.2, length=0.1))
    k.set_state(0, theta=1.0)
    for _ in range(200):
        k.step([1.0], [0.0], [0.0])
    st = k.get_state(0)
    assert st["traj_pos"] == st["theta_meas"] and st["duty"] == 0.0 and st["theta"] < 0.9
    k.step([st["theta"]], [1.0], [0.0])      # torque on: the move starts from the shaft, no jump
    assert abs(k.get_state(0)["traj_pos"] - st["theta"]) <= 1.0 * DT * (1 + 1e-12)


def test_sts_pwm_setpoint_runs_with_the_torque_off_as_bams_does():
    k = Kernel(1, DT)
    k.set_params(0, params(law=LAWS["sts_pwm"], sts_p=32.0, sts_error_gain=0.166, sts_speed=2.0,
                           **(MOTOR | dict(load_inertia=LOCKED))))
    for _ in range(100):
        k.step([1.0], [0.0], [0.0])
    assert k.get_state(0)["traj_pos"] == pytest.approx(0.2, abs=1e-12) and k.get_state(0)["duty"] == 0.0


SIM_RIG = """
[actuator]
catalog = "{name}"
model = "m1"
exact_bam = true
[load]
mass = 0.567
length = 0.105
[sim]
dt = 0.005
integrator = "bam"
"""


def test_servo_hil_simulate_of_the_catalog_sts3215_is_bams_rollout(golden, tmp_path):
    """`servo-hil simulate` on a rig of the catalog's STS3215 (the CSV path) reproduces bam's goal-step rollout."""
    import csv

    from typer.testing import CliRunner

    from servo_hil.cli.main import app

    traj = golden["setups"]["sts3215"]["trajectories"]["goal_steps"]
    (tmp_path / "rig.toml").write_text(SIM_RIG.format(name="sts3215"))
    with (tmp_path / "in.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t", "u", "enable"])
        for k, (g, e) in enumerate(zip(traj["goal_position"], traj["torque_enable"], strict=True)):
            w.writerow([repr(k * 0.005), repr(g), int(e)])
    res = CliRunner().invoke(app, ["simulate", str(tmp_path / "rig.toml"), "--input", str(tmp_path / "in.csv"),
                                   "--out", str(tmp_path / "out.csv")])
    assert res.exit_code == 0, res.output
    with (tmp_path / "out.csv").open() as fh:
        q = np.array([float(r["theta"]) for r in csv.DictReader(fh)])
    assert np.max(np.abs(q - traj["models"]["m1"]["q"])) <= 1e-12


def test_feetech_laws_in_a_mixed_rig_give_their_lone_bits():
    """The Feetech laws run per actuator inside the lane blocks (step.pxi): among 40 actuators of other laws, every
    one of them steps exactly as it does alone, on each vector-math path, in `run` and in `step`."""
    from hil.kernel.core import SIMD_PATHS, _simd

    others = [params(law=LAWS["dxl_pwm"], duty_gain=5.0, **(MOTOR | {"max_duty": 0.9})),
              params(law=LAWS["position"], kp=8.0, **MOTOR), params(law=LAWS["erob_pd"], pd_kp=3.0, max_amps=2.0,
                                                                      **MOTOR)]
    feetech = [params(law=LAWS["sts_pwm"], sts_p=32.0, sts_error_gain=0.166, sts_speed=4.0, **MOTOR),
               sts(sts_speed=3.0, sts_acc=20.0, sts_kd=0.01, sts_ki=2.0, sts_dead_pos=1e-3, sts_dead_neg=2e-3),
               sts(sts_mode=STS_MODES["wheel"], sts_kvp=0.2, sts_kvi=5.0, sts_acc=10.0),
               sts(sts_mode=STS_MODES["pwm"], max_duty=0.6)]
    # no transcendental in the rig (no pendulum, cogging or Stribeck): libm's and the vector paths' sines
    # and exponentials agree to round-off only, and a lone actuator takes libm's (step.pxi `math_path`)
    rig = [(feetech + others)[j % 7] | {"load_inertia": 1e-3 * (1 + j)} for j in range(40)]
    t = np.arange(800) * DT
    u = np.sin(2 * np.pi * 1.5 * t)[:, None] * np.linspace(0.5, 1.5, 40)[None, :]
    enable = np.ones_like(u)
    enable[300:350, ::3] = 0.0
    start = _simd()
    try:
        for path in SIMD_PATHS:
            try:
                _simd(path)
            except ValueError:
                continue
            k = Kernel(40, DT)
            for j, p in enumerate(rig):
                k.set_params(j, p)
            mixed = k.run(u, enable)
            for j, p in enumerate(rig):
                alone = Kernel(1, DT)
                alone.set_params(0, p)
                one = alone.run(u[:, j], enable[:, j])
                assert np.array_equal(mixed["theta"][:, j], one["theta"][:, 0]), (path, j, p["law"])
                assert np.array_equal(mixed["voltage"][:, j], one["voltage"][:, 0]), (path, j, p["law"])
            assert np.ptp(mixed["theta"][:, :4], axis=0).min() > 1e-2      # the Feetech actuators move
            stepped = Kernel(40, DT)
            for j, p in enumerate(rig):
                stepped.set_params(j, p)
            for i in range(200):
                stepped.step(u[i], enable[i], 0.0)
            assert [stepped.get_state(j)["theta"] for j in range(40)] == list(mixed["theta"][200])
    finally:
        _simd(start)
