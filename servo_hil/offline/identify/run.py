"""Plan the fits of an identification (models × train/validation splits) and run them: in this
process, in local worker processes, or on a Dask distributed cluster."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

import numpy as np

from hil.params.config_file import ConfigError
from servo_hil.offline.identify.fit import FitResult, FitTask, Search, run_fit
from servo_hil.offline.identify.logs import NamedLog


def splits(logs: list[NamedLog], validation: list[NamedLog] | None, validation_kp: float | None,
           split: float | None, repeats: int, seed: int) -> list[tuple[list[NamedLog], list[NamedLog]]]:
    """(train, validation) pairs: given validation logs, bam's `--validation_kp` (every log at that gain
    held out), or the paper's random hold-out of a fraction `split`, `repeats` times; else no validation."""
    if validation:
        return [(logs, validation)]
    if validation_kp is not None:
        held = [x for x in logs if x.log.kp == validation_kp]
        kept = [x for x in logs if x.log.kp != validation_kp]
        if not held or not kept:
            gains = sorted({x.log.kp for x in logs})
            raise ConfigError(f"--validation-kp {validation_kp:g}: must hold out some but not all logs "
                              f"(gains in the logs: {', '.join(f'{g:g}' for g in gains)})")
        return [(kept, held)]
    if split:
        if not 0 < split < 1:
            raise ConfigError(f"--split {split:g}: must be in (0, 1)")
        k = round(split * len(logs))
        if not 1 <= k < len(logs):
            raise ConfigError(f"--split {split:g}: {len(logs)} logs leave {k} for validation; need 1..{len(logs) - 1}")
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(repeats):
            order = rng.permutation(len(logs))
            held = set(order[:k].tolist())
            out.append(([x for i, x in enumerate(logs) if i not in held], [logs[i] for i in sorted(held)]))
        return out
    return [(logs, [])]


def plan(actuator: str, models: list[str], pairs: list[tuple[list[NamedLog], list[NamedLog]]], trials: int,
         seed: int, fix: dict[str, float], free: list[str], delay: bool, thermal_nodes: int = 0,
         search: Search | None = None) -> list[FitTask]:
    """One task per model and split; each with its own seed derived from `seed`, so the result does not
    depend on where or in which order the tasks run."""
    seeds = np.random.SeedSequence(seed).generate_state(len(models) * len(pairs))
    return [FitTask(actuator, m, train, val, trials, int(seeds[i * len(pairs) + s]), s, fix, free, delay,
                    search=search or Search(), thermal_nodes=thermal_nodes)
            for i, m in enumerate(models) for s, (train, val) in enumerate(pairs)]


def execute(tasks: list[FitTask], workers: int = 1, scheduler: str | None = None,
            on_generation: Callable[[FitTask, str, int, float, dict | None], None] | None = None,
            on_fit: Callable[[FitResult], None] | None = None) -> list[FitResult]:
    """Run every task; results in task order. Ctrl-C keeps what the fits found so far.

    In this process each generation is reported (`on_generation(task, stage, evaluations, best, best parameters if
    improved)`, as `run_fit`'s progress); with workers or a scheduler, each finished fit (`on_fit`).
    """
    if scheduler:
        return _dask(tasks, scheduler, on_fit)
    if workers > 1:
        return _pool(tasks, workers, on_fit)
    results = []
    for task in tasks:
        r = run_fit(task, (lambda *a, t=task: on_generation(t, *a)) if on_generation else None)
        results.append(r)
        if on_fit:
            on_fit(r)
        if r.interrupted:
            break
    return results


def _pool(tasks: list[FitTask], workers: int, on_fit) -> list[FitResult]:
    done: dict[int, FitResult] = {}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_fit, t): i for i, t in enumerate(tasks)}
        pending = set(futures)
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    done[futures[f]] = f.result()
                    if on_fit:
                        on_fit(done[futures[f]])
        except KeyboardInterrupt:
            # the workers had the same SIGINT: running fits return their best so far, queued ones never start
            for f in pending:
                f.cancel()
            for f in pending:
                if not f.cancelled():
                    done[futures[f]] = f.result()
    return [done[i] for i in sorted(done)]


def _dask(tasks: list[FitTask], scheduler: str, on_fit) -> list[FitResult]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ConfigError("--scheduler needs dask.distributed: pip install 'servo-hil[cluster]'") from None
    try:
        client = Client(scheduler, timeout="10s")
    except OSError as exc:
        raise ConfigError(f"--scheduler {scheduler}: {exc}") from None
    with client:
        futures = client.map(run_fit, tasks, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        done: dict[int, FitResult] = {}
        try:
            for f in as_completed(futures):
                done[index[f.key]] = f.result()
                if on_fit:
                    on_fit(done[index[f.key]])
        except KeyboardInterrupt:
            client.cancel([f for f in futures if not f.done()])
    return [done[i] for i in sorted(done)]
