"""Robot rigs: the rig's actuators drive the hinges of a MuJoCo model instead of their own pendulums.

`build_robot` compiles the `[robot] mjcf` with each bound hinge's actuators replaced by one motor actuator
(ctrl = the servo's output torque) and couples the kernel to the model. The table and its checks:
docs/robots.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np
from pydantic import Field

from hil.kernel import INTEGRATORS, Kernel
from hil.params.config_file import ConfigError, Strict
from hil.robot.engine import RobotEngine

MOTOR_PREFIX = "servo-hil/"   # name of the motor actuator added on each bound hinge: MOTOR_PREFIX + joint
POSES_TOPIC = "poses"         # the bodies' poses go out on <rig>/poses: no actuator may be named so
PENDULUM_KEYS = ("load_inertia", "mass", "length", "arm_mass", "gravity", "q_offset")
"""The kernel's own pendulum load, which a robot's MJCF replaces: fixed in a robot's kernel (`_coupled_params`)."""
OFF_ON_A_HINGE = ("backlash", "stiction_rise")
"""Terms a robot's kernel holds at 0 (`_coupled_params`): the MJCF's hinge is the output (no gear backlash), and the
budget it receives as the hinge's friction loss has no rising static friction."""


class RobotConfig(Strict):
    """`[robot]`: the MuJoCo model the rig's actuators drive."""

    mjcf: str = Field(description="MJCF file, relative to the rig file; its <option timestep> is the physics "
                                  "step and its integrator the robot's")
    pose_every: int = Field(10, ge=1, description="publish the bodies' poses one tick in N")


@dataclass(frozen=True)
class Binding:
    """One actuator bound to a hinge: `params` are its complete kernel parameters (its load is ignored)."""

    joint: str
    params: dict
    where: str                     # how errors name it, e.g. "actuators[0] (shoulder)"
    theta: float = 0.0             # initial hinge angle [rad] and velocity [rad/s]
    omega: float = 0.0
    temperature: float | None = None  # initial winding temperature [°C]; None = ambient


@dataclass
class Robot:
    """A compiled robot: MuJoCo model and data, the kernel of its actuators and the engine coupling them."""

    model: mujoco.MjModel
    data: mujoco.MjData
    kernel: Kernel
    engine: RobotEngine
    joints: list[str]       # actuator j drives the hinge joints[j]
    substeps: int           # physics steps per tick
    mjcf: Path              # the MJCF file it was compiled from

    @property
    def timestep(self) -> float:
        """The physics step [s] (the MJCF's <option timestep>)."""
        return float(self.model.opt.timestep)

    def body_poses(self) -> dict[str, np.ndarray]:
        """Every named body's world position [m] (nbody, 3) and orientation quaternion w, x, y, z (nbody, 4),
        with the body names (world first)."""
        names = [self.model.body(i).name for i in range(self.model.nbody)]
        return {"names": names, "xpos": self.data.xpos.copy(), "xquat": self.data.xquat.copy()}


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def load_spec(path: Path) -> mujoco.MjSpec:
    """Parse the MJCF; MuJoCo's message and the file name on failure."""
    try:
        return mujoco.MjSpec.from_file(str(path))
    except ValueError as exc:
        raise ConfigError(f"robot.mjcf: {path}: {_first_line(exc)}") from None


def _coupled_params(b: Binding) -> tuple[dict, bool]:
    """The kernel parameters the engine steps and whether bam's friction budget applies (the engine then
    makes it the hinge's friction loss and its Kv part of the hinge's damping, as bam/mujoco.py does). The
    servo's armature, gear and B1 stay in them: the engine copies them to the hinge (engine.pyx)."""
    p = dict(b.params)
    if p["damping_b2"] or p["damping_b3"]:
        raise ConfigError(f"{b.where}: the motor's quadratic / cubic damping has no counterpart on a MuJoCo joint "
                          "(dof_damping is linear): give damping = [B1] only")
    budget = bool(p["budget"])
    # the kernel still integrates a load of its own, which the engine overwrites from MuJoCo every step: a
    # passive unit inertia, finite whatever armature the servo is given, with no budget of its own, one body
    # (no backlash: the MJCF's hinge is the output) and without the budget's rising static friction
    p.update(dict.fromkeys(PENDULUM_KEYS + OFF_ON_A_HINGE, 0.0), load_inertia=1.0, budget=0,
             integrator=INTEGRATORS["euler"])
    return p, budget


