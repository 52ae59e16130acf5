"""Peer benchmark: bam's `MujocoController.update()` + `mj_step` stepping a robot MJCF from Python.

Runs inside bench/.venv-bam (Python 3.12, better-actuator-models 1.0.2, MuJoCo of the checkout);
bench/robot.py starts it. One controller per hinge (bam/mujoco.py `MujocoController`, the way bam's
`load_config` builds them), each with the bam parameter file given for it, on a motor actuator added
to every hinge (MjSpec); goals from the job; times the plain Python loop bam's users run. Job (stdin):
{"mjcf", "joints": [{"name", "params", "kp", "vin", "error_gain", "max_pwm"}], "goals": [[...] per step],
"repeats"}. Prints one JSON object on stdout.
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


def main() -> int:
    job = json.load(sys.stdin)
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
    goals = np.asarray(job["goals"], dtype=float)
    rates = []
    for _ in range(job["repeats"]):
        mujoco.mj_resetData(model, data)
        mujoco.mj_forward(model, data)
        t0 = time.perf_counter()
        for k in range(len(goals)):
            for i, (name, ctrl) in enumerate(controllers):
                ctrl.set_q_target(name, goals[k, i])
                ctrl.update()
            mujoco.mj_step(model, data)
        rates.append(len(goals) / (time.perf_counter() - t0))
    json.dump({"steps_per_s": sorted(rates)[len(rates) // 2], "samples": rates, "mujoco": mujoco.__version__,
               "bam": version("better-actuator-models")}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
