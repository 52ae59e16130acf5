"""MuJoCo 3.11 `<dcmotor>` as a test oracle for the servo kernel (MuJoCo XML reference, `<dcmotor>`).

One MJCF text drives both sides: MuJoCo compiles and steps it, and the same text, written to a file,
goes through our importer (`load_dcmotor` → `DCMotor.resolve()` → kernel parameters). The model is
a single hinge (axis +y) on a body whose inertial frame sits at `0 0 -length`: a pendulum with
diagonal inertia J about its centre of mass, so the inertia about the hinge is J + m·l² and the
gravity torque is −m·g·l·sin θ, which is the kernel's load with `load_inertia = J`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

from hil.kernel import INTEGRATORS, Kernel, default_params
from hil.params.dcmotor import MotorConstants
from hil.params.mjcf import load_dcmotor, pendulum_mjcf

DT = 0.001          # [s]
GRAVITY = 9.81      # [m/s²]
SLOTS = ("slew", "integral", "temperature", "bristle", "current")  # data.act order (mj_dcmotorSlots)


@dataclass(frozen=True)
class Load:
    """Pendulum at the output: inertia J about the centre of mass, point mass m at length l."""

    inertia: float = 1e-4
    mass: float = 0.2
    length: float = 0.0


def mjcf(dcmotor_attrs: str, load: Load, integrator: str = "Euler") -> str:
    """A complete MJCF model: `integrator` (Euler, implicitfast) at DT, one hinge, one `<dcmotor name="motor" ...>`."""
    return pendulum_mjcf(load.mass, load.length, load.inertia, DT, GRAVITY, model="dcmotor_oracle", body="link",
                         actuator=f'<dcmotor name="motor" joint="hinge" {dcmotor_attrs}/>', integrator=integrator)


def import_motor(xml: str, directory: Path) -> MotorConstants:
    """Our importer's view of the same text: write it to a file, load and resolve the dcmotor."""
    path = directory / "model.xml"
    path.write_text(xml)
    return load_dcmotor(path, "motor").resolve()


def slots(mc: MotorConstants) -> list[str]:
    """The act slots MuJoCo allocates for these constants, in data.act order (`mj_dcmotorSlots`)."""
    ki, slew = mc.controller[1], mc.controller[3]
    on = {"slew": slew > 0, "integral": ki > 0, "temperature": mc.thermal_r > 0,
          "bristle": mc.lugre[0] > 0, "current": mc.te > 0}
    return [s for s in SLOTS if on[s]]


def kernel_params(mc: MotorConstants, load: Load, integrator: str = "euler") -> dict:
    """Complete kernel parameter dict: resolved motor + controller + the pendulum load, `integrator`."""
    p = default_params()
    p.update(mc.kernel_params())
    p.update(mc.controller_params())
    p.update(load_inertia=load.inertia, mass=load.mass, length=load.length, gravity=GRAVITY,
             integrator=INTEGRATORS[integrator])
    return p


@dataclass
class MjRun:
    model: mujoco.MjModel
    q: np.ndarray          # (T,) qpos before step k
    w: np.ndarray          # (T,) qvel before step k
    act_pre: np.ndarray    # (T, na) act before step k
    act_post: np.ndarray   # (T, na) act after step k
    torque: np.ndarray     # (T,) qfrc_actuator of step k (output side)


def run_mujoco(xml: str, ctrl: np.ndarray, q0: float = 0.0) -> MjRun:
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    data.qpos[0] = q0
    T = len(ctrl)
    q, w, tq = np.empty(T), np.empty(T), np.empty(T)
    act_pre, act_post = np.empty((T, model.na)), np.empty((T, model.na))
    for k in range(T):
        q[k] = data.qpos[0]
        w[k] = data.qvel[0]
        act_pre[k] = data.act
        data.ctrl[0] = ctrl[k]
        mujoco.mj_step(model, data)
        act_post[k] = data.act
        tq[k] = data.qfrc_actuator[0]
    return MjRun(model, q, w, act_pre, act_post, tq)


def run_kernel(params: dict, ctrl: np.ndarray, q0: float = 0.0) -> tuple[dict, dict]:
    """Kernel outputs (each a (T,) column) and the final state."""
    kern = Kernel(1, DT)
    kern.set_params(0, params)
    kern.set_state(0, theta=q0)
    out = kern.run(np.asarray(ctrl, dtype=np.float64))
    return {k: v[:, 0] for k, v in out.items()}, kern.get_state(0)


def final_slot_values(state: dict, names: list[str]) -> np.ndarray:
    """The kernel's end state in MuJoCo's act layout (temperature as the rise over ambient)."""
    field = {"slew": "slew_u", "integral": "integral", "temperature": "temp_rise",
             "bristle": "bristle", "current": "current"}
    return np.array([state[field[n]] for n in names])
