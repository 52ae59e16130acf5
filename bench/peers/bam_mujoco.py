"""bam's `MujocoController.update()` + `mj_step` stepping a robot MJCF from Python.

The peer of the robot benchmark and of the 2R-arm oracle; it runs inside bench/.venv-bam and reads its job as
JSON on stdin. Job and output: docs/benchmarks.md, Robot.
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version

import mujoco
import numpy as np
from bam.model import load_model
from bam.mujoco import MujocoController


def build(job: dict) -> tuple[mujoco.MjModel, mujoco.MjData, list[tuple[str, MujocoController]]]:
    spec = mujoco.MjSpec.from_file(job["mjcf"])
    for j in job["joints"]:
        if spec.actuator(j["name"]) is None:
            spec.add_actuator(name=j["name"], target=j["name"], trntype=mujoco.mjtTrn.mjTRN_JOINT)
    model = spec.compile()
    data = mujoco.MjData(model)
    controllers = []
    for j in job["joints"]:
        bam_model = load_model(j["params"])
        act = bam_model.actuator
        act.kp, act.vin, act.error_gain, act.max_pwm = j["kp"], j["vin"], j["error_gain"], j["max_pwm"]
        controllers.append((j["name"], MujocoController(bam_model, j["name"], model, data)))
    return model, data, controllers


def start(job: dict, model, data, controllers) -> None:
    """The joints at their q0, after every controller is made: each one's mj_setConst works on the data at qpos0
    (bam's Simulator.reset order)."""
    for j, (_, ctrl) in zip(job["joints"], controllers, strict=True):
        if "q0" in j:
            data.qpos[ctrl.qpos_indexes] = j["q0"]
    mujoco.mj_forward(model, data)


def roll(goals: np.ndarray, model, data, controllers, record: bool) -> tuple[np.ndarray, np.ndarray] | None:
    q, dq = (np.empty_like(goals), np.empty_like(goals)) if record else (None, None)
    for k in range(len(goals)):
        for i, (name, ctrl) in enumerate(controllers):
            if record:
                q[k, i] = data.qpos[ctrl.qpos_indexes][0]
                dq[k, i] = data.qvel[ctrl.dof_indexes][0]
            ctrl.set_q_target(name, goals[k, i])
            ctrl.update()
        mujoco.mj_step(model, data)
    return (q, dq) if record else None


def main() -> int:
    job = json.load(sys.stdin)
    model, data, controllers = build(job)
    goals = np.asarray(job["goals"], dtype=float)
    start(job, model, data, controllers)
    q, dq = roll(goals, model, data, controllers, record=True)
    out = {"q": q.tolist(), "dq": dq.tolist(), "mujoco": mujoco.__version__, "bam": version("better-actuator-models")}
    rates = []
    for _ in range(job.get("repeats", 0)):
        mujoco.mj_resetData(model, data)
        start(job, model, data, controllers)
        t0 = time.perf_counter()
        roll(goals, model, data, controllers, record=False)
        rates.append(len(goals) / (time.perf_counter() - t0))
    if rates:
        out |= {"steps_per_s": sorted(rates)[len(rates) // 2], "samples": rates}
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
