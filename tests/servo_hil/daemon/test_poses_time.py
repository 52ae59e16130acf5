"""A robot rig's poses on ZeroMQ carry t = tick / rate_hz written to the period's decimals (0.57 at 1 kHz, not the
float product 0.5700000000000001)."""

from __future__ import annotations

import msgpack
import zmq

from . import ok
from .test_robot_rigs import DXL_ARM, robot_rig


def test_pose_times_are_the_ticks_decimals(tmp_path, start_daemon):
    rig = start_daemon(robot_rig(tmp_path, "t-arm", DXL_ARM.replace("{elbow}", ""), lockstep=True)).rig
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, f"{rig.name}/poses".encode())
    sub.connect(rig.pub)
    payloads = []
    try:
        for _ in range(100):
            ok(rig.cmd, "step", n=10)
            while sub.poll(20):
                payloads.append(msgpack.unpackb(sub.recv_multipart()[1]))
        while sub.poll(500):
            payloads.append(msgpack.unpackb(sub.recv_multipart()[1]))
    finally:
        sub.close(0)
        ctx.term()
    assert len(payloads) >= 50
    assert any(repr(p["tick"] * 0.001) != repr(p["t"]) for p in payloads)   # the noise the product would show
    for p in payloads:
        assert len(repr(p["t"]).partition(".")[2]) <= 3, p["t"]
        assert abs(p["t"] - p["tick"] / 1000) <= 1e-12, (p["t"], p["tick"])
