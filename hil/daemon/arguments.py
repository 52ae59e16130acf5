"""Validation of command and fault arguments: every refusal names the argument and the reason."""

from __future__ import annotations

import math
from typing import Any


class CommandError(ValueError):
    """A command was refused; the message names the command, argument or value."""


def number(args: dict[str, Any], key: str, lo: float, hi: float, default: float | None = None,
           where: str = "") -> float:
    """args[key] as a finite float within [lo, hi]; `default` when absent (required if None)."""
    prefix = f"{where}: " if where else ""
    if key not in args:
        if default is None:
            raise CommandError(f"{prefix}missing argument {key!r}")
        return default
    v = args[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise CommandError(f"{prefix}{key} must be a finite number, got {v!r}")
    if not lo <= v <= hi:
        raise CommandError(f"{prefix}{key} = {v} is out of range [{lo:g}, {hi:g}]")
    return float(v)


def only(args: dict[str, Any], allowed: tuple[str, ...], where: str = "") -> None:
    """Refuse any argument not in `allowed` ('cmd' and 'id' are always allowed)."""
    for k in args:
        if k not in ("cmd", "id", *allowed):
            prefix = f"{where}: " if where else ""
            raise CommandError(f"{prefix}unknown argument {k!r} (allowed: {', '.join(allowed) or 'none'})")
