"""The kernel's block transcendentals (hil/kernel/vmath.h) and their run-time dispatch.

step_all evaluates the sines, exponentials, logarithms and powers of a block of actuators together:
glibc's libmvec (AVX2 / AVX-512) for sin and log and the kernel's own exp (vexp.h) where the CPU has
AVX2 and the rig has HIL_SIMD_MIN_N actuators or more, else libm. The vector functions stay within 4 ulp
of libm (exp ≤ 1; pow, computed as exp(y·log x), within 3 + |y·log x|), the paths agree to round-off,
and within a rig an actuator's step does not depend on where it sits (bit-identical).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import hil.kernel.core as core
from hil.kernel import Kernel
from tests.hil.kernel_helpers import params as make_params


def _available() -> list[str]:
    """Every path this CPU and build can take (the default is AVX2 even where AVX-512 exists)."""
    active, out = core._simd(), []
    for path in core.SIMD_PATHS:
        try:
            core._simd(path)
            out.append(path)
        except ValueError:
            pass
    core._simd(active)
    return out


PATHS = _available()


def test_default_path_is_avx2_at_most():
    assert core._simd() == ("avx2" if "avx2" in PATHS else "scalar")


@pytest.fixture
def restore_path():
    active = core._simd()
    yield
    core._simd(active)


def ulps(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.abs(got - ref) / np.spacing(np.abs(ref))


ARGS = {
    "sin": np.concatenate([np.linspace(-10, 10, 20001), np.linspace(-1e6, 1e6, 20001),
                           np.linspace(-1e-3, 1e-3, 2001), [0.0, math.pi, -math.pi / 2, 1e7, -3e8]]),
    "exp": np.concatenate([np.linspace(-708, 0, 40001), np.linspace(-1e-6, 1e-6, 2001), [5.0, 700.0]]),
    "log": np.concatenate([np.linspace(1e-12, 1, 20001), np.geomspace(1e-300, 1e300, 20001), [5e-320, 1.0]]),
}
def _libm(f):
    """glibc's own function (math module), element by element: numpy's ufuncs have their own SIMD code."""
    def ref(x):
        return np.array([f(v) for v in x])
    return ref


REF = {"sin": _libm(math.sin), "exp": _libm(math.exp), "log": _libm(math.log)}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("fn", ["sin", "exp", "log"])
def test_functions_within_4_ulp_of_libm(fn, path, restore_path):
    """libmvec's sin and log within its documented 4 ulp; vexp.h's exp within 1."""
    core._simd(path)
    x = ARGS[fn]
    bound = 0.0 if path == "scalar" else (1.0 if fn == "exp" else 4.0)
    assert np.max(ulps(core._vmath(fn, x), REF[fn](x))) <= bound


@pytest.mark.parametrize("path", PATHS)
def test_pow_within_its_bound(path, restore_path):
    """libm's pow on the scalar path; exp(y·log x) on the vector paths (vmath.h), within 3 + |y·log x| ulp,
    and bam's Stribeck factor exp(−|ω/θ̇s|^α), the kernel's one use, within 2^−52 of libm's."""
    core._simd(path)
    rng = np.random.default_rng(1)
    x = np.exp(rng.uniform(-10, 4, 20000))
    a = rng.uniform(0.3, 3.0, x.size)
    ref = np.array([math.pow(b, e) for b, e in zip(x, a, strict=True)])
    bound = 0.0 if path == "scalar" else 3.0 + np.abs(a * np.log(x))
    assert np.all(ulps(core._vmath("pow", x, a), ref) <= bound)
    w = rng.uniform(0.0, 10.0, 20000)
    stribeck = np.exp(-core._vmath("pow", w, 0.84))
    assert np.max(np.abs(stribeck - np.array([math.exp(-math.pow(v, 0.84)) for v in w]))) <= 2.0**-52


@pytest.mark.parametrize("path", PATHS)
def test_special_values(path, restore_path):
    core._simd(path)
    exp = core._vmath("exp", [-800.0, 800.0, math.nan, 0.0])
    assert exp[0] == 0.0 and exp[1] == math.inf and math.isnan(exp[2]) and exp[3] == 1.0
    log = core._vmath("log", [0.0, math.inf, math.nan, 1.0])
    assert log[0] == -math.inf and log[1] == math.inf and math.isnan(log[2]) and log[3] == 0.0
    sin = core._vmath("sin", [math.inf, math.nan, 1e7, 0.0])
    assert math.isnan(sin[0]) and math.isnan(sin[1]) and sin[3] == 0.0
    assert abs(sin[2] - math.sin(1e7)) <= 4 * np.spacing(1.0)
    assert core._vmath("pow", [0.0, 1.0], [0.84, 0.84]).tolist() == [0.0, 1.0]


