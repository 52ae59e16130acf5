"""`servo-hil actuator export --mjcf`: only an .xml name is written, and the model carries the step it was made
for as `<option timestep>` (MuJoCo's own default, 0.002 s, is not the daemon's 1 kHz)."""

from __future__ import annotations

import subprocess

import mujoco
import pytest

from tests.daemon_process import SERVO_HIL, assert_one_cli_line


@pytest.mark.parametrize(("extra", "timestep"), [([], 0.001), (["--dt", "0.0005"], 0.0005)])
def test_mjcf_runs_at_its_step(tmp_path, extra, timestep):
    out = tmp_path / "mx64.xml"
    r = subprocess.run([*SERVO_HIL, "actuator", "export", "mx64", "--model", "m6", "--mjcf", str(out), *extra],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    m = mujoco.MjModel.from_xml_path(str(out))
    assert m.opt.timestep == timestep and m.opt.integrator == mujoco.mjtIntegrator.mjINT_EULER


@pytest.mark.parametrize(("args", "needles"), [
    (["--mjcf", "x.txt"], ("--mjcf x.txt", ".xml")),
    (["--mjcf", "x.XML.bak"], ("--mjcf x.XML.bak", ".xml")),
    (["--mjcf", "x.xml", "--dt", "0"], ("--dt 0", "> 0")),
    (["--mjcf", "x.xml", "--isaaclab", "x.json", "--dt", "nan"], ("--dt nan",)),
])
def test_bad_mjcf_name_or_step_is_one_line_and_nothing_written(tmp_path, args, needles):
    r = subprocess.run([*SERVO_HIL, "actuator", "export", "mx64", *args], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert_one_cli_line(r, *needles)
    assert not list(tmp_path.iterdir()), "nothing written"
