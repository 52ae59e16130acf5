"""Robots against other people's code: today's pendulum load, bam's own MuJoCo coupling, MuJoCo's <dcmotor>.

1. A one-joint robot (an MJCF pendulum of the same mass, length and arm mass) equals the kernel's own
   pendulum load to 1e-9 rad over bam's four excitation trajectories (6 s each), MuJoCo's Euler.
2. The 2R arm (config/robots/arm_2r.xml, MX-106 + MX-64 with bam's M4 friction) against bam's own
   `MujocoController.update()` + `mj_step` (better-actuator-models 1.0.2 in bench/.venv-bam) on the
   same MJCF and goals, to round-off; and against an independent replica of that update written here
   (`replica_of_bams_update`), which runs where bam's Python 3.12 venv cannot be made.
3. A 2R arm whose hinges carry MuJoCo's native <dcmotor> actuators: MuJoCo alone versus a robot rig
   importing the same motors (`mjcf = ..., name = ...`), to 1e-9 rad.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import mujoco
import numpy as np
import pytest

from hil.kernel import Kernel
from hil.params import catalog
from hil.params.mjcf import pendulum_inertial, pendulum_mjcf
from hil.robot.rig import Binding, RobotConfig, build_robot
from servo_hil.record.excitation import TRAJECTORIES
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params, load_robot_rig

ROOT = Path(__file__).resolve().parents[3]
ARM_2R = ROOT / "config" / "robots" / "arm_2r.xml"
Q_TOL = 1e-9   # [rad]
DT = 0.001     # [s]


def goals(name: str, n_steps: int, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """bam's excitation trajectory `name` sampled at k·DT: goal [rad] and torque enable."""
    pairs = [TRAJECTORIES[name](k * DT) for k in range(n_steps)]
    return scale * np.array([p[0] for p in pairs]), np.array([1.0 if p[1] else 0.0 for p in pairs])


# -- 1. one joint == the kernel's pendulum -----------------------------------------------------------

def pendulum_xml(mass: float, length: float, arm_mass: float) -> str:
    """bam's MuJoCo pendulum testbench (bam/testbench_mujoco.py `Pendulum`) as MJCF, with MuJoCo's Euler: the
    inertia about the hinge is m·l² + m_a·l²/3 and the gravity torque (m + m_a/2)·g·l·sin q."""
    return pendulum_mjcf(*pendulum_inertial(mass, length, arm_mass), DT, 9.80665, axis="1 0 0")


@pytest.mark.parametrize("trajectory", sorted(TRAJECTORIES))
def test_one_joint_robot_is_the_pendulum_load(tmp_path: Path, trajectory: str) -> None:
    mass, length, arm_mass = 0.5, 0.15, 0.1
    spec = catalog.entry("mx64").actuator()     # datasheet motor: thermal, saturation, damping, encoder
    load = LoadConfig(mass=mass, length=length, arm_mass=arm_mass)
    # one body: a robot's hinge is the output, without the catalog's gear backlash (hil/robot/rig.py)
    params = kernel_params(spec, load, EncoderConfig(), FaultConfig(), "euler") | {"backlash": 0.0}
    assert params["damping_b1"] > 0 and params["armature"] > 0   # the joint's damping and armature matter
    u, enable = goals(trajectory, 6000)

    pendulum = Kernel(1, DT)
    pendulum.set_params(0, params)
    ref = pendulum.run(u, enable)

    (tmp_path / "pendulum.xml").write_text(pendulum_xml(mass, length, arm_mass))
    robot = build_robot(RobotConfig(mjcf="pendulum.xml"), tmp_path,
                        [Binding("hinge", params, "actuators[0] (hinge)")], DT)
    out = robot.engine.run(u[:, None], enable[:, None])

    assert np.ptp(ref["theta"][:, 0]) > 0.5                    # it moves
    err = np.max(np.abs(out["theta"][:, 0] - ref["theta"][:, 0]))
    assert err < Q_TOL, f"{trajectory}: max |Δθ| = {err:.3e} rad"
    assert np.max(np.abs(out["omega"][:, 0] - ref["omega"][:, 0])) < 1e-6
    assert np.max(np.abs(out["torque"][:, 0] - ref["torque"][:, 0])) < 1e-6
    assert np.max(np.abs(out["temperature"][:, 0] - ref["temperature"][:, 0])) < 1e-9


def test_one_joint_robot_needs_the_servos_armature(tmp_path: Path) -> None:
    """The comparison above can fail: a robot whose hinge lacks the servo's reflected inertia drifts away."""
    spec = catalog.entry("mx64").actuator()
    params = kernel_params(spec, LoadConfig(mass=0.5, length=0.15, arm_mass=0.1), EncoderConfig(), FaultConfig(),
                           "euler")
    u, enable = goals("sin_sin", 2000)
    pendulum = Kernel(1, DT)
    pendulum.set_params(0, params)
    ref = pendulum.run(u, enable)
    (tmp_path / "pendulum.xml").write_text(pendulum_xml(0.5, 0.15, 0.1))
    robot = build_robot(RobotConfig(mjcf="pendulum.xml"), tmp_path,
                        [Binding("hinge", params, "actuators[0] (hinge)")], DT)
    robot.model.dof_armature[0] = 0.0
    out = robot.engine.run(u[:, None], enable[:, None])
    assert np.max(np.abs(out["theta"][:, 0] - ref["theta"][:, 0])) > 1e-4


