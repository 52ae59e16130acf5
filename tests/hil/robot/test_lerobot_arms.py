"""LeRobot's arms as the project's MuJoCo models (config/robots/so101.xml, koch.xml) and their rigs: the models load,
name their hinges as LeRobot names its motors, carry plausible masses and inertias and the link lengths their
comments state (from the SO-ARM100 URDF and the Koch v1.1 CAD export), ask of each servo no more holding torque than
its datasheet's stall torque anywhere in their ranges, and keep their parked pose with torque off (docs/robots.md,
"LeRobot's arms"). The catalog gives the servo figures (config/actuators: sts3215, xl430_w250, xl330_m288)."""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path

import mujoco
import numpy as np
import pytest

from hil.params import catalog
from servo_hil.rig import load_robot_rig

CONFIG = Path(__file__).resolve().parents[3] / "config"
JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]   # LeRobot's names
# model -> (its rigs, the catalog servo of each joint on the follower)
ARMS = {
    "so101": (("so101", "so101_leader"), ["sts3215"] * 6),
    "koch": (("koch", "koch_leader"), ["xl430_w250"] * 2 + ["xl330_m288"] * 4),
}


def model(name: str) -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(str(CONFIG / "robots" / f"{name}.xml"))


def qpos(m: mujoco.MjModel, key: str) -> np.ndarray:
    return np.array([m.key(key).qpos[m.joint(j).qposadr[0]] for j in JOINTS])


@pytest.mark.parametrize("name", sorted(ARMS))
def test_the_model_loads_with_lerobots_six_hinges(name):
    m = model(name)
    assert [m.joint(j).name for j in range(m.njnt)] == JOINTS
    assert all(m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE and m.jnt_limited[j] for j in range(m.njnt))
    assert m.nu == 0          # no actuator of its own: the rig adds one per hinge
    assert m.opt.timestep == 0.001   # one physics step per 1 kHz tick


@pytest.mark.parametrize("name", sorted(ARMS))
def test_masses_and_inertias_are_positive_and_plausible(name):
    m = model(name)
    moving = range(2, m.nbody)      # world, then the fixed base
    assert all(m.body_mass[b] > 0 for b in moving)
    for b in moving:
        i = np.sort(m.body_inertia[b])
        assert i[0] > 0 and i[0] + i[1] >= i[2]                          # a real body's principal moments
        r = np.sqrt(i[2] / m.body_mass[b])
        assert 0.003 < r < 0.1, (m.body(b).name, r)                     # radius of gyration of a desktop link
    servos = [catalog.entry(c).datasheet.mass_kg for c in ARMS[name][1]]
    if all(servos):                 # the Koch: its six servos' e-manual masses are part of the arm's
        assert m.body_mass.sum() > sum(servos)
    # the totals the MJCF's comment gives: the SO-101 URDF's links (0.632 kg), the Koch's parts and servos
    assert m.body_mass.sum() == pytest.approx({"so101": 0.632006, "koch": 0.476648}[name], abs=1e-6)


def anchors(m: mujoco.MjModel, q: np.ndarray) -> dict[str, np.ndarray]:
    d = mujoco.MjData(m)
    d.qpos[:] = q
    mujoco.mj_forward(m, d)
    return {j: d.xanchor[m.joint(j).id].copy() for j in JOINTS} | {"fingertip": d.site("fingertip").xpos.copy()}


def test_so101_link_lengths_are_the_urdfs():
    # distances between the joint origins of github.com/TheRobotStudio/SO-ARM100
    # Simulation/SO101/so101_new_calib.urdf @ fda892c chained at q = 0 (shoulder_lift → elbow_flex: xyz
    # -0.11257 -0.028 0; elbow_flex → wrist_flex: -0.1349 0.0052 0; wrist_flex → wrist_roll: 0 -0.0611 0.0181)
    a = anchors(model("so101"), np.zeros(6))
    assert np.linalg.norm(a["elbow_flex"] - a["shoulder_lift"]) == pytest.approx(np.hypot(0.11257, 0.028), abs=1e-4)
    assert np.linalg.norm(a["wrist_flex"] - a["elbow_flex"]) == pytest.approx(np.hypot(0.1349, 0.0052), abs=1e-4)
    assert np.linalg.norm(a["wrist_roll"] - a["wrist_flex"]) == pytest.approx(np.hypot(0.0611, 0.0181), abs=1e-4)
    # LeRobot's calibration pose (the middle of every range) is an upright L: the fingertip 0.39 m forward
    assert a["fingertip"][0] > 0.35 and a["fingertip"][2] > 0.2


