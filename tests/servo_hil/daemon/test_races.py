"""Soak: multi-command operations against the 1 kHz loop (`make soak`; excluded from the default run).

`set_mode` and `reset` each send several commands to the loop; they must take effect in the same
tick. Regression: they used to be pushed one by one and the loop applied whatever the ring held at
each tick, so ~0.5 % of the operations ran a tick with half of the change (a torque law on the old
position goal: 25 gear·rad as 25 N·m; a reset joint stepped towards its old goal: −761 N·m) — hence
thousands of repetitions.
"""

from __future__ import annotations

import time

import pytest

from . import MODE_CODES, Stream, ok
from .conftest import ARM_GEAR

pytestmark = pytest.mark.soak


def test_set_mode_never_applies_a_stale_goal(make_rig, start_daemon):
    rig = make_rig(joints=("arm", "mx", "erob"))  # a busier daemon (more GIL handoffs) widens the window
    start_daemon(rig)
    ep = rig.cmd
    stale = []
    with Stream(rig.pub, f"{rig.name}/arm") as stream:
        stream.first()
        for k in range(3000):
            goal = (0.5 if k % 2 else -0.5) * ARM_GEAR
            ok(ep, "set_goal", actuator="arm", value=goal)
            ok(ep, "set_mode", actuator="arm", mode="torque")
            ok(ep, "set_mode", actuator="arm", mode="position")
            if k % 100 == 99:
                stale += [s.payload for s in stream.drain()
                          if s.payload["mode"] == MODE_CODES["torque"] and s.payload["goal"] != 0.0]
        time.sleep(0.1)
        stale += [s.payload for s in stream.drain()
                  if s.payload["mode"] == MODE_CODES["torque"] and s.payload["goal"] != 0.0]
    assert not stale, f"{len(stale)} ticks ran the torque law on a position goal, e.g. {stale[0]}"


def test_reset_is_atomic(make_rig, start_daemon):
    rig = make_rig(joints=("arm", "mx", "erob"))
    start_daemon(rig)
    ep = rig.cmd
    perturbed = []
    with Stream(rig.pub, f"{rig.name}/arm") as stream:
        stream.first()
        for k in range(3000):
            ok(ep, "set_goal", actuator="arm", value=0.5 * ARM_GEAR)
            time.sleep(0.002)
            ok(ep, "reset")
            if k % 100 == 99:
                perturbed += [s.payload for s in stream.drain()
                              if s.payload["goal"] == 0.0 and s.payload["position"] != 0.0]
        time.sleep(0.1)
        perturbed += [s.payload for s in stream.drain() if s.payload["goal"] == 0.0 and s.payload["position"] != 0.0]
    assert not perturbed, f"{len(perturbed)} samples after a reset left the initial state, e.g. {perturbed[0]}"