@pytest.mark.parametrize("path", PATHS)
def test_pow_zero_lanes_are_libm(path, restore_path):
    """x = +0 with y > 0 (bam's Stribeck |ω/θ̇s|^α of an actuator held still by stiction) is +0 on every
    path, bit for bit libm's, in vectors of only such lanes and mixed with ordinary ones; y <= 0 keeps
    libm's results (inf, 1). −0, outside the vector paths' domain x ≥ 0, counts as +0 there."""
    core._simd(path)
    rng = np.random.default_rng(2)
    x = rng.uniform(0.1, 3.0, 64)
    x[:16] = 0.0                       # whole vectors of zero lanes
    x[16::3] = 0.0                     # zero lanes among ordinary ones
    a = rng.uniform(0.3, 3.0, x.size)
    x[40], a[40] = -0.0, 3.0           # libm: pow(−0, odd integer) = −0
    x[41], a[41] = 0.0, -1.0           # pow(+0, −1) = inf
    x[42], a[42] = 0.0, 0.0            # pow(+0, 0) = 1
    got = core._vmath("pow", x, a)
    ref = np.array([math.pow(b, e) if (b, e) != (0.0, -1.0) else math.inf for b, e in zip(x, a, strict=True)])
    zero = x == 0.0
    assert got[zero].tolist() == ref[zero].tolist()
    assert np.signbit(got[40]) == (path == "scalar")
    assert not np.signbit(np.delete(got[zero], np.flatnonzero(zero).tolist().index(40))).any()
    assert got[41] == math.inf and got[42] == 1.0
    bound = 0.0 if path == "scalar" else 3.0 + np.abs(a[~zero] * np.log(x[~zero]))
    assert np.all(ulps(got[~zero], ref[~zero]) <= bound)


@pytest.mark.parametrize("path", PATHS)
def test_exp_underflow_lanes_are_libm(path, restore_path):
    """Arguments at or below −708.396 (results at the bottom of the normal range or below: LuGre's
    −(L̇/ωs)² at speed), which libmvec itself hands to libm lane by lane, bypass the vector and take
    libm's exp, bit for bit, wherever they sit among ordinary arguments."""
    core._simd(path)
    low = np.linspace(-800.0, -708.39599609375, 1001)
    x = np.empty(2 * low.size)
    x[0::2], x[1::2] = low, np.linspace(-700.0, 0.0, low.size)
    got, ref = core._vmath("exp", x), REF["exp"](x)
    assert got[0::2].tolist() == ref[0::2].tolist()
    assert np.count_nonzero(got[0::2]) > 100 and np.count_nonzero(got[0::2] == 0.0) > 100
    assert np.max(ulps(got[1::2], ref[1::2])) <= (0.0 if path == "scalar" else 4.0)


def full_feature_run(n: int, steps: int = 600, which: list[int] | None = None) -> dict:
    """The full-feature actuator of bench/kernel.py, n of them with different seeds, gains of the goal
    and Stribeck exponents (the pow, and the α = 1, 2 shortcuts); `which`: just those actuators, in
    that order, as a rig of their own."""
    dt = 1e-3
    full = make_params(
        law=1, resistance=2.0, kt=0.0125, gear=200.0, armature=3e-7, te=5e-4, didt_max=2000.0,
        tau_max=0.05, thermal_r=5.0, thermal_c=20.0, tempcoef=0.0039, reftemp=25.0, ambient=25.0,
        cog_amplitude=5e-4, cog_poles=6.0, cog_phase=0.3, damping_b1=1e-6, damping_b2=1e-8, damping_b3=1e-10,
        lugre_s0=0.5, lugre_s1=2e-4, lugre_tc=1e-3, lugre_ts=1.5e-3, lugre_ws=10.0, kp=0.2, ki=0.5, kd=0.005,
        slew=400.0, imax=2.0, vmax=12.0, ctrl_limited=1, ctrl_lo=-600.0, ctrl_hi=600.0, supply_v=12.0,
        derate_i_rated=5.0, derate_i_safe=1.0, derate_t1=80.0, derate_t2=120.0, encoder_counts=4096.0,
        encoder_noise=2e-4, budget=1, budget_quadratic=1, friction_base=6e-7, friction_stribeck=0.12,
        load_friction_motor=0.31, load_friction_motor_stribeck=0.19, load_friction_external_stribeck=0.014,
        load_friction_motor_quad=0.0069, load_friction_external_quad=0.01, dtheta_stribeck=2.6,
        friction_viscous=0.025, mass=0.5, arm_mass=0.1, length=0.15, gravity=9.80665)
    t = np.arange(steps) * dt
    u = 200.0 * 0.8 * np.sin(2 * np.pi * 0.5 * t)[:, None] * np.linspace(0.5, 1.5, n)[None, :]
    which = list(range(n)) if which is None else which
    k = Kernel(len(which), dt)
    for i, j in enumerate(which):
        k.set_params(i, full | {"seed": j + 1, "alpha": (0.84, 1.0, 2.0)[j % 3]})
    return k.run(u[:, which])


