"""Peak versus continuous current (MuJoCo DC motor model §1.1): `peak_current` may flow above the
continuous limit τmax/K while the i²t budget (i_peak² − i_cont²)·peak_time lasts; once spent the
current is held at the continuous limit, the `derated` fault bit says so, and the budget refills at
i_cont² − i² below the continuous current. Off by default."""

from __future__ import annotations

import numpy as np
import pytest

from hil.kernel import FAULT_BITS, default_params
from hil.params.dcmotor import DCMotor
from tests.hil.kernel_helpers import LOCKED, params
from tests.hil.test_kernel_analytic import run

R, K, DT = 1.0, 0.5, 1e-3
I_CONT, I_PEAK, T_PEAK = 2.0, 4.0, 0.1


def _p(**kw):
    return params(resistance=R, kt=K, load_inertia=LOCKED, tau_max=K * I_CONT, peak_current=I_PEAK,
                  peak_time=T_PEAK, **kw)


def test_off_by_default():
    d = default_params()
    assert d["peak_current"] == 0.0 and d["peak_time"] == 0.0


def test_peak_for_its_time_then_continuous():
    # 10 A asked: 4 A while dt·Σ(4² − 2²) < (4² − 2²)·0.1, i.e. for 0.1 s = 100 steps, then 2 A
    out = run(_p(), np.full(300, 10.0), DT)
    i = out["current"]
    n_peak = int(np.sum(i == I_PEAK))
    assert abs(n_peak - round(T_PEAK / DT)) <= 1
    np.testing.assert_array_equal(i[:n_peak], I_PEAK)
    np.testing.assert_array_equal(i[n_peak:], I_CONT)
    np.testing.assert_allclose(out["torque"], K * i, rtol=1e-12)
    flags = out["fault_flags"].astype(int) & FAULT_BITS["derated"]
    assert not flags[:n_peak].any() and flags[n_peak + 1:].all()


def test_budget_refills_below_the_continuous_current():
    # spend it, rest at 0 A for 0.1 s (refill at 2² A² per second: 0.4 A²·s of 1.2), ask again:
    # the peak lasts 0.4/12 s ≈ 33 steps
    u = np.concatenate([np.full(200, 10.0), np.zeros(100), np.full(100, 10.0)])
    i = run(_p(), u, DT)["current"][300:]
    n = int(np.sum(i == I_PEAK))
    assert abs(n - 0.4 / 12.0 / DT) <= 1.5


def test_below_continuous_nothing_changes():
    base = dict(resistance=R, kt=K, load_inertia=LOCKED, tau_max=K * I_CONT)
    a = run(params(**base, current_limiter=1), np.full(50, 1.5), DT)
    b = run(_p(), np.full(50, 1.5), DT)
    np.testing.assert_array_equal(a["current"], b["current"])
    np.testing.assert_array_equal(a["torque"], b["torque"])


@pytest.mark.parametrize(("kw", "key"), [
    (dict(saturation=[0.0, 2.0], peak=[1.0, 0.1]), "peak"),
    (dict(peak=[4.0, 0.1]), "peak"),
    (dict(saturation=[0.0, 2.0], peak=[4.0, 0.0]), "peak"),
])
def test_bad_peak_names_the_key(kw, key):
    with pytest.raises(ValueError, match=key):
        DCMotor(resistance=1.0, kt=0.5, **kw).resolve()


def test_catalog_key_reaches_the_kernel():
    m = DCMotor(resistance=1.0, kt=0.5, saturation=[0.0, 2.0], peak=[4.0, 0.1]).resolve()
    p = m.kernel_params()
    assert p["peak_current"] == 4.0 and p["peak_time"] == 0.1 and p["tau_max"] == 1.0
