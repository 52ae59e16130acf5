"""The peer of the 2R-arm oracle: bam's own `MujocoController.update()` + `mj_step` (bam/mujoco.py).

Runs inside bench/.venv-bam (Python 3.12, better-actuator-models 1.0.2), started by
test_robot_oracles.py; reads a JSON job on stdin, prints the joints' trajectories as JSON on stdout.
Job: {"mjcf": path, "actuators": [{"name", "params" (bam JSON), "kp", "vin", "error_gain", "max_pwm",
"q0"}], "goals": [[goal per actuator] per step]}.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

import mujoco
import numpy as np
from bam.model import load_model
from bam.mujoco import MujocoController


def main() -> int:
    job = json.load(sys.stdin)
    model = mujoco.MjModel.from_xml_path(job["mjcf"])
    data = mujoco.MjData(model)
    controllers = []
    for a in job["actuators"]:
        bam_model = load_model(a["params"])
        act = bam_model.actuator
        act.kp, act.vin, act.error_gain, act.max_pwm = a["kp"], a["vin"], a["error_gain"], a["max_pwm"]
        controllers.append((a["name"], MujocoController(bam_model, a["name"], model, data)))
    # after every controller: each one's mj_setConst works on the data at qpos0 (bam's Simulator.reset order)
    for a, (_, ctrl) in zip(job["actuators"], controllers, strict=True):
        data.qpos[ctrl.qpos_indexes] = a["q0"]
    mujoco.mj_forward(model, data)
    goals = np.asarray(job["goals"], dtype=float)
    q = np.empty_like(goals)
    dq = np.empty_like(goals)
    for k in range(len(goals)):
        for j, (name, ctrl) in enumerate(controllers):
            q[k, j] = data.qpos[ctrl.qpos_indexes][0]
            dq[k, j] = data.qvel[ctrl.dof_indexes][0]
            ctrl.set_q_target(name, goals[k, j])
            ctrl.update()
        mujoco.mj_step(model, data)
    json.dump({"q": q.tolist(), "dq": dq.tolist(), "mujoco": mujoco.__version__,
               "bam": version("better-actuator-models")}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
