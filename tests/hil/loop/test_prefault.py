"""The real-time loop never takes a page fault on its own rings: the sample ring (and the command ring and shared
counters) are mapped with every page in place when the loop is built (hil/loop/rt.pyx `prefaulted`).

Counted, not timed: the loop thread's minor page faults (/proc/self/task/<tid>/stat field 10, minflt, proc(5))
from its first ticks until it has written every slot of the sample ring once. Each 4 KiB page of the ring the
loop were the first to write would be one minor fault in that thread (demand paging), as it was with calloc.
"""

from __future__ import annotations

import threading
import time

from hil.kernel import Kernel
from hil.loop.rt import RealtimeLoop

ACTUATORS = 64
PAGE = 4096
SAMPLE_BYTES = 17 * 8            # hil/loop/publisher.pxd Sample: 17 fields of 8 bytes
CAPACITY = 1 << 16               # the ring of every daemon (RealtimeLoop's default)


def minor_faults(tid: int) -> int:
    """minflt of thread `tid` of this process (the 10th field of its stat: the 8th after the command name)."""
    with open(f"/proc/self/task/{tid}/stat") as fh:
        return int(fh.read().rpartition(")")[2].split()[7])


def wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s} s"
        time.sleep(0.005)


def test_the_loop_writes_its_whole_sample_ring_without_page_faults():
    loop = RealtimeLoop(Kernel(ACTUATORS, 1e-3), 1000.0, fifo_priority=0, sample_capacity=CAPACITY)
    thread = threading.Thread(target=loop.run, name="servo-hil-loop-test")
    thread.start()
    try:
        wait_for(lambda: loop.tick >= 2, "the first ticks")
        before = minor_faults(thread.native_id)
        # nobody drains the ring: the loop fills every slot once, then drops its samples (sample_drops)
        wait_for(lambda: loop.telemetry()["sample_drops"] > 0, "a full sample ring")
        faults = minor_faults(thread.native_id) - before
    finally:
        loop.stop()
        thread.join(5.0)
    ring_pages = CAPACITY * SAMPLE_BYTES // PAGE
    assert faults < ring_pages // 20, f"{faults} minor faults in the loop thread while it wrote {ring_pages} pages"
