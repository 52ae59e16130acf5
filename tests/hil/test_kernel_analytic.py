"""The kernel against closed-form physics (MuJoCo DC motor model: eqs (2)–(8), §1.3 thermal,
§1.3.5 derating, Table 19).

Every check compares a kernel trajectory with an analytic or exact discrete solution computed here,
independently of the kernel's code path; each tolerance is far tighter than the effect under test,
so a wrong sign, factor or step order fails.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hil.kernel import FAULT_BITS, INTEGRATORS, LAWS, Kernel
from hil.params.dcmotor import MotorConstants
from tests.hil.kernel_helpers import LOCKED, params


def run(p: dict, u, dt: float, *, enable=None, ext=None, theta=None, omega=None, temperature=None,
        current=None) -> dict[str, np.ndarray]:
    """One actuator; returns 1-D output columns."""
    k = Kernel(1, dt)
    k.set_params(0, p)
    k.set_state(0, theta=theta, omega=omega, temperature=temperature, current=current)
    out = k.run(np.asarray(u, dtype=float), enable, ext)
    return {name: col[:, 0] for name, col in out.items()}


def steps(duration: float, dt: float) -> int:
    return round(duration / dt)


# -- voltage step on an inertia (eq. 2, Table 19: ω0 = vK/(K² + RB), t_m = RJ/K²) -----------------------

R, K, V = 2.0, 0.5, 6.0

STEP_CASES = {
    # id: gear, armature, load inertia, B1 (motor side)
    "direct": (1.0, 0.0, 0.01, 0.0),
    "gear4_armature": (4.0, 2e-4, 0.1, 0.0),
    "gear4_armature_damping": (4.0, 2e-4, 0.1, 0.01),
}


def _step_case(case: str):
    g, arm, jl, b = STEP_CASES[case]
    J = jl + arm * g * g                                  # inertia at the output
    w_inf = V * K / (K * K + R * b) / g                   # no-load speed at the output
    t_m = R * J / (g * g * (K * K + R * b))               # = RJ/K² (motor side) when B = 0
    p = params(resistance=R, kt=K, gear=g, armature=arm, load_inertia=jl, damping_b1=b)
    return p, J, w_inf, t_m


def _step_error(case: str, dt: float) -> float:
    p, _, w_inf, t_m = _step_case(case)
    n = steps(5 * t_m, dt)
    w = run(p, np.full(n, V), dt)["omega"]
    t = np.arange(n) * dt
    return float(np.max(np.abs(w - w_inf * (1 - np.exp(-t / t_m)))) / w_inf)


@pytest.mark.parametrize("case", list(STEP_CASES))
def test_voltage_step_converges_to_exponential(case):
    t_m = _step_case(case)[3]                             # 0.08 s for "direct": dt = 1e-3, 1e-4, 1e-5 s
    errs = [_step_error(case, t_m / m) for m in (80, 800, 8000)]
    # first order: each tenfold dt reduction cuts the error tenfold
    assert 8.5 < errs[0] / errs[1] < 11.5, errs
    assert 8.5 < errs[1] / errs[2] < 11.5, errs
    assert errs[2] < 1e-3


@pytest.mark.parametrize("case", list(STEP_CASES))
def test_voltage_step_exact_discrete_form(case):
    """Semi-implicit Euler with implicit damping: ω_{k+1} = ω_k + dt·(b − aω_k)/(M + dt·B g²)."""
    p, J, w_inf, t_m = _step_case(case)
    g, _, _, b = STEP_CASES[case]
    dt = t_m / 200
    n = 5000                                              # 25 t_m
    w = run(p, np.full(n, V), dt)["omega"]
    a = g * g * (K * K / R + b)                           # torque per rad/s at the output
    rho = 1 - dt * a / (J + dt * b * g * g)
    if b == 0:
        assert rho == pytest.approx(1 - dt / t_m, rel=1e-14)
    k = np.arange(n)
    np.testing.assert_allclose(w, w_inf * (1 - rho**k), rtol=1e-12, atol=1e-12 * w_inf)
    # settled output speed is the gear-reduced no-load speed V/(K g) (B = 0) or vK/((K²+RB) g)
    assert w[-1] == pytest.approx(w_inf, rel=1e-6)


def test_voltage_step_mechanical_time_constant_matches_derived():
    p, J, w_inf, t_m = _step_case("gear4_armature")
    mc = MotorConstants(resistance=R, kt=K, gear=4.0, armature=2e-4)
    assert mc.derived(V, inertia=J)["mechanical_time_constant_s"] == pytest.approx(t_m, rel=1e-12)
    dt = t_m / 10000
    w = run(p, np.full(10001, V), dt)["omega"]
    assert w[10000] / w_inf == pytest.approx(1 - math.exp(-1), abs=1e-4)   # 63 % at t = t_m


# -- stall torque and no-load speed vs MotorConstants.derived (Table 19) ---------------------------------

@pytest.mark.parametrize("eta", [1.0, 0.7])
@pytest.mark.parametrize("gear", [1.0, 5.0])
def test_stall_torque(gear, eta):
    mc = MotorConstants(resistance=R, kt=K, gear=gear, armature=1e-4, efficiency=eta)
    d = mc.derived(V)
    p = params(**mc.kernel_params(), load_inertia=LOCKED)
    out = run(p, np.full(200, V), 1e-3)
    expected = K * V / R * gear * eta
    assert d["stall_torque_nm"] == pytest.approx(expected, rel=1e-14)
    np.testing.assert_allclose(out["torque"], expected, rtol=1e-12)
    np.testing.assert_allclose(out["current"], d["stall_current_a"], rtol=1e-12)
    # the first step sees ω = 0 exactly, whatever the inertia
    free = run(params(**mc.kernel_params(), load_inertia=1e-3), np.full(3, V), 1e-3)
    assert free["torque"][0] == pytest.approx(expected, rel=1e-14)


@pytest.mark.parametrize("gear", [1.0, 5.0])
def test_no_load_speed_with_damping(gear):
    b = 0.004
    mc = MotorConstants(resistance=R, kt=K, gear=gear, armature=1e-4, damping=(b, 0.0, 0.0))
    d = mc.derived(V)
    p = params(**mc.kernel_params(), load_inertia=1e-3)
    t_m = R * (1e-3 + 1e-4 * gear**2) / (gear**2 * (K * K + R * b))
    dt = t_m / 100
    out = run(p, np.full(4000, V), dt)  # 40 t_m
    w_expect = V * K / (K * K + R * b) / gear
    assert d["no_load_speed_rad_s"] == pytest.approx(w_expect, rel=1e-14)
    assert out["omega"][-1] == pytest.approx(w_expect, rel=1e-10)
    # at the no-load point the electrical torque exactly feeds the drag B·g²·ω
    assert out["torque"][-1] == pytest.approx(b * gear**2 * w_expect, rel=1e-8)


def test_no_load_speed_with_damping_and_efficiency_matches_derived():
    b, eta = 0.004, 0.7
    mc = MotorConstants(resistance=R, kt=K, armature=1e-4, damping=(b, 0.0, 0.0), efficiency=eta)
    out = run(params(**mc.kernel_params(), load_inertia=1e-3), np.full(4000, V), 1e-4)
    assert out["omega"][-1] == pytest.approx(mc.derived(V)["no_load_speed_rad_s"], rel=1e-6)


# -- thermal model (MuJoCo DC motor model §1.3: dT/dt = P/C − (T − Ta)/t_T, R(T) = R0(1 + α(T − T0)))

RT, CT, TA = 3.0, 2.0, 25.0   # K/W, J/K, °C → t_T = 6 s


def test_thermal_constant_current_steady_state_and_time_constant():
    i, r0 = 2.0, 1.5
    p = params(law=LAWS["current"], resistance=r0, kt=K, load_inertia=LOCKED, thermal_r=RT,
               thermal_c=CT, ambient=TA, reftemp=TA)
    dt = 0.01
    tau = RT * CT
    n = steps(20 * tau, dt)
    out = run(p, np.full(n, i), dt)
    rise_inf = RT * i * i * r0                       # T_ss − Ta = R_T·P
    rise = out["temperature"] - TA
    assert rise[0] == 0.0
    assert out["temperature"][-1] == pytest.approx(TA + rise_inf, abs=1e-6)
    k_tau = steps(tau, dt)
    assert rise[k_tau] / rise_inf == pytest.approx(1 - math.exp(-1), abs=1e-3)   # 63 % at t = t_T
    # explicit Euler on the rise: exactly T_k = T∞(1 − (1 − dt/t_T)^k)
    k = np.arange(n)
    np.testing.assert_allclose(rise, rise_inf * (1 - (1 - dt / tau) ** k), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(out["current"], i)


def test_thermal_constant_current_alpha_runaway_fixed_point():
    """Under current control R(T) raises P = i²R(T): T − Ta = R_T i² R0(1 + α(Ta − T0)) / (1 − α R_T i² R0)."""
    i, r0, alpha, t0 = 2.0, 1.5, 0.004, 20.0
    p = params(law=LAWS["current"], resistance=r0, kt=K, load_inertia=LOCKED, thermal_r=RT,
               thermal_c=CT, ambient=TA, reftemp=t0, tempcoef=alpha)
    out = run(p, np.full(steps(200, 0.02), i), 0.02)
    c = RT * i * i * r0
    rise = c * (1 + alpha * (TA - t0)) / (1 - alpha * c)
    assert out["temperature"][-1] == pytest.approx(TA + rise, abs=1e-6)
    assert rise > c * 1.05   # the feedback matters at this size


def test_thermal_voltage_drive_current_drops_as_resistance_rises():
    """Locked rotor at constant voltage: i = V/R(T), fixed point T − Ta = R_T V²/R(T)."""
    v, r0, alpha, t0 = 6.0, 1.5, 0.0039, 20.0
    p = params(resistance=r0, kt=K, load_inertia=LOCKED, thermal_r=RT, thermal_c=CT, ambient=TA,
               reftemp=t0, tempcoef=alpha)
    out = run(p, np.full(steps(200, 0.02), v), 0.02)
    # x = T − Ta solves x·R0(1 + α(x + Ta − T0)) = R_T V²
    a2, a1, a0 = r0 * alpha, r0 * (1 + alpha * (TA - t0)), -RT * v * v
    x = (-a1 + math.sqrt(a1 * a1 - 4 * a2 * a0)) / (2 * a2)
    r_hot = r0 * (1 + alpha * (x + TA - t0))
    assert out["temperature"][-1] == pytest.approx(TA + x, abs=1e-6)
    assert out["current"][0] == pytest.approx(v / (r0 * (1 + alpha * (TA - t0))), rel=1e-12)
    assert out["current"][-1] == pytest.approx(v / r_hot, rel=1e-9)
    assert out["current"][-1] < 0.9 * out["current"][0]
    assert np.all(np.diff(out["current"]) <= 0)
    # without α the current would not move
    flat = run({**p, "tempcoef": 0.0}, np.full(1000, v), 0.02)
    np.testing.assert_allclose(flat["current"], v / r0, rtol=1e-14)


def test_temperature_is_nan_without_thermal_state():
    out = run(params(resistance=R, kt=K, load_inertia=1.0), np.full(5, V), 1e-3)
    assert np.all(np.isnan(out["temperature"]))


# -- thermal derating (MuJoCo DC motor model §1.3.5) ---------------------------------------------------

DERATE = dict(derate_i_rated=2.0, derate_i_safe=1.0, derate_t1=60.0, derate_t2=80.0)


def _derate_params(**kw) -> dict:
    # stall current V/R = 10 A, far above both limits; C huge so the temperature is held
    base = dict(resistance=1.0, kt=0.5, gear=2.0, efficiency=0.9, load_inertia=LOCKED,
                thermal_r=1.0, thermal_c=1e12, ambient=TA, reftemp=TA, **DERATE)
    base.update(kw)
    return params(**base)


@pytest.mark.parametrize(("temp", "i_lim", "flag"), [(25.0, 2.0, 0), (59.9, 2.0, 0), (60.0, 2.0, 0),
                                                     (80.0, 1.0, 1), (95.0, 1.0, 1), (150.0, 1.0, 1)])
def test_derating_limits_torque(temp, i_lim, flag):
    out = run(_derate_params(), np.full(10, 10.0), 1e-3, temperature=temp)
    g, eta, k = 2.0, 0.9, 0.5
    np.testing.assert_allclose(out["torque"], g * eta * k * i_lim, rtol=1e-12)
    assert np.all(out["fault_flags"].astype(int) == flag * FAULT_BITS["derated"])
    # negative voltage: same magnitude, opposite sign
    neg = run(_derate_params(), np.full(10, -10.0), 1e-3, temperature=temp)
    np.testing.assert_allclose(neg["torque"], -g * eta * k * i_lim, rtol=1e-12)


def test_derating_off_without_parameters():
    out = run(_derate_params(derate_i_rated=0.0), np.full(10, 10.0), 1e-3, temperature=150.0)
    np.testing.assert_allclose(out["torque"], 2.0 * 0.9 * 0.5 * 10.0, rtol=1e-12)
    assert np.all(out["fault_flags"] == 0)


def test_derating_below_limit_does_not_clip():
    # 1.5 V / 1 Ω = 1.5 A is below i_rated: below T1 the torque is unclipped
    out = run(_derate_params(), np.full(5, 1.5), 1e-3, temperature=40.0)
    np.testing.assert_allclose(out["torque"], 2.0 * 0.9 * 0.5 * 1.5, rtol=1e-12)


def test_derating_while_heating_is_smooth_and_monotone():
    """Heat through T1..T2: the limit falls continuously from K·i_rated to K·i_safe, flag from T1 on."""
    dt = 1e-3
    p = _derate_params(thermal_r=10.0, thermal_c=1.0)   # T_ss = 25 + 10·10²·1 ≫ T2, τ = 10 s
    out = run(p, np.full(steps(3.0, dt), 10.0), dt)
    temp, tq = out["temperature"], out["torque"]
    lim = tq / (2.0 * 0.9 * 0.5)
    assert temp[0] < 60 and temp[-1] > 80
    assert np.all(np.diff(temp) > 0)
    assert np.all(np.diff(lim) <= 1e-15)                 # monotone non-increasing in T
    np.testing.assert_allclose(lim[temp <= 60.0], 2.0, rtol=1e-12)
    np.testing.assert_allclose(lim[temp >= 80.0], 1.0, rtol=1e-12)
    mid = (temp > 60.0) & (temp < 80.0)
    assert mid.sum() > 20
    assert np.all((lim[mid] <= 2.0) & (lim[mid] >= 1.0))
    assert np.max(np.abs(np.diff(lim))) < 0.01           # no jump (≈ 0.1 K per step)
    derated = (out["fault_flags"].astype(int) & FAULT_BITS["derated"]) != 0
    clear = np.abs(temp - 60.0) > 1e-6
    np.testing.assert_array_equal(derated[clear], (temp > 60.0)[clear])
    # the limit at the midpoint temperature lies halfway for a symmetric interpolant
    k_mid = int(np.argmin(np.abs(temp - 70.0)))
    assert lim[k_mid] == pytest.approx(1.5, abs=0.05)


# -- inductance: exact exponential current update, di/dt limit -------------------------------------

@pytest.mark.parametrize("dt", [1e-4, 1e-3, 5e-3])
def test_inductance_current_step_exact(dt):
    te, g, eta = 0.01, 3.0, 0.8
    p = params(resistance=R, kt=K, gear=g, efficiency=eta, te=te, load_inertia=LOCKED)
    n = steps(0.1, dt)
    out = run(p, np.full(n, V), dt)
    # row k reports i_{k+1}, the current at the end of step k, which makes that step's torque
    t_end = (np.arange(n) + 1) * dt
    i_exact = V / R * (1 - np.exp(-t_end / te))
    np.testing.assert_allclose(out["current"], i_exact, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["torque"], g * eta * K * i_exact, rtol=1e-12, atol=1e-14)


def test_inductance_starts_from_set_current_and_decays():
    te, dt = 0.01, 1e-3
    p = params(resistance=R, kt=K, te=te, load_inertia=LOCKED)
    out = run(p, np.zeros(50), dt, current=4.0)
    np.testing.assert_allclose(out["current"], 4.0 * np.exp(-(np.arange(50) + 1) * dt / te), rtol=1e-12)


def test_inductance_didt_limit_caps_per_step_change():
    te, dt, didt = 0.01, 1e-3, 100.0
    p = params(resistance=R, kt=K, te=te, didt_max=didt, load_inertia=LOCKED)
    out = run(p, np.full(100, V), dt)
    i = np.concatenate([[0.0], out["current"]])
    di = np.diff(i)
    assert np.all(np.abs(di) <= didt * dt * (1 + 1e-12))
    # while the unlimited rate (V/R − i)/te exceeds the cap, the current ramps at the capped rate
    capped = (V / R - i[:-1]) / te > didt
    assert capped.sum() >= 20
    np.testing.assert_allclose(di[capped], didt * te * (1 - math.exp(-dt / te)), rtol=1e-12)
    assert out["current"][-1] == pytest.approx(V / R, rel=1e-3)
    # the unlimited response is much faster
    free = run({**p, "didt_max": 0.0}, np.full(100, V), dt)
    assert free["current"][5] > 1.5 * out["current"][5]


# -- integrators ------------------------------------------------------------------------------------

def test_bam_integrator_position_update():
    """bam's step: ω_{k+1} = ω_k + a·dt, q_{k+1} = q_k + ω_{k+1}·dt + ½a·dt² = q_k + ω_k·dt + 1.5·a·dt²."""
    dt, tau, J = 1e-3, 0.5, 0.1
    a = tau / J
    p = params(law=LAWS["torque"], load_inertia=J, integrator=INTEGRATORS["bam"])
    out = run(p, np.full(500, tau), dt, omega=0.3)
    q, w = out["theta"], out["omega"]
    np.testing.assert_allclose(w, 0.3 + a * dt * np.arange(500), rtol=1e-12)
    np.testing.assert_allclose(q[1:] - q[:-1] - w[:-1] * dt, 1.5 * a * dt * dt, rtol=1e-6, atol=1e-15)
    # MuJoCo's Euler on the same input: q_{k+1} = q_k + ω_k·dt + a·dt²
    e = run({**p, "integrator": INTEGRATORS["euler"]}, np.full(500, tau), dt, omega=0.3)
    np.testing.assert_allclose(e["theta"][1:] - e["theta"][:-1] - e["omega"][:-1] * dt, a * dt * dt,
                               rtol=1e-6, atol=1e-15)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_bam_integrator_velocity_clip(sign):
    dt, J = 1e-3, 0.1
    a = 500.0
    p = params(law=LAWS["torque"], load_inertia=J, integrator=INTEGRATORS["bam"])
    out = run(p, np.full(400, sign * a * J), dt)
    w, q = out["omega"], out["theta"]
    assert np.max(np.abs(w)) == 100.0
    assert w[-1] == sign * 100.0
    clipped = np.flatnonzero(np.abs(w[:-1]) == 100.0)
    assert clipped.size > 100
    # bam still adds ½·a·dt² to the position while the velocity is clipped
    np.testing.assert_allclose(np.diff(q)[clipped], sign * (100.0 * dt + 0.5 * a * dt * dt), rtol=1e-9)
    # Euler does not clip
    e = run({**p, "integrator": INTEGRATORS["euler"]}, np.full(400, sign * a * J), dt)
    assert np.max(np.abs(e["omega"])) > 150.0


