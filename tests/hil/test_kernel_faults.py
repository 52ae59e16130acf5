"""Faults and sensor effects are visible in the kernel output (MathWorks Simscape "DC Motor" block reference, Faults).

Open-circuit armature (temporal and behavioural trigger, open for a fraction of each motor
revolution), supply sag / surge, encoder quantization and noise, torque disable; and the same
fault end to end through a rig file and `servo-hil simulate`.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from hil.kernel import FAULT_BITS, LAWS, Kernel
from servo_hil.cli.main import app
from tests.hil.kernel_helpers import LOCKED, params

OC = FAULT_BITS["open_circuit"]




def run(p: dict, u, dt: float, *, enable=None, ext=None, theta=None, omega=None) -> dict[str, np.ndarray]:
    k = Kernel(1, dt)
    k.set_params(0, p)
    k.set_state(0, theta=theta, omega=omega)
    out = k.run(np.asarray(u, dtype=float), enable, ext)
    return {name: col[:, 0] for name, col in out.items()}


def flags(out: dict, bit: int) -> np.ndarray:
    return (out["fault_flags"].astype(np.int64) & bit) != 0


# -- open circuit, temporal trigger ----------------------------------------------------------------------

R, K, G, V = 2.0, 0.5, 3.0, 6.0
MOTOR = dict(resistance=R, kt=K, gear=G, armature=1e-4, load_inertia=0.01)
# light drag keeps a steady torque B·g²·ω but lets the rotor coast through a 75 % dead zone
DAMPED = dict(MOTOR, damping_b1=0.002)
ENC_NOISE = FAULT_BITS.get("encoder_noise", FAULT_BITS.get("encoder"))


def _first_step_at(t_fault: float, dt: float) -> int:
    return int(np.argmax(np.arange(100000) * dt >= t_fault))


@pytest.mark.parametrize("law", ["voltage", "current"])
@pytest.mark.parametrize("fraction", [0.3, 0.75])
def test_open_circuit_temporal_fraction_of_revolution(fraction, law):
    dt, t_fault, n = 1e-3, 0.5, 2500
    u = V if law == "voltage" else 2.0
    base = params(law=LAWS[law], **DAMPED)
    faulty = {**base, "oc_fraction": fraction, "oc_time": t_fault}
    ok = run(base, np.full(n, u), dt)
    out = run(faulty, np.full(n, u), dt)
    k_f = _first_step_at(t_fault, dt)
    assert k_f == 500
    # before t_fault: identical to the healthy motor, no flag
    for name in ("theta", "omega", "torque", "current", "voltage"):
        np.testing.assert_array_equal(out[name][:k_f], ok[name][:k_f], err_msg=name)
    assert not flags(out, OC)[:k_f].any()
    # from t_fault on: flag set; torque exactly 0 while the motor angle is in the open part
    assert flags(out, OC)[k_f:].all()
    rev = G * out["theta"] / (2.0 * math.pi)
    frac = rev - np.floor(rev)
    open_ = frac < fraction
    after = np.arange(n) >= k_f
    assert (after & open_).sum() > 50 and (after & ~open_).sum() > 50
    assert rev[-1] - rev[k_f] > 2   # several revolutions after the fault
    assert np.all(out["torque"][after & open_] == 0.0)
    assert np.all(out["current"][after & open_] == 0.0)
    assert np.all(np.abs(out["torque"][after & ~open_]) > 1e-3)
    if law == "voltage":
        # in the closed part the motor drives normally: τ = g·K/R·(V − K·g·ω)
        closed = after & ~open_
        np.testing.assert_allclose(out["torque"][closed], G * K / R * (V - K * G * out["omega"][closed]),
                                   rtol=1e-12, atol=1e-12)
        # an open winding draws no current, so the terminals show the back-EMF
        np.testing.assert_allclose(out["voltage"][after & open_], K * G * out["omega"][after & open_], rtol=1e-12)


@pytest.mark.parametrize("law", ["voltage", "current", "dxl_pwm", "erob_pd"])
def test_open_circuit_full_revolution_coasts(law):
    dt, t_fault, n = 1e-3, 0.5, 1000
    extra = dict(supply_v=12.0, duty_gain=0.158 * 32, max_duty=0.96, pd_kp=10.0, pd_damping=1.0,
                 max_amps=12.0) if law in ("dxl_pwm", "erob_pd") else {}
    if law == "erob_pd":
        extra["supply_v"] = 48.0
    u = {"voltage": V, "current": 2.0, "dxl_pwm": 50.0, "erob_pd": 50.0}[law]
    p = params(law=LAWS[law], **{**MOTOR, "load_inertia": 1.0}, **extra, oc_fraction=1.0, oc_time=t_fault)
    out = run(p, np.full(n, u), dt)
    k_f = _first_step_at(t_fault, dt)
    assert np.all(np.abs(out["torque"][:k_f]) > 0.1)
    assert np.all(out["torque"][k_f:] == 0.0)
    assert np.all(out["current"][k_f:] == 0.0)
    w = out["omega"]
    assert w[k_f] > 0.5
    # no torque, no friction, no damping: the speed is held exactly
    assert np.all(w[k_f + 1:] == w[k_f + 1])
    assert flags(out, OC)[k_f:].all() and not flags(out, OC)[:k_f].any()


def test_open_circuit_off_when_fraction_zero():
    p = params(**MOTOR, oc_fraction=0.0, oc_time=0.0, oc_current=0.0)
    out = run(p, np.full(300, V), 1e-3)
    assert np.all(out["fault_flags"] == 0)
    assert np.all(out["torque"] > 0)


# -- open circuit, behavioural trigger ---------------------------------------------------------------------

def _stall(dt: float, n: int, on_from: int, volts: float, limit: float, duration: float) -> dict:
    # stalled at V/R = 3 A from step `on_from` on (6 V, 2 Ω)
    p = params(resistance=R, kt=K, load_inertia=LOCKED, oc_fraction=1.0, oc_current=limit,
               oc_duration=duration)
    u = np.where(np.arange(n) >= on_from, volts, 0.0)
    return run(p, u, dt)


@pytest.mark.parametrize(("dt", "steps"), [
    (2.0**-10, 50),
    (1e-3, 50),
    (1e-3, 200),
    (1e-4, 100),  # 100 × 1e-4 s sums to 0.009999999999999998: the trigger must count steps
])
def test_open_circuit_behavioural_latches_after_duration(dt, steps):
    n, on_from = 600, 20
    duration = steps * dt
    out = _stall(dt, n, on_from, V, limit=2.5, duration=duration)
    assert np.all(out["current"][on_from:on_from + steps] == pytest.approx(V / R))
    k_latch = on_from + steps   # the first step that sees the open winding
    oc = flags(out, OC)
    assert not oc[:k_latch].any(), f"latched early at row {np.argmax(oc)}"
    assert oc[k_latch:].all(), f"latched at row {np.argmax(oc)}, expected {k_latch}"
    assert np.all(out["torque"][k_latch:] == 0.0)
    assert np.all(out["torque"][on_from:k_latch] > 0)


def test_open_circuit_behavioural_below_limit_never_triggers():
    out = _stall(1e-3, 3000, 0, V, limit=3.01, duration=0.01)   # 3 A < 3.01 A
    assert not flags(out, OC).any()
    assert np.all(out["torque"] > 0)


def test_open_circuit_behavioural_needs_continuous_overcurrent():
    """Over-current bursts shorter than the duration, with a dip between them, never latch."""
    dt, steps = 1e-3, 50
    p = params(resistance=R, kt=K, load_inertia=LOCKED, oc_fraction=1.0, oc_current=2.5,
               oc_duration=steps * dt)
    k = np.arange(2000)
    u = np.where(k % 60 < 40, V, 1.0)    # 40 steps at 3 A, 20 steps at 0.5 A, repeated
    out = run(p, u, dt)
    assert not flags(out, OC).any()
    u2 = np.where(k % 60 < 55, V, 1.0)   # 55-step bursts do latch
    out2 = run(p, u2, dt)
    assert np.argmax(flags(out2, OC)) == 50


# -- supply override (sag / surge) -----------------------------------------------------------------------

DXL = dict(law=LAWS["dxl_pwm"], resistance=R, kt=K, gear=1.0, load_inertia=LOCKED, supply_v=12.0,
           duty_gain=0.158 * 32, max_duty=0.9625)


@pytest.mark.parametrize("supply", [6.0, 14.0])
def test_supply_override_scales_saturated_voltage_and_stall_torque(supply):
    goal = 10.0   # far away: duty saturated at max_duty
    nominal = run(params(**DXL), np.full(20, goal), 1e-3)
    sag = run(params(**DXL, supply_override=supply), np.full(20, goal), 1e-3)
    np.testing.assert_allclose(nominal["voltage"], 12.0 * 0.9625, rtol=1e-14)
    np.testing.assert_allclose(sag["voltage"], supply * 0.9625, rtol=1e-14)
    np.testing.assert_allclose(sag["torque"], nominal["torque"] * supply / 12.0, rtol=1e-12)
    np.testing.assert_allclose(sag["torque"], K * supply * 0.9625 / R, rtol=1e-12)
    assert np.all(flags(sag, FAULT_BITS["supply"]))
    assert not flags(nominal, FAULT_BITS["supply"]).any()


def test_supply_override_in_unsaturated_band():
    """Below saturation the duty is duty_gain·e, so the voltage still scales with the supply."""
    goal = 0.1   # e·gain·kp = 0.51 < max_duty
    nominal = run(params(**DXL), np.full(5, goal), 1e-3)
    sag = run(params(**DXL, supply_override=6.0), np.full(5, goal), 1e-3)
    np.testing.assert_allclose(nominal["voltage"][0], 12.0 * 0.158 * 32 * 0.1, rtol=1e-14)
    np.testing.assert_allclose(sag["voltage"][0], 6.0 * 0.158 * 32 * 0.1, rtol=1e-14)


# -- encoder --------------------------------------------------------------------------------------------

def test_encoder_quantization():
    counts = 4096
    p = params(resistance=R, kt=K, load_inertia=0.01, encoder_counts=counts)
    out = run(p, 3.0 * np.sin(np.linspace(0, 6, 2000)), 1e-3)
    q, qm = out["theta"], out["theta_meas"]
    assert np.ptp(q) > 1.0
    ticks = qm * counts / (2 * math.pi)
    np.testing.assert_allclose(ticks, np.round(ticks), rtol=0, atol=1e-9)
    assert np.all(np.abs(qm - q) <= math.pi / counts * (1 + 1e-12))
    assert np.abs(qm - q).max() > 0.4 * math.pi / counts   # quantization is actually happening
    assert not flags(out, ENC_NOISE).any()     # quantization alone is not a fault
    free = run({**p, "encoder_counts": 0.0}, 3.0 * np.sin(np.linspace(0, 6, 2000)), 1e-3)
    np.testing.assert_array_equal(free["theta_meas"], free["theta"])


def _noise(seed: int, sigma: float = 0.01, n: int = 20000) -> dict:
    p = params(law=LAWS["torque"], load_inertia=1.0, encoder_noise=sigma, seed=seed)
    return run(p, np.zeros(n), 1e-3)


def test_encoder_noise_statistics_and_seed():
    sigma, n = 0.01, 20000
    a = _noise(42)
    assert np.all(a["theta"] == 0.0)
    e = a["theta_meas"]
    assert abs(e.mean()) < 4 * sigma / math.sqrt(n)
    assert e.std() == pytest.approx(sigma, rel=0.03)
    assert np.mean(np.abs(e) < sigma) == pytest.approx(0.6827, abs=0.015)       # Gaussian shape
    assert abs(np.corrcoef(e[:-1], e[1:])[0, 1]) < 0.03                          # white
    assert flags(a, ENC_NOISE).all()
    np.testing.assert_array_equal(_noise(42)["theta_meas"], e)                   # same seed, same stream
    b = _noise(43)["theta_meas"]
    assert not np.any(b == e)                                                    # different seed
    assert abs(np.corrcoef(b, e)[0, 1]) < 0.03


def _polar_reference(seed: int, count: int) -> np.ndarray:
    """The documented generator in plain Python: xorshift64* (shifts 12, 25, 27; multiplier
    2685821657736338717; the top 53 bits as (0, 1], plus 1e-300), Marsaglia's polar method, a pair's first
    deviate then its spare."""
    mask, state, out = (1 << 64) - 1, seed or 1, []

    def uniform() -> float:
        nonlocal state
        state ^= state >> 12
        state ^= (state << 25) & mask
        state ^= state >> 27
        return (((state * 2685821657736338717) & mask) >> 11) * 2.0**-53 + 1e-300

    while len(out) < count:
        while True:
            x, y = 2.0 * uniform() - 1.0, 2.0 * uniform() - 1.0
            r = x * x + y * y
            if 0.0 < r < 1.0:
                break
        scale = math.sqrt(-2.0 * math.log(r) / r)
        out += [x * scale, y * scale]
    return np.array(out[:count])


@pytest.mark.parametrize("n", [1, 45])
def test_encoder_noise_is_the_documented_stream(n):
    """Every actuator draws its own stream, rejections included, in a lone rig (libm) and in a rig of 45
    (whole and partial vectors of the vectorized first attempt, hil/kernel/noise.h): the same deviates
    as the reference, to the round-off of log (libm's or the vector path's)."""
    sigma, steps = 0.01, 400
    k = Kernel(n, 1e-3)
    for j in range(n):
        k.set_params(j, params(law=LAWS["torque"], load_inertia=LOCKED, encoder_noise=sigma, seed=1000 + 7 * j))
    out = k.run(np.zeros(steps))
    for j in range(n):
        np.testing.assert_allclose(out["theta_meas"][:, j], sigma * _polar_reference(1000 + 7 * j, steps),
                                   rtol=1e-13, atol=0, err_msg=f"actuator {j}")


def test_encoder_noise_then_quantization():
    counts = 1024
    p = params(law=LAWS["torque"], load_inertia=1.0, encoder_noise=0.01, encoder_counts=counts, seed=5)
    out = run(p, np.zeros(5000), 1e-3)
    ticks = out["theta_meas"] * counts / (2 * math.pi)
    np.testing.assert_allclose(ticks, np.round(ticks), rtol=0, atol=1e-9)
    assert len(np.unique(ticks)) > 5   # noise of ~1.6 counts spreads over several counts


def test_dxl_firmware_uses_measured_position():
    counts = 64
    p = params(**{**DXL, "load_inertia": 0.01}, encoder_counts=counts, budget=1, friction_base=0.02)
    goal = 1.0
    out = run(p, np.full(2000, goal), 1e-3)
    duty = np.clip(0.158 * 32 * (goal - out["theta_meas"]), -0.9625, 0.9625)
    np.testing.assert_allclose(out["voltage"], 12.0 * duty, rtol=1e-14, atol=1e-14)
    from_true = 12.0 * np.clip(0.158 * 32 * (goal - out["theta"]), -0.9625, 0.9625)
    assert np.mean(np.abs(out["voltage"] - from_true) > 1e-3) > 0.5


def test_position_law_settles_within_a_count_not_on_goal():
    """dcmotor position controller on a quantized encoder: the loop closes on counts, not on θ."""
    goal, counts = 1.0, 64
    count = 2 * math.pi / counts
    p = params(law=LAWS["position"], resistance=1.0, kt=0.5, kp=20.0, kd=0.5, load_inertia=0.01,
               budget=1, friction_base=0.05, encoder_counts=counts)
    q = run(p, np.full(5000, goal), 1e-3)["theta"][-1000:]
    assert np.all(np.abs(q - goal) < count)
    assert np.all(np.abs(q - goal) > 0.2 * count)
    # with a continuous encoder it settles inside the friction dead band Kc·R/(K·kp) = 5 mrad
    q0 = run({**p, "encoder_counts": 0.0}, np.full(5000, goal), 1e-3)["theta"][-1000:]
    assert np.all(np.abs(q0 - goal) <= 0.05 * 1.0 / (0.5 * 20.0) + 1e-9)


# -- torque disabled ----------------------------------------------------------------------------------

def test_disabled_dxl_pwm_no_torque_no_back_emf_braking():
    p = params(**{**DXL, "load_inertia": 0.01})
    n = 500
    out = run(p, np.zeros(n), 1e-3, enable=np.zeros(n), omega=5.0)
    assert np.all(out["torque"] == 0.0)
    assert np.all(out["current"] == 0.0)
    assert np.all(out["omega"] == 5.0)
    np.testing.assert_allclose(out["voltage"], K * 5.0, rtol=1e-14)   # open terminals show the back-EMF
    # enabled, the same goal brakes and pulls the rotor back
    on = run(p, np.zeros(n), 1e-3, omega=5.0)
    assert on["omega"][-1] < 1.0


def test_disable_then_enable():
    p = params(**{**DXL, "load_inertia": 0.01})
    en = np.r_[np.ones(100), np.zeros(100), np.ones(100)]
    out = run(p, np.full(300, 1.0), 1e-3, enable=en)
    assert np.all(out["torque"][100:200] == 0.0)
    assert np.all(out["torque"][:100] != 0.0)
    assert np.all(out["omega"][101:201] == out["omega"][101])
    assert out["torque"][200] != 0.0


ERB = dict(law=LAWS["erob_pd"], resistance=2.0, kt=1.0, load_inertia=0.1, supply_v=48.0, pd_kp=10.0,
           pd_damping=1.0, max_amps=12.0)


def test_disabled_erob_coasts_below_back_emf_speed():
    n = 500
    out = run(params(**ERB), np.full(n, 3.0), 1e-3, enable=np.zeros(n), omega=30.0)   # K·ω = 30 V < 48 V
    assert np.all(out["current"] == 0.0)
    assert np.all(out["torque"] == 0.0)
    assert np.all(out["omega"] == 30.0)


def test_disabled_erob_supply_band_brakes_above_back_emf_speed():
    """Drive off (0 A commanded) but K·ω > 48 V: the bus clamps the winding, i = (Vs − Kω)/R."""
    n, dt = 3000, 1e-3
    out = run(params(**ERB), np.full(n, 3.0), dt, enable=np.zeros(n), omega=60.0)
    k, r, vs, j = 1.0, 2.0, 48.0, 0.1
    assert out["torque"][0] == pytest.approx(k / r * vs - k * k / r * 60.0, rel=1e-14)   # −6 N·m
    w = out["omega"]
    np.testing.assert_allclose(out["current"], (vs - k * w) / r, rtol=1e-12, atol=1e-12)
    assert np.all(np.diff(w) < 0)
    assert np.all(w > vs / k)
    # exponential approach to Vs/K with time constant R·J/K²
    np.testing.assert_allclose(w - vs / k, 12.0 * (1 - dt * k * k / (r * j)) ** np.arange(n), rtol=1e-9,
                               atol=1e-12)
    assert w[-1] - vs / k < 1e-3


# -- through the rig file and `servo-hil simulate` ---------------------------------------------------------

RIG = """\
[actuator]
resistance = 2.0
kt = 0.5
armature = 0.0001
gear = 3.0
{motor}
[load]
inertia = {inertia}

