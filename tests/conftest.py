"""Shared fixtures: bam's data shipped with the project (`data/bam/`: logs, parameter sets, golden rollouts)."""

from pathlib import Path

import pytest

BAM_DATA = Path(__file__).resolve().parents[1] / "data" / "bam"


@pytest.fixture(scope="session")
def bam_data() -> Path:
    """`data/bam/`: `logs/xl330/{raw,processed}`, `params/<actuator>/mN.json`, `golden/`."""
    return BAM_DATA
