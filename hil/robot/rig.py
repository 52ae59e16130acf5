"""Robot rigs: the rig's actuators drive the hinges of a MuJoCo model instead of their own pendulums.

    [robot]
    mjcf = "robots/arm.xml"      # relative to the rig file
    [[actuators]]
    joint = "shoulder"           # a hinge of the MJCF, by name; no load = ... (the MJCF's bodies are the load)

`build_robot` compiles the MJCF with each bound hinge's actuators replaced by one motor actuator (ctrl =
the servo's output torque), gives the hinge the servo's reflected armature and viscous damping, and
couples the kernel to the model (hil/robot/engine.pyx: the step, bam's `MujocoController` order).
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


def _coupled_params(b: Binding) -> tuple[dict, float, float, bool]:
    """The kernel parameters the engine steps (no load of its own: the model's hinge is the load), the
    hinge's reflected armature [kg·m²] and viscous damping [N·m·s/rad], and whether bam's budget applies."""
    p = dict(b.params)
    if p["damping_b2"] or p["damping_b3"]:
        raise ConfigError(f"{b.where}: the motor's quadratic / cubic damping has no counterpart on a MuJoCo joint "
                          "(dof_damping is linear): give damping = [B1] only")
    g2 = p["gear"] * p["gear"]
    armature = p["armature"] * g2
    budget = bool(p["budget"])
    # bam/mujoco.py: frictionloss from the budget, damping = friction_viscous; a motor's B1 is viscous too
    # (MuJoCo dcmotor: damping reflected through gear²)
    damping = p["damping_b1"] * g2 + (p["friction_viscous"] if budget else 0.0)
    # the kernel still integrates a load of its own, which the engine overwrites from MuJoCo every step:
    # keep it finite (unit inertia where the servo has no armature) and passive, one body (no backlash: the
    # MJCF's hinge is the output) and without the budget's rising static friction
    p.update(load_inertia=0.0 if armature > 0 else 1.0, mass=0.0, length=0.0, arm_mass=0.0, gravity=0.0,
             budget=0, damping_b1=0.0, integrator=INTEGRATORS["euler"], backlash=0.0, stiction_rise=0.0)
    return p, armature, damping, budget


def build_robot(config: RobotConfig, base: Path, bindings: list[Binding], tick_s: float) -> Robot:
    """Compile `config.mjcf` (relative to `base`) with `bindings` coupled to its hinges; a tick of `tick_s`
    seconds must be a whole number of the MJCF's timesteps."""
    path = base / config.mjcf
    spec = load_spec(path)
    seen: dict[str, str] = {}
    for b in bindings:
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
        p, armature, damping, budget = _coupled_params(b)
        try:
            kernel.set_params(j, p)
        except (TypeError, ValueError, KeyError) as exc:
            raise ConfigError(f"{b.where}: {exc}") from None
        jid = model.joint(b.joint).id
        qa, da = int(model.jnt_qposadr[jid]), int(model.jnt_dofadr[jid])
        model.dof_armature[da] = armature
        model.dof_damping[da] = damping
        model.dof_frictionloss[da] = 0.0
        if b.temperature is not None:
            kernel.set_state(j, temperature=b.temperature)
        joints.append((qa, da, model.actuator(MOTOR_PREFIX + b.joint).id))
        budgets.append(budget)
    # armature changed: the constants the compiler derives from the mass matrix (bam/mujoco.py does the same);
    # mj_setConst works on the data at qpos0, so the initial state goes in after it
    mujoco.mj_setConst(model, data)
    for (qa, da, _), b in zip(joints, bindings, strict=True):
        data.qpos[qa] = b.theta
        data.qvel[da] = b.omega
    mujoco.mj_forward(model, data)
    engine = RobotEngine(kernel, model, data, joints, budgets, substeps)
    return Robot(model=model, data=data, kernel=kernel, engine=engine, joints=[b.joint for b in bindings],
                 substeps=substeps, mjcf=path)
