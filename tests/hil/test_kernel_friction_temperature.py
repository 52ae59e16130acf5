"""Friction that varies with the winding temperature, beyond every anchor (Duclusaud et al., ICRA 2025,
§VII-A lists it as a limitation): bam's budget × max(0, 1 + α_f·(T − T0)). Hand-computed stopping
torques; off by default."""

from __future__ import annotations

import numpy as np
import pytest

from hil.kernel import LAWS, default_params
from hil.params.dcmotor import DCMotor
from tests.hil.kernel_helpers import params
from tests.hil.test_kernel_analytic import run

TA, KC = 25.0, 0.5


def _p(**kw):
    return params(**(dict(law=LAWS["torque"], load_inertia=1.0, budget=1, friction_base=KC, thermal_r=1.0,
                          thermal_c=1e12, ambient=TA, reftemp=TA, resistance=1.0, kt=0.5) | kw))


def test_off_by_default():
    assert default_params()["friction_tempcoef"] == 0.0


@pytest.mark.parametrize(("temp", "alpha", "scale"), [(25.0, 0.01, 1.0), (75.0, 0.01, 1.5), (75.0, -0.01, 0.5),
                                                       (225.0, -0.01, 0.0), (75.0, 0.0, 1.0)])
def test_budget_scales_with_winding_temperature(temp, alpha, scale):
    # 1 N·m applied from rest: the budget Kc·scale opposes it (below the 1 N·m stopping torque)
    out = run(_p(friction_tempcoef=alpha), np.ones(1), 1e-3, temperature=temp)
    np.testing.assert_allclose(out["friction_torque"][0], -KC * scale, rtol=1e-12, atol=1e-15)


def test_catalog_key():
    m = DCMotor(resistance=1.0, kt=0.5, friction_tempcoef=0.002).resolve()
    assert m.kernel_params()["friction_tempcoef"] == 0.002