def build_robot(config: RobotConfig, base: Path, bindings: list[Binding], tick_s: float) -> Robot:
    """Compile `config.mjcf` (relative to `base`) with `bindings` coupled to its hinges; a tick of `tick_s`
    seconds must be a whole number of the MJCF's timesteps."""
    path = base / config.mjcf
    spec = load_spec(path)
    seen: dict[str, str] = {}
    for b in bindings:
        if b.joint == POSES_TOPIC:
            raise ConfigError(f"{b.where}.joint: {POSES_TOPIC!r} is the robot's poses topic (<rig>/{POSES_TOPIC}): "
                              "rename the MJCF hinge")
        joint = spec.joint(b.joint)
        if joint is None:
            hinges = [j.name for j in spec.joints if j.type == mujoco.mjtJoint.mjJNT_HINGE and j.name]
            raise ConfigError(f"{b.where}.joint: no joint {b.joint!r} in {path} (its hinges: "
                              f"{', '.join(hinges) or 'none'})")
        if b.joint in seen:
            raise ConfigError(f"{b.where}.joint: hinge {b.joint!r} is already driven by {seen[b.joint]}")
        seen[b.joint] = b.where
        if joint.type != mujoco.mjtJoint.mjJNT_HINGE:
            kind = str(joint.type).removeprefix("mjtJoint.mjJNT_").lower()
            raise ConfigError(f"{b.where}.joint: {b.joint!r} is a {kind} joint in {path}; a servo turns a hinge")
    # the servo is the hinge's only actuator: the MJCF's own (e.g. a <dcmotor> the rig imported) go
    for act in list(spec.actuators):
        if act.trntype == mujoco.mjtTrn.mjTRN_JOINT and act.target in seen:
            spec.delete(act)
    for b in bindings:
        spec.add_actuator(name=MOTOR_PREFIX + b.joint, target=b.joint, trntype=mujoco.mjtTrn.mjTRN_JOINT)
    try:
        model = spec.compile()
    except ValueError as exc:
        raise ConfigError(f"robot.mjcf: {path}: {_first_line(exc)}") from None
    ts = float(model.opt.timestep)
    substeps = round(tick_s / ts)
    if substeps < 1 or not math.isclose(substeps * ts, tick_s, rel_tol=1e-9):
        raise ConfigError(f"robot.mjcf: {path}: <option timestep=\"{ts!r}\"> does not divide a tick of "
                          f"{tick_s!r} s into whole steps")
    data = mujoco.MjData(model)
    kernel = Kernel(len(bindings), ts)
    joints, budgets = [], []
    for j, b in enumerate(bindings):
        p, budget = _coupled_params(b)
        try:
            kernel.set_params(j, p)
        except (TypeError, ValueError, KeyError) as exc:
            raise ConfigError(f"{b.where}: {exc}") from None
        jid = model.joint(b.joint).id
        qa, da = int(model.jnt_qposadr[jid]), int(model.jnt_dofadr[jid])
        model.dof_frictionloss[da] = 0.0
        data.qpos[qa] = b.theta
        data.qvel[da] = b.omega
        if b.temperature is not None:
            kernel.set_state(j, temperature=b.temperature)
        joints.append((qa, da, model.actuator(MOTOR_PREFIX + b.joint).id))
        budgets.append(budget)
    engine = RobotEngine(kernel, model, data, joints, budgets, substeps)
    return Robot(model=model, data=data, kernel=kernel, engine=engine, joints=[b.joint for b in bindings],
                 substeps=substeps, mjcf=path)
