"""Identification inputs read into one log form, bam's processed log (`ProcessedLog`).

Two sources: bam's processed JSON logs, and the side-by-side MCAP recordings of `servo-hil mirror --record`,
whose bam header the caller gives and which are resampled onto a fixed grid as `bam.process` does
(docs/identification.md, Inputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hil.params.config_file import ConfigError, validate
from servo_hil.logs.bam import process
from servo_hil.logs.mcap import read_side_by_side
from servo_hil.offline.replay import ProcessedLog, load_log, log_files

MCAP_HEADER_KEYS = ("mass", "length", "kp", "arm_mass", "vin", "damping")


@dataclass(frozen=True)
class NamedLog:
    name: str   # the file name (MCAP: file and joint), as reports and plots show it
    path: str   # where it was read from
    log: ProcessedLog


def mcap_logs(path: Path, header: dict, joint: str | None, dt: float) -> list[NamedLog]:
    """One log per joint (or only `joint`) of an MCAP recording: /real/<joint>/state resampled to dt [s].

    A real state without goal or torque enable takes the twin's (`/sim/<joint>/state` at the same
    instant: the mirror forwards the controller's commands to both), else the previous value.
    """
    missing = [k for k in ("mass", "length", "kp") if k not in header]
    if missing:
        raise ConfigError(f"{path}: an MCAP log needs --mcap-header {missing[0]}=VALUE (its bam header)")
    topics = read_side_by_side(path)
    joints = sorted(t.split("/")[2] for t in topics if t.startswith("/real/") and t.endswith("/state"))
    if joint is not None:
        if joint not in joints:
            raise ConfigError(f"{path}: no joint {joint!r} recorded (has: {', '.join(joints) or 'none'})")
        joints = [joint]
    if not joints:
        raise ConfigError(f"{path}: no /real/<joint>/state messages")
    out = []
    for j in joints:
        real = topics[f"/real/{j}/state"]
        sim = {m["log_time_ns"]: m for m in topics.get(f"/sim/{j}/state", [])}
        if len(real) < 2:
            raise ConfigError(f"{path}: {len(real)} message(s) on /real/{j}/state; a log needs at least 2")
        entries, goal, enable = [], real[0]["position"], True
        t0 = real[0]["log_time_ns"]
        for m in real:
            twin = sim.get(m["log_time_ns"], {})
            goal = next((v for v in (m.get("goal"), twin.get("goal")) if v is not None), goal)
            enable = next((v for v in (m.get("enable"), twin.get("enable")) if v is not None), enable)
            speed = m.get("velocity")
            entries.append({"timestamp": (m["log_time_ns"] - t0) / 1e9, "position": m["position"],
                            "speed": 0.0 if speed is None else speed, "goal_position": goal,
                            "torque_enable": bool(enable)})
        raw = {**header, "entries": entries}
        name = f"{path.name}:{j}"
        doc = process(raw, dt)
        temps = [m.get("temperature") for m in real]
        if all(v is not None for v in temps):   # Present Temperature, where the mirror read it
            t = [e["timestamp"] for e in entries]
            for e, v in zip(doc["entries"], np.interp([e["timestamp"] for e in doc["entries"]], t, temps),
                            strict=True):
                e["temp"] = float(v)
        out.append(NamedLog(name, str(path), validate(ProcessedLog, doc, name)))
    return out


def check_temperature(logs: list[NamedLog], why: str) -> None:
    """ConfigError naming the first log without a logged temperature (a `temp` in every entry)."""
    for x in logs:
        if any(e.temp is None for e in x.log.entries):
            raise ConfigError(f"{x.name}: no logged temperature (a `temp` in every entry), which {why} needs")


def read_logs(paths: list[Path], mcap_header: dict | None = None, joint: str | None = None,
              dt: float = 0.005) -> list[NamedLog]:
    """Every log of `paths` (files or folders of *.json and *.mcap), in the order given, folders sorted."""
    logs: list[NamedLog] = []
    mcaps: dict[Path, list[Path]] = {}
    for path in paths:
        for f in log_files(path, recordings=True):
            if f.suffix == ".mcap":
                mcaps.setdefault(f.parent if Path(path).is_dir() else f, []).append(f)
            else:
                logs.append(NamedLog(f.name, str(f), load_log(f)))
    for where in mcaps:   # a folder of rotated files is one recording
        logs.extend(mcap_logs(where, dict(mcap_header or {}), joint, dt))
    names = [x.name for x in logs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{dup[0]}: given twice")
    return logs
