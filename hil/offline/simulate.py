"""Offline simulation of one actuator from a command CSV (`servo-hil simulate`).

IN.csv: columns `t,u` and optionally `enable`, `external_torque`; one row per step, held for the
step; `t` must be k·dt. OUT.csv: one row per step; row k holds t_k = k·dt, the u_k applied during
step k, the state *before* step k (theta, omega, temperature) and what step k produced (torque,
current, voltage, theta_meas, friction_torque, fault_flags). Temperature is absolute [°C]; a
quantity the model does not have is left empty.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from hil.kernel import LAWS, Kernel
from hil.params.config_file import ConfigError
from hil.rig import load_offline_rig

INPUT_COLUMNS = ("t", "u", "enable", "external_torque")
OUTPUT_COLUMNS = ("t", "u", "enable", "external_torque", "theta", "omega", "torque", "current", "voltage",
                  "temperature", "theta_meas", "friction_torque", "fault_flags")


def read_inputs(path: str | Path, dt: float) -> dict[str, np.ndarray]:
    """Read IN.csv; a missing column, a non-number or a `t` that is not k·dt names the row."""
    path = Path(path)
    try:
        fh = path.open(newline="")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    with fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        for need in ("t", "u"):
            if need not in header:
                raise ConfigError(f"{path}: missing column {need!r} (have: {', '.join(header) or 'none'})")
        unknown = [h for h in header if h not in INPUT_COLUMNS]
        if unknown:
            raise ConfigError(f"{path}: unknown column {unknown[0]!r} (allowed: {', '.join(INPUT_COLUMNS)})")
        cols: dict[str, list[float]] = {h: [] for h in header}
        for row_no, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise ConfigError(f"{path}:{row_no}: {len(row)} fields, the header has {len(header)}")
            for h, raw in zip(header, row, strict=True):
                try:
                    value = float(raw)
                except ValueError:
                    raise ConfigError(f"{path}:{row_no}: column {h!r}: not a number: {raw.strip()!r}") from None
                if not math.isfinite(value):
                    raise ConfigError(f"{path}:{row_no}: column {h!r}: not a finite number: {raw.strip()!r}")
                cols[h].append(value)
    out = {h: np.asarray(v) for h, v in cols.items()}
    if len(out["t"]) == 0:
        raise ConfigError(f"{path}: no rows")
    k = np.arange(len(out["t"]))
    bad = np.flatnonzero(np.abs(out["t"] - k * dt) > 1e-6 * max(dt, 1e-9) + 1e-9 * np.abs(out["t"]))
    if bad.size:
        r = int(bad[0])
        raise ConfigError(f"{path}:{r + 2}: t = {float(out['t'][r])!r} but step {r} is at k·dt = {r * dt!r} s "
                          f"(dt = {dt} s from the rig)")
    return out


def run(kernel: Kernel, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the kernel over the input columns; returns 1-D output columns (see OUTPUT_COLUMNS)."""
    n = len(inputs["u"])
    enable = inputs.get("enable", np.ones(n))
    ext = inputs.get("external_torque", np.zeros(n))
    res = kernel.run(inputs["u"], enable, ext)
    out = {name: res[name][:, 0] for name in res}
    out.update(t=np.arange(n) * kernel.dt, u=inputs["u"], enable=enable, external_torque=ext)
    if kernel.get_params(0)["law"] == LAWS["torque"]:
        out["current"] = np.full(n, np.nan)  # an ideal torque source has no armature current
        out["voltage"] = np.full(n, np.nan)
    return out


def write_outputs(path: str | Path, out: dict[str, np.ndarray]) -> None:
    """Write OUT.csv with full double precision; NaN (not modelled) is written as an empty field."""
    with Path(path).open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(OUTPUT_COLUMNS)
        cols = [out[c] for c in OUTPUT_COLUMNS]
        for row in zip(*cols, strict=True):
            w.writerow(["" if math.isnan(x) else (str(int(x)) if c == "fault_flags" else repr(float(x)))
                        for c, x in zip(OUTPUT_COLUMNS, row, strict=True)])


def simulate(rig_path: str | Path, in_path: str | Path, out_path: str | Path,
             integrator: str | None = None) -> dict[str, np.ndarray]:
    """`servo-hil simulate`: read the rig and IN.csv, run, write OUT.csv; returns the columns."""
    _, kernel, _ = load_offline_rig(rig_path, integrator=integrator)
    out = run(kernel, read_inputs(in_path, kernel.dt))
    write_outputs(out_path, out)
    return out
