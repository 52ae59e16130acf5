"""A robot rig's bodies' poses on the state stream (servo_hil/daemon/zmq_io.py): one message every `[robot] pose_every`
ticks, none lost however the publisher is scheduled, numbered by copy, in the rig's framing; and the daemon's
recording of them (foxglove.FrameTransforms on `/sim/poses`) gets every one."""

from __future__ import annotations

import time

import msgpack
import pytest
from mcap.reader import make_reader

from servo_hil.logs.mcap import recording_files

from . import ok
from .test_robot_rigs import DXL_ARM, robot_rig
from .test_viewers import Collector, with_zmq

TICKS = 2000          # simulated ticks of the lock-step run: 2 s at 1 kHz
POSE_EVERY = 10       # robot_rig's [robot] pose_every


def poses_of(messages: list[list[bytes]], rig: str, framing: str) -> list[dict]:
    """The poses maps among the state stream's messages, in order (either framing)."""
    out = []
    for frames in messages:
        if framing == "multipart":
            assert len(frames) == 3, f"multipart framing sent {len(frames)} frames"
            if frames[0] == f"{rig}/poses".encode():
                out.append(msgpack.unpackb(frames[1]))
        else:
            assert len(frames) == 1, f"single framing sent a {len(frames)}-frame message (the poses?)"
            message = msgpack.unpackb(frames[0])
            if "poses" in message[rig]:
                stamp, t = message["timestamp"], message[rig]["poses"]["t"]
                assert isinstance(stamp, float) and stamp == pytest.approx(t, abs=1e-12)   # lock-step: sim time
                out.append(message[rig]["poses"])
    return out


@pytest.mark.parametrize("framing", ["multipart", "single"])
def test_poses_every_nth_tick_counted_over_simulated_ticks(framing, tmp_path, start_daemon):
    """Lock-step, TICKS ticks: exactly TICKS / POSE_EVERY poses messages, at ticks 10, 20, …, seq 0, 1, … (no copy
    lost, none sent twice), in the rig's framing; the recording has them all as frame transforms."""
    rig = with_zmq(robot_rig(tmp_path, "poses-count", DXL_ARM.replace("{elbow}", "model = \"m4\""), lockstep=True,
                             extra='[record]\ndir = "rec"\nrate_hz = 100\n'), f'framing = "{framing}"')
    d = start_daemon(rig)
    sub = Collector(rig.pub)
    sub.start()
    time.sleep(0.5)   # the SUB joins (lock-step: nothing is published before the first step)
    ok(rig.cmd, "step", n=TICKS)
    expected = TICKS // POSE_EVERY
    deadline = time.monotonic() + 20.0
    while len(poses_of(list(sub.messages), rig.name, framing)) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)   # any extra copy would arrive by now
    poses = poses_of(sub.stop(), rig.name, framing)
    assert [p["tick"] for p in poses] == list(range(POSE_EVERY, TICKS + 1, POSE_EVERY))
    assert [p["seq"] for p in poses] == list(range(expected))
    assert [p["t"] for p in poses] == pytest.approx([0.001 * k for k in range(POSE_EVERY, TICKS + 1, POSE_EVERY)])
    assert d.terminate() == 0, d.stderr()
    recorded = 0
    for path in recording_files(tmp_path / "rec"):
        with path.open("rb") as f:
            recorded += sum(1 for _ in make_reader(f).iter_messages(topics=["/sim/poses"]))
    assert recorded == expected, f"{recorded} of {expected} poses recorded"


def test_poses_at_rate_over_pose_every_in_real_time(tmp_path, start_daemon):
    """Real time at 1 kHz: over a window the poses are consecutive copies (seq and tick without gaps), so their
    rate is 100 Hz exactly, whatever the publisher's wake-ups."""
    rig = robot_rig(tmp_path, "poses-rate", DXL_ARM.replace("{elbow}", "model = \"m4\""))
    start_daemon(rig)
    sub = Collector(rig.pub)
    sub.start()
    time.sleep(2.0)
    poses = poses_of(sub.stop(), rig.name, "multipart")
    assert len(poses) >= 100, f"{len(poses)} poses messages in 2 s"
    seqs, ticks = [p["seq"] for p in poses], [p["tick"] for p in poses]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "poses lost (seq has gaps)"
    assert ticks == [POSE_EVERY * (s + 1) for s in seqs]
