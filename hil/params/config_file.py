"""Loading TOML into typed models, with one-line errors that name the offending key."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration file or value is wrong; the message names the file and the key."""


class Strict(BaseModel):
    """Base of every configuration model: unknown keys are errors, models are frozen, and every float
    (in lists and tables too) is finite: TOML's `nan` and `inf` are refused with the key's name, since no
    physical quantity, gain or time of a rig or catalog entry is infinite or not a number."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def describe(err: ValidationError, where: str) -> str:
    """Shortest useful text of a pydantic error: `where: a.b: message` for the first problem."""
    first = err.errors()[0]
    key = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    elif first["type"] == "missing":
        msg = "required key is missing"
    more = len(err.errors()) - 1
    # a model-wide check has no key of its own: its message names the keys
    return f"{where}: {key + ': ' if key else ''}{msg}" + (f" (and {more} more)" if more else "")


def read_toml(path: str | Path) -> dict:
    """Parse a TOML file; syntax errors become ConfigError with the file name."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def validate(model: type[M], data: dict, where: str) -> M:
    """Validate `data` against `model`, raising ConfigError naming the first bad key."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe(exc, where)) from None
