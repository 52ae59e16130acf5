"""The mirror demo of docs/mirror.md, run as a user runs it: `python examples/mirror_demo.py --out DIR` starts the
"real" daemon (config/rigs/mirror_demo_real.toml, bam m6), enables its torque, starts `servo-hil mirror`
(config/rigs/mirror_demo.toml, twin bam m1), drives the mirror with dynamixel-sdk, and runs `servo-hil report`. The
twin never sees a Torque Enable write from the controller: it moves only because it took the real servo's torque as
the mirror started. The two friction models differ, so the report shows a gap, and no disagreement on enable or
mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servo_hil.logs.mcap import read_side_by_side

ROOT = Path(__file__).resolve().parents[3]


def test_the_mirror_demo_runs_end_to_end(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "examples/mirror_demo.py"), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "goal +0.60 rad: the real servo reports" in run.stdout and "sim vs real" in run.stdout
    assert "warning" not in run.stdout
    doc = json.loads((tmp_path / "report/report.json").read_text())
    [row] = doc["rows"]
    assert row["joint"] == "mx64" and row["samples"] >= 50
    assert doc["state_disagreements"] == [] and doc["warnings"] == []
    assert row["mae_rad"] > 1e-3                   # m1 and m6 differ: the report shows the gap
    assert (tmp_path / "report" / row["plot"]).stat().st_size > 0
    log = read_side_by_side(tmp_path / "logs")
    [attach] = log["/bus/mx64/events"]
    assert attach["reason"] == "attach" and attach["real"]["enable"] == 1 and attach["sim_before"]["enable"] == 0
    real, sim = log["/real/mx64/state"], log["/sim/mx64/state"]
    # both went to each goal and back to 0 (the last goal, held 1.5 s): the twin was on without being told
    assert real[-1]["position"] == pytest.approx(0.0, abs=0.05) and sim[-1]["position"] == pytest.approx(0.0, abs=0.1)
    assert max(m["position"] for m in sim) > 0.5 and min(m["position"] for m in sim) < -0.5
    assert all(m["enable"] is True and m["mode"] == 3 for m in sim + real)
