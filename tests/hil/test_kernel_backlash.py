"""Gear backlash (MuJoCo DC motor model §1.2): a dead band the motor side crosses on its own before it
drives the output. Hand-computed steps of the two sides and their inelastic contact, lost motion on a
direction reversal in the registers a controller reads, off by default, bad values named."""

from __future__ import annotations

import math

import numpy as np
import pytest

from firmware_models.dynamixel.control_table import load_model
from firmware_models.dynamixel.servo import DynamixelServo
from hil.joint import KernelJoint
from hil.kernel import LAWS, Kernel, default_params
from hil.params.catalog import entry
from hil.params.dcmotor import DCMotor
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params
from tests.firmware_models.dynamixel.registers import read as _read
from tests.firmware_models.dynamixel.registers import write_ok as _write
from tests.hil.kernel_helpers import params

DT, TAU, JM, JL, B = 1e-3, 0.02, 1e-4, 4e-4, 0.01   # s, N·m, kg·m², kg·m², rad


def _torque_params(**kw) -> dict:
    # an ideal output torque source: the torque acts on the motor side, which has the armature
    return params(**(dict(law=LAWS["torque"], armature=JM, load_inertia=JL, backlash=B) | kw))


def test_off_by_default():
    assert default_params()["backlash"] == 0.0
    k = Kernel(1, DT)
    k.set_params(0, _torque_params(backlash=0.0))
    k.set_state(0, gap=-B / 2)          # a gap without backlash is ignored: one body of JM + JL
    out = k.run(np.full(50, TAU))
    n = np.arange(50)
    np.testing.assert_allclose(out["omega"][:, 0], n * DT * TAU / (JM + JL), rtol=1e-12)
    assert k.get_state(0)["gap"] == -B / 2


def _by_hand(steps: int) -> tuple[np.ndarray, np.ndarray]:
    """θ (output) and the gap before each step, computed here: the motor side alone accelerates at τ/JM
    across the band from −B/2 (the output, without forces, stays), then the contact is perfectly inelastic
    (momentum JM·ωm + JL·ω kept) and both move as one under τ."""
    th, w, wm, gap = 0.0, 0.0, 0.0, -B / 2
    ths, gaps = [], []
    for _ in range(steps):
        ths.append(th)
        gaps.append(gap)
        wm_free = wm + DT * TAU / JM
        if gap + DT * (wm_free - w) > B / 2:                    # the teeth meet in this step
            w = (JM * wm + JL * w + DT * TAU) / (JM + JL)
            th, wm, gap = th + DT * w, w, B / 2
        else:
            wm, gap = wm_free, gap + DT * (wm_free - w)
            th = th + DT * w
    return np.array(ths), np.array(gaps)


def test_crossing_the_band_then_driving_the_output_by_hand():
    k = Kernel(1, DT)
    k.set_params(0, _torque_params())
    k.set_state(0, gap=-B / 2)
    T = 120
    out = k.run(np.full(T, TAU))
    th, gaps = _by_hand(T + 1)
    # the crossing takes n steps, the first with dt²·τ/JM·n(n+1)/2 > B: n = 10 here, the output still until then
    n = next(i for i in range(1, T) if DT * DT * TAU / JM * i * (i + 1) / 2 > B)
    assert n == 10
    assert np.all(out["theta"][:n, 0] == 0.0) and out["theta"][n, 0] > 0.0
    np.testing.assert_allclose(gaps[:n], -B / 2 + DT * DT * TAU / JM * np.arange(n) * np.arange(1, n + 1) / 2,
                               rtol=1e-12)
    np.testing.assert_allclose(out["theta"][:, 0], th[:T], rtol=1e-12, atol=1e-15)
    s = k.get_state(0)
    assert s["gap"] == B / 2 and s["gap_rate"] == 0.0
    np.testing.assert_allclose(s["theta"], th[T], rtol=1e-12)
    # engaged, one body: from the contact on ω grows by dt·τ/(JM + JL) a step
    np.testing.assert_allclose(np.diff(out["omega"][n + 1:, 0]), DT * TAU / (JM + JL), rtol=1e-9)


def test_lost_motion_on_a_reversal():
    # a torque that pushes, then pulls; the output has a little friction, so it stops when not driven
    k = Kernel(1, DT)
    k.set_params(0, _torque_params(budget=1, friction_base=0.002))
    k.run(np.full(200, TAU))
    s1 = k.get_state(0)
    assert s1["gap"] == B / 2                        # pushing: the motor side leads by half the band
    out = k.run(np.full(400, -TAU))
    s2 = k.get_state(0)
    assert s2["gap"] == -B / 2                       # pulling: it trails by half the band
    # lost motion: the motor side travels back B farther than the output
    motor_travel = (s2["theta"] + s2["gap"]) - (s1["theta"] + s1["gap"])
    assert math.isclose(motor_travel - (s2["theta"] - s1["theta"]), -B, rel_tol=1e-9)
    # the output turns back only once the motor side has crossed the band
    turn = int(np.argmax(out["theta"][:, 0]))
    assert turn > 10 and out["theta"][-1, 0] < out["theta"][turn, 0]


