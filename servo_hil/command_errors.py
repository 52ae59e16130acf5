"""How a `servo-hil` command ends on bad input: one `servo-hil: error:` line naming the problem, exit status 2.
Outside servo_hil/cli so that the benchmarks' sub-app (bench/cli.py), which servo_hil/cli loads, need not import
servo_hil/cli back."""

from __future__ import annotations

import functools
import sys

import typer

from hil.params.config_file import ConfigError


def one_line_errors(fn):
    """Bad input ends the command with one line naming the problem and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            print(f"servo-hil: error: {exc}", file=sys.stderr)
            raise typer.Exit(2) from None
        except OSError as exc:  # an output path that cannot be written, a device that cannot be opened
            where = f"{exc.filename}: " if exc.filename else ""
            print(f"servo-hil: error: {where}{exc.strerror or exc}", file=sys.stderr)
            raise typer.Exit(2) from None

    return wrapper
