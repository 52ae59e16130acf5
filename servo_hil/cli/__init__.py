"""The `servo-hil` command (typer app in `servo_hil.cli.main`)."""

import sys


def servo_hil() -> None:
    """The `servo-hil` command: one line instead of a traceback when the compiled extensions are missing (a
    checkout where `make run` has not run yet)."""
    try:
        from servo_hil.cli.main import app

        app()
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] not in ("hil", "firmware_models", "drivers", "bench"):
            raise
        print(f"servo-hil: error: {exc.name} is not built: run `make run` (or `pip install -e .`) in the checkout",
              file=sys.stderr)
        sys.exit(2)
