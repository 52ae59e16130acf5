"""`servo-hil bench soak` (make soak runs it for an hour) for a short run: the JSON it prints (and writes to `--out`)
is complete, the server stayed up under the 1 kHz dynamixel-sdk loop, its RSS did not grow by 5 MB, and the echo
peer ran under the same client. Failure counts and lateness are timing: the JSON reports them, this test does not
judge them.
"""

from __future__ import annotations

import json
import subprocess

from tests.daemon_process import SERVO_HIL, assert_one_cli_line

SECONDS = 60   # per server, the bounded soak CI runs (make soak runs an hour)


def test_soak_bench_reports_both_servers(tmp_path):
    out = subprocess.run([*SERVO_HIL, "bench", "soak", "--seconds", str(SECONDS), "--out", str(tmp_path / "soak.json")],
                         capture_output=True, text=True, timeout=480, check=True)
    doc = json.loads(out.stdout)
    print(json.dumps(doc, indent=1))
    assert json.loads((tmp_path / "soak.json").read_text()) == doc
    ours, peer = doc["runs"]["servo_hil"], doc["runs"]["echo_peer"]
    for run in (ours, peer):
        assert run["cycles"] > 0 and run["seconds"] == SECONDS
        assert run["failures"] == sum(run["failures_by_class"].values())
        assert set(run["lateness"]) == {"p50_us", "p99_us", "mean_us", "max_us"}
        assert run["overruns"] <= run["cycles"]
    assert ours["server_exit_code"] is None, "the daemon died under the control loop"
    server = ours["server"]    # the daemon's own view of the bus: nothing isolated, no reply left unread
    assert server["errors_isolated"] == 0 and server["wire"]["replies_dropped"] == 0, server
    assert set(server["wire"]) == {"partial_packets_dropped", "crc_errors", "garbage_bytes", "late_replies",
                                   "max_reply_late_ms", "replies_dropped"}
    assert doc["rss_growth_kb"] is not None and doc["rss_growth_kb"] < 5 * 1024
    assert doc["targets"]["server_alive"] and doc["targets"]["rss_growth_below_5MB"]
    assert doc["config"]["servos"] == 12 and 0.0 <= doc["steal_max_fraction"] < 1.0


def test_soak_bench_refuses_a_bad_duration():
    out = subprocess.run([*SERVO_HIL, "bench", "soak", "--seconds", "0"], capture_output=True, text=True, timeout=60)
    line = assert_one_cli_line(out, "--seconds 0: must be > 0")
    assert "Traceback" not in out.stderr, line