@pytest.mark.parametrize("path", PATHS)
def test_an_actuator_does_not_depend_on_its_block(path, restore_path):
    """45 actuators (a full block of 32 and a partial one) against the same actuators in reverse order
    and against a rig of 9 (other blocks, other lanes), bit for bit; alone (libm) to round-off."""
    core._simd(path)
    together = full_feature_run(45)
    assert np.ptp(together["theta"], axis=0).min() > 0.1
    reverse = full_feature_run(45, which=list(range(44, -1, -1)))
    nine = [44, 0, 7, 31, 32, 1, 2, 3, 4]
    small = full_feature_run(45, which=nine)
    for j in (0, 7, 31, 32, 44):
        alone = full_feature_run(45, which=[j])
        for name in together:
            np.testing.assert_array_equal(together[name][:, j], reverse[name][:, 44 - j], err_msg=f"{name}[{j}]")
            np.testing.assert_array_equal(together[name][:, j], small[name][:, nine.index(j)], err_msg=f"{name}[{j}]")
        assert np.max(np.abs(together["theta"][:, j] - alone["theta"][:, 0])) < 1e-12


def test_instruction_set_copies_agree_bit_for_bit(restore_path):
    """isa.h compiles step_all for AVX2, for AVX2 with AVX-512VL and for the x86-64 baseline. Below
    HIL_SIMD_MIN_N actuators every path takes libm's functions, so the paths differ only by the copy of
    the code: the same bits. With HIL_SIMD_MIN_N or more, the two AVX2 copies on one path: the same bits."""
    vl = core._avx512vl()
    copies = [False, True] if vl else [False]
    runs, large = {}, {}
    try:
        for path in PATHS:
            core._simd(path)
            for on in copies if path != "scalar" else [False]:
                core._avx512vl(on)
                runs[path, on] = full_feature_run(45, which=[0, 1, 2, 31, 44])
                large[path, on] = full_feature_run(45)
    finally:
        core._avx512vl(vl)
    assert np.ptp(runs["scalar", False]["theta"], axis=0).min() > 0.1
    for (path, on), out in runs.items():
        for name in out:
            np.testing.assert_array_equal(out[name], runs["scalar", False][name], err_msg=f"{path} {on}: {name}")
            np.testing.assert_array_equal(large[path, on][name], large[path, False][name],
                                          err_msg=f"{path} {on}, 45 actuators: {name}")


def test_avx512vl_copy_only_where_the_cpu_has_it(restore_path):
    if not core._avx512vl():
        with pytest.raises(ValueError):
            core._avx512vl(True)
    vl = core._avx512vl()
    core._avx512vl(False)
    assert not core._avx512vl()
    core._avx512vl(vl)


def test_paths_agree_to_round_off(restore_path):
    runs = {}
    for path in PATHS:
        core._simd(path)
        runs[path] = full_feature_run(45)
    ref = runs["scalar"]
    for path, out in runs.items():
        assert np.max(np.abs(out["theta"] - ref["theta"])) < 1e-12, path
        assert np.max(np.abs(out["torque"] - ref["torque"])) < 1e-9, path


def test_unavailable_path_is_refused(restore_path):
    with pytest.raises(ValueError):
        core._simd("neon")
