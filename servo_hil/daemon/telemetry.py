"""Loop telemetry: lateness percentiles from the 1 µs histogram, overruns, CPU and hypervisor steal.

Steal is read from /proc/stat and reported, never hidden: on shared hosts the tails of the lateness
distribution come from it (proc(5), /proc/stat `steal`).
"""

from __future__ import annotations

import os
import time

import numpy as np


def percentile_us(hist: np.ndarray, q: float) -> float | None:
    """q-quantile (0–1) of a 1 µs-bin lateness histogram [µs]; None when it is empty."""
    total = int(hist.sum())
    if total == 0:
        return None
    return float(np.searchsorted(np.cumsum(hist), q * total, side="left"))


def cpu_jiffies() -> tuple[int, int]:
    """(steal, total) jiffies over all CPUs since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    steal = fields[7] if len(fields) > 7 else 0
    return steal, sum(fields[:8])


class StealMeter:
    """Fraction of CPU time the hypervisor stole since `start()` (0 when /proc/stat has no steal)."""

    def __init__(self) -> None:
        self.steal0, self.total0 = cpu_jiffies()

    def fraction(self) -> float:
        steal, total = cpu_jiffies()
        dt = total - self.total0
        return (steal - self.steal0) / dt if dt > 0 else 0.0


class LoopStats:
    """Status figures of a RealtimeLoop since it started."""

    def __init__(self, loop) -> None:
        self.loop = loop
        self.steal = StealMeter()
        self.wall0 = time.monotonic()
        self.cpu0 = time.process_time()

    def start(self) -> None:
        self.steal = StealMeter()
        self.wall0 = time.monotonic()
        self.cpu0 = time.process_time()

    def status(self, rig: str, lockstep: bool) -> dict:
        tel = self.loop.telemetry()
        hist = tel.pop("histogram_us")
        wall = max(time.monotonic() - self.wall0, 1e-9)
        wakeups = max(tel["wakeups"], 1)
        return {
            "rig": rig, "pid": os.getpid(), "lockstep": lockstep, "paused": tel["paused"],
            "rate_hz": 1e9 / tel["period_ns"], "tick": tel["tick"], "t": tel["tick"] * tel["period_ns"] * 1e-9,
            "rt_mode": tel["rt_mode"], "wakeups": tel["wakeups"], "overruns": tel["overruns"],
            "overrun_fraction": tel["overruns"] / wakeups, "skipped_periods": tel["skipped_periods"],
            "lateness_p50_us": percentile_us(hist, 0.50), "lateness_p99_us": percentile_us(hist, 0.99),
            "lateness_p999_us": percentile_us(hist, 0.999), "lateness_max_us": tel["max_lateness_ns"] / 1e3,
            "steal_fraction": self.steal.fraction(), "cpu_percent": 100.0 * (time.process_time() - self.cpu0) / wall,
            "loop_work_fraction": tel["work_ns"] / 1e9 / wall, "sample_drops": tel["sample_drops"],
            "uptime_s": wall,
        }
