"""DCMotor's datasheet parameterizations against the seeds' formulas.

Simscape DC Motor ("By rated load and speed", "By no-load current"): the steady torque is
T = (k_t/R)(V − k_v·ω) − λω, the rated torque is P/ω_r, and k_t·i_noload = λ·ω_noload.
Seed 000 Table 19: K_v = 1/K_e, K = √(K_t·K_e) when both are given.
"""

from __future__ import annotations

import math

import pytest

from hil.params.dcmotor import RPM, DCMotor

V, P_RATED, W_R, W0 = 12.0, 10.0, 100.0, 200.0
TAU_R = P_RATED / W_R  # 0.1 N·m


def steady_torque(m, volts: float, w: float) -> float:
    """Simscape's T(ω) with the resolved constants, λ = B1 [N·m]."""
    return m.kt / m.resistance * (volts - m.kt * w) - m.damping[0] * w


def test_rated_alone_closed_form():
    # B = 0: K = V/ω0 from the no-load point, K/R = τ_r/(ω0 − ω_r)·ω0/V from the rated one
    m = DCMotor(rated=[V, P_RATED, W_R, W0]).resolve()
    assert m.kt == pytest.approx(V / W0, rel=1e-12)
    assert m.resistance == pytest.approx(V * V * (W0 - W_R) / (TAU_R * W0 * W0), rel=1e-12)
    assert steady_torque(m, V, W0) == pytest.approx(0.0, abs=1e-12)
    assert steady_torque(m, V, W_R) == pytest.approx(TAU_R, rel=1e-12)


@pytest.mark.parametrize("i0, vm", [(0.05, 12.0), (0.2, 12.0), (0.1, 6.0)])
def test_rated_with_no_load_current_meets_all_three_points(i0, vm):
    """R, K and λ solved together: the no-load speed, the rated torque and k_t·i_noload = λ·ω_noload."""
    m = DCMotor(rated=[V, P_RATED, W_R, W0], no_load_current=[i0, vm]).resolve()
    assert m.damping[0] > 0
    assert steady_torque(m, V, W0) == pytest.approx(0.0, abs=1e-12)
    assert steady_torque(m, V, W_R) == pytest.approx(TAU_R, rel=1e-12)
    assert m.derived(V)["no_load_speed_rad_s"] == pytest.approx(W0, rel=1e-12)
    # the no-load point at V_m: electrical torque = λ·ω, and its current is i0
    K, R, B = m.kt, m.resistance, m.damping[0]
    w_nl = K * vm / (K * K + R * B)
    assert (vm - K * w_nl) / R == pytest.approx(i0, rel=1e-12)
    assert K * i0 == pytest.approx(B * w_nl, rel=1e-12)


def test_rated_with_no_load_current_hand_computed():
    # s = τ_r/(ω0 − ω_r) = 1e-3, c = K/R = s·ω0/V = 1/60, ω_nl = ω0 = 200, K = s/(c + i0/ω_nl)
    m = DCMotor(rated=[V, P_RATED, W_R, W0], no_load_current=[0.05, V]).resolve()
    K = 1e-3 / (1 / 60 + 0.05 / 200)
    assert m.kt == pytest.approx(K, rel=1e-12)
    assert m.resistance == pytest.approx(60 * K, rel=1e-12)
    assert m.damping[0] == pytest.approx(K * 0.05 / 200, rel=1e-12)


def test_no_load_current_with_circuit():
    # given R and K, λ from k_t·i0 = λ·ω_nl with ω_nl = (V_m − i0·R)/K
    m = DCMotor(resistance=2.0, kt=0.05, no_load_current=[0.1, 12.0]).resolve()
    assert m.damping[0] == pytest.approx(0.05 * 0.1 / ((12.0 - 0.2) / 0.05), rel=1e-12)


def test_datasheet_constants():
    kt, kv = 13.9, 687.0   # mN·m/A, rpm/V
    ke = 1.0 / (kv * RPM)
    assert DCMotor(resistance=1.0, kt_mnm_per_a=kt).resolve().kt == pytest.approx(kt / 1000, rel=1e-15)
    assert DCMotor(resistance=1.0, kv_rpm_per_v=kv).resolve().kt == pytest.approx(ke, rel=1e-15)
    both = DCMotor(resistance=1.0, kt_mnm_per_a=kt, kv_rpm_per_v=kv).resolve().kt
    assert both == pytest.approx(math.sqrt(kt / 1000 * ke), rel=1e-15)
