"""The `hand` command (docs/commands.md): a person's hand drags a joint through its physics — a torque-off servo
follows it, a robot's hinge in MuJoCo too — the state shows it, `release` and `reset` let go, bad arguments are
refused by name. Lock-step rigs, stepped by the test: every figure is simulated time, not wall time."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from servo_hil.daemon.arguments import CommandError
from servo_hil.daemon.commands import CommandSet
from servo_hil.daemon.live_rig import LiveRig
from servo_hil.rig import load_robot_rig

from . import running_rig

ROBOTS = Path(__file__).resolve().parents[3] / "config" / "robots"

PENDULUM = """[loop]
rate_hz = 1000
lockstep = true
mlockall = false
[mqtt]
enabled = false
[[actuators]]
joint = "xl"
catalog = "xl330_m288"
model = "m1"
load = { mass = 0.2, length = 0.1 }
"""


def _run(live, cmd: str, **args) -> dict:
    return CommandSet(live).execute({"cmd": cmd, **args})


def _state(live, joint: str) -> dict:
    return _run(live, "state", actuator=joint)["state"][joint]


def test_a_hand_lifts_a_torque_off_servo_and_lets_go(tmp_path):
    with running_rig(tmp_path / "rig.toml", PENDULUM) as live:
        _run(live, "set_enable", actuator="xl", value=False)
        _run(live, "hand", actuator="xl", target=0.8, speed=1.0)
        _run(live, "step", n=1)   # the loop takes commands at its next tick
        assert _state(live, "xl")["hand"] == {"path": [0.8], "speed": 1.0, "stiffness": 5.0, "damping": 0.05,
                                               "max_torque": 2.0}   # config/daemon/hand.toml's feel
        _run(live, "step", n=399)
        assert 0.3 < _state(live, "xl")["position"] < 0.45, "the hand leads at 1 rad/s: 0.4 rad after 0.4 s"
        _run(live, "step", n=2000)
        held = _state(live, "xl")
        # at rest where the spring holds the pendulum: 5·(0.8 − θ) ≈ 0.2·g·0.1·sin θ, within the servo's friction
        assert 0.6 < held["position"] < 0.8 and abs(held["velocity"]) < 1e-2
        assert abs(5.0 * (0.8 - held["position"]) - 0.2 * 9.80665 * 0.1 * math.sin(held["position"])) < 0.02
        _run(live, "hand", actuator="xl", release=True)
        _run(live, "step", n=1)
        assert _state(live, "xl")["hand"] is None
        _run(live, "step", n=3000)
        assert abs(_state(live, "xl")["position"]) < 0.2, "let go, the pendulum falls back"


def test_a_hand_walks_a_path_and_reset_lets_go(tmp_path):
    with running_rig(tmp_path / "rig.toml", PENDULUM) as live:
        _run(live, "set_enable", actuator="xl", value=False)
        _run(live, "hand", actuator="xl", path=[0.5, -0.5], speed=2.0, stiffness=50.0, damping=1.0, max_torque=5.0)
        seen = []
        for _ in range(20):
            _run(live, "step", n=50)
            seen.append(_state(live, "xl")["position"])
        assert max(seen) > 0.45 and seen[-1] < -0.45, seen   # there and back, 2 rad in 0.75 s, then held
        _run(live, "reset")
        _run(live, "step", n=1)
        assert _state(live, "xl")["hand"] is None
        _run(live, "step", n=3000)
        assert abs(_state(live, "xl")["position"]) < 0.05


def test_a_hand_moves_a_robot_hinge(tmp_path):
    """On a robot rig the hand (and an external torque) acts on the MuJoCo hinge, which the servo drives."""
    rig = (f'[loop]\nrate_hz = 1000\nlockstep = true\nmlockall = false\n[mqtt]\nenabled = false\n'
           f'[robot]\nmjcf = "{ROBOTS / "arm_2r.xml"}"\n'
           f'[[actuators]]\njoint = "shoulder"\ncatalog = "mx106"\nmodel = "m4"\n'
           f'[[actuators]]\njoint = "elbow"\ncatalog = "mx64"\nmodel = "m4"\n')
    path = tmp_path / "rig.toml"
    path.write_text(rig)
    rig, specs, robot = load_robot_rig(path)
    live = LiveRig(rig, specs, robot.kernel, robot)
    live.start()
    try:
        for joint in ("shoulder", "elbow"):
            _run(live, "set_enable", actuator=joint, value=True)
        _run(live, "step", n=1000)
        before = _state(live, "elbow")["position"]
        _run(live, "set_enable", actuator="elbow", value=False)
        _run(live, "hand", actuator="elbow", target=before + 1.0, speed=2.0, stiffness=20.0, max_torque=5.0)
        _run(live, "step", n=2000)
        moved = _state(live, "elbow")["position"]
        assert moved - before > 0.7, (before, moved)
        _run(live, "hand", actuator="elbow", release=True)
        _run(live, "set_enable", actuator="elbow", value=True)
        _run(live, "step", n=2000)
        back = _state(live, "elbow")["position"]
        _run(live, "set_external_torque", actuator="elbow", value=3.0)
        _run(live, "step", n=500)
        assert _state(live, "elbow")["position"] - back > 0.01, "an external torque acts on the hinge too"
    finally:
        live.stop()


@pytest.mark.parametrize(("args", "needles"), [
    ({}, ("one of target", "path")),
    ({"target": 0.5, "path": [0.5]}, ("one of target",)),
    ({"path": list(range(9))}, ("path must be a list of 1 to 8",)),
    ({"path": "up"}, ("path must be a list",)),
    ({"target": 0.5, "stiffness": -1.0}, ("stiffness = -1.0 is out of range",)),
    ({"target": math.inf}, ("target must be a finite number",)),
    ({"target": 0.5, "grip": 1.0}, ("unknown argument", "grip")),
    ({"release": True, "target": 0.5}, ("release takes true and no other argument",)),
    ({"release": False}, ("release takes true",)),
])
def test_a_bad_hand_is_refused_by_name(tmp_path, args, needles):
    with running_rig(tmp_path / "rig.toml", PENDULUM) as live:
        with pytest.raises(CommandError) as err:
            _run(live, "hand", actuator="xl", **args)
        assert all(n in str(err.value) for n in needles) and "\n" not in str(err.value), str(err.value)
        assert _state(live, "xl")["hand"] is None
