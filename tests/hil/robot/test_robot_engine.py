"""The engine's surface for a loop that ticks it: state written into the kernel moves the hinge, the
bodies' poses are copied every N ticks, and the tick hook is a capsule of C code."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np

from hil.params import catalog
from hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params
from hil.robot.rig import Binding, RobotConfig, build_robot

ROOT = Path(__file__).resolve().parents[3]
ARM_2R = ROOT / "config" / "robots" / "arm_2r.xml"


def arm():
    bindings = []
    for j, (joint, name) in enumerate((("shoulder", "mx106"), ("elbow", "mx64"))):
        params = kernel_params(catalog.entry(name).actuator("m4"), LoadConfig(), EncoderConfig(), FaultConfig(),
                               "euler")
        bindings.append(Binding(joint, params, f"actuators[{j}] ({joint})"))
    return build_robot(RobotConfig(mjcf=ARM_2R.name), ARM_2R.parent, bindings, 0.001)


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


def test_tick_hook_is_a_named_capsule() -> None:
    import ctypes

    robot = arm()
    hook = robot.engine.tick_hook()
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    assert name(hook) == b"hil.loop.TickHook"
    assert mujoco.__version__ == "3.11.0"
