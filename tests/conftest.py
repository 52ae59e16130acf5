"""Shared fixtures: where the reference material (`shared/reference/`) is."""

import os
from pathlib import Path

import pytest

_CANDIDATES = [
    os.environ.get("SERVO_HIL_SHARED", ""),
    str(Path(__file__).resolve().parents[2] / "shared"),  # CI: shared/ beside the clone
    "/work/shared",  # the development machines
]


def _shared() -> Path | None:
    for c in _CANDIDATES:
        if c and (Path(c) / "reference").is_dir():
            return Path(c) / "reference"
    return None


@pytest.fixture(scope="session")
def reference() -> Path:
    """`shared/reference/` (bam logs, golden rollouts, params, notes)."""
    ref = _shared()
    if ref is None:
        pytest.skip("shared/reference not found: set SERVO_HIL_SHARED to the folder holding reference/")
    return ref
