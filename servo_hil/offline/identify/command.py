"""`servo-hil identify`: the command line of an identification."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hil.params.config_file import ConfigError

console = Console()


def identify(
    logs: Annotated[list[Path], typer.Argument(help="bam processed JSON logs and servo-hil MCAP recordings "
                                                    "(files or folders)")],
    actuator: Annotated[str, typer.Option(help="catalog actuator, e.g. xl330_m288, mx64, erob80_100")],
    out: Annotated[Path, typer.Option(help="output folder: params.json, catalog.toml, report.json, PNGs")],
    model: Annotated[Literal["m1", "m2", "m3", "m4", "m5", "m6", "all"], typer.Option(
        help="friction model, or 'all' to fit and rank every one")] = "m6",
    trials: Annotated[int, typer.Option(min=1, help="evaluations (parameter sets tried) per fit, as bam's "
                                                    "--trials")] = 2000,
    workers: Annotated[int, typer.Option(min=1, help="fits run at once in local processes")] = 1,
    scheduler: Annotated[str | None, typer.Option(help="run the fits on a Dask cluster, e.g. "
                                                       "tcp://HOST:8786")] = None,
    validation: Annotated[list[Path] | None, typer.Option(help="validation logs (repeatable)")] = None,
    validation_kp: Annotated[float | None, typer.Option(help="hold out every log at this gain (bam's "
                                                             "--validation_kp)")] = None,
    split: Annotated[float | None, typer.Option(help="hold out this fraction of the logs at random")] = None,
    repeats: Annotated[int, typer.Option(min=1, help="random hold-outs with --split")] = 1,
    seed: Annotated[int, typer.Option(help="the same seed gives the same result")] = 0,
    fix: Annotated[list[str] | None, typer.Option(help="NAME=VALUE: hold a parameter (repeatable)")] = None,
    free: Annotated[list[str] | None, typer.Option(help="free only these parameters, the others at the "
                                                        "catalog's published set (repeatable)")] = None,
    delay: Annotated[bool, typer.Option(help="also fit a command-to-measurement latency [steps]")] = False,
    thermal_nodes: Annotated[int, typer.Option(min=0, max=2, help="after the position, fit a 1- or 2-node "
                                                                  "thermal model to the logged temperature")] = 0,
    mcap_header: Annotated[list[str] | None, typer.Option(
        metavar="KEY=VALUE", help="bam header of MCAP logs (repeatable): mass [kg], length [m], kp (the firmware's "
                                  "P gain, as recorded) required; arm_mass [kg], vin [V], damping optional")] = None,
    joint: Annotated[str | None, typer.Option(help="MCAP logs: the joint to read (default: every one)")] = None,
    dt: Annotated[float, typer.Option(help="MCAP logs: resampling step [s] (bam.process's default)")] = 0.005,
) -> None:
    """Fit an actuator's bam parameters to its own logs: CMA-ES over closed-loop rollouts (bam's objective)."""
    from servo_hil.offline.identify import outputs
    from servo_hil.offline.identify.logs import MCAP_HEADER_KEYS, check_temperature, read_logs
    from servo_hil.offline.identify.run import execute, plan, splits
    from servo_hil.offline.identify.space import MODELS, parse_assignments, space, thermal_space
    from servo_hil.offline.replay import check_motor

    models = list(MODELS) if model == "all" else [model]
    fixed = parse_assignments(fix or [])
    for m in models:   # unknown model, actuator or parameter, or a value out of bounds: before any work
        temperature = space(actuator, m, fixed, free).temperature
    if thermal_nodes:
        thermal_space(actuator, thermal_nodes)
    header = parse_assignments(mcap_header or [], "--mcap-header")
    unknown = sorted(set(header) - set(MCAP_HEADER_KEYS))
    if unknown:
        raise ConfigError(f"--mcap-header {unknown[0]}: unknown (known: {', '.join(MCAP_HEADER_KEYS)})")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file; --out names a folder (params.json, catalog.toml, report.json "
                          "and PNGs go in it)")
    outputs.check_writable(out)
    train = read_logs(logs, header, joint, dt)
    held = read_logs(validation, header, joint, dt) if validation else []
    for x in train + held:
        check_motor(x.log, actuator, x.path)
    both = sorted({x.name for x in train} & {x.name for x in held})
    if both:
        raise ConfigError(f"{both[0]}: given as a training and as a validation log")
    if temperature or thermal_nodes:
        check_temperature(train + held, "--thermal-nodes" if thermal_nodes else "a fit of friction_tempcoef")
    pairs = splits(train, held, validation_kp, split, repeats, seed)
    tasks = plan(actuator, models, pairs, trials, seed, fixed, list(free or []), delay, thermal_nodes)

    console.print(f"fitting {len(tasks)} fit(s) of {trials} evaluations: {', '.join(models)}, {len(pairs)} "
                  f"split(s), {len(train)} logs{f' + {len(held)} validation logs' if held else ''}")
    t0 = time.perf_counter()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("generation {task.fields[generation]}, best {task.fields[best]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        if workers > 1 or scheduler:
            bar = progress.add_task(f"{len(tasks)} fits", total=len(tasks), best="-", generation="-")

            def on_fit(r):
                progress.update(bar, advance=1, best=f"{r.model} {1e3 * r.train:.2f} mrad",
                                generation=r.generations)

            results = execute(tasks, workers, scheduler, on_fit=on_fit)
        else:
            # each bar's clock starts with its fit's first generation and stops with its fit
            bars = {id(t): progress.add_task(f"{t.model} split {t.split}", total=t.trials, best="-", generation=0,
                                             start=False) for t in tasks}
            by_fit = {(t.model, t.split): bars[id(t)] for t in tasks}

            saved = [-math.inf, math.inf]   # when, and the MAE of the set params.json holds

            def on_generation(t, stage, evaluations, best, params):
                bar = progress.tasks[bars[id(t)]]
                if not bar.started:
                    progress.start_task(bar.id)
                generation = bar.fields["generation"] + 1
                if stage == "thermal" and not bar.description.endswith("thermal"):   # the second stage starts
                    progress.update(bar.id, description=f"{t.model} split {t.split} thermal")
                    generation = 1
                best_text = f"{best:.3f} K" if stage == "thermal" else f"{1e3 * best:.2f} mrad"
                progress.update(bar.id, completed=evaluations, best=best_text, generation=generation)
                # the best set so far on disk (at most once a second), as bam's fit keeps its output file
                if params is not None and best < saved[1] and time.monotonic() - saved[0] > 1.0:
                    outputs.write_json(out / "params.json", params)
                    saved[:] = time.monotonic(), best

            def on_fit(r):
                # CMA-ES may converge under its budget: the bar ends where the fit ended, full, its clock stopped
                bar = progress.tasks[by_fit[r.model, r.split]]
                if not r.interrupted:
                    progress.update(bar.id, total=bar.completed or bar.total, completed=bar.completed or bar.total)
                progress.stop_task(bar.id)

            results = execute(tasks, on_generation=on_generation, on_fit=on_fit)
    if not results:
        raise ConfigError("interrupted before any fit had a result")
    doc, ranked = outputs.write(out, tasks, results, seed, time.perf_counter() - t0, train, held)

    table = Table(title=f"{actuator}: identified ({doc['evaluations']} evaluations, {doc['seconds']:.1f} s"
                        f"{', interrupted' if doc['interrupted'] else ''})")
    for col in ("rank", "model", "split", escape("train MAE [mrad]"), escape("validation MAE [mrad]")):
        table.add_column(col, justify="right")
    for x in ranked:
        val = "-" if x.fit.validation is None else f"{1e3 * x.fit.validation:.2f}"
        table.add_row(str(x.rank), x.model, str(x.fit.split), f"{1e3 * x.fit.train:.2f}", val)
    console.print(table)
    for x in ranked:
        if x.fit.thermal:
            th = x.fit.thermal
            values = ", ".join(f"{k} {v:.4g}" for k, v in th["params"].items())
            mae = sum(th["train_mae"].values()) / len(th["train_mae"])
            console.print(f"{x.model} thermal ({th['nodes']} node{'s' if th['nodes'] > 1 else ''}): {values}; "
                          f"temperature MAE {mae:.3f} K")
    console.print(f"{ranked[0].model} → {out / 'params.json'}, {out / 'catalog.toml'}, {out / 'report.json'}; "
                  f"plots: {', '.join(doc['plots'])}", soft_wrap=True)
