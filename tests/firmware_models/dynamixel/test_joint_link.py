"""A servo on an actuator of the running loop reaches it through its C link (firmware_models/dynamixel/joint_link.pyx):
it reads the loop's snapshot and tick and queues a new goal on the loop's ring itself. It must read what LiveJoint
reads, and a goal must reach the loop as LiveJoint.command would send it: staged inside the rig's batch (a bus
packet's commands reach the loop at one tick), at once outside one."""

from __future__ import annotations

import time

import pytest

from firmware_models.dynamixel.control_table import load_model
from firmware_models.dynamixel.servo import DynamixelServo
from hil.daemon.live_rig import LiveJoint
from tests.hil.daemon import running_rig

RIG = """name = "joint_link"
[loop]
lockstep = true
[mqtt]
enabled = false
""" + "".join(f"""[[actuators]]
joint = "{name}"
catalog = "xm430_w350"
load = {{ mass = 0.3, length = 0.1 }}
""" for name in ("a", "b"))
PRESENT_POSITION, REALTIME_TICK, GOAL_POSITION = (132, 4), (120, 2), 116


@pytest.fixture
def live(tmp_path):
    with running_rig(tmp_path / "rig.toml", RIG) as live:
        yield live


def _steps(live, n):
    target = live.loop.request_steps(n)
    deadline = time.monotonic() + 2.0
    while live.loop.tick < target or live.loop.commands_pending():
        assert time.monotonic() < deadline, "the loop did not get there"
        time.sleep(1e-4)


def _register(servo, item):
    reply = servo.read(*item)
    assert reply.error == 0
    return int.from_bytes(reply.params, "little", signed=True)


def test_reads_the_snapshot_and_tick_of_its_actuator(live):
    servo = DynamixelServo(load_model("xm430_w350"), LiveJoint(live, 1), {"ID": 2})
    LiveJoint(live, 1).command(goal=0.6, enable=True)
    _steps(live, 37)
    state = LiveJoint(live, 1).read_state()
    assert state["k"] > 0 and state["theta_meas"] != live.loop.state_of(0)["theta_meas"]
    assert _register(servo, PRESENT_POSITION) == servo._units.position_register(state["theta_meas"])
    assert _register(servo, REALTIME_TICK) == int(live.loop.tick * live.period_s * 1000) % 32768 == 37
    assert servo.link.joint.j == 1


def _goal(live):
    return live.loop.snapshot()[1][0]["u"]


def _wait(cond):
    deadline = time.monotonic() + 2.0
    while not cond():
        assert time.monotonic() < deadline, "the loop did not apply the goal"
        time.sleep(1e-4)


def test_goal_staged_in_the_batch_committed_outside(live):
    """The idle lock-step loop applies committed commands within microseconds (the host wakes it): a staged goal is
    one it has not seen."""
    servo = DynamixelServo(load_model("xm430_w350"), LiveJoint(live, 0), {"ID": 1})
    before = _goal(live)
    with live.atomic():
        assert servo.write(GOAL_POSITION, (3072).to_bytes(4, "little")).error == 0
        assert live.batch_thread is not None
        time.sleep(0.02)
        assert _goal(live) == before and live.loop.commands_pending() == 0, "staged until the batch ends"
    assert live.batch_thread is None
    _wait(lambda: _goal(live) == servo._units.position_si(3072) != before)
    assert servo.write(GOAL_POSITION, (1024).to_bytes(4, "little")).error == 0   # no batch: committed at once
    _wait(lambda: _goal(live) == servo._units.position_si(1024))
