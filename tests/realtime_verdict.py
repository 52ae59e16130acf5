"""Verdicts of checks whose result depends on a real-time loop being on time: a co-simulation's tracking, the
replay of a record taken in real time. Judged on a clean host; on a disturbed one a failure is inconclusive.

A 1 kHz loop on a vCPU the hypervisor has taken away, or a client thread at normal priority behind other work,
is late whatever the emulator does, and the physics then follows a different input than the one replayed.
The disturbance is measured, never assumed: hypervisor steal over the run (/proc/stat, as the daemon reports
it) or the fraction of the test's own cycles that were late. A failure on a disturbed host is a skip that names
the failed checks, the disturbance and the figures; a clean host judges as before.
"""

from __future__ import annotations

import pytest

STEAL_LIMIT = 0.02   # targets are judged when steal < 2 % (docs/performance.md)
LATE_LIMIT = 0.05    # …and when at most 5 % of the test's own cycles were late


def disturbance(steal_fraction: float, late_fraction: float | None = None) -> str | None:
    """Why this run cannot judge a real-time result, or None. `steal_fraction`: over the run (a
    servo_hil.daemon.telemetry.StealMeter's); `late_fraction`: of the test's own cycles, where it measures them (only
    cycles that do not wait for the emulator, so that a slow emulator cannot excuse itself)."""
    why = []
    if steal_fraction >= STEAL_LIMIT:
        why.append(f"the hypervisor stole {100 * steal_fraction:.1f} % of the CPU")
    if late_fraction is not None and late_fraction > LATE_LIMIT:
        why.append(f"{100 * late_fraction:.1f} % of the test's cycles were late")
    return " and ".join(why) or None


def check(checks: dict[str, bool], figures: str, disturbed: str | None) -> None:
    """Every check in `checks` (what it asserts → whether it held) must hold; when some fail on a disturbed host
    the verdict is inconclusive (pytest.skip naming them, the disturbance and the figures), never a pass."""
    failed = [what for what, held in checks.items() if not held]
    if failed and disturbed:
        pytest.skip(f"inconclusive: {'; '.join(failed)} failed while {disturbed} ({figures})")
    assert not failed, f"{'; '.join(failed)} ({figures}; steal and late cycles within limits)"
