"""step_all's lane passes (hil/kernel/args.h, sense.h, law.h, motor.h, load.h) over the plan (plan.h), and
Kernel.run's order.

The lane passes compute every feature for every actuator of a block and keep each one's own by selects
over its plan columns, on whole vectors (a partial block's padding lanes computed and dropped);
Kernel.run advances a block of actuators through all its steps on its lanes before the next. None may
change any actuator's result by a bit: mixed laws, integrators, sensing and fault settings in one
block, parameters changed mid-run, any step order, a lone actuator.
"""

from __future__ import annotations

import numpy as np

from hil.kernel import FAULT_BITS, INTEGRATORS, LAWS, Kernel, core
from tests.hil.kernel_helpers import params as make_params

DT = 1e-3
MOTOR = dict(resistance=2.0, kt=0.0125, gear=200.0, armature=3e-7, te=5e-4, didt_max=2000.0,
             tau_max=0.05, thermal_r=5.0, thermal_c=20.0, tempcoef=0.0039, reftemp=25.0, ambient=25.0,
             cog_amplitude=5e-4, cog_poles=6.0, cog_phase=0.3, damping_b1=1e-6, damping_b2=1e-8,
             damping_b3=1e-10, lugre_s0=0.5, lugre_s1=2e-4, lugre_tc=1e-3, lugre_ts=1.5e-3, lugre_ws=10.0,
             kp=0.2, ki=0.5, kd=0.005, slew=400.0, imax=2.0, vmax=12.0, supply_v=12.0, derate_i_rated=5.0,
             derate_i_safe=1.0, derate_t1=30.0, derate_t2=60.0, budget=1, budget_quadratic=1,
             friction_base=6e-7, friction_stribeck=0.12, load_friction_motor=0.31,
             load_friction_motor_stribeck=0.19, load_friction_external_stribeck=0.014,
             load_friction_motor_quad=0.0069, load_friction_external_quad=0.01, dtheta_stribeck=2.6,
             alpha=0.84, friction_viscous=0.025, mass=0.5, arm_mass=0.1, length=0.15, gravity=9.80665)
# what the lane passes select per actuator: law (dcmotor position / velocity / voltage with slew, integral
# clamp and Vmax; voltage / current / torque request), integrator, budget,
# Stribeck, LuGre, inductance, thermal state, derating, saturation, cogging
VARIANTS = [
    {"law": LAWS["position"]},
    {"law": LAWS["position"], "integrator": INTEGRATORS["bam"]},
    {"law": LAWS["velocity"], "budget": 0, "budget_quadratic": 0},
    {"law": LAWS["voltage"], "te": 0.0, "didt_max": 0.0, "dtheta_stribeck": 0.0},
    {"law": LAWS["current"], "lugre_s0": 0.0, "thermal_r": 0.0},
    {"law": LAWS["erob_pd"], "pd_kp": 5.0, "pd_damping": 0.1, "max_amps": 3.0, "integrator": INTEGRATORS["bam"]},
    {"law": LAWS["torque"], "cog_amplitude": 0.0},
    {"law": LAWS["position"], "tau_max": 0.0, "derate_i_rated": 0.0, "damping_b1": 0.0, "damping_b2": 0.0,
     "damping_b3": 0.0},
]
GAIN = {LAWS["position"]: 160.0, LAWS["velocity"]: 300.0, LAWS["voltage"]: 6.0, LAWS["current"]: 1.0,
        LAWS["erob_pd"]: 0.8, LAWS["torque"]: 2.0, LAWS["dxl_pwm"]: 0.8}


# what sensing and faults select per actuator (sense.h) and the laws of law.h's other passes
SENSING = [
    {"encoder_noise": 2e-3, "encoder_counts": 4096.0},
    {"encoder_stuck": 1, "law": LAWS["dxl_pwm"], "duty_gain": 0.16 * 800.0, "max_duty": 0.9,
     "max_current": 1.5},
    {"encoder_slip": 0.3, "encoder_noise": 1e-3, "oc_fraction": 0.3, "oc_time": 0.05},
    {"oc_fraction": 0.5, "oc_current": 0.05, "oc_duration": 0.003, "law": LAWS["erob_pd"], "pd_kp": 5.0,
     "pd_damping": 0.1, "max_amps": 3.0},
    {"supply_override": 6.0, "ctrl_limited": 1, "ctrl_lo": -40.0, "ctrl_hi": 30.0},
    {"temp_limit": 44.0, "law": LAWS["current"]},
    {"overload_current": 0.05, "overload_time": 0.004, "law": LAWS["voltage"]},
    {"overload_current": 0.05, "overload_time": 0.004, "shutdown_mask": 0, "encoder_counts": 100.0},
]


def rig(variants: list[int], seeds: list[int], table: list[dict] = VARIANTS) -> Kernel:
    k = Kernel(len(variants), DT)
    for j, (v, seed) in enumerate(zip(variants, seeds, strict=True)):
        k.set_params(j, make_params(**(MOTOR | table[v]), seed=seed))
        k.set_state(j, temperature=45.0)     # inside the derating ramp
    return k


def goals(variants: list[int], steps: int, table: list[dict] = VARIANTS) -> np.ndarray:
    t = np.arange(steps) * DT
    gain = np.array([GAIN[table[v].get("law", 1)] for v in variants])
    return np.sin(2 * np.pi * 0.7 * t)[:, None] * gain[None, :]


