"""What an identification leaves in its output folder: params.json (bam's parameter format),
catalog.toml (an actuator catalog entry with provenance), report.json, and plots."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import cmaes
import numpy as np
import tomli_w

from hil.params import catalog
from hil.params.config_file import read_toml
from servo_hil.offline.identify.fit import FitResult, FitTask, Objective, delay_bounds
from servo_hil.offline.identify.logs import NamedLog
from servo_hil.offline.identify.space import STICTION_KEYS, TEMPERATURE_KEYS, bam_dict


@dataclass
class Ranked:
    """A model's best fit (lowest validation MAE, or training MAE without validation) and its rank."""

    model: str
    fit: FitResult
    score: float
    rank: int


def rank(results: list[FitResult]) -> list[Ranked]:
    best: dict[str, FitResult] = {}
    for r in results:
        score = r.validation if r.validation is not None else r.train
        if r.model not in best or score < _score(best[r.model]):
            best[r.model] = r
    order = sorted(best.values(), key=_score)
    return [Ranked(r.model, r, _score(r), i + 1) for i, r in enumerate(order)]


def _score(r: FitResult) -> float:
    return r.validation if r.validation is not None else r.train


def write_json(path: Path, doc: dict) -> None:
    """`doc` as indented JSON, replacing `path` at once (a reader never sees half a file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)


def check_writable(out: Path) -> None:
    """Create `out` and prove a file can be written there, before any fitting (OSError otherwise)."""
    out.mkdir(parents=True, exist_ok=True)
    probe = out / ".servo-hil-identify"
    probe.write_text("")
    probe.unlink()


def report_doc(tasks: list[FitTask], results: list[FitResult], ranked: list[Ranked], seed: int,
               seconds: float, argv: list[str]) -> dict:
    lo, hi = delay_bounds()
    return {
        "actuator": tasks[0].actuator,
        "command": argv,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "seed": seed,
        "seconds": seconds,
        "evaluations": sum(r.evaluations for r in results),
        "interrupted": any(r.interrupted for r in results),
        "objective": "mean over logs of mean |q_sim - q_log| [rad], closed-loop rollout (servo_hil.offline.replay)",
        "thermal_objective": ("mean over logs of mean |T_sim - T_log| [K], the same rollouts with the thermal model, "
                              "after the position fit" if any(r.thermal for r in results) else None),
        "optimizer": {"library": "cmaes", "version": cmaes.__version__, "method": "CMA-ES with restarts",
                      "space": "unit cube of each parameter's bounds", **tasks[0].search.doc(),
                      "trials": tasks[0].trials, "delay_steps_bounds": [lo, hi], "integrator": tasks[0].integrator},
        "ranking": [{"rank": x.rank, "model": x.model, "split": x.fit.split, "train_mae": x.fit.train,
                     "validation_mae": x.fit.validation} for x in ranked],
        "fits": [{"model": r.model, "split": r.split, "seed": r.seed, "free": r.free, "params": r.params,
                  "train_mae": r.train, "validation_mae": r.validation, "train_mae_per_log": r.train_mae,
                  "validation_mae_per_log": r.validation_mae, "evaluations": r.evaluations,
                  "generations": r.generations, "restarts": r.restarts, "runs": r.runs, "seconds": r.seconds,
                  "interrupted": r.interrupted, "history": r.history, "thermal": r.thermal} for r in results],
    }


def catalog_doc(actuator: str, ranked: list[Ranked], logs: list[NamedLog], date: str) -> dict:
    """The catalog entry of `actuator` with the identified sets as its models (schema: hil.params.catalog)."""
    doc = read_toml(catalog.config_dir() / "actuators" / f"{actuator}.toml")
    doc["name"] = f"{actuator}_identified"
    doc["title"] = f"{doc['title']}, identified from {len(logs)} logs"
    doc["models"] = {}
    for x in ranked:
        r = x.fit
        val = f", validation MAE {1e3 * r.validation:.3f} mrad" if r.validation is not None else ""
        source = (f"servo-hil identify {date}: {r.model} fitted on {len(r.train_mae)} logs "
                  f"({', '.join(r.train_mae)}), training MAE {1e3 * r.train:.3f} mrad{val}; "
                  f"{r.evaluations} evaluations, seed {r.seed}")
        doc["models"][r.model] = {"source": source, **{k: v for k, v in bam_dict(r.params).items()
                                                       if k != "actuator"}}
    # the winner's temperature and dwell constants, which are the motor's, not a friction model's
    best, motor = ranked[0].fit, doc["motor"]
    sources = motor.setdefault("sources", {})
    for k in TEMPERATURE_KEYS:
        if k in best.free:
            motor[k] = best.params[k]
            sources[k] = f"servo-hil identify {date}: fitted with {best.model} on {len(best.train_mae)} logs"
    if STICTION_KEYS[0] in best.free:
        motor["dwell_stiction"] = [best.params[k] for k in STICTION_KEYS]
        sources["dwell_stiction"] = (f"servo-hil identify {date}: fitted with {best.model} on "
                                     f"{len(best.train_mae)} logs")
    if best.thermal:
        t = best.thermal["params"]
        _, _, _, alpha, t0, ta = (list(motor.get("thermal") or []) + [0.0] * 6)[:6]
        motor["thermal"] = [t["thermal_r"], t["thermal_c"], 0.0, alpha, t0, ta]
        if "thermal_r2" in t:
            motor["thermal2"] = [t["thermal_r2"], t["thermal_c2"]]
        mae = np.mean(list(best.thermal["train_mae"].values()))
        sources["thermal"] = (f"servo-hil identify {date}: {best.thermal['nodes']}-node thermal model fitted to the "
                              f"logged temperature of {len(best.thermal['train_mae'])} logs, MAE {mae:.3f} K"
                              f"{'; α, T0, Ta kept' if alpha or t0 or ta else ''}")
    return doc


def plot(out: Path, ranked: list[Ranked], results: list[FitResult], logs: dict[str, NamedLog],
         actuator: str) -> list[Path]:
    """validation_<model>.png (each validation log against its fitted rollout; the training logs when
    there is no validation), thermal_<model>.png (the same for the temperature, with a thermal fit) and
    convergence.png (best training MAE against evaluations, per fit)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for x in ranked:
        params, delay = x.fit.params, x.fit.params.get("delay_steps", 0)
        # each page rolls the set its MAE was scored with (one with a thermal model carries it, BamParams), the
        # thermal page with the thermal stage's constants
        pages = [("validation", "q [rad]", 1e3, "mrad", False, params, x.fit.validation_mae or x.fit.train_mae)]
        if x.fit.thermal:
            pages.append(("thermal", "T [°C]", 1.0, "K", True, params | x.fit.thermal["params"],
                          x.fit.thermal["validation_mae"] or x.fit.thermal["train_mae"]))
        for stem, ylabel, scale, unit, thermal, page_params, shown in pages:
            fig, axes = plt.subplots(len(shown), 1, figsize=(9, 2.4 * len(shown)), squeeze=False, sharex=False)
            for ax, (name, mae) in zip(axes[:, 0], shown.items(), strict=True):
                log = logs[name].log
                o = Objective(actuator, [logs[name]], "bam", thermal)
                ((q, _, *temp),) = o.rollouts([page_params], [delay])
                t = np.arange(len(q)) * log.dt
                ax.plot(t, o.arrays[0].temp if thermal else o.arrays[0].q, label="log", color="k", lw=1.0)
                ax.plot(t, temp[0] if thermal else q, label=f"{x.model} rollout", color="C1", lw=1.0)
                ax.set_title(f"{name}: MAE {scale * mae:.2f} {unit}", fontsize=9)
                ax.set_ylabel(ylabel)
            axes[0, 0].legend(loc="upper right", fontsize=8)
            axes[-1, 0].set_xlabel("t [s]")
            # fixed margins: tight_layout measures every text's extent and costs more than the fit's rollouts
            fig.subplots_adjust(left=0.09, right=0.98, top=1 - 0.3 / (2.4 * len(shown)),
                                bottom=0.5 / (2.4 * len(shown)), hspace=0.45)
            path = out / f"{stem}_{x.model}.png"
            fig.savefig(path, dpi=80)
            plt.close(fig)
            written.append(path)
    fig = convergence_figure(results)
    path = out / "convergence.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    written.append(path)
    return written


