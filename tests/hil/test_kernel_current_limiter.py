"""The current limiter (`current_limiter`): saturation and thermal derating bound the current that flows
(MuJoCo DC motor model §1.1 τ_n = K·i_max, §1.3.5 i_max(T)), so the published current, the heating
(R·i²) and the torque (K·i) agree, and the drive's terminal voltage drops to R·i + K·g·ω. Off by default:
MuJoCo's torque-only clamp (the oracle tests pin it bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest

from hil.kernel import default_params
from tests.hil.kernel_helpers import LOCKED, params
from tests.hil.test_kernel_analytic import DERATE, TA, _derate_params, run

R, K, G, ETA = 1.0, 0.5, 2.0, 0.9


def test_off_by_default():
    assert default_params()["current_limiter"] == 0


@pytest.mark.parametrize("te", [0.0, 1e-3])
def test_saturation_limits_the_current(te):
    # stall: 10 V / 1 Ω = 10 A asked, τmax = 1 N·m = K·2 A; locked rotor, fixed temperature
    base = dict(resistance=R, kt=K, gear=G, efficiency=ETA, load_inertia=LOCKED, tau_max=1.0, te=te)
    clamp = run(params(**base), np.full(200, 10.0), 1e-4)
    lim = run(params(**base, current_limiter=1), np.full(200, 10.0), 1e-4)
    # the same torque either way once the current is up ...
    np.testing.assert_allclose(lim["torque"][-1], G * ETA * 1.0, rtol=1e-12)
    np.testing.assert_allclose(clamp["torque"][-1], G * ETA * 1.0, rtol=1e-12)
    # ... but only the limiter publishes the current that makes it, at the voltage that drives it
    np.testing.assert_allclose(lim["current"][-1], 2.0, rtol=1e-12)
    assert clamp["current"][-1] > 9.0
    np.testing.assert_allclose(lim["voltage"][-1], R * 2.0, rtol=1e-12)
    np.testing.assert_allclose(clamp["voltage"][-1], 10.0, rtol=1e-12)
    assert np.all(np.abs(lim["current"]) <= 2.0 + 1e-12)
    # the torque is K·i of the current published, on the way up too (with t_e: K·i_{k+1})
    np.testing.assert_allclose(lim["torque"], G * ETA * K * lim["current"], rtol=1e-12)


def test_negative_current_is_limited_too():
    p = params(resistance=R, kt=K, load_inertia=LOCKED, tau_max=1.0, current_limiter=1)
    out = run(p, np.full(5, -10.0), 1e-3)
    np.testing.assert_allclose(out["current"], -2.0, rtol=1e-12)
    np.testing.assert_allclose(out["torque"], -1.0, rtol=1e-12)


def test_heating_follows_the_limited_current():
    # one Euler step of C·dT/dt = R·i² − T/R_T from T = 0: ΔT = dt·R·i²/C, i the limited 2 A (not 10 A)
    dt, c = 1e-3, 0.5
    base = dict(resistance=R, kt=K, load_inertia=LOCKED, tau_max=1.0, thermal_r=10.0, thermal_c=c,
                ambient=TA, reftemp=TA)
    rise = run(params(**base, current_limiter=1), np.full(2, 10.0), dt, temperature=TA)["temperature"] - TA
    np.testing.assert_allclose(rise[1], dt * R * 4.0 / c, rtol=1e-12)
    # over a second the winding heats 25× slower than under the torque-only clamp (i² = 4 vs 100)
    slow = run(params(**base, current_limiter=1), np.full(1000, 10.0), dt, temperature=TA)["temperature"]
    fast = run(params(**base), np.full(1000, 10.0), dt, temperature=TA)["temperature"]
    assert (fast[-1] - TA) > 20 * (slow[-1] - TA)


@pytest.mark.parametrize(("temp", "i_lim"), [(25.0, 2.0), (70.0, 1.5), (95.0, 1.0)])
def test_derating_limits_the_current(temp, i_lim):
    # i_max(T) of §1.3.5: smoothstep from i_rated at T1 = 60 to i_safe at T2 = 80 (x = 0.5 -> midpoint)
    out = run(_derate_params(current_limiter=1), np.full(10, 10.0), 1e-3, temperature=temp)
    np.testing.assert_allclose(out["current"], i_lim, rtol=1e-12)
    np.testing.assert_allclose(out["torque"], G * ETA * K * i_lim, rtol=1e-12)
    clamp = run(_derate_params(), np.full(10, 10.0), 1e-3, temperature=temp)
    np.testing.assert_allclose(clamp["torque"], out["torque"], rtol=1e-12)
    np.testing.assert_allclose(clamp["current"], 10.0, rtol=1e-12)


def test_below_the_limit_nothing_changes():
    p = dict(resistance=R, kt=K, load_inertia=0.01, tau_max=1.0, **DERATE, thermal_r=1.0,
             thermal_c=1e12, ambient=TA, reftemp=TA)
    a = run(params(**p), np.full(50, 0.5), 1e-3, temperature=TA)
    b = run(params(**p, current_limiter=1), np.full(50, 0.5), 1e-3, temperature=TA)
    for name in ("theta", "omega", "current", "voltage", "torque", "temperature"):
        np.testing.assert_array_equal(a[name], b[name])


def test_catalog_key_reaches_the_kernel():
    from hil.params.dcmotor import DCMotor

    on = DCMotor(resistance=R, kt=K, saturation=[0.0, 2.0], current_limiter=True).resolve()
    assert on.kernel_params()["current_limiter"] == 1 and on.kernel_params()["tau_max"] == K * 2.0
    assert DCMotor(resistance=R, kt=K).resolve().kernel_params()["current_limiter"] == 0
