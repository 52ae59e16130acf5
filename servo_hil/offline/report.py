"""Sim-vs-real reports (`servo-hil report`): per log and joint a PNG, `report.md` and `report.json`.

The input is bam processed logs, replayed through a catalog actuator's models by the function behind
`servo-hil replay` (the same MAE, bit for bit), or the mirror's side-by-side MCAP logs, the sim interpolated
onto the real samples. Inputs and the keys of `report.json`: docs/configuration.md, Reports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed

import matplotlib.pyplot as plt
import numpy as np

from hil.params import catalog
from hil.params.config_file import ConfigError
from servo_hil.offline.replay import load_log, log_files, replay

_STATE = re.compile(r"^/(real|sim)/(.+)/state$")


class NoPairs(ConfigError):
    """An MCAP log without any /real–/sim state pair."""
EFFORT_UNITS = {"current": "A", "torque": "N·m"}


@dataclass
class Trace:
    """One side's samples on the comparison's time base (NaN where a value is missing)."""

    position: np.ndarray  # rad
    velocity: np.ndarray | None = None  # rad/s
    effort: np.ndarray | None = None  # current [A] or torque [N·m] (see Comparison.effort_kind)


@dataclass
class Comparison:
    """Real vs one or more simulations of one joint over one log."""

    log: str
    joint: str
    t: np.ndarray  # s from the start of the log, the real samples' times
    real: Trace
    sims: dict[str, Trace]  # "m1" … or "sim"
    mae: dict[str, float]  # position MAE [rad] per sim; for replays exactly servo_hil.offline.replay's number
    goal: np.ndarray | None = None  # rad
    enable: np.ndarray | None = None  # 1 torque on, 0 off, NaN unknown
    effort_kind: str | None = None  # "current" | "torque"; None: no effort panel
    note: str = ""  # what the current/torque panel lacks, or why there is none
    info: str = ""  # one line about the log (trajectory, gains, load)
    # spans where twin and real disagree: (what, start [s], end [s], real value, sim value)
    disagreements: list[tuple[str, float, float, float, float]] | None = None

    def metrics(self, label: str) -> dict:
        sim = self.sims[label]
        err = sim.position - self.real.position
        vel = None
        if sim.velocity is not None and self.real.velocity is not None:
            dv = np.abs(sim.velocity - self.real.velocity)
            vel = float(np.nanmean(dv)) if np.isfinite(dv).any() else None
        return {"log": self.log, "joint": self.joint, "model": None if label == "sim" else label,
                "samples": len(self.t), "duration_s": float(self.t[-1] - self.t[0]),
                "mae_rad": self.mae[label], "rmse_rad": float(np.sqrt(np.mean(err**2))),
                "max_abs_err_rad": float(np.max(np.abs(err))), "velocity_mae_rad_s": vel,
                "plot": plot_name(self)}


def plot_name(c: Comparison) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{Path(c.log).stem}_{c.joint}")
    return f"{safe}.png"


# -- bam processed logs through servo_hil.offline.replay --------------------------------------------------------------


def resolve_models(actuator: str, models: Sequence[str], all_models: bool) -> list[str]:
    entry = catalog.entry(actuator)
    known = sorted(entry.models)
    if all_models:
        if models:
            raise ConfigError("give --model or --all-models, not both")
        if not known:
            raise ConfigError(f"{actuator}: the catalog has no identified models to replay")
        return known
    if not models:
        raise ConfigError(f"give --model (repeatable) or --all-models (known for {actuator}: "
                          f"{', '.join(known) or 'none'})")
    chosen = list(dict.fromkeys(models))
    for m in chosen:
        entry.actuator(m)  # ConfigError naming the known models if m is not one
    return chosen


def compare_replay(path: str | Path, actuator: str, models: Sequence[str],
                   integrator: str = "bam") -> list[Comparison]:
    """Replay every log under `path` with every model (servo_hil.offline.replay.replay) and line them up with the
    logs."""
    files = log_files(path)
    try:
        logs = [load_log(f) for f in files]
        runs = {m: replay(path, actuator, model=m, integrator=integrator) for m in models}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not JSON text ({exc.reason})") from None
    out = []
    for i, (f, log) in enumerate(zip(files, logs, strict=True)):
        results = {m: runs[m][i] for m in models}
        assert all(r.file == f.name for r in results.values())
        first = next(iter(results.values()))
        load = f"mass {log.mass:g} kg, length {log.length:g} m" + (f", arm {log.arm_mass:g} kg" if log.arm_mass else "")
        gains = f"kp {log.kp:g}" + (f", {log.vin:g} V" if log.vin else "")
        out.append(Comparison(
            log=f.name, joint=log.motor or "servo", t=first.t,
            real=Trace(first.q_log, np.array([e.speed for e in log.entries])),
            sims={m: Trace(r.q, r.dq) for m, r in results.items()},
            mae={m: r.mae for m, r in results.items()},
            goal=np.array([e.goal_position for e in log.entries]),
            enable=np.array([float(e.torque_enable) for e in log.entries]),
            note="bam logs record no current or torque",
            info=f"{log.trajectory or 'log'}, {gains}, {load}, {actuator} ({integrator} integrator)"))
    return out


# -- side-by-side MCAP logs ---------------------------------------------------------------------------


def _column(msgs: list[dict], key: str) -> np.ndarray | None:
    vals = [m.get(key) for m in msgs]
    if all(v is None for v in vals):
        return None
    return np.array([np.nan if v is None else float(v) for v in vals])


def _times(msgs: list[dict], topic: str) -> np.ndarray:
    try:
        return np.array([m["log_time_ns"] for m in msgs], dtype=np.int64)
    except KeyError:
        raise ConfigError(f"{topic}: a message without log_time_ns") from None


def compare_side_by_side(topics: dict[str, list[dict]], name: str,
                         twins: dict[str, str] | None = None) -> tuple[list[Comparison], list[str]]:
    """Pair /real/<joint>/state with /sim/<joint>/state; returns (comparisons, unpaired topics).

    `topics` is `servo_hil.logs.mcap.read_side_by_side`'s result: topic → message dicts, each with
    "log_time_ns" and the state fields (position rad, velocity rad/s, current A, torque N·m, goal rad).
    `twins`: each joint's twin model (the recording's metadata), its label instead of "sim".
    """
    sides: dict[str, dict[str, list[dict]]] = {}
    for topic, msgs in topics.items():
        m = _STATE.match(topic)
        if m and msgs:
            sides.setdefault(m[2], {})[m[1]] = msgs
    pairs = {j: s for j, s in sorted(sides.items()) if len(s) == 2}
    unpaired = sorted(f"/{side}/{j}/state" for j, s in sides.items() if len(s) == 1 for side in s)
    if not pairs:
        raise NoPairs(f"{name}: no /real/<joint>/state channel with a matching /sim/<joint>/state")
    out = []
    for joint, s in pairs.items():
        real = sorted(s["real"], key=lambda m: m["log_time_ns"])
        sim = sorted(s["sim"], key=lambda m: m["log_time_ns"])
        tr, ts = _times(real, f"/real/{joint}/state"), _times(sim, f"/sim/{joint}/state")
        keep = (tr >= ts[0]) & (tr <= ts[-1])
        if len(sim) < 2 or keep.sum() < 2:
            raise ConfigError(f"{name}: /real/{joint}/state and /sim/{joint}/state do not overlap in time")
        real = [m for m, k in zip(real, keep, strict=True) if k]
        tr = tr[keep]
        t = (tr - tr[0]) * 1e-9
        x, xp = (tr - ts[0]) * 1e-9, (ts - ts[0]) * 1e-9  # seconds from the sim's start, exact in float64

        def on_real(col, x=x, xp=xp):
            return None if col is None else np.interp(x, xp, col)

        try:
            cols_r = {k: _column(real, k) for k in ("position", "velocity", "current", "torque", "goal", "enable")}
            cols_s = {k: _column(sim, k) for k in ("position", "velocity", "current", "torque", "goal")}
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name}: joint {joint}: a state field is not a number ({exc})") from None
        if cols_r["position"] is None or cols_s["position"] is None or np.isnan(cols_s["position"]).any() \
                or np.isnan(cols_r["position"]).any():
            raise ConfigError(f"{name}: joint {joint}: messages without a position")
        kind = next((k for k in ("current", "torque") if cols_r[k] is not None), None)
        if kind is None:
            kind = next((k for k in ("current", "torque") if cols_s[k] is not None), None)
        try:
            states = {k: (_column(real, k), _column(sim, k)) for k in ("enable", "mode")}
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name}: joint {joint}: enable or mode is not a number ({exc})") from None
        # the sim's value in force at each real sample (the last one at or before it): a state is a step
        held = np.clip(np.searchsorted(ts, tr, side="right") - 1, 0, len(ts) - 1)
        disagreements = []
        for what, (col_r, col_s) in states.items():
            if col_r is None or col_s is None:
                continue
            sim_at = col_s[held]
            mask = np.isfinite(col_r) & np.isfinite(sim_at) & (col_r != sim_at)
            for a, b in _spans(mask, t):
                k = int(np.searchsorted(t, a))
                disagreements.append((what, float(a), float(b), float(col_r[k]), float(sim_at[k])))
        sim_trace = Trace(on_real(cols_s["position"]), on_real(cols_s["velocity"]),
                          on_real(cols_s[kind]) if kind else None)
        real_trace = Trace(cols_r["position"], cols_r["velocity"], cols_r[kind] if kind else None)
        note = "" if kind else "no current or torque in these messages"
        if kind and (real_trace.effort is None or sim_trace.effort is None):
            note = f"{kind}: {'real' if real_trace.effort is None else 'sim'} side not recorded"
        mae = float(np.mean(np.abs(sim_trace.position - real_trace.position)))
        # the goal the controller sent: the real side's where it was read back, else the twin's (which every goal
        # write reaches), held at each real sample
        goal = cols_r["goal"]
        if (goal is None or not np.isfinite(goal).any()) and cols_s["goal"] is not None:
            goal = cols_s["goal"][held]
        label = (twins or {}).get(joint) or "sim"
        out.append(Comparison(
            log=name, joint=joint, t=t, real=real_trace, sims={label: sim_trace}, mae={label: mae},
            goal=goal, enable=cols_r["enable"], effort_kind=kind, note=note, disagreements=disagreements,
            info=f"side-by-side MCAP, {len(real)} real samples with {len(sim)} sim samples interpolated onto them"))
    return out, unpaired


def compare_mcap(path: Path) -> tuple[list[Comparison], list[str]]:
    try:
        from servo_hil.logs.mcap import read_side_by_side
    except ImportError as exc:
        raise ConfigError(f"{path}: reading MCAP logs needs servo_hil.logs.mcap ({exc})") from None
    try:
        topics = read_side_by_side(path)
    except ConfigError:
        raise
    except Exception as exc:  # the MCAP reader's own errors (bad magic, truncated file, bad JSON): one line
        raise ConfigError(f"{path}: not a readable side-by-side MCAP log ({type(exc).__name__}: {exc})") from None
    comps, unpaired = compare_side_by_side(topics, path.name, _twins(path))
    return comps, [f"{path.name}: {u}" for u in unpaired]


def _twins(path: Path) -> dict[str, str]:
    """Each joint's twin model from the recording's "servo-hil" metadata (`twins`, JSON), {} where absent."""
    from mcap.reader import make_reader

    from servo_hil.logs.mcap import recording_files

    for file in recording_files(path):
        try:
            with open(file, "rb") as f:
                for record in make_reader(f).iter_metadata():
                    if record.name == "servo-hil" and "twins" in record.metadata:
                        return json.loads(record.metadata["twins"])
        except Exception:   # a torn or foreign file: the twin stays "sim"
            continue
    return {}


def mcap_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(path.glob("*.mcap"))
    return [path] if path.suffix.lower() == ".mcap" else []


# -- figure --------------------------------------------------------------------------------------------


def _spans(mask: np.ndarray, t: np.ndarray) -> list[tuple[float, float]]:
    """[start, end) time spans where mask is true."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(int), [0]])))
    dt = t[1] - t[0] if len(t) > 1 else 0.0
    return [(t[a], t[b - 1] + dt) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def figure(c: Comparison):
    """Position, velocity, current or torque (when recorded) and position error over time, sim vs real."""
    kind = c.effort_kind
    ratios = [3, 2, 2, 2] if kind else [3, 2, 2]
    height = 1.3 * sum(ratios) + 1.2  # inches
    fig, axes = plt.subplots(len(ratios), 1, figsize=(12, height), sharex=True, gridspec_kw={"height_ratios": ratios})
    # fixed margins (constrained layout doubles the drawing time): legends go right of the axes
    fig.subplots_adjust(left=0.07, right=0.855, top=1 - 1.0 / height, bottom=0.55 / height, hspace=0.3)
    ax_q, ax_v, ax_err = axes[0], axes[1], axes[-1]
    colors = {label: f"C{i}" for i, label in enumerate(c.sims)}
    if c.enable is not None and (c.enable < 0.5).any():
        for i, (a, b) in enumerate(_spans(c.enable < 0.5, c.t)):
            for ax in axes:
                ax.axvspan(a, b, color="0.9", zorder=0, label="torque off" if i == 0 and ax is ax_q else None)
    if c.goal is not None and np.isfinite(c.goal).any():
        ax_q.plot(c.t, c.goal, color="0.45", ls="--", lw=1.0, label="goal")
    for i, (_, a, b, _, _) in enumerate(c.disagreements or []):
        for ax in axes:
            ax.axvspan(a, b, color="tab:red", alpha=0.2, zorder=0,
                       label="twin ≠ real" if i == 0 and ax is ax_q else None)
    ax_q.plot(c.t, c.real.position, color="black", lw=1.8, label="real")
    for label, s in c.sims.items():
        ax_q.plot(c.t, s.position, color=colors[label], lw=1.1, label=label)
    ax_q.set_ylabel("position [rad]")
    ax_q.set_title("Position")

    if c.real.velocity is not None:
        ax_v.plot(c.t, c.real.velocity, color="black", lw=1.4, label="real")
    for label, s in c.sims.items():
        if s.velocity is not None:
            ax_v.plot(c.t, s.velocity, color=colors[label], lw=0.9, label=label)
    ax_v.set_ylabel("velocity [rad/s]")
    ax_v.set_title("Velocity")

    if kind:
        ax_e = axes[2]
        if c.real.effort is not None:
            ax_e.plot(c.t, c.real.effort, color="black", lw=1.4, label="real")
        for label, s in c.sims.items():
            if s.effort is not None:
                ax_e.plot(c.t, s.effort, color=colors[label], lw=0.9, label=label)
        ax_e.set_ylabel(f"{kind} [{EFFORT_UNITS[kind]}]")
        ax_e.set_title(kind.capitalize() + (f" ({c.note})" if c.note else ""))

    ax_err.axhline(0.0, color="0.5", lw=0.8)
    for label, s in c.sims.items():
        ax_err.plot(c.t, 1e3 * (s.position - c.real.position), color=colors[label], lw=1.0,
                    label=f"{label}: {1e3 * c.mae[label]:.1f}")
    ax_err.set_ylabel("sim − real [mrad]")
    ax_err.set_xlabel("time [s]")
    ax_err.set_title("Position error (sim − real)")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, borderaxespad=0.0,
                      title="position MAE [mrad]" if ax is ax_err else None, title_fontsize=8)
    ax_err.set_xlim(c.t[0], c.t[-1])
    missing = f"; {c.note}" if c.note and not kind else ""
    fig.suptitle(f"{c.log} — {c.joint}: sim vs real\n{c.info}{missing}", fontsize=11)
    return fig