# -- bam friction budget: stiction is exact --------------------------------------------------------

@pytest.mark.parametrize("integrator", ["euler", "bam"])
@pytest.mark.parametrize("source", ["external", "motor"])
def test_friction_budget_sticks_below_kc(integrator, source):
    kc, J, dt, n = 0.3, 0.01, 1e-3, 500
    p = params(law=LAWS["torque"], load_inertia=J, integrator=INTEGRATORS[integrator], budget=1,
               friction_base=kc)

    def go(tau):
        if source == "external":
            return run(p, np.zeros(n), dt, ext=np.full(n, tau))
        return run(p, np.full(n, tau), dt)

    for tau in (0.29, -0.29, 0.2999):
        out = go(tau)
        assert np.all(out["omega"] == 0.0)
        assert np.all(out["theta"] == 0.0)
        np.testing.assert_allclose(out["friction_torque"], -tau, rtol=1e-15)
    out = go(0.31)
    assert np.all(out["omega"][1:] > 0)
    # sliding: friction is −Kc, so a = (τ − Kc)/J
    assert out["omega"][1] == pytest.approx((0.31 - kc) / J * dt, rel=1e-9)
    np.testing.assert_allclose(out["friction_torque"][1:], -kc, rtol=1e-12)


def test_friction_budget_stops_a_moving_joint_exactly():
    kc, J, dt = 0.3, 0.01, 1e-3
    p = params(law=LAWS["torque"], load_inertia=J, budget=1, friction_base=kc)
    out = run(p, np.zeros(500), dt, omega=2.0)
    w = out["omega"]
    k_stop = int(np.argmax(w == 0.0))
    assert k_stop > 0
    np.testing.assert_allclose(w[:k_stop], 2.0 - kc / J * dt * np.arange(k_stop), rtol=1e-9)
    assert np.all(w[k_stop:] == 0.0)   # stays exactly at rest, no chatter


