"""bam's excitation trajectories (`bam/trajectory.py`), 6 s each, and how closely a recorder followed them.

Each maps the time since the start t [s] to (goal angle [rad], torque enable); 0 rad hangs down.
Keyframed moves are cubic (Hermite) segments with zero slope at every keyframe, as bam's are.
`GoalPacing` counts the goal updates a recorder sent late (a loaded host: the servo then follows stair-stepped
goals that the log's linear resampling does not show); `warn_if_behind` says so in one line after a sweep.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

DURATION_S = 6.0


def _hermite(keyframes: list[tuple[float, float]], t: float) -> float:
    """Cubic through (t_i, x_i) with zero slope at each keyframe; constant outside."""
    if t <= keyframes[0][0]:
        return keyframes[0][1]
    for (t0, x0), (t1, x1) in itertools.pairwise(keyframes):
        if t <= t1:
            s = (t - t0) / (t1 - t0)
            return x0 + (x1 - x0) * s * s * (3.0 - 2.0 * s)
    return keyframes[-1][1]


def lift_and_drop(t: float) -> tuple[float, bool]:
    """Cubic move to −π/2 in 2 s, then torque off: the arm falls (backdrive, Stribeck)."""
    return _hermite([(0.0, 0.0), (2.0, -math.pi / 2)], t), t < 2.0


def sin_time_square(t: float) -> tuple[float, bool]:
    """sin(t²): ever faster, sweeping a wide velocity range."""
    return math.sin(t * t), True


def up_and_down(t: float) -> tuple[float, bool]:
    """Slow cubic 0 → π/2 (3 s) → 0.8·π/2 (6 s): static and load-dependent friction."""
    return _hermite([(0.0, 0.0), (3.0, math.pi / 2), (6.0, 0.8 * math.pi / 2)], t), True


def sin_sin(t: float) -> tuple[float, bool]:
    """sin(t)·π/2 + sin(5t)·0.5·sin(2t): rich in velocities and accelerations."""
    return math.sin(t) * math.pi / 2 + math.sin(5.0 * t) * 0.5 * math.sin(2.0 * t), True


TRAJECTORIES: dict[str, Callable[[float], tuple[float, bool]]] = {
    "sin_sin": sin_sin, "lift_and_drop": lift_and_drop, "up_and_down": up_and_down,
    "sin_time_square": sin_time_square,
}

# A recording fell behind when more than this share of its goal updates came late, or when one gap exceeded
# STALL_S: bam's own XL330 recordings (bam/data.bak/raw, branch xl330) have no gap above 7.1 ms, so a clean
# host gives none; a few late updates among ~1200 barely move a fit, 1 % of them (~12 stair steps of a 6 s
# run on bam's 5 ms grid) is where the processed goal and the one the servo followed visibly part; 50 ms is
# ten grid steps of one goal held, a stair any fit sees.
LATE_SHARE = 0.01
STALL_S = 0.050


@dataclass
class GoalPacing:
    """A run's goal updates [monotonic s] against `late_s` [s]: an update more than that after the previous one is
    late. `pause()` at torque off (no goals are sent then), so the silence is not counted."""

    late_s: float
    updates: int = 0
    late: int = 0
    longest_s: float = 0.0
    _last: float | None = None

    def update(self, now: float) -> None:
        if self._last is not None:
            gap = now - self._last
            self.longest_s = max(self.longest_s, gap)
            self.late += gap > self.late_s
        self._last = now
        self.updates += 1

    def pause(self) -> None:
        self._last = None

    @property
    def behind(self) -> bool:
        return self.late > LATE_SHARE * self.updates or self.longest_s > STALL_S

    def header(self) -> dict:
        """The log header's keys (bam's loaders read the keys they know and ignore these)."""
        return {"goal_updates": self.updates, "late_goal_updates": self.late, "late_goal_s": self.late_s,
                "longest_goal_gap_s": round(self.longest_s, 6)}


def warn_if_behind(runs: list[GoalPacing]) -> str | None:
    """One warning line on stderr (returned too) when any run fell behind its trajectory, else None."""
    behind = [r for r in runs if r.behind]
    if not behind:
        return None
    late, updates = sum(r.late for r in behind), sum(r.updates for r in behind)
    line = (f"servo-hil: warning: {len(behind)} of {len(runs)} runs fell behind their trajectory: {late} of {updates} "
            f"goal updates late (> {behind[0].late_s * 1e3:g} ms apart), longest gap "
            f"{max(r.longest_s for r in behind) * 1e3:.0f} ms; the servo followed stair-stepped goals "
            "(logs: late_goal_updates): record again on an idle host")
    print(line, file=sys.stderr, flush=True)
    return line
