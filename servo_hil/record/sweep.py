"""The sweep `servo-hil record` makes, whatever drives the servo: every excitation trajectory at every gain, each
run written as bam's raw log and its processed twin under `<out>/raw/` and `<out>/processed/`.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hil.params.config_file import ConfigError
from servo_hil.logs.bam import process
from servo_hil.record.excitation import TRAJECTORIES, GoalPacing, warn_if_behind


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


def record_servo(open_servo: Callable[[], Any], record_one: Callable[..., dict], trajectories: list[str],
                 gains: list[float], header: dict, out: Path, duration: float) -> list[Path]:
    """Every trajectory at every gain on the servo `open_servo()` opens (closed at the end), each run by
    `record_one(servo, trajectory, kp, header, duration, runs)`; writes <out>/raw/*.json and <out>/processed/*.json;
    one warning line at the end if runs fell behind their trajectory (excitation.warn_if_behind)."""
    check_trajectories(trajectories)          # before the port opens
    servo = open_servo()
    runs: list[GoalPacing] = []
    try:
        files = record_sweep(trajectories, gains,
                             lambda name, kp: record_one(servo, name, kp, header, duration, runs), out)
    finally:
        servo.close()
    warn_if_behind(runs)   # after a complete sweep only: an error ends the command with its own one line
    return files
