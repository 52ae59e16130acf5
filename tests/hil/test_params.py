"""Parameter objects: how a bam set replaces the catalog motor."""

import math

from hil.params import catalog


def test_bam_set_recomputes_the_current_limited_torque():
    """The catalog gives imax (Current Limit); with bam's kt the torque limit is kt·imax, not the catalog K·imax."""
    entry = catalog.entry("mx64")
    imax = entry.motor.saturation[1]
    base, m1 = entry.actuator().motor, entry.actuator("m1").motor
    assert math.isclose(base.torque_limit, base.kt * imax)
    assert math.isclose(m1.torque_limit, entry.models["m1"].kt * imax)
    assert m1.kernel_params()["tau_max"] == m1.torque_limit != base.torque_limit


def test_bam_only_strips_what_bam_does_not_model():
    spec = catalog.entry("mx64").actuator("m6").bam_only()
    p = spec.kernel_params()
    assert p["thermal_r"] == 0 and p["tau_max"] == 0 and p["te"] == 0 and p["encoder_counts"] == 0
    assert p["kt"] == catalog.entry("mx64").models["m6"].kt and p["budget"] == 1
    assert p["budget_quadratic"] == 1
