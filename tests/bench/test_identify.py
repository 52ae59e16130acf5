"""`bench/identify.py --no-bam`: the JSON it prints has the documented structure and consistent values."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "identify.py"


def test_bench_identify_without_bam(tmp_path):
    r = subprocess.run([sys.executable, str(BENCH), "--no-bam", "--trials", "40", "--models", "m1",
                        "--out", str(tmp_path / "b.json")], capture_output=True, text=True, timeout=600, check=False)
    if "XL330 processed logs are in none of" in r.stderr:
        pytest.skip("the XL330 logs are not available")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc == json.loads((tmp_path / "b.json").read_text())
    assert doc["bam"] == {"available": False, "reason": "skipped (--no-bam)"}
    assert len(doc["train_logs"]) == 8 and len(doc["validation_logs"]) == 4
    ours = doc["models"]["m1"]["identify"]
    assert 0 < ours["evaluations"] <= 40 and 0 < ours["fit_s"] < ours["wall_s"] and ours["cpu_s"] > 0
    assert sorted(ours["validation_mae_per_log"]) == sorted(doc["validation_logs"])
    assert abs(ours["validation_mae_rad"] - sum(ours["validation_mae_per_log"].values()) / 4) < 1e-15
    assert "bam_fit" not in doc["models"]["m1"]
