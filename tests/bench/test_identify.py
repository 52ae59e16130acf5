"""`servo-hil bench identify --no-bam`: the JSON it prints has the documented structure and consistent values."""

from __future__ import annotations

import json
import subprocess

from tests.daemon_process import SERVO_HIL


def test_bench_identify_without_bam(tmp_path):
    r = subprocess.run([*SERVO_HIL, "bench", "identify", "--no-bam", "--trials", "40", "--models", "m1",
                        "--seeds", "0,1,2", "--out", str(tmp_path / "b.json")],
                       capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc == json.loads((tmp_path / "b.json").read_text())
    assert doc["bam"] == {"available": False, "reason": "skipped (--no-bam)"}
    assert len(doc["train_logs"]) == 8 and len(doc["validation_logs"]) == 4
    runs = doc["models"]["m1"]["identify_seeds"]
    assert [r["seed"] for r in runs] == [0, 1, 2]
    for ours in runs:
        assert 0 < ours["evaluations"] <= 40 and 0 < ours["fit_s"] < ours["wall_s"] and ours["cpu_s"] > 0
        assert sorted(ours["validation_mae_per_log"]) == sorted(doc["validation_logs"])
        assert abs(ours["validation_mae_rad"] - sum(ours["validation_mae_per_log"].values()) / 4) < 1e-15
    summary = doc["models"]["m1"]["identify"]   # the medians over the seeds
    assert summary["runs"] == 3
    for key in ("wall_s", "cpu_s", "train_mae_rad", "validation_mae_rad"):
        assert summary[key] == sorted(r[key] for r in runs)[1]
    assert "bam_fit" not in doc["models"]["m1"]
