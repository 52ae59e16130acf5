"""bam's identification logs as recorders write them (Rhoban/bam: bam/dynamixel/record.py, bam/erob/record.py,
bam/process.py; recorded examples on branch xl330, af22604, bam/data.bak/): a raw JSON per run (`<out>/raw/`)
and its processed twin on a fixed grid (`<out>/processed/`, what `replay`, `report` and bam's fitting read).
"""

from __future__ import annotations

import numpy as np

from hil.params.config_file import ConfigError


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
