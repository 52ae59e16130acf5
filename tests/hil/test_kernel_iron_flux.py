"""Iron loss K_fe·ω² in the heat balance (MuJoCo DC motor model §1.3.2) and magnet flux derating
K(T) = K0(1 + α_m(T − T0)) (§1.3.4): hand-computed steps; both off by default."""

from __future__ import annotations

import numpy as np
import pytest

from hil.kernel import LAWS, default_params
from hil.params.dcmotor import DCMotor
from tests.hil.kernel_helpers import LOCKED, params
from tests.hil.test_kernel_analytic import run

TA, DT = 25.0, 1e-3


def test_off_by_default():
    d = default_params()
    assert d["iron_loss"] == 0.0 and d["flux_tempcoef"] == 0.0


@pytest.mark.parametrize("gear", [1.0, 3.0])
def test_iron_loss_heats_at_speed(gear):
    # no current (a torque law commanding 0), ω held by a locked load: one Euler step of
    # C·dT/dt = K_fe·(g·ω)² − T/R_T from T = 0 gives ΔT = dt·K_fe·(g·ω)²/C
    kfe, w, c = 2e-4, 10.0, 0.5
    p = params(law=LAWS["torque"], gear=gear, load_inertia=LOCKED, iron_loss=kfe, thermal_r=3.0, thermal_c=c,
               ambient=TA, reftemp=TA, resistance=1.0, kt=0.5)
    out = run(p, np.zeros(2), DT, omega=w, temperature=TA)
    np.testing.assert_allclose(out["temperature"][1] - TA, DT * kfe * (gear * w) ** 2 / c, rtol=1e-9)  # 25 °C + ΔT
    still = run(p, np.zeros(2), DT, omega=0.0, temperature=TA)
    assert still["temperature"][1] == TA


@pytest.mark.parametrize("temp", [25.0, 75.0, 125.0])
def test_flux_derating_lowers_the_torque_constant(temp):
    # locked rotor, voltage law, temperature held (C huge): τ = K(T)·V/R, i = V/R unchanged
    am, k0, r, v = -0.002, 0.5, 1.0, 4.0
    p = params(resistance=r, kt=k0, load_inertia=LOCKED, flux_tempcoef=am, thermal_r=1.0,
               thermal_c=1e12, ambient=TA, reftemp=TA)
    out = run(p, np.full(3, v), DT, temperature=temp)
    kt = k0 * (1 + am * (temp - TA))
    np.testing.assert_allclose(out["torque"], kt * v / r, rtol=1e-12)
    np.testing.assert_allclose(out["current"], v / r, rtol=1e-12)


def test_flux_derating_weakens_the_back_emf():
    # quasi-static i = (V − K(T)·ω)/R at ω = 20 rad/s
    am, k0, v, w, temp = -0.002, 0.5, 12.0, 20.0, 75.0
    p = params(resistance=1.0, kt=k0, load_inertia=LOCKED, flux_tempcoef=am, thermal_r=1.0,
               thermal_c=1e12, ambient=TA, reftemp=TA)
    out = run(p, np.full(2, v), DT, omega=w, temperature=temp)
    kt = k0 * (1 + am * (temp - TA))
    np.testing.assert_allclose(out["current"][0], v - kt * w, rtol=1e-12)


def test_catalog_keys():
    m = DCMotor(resistance=1.0, kt=0.5, iron_loss=1e-4, flux_tempcoef=-0.001).resolve()
    assert m.kernel_params()["iron_loss"] == 1e-4 and m.kernel_params()["flux_tempcoef"] == -0.001
    with pytest.raises(ValueError, match="flux_tempcoef"):
        DCMotor(resistance=1.0, kt=0.5, flux_tempcoef=0.01)
    with pytest.raises(ValueError, match="iron_loss"):
        DCMotor(resistance=1.0, kt=0.5, iron_loss=-1.0)