def test_mixed_block_equals_uniform_blocks():
    """40 actuators of 8 kinds interleaved (a block of 32 and a partial one) give, bit for bit, what
    each kind gives in a rig of its own kind only."""
    variants = [j % len(VARIANTS) for j in range(40)]
    mixed = rig(variants, list(range(1, 41))).run(goals(variants, 500), external_torque=0.2)
    assert np.ptp(mixed["theta"], axis=0).min() > 1e-3
    assert np.any(mixed["friction_torque"] != 0) and np.any(mixed["fault_flags"] == 8)   # budget, derating
    for v in range(len(VARIANTS)):
        cols = [j for j in range(40) if variants[j] == v]
        seeds = [j + 1 for j in cols] * 2      # twice: a rig of 8 or more takes the same vector math
        uniform = rig([v] * len(seeds), seeds).run(goals([v] * len(seeds), 500), external_torque=0.2)
        for name in mixed:
            np.testing.assert_array_equal(mixed[name][:, cols], uniform[name][:, :len(cols)],
                                          err_msg=f"variant {v}: {name}")


def test_sensing_and_faults_mixed_block_equals_uniform_blocks():
    """Encoder settings, open circuit, supply override, overheat and overload latches (with and without
    shutdown) and the bam / current laws, interleaved in one block with NaN commands and torque-off
    spans, give bit for bit what each setting gives among its own kind."""
    n, steps = 40, 600
    variants = [j % len(SENSING) for j in range(n)]
    u = goals(variants, steps, SENSING)
    u[100:110, ::3] = np.nan
    enable = np.ones_like(u)
    enable[300:350, ::2] = 0.0
    mixed = rig(variants, list(range(1, n + 1)), SENSING).run(u, enable=enable, external_torque=0.2)
    flags = np.bitwise_or.reduce(mixed["fault_flags"].astype(np.int64), axis=0)
    for name in ("encoder_noise", "encoder_stuck", "encoder_slip", "open_circuit", "supply", "overheat",
                 "overload"):
        assert np.any(flags & FAULT_BITS[name]), name     # every setting took effect somewhere
    for v in range(len(SENSING)):
        cols = [j for j in range(n) if variants[j] == v]
        seeds = [j + 1 for j in cols] * 2
        uu, ee = np.tile(u[:, cols], 2), np.tile(enable[:, cols], 2)
        uniform = rig([v] * len(seeds), seeds, SENSING).run(uu, enable=ee, external_torque=0.2)
        for name in mixed:
            np.testing.assert_array_equal(mixed[name][:, cols], uniform[name][:, :len(cols)],
                                          err_msg=f"sensing variant {v}: {name}")


def test_lone_actuator_equals_its_place_in_a_rig():
    """A rig of 1 or 3 actuators (lanes padded to a whole vector) against the same actuators in a rig
    of 9, bit for bit, on the scalar vector-math path (the one both sizes share)."""
    active = core._simd()
    try:
        core._simd("scalar")
        variants = [0, 2, 3, 5, 6, 7, 1, 4, 0]
        big = rig(variants, list(range(1, 10))).run(goals(variants, 300), external_torque=0.2)
        for size in (1, 3):
            small = rig(variants[:size], list(range(1, size + 1))).run(goals(variants[:size], 300),
                                                                         external_torque=0.2)
            for name in small:
                np.testing.assert_array_equal(small[name], big[name][:, :size], err_msg=f"{size}: {name}")
    finally:
        core._simd(active)


def test_run_equals_whole_rig_steps():
    """Kernel.run (a block at a time through all steps) against step() (the whole rig one step at a
    time, the real-time loop's order), bit for bit; 37 actuators: the last block of 5 still takes the
    vector math of a rig of 37."""
    variants = [j % len(VARIANTS) for j in range(37)]
    u = goals(variants, 200)
    ran = rig(variants, list(range(1, 38)))
    out = ran.run(u, external_torque=0.2)
    stepped = rig(variants, list(range(1, 38)))
    theta = np.empty_like(u)
    for k in range(u.shape[0]):
        theta[k] = [stepped.get_state(j)["theta"] for j in range(37)]
        stepped.step(u[k], external_torque=0.2)
    np.testing.assert_array_equal(out["theta"], theta)
    for j in range(37):
        a, b = ran.get_state(j), stepped.get_state(j)
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{j}: {key}")   # NaN temperature: equal


def test_parameter_change_reaches_the_plan():
    """set_params mid-run (law, integrator and features of one actuator) takes effect for that
    actuator only, wherever it sits: a rig and the same rig in reverse order agree bit for bit."""
    variants = [j % len(VARIANTS) for j in range(40)]
    u = goals(variants, 400)
    fwd, rev = rig(variants, list(range(1, 41))), rig(variants[::-1], list(range(40, 0, -1)))
    a1, b1 = fwd.run(u[:200], external_torque=0.2), rev.run(u[:200, ::-1], external_torque=0.2)
    changed = make_params(**(MOTOR | VARIANTS[1]), seed=6)        # actuator 5: eRob current law -> position, bam
    fwd.set_params(5, changed)
    rev.set_params(34, changed)
    a2, b2 = fwd.run(u[200:], external_torque=0.2), rev.run(u[200:, ::-1], external_torque=0.2)
    for name in a1:
        np.testing.assert_array_equal(a1[name], b1[name][:, ::-1], err_msg=name)
        np.testing.assert_array_equal(a2[name], b2[name][:, ::-1], err_msg=name)
    before = rig(variants, list(range(1, 41)))
    before.run(u[:200], external_torque=0.2)
    unchanged = before.run(u[200:], external_torque=0.2)
    assert not np.array_equal(a2["torque"][:, 5], unchanged["torque"][:, 5])
    others = [j for j in range(40) if j != 5]
    np.testing.assert_array_equal(a2["theta"][:, others], unchanged["theta"][:, others])
