"""Stream fuzz of a running daemon's Etherban server (ZeroMQ REQ/REP, etherban.proto), with probes checked against
the joint state (`run` says how). The normal run sends >= 10^4 requests, `-m soak` >= 10^5."""

from __future__ import annotations

import random
import struct

import pytest
import zmq

from drivers.emulated.etherban import etherban_pb2 as pb
from tests.daemon_process import RSS_GROWTH_LIMIT_KB, rss_kb

from .test_etherban import Master, rig  # noqa: F401  (the module's daemon fixture)

SEED = 0xE7B4
PROBE_EVERY = 50
TOLERANCE_RAD = 0.02
JOINTS = ("big", "small")
# finite targets beyond any drive's range included: the CiA 402 unit conversion saturates them
TARGETS = (0.0, 0.1, -0.5, 3.0, 1e3, -1e6, float("inf"), float("-inf"), float("nan"), 5e-324,
           1e305, -1e308, 1.7976931348623157e308)


def request_frames(rng: random.Random) -> list[bytes]:
    k = rng.random()
    if k < 0.2:
        return [rng.randbytes(rng.randrange(0, 64))]
    if k < 0.25:
        return [rng.randbytes(rng.randrange(0, 8)) for _ in range(rng.randint(2, 3))]
    req = pb.Request()
    for _ in range(rng.randrange(0, 5)):
        target = rng.choice(TARGETS) if rng.random() < 0.5 else rng.uniform(-2.0, 2.0)
        req.orders.add(device=rng.choice([0, 1, 1, 0, 2, 7, -1, 2**31 - 1]), operation_mode=rng.choice([0, 1, 2]),
                       target=target)
    wire = bytearray(req.SerializeToString())
    if k < 0.85 or not wire:
        return [bytes(wire)]
    if rng.random() < 0.5:
        i = rng.randrange(len(wire))
        wire[i] ^= rng.randint(1, 255)
    else:
        del wire[rng.randrange(len(wire)):]
    if rng.random() < 0.2:   # an unknown operation mode in an otherwise valid order
        wire += b"\x0a\x04\x08\x00\x10" + struct.pack("<B", rng.randint(3, 127))
    return [bytes(wire)]


def run(rig, n_requests: int) -> dict:  # noqa: F811
    """A seeded stream of requests, as a careless or broken master sends them: random bytes, valid Requests whose
    orders name any device (known, unknown, negative), any operation mode and any target (0, small, large, ±inf, NaN,
    the smallest subnormal, finite targets beyond every range), valid Requests with bytes flipped or cut, and
    two-frame messages. Every request must get exactly one reply that parses as a Response (an empty one for what is
    no Request). Every `PROBE_EVERY` requests a probe goes out: an empty Request, whose Response must list devices 0
    and 1 with a `present_position` between the joint's measured position before and after it (the joints move
    under the fuzzed orders; `TOLERANCE_RAD` either side). The daemon must stay up and log no traceback, and its RSS
    (/proc/<pid>/status VmRSS) must grow by less than 5 MB from after the first tenth of the run to its end."""
    rng = random.Random(SEED)
    master = Master(rig.path)
    sent = probes = 0
    rss_start = None
    try:
        while sent < n_requests:
            for _ in range(PROBE_EVERY):
                frames = request_frames(rng)
                try:
                    reply = master.raw(*frames)
                except zmq.Again:
                    raise AssertionError(f"no reply to request {sent} {[f.hex() for f in frames]}") from None
                resp = pb.Response()
                resp.ParseFromString(reply)   # raises on anything that is no Response
                sent += 1
            before = rig.ok("state")["state"]
            resp = master.exchange()
            after = rig.ok("state")["state"]
            probes += 1
            assert [s.device for s in resp.statuses] == [0, 1], f"probe {probes}: {resp}"
            for s, joint in zip(resp.statuses, JOINTS, strict=True):
                lo, hi = sorted((before[joint]["position_measured"], after[joint]["position_measured"]))
                assert lo - TOLERANCE_RAD <= s.present_position <= hi + TOLERANCE_RAD, \
                    f"probe {probes}: {joint} at {s.present_position} rad, the joint was at {lo}..{hi}"
            if rss_start is None and sent >= n_requests // 10:
                rss_start = rss_kb(rig.proc.pid)
        rss_end = rss_kb(rig.proc.pid)
    finally:
        master.close()
    assert rig.proc.poll() is None, rig.err.read_text()
    assert "Traceback" not in rig.err.read_text(), rig.err.read_text()[-3000:]
    assert rss_end - rss_start < RSS_GROWTH_LIMIT_KB, f"RSS {rss_start} -> {rss_end} kB"
    return {"requests": sent, "probes": probes, "rss_start_kb": rss_start, "rss_end_kb": rss_end}


def test_etherban_stream_fuzz_every_probe_answered(rig):  # noqa: F811
    print(run(rig, 10_000))


@pytest.mark.soak
def test_etherban_stream_fuzz_soak(rig):  # noqa: F811
    print(run(rig, 100_000))