def test_present_position_lags_a_pwm_reversal():
    """XM430-W350 (catalog backlash 15 arcmin) in PWM mode on a free inertia: when Goal PWM reverses the
    motor side brakes and leaves the output, which coasts on across the band until the teeth meet again:
    Present Position overshoots farther than without backlash, and the gap has flipped to the other flank."""

    def run(backlash: bool) -> tuple[list[int], dict]:
        spec = entry("xm430_w350").actuator()
        p = kernel_params(spec, LoadConfig(inertia=0.002), EncoderConfig(), FaultConfig(), "euler")
        if not backlash:
            p["backlash"] = 0.0
        kernel = Kernel(1, 1e-3)
        kernel.set_params(0, p)
        servo = DynamixelServo(load_model("xm430_w350"), KernelJoint(kernel), {"ID": 1})
        _write(servo, "Operating Mode", 16)
        _write(servo, "Torque Enable", 1)
        pos = []
        for goal in (200, -200):
            _write(servo, "Goal PWM", goal)
            for _ in range(300):
                servo.joint.step(1)
                pos.append(_read(servo, "Present Position"))
        return pos, kernel.get_state(0)

    with_b, s = run(True)
    without, _ = run(False)
    assert entry("xm430_w350").motor.backlash == pytest.approx(15 / 60 * math.pi / 180, rel=1e-3)
    assert s["gap"] == pytest.approx(-entry("xm430_w350").motor.backlash / 2, abs=1e-15)   # pulled back
    assert s["gap_rate"] == 0.0                                     # engaged again
    peak_b, peak = int(np.argmax(with_b)), int(np.argmax(without))
    assert peak_b >= peak > 300                                    # both turn after the reversal
    assert max(with_b) > max(without) and with_b[299] <= without[299] + 1






@pytest.mark.parametrize(("kw", "needle"), [(dict(backlash=-0.001, armature=1e-4), "backlash"),
                                            (dict(backlash=0.001), "backlash needs armature")])
def test_bad_values_name_the_key(kw, needle):
    with pytest.raises(ValueError, match=needle):
        DCMotor(resistance=1.0, kt=0.5, **kw)


def test_catalog_entries():
    for name in ("mx64", "mx106"):
        assert entry(name).motor.backlash == pytest.approx(20 / 60 * math.pi / 180, rel=1e-4)
    for name in ("xm430_w350", "xh540_w270"):
        assert entry(name).motor.backlash == pytest.approx(15 / 60 * math.pi / 180, rel=1e-4)
        assert entry(name).actuator().kernel_params()["backlash"] == entry(name).motor.backlash
    # bam's identified models carry no backlash: bam_only strips it (the bam oracle)
    assert entry("mx64").actuator("m6").bam_only().kernel_params()["backlash"] == 0.0


def test_mixed_blocks_keep_each_actuators_bits():
    """The extended mechanics run in a version of the load pass of their own, with every feature's code:
    an actuator without them gives the same bits next to ones with them as among its own kind, and the
    other way round (rigs of 8 or more: the same vector math)."""
    from tests.hil.test_kernel_plan import MOTOR, VARIANTS, goals, rig

    mech = dict(backlash=0.02, armature=3e-6, stiction_rise=0.02, stiction_time=0.05,
                integrator=2)        # INTEGRATORS["implicitfast"]
    table = [*VARIANTS, *({**v, **mech} for v in VARIANTS)]
    every = list(range(len(table)))
    u = goals(every, 1500, table)
    together = rig(every, [j + 1 for j in every], table).run(u)
    for j in every:
        own = rig([j] * 8, [j + 1] * 8, table).run(np.tile(u[:, j:j + 1], 8))
        for name, column in own.items():
            np.testing.assert_array_equal(together[name][:, j], column[:, 0], err_msg=f"{j} {name}")
    assert MOTOR["budget"] == 1
    moved = [np.ptp(together["theta"][:, j]) for j in every]
    assert min(moved) > 1e-3


def test_setting_the_velocity_sets_both_sides():
    """A reset to rest (set_state θ, ω; the daemon's `reset`) stops the motor side too: mid-crossing, the
    gap stays where it is and its rate goes to 0, so nothing moves afterwards without a torque."""
    k = Kernel(1, DT)
    k.set_params(0, _torque_params())
    k.set_state(0, gap=-B / 2)
    k.run(np.full(5, TAU))                       # the motor side is crossing the band
    s = k.get_state(0)
    assert s["gap_rate"] > 0 and -B / 2 < s["gap"] < B / 2
    k.set_state(0, theta=0.0, omega=0.0)
    r = k.get_state(0)
    assert r["gap_rate"] == 0.0 and r["gap"] == s["gap"]
    out = k.run(np.zeros(100))
    assert np.all(out["theta"] == 0.0) and k.get_state(0)["gap"] == s["gap"]