# -- 2. the 2R arm == bam's MujocoController ----------------------------------------------------------

ARM = (("shoulder", "mx106"), ("elbow", "mx64"))
BAM_MODEL = "m4"     # the model the paper finds best on its Dynamixel 2R arm (§VI-B)


def arm_goals(n_steps: int) -> np.ndarray:
    """Goals (T, 2): a swing of the shoulder and a faster, wider one of the elbow, both through gravity."""
    t = np.arange(n_steps) * DT
    return np.stack([0.9 * np.sin(2 * np.pi * 0.4 * t) + 0.3 * np.sin(2 * np.pi * 1.3 * t),
                     1.2 * np.sin(2 * np.pi * 0.7 * t + 0.5) * np.minimum(t, 1.0)], axis=1)


def bam_python() -> Path:
    """bench/.venv-bam's Python with bam 1.0.2 and the MuJoCo this checkout steps (bam leaves it unpinned)."""
    from bench.kernel import bam_python as make

    py, why = make()
    if py is None:
        pytest.skip(f"bam 1.0.2 unavailable: {why}")
    probe = [str(py), "-c", "import mujoco; print(mujoco.__version__)"]
    if subprocess.run(probe, capture_output=True, text=True, check=False).stdout.strip() != mujoco.__version__:
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            f"mujoco=={mujoco.__version__}"], capture_output=True, text=True, timeout=900, check=False)
        if r.returncode != 0:
            pytest.skip(f"mujoco {mujoco.__version__} not installable in bam's venv: {r.stderr.strip()[-300:]}")
    return py


def replica_of_bams_update(peers: list[dict], goals: np.ndarray) -> np.ndarray:
    """An independent replica of bam's `MujocoController.update()` + `mj_step` (bam/mujoco.py, bam/actuator.py
    `VoltageControlledActuator`, bam/model.py `compute_frictions` for an M4 set: load-dependent with Stribeck,
    neither directional nor quadratic), written from bam's source for hosts without bam; q (T, n) before each step."""
    model = mujoco.MjModel.from_xml_path(str(ARM_2R))
    data = mujoco.MjData(model)
    sets = [json.loads(Path(p["params"]).read_text()) for p in peers]
    assert all(b["model"] == "m4" for b in sets)
    acts = [model.actuator(p["name"]).id for p in peers]
    dofs = [int(model.jnt_dofadr[model.actuator_trnid[a][0]]) for a in acts]
    qadr = [int(model.jnt_qposadr[model.actuator_trnid[a][0]]) for a in acts]
    for dof, b in zip(dofs, sets, strict=True):
        model.dof_armature[dof] = b["armature"]
    mujoco.mj_setConst(model, data)
    for qa, p in zip(qadr, peers, strict=True):
        data.qpos[qa] = p["q0"]
    mujoco.mj_forward(model, data)
    q = np.empty_like(goals)
    for k in range(len(goals)):
        for j, (p, b, a, dof, qa) in enumerate(zip(peers, sets, acts, dofs, qadr, strict=True)):
            qj, dqj = data.qpos[qa], data.qvel[dof]
            q[k, j] = qj
            duty = min(max((goals[k, j] - qj) * p["kp"] * p["error_gain"], -p["max_pwm"]), p["max_pwm"])
            volts = p["vin"] * duty
            data.ctrl[a] = b["kt"] * volts / b["R"] - b["kt"] ** 2 * dqj / b["R"]
            rows = (data.efc_type == mujoco.mjtConstraint.mjCNSTR_FRICTION_DOF) & (data.efc_id == dof)
            tau_e = -data.qfrc_bias[dof] + data.qfrc_constraint[dof] - np.sum(data.efc_force[rows])
            load = abs(tau_e - data.qfrc_actuator[dof])
            stribeck = math.exp(-(abs(dqj / b["dtheta_stribeck"]) ** b["alpha"]))
            model.dof_frictionloss[dof] = (b["friction_base"] + b["load_friction_base"] * load
                                           + stribeck * b["friction_stribeck"]
                                           + b["load_friction_stribeck"] * load * stribeck)
            model.dof_damping[dof] = b["friction_viscous"]
        mujoco.mj_step(model, data)
    return q


