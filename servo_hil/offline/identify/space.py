"""The search space of an identification: which bam parameters are free, their bounds and start.

By default bam 1.0.2's `bam.fit` space for the actuator and model; `fix` and `free` narrow it, and also take
the temperature and stiction terms beyond bam; the thermal constants have a space of their own. CMA-ES works on
the unit cube of the bounds (of the logarithms for a logarithmic parameter): docs/identification.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from hil.params import catalog
from hil.params.bam import BamParams
from hil.params.config_file import ConfigError, read_toml

MODELS = ("m1", "m2", "m3", "m4", "m5", "m6")
MOTOR_KEYS = ("kt", "R", "armature")
TEMPERATURE_KEYS = ("friction_tempcoef",)            # catalog motor constants the position fit can free
STICTION_KEYS = ("stiction_rise", "stiction_time")   # the motor's dwell_stiction = [ΔFs, γ]
EXTRA_KEYS = TEMPERATURE_KEYS + STICTION_KEYS        # beyond bam: in the space only when named
THERMAL_KEYS = ("thermal_r", "thermal_c", "thermal_r2", "thermal_c2")   # one node: the first two


@cache
def bounds_table() -> dict:
    """config/identify/bounds.toml as a dict."""
    return read_toml(Path(catalog.config_dir()) / "identify" / "bounds.toml")


def bam_actuator(actuator: str) -> str:
    """bam's registry key of a catalog actuator (the `actuator` field of a bam parameter file)."""
    return _actuator_bounds(actuator)["bam"]


def _actuator_bounds(actuator: str) -> dict:
    catalog.entry(actuator)  # unknown names: one line listing the catalog
    table = bounds_table()["actuators"]
    if actuator not in table:
        raise ConfigError(f"actuator {actuator!r}: no identification bounds in config/identify/bounds.toml "
                          f"(has: {', '.join(sorted(table))})")
    return table[actuator]


@dataclass(frozen=True)
class Space:
    """Free parameters (names, bounds, start) and fixed values of one model of one actuator."""

    actuator: str
    model: str
    names: tuple[str, ...]
    low: np.ndarray
    high: np.ndarray
    start: np.ndarray
    fixed: dict[str, float] = field(default_factory=dict)
    log: bool = False   # the unit cube spans the logarithms of the bounds

    @property
    def dim(self) -> int:
        return len(self.names)

    def _scale(self, v: np.ndarray) -> np.ndarray:
        return np.log(v) if self.log else np.asarray(v, dtype=float)

    def to_unit(self, values: np.ndarray) -> np.ndarray:
        lo, hi = self._scale(self.low), self._scale(self.high)
        return (self._scale(values) - lo) / (hi - lo)

    def from_unit(self, x: np.ndarray) -> np.ndarray:
        lo, hi = self._scale(self.low), self._scale(self.high)
        v = lo + np.clip(x, 0.0, 1.0) * (hi - lo)
        return np.exp(v) if self.log else v

    def params_dict(self, values: np.ndarray) -> dict:
        """A bam parameter file's content (model, actuator, fixed and free values) plus the free or fixed
        `EXTRA_KEYS`, which are not bam's."""
        out: dict = {"model": self.model, "actuator": bam_actuator(self.actuator)}
        out.update(self.fixed)
        out.update({n: float(v) for n, v in zip(self.names, values, strict=True)})
        return out

    @property
    def temperature(self) -> bool:
        """Whether the rollouts need the temperature (a temperature coefficient is free or fixed)."""
        return any(k in self.names or k in self.fixed for k in TEMPERATURE_KEYS)

    def params(self, values: np.ndarray) -> BamParams:
        return bam_params(self.params_dict(values))


def bam_dict(params: dict) -> dict:
    """A fit's parameters without `EXTRA_KEYS` and `THERMAL_KEYS`: bam's own keys (a catalog model's set)."""
    return {k: v for k, v in params.items() if k not in EXTRA_KEYS + THERMAL_KEYS}


def bam_params(params: dict) -> BamParams:
    """The bam parameter set of a fit's parameters, with what it holds beyond bam (params.json's content)."""
    return BamParams.model_validate(params)