[faults]
{faults}

[sim]
dt = 0.001
"""


def _write_inputs(path: Path, n: int, dt: float, u: float) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t", "u"])
        for k in range(n):
            w.writerow([repr(k * dt), repr(u)])


def _read_out(path: Path) -> dict[str, np.ndarray]:
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {c: np.array([float(r[c]) if r[c] != "" else math.nan for r in rows]) for c in rows[0]}


def _simulate(tmp_path: Path, faults: str, n: int = 1000, u: float = 6.0, inertia: float = 1.0, motor: str = ""):
    rig = tmp_path / "rig.toml"
    rig.write_text(RIG.format(faults=faults, inertia=inertia, motor=motor))
    inp, out = tmp_path / "in.csv", tmp_path / "out.csv"
    _write_inputs(inp, n, 0.001, u)
    res = CliRunner().invoke(app, ["simulate", str(rig), "--input", str(inp), "--out", str(out)])
    assert res.exit_code == 0, (res.stdout, res.stderr)
    return _read_out(out)


def test_cli_open_circuit_fault(tmp_path):
    out = _simulate(tmp_path, "open_circuit_fraction = 1.0\nopen_circuit_time_s = 0.5")
    assert len(out["t"]) == 1000
    before, after = out["t"] < 0.5 - 1e-9, out["t"] >= 0.5 - 1e-9
    assert after.sum() == 500
    assert np.all(out["torque"][before] > 0.1)
    assert np.all(out["torque"][after] == 0.0)
    assert np.all(out["current"][after] == 0.0)
    assert np.all(out["fault_flags"][before] == 0)
    assert np.all(out["fault_flags"][after] == OC)
    w = out["omega"][after]
    assert np.all(w[1:] == w[1])   # the motor coasts


def test_cli_open_circuit_partial_fraction(tmp_path):
    out = _simulate(tmp_path, "open_circuit_fraction = 0.5\nopen_circuit_time_s = 0.2", n=2000, inertia=0.01,
                    motor="damping = [0.01]")
    after = out["t"] >= 0.2 - 1e-9
    rev = 3.0 * out["theta"] / (2 * math.pi)
    open_ = (rev - np.floor(rev)) < 0.5
    assert np.all(out["torque"][after & open_] == 0.0)
    assert np.all(out["torque"][after & ~open_] > 0.0)
    assert (after & open_).sum() > 50


def test_cli_behavioural_open_circuit(tmp_path):
    # 6 V on a 2 Ω winding: 3 A at stall, decaying as the motor speeds up (t_m = RJ/(gK)² ≈ 0.89 s)
    out = _simulate(tmp_path, "open_circuit_fraction = 1.0\nopen_circuit_current_a = 2.5\n"
                              "open_circuit_duration_s = 0.02")
    over = np.abs(out["current"]) > 2.5
    oc = out["fault_flags"].astype(int) == OC
    k = int(np.argmax(oc))
    assert over[:k].all() and k == 20
    assert np.all(out["torque"][k:] == 0.0)


def test_cli_supply_sag(tmp_path):
    rig = tmp_path / "rig.toml"
    rig.write_text("""\
[actuator]
resistance = 2.0
kt = 0.5
firmware = { law = "dxl_pwm", kp = 32, error_gain = 0.158, max_duty = 0.9625, supply_v = 12.0 }

[load]
inertia = 0.01

[faults]
supply_v = 6.0
""")
    inp, out = tmp_path / "in.csv", tmp_path / "out.csv"
    _write_inputs(inp, 10, 0.001, 10.0)
    res = CliRunner().invoke(app, ["simulate", str(rig), "--input", str(inp), "--out", str(out)])
    assert res.exit_code == 0, res.stderr
    cols = _read_out(out)
    assert cols["voltage"][0] == pytest.approx(6.0 * 0.9625, rel=1e-14)
    assert cols["torque"][0] == pytest.approx(0.5 * 6.0 * 0.9625 / 2.0, rel=1e-14)
    assert np.all(cols["fault_flags"] == FAULT_BITS["supply"])
