"""What every family's control-table loader shares: finding a model's TOML file under config/<family>/, reading and
validating it once per modification time, and the range and overlap checks of register items. Each family keeps
its own file schema and item type."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol

from hil.params.config_file import ConfigError, read_toml, validate


class _Placed(Protocol):
    name: str
    address: int
    size: int


def model_names(folder: Path) -> list[str]:
    """Names of the models in `folder` (one `<name>.toml` each), sorted."""
    return sorted(p.stem for p in folder.glob("*.toml"))


@cache
def _load(build: Callable[[str, Any, str], Any], schema: type, name: str, path: str, mtime_ns: int) -> Any:
    return build(name, validate(schema, read_toml(path), path), path)


def load_model_file(folder: Path, name: str, family: str, schema: type,
                    build: Callable[[str, Any, str], Any]) -> Any:
    """`build(name, validated file, path)` of `folder/<name>.toml`, read against the pydantic `schema`; cached per
    path and modification time. An unknown name raises one ConfigError that lists the `family`'s models."""
    path = folder / f"{name}.toml"
    try:
        mtime = os.stat(path).st_mtime_ns
    except FileNotFoundError:
        raise ConfigError(f"unknown {family} model {name!r}; {folder} has: "
                          f"{', '.join(model_names(folder)) or 'none'}") from None
    return _load(build, schema, name, str(path), mtime)


def span(size: int, signed: bool) -> tuple[int, int]:
    """The values a `size`-byte register can hold: two's complement if `signed`, else unsigned."""
    bits = 8 * size
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def item_range(where: str, key: str, size: int, signed: bool, lo: int | None, hi: int | None) -> tuple[int, int]:
    """(lo, hi) of an item, the register's whole span where the file gives no bound; a ConfigError naming `key`
    if the bounds do not fit the register."""
    lo_rep, hi_rep = span(size, signed)
    lo = lo_rep if lo is None else lo
    hi = hi_rep if hi is None else hi
    if not lo_rep <= lo <= hi <= hi_rep:
        raise ConfigError(f"{where}: {key}: range {lo}..{hi} does not fit a {'signed' if signed else 'unsigned'} "
                          f"{size}-byte item")
    return lo, hi


def check_overlaps(where: str, key: str, items: Sequence[_Placed]) -> None:
    """A ConfigError naming `key` where two of `items` (sorted by address) share a byte or a name."""
    for a, b in pairwise(items):
        if a.address + a.size > b.address:
            raise ConfigError(f"{where}: {key}: {a.name!r} ({a.address}+{a.size}) overlaps {b.name!r} ({b.address})")
        if a.name == b.name:
            raise ConfigError(f"{where}: items: {a.name!r} appears twice")
