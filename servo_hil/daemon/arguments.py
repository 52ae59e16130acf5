"""Validation of command and fault arguments: every refusal names the argument and the reason."""

from __future__ import annotations

import math
import reprlib
from typing import Any

# A refusal names the bad value, never echoes it whole: a 10 MB string or a million-entry map sent as an
# argument comes back as a few dozen characters (reprlib elides the middle of long strings and containers).
_SHORT = reprlib.Repr()
for _limit in ("maxdict", "maxlist", "maxtuple", "maxset", "maxfrozenset", "maxdeque", "maxarray"):
    setattr(_SHORT, _limit, 4)
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxlong, _SHORT.maxother = 2, 40, 40, 40


class CommandError(ValueError):
    """A command was refused; the message names the command, argument or value."""


def shown(value: Any) -> str:
    """`repr(value)` cut to about 40 characters per string and 4 items per container (for error messages and
    log lines about input from outside)."""
    try:
        return _SHORT.repr(value)
    except ValueError:   # an int past Python's digit limit for str() (sys.set_int_max_str_digits)
        return f"<{type(value).__name__} too long to show>"


def number(args: dict[str, Any], key: str, lo: float, hi: float, default: float | None = None,
           where: str = "") -> float:
    """args[key] as a finite float within [lo, hi]; `default` when absent (required if None)."""
    prefix = f"{where}: " if where else ""
    if key not in args:
        if default is None:
            raise CommandError(f"{prefix}missing argument {key!r}")
        return default
    v = args[key]
    try:   # an int beyond a double (JSON's 10**400) is as unusable as inf: float() raises OverflowError
        finite = not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(float(v))
    except OverflowError:
        finite = False
    if not finite:
        raise CommandError(f"{prefix}{key} must be a finite number, got {shown(v)}")
    if not lo <= v <= hi:
        raise CommandError(f"{prefix}{key} = {v} is out of range [{lo:g}, {hi:g}]")
    return float(v)


def only(args: dict[str, Any], allowed: tuple[str, ...], where: str = "") -> None:
    """Refuse any argument not in `allowed` ('cmd' and 'id' are always allowed)."""
    for k in args:
        if k not in ("cmd", "id", *allowed):
            prefix = f"{where}: " if where else ""
            raise CommandError(f"{prefix}unknown argument {shown(k)} (allowed: {', '.join(allowed) or 'none'})")
