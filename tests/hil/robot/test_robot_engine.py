"""The engine's surface for a loop that ticks it: state written into the kernel moves the hinge, parameters
written into the kernel reach the hinge, the bodies' poses are copied every N ticks, and the tick hook is a
capsule of C code."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest

from hil.params import catalog
from hil.robot.rig import Binding, RobotConfig, build_robot
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

ROOT = Path(__file__).resolve().parents[3]
ARM_2R = ROOT / "config" / "robots" / "arm_2r.xml"


def arm(theta: float = 0.0, **elbow):
    """The 2R arm with bam's M4 sets, both joints at `theta` [rad]; `elbow` overrides kernel parameters of the
    elbow."""
    bindings = []
    for j, (joint, name) in enumerate((("shoulder", "mx106"), ("elbow", "mx64"))):
        params = kernel_params(catalog.entry(name).actuator("m4"), LoadConfig(), EncoderConfig(), FaultConfig(),
                               "euler")
        bindings.append(Binding(joint, params | (elbow if joint == "elbow" else {}), f"actuators[{j}] ({joint})",
                                theta=theta))
    return build_robot(RobotConfig(mjcf=ARM_2R.name), ARM_2R.parent, bindings, 0.001)


def test_parameters_written_into_the_kernel_reach_the_hinge() -> None:
    """What a set-parameter command does (the loop's set_params): the elbow's armature, gear, B1 and Kv become the
    hinge's dof_armature = armature·g², dof_damping = B1·g² + Kv (bam/mujoco.py), and the arm then moves exactly as
    one built with them."""
    base = arm().kernel.get_params(1)
    new = {"armature": 2 * base["armature"], "gear": 1.1, "damping_b1": 0.003, "friction_viscous": 0.02}
    built = arm(0.3, **new)
    changed = arm(0.3)
    assert built.engine.const_updates == changed.engine.const_updates == 1     # the build's own
    goals = np.tile([0.8, -0.6], (800, 1))
    reference = built.engine.run(goals)["theta"]
    changed.kernel.set_params(1, changed.kernel.get_params(1) | new)
    out = changed.engine.run(goals)["theta"]
    dof = changed.model.jnt_dofadr[changed.model.joint("elbow").id]
    assert changed.model.dof_armature[dof] == new["armature"] * (1.1 * 1.1)
    assert changed.model.dof_damping[dof] == 0.003 * (1.1 * 1.1) + 0.02
    assert changed.engine.const_updates == 2
    np.testing.assert_array_equal(changed.model.dof_invweight0, built.model.dof_invweight0)
    assert np.max(np.abs(out - reference)) == 0.0
    # the same values again: nothing to copy, no mj_setConst
    changed.kernel.set_params(1, changed.kernel.get_params(1))
    changed.engine.step([0.8, -0.6])
    assert changed.engine.const_updates == 2
    # damping alone: no mj_setConst (the mass matrix did not change)
    changed.kernel.set_params(1, changed.kernel.get_params(1) | {"damping_b1": 0.0})
    changed.engine.step()
    assert changed.model.dof_damping[dof] == 0.02 and changed.engine.const_updates == 2


def test_a_state_written_into_the_kernel_moves_the_hinge() -> None:
    robot = arm()
    robot.engine.step([0.0, 0.0], [0.0, 0.0])
    robot.kernel.set_state(1, theta=1.0, omega=0.5)        # as the loop's set-state command does
    robot.engine.step()
    qa, da = robot.model.jnt_qposadr[robot.model.joint("elbow").id], robot.model.jnt_dofadr[1]
    # one Euler step from θ = 1 rad, ω = 0.5 rad/s, torque off: gravity pulls the elbow back down
    assert 1.0 < robot.data.qpos[qa] < 1.0 + 0.5 * 0.001
    assert robot.data.qvel[da] < 0.5
    assert robot.kernel.get_state(1)["theta"] == robot.data.qpos[qa]
    assert abs(robot.data.qpos[robot.model.jnt_qposadr[0]]) < 1e-3   # the shoulder stayed put


def test_poses_every_n_ticks() -> None:
    robot = arm()
    assert robot.engine.read_poses() is None
    robot.engine.publish_poses(5)
    for _ in range(12):
        robot.engine.step([0.8, -0.5], [1.0, 1.0])
    tick, t, poses = robot.engine.read_poses()
    assert (tick, robot.engine.ticks) == (10, 12)
    assert abs(t - 0.010) < 1e-12
    assert poses.shape == (robot.model.nbody, 7)
    np.testing.assert_allclose(np.linalg.norm(poses[:, 3:], axis=1), 1.0, rtol=1e-12)   # unit quaternions
    assert abs(poses[robot.model.body("upper_arm").id, 2] - 0.5) < 1e-12                 # its pivot at z = 0.5 m
    robot.engine.step([0.8, -0.5])
    robot.engine.step([0.8, -0.5])
    robot.engine.step([0.8, -0.5])
    tick, t, poses = robot.engine.read_poses()
    assert tick == 15
    assert np.array_equal(poses[:, :3], robot.data.xpos) and np.array_equal(poses[:, 3:], robot.data.xquat)


def test_every_copy_of_the_poses_is_kept_for_a_reader_until_the_ring_is_full() -> None:
    """Copies at ticks N, 2N, … are numbered 0, 1, …; a reader gets each once; one more than 1023 copies behind
    finds the oldest gone, which the numbers show."""
    robot = arm()
    robot.engine.publish_poses(2)
    for _ in range(7):
        robot.engine.step([0.8, -0.5], [1.0, 1.0])
    copies = robot.engine.poses_since(-1)
    assert [(k, tick) for k, tick, _, _ in copies] == [(0, 2), (1, 4), (2, 6)]
    assert robot.engine.poses_since(2) == []
    robot.engine.step([0.8, -0.5])
    (k, tick, t, poses), = robot.engine.poses_since(2)
    assert (k, tick) == (3, 8) and abs(t - 0.008) < 1e-12
    assert np.array_equal(poses[:, :3], robot.data.xpos)
    for _ in range(2 * 1030):   # 1030 more copies
        robot.engine.step()
    numbers = [c[0] for c in robot.engine.poses_since(3)]
    assert numbers == list(range(3 + 1030 - 1022, 3 + 1030 + 1))

def test_tick_hook_is_a_named_capsule() -> None:
    import ctypes

    robot = arm()
    hook = robot.engine.tick_hook()
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    assert name(hook) == b"hil.loop.TickHook"
    assert mujoco.__version__ == "3.11.0"


def test_a_hot_winding_scales_the_hinges_friction_loss() -> None:
    """`friction_tempcoef` on a robot: the budget the engine makes the hinge's friction loss is scaled by
    1 + α_f·(T − T0) of the winding, as the kernel's own load scales it; without α_f the temperature does not
    change it. One step from the same state: the forces the budget reads are the same in every arm."""
    alpha, hot_c = 0.01, 65.0
    cold, hot = arm(0.3, friction_tempcoef=alpha), arm(0.3, friction_tempcoef=alpha)
    plain, plain_hot = arm(0.3), arm(0.3)
    for robot in (hot, plain_hot):
        robot.kernel.set_state(1, temperature=hot_c)
    for robot in (cold, hot, plain, plain_hot):
        robot.engine.step([0.0, 0.0])
    dof = cold.model.jnt_dofadr[cold.model.joint("elbow").id]
    p = cold.kernel.get_params(1)
    loss = {name: r.model.dof_frictionloss[dof] for name, r in
            (("cold", cold), ("hot", hot), ("plain", plain), ("plain_hot", plain_hot))}
    assert loss["cold"] > 0.0
    scale = (1.0 + alpha * (hot_c - p["reftemp"])) / (1.0 + alpha * (p["ambient"] - p["reftemp"]))
    # the winding warms by mK within the step: the factor is read at its temperature then
    assert loss["hot"] / loss["cold"] == pytest.approx(scale, rel=1e-4) and scale > 1.3
    assert loss["plain_hot"] == pytest.approx(loss["plain"], rel=1e-12)
    assert loss["plain"] == pytest.approx(loss["cold"] / (1.0 + alpha * (p["ambient"] - p["reftemp"])), rel=1e-4)
