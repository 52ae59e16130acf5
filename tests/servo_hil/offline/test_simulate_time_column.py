"""`servo-hil simulate` writes `t` = k·dt as the step's decimals (0.57, not 0.5700000000000001), for one actuator
and for a robot's joints, and the column still reads back as k·dt."""

from __future__ import annotations

import csv
from pathlib import Path

from typer.testing import CliRunner

from servo_hil.cli.main import app

REPO = Path(__file__).resolve().parents[3]
RIG = """[actuator]
catalog = "mx64"
[load]
inertia = 0.01
[sim]
dt = 0.01
"""


def _t_column(path: Path) -> list[str]:
    with path.open() as fh:
        return [row[0] for row in csv.reader(fh)][1:]


def _check(texts: list[str], dt: float, decimals: int) -> None:
    assert len(texts) > 60
    for k, text in enumerate(texts):
        assert len(text.partition(".")[2]) <= decimals, text          # no float noise past the step's decimals
        assert abs(float(text) - k * dt) <= 1e-12, (k, text)


def test_actuator_t_is_the_steps_decimals(tmp_path):
    (tmp_path / "rig.toml").write_text(RIG)
    (tmp_path / "in.csv").write_text("t,u\n" + "".join(f"{k * 0.01!r},0.5\n" for k in range(100)))
    res = CliRunner().invoke(app, ["simulate", str(tmp_path / "rig.toml"), "--input", str(tmp_path / "in.csv"),
                                   "--out", str(tmp_path / "out.csv")])
    assert res.exit_code == 0, res.stderr
    texts = _t_column(tmp_path / "out.csv")
    assert texts[57] == "0.57" and repr(57 * 0.01) == "0.5700000000000001"   # the noise that was printed
    _check(texts, 0.01, 2)


def test_robot_t_is_the_steps_decimals(tmp_path):
    joints = ("waist", "shoulder", "elbow", "wrist_pitch", "wrist_roll", "gripper")
    (tmp_path / "in.csv").write_text("t," + ",".join(joints) + "\n" +
                                     "".join(f"{k * 0.001!r}" + ",0.0" * len(joints) + "\n" for k in range(120)))
    res = CliRunner().invoke(app, ["simulate", str(REPO / "config/rigs/desktop_arm.toml"), "--input",
                                   str(tmp_path / "in.csv"), "--out", str(tmp_path / "out.csv")])
    assert res.exit_code == 0, res.stderr
    _check(_t_column(tmp_path / "out.csv"), 0.001, 3)
