"""One identification fit: CMA-ES with restarts (the `cmaes` library) over closed-loop rollouts.

The objective is bam's mean |q_sim − q_log| [rad] (Duclusaud et al., ICRA 2025, §V-B); a generation is one
kernel run of every candidate on every training log through `rollout_batch`, which `servo-hil replay` also
uses, so a replay of the fitted parameters gives the same MAE (docs/identification.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

import cmaes
import numpy as np

from hil.params import catalog
from servo_hil.offline.identify.logs import NamedLog, check_temperature
from servo_hil.offline.identify.space import (
    bam_params,
    bounds_table,
    published_set,
    space,
    thermal_constants,
    thermal_space,
)
from servo_hil.offline.replay import LogArrays, batch_params, replay_log, rollout_batch


@dataclass(frozen=True)
class Search:
    """How the CMA-ES of one fit searches the unit cube of the bounds.

    It starts at the catalog's published set of the model (bam's start values for what it lacks; `start`
    "bam" or "centre" for those or the cube's centre): on bam's XL330 logs a start at the centre with optuna's
    range/6, as bam.fit's sampler starts, spends about half of a 2000-evaluation budget walking to the region
    the published set is already in. From a published set each coordinate's first step is `rel_step` of its
    distance from its lower bound, within [`min_step`, `sigma0`] of its range (a diagonal initial covariance:
    the optimum should lie within x0 ± σ0 coordinate by coordinate, Hansen's practical hints on CMA-ES,
    cma-es.github.io "cmaes_inmatlab.html#practical"). bam's bounds span 10 to 1000 times the values a servo
    has (viscous friction 0–1 N·m·s/rad for the XL330's 0.004), so one step of 0.05 of every range is several
    times a small coefficient itself, and a 2000-evaluation run spends its budget learning the scales instead
    of the fit. A run that converges (`cmaes.CMA.should_stop`) restarts at a uniform random point with
    `sigma0` (as optuna's former restart strategies did): with a doubled population (IPOP-CMA-ES, Auger &
    Hansen, CEC 2005), or alternating that with small populations and step sizes (BIPOP-CMA-ES, Hansen,
    GECCO BBOB 2009).
    """

    start: Literal["published", "bam", "centre"] = "published"
    sigma0: float = 0.05            # step size on the unit cube: the first run's largest, every restart's
    rel_step: float = 0.3           # the first run's step: this share of a coordinate's distance from its low bound
    min_step: float = 0.001         # … at least this much of the unit cube
    restarts: Literal["bipop", "ipop", "none"] = "bipop"
    inc_popsize: int = 2            # population factor of a large restart

    def first_steps(self, first: np.ndarray) -> np.ndarray:
        """The first run's step per coordinate of the unit cube, from its start `first`: scaled to a published
        set's values, `sigma0` everywhere from bam's start values or the centre (far from the servo's scale)."""
        first = np.asarray(first, dtype=float)
        if self.start != "published":
            return np.full(len(first), self.sigma0)
        return np.clip(self.rel_step * first, self.min_step, self.sigma0)

    def doc(self) -> dict:
        return asdict(self)


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
    search: Search = field(default_factory=Search)
    thermal_nodes: int = 0   # 1 or 2: fit the thermal constants to the logged temperature after the position


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
    thermal: dict | None = None       # the thermal stage (`fit_thermal`), with --thermal-nodes
    runs: list[tuple[str, int]] = field(default_factory=list)   # (regime, population) of each CMA-ES run

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
    """bam's MAE of many candidate parameter sets on some logs, in one batched kernel run.

    With `temperature`, each rollout also runs the catalog's thermal model (MuJoCo DC motor model §1.3)
    from the log's first logged temperature, taken as the log's ambient (the servo at rest when the log
    starts), and `per_log(…, thermal=True)` scores the published temperature against the logged one.
    """

    def __init__(self, actuator: str, logs: list[NamedLog], integrator: str, temperature: bool = False,
                 why: str = "") -> None:
        self.logs = [x.log for x in logs]
        self.arrays = [LogArrays.of(x) for x in self.logs]
        self.integrator = integrator
        self.base = catalog.entry(actuator).actuator()
        self.temperature = temperature
        if temperature:
            check_temperature(logs, why)

    def with_thermal(self, params: dict) -> dict:
        """With `temperature`, `params` plus the catalog's thermal constants and friction temperature coefficient
        where it has none of its own: the set the rollouts run, and the one params.json holds so that `replay
        --params` runs it too (`BamParams` beyond bam)."""
        if not self.temperature:
            return params
        m = self.base.motor
        return thermal_constants(m) | {"friction_tempcoef": m.friction_tempcoef} | params

    def spec(self, params: dict):
        """The actuator of a fit's parameters: the one `replay --params` builds from their bam set (with what the
        set holds beyond bam: rising static friction, thermal model)."""
        return self.base.with_bam(bam_params(self.with_thermal(params))).bam_only()

    def rollouts(self, candidates: list[dict], delays: list[int]) -> list[tuple[np.ndarray, ...]]:
        """Every candidate (a fit's parameters) on every log, candidate-major."""
        params = batch_params([self.spec(c) for c in candidates], self.logs, self.integrator)
        n = len(self.logs)
        cases = [(self.arrays[i % n], p) for i, p in enumerate(params)]
        return rollout_batch(cases, [d for d in delays for _ in self.logs], temperature=self.temperature)

    def per_log(self, rolled: list[tuple[np.ndarray, ...]], thermal: bool = False) -> np.ndarray:
        """(candidates, logs) MAE: of the position [rad], or of the temperature [K] with `thermal`."""
        n = len(self.logs)
        mae = [np.mean(np.abs(r[2] - self.arrays[i % n].temp)) if thermal else
               np.mean(np.abs(r[0] - self.arrays[i % n].q)) for i, r in enumerate(rolled)]
        return np.array(mae).reshape(-1, n)

    def __call__(self, candidates: list[dict], delays: list[int]) -> np.ndarray:
        return self.per_log(self.rollouts(candidates, delays)).mean(axis=1)


class _Run:
    """One CMA-ES run of a fit and its restarts (`Search.restarts`), on the unit cube of `dim` coordinates."""

    def __init__(self, search: Search, mean: np.ndarray, rng: np.random.Generator, delay: bool) -> None:
        self.search, self.rng, self.delay, self.dim = search, rng, delay, len(mean)
        self.large = 0                  # BIPOP: restarts in the large-population regime so far
        self.budget = {"small": 0, "large": 0}
        self.regime = "large"           # BIPOP counts the first run with the large regime
        steps = search.first_steps(mean)
        if delay:
            steps[-1] = search.sigma0   # the latency [steps] is an integer coordinate: its full first step
        self.opt = self._new(mean, float(steps.max()), None, np.diag((steps / steps.max()) ** 2))
        self.popsize0 = self.opt.population_size
        self.runs = [("large", self.popsize0)]   # (regime, population) of the first run and every restart

    def _new(self, mean: np.ndarray, sigma: float, popsize: int | None, cov: np.ndarray | None = None):
        bounds = np.tile([0.0, 1.0], (self.dim, 1))
        seed = int(self.rng.integers(2**31))
        if not self.delay:
            return cmaes.CMA(mean=mean, sigma=sigma, bounds=bounds, seed=seed, population_size=popsize, cov=cov)
        lo, hi = delay_bounds()
        steps = np.zeros(self.dim)
        steps[-1] = 1.0 / (hi - lo)   # the delay [steps] is the last coordinate, an integer on the unit cube
        return cmaes.CMAwM(mean=mean, sigma=sigma, bounds=bounds, steps=steps, seed=seed, population_size=popsize,
                           cov=cov)

    @property
    def population(self) -> int:
        return self.opt.population_size

    def ask(self) -> list:
        return [self.opt.ask() for _ in range(self.population)]

    def tell(self, solutions: list) -> None:
        self.opt.tell(solutions)
        self.budget[self.regime] += len(solutions)
        if self.search.restarts != "none" and self.opt.should_stop():
            self._restart()

    def _restart(self) -> None:
        s, mean = self.search, self.rng.uniform(0.0, 1.0, self.dim)
        if s.restarts == "ipop" or self.budget["large"] <= self.budget["small"]:
            self.large += 1
            self.regime = "large"
            self.opt = self._new(mean, s.sigma0, self.popsize0 * s.inc_popsize ** self.large)
        else:
            # BIPOP's small regime (Hansen 2009, §2): λ_s = ⌊λ_def·(λ_large/(2·λ_def))^(U²)⌋, σ_s = σ_def·10^(−2U)
            u = self.rng.uniform()
            ratio = s.inc_popsize ** self.large / 2
            self.regime = "small"
            self.opt = self._new(mean, s.sigma0 * 10 ** (-2 * u),
                                 max(self.popsize0, math.floor(self.popsize0 * ratio ** (u * u))))
        self.runs.append((self.regime, self.population))


def _first(sp, start: str) -> np.ndarray:
    """The first mean on the unit cube: its centre, bam's start values, or the catalog's published set of the
    model (bam's start values for the parameters it lacks)."""
    if start == "centre":
        return np.full(sp.dim, 0.5)
    values = sp.start
    if start == "published":
        pub = published_set(sp.actuator, sp.model)
        values = np.clip([pub.get(n, v) for n, v in zip(sp.names, sp.start, strict=True)], sp.low, sp.high)
    return sp.to_unit(values)


@dataclass
class Outcome:
    best_x: np.ndarray
    best_f: float
    evaluations: int
    generations: int
    runs: list[tuple[str, int]]       # (BIPOP regime, population) of the first run and every restart
    history: list[tuple[int, float]]
    interrupted: bool


def minimize(f: Callable[[list[np.ndarray]], np.ndarray], first: np.ndarray, search: Search, trials: int,
              rng: np.random.Generator, delay: bool = False,
              progress: Callable[[int, float, np.ndarray | None], None] | None = None) -> Outcome:
    """Minimize `f` (a generation of points of the unit cube → their values) within `trials` evaluations (a
    generation that would exceed them is not started); Ctrl-C ends it with the best point so far.
    `progress(evaluations, best value, best point if it improved else None)` follows every generation."""
    run = _Run(search, first, rng, delay)
    out = Outcome(first, math.inf, 0, 0, run.runs, [], False)
    try:
        while out.evaluations + run.population <= trials:
            asked = run.ask()
            points = [a[0] if delay else a for a in asked]
            values = f(points)
            run.tell([(a[1] if delay else a, float(y)) for a, y in zip(asked, values, strict=True)])
            out.evaluations += len(values)
            out.generations += 1
            i = int(np.argmin(values))
            improved = values[i] < out.best_f
            if improved:
                out.best_f, out.best_x = float(values[i]), points[i]
            out.history.append((out.evaluations, out.best_f))
            if progress:
                progress(out.evaluations, out.best_f, out.best_x if improved else None)
    except KeyboardInterrupt:
        out.interrupted = True
    return out


def run_fit(task: FitTask, progress: Callable[[str, int, float, dict | None], None] | None = None) -> FitResult:
    """Fit `task.model` on `task.train`; Ctrl-C ends it early with the best parameters found so far.

    `progress(stage, evaluations, best, best parameters when they improved else None)` follows every generation:
    stage "position" (best: the MAE [rad]), then, with `task.thermal_nodes`, "thermal" (best: the temperature
    MAE [K]; no parameters).
    """
    t0 = time.perf_counter()
    sp = space(task.actuator, task.model, task.fix, task.free)
    # with a thermal fit to follow, the position's rollouts heat the winding too (R(T), MuJoCo DC motor model
    # §1.3.3), with the catalog's thermal constants: the heat the thermal fit sees comes from these parameters
    temperature = sp.temperature or task.thermal_nodes > 0
    objective = Objective(task.actuator, task.train, task.integrator, temperature,
                          "--thermal-nodes" if task.thermal_nodes else "a free friction_tempcoef")
    lo_d, hi_d = delay_bounds()
    search = task.search
    first = _first(sp, search.start)
    if task.delay:
        first = np.append(first, 0.5 if search.start == "centre" else 0.0)
    rng = np.random.default_rng(task.seed)

    def decode(x: np.ndarray) -> tuple[np.ndarray, int]:
        if task.delay:
            return sp.from_unit(x[:-1]), round(float(lo_d + np.clip(x[-1], 0, 1) * (hi_d - lo_d)))
        return sp.from_unit(x), 0

    def params_of(x: np.ndarray) -> dict:
        values, delay = decode(x)
        return sp.params_dict(values) | ({"delay_steps": delay} if task.delay else {})

    def f(points: list[np.ndarray]) -> np.ndarray:
        decoded = [decode(x) for x in points]
        return objective([sp.params_dict(v) for v, _ in decoded], [d for _, d in decoded])

    tell = (lambda e, b, x: progress("position", e, b, None if x is None else params_of(x))) if progress else None
    out = minimize(f, first, search, task.trials, rng, task.delay, tell)
    params = objective.with_thermal(params_of(out.best_x))
    delay = params.get("delay_steps", 0)
    thermal = None
    if task.thermal_nodes and not out.interrupted:
        thermal = fit_thermal(task, params, delay, rng,
                              (lambda e, b, _x: progress("thermal", e, b, None)) if progress else None)
        if not thermal["interrupted"]:   # the set then runs (and params.json holds) the fitted thermal constants
            params = params | thermal["params"]
    train, validation = _maes(task, params, delay)
    return FitResult(task.model, task.split, task.seed, params, train, validation, out.evaluations,
                     out.generations, len(out.runs) - 1, time.perf_counter() - t0,
                     out.interrupted or bool(thermal and thermal["interrupted"]), out.history,
                     list(sp.names) + (["delay_steps"] if task.delay else []), thermal, out.runs)


def _maes(task: FitTask, params: dict, delay: int, thermal: bool = False) -> tuple[dict[str, float], dict[str, float]]:
    """Per-log MAE [rad] of `params` on the training and the validation logs, as `servo-hil replay --params`
    computes it from their params.json; with `thermal`, of the published temperature [K] instead."""
    out = []
    for logs in (task.train, task.validation):
        if not logs:
            out.append({})
        elif thermal:
            o = Objective(task.actuator, logs, task.integrator, True, "--thermal-nodes")
            per = o.per_log(o.rollouts([params], [delay]), thermal)[0]
            out.append({x.name: float(v) for x, v in zip(logs, per, strict=True)})
        else:
            spec = Objective(task.actuator, [], task.integrator).spec(params)
            out.append({x.name: replay_log(x.log, spec, task.integrator, x.name, delay).mae for x in logs})
    return out[0], out[1]


def fit_thermal(task: FitTask, params: dict, delay: int, rng: np.random.Generator,
                progress: Callable[[int, float, np.ndarray | None], None] | None = None) -> dict:
    """The thermal constants (`thermal_space`) fitted to the logged temperature of the training logs, the
    position parameters held at `params`: the same CMA-ES and budget, minimizing the mean over logs of the
    mean |T_sim − T_log| [K] of the closed-loop rollouts (`Objective` with temperature). `progress` as
    `minimize`'s."""
    t0 = time.perf_counter()
    tsp = thermal_space(task.actuator, task.thermal_nodes)
    objective = Objective(task.actuator, task.train, task.integrator, True, "--thermal-nodes")

    def candidate(x: np.ndarray) -> dict:
        return params | {n: float(v) for n, v in zip(tsp.names, tsp.from_unit(x), strict=True)}

    def f(points: list[np.ndarray]) -> np.ndarray:
        cands = [candidate(x) for x in points]
        return objective.per_log(objective.rollouts(cands, [delay] * len(cands)), thermal=True).mean(axis=1)

    # on logarithmic axes a step is already relative to the value: the same first step for every constant
    search = replace(task.search, min_step=task.search.sigma0)
    out = minimize(f, tsp.to_unit(tsp.start), search, task.trials, rng, progress=progress)
    best = candidate(out.best_x)
    train, validation = _maes(task, best, delay, thermal=True)
    return {"nodes": task.thermal_nodes, "params": {n: best[n] for n in tsp.names}, "train_mae": train,
            "validation_mae": validation, "evaluations": out.evaluations, "generations": out.generations,
            "restarts": len(out.runs) - 1, "runs": out.runs, "history": out.history, "interrupted": out.interrupted,
            "seconds": time.perf_counter() - t0}
