"""Offline simulation from a command CSV (`servo-hil simulate`): one actuator, or a robot's joints.

One IN.csv row per step (a robot rig: per tick, a goal column per joint); OUT.csv holds per step the command
applied, the state before the step and what the step produced. Columns and units: docs/configuration.md,
Offline rig, and docs/robots.md, Running it offline.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from hil.kernel import LAWS, Kernel
from hil.params.config_file import ConfigError, read_toml
from servo_hil.rig import load_offline_rig, load_robot_rig

INPUT_COLUMNS = ("t", "u", "enable", "external_torque")
OUTPUT_COLUMNS = ("t", "u", "enable", "external_torque", "theta", "omega", "torque", "current", "voltage",
                  "temperature", "theta_meas", "friction_torque", "fault_flags")


def read_inputs(path: str | Path, dt: float, allowed: tuple[str, ...] = INPUT_COLUMNS,
                required: tuple[str, ...] = ("t", "u")) -> dict[str, np.ndarray]:
    """Read IN.csv; a missing column, a non-number or a `t` that is not k·dt names the row."""
    path = Path(path)
    try:
        fh = path.open(newline="")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    with fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        for need in required:
            if need not in header:
                raise ConfigError(f"{path}: missing column {need!r} (have: {', '.join(header) or 'none'})")
        unknown = [h for h in header if h not in allowed]
        if unknown:
            raise ConfigError(f"{path}: unknown column {unknown[0]!r} (allowed: {', '.join(allowed)})")
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


def step_decimals(dt: float) -> int | None:
    """The decimals that write `dt` [s] exactly (3 for 0.001), or None for a step without a short decimal form."""
    for d in range(16):
        if abs(round(dt, d) - dt) <= 1e-15 * dt:
            return d
    return None


def write_outputs(path: str | Path, out: dict[str, np.ndarray], columns: tuple[str, ...] = OUTPUT_COLUMNS) -> None:
    """Write OUT.csv with full double precision; NaN (not modelled) is written as an empty field. `t` = k·dt is
    written rounded to dt's decimals (0.57, not k·dt's float noise 0.5700000000000001)."""
    t = out["t"]
    decimals = step_decimals(float(t[1] - t[0])) if len(t) > 1 and t[1] > t[0] else None
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with Path(path).open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        cols = [out[c] for c in columns]
        for row in zip(*cols, strict=True):
            w.writerow(["" if math.isnan(x) else str(int(x)) if c.endswith("fault_flags")
                        else repr(round(float(x), decimals)) if c == "t" and decimals is not None
                        else repr(float(x)) for c, x in zip(columns, row, strict=True)])


def simulate_robot(rig_path: str | Path, in_path: str | Path, out_path: str | Path) -> dict[str, np.ndarray]:
    """A robot rig over IN.csv `t,<joint>,...[,<joint>.enable]`: one OUT.csv row per tick."""
    rig, _, robot = load_robot_rig(rig_path)
    joints = robot.joints
    dt = 1.0 / rig.loop.rate_hz
    inputs = read_inputs(in_path, dt, ("t", *joints, *(f"{j}.enable" for j in joints)), ("t", *joints))
    n = len(inputs["t"])
    u = np.stack([inputs[j] for j in joints], axis=1)
    enable = np.stack([inputs.get(f"{j}.enable", np.ones(n)) for j in joints], axis=1)
    res = robot.engine.run(u, enable)
    out = {"t": np.arange(n) * dt}
    columns = ["t"]
    for i, j in enumerate(joints):
        out[f"{j}.u"], out[f"{j}.enable"] = u[:, i], enable[:, i]
        columns += [f"{j}.u", f"{j}.enable"]
        for c in OUTPUT_COLUMNS[4:]:
            out[f"{j}.{c}"] = res[c][:, i]
            if c in ("current", "voltage") and robot.kernel.get_params(i)["law"] == LAWS["torque"]:
                out[f"{j}.{c}"] = np.full(n, np.nan)
            columns.append(f"{j}.{c}")
    write_outputs(out_path, out, tuple(columns))
    return out


def simulate(rig_path: str | Path, in_path: str | Path, out_path: str | Path,
             integrator: str | None = None) -> dict[str, np.ndarray]:
    """`servo-hil simulate`: read the rig and IN.csv, run, write OUT.csv; returns the columns."""
    if "robot" in read_toml(rig_path):
        if integrator is not None:
            raise ConfigError("--integrator: a robot integrates with its MJCF's <option integrator>")
        return simulate_robot(rig_path, in_path, out_path)
    _, kernel, _ = load_offline_rig(rig_path, integrator=integrator)
    out = run(kernel, read_inputs(in_path, kernel.dt))
    write_outputs(out_path, out)
    return out