def test_koch_link_lengths_are_the_cad_exports():
    # joint origins of haosulab/ManiSkill mani_skill/assets/robots/koch/follower_arm_v1.1.urdf @ 8b77fd4 (from
    # github.com/jess-moss/koch-v1-1's CAD): joint_3 -0.038026 -0.014951 0.108424, joint_4 -0.000251 -0.100502 0.002641
    a = anchors(model("koch"), np.zeros(6))
    np.testing.assert_allclose(a["elbow_flex"] - a["shoulder_lift"], [-0.038026, -0.014951, 0.108424], atol=1e-9)
    np.testing.assert_allclose(a["wrist_flex"] - a["elbow_flex"], [-0.000251, -0.100502, 0.002641], atol=1e-9)
    assert a["fingertip"][1] < -0.15        # forward is −y, as in the CAD


def worst_gravity_torque(m: mujoco.MjModel, steps: int = 9) -> np.ndarray:
    """max |gravity torque| [N·m] per hinge at rest anywhere on a grid over shoulder_lift, elbow_flex and
    wrist_flex within their ranges (pan, roll and gripper change no pitch torque by more than their own)."""
    d = mujoco.MjData(m)
    grids = [np.linspace(*m.jnt_range[m.joint(j).id], steps) for j in ("shoulder_lift", "elbow_flex", "wrist_flex")]
    worst = np.zeros(m.nv)
    for lift, elbow, wrist in itertools.product(*grids):
        d.qpos[:] = [0, lift, elbow, wrist, 0, 0]
        mujoco.mj_forward(m, d)
        worst = np.maximum(worst, np.abs(d.qfrc_bias))   # qvel = 0: the bias is gravity alone
    return worst


@pytest.mark.parametrize("name", sorted(ARMS))
def test_no_pose_needs_more_than_the_servos_stall_torque(name):
    worst = worst_gravity_torque(model(name))
    stall = np.array([catalog.entry(c).datasheet.stall_torque_nm for c in ARMS[name][1]])
    assert np.all(worst < stall), dict(zip(JOINTS, zip(worst.round(3), stall, strict=True), strict=True))
    # and the shoulder carries the arm: its worst case is a real load, not a rounding (≥ 20 % of stall)
    assert worst[1] > 0.2 * stall[1]


@pytest.mark.parametrize("name", sorted(ARMS))
def test_the_rest_pose_is_in_range_and_the_rigs_start_there(name):
    m = model(name)
    rest = qpos(m, "rest")
    lo, hi = m.jnt_range[:, 0], m.jnt_range[:, 1]
    assert np.all((lo <= rest) & (rest <= hi))
    for rig in ARMS[name][0]:
        with (CONFIG / "rigs" / f"{rig}.toml").open("rb") as fh:
            data = tomllib.load(fh)
        actuators = data["actuators"]
        assert [a["joint"] for a in actuators] == JOINTS and [a["id"] for a in actuators] == list(range(1, 7))
        # each rig starts in its own model's rest pose, the follower's pose: the Koch leader's model
        # (koch_leader.xml) turns its elbow about the reversed axis, so its angle there is the follower's negated
        own = model(Path(data["robot"]["mjcf"]).stem)
        np.testing.assert_allclose(qpos(own, "rest") * np.sign(np.sum(own.jnt_axis * m.jnt_axis, axis=1)), rest)
        np.testing.assert_allclose([a.get("initial", {}).get("theta", 0.0) for a in actuators], qpos(own, "rest"))


def torque_off_for_1s(rig: Path) -> tuple[np.ndarray, np.ndarray, float]:
    """(θ at start, θ after 1 s with every servo's torque off [rad], the fingertip's height then [m])."""
    _, _, robot = load_robot_rig(rig)
    start = np.array([robot.data.qpos[robot.model.joint(j).qposadr[0]] for j in JOINTS])
    theta = robot.engine.run(np.zeros((1000, 6)), np.zeros((1000, 6), dtype=np.uint8))["theta"]
    return start, theta[-1], float(robot.data.site("fingertip").xpos[2])


@pytest.mark.parametrize("rig", ["so101", "koch"])
def test_a_parked_follower_stays_put_with_torque_off(rig, tmp_path):
    """Powered up with torque off, the arm rests against its stops and the table: 1 s later no joint has moved
    by more than 0.1 rad, and the fingertip is on the table, not through it. Started from the middle of its
    ranges instead (the rig without its `initial` angles), the same arm falls by more than 0.2 rad."""
    path = CONFIG / "rigs" / f"{rig}.toml"
    start, end, tip_z = torque_off_for_1s(path)
    np.testing.assert_allclose(start, qpos(model(rig), "rest"))
    assert np.max(np.abs(end - start)) < 0.1, end - start
    assert tip_z > -0.002
    text = path.read_text().replace('mjcf = "../robots/', f'mjcf = "{CONFIG}/robots/')
    upright = tmp_path / f"{rig}.toml"
    upright.write_text("\n".join(line for line in text.splitlines() if not line.startswith("initial =")))
    start, end, _ = torque_off_for_1s(upright)
    assert np.all(start == 0) and np.max(np.abs(end - start)) > 0.2, end - start
