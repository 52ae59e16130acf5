"""Lock-step mode ([loop] lockstep = true): `step n` advances exactly n ticks, deterministically."""

from __future__ import annotations

import math
import struct
import time

import pytest

from . import DT, Stream, command, ok, refused
from .conftest import ARM_GEAR


def bits(x):
    """A value with every float replaced by its IEEE-754 bytes (so == means bit-identical; NaN-safe)."""
    if isinstance(x, float):
        return struct.pack("<d", x)
    if isinstance(x, dict):
        return {k: bits(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [bits(v) for v in x]
    return x


def lockstep_session(make_rig, start_daemon) -> tuple[list[dict], list, list]:
    """A fresh lock-step daemon driven through a fixed command script; (step replies, stream, status)."""
    rig = make_rig(joints=("arm", "mx"), lockstep=True)
    d = start_daemon(rig)
    ep = rig.cmd
    with Stream(rig.pub) as stream:
        stream.wait_subscribed()
        assert stream.collect(0.2) == [], "a lock-step rig published before any step"
        assert ok(ep, "status")["status"]["tick"] == 0
        ok(ep, "set_goal", actuator="arm", value=0.5 * ARM_GEAR)
        ok(ep, "set_goal", actuator="mx", value=0.8)
        ok(ep, "inject_fault", actuator="arm", fault="encoder_noise", args={"std_rad": 0.002})  # seeded noise
        replies = [ok(ep, "step", n=500)]
        ok(ep, "set_goal", actuator="mx", value=-0.3)
        ok(ep, "set_external_torque", actuator="arm", value=0.05)
        replies.append(ok(ep, "step", n=500))
        samples = collect_n(stream, 2 * 1000, timeout=10.0)
        samples += stream.collect(0.3)  # and then nothing more
    status = ok(ep, "status")["status"]
    assert d.terminate() == 0, d.stderr()  # frees the CPU for the next session
    return replies, samples, status


def collect_n(stream: Stream, n: int, timeout: float) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and (left := deadline - time.monotonic()) > 0:
        s = stream.recv(left)
        if s is not None:
            out.append(s)
    return out


def test_lockstep_is_deterministic_and_exact(make_rig, start_daemon):
    runs = [lockstep_session(make_rig, start_daemon) for _ in range(2)]
    (r1, s1, _), (r2, s2, _) = runs
    for replies, samples, status in runs:
        assert [r["tick"] for r in replies] == [500, 1000]
        for r in replies:
            for joint, st in r["state"].items():
                assert st["t"] == r["tick"] * DT, f"{joint}: t {st['t']!r} != {r['tick']}·dt"
        assert status["tick"] == 1000 and status["lockstep"] is True
        assert status["t"] == pytest.approx(1.0, abs=1e-12)
        # the stream carries exactly the stepped ticks, no more
        for joint in ("arm", "mx"):
            mine = [s for s in samples if s.joint == joint]
            ticks = [round(s.payload["t"] / DT) for s in mine]
            assert ticks == list(range(1, 1001)), f"{joint}: {len(ticks)} samples, ticks {ticks[:3]}…{ticks[-3:]}"
            assert [s.payload["seq"] for s in mine] == list(range(1000))
            assert all(s.payload["t"] == k * DT for s, k in zip(mine, ticks, strict=True))
            # lock-step time stamps are the simulation time
            assert all(float(s.stamp) == pytest.approx(s.payload["t"], abs=1e-9) for s in mine)
        assert len(samples) == 2000
        mx_pos = replies[0]["state"]["mx"]["position"]
        assert abs(mx_pos - 0.8) < 0.1, f"the goal was not applied before the first step ({mx_pos})"
        assert replies[1]["state"]["arm"]["external_torque"] == 0.05
    # two fresh daemons, same commands: bit-identical states and streams
    assert bits([r["state"] for r in r1]) == bits([r["state"] for r in r2])
    assert bits([s.payload for s in s1]) == bits([s.payload for s in s2])
    noise = [s.payload["position_measured"] - s.payload["position"] for s in s1 if s.joint == "arm"]
    assert max(abs(x) for x in noise) > 1e-3, "the seeded encoder noise was not active: determinism test too weak"
    assert all(math.isfinite(s.payload["position"]) for s in s1)


def test_step_arguments(make_rig, start_daemon):
    rig = make_rig(joints=("arm",), lockstep=True)
    start_daemon(rig)
    for n in (0, -5, 1.5, True, "10", 10_000_001):
        refused(rig.cmd, "step", "n", n=n)
    assert ok(rig.cmd, "step")["tick"] == 1  # n defaults to 1
    reply = ok(rig.cmd, "step", n=3)
    assert reply["tick"] == 4 and reply["state"]["arm"]["t"] == 4 * DT


def test_state_between_steps_is_frozen(make_rig, start_daemon):
    """Between steps nothing moves: `state` equals the last step's reply bit for bit, however long one waits."""
    rig = make_rig(joints=("arm", "mx"), lockstep=True)
    start_daemon(rig)
    with Stream(rig.pub) as stream:
        stream.wait_subscribed()
        ok(rig.cmd, "set_goal", actuator="mx", value=0.5)
        reply = ok(rig.cmd, "step", n=200)
        assert len(collect_n(stream, 400, timeout=5.0)) == 400
        assert stream.collect(0.3) == [], "samples after the stepped ticks"
    later = ok(rig.cmd, "state")["state"]
    assert bits(later) == bits(reply["state"])
    assert later["mx"]["position"] > 0.1
    assert ok(rig.cmd, "status")["status"]["tick"] == 200


def test_pause_in_lockstep_is_consistent(make_rig, start_daemon):
    """Regression: `pause` used to be accepted in lock-step (status paused) while `step` still advanced."""
    rig = make_rig(joints=("arm",), lockstep=True)
    start_daemon(rig)
    ok(rig.cmd, "step", n=3)
    if not command(rig.cmd, "pause")["ok"]:
        return  # refusing pause in lock-step is consistent
    assert ok(rig.cmd, "status")["status"]["paused"] is True
    reply = command(rig.cmd, "step", n=5)
    if not reply["ok"]:
        return  # refusing to step while paused is consistent too
    assert reply["tick"] == 3, f"`step` advanced a paused rig to tick {reply['tick']}"
