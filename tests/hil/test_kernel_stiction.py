"""Dwell-time-dependent stiction, beyond every anchor (the friction paper, Duclusaud et al. ICRA 2025,
§VII-A, lists it as a limitation): rising static friction after Armstrong-Hélouvry, Dupont and Canudas de
Wit (Automatica 1994): after t held still the breakaway friction grows by (Fs∞ − Fs0)·t/(t + γ).
Hand-computed breakaway, the dwell's reset on sliding, off by default."""

from __future__ import annotations

import numpy as np
import pytest

from hil.kernel import LAWS, Kernel, default_params
from hil.params.dcmotor import DCMotor
from tests.hil.kernel_helpers import params

DT, KC, RISE, GAMMA, RATE = 1e-3, 0.5, 0.3, 0.1, 2.0   # s, N·m, N·m, s, N·m/s


def _p(**kw):
    return params(**(dict(law=LAWS["torque"], load_inertia=0.01, budget=1, friction_base=KC,
                          stiction_rise=RISE, stiction_time=GAMMA) | kw))


def _ramp(n: int) -> np.ndarray:
    return RATE * DT * np.arange(n)


def test_off_by_default():
    p = default_params()
    assert p["stiction_rise"] == 0.0 and p["stiction_time"] == 0.0
    k = Kernel(1, DT)
    k.set_params(0, _p(stiction_rise=0.0))
    out = k.run(_ramp(400))
    # without it the budget Kc alone holds: the joint breaks away at the first torque above Kc
    first = int(np.argmax(out["omega"][:, 0] != 0.0))
    assert _ramp(400)[first - 1] > KC >= _ramp(400)[first - 2]
    assert k.get_state(0)["dwell"] == 0.0


def test_breakaway_on_a_ramp_by_hand():
    # held from rest, step k starts with k·dt of dwell: it holds while τ_k ≤ Kc + ΔF·t/(t + γ), t = k·dt
    n = 1200
    u = _ramp(n)
    k = Kernel(1, DT)
    k.set_params(0, _p())
    out = k.run(u)
    t = DT * np.arange(n)
    level = KC + RISE * t / (t + GAMMA)
    kb = int(np.argmax(u > level))                   # the breakaway step, computed here
    assert 0.5 < u[kb] < 0.8 and u[kb] > KC + 0.1    # well above the budget alone
    assert np.all(out["omega"][: kb + 1, 0] == 0.0) and out["omega"][kb + 1, 0] > 0.0
    np.testing.assert_allclose(out["friction_torque"][:kb, 0], -u[:kb], rtol=0, atol=0)  # held: all of it
    np.testing.assert_allclose(out["friction_torque"][kb, 0], -level[kb], rtol=1e-12)     # the breakaway level
    # sliding resets the dwell, and with it the rise: the friction falls back to Kc
    assert k.get_state(0)["dwell"] == 0.0
    np.testing.assert_allclose(out["friction_torque"][kb + 2:, 0], -KC, rtol=1e-12)


def test_longer_dwell_needs_more_torque():
    def breakaway(rest_steps: int) -> float:
        k = Kernel(1, DT)
        k.set_params(0, _p())
        u = np.r_[np.zeros(rest_steps), _ramp(2000)]
        out = k.run(u)
        return u[int(np.argmax(out["omega"][:, 0] != 0.0)) - 1]
    short, long_ = breakaway(0), breakaway(2000)
    assert long_ > short + 0.05
    # by hand: after 2000 steps at rest the first ramp value above the level breaks away
    k = np.arange(2000)
    level = KC + RISE * (2000 + k) * DT / ((2000 + k) * DT + GAMMA)
    assert long_ == _ramp(2000)[int(np.argmax(_ramp(2000) > level))]


def test_catalog_key():
    m = DCMotor(resistance=1.0, kt=0.5, dwell_stiction=[RISE, GAMMA]).resolve()
    kp = m.kernel_params()
    assert (kp["stiction_rise"], kp["stiction_time"]) == (RISE, GAMMA)
    assert DCMotor(resistance=1.0, kt=0.5).resolve().kernel_params()["stiction_rise"] == 0.0


@pytest.mark.parametrize("value", [[-0.1, 0.1], [0.3, 0.0], [0.3]])
def test_bad_values_name_the_key(value):
    with pytest.raises(ValueError, match="dwell_stiction"):
        DCMotor(resistance=1.0, kt=0.5, dwell_stiction=value)
