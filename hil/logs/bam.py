"""bam's identification logs as recorders write them (Rhoban/bam: bam/dynamixel/record.py, bam/erob/record.py,
bam/process.py; recorded examples on branch xl330, af22604, bam/data.bak/): a raw JSON per run (`<out>/raw/`),
its processed twin on a fixed grid (`<out>/processed/`, what `replay`, `report` and bam's fitting read), and the
sweep of runs that `servo-hil record` makes, whatever drives the servo.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hil.params.config_file import ConfigError
from hil.record.excitation import TRAJECTORIES


def process(raw: dict, dt: float = 0.005) -> dict:
    """bam.process: resample the entries linearly onto a dt grid, torque_enable re-thresholded at 0.5."""
    e = raw["entries"]
    if len(e) < 2:
        raise ConfigError(f"{raw.get('trajectory')}: {len(e)} sample(s) recorded; a log needs at least 2")
    t = np.array([x["timestamp"] for x in e])
    grid = np.arange(t[0], t[-1], dt)
    out = {k: v for k, v in raw.items() if k != "entries"} | {"dt": dt}
    cols = {k: np.interp(grid, t, [float(x[k]) for x in e]) for k in ("position", "speed", "goal_position",
                                                                      "torque_enable")}
    out["entries"] = [{"timestamp": float(grid[i]), "position": float(cols["position"][i]),
                       "speed": float(cols["speed"][i]), "goal_position": float(cols["goal_position"][i]),
                       "torque_enable": bool(cols["torque_enable"][i] > 0.5)} for i in range(len(grid))]
    return out


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
