"""Stream fuzz of a running daemon's SLCAN/CANopen bus, with SDO probes checked against the joint state (`run` says
how). The normal run writes >= 10^4 lines, `-m soak` >= 10^5."""

from __future__ import annotations

import math
import random
import time

import pytest

from tests.daemon_process import RSS_GROWTH_LIMIT_KB, rss_kb
from tests.drivers.erob.conftest import COUNTS_PER_REV, JOINT, NODE_IDS, CanLauncher, write_can_rig
from tests.drivers.erob.test_canopen_fuzz import RawLine, malformed_line, valid_frame

SEED = 0xCA2F
COUNTS_PER_RAD = COUNTS_PER_REV / (2 * math.pi)
TOLERANCE_RAD = 0.01
# the probe is sent once and must be answered within this [s]; the point is that it is answered at all (no resend),
# and a loaded host may keep the adapter thread or this reader from running for a good part of a second
PROBE_TIMEOUT_S = 5.0


# well-formed commands that close the channel or reopen it listen-only (Lawicel CANUSB manual): after them a
# real adapter refuses to transmit the probe too, so the stream leaves them out
_CHANNEL_COMMANDS = (b"C\r", b"L\r")


def piece(rng: random.Random) -> bytes:
    while (line := _piece(rng)) in _CHANNEL_COMMANDS:
        pass
    return line


def _piece(rng: random.Random) -> bytes:
    k = rng.random()
    if k < 0.35:
        return valid_frame(rng)[0].encode() + b"\r"
    if k < 0.85:
        return malformed_line(rng)[0].encode("latin-1") + b"\r"
    return bytes(rng.choice([b for b in range(256) if b not in (0x0A, 0x0D)]) for _ in range(rng.randrange(1, 24))) \
        + b"\r"


def probe(line: RawLine, node_id: int) -> int:
    """Expedited upload of 0x6064:00 from `node_id`; the value. Fails on any other answer or none in time."""
    line.write(f"t{0x600 + node_id:03X}84064600000000000\r".encode())
    want = f"t{0x580 + node_id:03X}8".encode()
    buf = b""
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    while True:
        past_deadline = time.monotonic() > deadline    # read once more after it: a reader that woke late
        got = line.ser.read(4096)
        buf += got
        i = buf.find(want)
        if i >= 0 and buf.find(b"\r", i) > 0:
            data = bytes.fromhex(buf[i + 5:i + 21].decode())
            assert data[:4] == bytes([0x43, 0x64, 0x60, 0x00]), f"node {node_id}: {buf!r}"
            return int.from_bytes(data[4:8], "little", signed=True)
        if past_deadline:
            break
        if not got:
            time.sleep(5e-4)
    raise AssertionError(f"no SDO reply from node {node_id} on the first attempt; line held {buf!r}")


def run(daemon, n_lines: int, burst: int) -> dict:
    """The pty opened raw (pyserial, as a terminal program would: test_canopen_fuzz's RawLine) and the channel
    opened once. Then, in bursts: valid frames to ids no node consumes, lines malformed by construction (every class
    of test_canopen_fuzz's generator) and random bytes, CR-terminated; after each burst the line is drained until
    quiet and one probe goes out: an expedited SDO upload of 0x6064 (Position actual value, CiA 402) from node 2 or
    3. Every probe must be answered on its first attempt, by the right node, with an upload response (CiA 301
    §7.2.4.3.6: 0x43 for 4 bytes) whose value lies between the joint's measured position before and after the probe
    (the joints hang free and may swing; `TOLERANCE_RAD` either side). The daemon must stay up and log no traceback,
    and its RSS (/proc/<pid>/status VmRSS) must grow by less than 5 MB from after the first tenth of the run to its
    end."""
    rng = random.Random(SEED)
    line = RawLine(daemon.rig.port)
    written = probes = 0
    rss_start = None
    try:
        line.open_channel()
        while written < n_lines:
            line.write(b"".join(piece(rng) for _ in range(burst)))
            written += burst
            line.drain(quiet=0.02, limit=2.0)
            node = rng.choice(NODE_IDS)
            before = daemon.ok("state")["state"][JOINT[node]]["position_measured"]
            try:
                value = probe(line, node)
            except AssertionError as exc:
                raise AssertionError(f"probe {probes + 1} after {written} lines: {exc}") from None
            after = daemon.ok("state")["state"][JOINT[node]]["position_measured"]
            probes += 1
            lo, hi = sorted((before, after))
            assert (lo - TOLERANCE_RAD) * COUNTS_PER_RAD <= value <= (hi + TOLERANCE_RAD) * COUNTS_PER_RAD, \
                f"probe {probes}: node {node} reports {value} counts, the joint was at {before}..{after} rad"
            if rss_start is None and written >= n_lines // 10:
                rss_start = rss_kb(daemon.proc.pid)
        rss_end = rss_kb(daemon.proc.pid)
    finally:
        line.close()
    assert daemon.alive, daemon.stderr()
    assert "Traceback" not in daemon.stderr()
    assert rss_end - rss_start < RSS_GROWTH_LIMIT_KB, f"RSS {rss_start} -> {rss_end} kB"
    return {"lines": written, "probes": probes, "rss_start_kb": rss_start, "rss_end_kb": rss_end}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    launcher = CanLauncher(tmp_path_factory.mktemp("can-fuzz"))
    yield launcher.start(write_can_rig(launcher.dir, "can-fuzz-stream"))
    launcher.finish()


def test_stream_fuzz_every_probe_answered(daemon):
    print(run(daemon, 10_000, burst=50))


@pytest.mark.soak
def test_stream_fuzz_soak(daemon):
    print(run(daemon, 100_000, burst=100))
