"""Two thermal resistances, winding → housing → ambient (MuJoCo DC motor model §1.3: R_T = R_th1 + R_th2),
with the published temperature (what Present Temperature reads) taken at the housing, where the servo's
sensor sits. Off by default (thermal_r2 = 0: one node)."""

from __future__ import annotations

import numpy as np
import pytest

from hil.kernel import LAWS, Kernel, default_params
from hil.params.dcmotor import DCMotor
from tests.hil.kernel_helpers import LOCKED, params

TA, R1, R2, C1, C2, RES = 25.0, 2.0, 3.0, 1.0, 10.0, 1.0


def _p(**kw):
    return params(**(dict(law=LAWS["current"], resistance=RES, kt=0.5, load_inertia=LOCKED, thermal_r=R1,
                          thermal_c=C1, thermal_r2=R2, thermal_c2=C2, ambient=TA, reftemp=TA) | kw))


def test_off_by_default():
    assert default_params()["thermal_r2"] == 0.0


def test_one_step_by_hand():
    # winding 10 K above ambient, housing at ambient, 2 A: P = 4 W, q = 10/R1 = 5 W to the housing
    dt = 1e-3
    k = Kernel(1, dt)
    k.set_params(0, _p())
    k.set_state(0, temperature=TA + 10.0)
    k.step([2.0])
    s = k.get_state(0)
    np.testing.assert_allclose(s["temp_rise"], 10.0 + dt * (4.0 - 5.0) / C1, rtol=1e-15)
    np.testing.assert_allclose(s["housing_rise"], dt * 5.0 / C2, rtol=1e-15)
    # the published temperature is the housing's at the step's start: ambient
    assert s["temperature"] == TA


def test_steady_state_and_sensor_lag():
    # 1 A, 1 W: the winding settles at P·(R_th1 + R_th2) above ambient, the housing (sensor) at P·R_th2
    dt = 0.01
    k = Kernel(1, dt)
    k.set_params(0, _p())
    k.set_state(0, temperature=TA)
    out = k.run(np.ones(60000), record=True)
    s = k.get_state(0)
    np.testing.assert_allclose(s["temp_rise"], 1.0 * (R1 + R2), rtol=1e-3)
    np.testing.assert_allclose(out["temperature"][-1, 0] - TA, 1.0 * R2, rtol=1e-3)
    # early on the sensor lags the winding: after 1 s the housing has risen < 0.1 K, while the one-node
    # model publishes the winding, already > 0.5 K up (τ1 = R_th1·C1 = 2 s)
    one = Kernel(1, dt)
    one.set_params(0, _p(thermal_r2=0.0, thermal_c2=0.0))
    one.set_state(0, temperature=TA)
    winding = one.run(np.ones(101))["temperature"][100, 0] - TA
    assert out["temperature"][100, 0] - TA < 0.1 < 0.5 < winding


def test_one_node_unchanged_bit_for_bit():
    a = Kernel(1, 1e-3)
    a.set_params(0, _p(thermal_r2=0.0, thermal_c2=0.0))
    b = Kernel(1, 1e-3)
    b.set_params(0, params(law=LAWS["current"], resistance=RES, kt=0.5, load_inertia=LOCKED,
                           thermal_r=R1, thermal_c=C1, ambient=TA, reftemp=TA))
    for k in (a, b):
        k.set_state(0, temperature=TA)
    oa, ob = a.run(np.full(500, 2.0)), b.run(np.full(500, 2.0))
    np.testing.assert_array_equal(oa["temperature"], ob["temperature"])


@pytest.mark.parametrize("kw", [dict(thermal2=[0.0, 10.0]), dict(thermal2=[3.0, -1.0])])
def test_bad_values_name_the_key(kw):
    with pytest.raises(ValueError, match="thermal2"):
        DCMotor(resistance=1.0, kt=0.5, thermal=[2.0, 1.0], **kw)
    with pytest.raises(ValueError, match="thermal2"):
        DCMotor(resistance=1.0, kt=0.5, thermal2=[3.0, 10.0])
