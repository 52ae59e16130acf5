"""`servo-hil bench loop` (short window): the JSON it prints has the documented structure and sane values.

No timing target is asserted (a shared 2-CPU host decides those). What is checked: every message of the
window arrived once (sequence numbers without gaps, the count the rate gives, nothing malformed), the
Python subscriber and the transport peer of the same run delivered their messages too, latencies are
positive and ordered, and the ratio against the peer is the quotient of the two p99s. The steal and the
figures are in every failure message. The counts the rate gives need a loop that was not stalled: a miss of
theirs while the hypervisor stole >= 2 % is inconclusive (tests/realtime_verdict.py), never a pass; a gap,
a drop or a malformed message fails whatever the host.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from servo_hil.daemon.zmq_io import fifo_allowed
from tests.daemon_process import SERVO_HIL
from tests.realtime_verdict import check, disturbance

RATE_HZ, SECONDS, ACTUATORS = 500.0, 2.0, 3


def test_bench_loop_short_window():
    proc = subprocess.run([*SERVO_HIL, "bench", "loop", "--rate", str(RATE_HZ), "--seconds", str(SECONDS),
                           "--actuators", str(ACTUATORS)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    where = f"steal {doc['steal_fraction']:.4f}: {json.dumps(doc)[:1500]}"
    zmq, peer = doc["zmq"], doc["zmq_peer"]
    expected = RATE_HZ * SECONDS * ACTUATORS
    assert zmq["drops_seq_gaps"] == 0 and zmq["sample_ring_drops"] == 0, where
    assert zmq["malformed"] == 0, where
    assert zmq["subscriber_fifo"] == peer["subscriber_fifo"] == fifo_allowed(10), where   # FIFO where the host allows
    py = doc["zmq_python_subscriber"]       # the same stream, received by Python after the C window
    assert zmq["payload_bytes"] == peer["payload_bytes"] > 100, where       # the peer sends the same sizes
    for side in (zmq, peer, py):
        assert 0 < side["latency_p50_us"] <= side["latency_p99_us"] < 1e6, where
    assert zmq["p99_over_peer_p99"] == pytest.approx(zmq["latency_p99_us"] / peer["latency_p99_us"]), where
    loop = doc["loop"]
    check({"the daemon's window count": zmq["received"] == pytest.approx(expected, rel=0.1),
           "the peer's window count": peer["received"] == pytest.approx(expected, rel=0.1),
           "the Python subscriber's count": py["received"] == pytest.approx(expected, rel=0.1),
           "a wake-up per period": loop["wakeups"] == pytest.approx(RATE_HZ * SECONDS, rel=0.2)},
          where, disturbance(doc["steal_fraction"]))
    assert 0 <= loop["lateness_p50_us"] <= loop["lateness_p99_us"] <= loop["lateness_p999_us"], where
    assert set(doc["targets"]) in ({"inconclusive"}, {"lateness_p50_le_20us", "lateness_p99_le_100us",
                                                      "overruns_lt_0.1pct", "zmq_p99_le_500us", "zmq_zero_drops"})