def convergence_figure(results: list[FitResult]):
    """Best training MAE against evaluations, one curve per fit, each its own colour."""
    import matplotlib.pyplot as plt

    curves = [r for r in results if r.history]
    # colours from a colormap (the default cycle repeats after 10 fits), the legend beside the axes, not on them
    columns = 1 + (max(len(curves), 1) - 1) // 20
    width = 7 + 1.5 * columns
    fig, ax = plt.subplots(figsize=(width, 4))
    colors = plt.get_cmap("turbo")(np.linspace(0.05, 0.95, max(len(curves), 1)))
    for r, color in zip(curves, colors, strict=False):
        e, b = zip(*r.history, strict=True)
        ax.plot(e, 1e3 * np.array(b), label=f"{r.model} split {r.split}", color=color, lw=1.2)
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best training MAE [mrad]")
    ax.set_yscale("log")
    if curves:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, ncol=columns)
    fig.subplots_adjust(left=0.84 / width, right=6.6 / width, top=0.95, bottom=0.12)
    return fig


def write(out: Path, tasks: list[FitTask], results: list[FitResult], seed: int, seconds: float,
          logs: list[NamedLog], validation: list[NamedLog], argv: list[str] | None = None) -> tuple[dict, list[Ranked]]:
    """Every output file; returns the report and the ranking."""
    ranked = rank(results)
    doc = report_doc(tasks, results, ranked, seed, seconds, list(argv if argv is not None else sys.argv))
    winner = ranked[0].fit
    write_json(out / "params.json", winner.params)   # bam's keys and what the fit ran beyond bam (BamParams)
    if len(ranked) > 1:
        (out / "models").mkdir(exist_ok=True)
        for x in ranked:
            (out / "models" / f"{x.model}.json").write_text(json.dumps(x.fit.params, indent=2) + "\n")
    cat = catalog_doc(tasks[0].actuator, ranked, logs, doc["date"])
    header = (f"# {cat['title']}: servo-hil identify, {doc['date']}, seed {seed}.\n"
              f"# Logs: {', '.join(x.name for x in logs + validation)}\n")
    (out / "catalog.toml").write_text(header + tomli_w.dumps(cat))
    doc["plots"] = [p.name for p in plot(out, ranked, results, {x.name: x for x in logs + validation},
                                         tasks[0].actuator)]
    (out / "report.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc, ranked
