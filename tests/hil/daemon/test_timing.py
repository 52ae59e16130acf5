"""Loop timing: medians and overrun fraction with generous margins, only when the host is not stealing.

On shared VMs hypervisor steal produces multi-millisecond stalls that no loop can avoid
(notes/ecosystem.md §2.2), so the verdict is "inconclusive" (skip) when the daemon reports ≥ 2 % steal.
"""

from __future__ import annotations

import time

import pytest

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
    rate = (s1["tick"] - s0["tick"]) / (w1 - w0)
    figures = (f"{rig.name}: {s1['rt_mode']}, lateness p50 {s1['lateness_p50_us']} µs, p99 {s1['lateness_p99_us']} "
               f"µs, max {s1['lateness_max_us']:.0f} µs; window {WINDOW_S} s: {wakeups} wake-ups, {overruns} "
               f"overruns ({100 * overrun_fraction:.2f} %), {rate:.1f} ticks/s; hypervisor steal "
               f"{100 * s1['steal_fraction']:.2f} %; skipped periods {s1['skipped_periods']}; "
               f"sample drops {s1['sample_drops']}")
    print(figures)
    assert wakeups > 0 and s1["lateness_p50_us"] is not None
    if s1["steal_fraction"] >= 0.02:
        pytest.skip(f"inconclusive: hypervisor steal {100 * s1['steal_fraction']:.2f} % ≥ 2 % ({figures})")
    assert s1["lateness_p50_us"] < 200.0, figures
    assert overrun_fraction < 0.05, figures
    assert rate == pytest.approx(1000.0, rel=0.02), figures
    assert s1["sample_drops"] == 0, figures