# -- determinism --------------------------------------------------------------------------------------

def _rich_params(j: int) -> dict:
    return params(
        law=LAWS["dxl_pwm"], resistance=2.0 + 0.3 * j, kt=0.5, gear=1.0, armature=0.01,
        te=0.002, thermal_r=5.0, thermal_c=3.0, tempcoef=0.0039, reftemp=25.0, ambient=30.0,
        cog_amplitude=0.01 * (j + 1), cog_poles=6, lugre_s0=50.0, lugre_s1=0.05, lugre_tc=0.01,
        lugre_ts=0.02, lugre_ws=0.5, supply_v=12.0, duty_gain=0.158 * 32, max_duty=0.96,
        budget=1, friction_base=0.05, friction_viscous=0.01, load_inertia=0.003, mass=0.2, length=0.1,
        encoder_counts=4096, encoder_noise=1e-3, seed=7 + j, oc_fraction=0.2, oc_time=0.7,
    )


def _rich_inputs(n: int, m: int, dt: float):
    t = np.arange(n)[:, None] * dt
    u = np.sin(2 * np.pi * (1 + np.arange(m)) * t) * 1.5
    ext = 0.05 * np.cos(3 * t) * np.ones((1, m))
    en = np.where((t > 0.4) & (t < 0.5), 0.0, 1.0) * np.ones((1, m))
    return u, en, ext


