"""A person's hand on a joint (hil/kernel/core.pxd `Hand`): what it does to the shaft, against an oracle written
here from its definition (docs/commands.md): an external torque computed from the state before each step."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hil.kernel import Kernel, hand_record
from hil.params import catalog
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

DT = 0.001
G = 9.81


def _kernel(actuator: str = "xl330_m288", load: LoadConfig | None = None, firmware: dict | None = None) -> Kernel:
    spec = catalog.entry(actuator).actuator("m1", firmware)
    k = Kernel(1, DT)
    k.set_params(0, kernel_params(spec, load or LoadConfig(mass=0.2, length=0.1), EncoderConfig(), FaultConfig(),
                                  "bam"))
    return k


def _statics(theta: float, hand_torque: float, mass: float = 0.2, length: float = 0.1) -> float:
    """What the friction must hold at rest [N·m]: the hand's torque less the pendulum's gravity torque."""
    return hand_torque - mass * G * length * math.sin(theta)


def _setpoint(start: float, path: list[float], speed: float, t: float) -> tuple[float, float]:
    """Where the hand leads the shaft after t [s] on its path, and the setpoint's rate [rad/s]."""
    if speed <= 0:
        return path[-1], 0.0
    left, at = speed * t, start
    for w in path:
        if left < abs(w - at):
            return at + math.copysign(left, w - at), math.copysign(speed, w - at)
        left -= abs(w - at)
        at = w
    return at, 0.0


def test_the_hand_is_an_external_torque_from_the_state_before_each_step():
    """Bit for bit: a kernel with a hand, and a twin pushed by the torque the definition gives from its own state."""
    feel = {"speed": 0.8, "stiffness": 4.0, "damping": 0.03, "max_torque": 0.15}   # below m·g·l: it slips
    path = [1.2, -0.4, 0.3]
    with_hand, twin = _kernel(), _kernel()
    with_hand.set_hand(0, hand_record(path, **feel))
    start = twin.get_state(0)["theta"]
    saturated = 0
    for k in range(6000):
        enable = 0.0 if k < 4000 else 1.0          # torque off (backdriven through the gearbox), then holding 0
        s = twin.get_state(0)
        target, rate = _setpoint(start, path, feel["speed"], k * DT)
        tau = feel["stiffness"] * (target - s["theta"]) - feel["damping"] * (s["omega"] - rate)
        saturated += abs(tau) > feel["max_torque"]
        tau = min(max(tau, -feel["max_torque"]), feel["max_torque"])
        assert with_hand.hand_torque(0) == tau
        with_hand.step(0.0, enable, 0.0)
        twin.step(0.0, enable, tau)
        assert with_hand.get_state(0)["theta"] == twin.get_state(0)["theta"], k
    assert saturated > 100, "the grip never slipped: the max_torque clip went untested"


def test_a_torque_off_servo_follows_the_hand_to_its_equilibrium():
    """The pendulum settles where the spring balances gravity, k·(θt − θ) = m·g·l·sin θ, but for what the
    backdriven servo's static friction holds (bam's m1 XL330: 12.8 mN·m at the output)."""
    k = _kernel()
    k.set_hand(0, hand_record(1.0, speed=0.0, stiffness=5.0, damping=0.05, max_torque=2.0))
    k.run(np.zeros(5000), np.zeros(5000))
    theta = k.get_state(0)["theta"]
    assert 0.6 < theta < 1.0 and abs(k.get_state(0)["omega"]) < 1e-3, theta
    assert abs(_statics(theta, 5.0 * (1.0 - theta))) <= 0.02


def test_a_weak_grip_slips_where_gravity_exceeds_it():
    """A hand of 0.1 N·m cannot hold a 0.2 kg·0.1 m pendulum above asin(0.1 / 0.196) ≈ 0.535 rad."""
    k = _kernel()
    k.set_hand(0, hand_record(1.5, speed=0.0, stiffness=50.0, damping=0.5, max_torque=0.1))
    k.run(np.zeros(5000), np.zeros(5000))
    theta = k.get_state(0)["theta"]
    assert 0.3 < theta < math.asin(0.1 / (0.2 * G * 0.1)), theta
    assert k.hand_torque(0) == 0.1 and abs(_statics(theta, 0.1)) <= 0.02


