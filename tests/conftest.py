"""Shared fixtures: other projects' data, read from `../shared/reference/` beside the repository.

bam's recorded XL330 logs and its published parameter sets (Rhoban/bam, Apache-2.0) are not part of the
repository; every developer and CI place `shared/` beside the clone. Where it is absent, the tests that need
it skip with a one-line reason.
"""

from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"


def reference(sub: str, what: str) -> Path:
    """`../shared/reference/<sub>`, or skip the test that needs it, saying what it is."""
    path = REFERENCE / sub
    if not path.is_dir():
        pytest.skip(f"needs ../shared/reference/{sub} ({what})")
    return path


@pytest.fixture(scope="session")
def bam_params() -> Path:
    """bam's published parameter sets, `<actuator>/mN.json` (Rhoban/bam 1b5a1ce, `bam/params/`)."""
    return reference("bam_params", "bam's published parameter sets")


@pytest.fixture(scope="session")
def xl330_logs() -> Path:
    """bam's 12 processed XL330 logs (Rhoban/bam branch xl330, af22604, `bam/data.bak/processed/`)."""
    return reference("bam_logs/xl330/processed", "bam's recorded XL330 logs")