# -- tables --------------------------------------------------------------------------------------------


def model_summary(rows: list[dict]) -> list[dict]:
    """Per model, over the logs: mean MAE (ranked, best first), mean RMSE, worst error, logs won."""
    by_model: dict[str, list[dict]] = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    per_log: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        per_log.setdefault((r["log"], r["joint"]), []).append(r)
    winners = [min(rs, key=lambda r: r["mae_rad"])["model"] for rs in per_log.values()]
    summary = [{"model": m, "logs": len(rs), "mean_mae_rad": float(np.mean([r["mae_rad"] for r in rs])),
                "mean_rmse_rad": float(np.mean([r["rmse_rad"] for r in rs])),
                "max_abs_err_rad": max(r["max_abs_err_rad"] for r in rs),
                "best_on": winners.count(m)} for m, rs in by_model.items()]
    summary.sort(key=lambda s: s["mean_mae_rad"])
    for i, s in enumerate(summary, 1):
        s["rank"] = i
    return [{"rank": s.pop("rank"), **s} for s in summary]


def markdown(doc: dict) -> str:
    def mrad(x):
        return f"{1e3 * x:.2f}"

    kind = doc["kind"]
    lines = ["# servo-hil report", ""]
    if kind == "replay":
        lines += [f"Closed-loop replay of `{doc['source']}` through `{doc['actuator']}` "
                  f"(models {', '.join(doc['models'])}, {doc['integrator']} integrator). "
                  "Real = the recorded log, sim = the replay; the MAE is `servo-hil replay`'s.", ""]
    else:
        lines += [f"Side-by-side MCAP logs `{doc['source']}`: `/sim/<joint>/state` (the twin, by its model) "
                  "interpolated onto the times of `/real/<joint>/state`; the goal is the real side's where recorded, "
                  "else the twin's.", ""]
    lines += ["Errors are sim − real position; MAE = mean |error|, RMSE, max = max |error| over the log.", "",
              "## Position error per log and joint", "",
              "| log | joint | model | samples | MAE [mrad] | RMSE [mrad] | max abs [mrad] | velocity MAE [rad/s] "
              "| plot |",
              "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in doc["rows"]:
        vel = "-" if r["velocity_mae_rad_s"] is None else f"{r['velocity_mae_rad_s']:.3f}"
        lines.append(f"| {r['log']} | {r['joint']} | {r['model'] or 'sim'} | {r['samples']} | {mrad(r['mae_rad'])} "
                     f"| {mrad(r['rmse_rad'])} | {mrad(r['max_abs_err_rad'])} | {vel} | [png]({r['plot']}) |")
    if kind == "replay":
        n = len({(r["log"], r["joint"]) for r in doc["rows"]})
        lines += ["", f"## Models ranked by mean MAE over {n} log{'s' if n != 1 else ''} (best first)", "",
                  "| rank | model | mean MAE [mrad] | mean RMSE [mrad] | worst max abs [mrad] | best on |",
                  "|---:|---|---:|---:|---:|---:|"]
        for s in doc["model_summary"]:
            lines.append(f"| {s['rank']} | {s['model']} | {mrad(s['mean_mae_rad'])} | {mrad(s['mean_rmse_rad'])} "
                         f"| {mrad(s['max_abs_err_rad'])} | {s['best_on']} of {s['logs']} |")
    if doc.get("warnings"):
        lines += ["", "## Twin and real disagree on enable or mode", ""]
        lines += [f"- **warning**: {w}" for w in doc["warnings"]]
        lines += ["", "| log | joint | field | from [s] | to [s] | real | sim |",
                  "|---|---|---|---:|---:|---:|---:|"]
        for d in doc["state_disagreements"]:
            lines.append(f"| {d['log']} | {d['joint']} | {d['what']} | {d['start_s']:.3f} | {d['end_s']:.3f} "
                         f"| {d['real']:g} | {d['sim']:g} |")
    if doc.get("unpaired"):
        lines += ["", "Not reported (no counterpart): " + ", ".join(f"`{u}`" for u in doc["unpaired"])]
    lines += ["", "Plots: position (goal, real, sim), velocity, current or torque when recorded, and position "
                  "error over time; grey bands: torque off; red bands: twin and real disagree on enable or mode.", ""]
    return "\n".join(lines)


def _disagreement_warning(c: Comparison) -> str:
    """One line: where twin and real disagree on enable or mode in one log and joint."""
    whats = sorted({d[0] for d in c.disagreements})
    total = sum(b - a for _, a, b, _, _ in c.disagreements)
    first = min(c.disagreements, key=lambda d: d[1])
    return (f"{c.log} {c.joint}: twin and real disagree on {' and '.join(whats)} for {total:.3f} s in "
            f"{len(c.disagreements)} span{'s' if len(c.disagreements) != 1 else ''} (first at {first[1]:.3f} s: "
            f"{first[0]} real {first[3]:g}, sim {first[4]:g}); the sim's position there is not a model error")


# -- entry point ---------------------------------------------------------------------------------------


def report(path: str | Path, out: str | Path, actuator: str | None = None, models: Sequence[str] = (),
           all_models: bool = False, integrator: str = "bam") -> dict:
    """Compare sim and real for a bam log / folder (replayed with `models`) or an MCAP log / folder; write
    one PNG per log and joint, report.md and report.json into `out`. Returns the report.json document."""
    path, out = Path(path), Path(out)
    if not path.exists():
        raise ConfigError(f"{path}: no such file or folder")
    mcaps = mcap_files(path)
    jsons = sorted(path.glob("*.json")) if path.is_dir() else ([] if mcaps else [path])
    if mcaps and jsons:
        raise ConfigError(f"{path}: holds both *.mcap and *.json logs; report on one kind at a time")
    if not mcaps and not jsons:
        raise ConfigError(f"{path}: no *.json or *.mcap logs in this folder")
    unpaired: list[str] = []
    if mcaps:
        if actuator or models or all_models:
            raise ConfigError(f"{path}: MCAP logs carry their own sim side; --actuator/--model/--all-models "
                              "apply to bam JSON logs only")
        comps = []
        for f in mcaps:
            try:
                c, u = compare_mcap(f)
            except NoPairs:
                if not path.is_dir():
                    raise
                c, u = [], [f"{f.name}: no /real–/sim pair"]
            comps += c
            unpaired += u
        if not comps:
            raise ConfigError(f"{path}: no file holds a /real/<joint>/state channel with a matching "
                              "/sim/<joint>/state")
        kind, chosen = "mcap", []
    else:
        if not actuator:
            raise ConfigError("bam JSON logs need --actuator (a catalog actuator, e.g. xl330_m288) to replay them")
        chosen = resolve_models(actuator, models, all_models)
        comps = compare_replay(path, actuator, chosen, integrator)
        kind = "replay"
    rows = [c.metrics(label) for c in comps for label in c.sims]
    doc = {"kind": kind, "source": str(path), "actuator": actuator if kind == "replay" else None,
           "integrator": integrator if kind == "replay" else None, "models": chosen,
           "units": {"*_rad": "rad", "*_rad_s": "rad/s", "*_s": "s"}, "rows": rows,
           "model_summary": model_summary(rows) if kind == "replay" else [], "unpaired": unpaired}
    doc["state_disagreements"] = [{"log": c.log, "joint": c.joint, "what": what, "start_s": a, "end_s": b,
                                   "real": r, "sim": sv} for c in comps for what, a, b, r, sv in c.disagreements or []]
    doc["warnings"] = [_disagreement_warning(c) for c in comps if c.disagreements]
    out.mkdir(parents=True, exist_ok=True)
    for c in comps:
        fig = figure(c)
        try:
            fig.savefig(out / plot_name(c), dpi=100)
        finally:
            plt.close(fig)
    (out / "report.json").write_text(json.dumps(doc, indent=1))
    (out / "report.md").write_text(markdown(doc))
    return doc