def thermal_constants(motor) -> dict[str, float]:
    """A MotorConstants' thermal constants, keyed as `THERMAL_KEYS` (0 where it has none)."""
    return dict(zip(THERMAL_KEYS, (motor.thermal_r, motor.thermal_c, *motor.thermal2), strict=True))


def thermal_space(actuator: str, nodes: int) -> Space:
    """The thermal constants fitted to logged temperature: R_T [K/W] and C [J/K] of one node, plus R_th2 and
    C2 of the housing with two; logarithmic, started at the catalog's values where it has them."""
    if nodes not in (1, 2):
        raise ConfigError(f"--thermal-nodes {nodes}: 1 (winding) or 2 (winding and housing)")
    names = THERMAL_KEYS[:2 * nodes]
    b = np.array([bounds_table()["thermal"][k] for k in names], dtype=float)
    have = thermal_constants(catalog.entry(actuator).actuator().motor)
    start = np.array([have[k] if b[i, 0] <= have[k] <= b[i, 1] else b[i, 2] for i, k in enumerate(names)])
    return Space(actuator, "thermal", names, b[:, 0], b[:, 1], start, {}, log=True)


def space(actuator: str, model: str, fix: dict[str, float] | None = None, free: list[str] | None = None) -> Space:
    """bam's search space for `actuator` and `model`, with `fix` pinned and `free` freed."""
    if model not in MODELS:
        raise ConfigError(f"model: unknown {model!r} (known: {', '.join(MODELS)}, all)")
    table = bounds_table()
    act = _actuator_bounds(actuator)
    fix = dict(fix or {})
    named = set(fix) | set(free or [])
    # beyond bam, only when named; ΔFs and γ only act together (the kernel's rise needs both > 0)
    extra = [k for k in TEMPERATURE_KEYS if k in named]
    extra += list(STICTION_KEYS) if named & set(STICTION_KEYS) else []
    model_keys = list(MOTOR_KEYS) + list(table["models"][model]) + extra
    bounds = {k: table["friction"][k] for k in table["models"][model]}
    bounds.update({k: table["temperature"][k] for k in extra if k in TEMPERATURE_KEYS})
    bounds.update({k: table["stiction"][k] for k in extra if k in STICTION_KEYS})
    bounds.update({k: v for k, v in act.items() if k in model_keys})
    for name in list(fix) + list(free or []):
        if name not in bounds:
            raise ConfigError(f"parameter {name!r}: not a parameter of {model} "
                              f"(has: {', '.join(model_keys + [k for k in EXTRA_KEYS if k not in extra])})")
    for name, value in fix.items():
        lo, hi, _ = bounds[name]
        if not lo <= value <= hi:
            raise ConfigError(f"--fix {name}={value:g}: out of its bounds [{lo:g}, {hi:g}]")
    if free:
        published = published_set(actuator, model)
        for name in model_keys:
            if name not in free and name not in fix:
                fix[name] = float(published.get(name, bounds[name][2]))
    names = tuple(k for k in model_keys if k not in fix)
    b = np.array([bounds[k] for k in names], dtype=float).reshape(-1, 3)
    return Space(actuator, model, names, b[:, 0], b[:, 1], b[:, 2], fix)


def published_set(actuator: str, model: str) -> dict:
    """The catalog's published set of `model` (empty without one), its motor's friction_tempcoef and, when it has
    one, its dwell_stiction (as `STICTION_KEYS`)."""
    entry = catalog.entry(actuator)
    motor = entry.actuator().motor
    out = entry.models[model].model_dump() if model in entry.models else {}
    stiction = dict(zip(STICTION_KEYS, motor.dwell_stiction, strict=True)) if all(motor.dwell_stiction) else {}
    return out | {"friction_tempcoef": motor.friction_tempcoef} | stiction


def parse_assignments(items: list[str], option: str = "--fix") -> dict[str, float]:
    """["kt=0.4", …] → {"kt": 0.4}; a malformed item names itself."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"{option} {item!r}: expected NAME=VALUE with a number") from None
    return out
