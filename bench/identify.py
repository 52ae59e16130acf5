"""`servo-hil identify` against bam's own fit, `python -m bam.fit`, on the 12 real XL330 logs.

`servo-hil bench identify` prints ONE JSON object on stdout (progress on stderr); `--out FILE` also writes it
to FILE. Method: docs/benchmarks.md; figures: docs/performance.md.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.kernel import _run, bam_python, cpu_model, proc_stat, steal_fraction

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

# bam's XL330 logs (Rhoban/bam branch xl330, af22604, bam/data.bak/processed/), beside the repository
LOG_DIR = ROOT.parent / "shared" / "reference" / "bam_logs" / "xl330" / "processed"
VALIDATION_KP = 800.0
FIT_REQUIREMENTS = ("optuna", "cmaes", "wandb")   # what bam.fit imports beyond bam's own dependencies


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def logdir() -> Path:
    if len(list(LOG_DIR.glob("*.json"))) != 12:
        raise SystemExit(f"{LOG_DIR}: needs ../shared/reference/bam_logs (bam's 12 processed XL330 logs)")
    return LOG_DIR


def timed(cmd: list[str], cwd: Path) -> dict:
    """Run `cmd`; its wall time, CPU time (children) [s], steal share of the host over the run."""
    before, ru0, t0 = proc_stat(), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    ru1, after = resource.getrusage(resource.RUSAGE_CHILDREN), proc_stat()
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} exited {r.returncode}: {r.stderr.strip()[-800:]}")
    return {"wall_s": wall, "cpu_s": cpu, "cpu_share": cpu / wall, "steal": steal_fraction(before, after, "cpu"),
            "stdout": r.stdout}


def validation_mae(params_file: Path, logs: list[Path]) -> tuple[float, dict[str, float]]:
    from hil.params.bam import load_bam_params
    from servo_hil.offline.replay import replay

    params = load_bam_params(params_file)
    per_log = {f.name: replay(f, "xl330_m288", params=params)[0].mae for f in logs}
    return sum(per_log.values()) / len(per_log), per_log


def bam_fit_python() -> tuple[Path | None, str]:
    py, how = bam_python()
    if py is None:
        return None, how
    # bam.fit parses its arguments on import: find it, do not import it
    probe = ["-c", f"import importlib.util, {', '.join(FIT_REQUIREMENTS)}; "
                   "assert importlib.util.find_spec('bam.fit')"]
    if _run([str(py), *probe], 120).returncode != 0:
        log(f"[bam] installing {' '.join(FIT_REQUIREMENTS)} into {py.parent.parent} (bam.fit imports them)")
        r = _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *FIT_REQUIREMENTS], 900)
        if r.returncode != 0:
            return None, f"pip install {' '.join(FIT_REQUIREMENTS)} failed: {r.stderr.strip()[-500:]}"
    return py, how


def optuna_version(py: Path) -> str:
    """optuna's version in bam's venv: from 4.4 on, CmaEsSampler ignores bam.fit's restart_strategy="bipop"
    (a deprecation warning; optuna/optuna#6025 moved restarts to OptunaHub), so bam.fit runs one CMA-ES."""
    r = _run([str(py), "-c", "import optuna; print(optuna.__version__)"], 120)
    return r.stdout.strip() if r.returncode == 0 else f"unknown: {r.stderr.strip()[-200:]}"


def _summary(runs: list[dict]) -> dict:
    """The medians over runs of one tool (both are stochastic: identify per seed, bam.fit per run): wall and CPU
    time [s], training and validation MAE [rad]; `runs` how many."""
    keys = ("wall_s", "cpu_s", "train_mae_rad", "validation_mae_rad")
    return {"runs": len(runs)} | {k: statistics.median(r[k] for r in runs) for k in keys}


def run(trials: int = 2000, models: list[str] = ("m4", "m6"), seeds: list[int] = (0,), bam_runs: int = 1,
        bam: bool = True) -> dict:
    """The benchmark (`servo-hil bench identify`): `trials` evaluations per fit for both tools, identify once per
    seed of `seeds`, bam's fit `bam_runs` times per model (skipped without `bam`); the result as a JSON-ready dict."""

    src = logdir()
    logs = sorted(src.glob("*.json"))
    held = [f for f in logs if json.loads(f.read_text())["kp"] == VALIDATION_KP]
    work = Path(tempfile.mkdtemp(prefix="bench-identify-"))
    train = work / "train"
    train.mkdir()
    for f in logs:
        if f not in held:
            shutil.copy(f, train / f.name)
    servo_hil = Path(sys.executable).parent / "servo-hil"
    bam_py, bam_how = bam_fit_python() if bam else (None, "skipped (--no-bam)")

    result: dict = {
        "logs": str(src), "train_logs": sorted(p.name for p in train.glob("*.json")),
        "validation_logs": [f.name for f in held], "validation": f"every log at kp {VALIDATION_KP:g}",
        "trials": trials, "seeds": seeds, "models": {},
        "bam": {"available": bam_py is not None, "venv": bam_how, "optuna": optuna_version(bam_py)} if bam_py
        else {"available": False, "reason": bam_how},
        "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
    }
    for model in models:
        runs = []
        for seed in seeds:
            log(f"[identify] {model}: {trials} evaluations, seed {seed}")
            out = work / f"identify_{model}_{seed}"
            ours = timed([str(servo_hil), "identify", str(train),
                          *[a for f in held for a in ("--validation", str(f))], "--actuator", "xl330_m288",
                          "--model", model, "--trials", str(trials), "--seed", str(seed), "--out", str(out)], work)
            (fit,) = json.loads((out / "report.json").read_text())["fits"]
            runs.append({"seed": seed, "wall_s": ours["wall_s"], "cpu_s": ours["cpu_s"],
                         "cpu_share": ours["cpu_share"], "steal": ours["steal"], "fit_s": fit["seconds"],
                         "evaluations": fit["evaluations"], "train_mae_rad": fit["train_mae"],
                         "validation_mae_rad": fit["validation_mae"],
                         "validation_mae_per_log": fit["validation_mae_per_log"]})
        entry: dict = {"identify_seeds": runs, "identify": _summary(runs)}
        if bam_py is not None:
            bams = []
            for k in range(bam_runs):
                log(f"[bam.fit] {model}: {trials} trials, run {k + 1} of {bam_runs} (minutes)")
                bam_out = work / f"bam_{model}_{k}.json"
                theirs = timed([str(bam_py), "-m", "bam.fit", "--actuator", "xl330", "--model", model,
                                "--logdir", str(train), "--trials", str(trials), "--output", str(bam_out)], work)
                val, per_log = validation_mae(bam_out, held)
                train_mae, _ = validation_mae(bam_out, sorted(train.glob("*.json")))
                bams.append({"wall_s": theirs["wall_s"], "cpu_s": theirs["cpu_s"], "cpu_share": theirs["cpu_share"],
                             "steal": theirs["steal"], "evaluations": trials, "train_mae_rad": train_mae,
                             "validation_mae_rad": val, "validation_mae_per_log": per_log,
                             "params": json.loads(bam_out.read_text())})
            ours, theirs = entry["identify"], _summary(bams)
            entry["bam_fit_runs"], entry["bam_fit"] = bams, theirs
            entry["speedup_wall"] = theirs["wall_s"] / ours["wall_s"]
            entry["speedup_cpu"] = theirs["cpu_s"] / ours["cpu_s"]
            entry["validation_mae_ratio"] = ours["validation_mae_rad"] / theirs["validation_mae_rad"]
            entry["targets_met"] = {"speedup_25x_wall": entry["speedup_wall"] >= 25,
                                    "speedup_25x_cpu": entry["speedup_cpu"] >= 25,
                                    "validation_mae_no_worse": entry["validation_mae_ratio"] <= 1}
        result["models"][model] = entry
        log(json.dumps({model: {k: v for k, v in entry.items() if k not in ("identify_seeds", "bam_fit_runs")}}))
    result["machine"]["loadavg_end"] = os.getloadavg()
    shutil.rmtree(work, ignore_errors=True)
    return result
