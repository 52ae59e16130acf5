"""An output path in a folder that does not exist yet (the README tour writes under `tour/`) is written, its
folder created, by every command that writes a file."""

from __future__ import annotations

import json
from pathlib import Path

import mujoco
from typer.testing import CliRunner

from servo_hil.cli.main import app

RIG = """[actuator]
catalog = "mx64"
[load]
inertia = 0.01
[sim]
dt = 0.001
"""


def _ok(*argv: str) -> None:
    res = CliRunner().invoke(app, list(argv))
    assert res.exit_code == 0, (argv, res.stdout, res.stderr)


def test_file_outputs_create_their_folder(tmp_path, xl330_logs):
    tour = tmp_path / "tour"
    (tmp_path / "rig.toml").write_text(RIG)
    (tmp_path / "in.csv").write_text("t,u\n0.0,0.1\n0.001,0.1\n0.002,0.1\n")
    _ok("simulate", str(tmp_path / "rig.toml"), "--input", str(tmp_path / "in.csv"), "--out", str(tour / "a/step.csv"))
    assert (tour / "a/step.csv").read_text().startswith("t,u,")
    log = sorted(xl330_logs.glob("*.json"))[0]
    _ok("replay", str(log), "--actuator", "xl330_m288", "--model", "m6", "--out", str(tour / "b/r.json"))
    assert json.loads((tour / "b/r.json").read_text())["mae"] > 0
    _ok("actuator", "export", "mx64", "--mjcf", str(tour / "c/x.xml"), "--isaaclab", str(tour / "d/x.json"))
    mujoco.MjModel.from_xml_path(str(tour / "c/x.xml"))
    assert json.loads((tour / "d/x.json").read_text())["saturation_effort"] > 0
    _ok("actuator", "plot", "mx64", "--out", str(tour / "e/x.png"))
    assert (tour / "e/x.png").read_bytes()[:4] == b"\x89PNG"


def test_gitignore_ignores_the_tour_folder():
    lines = (Path(__file__).resolve().parents[2] / ".gitignore").read_text().splitlines()
    assert "tour/" in lines
