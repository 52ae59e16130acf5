"""`python -m bench.soak` (make soak runs it for an hour) for a short run: the JSON it prints is complete, the
server stayed up under the 1 kHz dynamixel-sdk loop, its RSS did not grow by 5 MB, and the echo peer ran under the
same client. Failure counts and lateness are timing: the JSON reports them, this test does not judge them.
"""

from __future__ import annotations

import json
import subprocess
import sys

SECONDS = 15   # per server; with the warm-ups and the start-up the run stays under a minute


def test_soak_bench_reports_both_servers():
    out = subprocess.run([sys.executable, "-m", "bench.soak", "--seconds", str(SECONDS)], capture_output=True,
                         text=True, timeout=240, check=True)
    doc = json.loads(out.stdout)
    print(json.dumps(doc, indent=1))
    ours, peer = doc["runs"]["servo_hil"], doc["runs"]["echo_peer"]
    for run in (ours, peer):
        assert run["cycles"] > 0 and run["seconds"] == SECONDS
        assert run["failures"] == sum(run["failures_by_class"].values())
        assert set(run["lateness"]) == {"p50_us", "p99_us", "mean_us", "max_us"}
        assert run["overruns"] <= run["cycles"]
    assert ours["server_exit_code"] is None, "the daemon died under the control loop"
    assert doc["rss_growth_kb"] is not None and doc["rss_growth_kb"] < 5 * 1024
    assert doc["targets"]["server_alive"] and doc["targets"]["rss_growth_below_5MB"]
    assert doc["config"]["servos"] == 12 and 0.0 <= doc["steal_max_fraction"] < 1.0


def test_soak_bench_refuses_a_bad_duration():
    out = subprocess.run([sys.executable, "-m", "bench.soak", "--seconds", "0"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stderr.strip() == "--seconds must be > 0, got 0.0"
    assert "Traceback" not in out.stderr