def test_2r_arm_matches_bams_mujoco_controller(tmp_path: Path, bam_params: Path) -> None:
    n_steps = 5000
    g = arm_goals(n_steps)
    bindings, peers = [], []
    for j, (joint, name) in enumerate(ARM):
        entry = catalog.entry(name)
        spec = entry.actuator(BAM_MODEL).bam_only()
        params = kernel_params(spec, LoadConfig(), EncoderConfig(), FaultConfig(), "euler")
        bindings.append(Binding(joint, params, f"actuators[{j}] ({joint})", theta=0.1 * (j + 1)))
        fw = entry.firmware
        peers.append({"name": joint, "params": str(bam_params / name / f"{BAM_MODEL}.json"),
                      "kp": fw["kp"], "vin": fw["supply_v"], "error_gain": fw["error_gain"],
                      "max_pwm": fw["max_duty"], "q0": 0.1 * (j + 1)})
    robot = build_robot(RobotConfig(mjcf=ARM_2R.name), ARM_2R.parent, bindings, DT)
    assert robot.engine.kernel.get_params(0)["law"] == bindings[0].params["law"]
    out = robot.engine.run(g)

    # the replica first: it runs wherever MuJoCo does
    q_replica = replica_of_bams_update(peers, g)
    assert np.ptp(q_replica[:, 0]) > 0.5 and np.ptp(q_replica[:, 1]) > 0.5
    err = np.max(np.abs(out["theta"] - q_replica))
    assert err < Q_TOL, f"replica: max |Δq| = {err:.3e} rad"

    py = bam_python()
    job = {"mjcf": str(ARM_2R), "joints": peers, "goals": g.tolist()}
    r = subprocess.run([str(py), str(ROOT / "bench" / "peers" / "bam_mujoco.py")], input=json.dumps(job),
                       capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    peer = json.loads(r.stdout)
    assert peer["mujoco"] == mujoco.__version__, "bam's venv must step the same MuJoCo"
    q_bam = np.asarray(peer["q"])

    assert np.ptp(q_bam[:, 0]) > 0.5 and np.ptp(q_bam[:, 1]) > 0.5
    err = np.max(np.abs(out["theta"] - q_bam))
    assert err < Q_TOL, f"max |Δq| = {err:.3e} rad"
    # the friction budget is at work: the robot without it leaves bam's trajectory
    assert np.max(np.abs(out["friction_torque"])) > 0.05


# -- 3. MuJoCo's own <dcmotor> == the robot rig importing it ----------------------------------------

DCMOTOR_ARM = """<mujoco model="arm_2r_dcmotor">
  <compiler inertiafromgeom="false"/>
  <option timestep="0.001" integrator="Euler" gravity="0 0 -9.81"/>
  <worldbody>
    <body name="upper_arm" pos="0 0 0.5">
      <joint name="shoulder" type="hinge" axis="1 0 0"/>
      <inertial pos="0 0 -0.14" mass="0.23" diaginertia="0.0011 0.0011 0.0001"/>
      <body name="forearm" pos="0 0 -0.2">
        <joint name="elbow" type="hinge" axis="1 0 0"/>
        <inertial pos="0 0 -0.17" mass="0.28" diaginertia="0.0009 0.0009 0.00005"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <dcmotor name="shoulder_motor" joint="shoulder" resistance="2.5" motorconst="0.02" gear="150"
             armature="3e-7" damping="2e-6" thermal="4 0.3 0 0.004 25 30" inductance="0.002"/>
    <dcmotor name="elbow_motor" joint="elbow" resistance="3" motorconst="0.018" gear="120"
             armature="2e-7" saturation="0 0.9"/>
  </actuator>
</mujoco>
"""

DCMOTOR_RIG = """name = "dcmotor_arm"
[loop]
rate_hz = 1000
[robot]
mjcf = "arm.xml"
[[actuators]]
joint = "shoulder"
mjcf = "arm.xml"
name = "shoulder_motor"
initial = { theta = 0.2 }
[[actuators]]
joint = "elbow"
mjcf = "arm.xml"
name = "elbow_motor"
initial = { theta = -0.3 }
"""


def test_dcmotor_arm_matches_mujoco(tmp_path: Path) -> None:
    (tmp_path / "arm.xml").write_text(DCMOTOR_ARM)
    (tmp_path / "rig.toml").write_text(DCMOTOR_RIG)
    n_steps = 3000
    t = np.arange(n_steps) * DT
    volts = np.stack([6.0 * np.sin(2 * np.pi * 0.8 * t), 5.0 * np.sign(np.sin(2 * np.pi * 1.1 * t + 0.4))], axis=1)

    model = mujoco.MjModel.from_xml_string(DCMOTOR_ARM)
    data = mujoco.MjData(model)
    data.qpos[:] = (0.2, -0.3)
    q_mj = np.empty((n_steps, 2))
    for k in range(n_steps):
        q_mj[k] = data.qpos
        data.ctrl[:] = volts[k]
        mujoco.mj_step(model, data)

    _, _, robot = load_robot_rig(tmp_path / "rig.toml")
    assert robot.model.nu == 2 and all(robot.model.actuator(i).name.startswith("servo-hil/") for i in range(2))
    out = robot.engine.run(volts)
    assert np.ptp(q_mj[:, 0]) > 0.3 and np.ptp(q_mj[:, 1]) > 0.3
    err = np.max(np.abs(out["theta"] - q_mj))
    assert err < Q_TOL, f"max |Δq| = {err:.3e} rad"
    assert math.isclose(robot.timestep, 0.001)
