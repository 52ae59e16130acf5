"""bam's excitation trajectories (`bam/trajectory.py`), 6 s each.

Each maps the time since the start t [s] to (goal angle [rad], torque enable); 0 rad hangs down.
Keyframed moves are cubic (Hermite) segments with zero slope at every keyframe, as bam's are.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

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
