"""Robot rigs from the command line: `servo-hil simulate` for several joints, and one line, exit 2, for bad input."""

from __future__ import annotations

import csv
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from servo_hil.rig import load_robot_rig
from tests.daemon_process import SERVO_HIL

ROOT = Path(__file__).resolve().parents[3]
ARM_2R = ROOT / "config" / "robots" / "arm_2r.xml"

RIG = """name = "arm"
[loop]
rate_hz = 1000
[robot]
mjcf = "{mjcf}"
[[actuators]]
joint = "shoulder"
catalog = "mx106"
model = "m4"
[[actuators]]
joint = "elbow"
catalog = "mx64"
model = "m4"
"""


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SERVO_HIL, *args], capture_output=True, text=True, timeout=300, check=False)


def write_rig(tmp_path: Path, text: str = RIG, mjcf: str = str(ARM_2R)) -> Path:
    path = tmp_path / "rig.toml"
    path.write_text(text.replace("{mjcf}", mjcf))
    return path


def test_simulate_two_joints(tmp_path: Path) -> None:
    rig = write_rig(tmp_path)
    t = [k * 0.001 for k in range(1500)]
    with (tmp_path / "in.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t", "shoulder", "elbow", "elbow.enable"])
        for k, tk in enumerate(t):
            w.writerow([repr(tk), repr(0.8 * math.sin(2 * math.pi * tk)), "0.5", "1" if k < 1000 else "0"])
    r = cli("simulate", str(rig), "--input", str(tmp_path / "in.csv"), "--out", str(tmp_path / "out.csv"))
    assert r.returncode == 0, r.stderr
    with (tmp_path / "out.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(t)
    for joint in ("shoulder", "elbow"):
        for col in ("theta", "omega", "torque", "current", "friction_torque", "temperature"):
            assert f"{joint}.{col}" in rows[0]
    shoulder = np.array([float(r["shoulder.theta"]) for r in rows])
    elbow_torque = np.array([float(r["elbow.torque"]) for r in rows])
    assert np.ptp(shoulder) > 0.5                        # the shoulder follows its goal
    assert np.all(elbow_torque[1000:] == 0.0)            # torque off from row 1000 on
    assert np.max(np.abs(elbow_torque[:1000])) > 0.1

    # the same run through the library: OUT.csv's columns are the engine's, bit for bit
    _, _, robot = load_robot_rig(rig)
    u = np.stack([0.8 * np.sin(2 * np.pi * np.asarray(t)), np.full(len(t), 0.5)], axis=1)
    en = np.ones_like(u)
    en[1000:, 1] = 0.0
    out = robot.engine.run(u, en)
    assert np.array_equal(out["theta"][:, 0], shoulder)


BAD_JOINT_ARM = """<mujoco>
  <worldbody>
    <body name="a"><joint name="shoulder" type="hinge"/><geom size="0.05"/>
      <body name="b" pos="0 0 -0.2"><joint name="elbow" type="slide"/><geom size="0.05"/></body>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize(("case", "expect"), [
    ("unparsable", "robot.mjcf:"),
    ("missing_file", "robot.mjcf:"),
    ("unknown_joint", "actuators[1] (elbow).joint: no joint 'elbow'"),
    ("twice", "joint name 'shoulder' is used twice"),
    ("slide", "actuators[1] (elbow).joint: 'elbow' is a slide joint"),
    ("load", "actuators[0] (shoulder).load:"),
    ("timestep", "does not divide a tick"),
    ("integrator", "loop: a robot's integrator and physics step are its MJCF's"),
    ("poses", "actuators[1] (poses).joint: 'poses' is the robot's poses topic"),
])
def test_bad_robot_rig_is_one_line_exit_2(tmp_path: Path, case: str, expect: str) -> None:
    text, mjcf = RIG, str(ARM_2R)
    if case == "unparsable":
        (tmp_path / "bad.xml").write_text("<mujoco><worldbody><body><joint name='x'/></body></worldbody>")
        mjcf = "bad.xml"
    elif case == "missing_file":
        mjcf = "nowhere.xml"
    elif case == "unknown_joint":
        (tmp_path / "one.xml").write_text('<mujoco><worldbody><body><joint name="shoulder"/><geom size="0.05"/>'
                                          '</body></worldbody></mujoco>')
        mjcf = "one.xml"
    elif case == "twice":
        text = RIG.replace('joint = "elbow"', 'joint = "shoulder"')
    elif case == "slide":
        (tmp_path / "slide.xml").write_text(BAD_JOINT_ARM)
        mjcf = "slide.xml"
    elif case == "load":
        text = RIG.replace('model = "m4"\n', 'model = "m4"\nload = { mass = 0.2, length = 0.1 }\n', 1)
    elif case == "timestep":
        text = RIG.replace("rate_hz = 1000", "rate_hz = 700")
    elif case == "integrator":
        text = RIG.replace("rate_hz = 1000", 'rate_hz = 1000\nintegrator = "bam"')
    elif case == "poses":        # a hinge named like the poses topic <rig>/poses
        (tmp_path / "poses.xml").write_text(ARM_2R.read_text().replace('"elbow"', '"poses"'))
        text, mjcf = RIG.replace('joint = "elbow"', 'joint = "poses"'), "poses.xml"
    rig = write_rig(tmp_path, text, mjcf)
    (tmp_path / "in.csv").write_text("t,shoulder,elbow\n0,0,0\n")
    r = cli("simulate", str(rig), "--input", str(tmp_path / "in.csv"), "--out", str(tmp_path / "out.csv"))
    assert r.returncode == 2, r.stderr
    lines = (r.stderr + r.stdout).strip().splitlines()
    assert len(lines) == 1, lines
    assert expect in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    if case in ("unparsable", "missing_file"):
        assert mjcf in lines[0]                       # names the file
    if case == "unparsable":
        assert "XML" in lines[0]                      # MuJoCo's message


def test_bad_input_csv_names_the_joint(tmp_path: Path) -> None:
    rig = write_rig(tmp_path)
    (tmp_path / "in.csv").write_text("t,shoulder\n0,0\n")
    r = cli("simulate", str(rig), "--input", str(tmp_path / "in.csv"), "--out", str(tmp_path / "out.csv"))
    assert r.returncode == 2
    assert "missing column 'elbow'" in r.stderr + r.stdout


def test_bench_robot_prints_its_json(tmp_path: Path) -> None:
    r = cli("bench", "robot", "--rig", str(ROOT / "config" / "rigs" / "desktop_arm.toml"), "--seconds", "0.05",
            "--repeats", "1", "--no-peer", "--out", str(tmp_path / "bench.json"))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert doc["joints"] == ["waist", "shoulder", "elbow", "wrist_pitch", "wrist_roll", "gripper"]
    assert doc["physics_steps_per_s"] > 0 and 0.0 < doc["mj_step_share"] < 1.0
    assert doc["contacts_at_end"] > 0          # the arm stands on the table: contacts are on