def test_a_holding_servo_resists_the_hand():
    """The same hand backdrives a torque-off MX-64 (200:1, with its backlash) to the target, but the servo holding
    its goal against 1 N·m yields only its P loop's error (kp 32: 0.04 rad)."""
    free, held = (_kernel("mx64", LoadConfig(inertia=0.01), {"kp": 32}) for _ in range(2))
    for k in (free, held):
        k.set_hand(0, hand_record(0.8, speed=1.0, stiffness=5.0, damping=0.05, max_torque=1.0))
    free.run(np.zeros(3000), np.zeros(3000))
    held.run(np.zeros(3000), np.ones(3000))
    assert free.get_state(0)["theta"] == pytest.approx(0.8, abs=0.02)
    assert 0.0 < held.get_state(0)["theta"] < 0.06


def test_a_path_is_walked_at_the_hand_speed_and_letting_go_ends_it():
    k = _kernel(load=LoadConfig())
    k.set_hand(0, hand_record([0.5, -0.5], speed=1.0, stiffness=50.0, damping=1.0, max_torque=5.0))
    out = k.run(np.zeros(2000), np.zeros(2000))
    theta = out["theta"][:, 0]
    assert theta[250] == pytest.approx(0.25, abs=0.01)     # a quarter of the way after 0.25 s
    assert theta.max() == pytest.approx(0.5, abs=0.01)     # the first waypoint at 0.5 s
    assert theta[1000] == pytest.approx(0.0, abs=0.01)     # half-way back after 1.0 s
    assert theta[-1] == pytest.approx(-0.5, abs=0.01)      # the last waypoint from 1.5 s on, held there
    k.set_hand(0, hand_record(0.0, 0.0, 0.0, 0.0, 0.0))
    assert k.hand_torque(0) == 0.0


def test_a_new_path_starts_where_the_hand_leads_now():
    k = _kernel(load=LoadConfig())
    k.set_hand(0, hand_record(1.0, speed=1.0, stiffness=50.0, damping=1.0, max_torque=5.0))
    k.run(np.zeros(300), np.zeros(300))
    k.set_hand(0, hand_record(1.0, speed=1.0, stiffness=50.0, damping=1.0, max_torque=5.0))
    k.run(np.zeros(400), np.zeros(400))
    assert k.get_state(0)["theta"] == pytest.approx(0.7, abs=0.01), "the hand restarted from the shaft"


@pytest.mark.parametrize(("args", "message"), [
    (([], 1.0, 1.0, 0.0, 1.0), "path: 1 to 8 waypoints"),
    ((list(range(9)), 1.0, 1.0, 0.0, 1.0), "path: 1 to 8 waypoints"),
    ((0.5, -1.0, 1.0, 0.0, 1.0), "speed must be finite and >= 0"),
    ((0.5, 1.0, math.inf, 0.0, 1.0), "stiffness must be finite"),
    ((math.nan, 1.0, 1.0, 0.0, 1.0), "path must be finite"),
])
def test_a_bad_hand_is_refused_by_name(args, message):
    with pytest.raises(ValueError, match=message):
        hand_record(*args)


def test_run_and_step_hold_the_same_hand():
    """`Kernel.run` steps a block on its lanes, `Kernel.step` through the records: the same hand, bit for bit."""
    hand = hand_record([0.6, 0.1], speed=0.5, stiffness=3.0, damping=0.02, max_torque=0.15)
    by_run, by_step = _kernel(), _kernel()
    by_run.set_hand(0, hand)
    by_step.set_hand(0, hand)
    theta = by_run.run(np.zeros(3000), np.zeros(3000))["theta"][:, 0]
    for k in range(3000):
        assert by_step.get_state(0)["theta"] == theta[k], k
        by_step.step(0.0, 0.0, 0.0)
    assert by_step.get_state(0) == by_run.get_state(0)
