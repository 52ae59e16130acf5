"""One identification fit: CMA-ES with IPOP restarts (the `cmaes` library) over closed-loop rollouts.

The objective is bam's (`bam.fit`): the mean over logs of the mean |q_sim − q_log| [rad] of a
closed-loop rollout from the log's first state (Duclusaud et al., ICRA 2025, §V-B). Each generation
is one kernel run: every candidate on every training log is one actuator of `hil.offline.replay.rollout_batch`,
the function `servo-hil replay` rolls its logs with, so a replay of the fitted parameters gives the
same MAE. Restarts double the population (IPOP-CMA-ES, Auger & Hansen, CEC 2005) until the budget of
evaluations (candidate parameter sets, bam's `--trials`) is spent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import cmaes
import numpy as np

from hil.offline.identify.logs import NamedLog
from hil.offline.identify.space import Space, bounds_table, space
from hil.offline.replay import LogArrays, batch_params, replay_log, rollout_batch
from hil.params import catalog
from hil.params.bam import BamParams

SIGMA0 = 0.25          # initial step size on the unit cube: a quarter of every bound's range
INC_POPSIZE = 2        # IPOP's population factor per restart


@dataclass(frozen=True)
class FitTask:
    """Everything one fit needs; picklable, so that a process or a Dask worker can run it."""

    actuator: str
    model: str
    train: list[NamedLog]
    validation: list[NamedLog]
    trials: int
    seed: int
    split: int = 0
    fix: dict[str, float] = field(default_factory=dict)
    free: list[str] = field(default_factory=list)
    delay: bool = False
    integrator: str = "bam"


@dataclass
class FitResult:
    model: str
    split: int
    seed: int
    params: dict                      # bam parameter file content (plus delay_steps with --delay)
    train_mae: dict[str, float]       # per log [rad]
    validation_mae: dict[str, float]
    evaluations: int
    generations: int
    restarts: int
    seconds: float
    interrupted: bool
    history: list[tuple[int, float]]  # (evaluations, best training MAE [rad]) per generation
    free: list[str]

    @property
    def train(self) -> float:
        return float(np.mean(list(self.train_mae.values())))

    @property
    def validation(self) -> float | None:
        return float(np.mean(list(self.validation_mae.values()))) if self.validation_mae else None


def delay_bounds() -> tuple[int, int]:
    lo, hi = bounds_table()["delay"]["delay_steps"][:2]
    return int(lo), int(hi)


class Objective:
    """bam's MAE of many candidate parameter sets on the training logs, in one batched kernel run."""

    def __init__(self, sp: Space, logs: list[NamedLog], integrator: str) -> None:
        self.space = sp
        self.logs = [x.log for x in logs]
        self.arrays = [LogArrays.of(x) for x in self.logs]
        self.integrator = integrator
        self.base = catalog.entry(sp.actuator).actuator()

    def spec(self, params: BamParams):
        """The actuator `replay --params` builds from a parameter file."""
        return self.base.with_bam(params).bam_only()

    def __call__(self, values: list[np.ndarray], delays: list[int]) -> np.ndarray:
        specs = [self.spec(self.space.params(v)) for v in values]
        params = batch_params(specs, self.logs, self.integrator)
        cases = [(self.arrays[i % len(self.logs)], p) for i, p in enumerate(params)]
        rolled = rollout_batch(cases, [d for d in delays for _ in self.logs])
        mae = np.array([np.mean(np.abs(q - self.arrays[i % len(self.logs)].q)) for i, (q, _) in enumerate(rolled)])
        return mae.reshape(len(values), len(self.logs)).mean(axis=1)


def _optimizer(mean: np.ndarray, dim: int, seed: int, popsize: int | None, delay: bool):
    bounds = np.tile([0.0, 1.0], (dim, 1))
    if not delay:
        return cmaes.CMA(mean=mean, sigma=SIGMA0, bounds=bounds, seed=seed, population_size=popsize)
    lo, hi = delay_bounds()
    steps = np.zeros(dim)
    steps[-1] = 1.0 / (hi - lo)   # the delay [steps] is the last coordinate, an integer on the unit cube
    return cmaes.CMAwM(mean=mean, sigma=SIGMA0, bounds=bounds, steps=steps, seed=seed, population_size=popsize)


def run_fit(task: FitTask, progress: Callable[[int, float, dict | None], None] | None = None) -> FitResult:
    """Fit `task.model` on `task.train`; Ctrl-C ends it early with the best parameters found so far.

    `progress(evaluations, best MAE [rad], best parameters when they improved else None)` follows
    every generation.
    """
    t0 = time.perf_counter()
    sp = space(task.actuator, task.model, task.fix, task.free)
    objective = Objective(sp, task.train, task.integrator)
    lo_d, hi_d = delay_bounds()
    dim = sp.dim + (1 if task.delay else 0)
    start = sp.to_unit(sp.start)
    if task.delay:
        start = np.append(start, 0.0)
    rng = np.random.default_rng(task.seed)
    best_x, best_f = start, math.inf
    evaluations = generations = restarts = 0
    history: list[tuple[int, float]] = []
    popsize, mean = None, start
    interrupted = False

    def decode(x: np.ndarray) -> tuple[np.ndarray, int]:
        if task.delay:
            return sp.from_unit(x[:-1]), round(float(lo_d + np.clip(x[-1], 0, 1) * (hi_d - lo_d)))
        return sp.from_unit(x), 0

    def params_of(x: np.ndarray) -> dict:
        values, delay = decode(x)
        return sp.params_dict(values) | ({"delay_steps": delay} if task.delay else {})

    try:
        while True:
            opt = _optimizer(mean, dim, int(rng.integers(2**31)), popsize, task.delay)
            while evaluations + opt.population_size <= task.trials:
                asked = [opt.ask() for _ in range(opt.population_size)]
                evals = [a[0] if task.delay else a for a in asked]
                decoded = [decode(x) for x in evals]
                f = objective([v for v, _ in decoded], [d for _, d in decoded])
                opt.tell([(a[1] if task.delay else a, float(y)) for a, y in zip(asked, f, strict=True)])
                evaluations += len(f)
                generations += 1
                i = int(np.argmin(f))
                improved = f[i] < best_f
                if improved:
                    best_f, best_x = float(f[i]), evals[i]
                history.append((evaluations, best_f))
                if progress:
                    progress(evaluations, best_f, params_of(best_x) if improved else None)
                if opt.should_stop():
                    break
            if evaluations + opt.population_size * INC_POPSIZE > task.trials:
                break
            restarts += 1
            popsize = opt.population_size * INC_POPSIZE
            mean = rng.uniform(0.0, 1.0, dim)
    except KeyboardInterrupt:
        interrupted = True
    params = params_of(best_x)
    delay = params.get("delay_steps", 0)
    bam = BamParams.model_validate(params)
    spec = objective.spec(bam)
    # the reported MAE is replay's, log by log, as `servo-hil replay --params` computes it
    def maes(logs: list[NamedLog]) -> dict[str, float]:
        return {x.name: replay_log(x.log, spec, task.integrator, x.name, delay).mae for x in logs}

    return FitResult(task.model, task.split, task.seed, params, maes(task.train), maes(task.validation),
                     evaluations, generations, restarts, time.perf_counter() - t0, interrupted, history,
                     list(sp.names) + (["delay_steps"] if task.delay else []))
