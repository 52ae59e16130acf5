"""A servo on an actuator of the running loop reaches it through its C link (firmware_models/dynamixel/joint_link.pyx):
it reads the loop's snapshot and tick and queues a new goal on the loop's ring itself. It must read what LiveJoint
reads, and a goal must reach the loop as LiveJoint.command would send it: staged inside the rig's batch (a bus
packet's commands reach the loop at one tick), at once outside one."""

from __future__ import annotations

import time

import pytest

from firmware_models.dynamixel.control_table import load_model
from firmware_models.dynamixel.servo import DynamixelServo
from hil.joint import GoalPort
from hil.loop.rt import COMMANDS
from servo_hil.daemon.live_rig import LiveJoint
from tests.servo_hil.daemon import running_rig

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


class RecordingPort:
    """A Joint and GoalPort that is not a LiveJoint (no rig behind it to reach): it forwards to `joint` and records
    the goals the link hands to `queue_goal` (forwarded too while `forward`)."""

    def __init__(self, joint: LiveJoint):
        self.joint = joint
        self.queued: list[float] = []
        self.forward = True

    loop = property(lambda self: self.joint.loop)
    j = property(lambda self: self.joint.j)
    period_s = property(lambda self: self.joint.period_s)
    batch_thread = property(lambda self: self.joint.batch_thread)

    def queue_goal(self, u: float) -> None:
        self.queued.append(u)
        if self.forward:
            self.joint.queue_goal(u)

    def read_state(self):
        return self.joint.read_state()

    def params(self):
        return self.joint.params()

    def command(self, **kw):
        self.joint.command(**kw)

    def time_s(self):
        return self.joint.time_s()

    def sync(self):
        self.joint.sync()


def test_the_link_reaches_the_loop_through_the_goal_port_only(live):
    """Outside a batch a goal goes to `queue_goal`; inside the batch on this thread it is staged on the ring in C;
    with the ring full it goes to `queue_goal` again."""
    assert isinstance(LiveJoint(live, 0), GoalPort)
    port = RecordingPort(LiveJoint(live, 0))
    assert isinstance(port, GoalPort) and not hasattr(port, "live")
    servo = DynamixelServo(load_model("xm430_w350"), port, {"ID": 1})
    si = servo._units.position_si
    assert servo.write(GOAL_POSITION, (3072).to_bytes(4, "little")).error == 0
    assert port.queued == [si(3072)]
    _wait(lambda: _goal(live) == si(3072))
    with live.atomic():
        assert servo.write(GOAL_POSITION, (1024).to_bytes(4, "little")).error == 0
    assert port.queued == [si(3072)]                          # staged in C, not handed over
    _wait(lambda: _goal(live) == si(1024))
    port.forward = False
    with live.atomic():
        staged = 0
        while live.loop.push(COMMANDS["set_enable"], 1, 1.0, 0.0, None, False):   # fill the ring
            staged += 1
        assert staged > 0
        assert servo.write(GOAL_POSITION, (2048).to_bytes(4, "little")).error == 0
    assert port.queued == [si(3072), si(2048)]                # the ring was full: handed over
