"""Loop timing: medians and overrun fraction with generous margins, only when the host is not stealing.

On shared VMs hypervisor steal produces multi-millisecond stalls that no loop can avoid
(the steal column of /proc/stat, proc(5)), so the verdict is "inconclusive" (skip) when the daemon reports ≥ 2 % steal.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from servo_hil.daemon.zmq_io import fifo_allowed

from . import ok

WINDOW_S = 3.0


def test_loop_lateness_and_overruns(make_rig, start_daemon):
    rig = make_rig(joints=("arm", "mx", "erob"))
    start_daemon(rig)
    time.sleep(0.3)  # start-up (imports, first MQTT-less status) out of the window
    s0, w0 = ok(rig.cmd, "status")["status"], time.monotonic()
    time.sleep(WINDOW_S)
    s1, w1 = ok(rig.cmd, "status")["status"], time.monotonic()
    wakeups = s1["wakeups"] - s0["wakeups"]
    overruns = s1["overruns"] - s0["overruns"]
    overrun_fraction = overruns / max(wakeups, 1)
    skipped = s1["skipped_periods"] - s0["skipped_periods"]
    # periods per second: a period the loop skipped after a stall (counted, not caught up) is not a tick
    rate = (s1["tick"] - s0["tick"] + skipped) / (w1 - w0)
    figures = (f"{rig.name}: {s1['rt_mode']}, lateness p50 {s1['lateness_p50_us']} µs, p99 {s1['lateness_p99_us']} "
               f"µs, max {s1['lateness_max_us']:.0f} µs; window {WINDOW_S} s: {wakeups} wake-ups, {overruns} "
               f"overruns ({100 * overrun_fraction:.2f} %), {rate:.1f} periods/s; hypervisor steal "
               f"{100 * s1['steal_fraction']:.2f} %; skipped periods {skipped}; "
               f"sample drops {s1['sample_drops']}")
    print(figures)
    assert wakeups > 0 and s1["lateness_p50_us"] is not None
    if s1["steal_fraction"] >= 0.02:
        pytest.skip(f"inconclusive: hypervisor steal {100 * s1['steal_fraction']:.2f} % ≥ 2 % ({figures})")
    assert s1["lateness_p50_us"] < 200.0, figures
    assert overrun_fraction < 0.05, figures
    assert rate == pytest.approx(1000.0, rel=0.02), figures
    assert s1["sample_drops"] == 0, figures


def test_stream_threads_run_one_below_the_loop(make_rig, start_daemon):
    """The state publisher and ZeroMQ's I/O threads carry every message: with FIFO allowed they run at the
    loop's priority − 1 (the rig's default 50 → 49), like the bus threads; without, the daemon runs anyway."""
    rig = make_rig()
    d = start_daemon(rig)
    threads = {}
    for task in Path(f"/proc/{d.proc.pid}/task").iterdir():
        tid = int(task.name)
        threads[tid] = ((task / "comm").read_text().strip(), os.sched_getscheduler(tid),
                        os.sched_getparam(tid).sched_priority)
    fifo = sorted((prio, comm) for comm, policy, prio in threads.values() if policy == os.SCHED_FIFO)
    io = [(policy, prio) for comm, policy, prio in threads.values() if comm.startswith("ZMQbg/IO")]
    assert io, f"no ZeroMQ I/O thread among {threads}"
    if not fifo_allowed(1):
        assert not fifo, f"FIFO refused to the tests but the daemon has {fifo}"
        return
    # priorities as far as this host's RLIMIT_RTPRIO allows them (root: all)
    if fifo_allowed(49):
        assert io == [(os.SCHED_FIFO, 49)] * len(io), threads
        # at 49 at least the publisher beside ZeroMQ's I/O and reaper threads
        assert sum(1 for prio, comm in fifo if prio == 49 and not comm.startswith("ZMQbg")) >= 1, fifo
    else:
        assert all(policy != os.SCHED_FIFO for policy, _ in io), threads
    if fifo_allowed(50):
        assert fifo[-1][0] == 50, fifo   # the loop
    assert d.alive