def test_determinism_bit_identical():
    dt, n, m = 1e-3, 1000, 3
    u, en, ext = _rich_inputs(n, m, dt)

    def once():
        k = Kernel(m, dt)
        for j in range(m):
            k.set_params(j, _rich_params(j))
        return k.run(u, en, ext)

    a, b = once(), once()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    # and the run is not trivial: each actuator moved and differs from the others
    assert np.ptp(a["theta"], axis=0).min() > 0.1
    assert not np.array_equal(a["theta"][:, 0], a["theta"][:, 1])


def test_n_actuators_equal_n_kernels():
    dt, n, m = 1e-3, 1000, 3
    u, en, ext = _rich_inputs(n, m, dt)
    k = Kernel(m, dt)
    for j in range(m):
        k.set_params(j, _rich_params(j))
    k.set_state(1, theta=0.3, omega=-1.0, temperature=50.0)
    together = k.run(u, en, ext)
    for j in range(m):
        single = Kernel(1, dt)
        single.set_params(0, _rich_params(j))
        if j == 1:
            single.set_state(0, theta=0.3, omega=-1.0, temperature=50.0)
        alone = single.run(u[:, j], en[:, j], ext[:, j])
        for name in together:
            np.testing.assert_array_equal(together[name][:, j], alone[name][:, 0], err_msg=f"{name}[{j}]")


def test_reset_replays_the_same_run():
    dt, n = 1e-3, 300
    u, en, ext = _rich_inputs(n, 1, dt)
    k = Kernel(1, dt)
    k.set_params(0, _rich_params(0))
    a = k.run(u, en, ext)
    k.reset()
    b = k.run(u, en, ext)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
