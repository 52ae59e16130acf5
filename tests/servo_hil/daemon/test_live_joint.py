"""LiveJoint.read_state hands out one state (a StateView) per loop snapshot (servo_hil/daemon/live_rig.py): a bus packet
reads the state once per servo and item, and the loop republishes it at every tick and whenever it applied commands."""

from __future__ import annotations

import time

import pytest

from servo_hil.daemon.live_rig import LiveJoint

from . import running_rig

RIG = """name = "live_joint"
[loop]
lockstep = true
[mqtt]
enabled = false
[[actuators]]
joint = "a"
catalog = "xm430_w350"
load = { mass = 0.3, length = 0.1 }
"""


@pytest.fixture
def live(tmp_path):
    with running_rig(tmp_path / "rig.toml", RIG) as live:
        yield live


def _wait(cond, timeout=2.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "the loop did not get there"
        time.sleep(1e-4)


def test_one_dict_per_snapshot(live):
    joint = LiveJoint(live, 0)
    a = joint.read_state()
    assert joint.read_state() is a, "lock-step and idle: the snapshot has not changed"
    target = live.loop.request_steps(3)
    _wait(lambda: live.loop.tick >= target)
    b = joint.read_state()
    assert b is not a and b["k"] == a["k"] + 3 * live.rig.loop.substeps
    joint.command(goal=0.5, enable=True)
    joint.sync()   # applied while idle: the loop republishes the snapshot without a tick
    assert joint.read_state() is not b
    assert joint.read_state() == live.loop.state_of(0)


def test_state_view_reads_what_state_of_returns(live):
    """StateView (hil/loop/rt.pyx) reads fields from a struct copy by their byte offset: every key, value and
    type must be the dict's, the uint64 rng too, whatever the field's position in the struct."""
    from collections.abc import Mapping
    live.loop.request_steps(5)
    _wait(lambda: live.loop.tick >= 5)
    LiveJoint(live, 0).command(goal=0.3, enable=True)
    live.loop.request_steps(7)
    _wait(lambda: live.loop.tick >= 12 and not live.loop.commands_pending())
    view, ref = live.loop.state_view(0), live.loop.state_of(0)
    assert isinstance(view, Mapping) and list(view) == list(ref) and len(view) == len(ref) == 46
    for key, value in ref.items():
        assert type(view[key]) is type(value), key
        assert view[key] == value or (value != value and view[key] != view[key]), key
    assert view["k"] > 0 and view["rng"] == ref["rng"] and view["rng"] > 0 and view["theta"] != 0.0
    assert view.to_dict() == ref and view == ref and view == live.loop.state_view(0)
    assert view.get("no such field", 7) == 7 and "theta_meas" in view and "nope" not in view
    with pytest.raises(KeyError):
        view["nope"]
    with pytest.raises(IndexError):
        live.loop.state_view(1)
