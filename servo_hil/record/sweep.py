"""The sweep `servo-hil record` makes, whatever drives the servo: every excitation trajectory at every gain, each
run written as bam's raw log and its processed twin under `<out>/raw/` and `<out>/processed/`; and the run itself
for the serial servos (Dynamixel, Feetech), whose vendor clients `RecordedServo` wraps.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hil.params.config_file import ConfigError
from servo_hil.logs.bam import process
from servo_hil.record.excitation import DURATION_S, TRAJECTORIES, GoalPacing, warn_if_behind

# a goal written more than two steps of bam's 5 ms processing grid after the previous one is late (bam's own
# recordings: cycles of 3.5–5.3 ms, none above 7.1 ms)
LATE_GOAL_S = 0.010
# a late reply's wait before it is dropped: the vendors' SDKs time out after their 16 ms latency timer ×2 + 2 ms
_RESYNC_S = 0.005
TRIES = 3                 # a setting's write, before a lost reply is an error


class RecordedServo(Protocol):
    """A serial servo driven through its vendor's client, as one recording run needs it."""

    def prepare(self, kp: int, start_rad: float) -> None:
        """Torque off, position mode with P = `kp` (I = D = 0, no profile), the goal at `start_rad`, torque on."""
        ...

    def set_torque(self, on: bool) -> None:
        """Torque Enable; ConfigError when the servo does not take it."""
        ...

    def write_goal(self, goal_rad: float) -> bool:
        """The goal [rad, 0 = hanging down]; False for a lost reply (the write may or may not have arrived)."""
        ...

    def read_sample(self) -> dict | None:
        """bam's log entry fields position [rad], speed [rad/s], load [duty], input_volts, temp [°C]; None for a
        lost or short reply."""
        ...

    def close(self) -> None:
        ...


def drop_late_reply(serial: Any) -> None:
    """After a lost or short reply: let a late status packet arrive, then drop what came in. The vendors' SDKs take
    the first packet of the right ID as the reply and never drop input (their clearPort flushes the output), so a
    reply that came after its timeout would answer the next instruction, and every one after it."""
    time.sleep(_RESYNC_S)
    serial.reset_input_buffer()


def record_run(servo: RecordedServo, trajectory: str, kp: int, header: dict, duration: float = DURATION_S,
               runs: list[GoalPacing] | None = None) -> dict:
    """One run as bam's recorders make it: settle 1 s at the start, follow `trajectory` for `duration` s (bam: 6),
    writing the goal and reading the Present items each cycle; bam's raw log with GoalPacing's counts and the
    lost replies in its header (a lost reply costs one sample, not the run). The run's GoalPacing goes to `runs`."""
    traj = TRAJECTORIES[trajectory]
    servo.prepare(kp, traj(0.0)[0])
    time.sleep(1.0)                      # settle at the start, as bam's recorders do
    entries, enabled, pacing, lost = [], True, GoalPacing(LATE_GOAL_S), 0
    t0 = time.monotonic()
    while (t := time.monotonic() - t0) < duration:
        goal, enable = traj(t)
        if enable != enabled:
            servo.set_torque(enable)
            enabled = enable
        if enable:
            lost += not servo.write_goal(goal)
            pacing.update(time.monotonic())
        else:
            pacing.pause()
        before = time.monotonic()
        sample = servo.read_sample()
        after = time.monotonic()
        if sample is None:
            lost += 1
            continue                     # bam's loop skips the sample too
        # the read's midpoint, as bam/dynamixel/record.py and bam/feetech/record.py stamp it
        entries.append({"timestamp": (before + after) / 2 - t0, **sample, "goal_position": goal,
                        "torque_enable": enable})
    servo.set_torque(False)
    vin = float(np.median([e["input_volts"] for e in entries])) if entries else 0.0
    if runs is not None:
        runs.append(pacing)
    return {**header, "kp": kp, "vin": header.get("vin") or vin, "trajectory": trajectory, **pacing.header(),
            "lost_replies": lost, "entries": entries}


def check_trajectories(trajectories: list[str]) -> None:
    """ConfigError naming the first name that is not one of bam's trajectories."""
    unknown = [t for t in trajectories if t not in TRAJECTORIES]
    if unknown:
        raise ConfigError(f"unknown trajectory {unknown[0]!r} (known: {', '.join(TRAJECTORIES)})")


def record_sweep(trajectories: list[str], gains: list[float], run: Callable[[str, float], dict],
                 out: Path) -> list[Path]:
    """`run(trajectory, kp)` → a raw log, for every trajectory at every gain; writes <out>/raw/*.json and
    <out>/processed/*.json and returns their paths."""
    check_trajectories(trajectories)
    written = []
    runs = [(kp, name) for kp in gains for name in trajectories]
    for i, (kp, name) in enumerate(runs, 1):
        print(f"run {i}/{len(runs)}: {name} at kp {kp:g}", file=sys.stderr, flush=True)
        raw = run(name, kp)
        stem = f"{time.strftime('%Y-%m-%d_%Hh%Mm%S')}_{name}_kp{kp:g}"
        for sub, log in (("raw", raw), ("processed", process(raw))):
            path = out / sub / f"{stem}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(log))
            written.append(path)
    return written


def record_servo(open_servo: Callable[[], RecordedServo], trajectories: list[str], gains: list[int], header: dict,
                 out: Path, duration: float = DURATION_S) -> list[Path]:
    """Every trajectory at every gain (`record_run`) on the servo `open_servo()` opens (closed at the end); writes
    <out>/raw/*.json and <out>/processed/*.json; one warning line at the end if runs fell behind their trajectory
    (excitation.warn_if_behind)."""
    check_trajectories(trajectories)          # before the port opens
    servo = open_servo()
    runs: list[GoalPacing] = []
    try:
        files = record_sweep(trajectories, gains,
                             lambda name, kp: record_run(servo, name, int(kp), header, duration, runs), out)
    finally:
        servo.close()
    warn_if_behind(runs)   # after a complete sweep only: an error ends the command with its own one line
    return files
