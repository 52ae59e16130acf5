"""Active mirror for eRobs (`servo-hil record --protocol etherban|canopen`): bam's excitation trajectories.

Every 1 ms bam's host-side PD (Rhoban/bam's eRob recorder, `Client.position_control`) sends a current
set-point through an Etherban or CANopen `erob_link.Link`; it writes bam's raw JSON logs (eRob flavour) and
the processed log (5 ms grid). The PD, start-up and raw entries: docs/configuration.md, Record identification logs.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from pathlib import Path

from drivers.hosts.erob_link import PERIOD_S, Link, Sample
from servo_hil.record.excitation import DURATION_S, TRAJECTORIES, GoalPacing, warn_if_behind
from servo_hil.record.sweep import record_sweep

__all__ = ["BAM_DAMPING", "pd_amps", "record"]

MAX_AMPS = 12.0               # bam's clip (bam/erob/actuator.py `ErobActuator.max_amps`)
BAM_DAMPING = {"erob80_100": 2.0, "erob80_50": 1.0}   # bam's ErobActuator damping per motor (bam/actuators.py)
_GOTO_S = 3.0                 # bam's goto_safe: a 3 s cubic to the start pose
_STILL_S, _STILL_STD = 3.0, 1e-5   # bam waits for std(last 100 positions) < 1e-5 rad; we wait at most 3 s
_ALREADY_THERE = 0.01         # [rad] no start move when this close
LATE_CYCLE_S = 2 * PERIOD_S   # a cycle this long missed one goal update of bam's 1 kHz host PD


def pd_amps(kp: float, damping: float, goal: float, position: float, velocity: float) -> float:
    """bam's host PD (`Client.position_control`): kp·(goal − q) + damping·√kp·(0 − q̇), clipped ±12 A."""
    amps = kp * (goal - position) + damping * math.sqrt(kp) * (0.0 - velocity)
    return min(max(amps, -MAX_AMPS), MAX_AMPS)


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


class _Pacer:
    """Absolute 1 ms deadlines; a late cycle is not made up (no bursts)."""

    def __init__(self):
        self.t0 = time.monotonic()
        self._due = self.t0

    def wait(self) -> float:
        self._due += PERIOD_S
        now = time.monotonic()
        if self._due > now:
            time.sleep(self._due - now)
        else:
            self._due = now
        return time.monotonic() - self.t0


def _state(link: Link, amps: float, offset: float) -> Sample:
    s = link.exchange(amps)
    return Sample(_wrap(s.position - offset), s.velocity, s.torque_demand, s.current)


def _go_to_start(link: Link, kp: float, damping: float, start: float, offset: float) -> Sample:
    """Wait (0 A) for the joint to be still, then the 3 s cubic to `start` under the PD."""
    pacer, recent = _Pacer(), deque(maxlen=100)
    s = _state(link, 0.0, offset)
    while pacer.wait() < _STILL_S:
        recent.append(s.position)
        if len(recent) == recent.maxlen and statistics.pstdev(recent) < _STILL_STD:
            break
        s = _state(link, 0.0, offset)
    origin = s.position
    if abs(start - origin) < _ALREADY_THERE:
        return s
    pacer = _Pacer()
    while (t := pacer.wait()) < _GOTO_S:
        u = t / _GOTO_S
        goal = origin + (start - origin) * u * u * (3.0 - 2.0 * u)
        s = _state(link, pd_amps(kp, damping, goal, s.position, s.velocity), offset)
    return s


def record_one(link: Link, trajectory: str, kp: float, damping: float, header: dict, offset: float = 0.0,
               duration: float = DURATION_S, runs: list[GoalPacing] | None = None) -> dict:
    """One run: to the start, then `trajectory` for `duration` s at 1 kHz; bam's raw log (eRob flavour), its
    header with GoalPacing's counts of late cycles (the run's GoalPacing is appended to `runs`)."""
    traj = TRAJECTORIES[trajectory]
    s = _go_to_start(link, kp, damping, traj(0.0)[0], offset)
    entries, pacing = [], GoalPacing(LATE_CYCLE_S)
    pacer, t = _Pacer(), 0.0
    while t < duration:
        goal, enable = traj(t)
        amps = pd_amps(kp, damping, goal, s.position, s.velocity) if enable else 0.0
        s = _state(link, amps, offset)
        pacing.update(time.monotonic())   # every cycle sends a set-point (0 A at torque off)
        entries.append({"timestamp": time.monotonic() - pacer.t0, "position": s.position, "speed": s.velocity,
                        "goal_position": goal, "torque_enable": enable, "torque_demand": s.torque_demand,
                        "control": s.current})
        t = pacer.wait()
    _state(link, 0.0, offset)             # torque off: 0 A
    if runs is not None:
        runs.append(pacing)
    return {**header, "kp": kp, "damping": damping, "trajectory": trajectory, **pacing.header(), "entries": entries}


def record(link: Link, trajectories: list[str], gains: list[float], damping: float, header: dict, out: Path,
           offset: float = 0.0, duration: float = DURATION_S) -> list[Path]:
    """Every trajectory at every gain [A/rad] through `link` (closed at the end); writes <out>/raw/*.json and
    <out>/processed/*.json; one warning line at the end if runs fell behind (excitation.warn_if_behind)."""
    runs: list[GoalPacing] = []
    try:
        files = record_sweep(trajectories, gains, lambda name, kp: record_one(
            link, name, kp, damping, header, offset, duration, runs), out)
    finally:
        link.close()
    warn_if_behind(runs)   # after a complete sweep only: an error ends the command with its own one line
    return files
