"""The search space of an identification: which bam parameters are free, their bounds and start.

By default it is exactly bam 1.0.2's `bam.fit` space for the actuator and model
(config/identify/bounds.toml); `fix` pins parameters to a value; `free` frees only the parameters
it names, the others held at the catalog's published set of that model (bam's start value without
one). CMA-ES works on the unit cube: x = (value − low) / (high − low).
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

    @property
    def dim(self) -> int:
        return len(self.names)

    def to_unit(self, values: np.ndarray) -> np.ndarray:
        return (np.asarray(values) - self.low) / (self.high - self.low)

    def from_unit(self, x: np.ndarray) -> np.ndarray:
        return self.low + np.clip(x, 0.0, 1.0) * (self.high - self.low)

    def params_dict(self, values: np.ndarray) -> dict:
        """A bam parameter file's content: model, actuator, fixed and free values."""
        out: dict = {"model": self.model, "actuator": bam_actuator(self.actuator)}
        out.update(self.fixed)
        out.update({n: float(v) for n, v in zip(self.names, values, strict=True)})
        return out

    def params(self, values: np.ndarray) -> BamParams:
        return BamParams.model_validate(self.params_dict(values))


def space(actuator: str, model: str, fix: dict[str, float] | None = None, free: list[str] | None = None) -> Space:
    """bam's search space for `actuator` and `model`, with `fix` pinned and `free` freed."""
    if model not in MODELS:
        raise ConfigError(f"model: unknown {model!r} (known: {', '.join(MODELS)}, all)")
    table = bounds_table()
    act = _actuator_bounds(actuator)
    model_keys = list(MOTOR_KEYS) + list(table["models"][model])
    bounds = {k: table["friction"][k] for k in table["models"][model]}
    bounds.update({k: v for k, v in act.items() if k in model_keys})
    fix = dict(fix or {})
    for name in list(fix) + list(free or []):
        if name not in bounds:
            raise ConfigError(f"parameter {name!r}: not a parameter of {model} "
                              f"(has: {', '.join(model_keys)})")
    for name, value in fix.items():
        lo, hi, _ = bounds[name]
        if not lo <= value <= hi:
            raise ConfigError(f"--fix {name}={value:g}: out of its bounds [{lo:g}, {hi:g}]")
    if free:
        entry = catalog.entry(actuator)
        published = entry.models[model].model_dump() if model in entry.models else {}
        for name in model_keys:
            if name not in free and name not in fix:
                fix[name] = float(published.get(name, bounds[name][2]))
    names = tuple(k for k in model_keys if k not in fix)
    b = np.array([bounds[k] for k in names], dtype=float).reshape(-1, 3)
    return Space(actuator, model, names, b[:, 0], b[:, 1], b[:, 2], fix)


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
