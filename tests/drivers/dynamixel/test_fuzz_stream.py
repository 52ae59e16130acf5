"""Stream fuzz of a running daemon's Dynamixel bus, with valid probes interleaved and checked against the joint state
(`run` says how). The normal run writes >= 10^4 fuzz pieces, `-m soak` >= 10^6."""

from __future__ import annotations

import math
import random
import struct
import time

import pytest

from drivers.emulated.dynamixel.protocol import HEADER, Instruction, Parser, encode_instruction
from drivers.wire.ports import wire_time_s
from tests.daemon_process import rss_kb

from .conftest import IDS, JOINT, write_dxl_rig

SEED = 0xD15E
BAUD = 1_000_000        # the rig's and the client's line speed [bit/s]
QUIET_S = 0.02          # silence before a probe [s]: well past the 1.5 ms inter-byte timeout, so the parser restarts
# a probe's replies must be complete within this (no retry) [s]; the point is that the probe is answered at all,
# and a loaded host may keep the server from running for a good part of a second
PROBE_TIMEOUT_S = 5.0
MARKER_ID = 1
MARKER_WAIT_S = 1.0     # a marker unanswered for this long was swallowed by a partial fuzz packet: send another [s]
SETTLE_DEADLINE_S = 10.0  # the server must have answered a marker within this of the first one [s]
RSS_GROWTH_LIMIT_KB = 5 * 1024
PRESENT_POSITION = (132, 4)
TICKS_PER_RAD = 4096 / (2 * math.pi)   # X / MX(2.0) position resolution, 0 at 2048 (e-manual §Present Position(132))


class Stream:
    """Header-biased fuzz pieces; `pieces` counts them."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.pieces = 0
        r = self.rng
        self.valid = [
            encode_instruction(0xFE, Instruction.FAST_SYNC_READ, struct.pack("<HHB", 132, 0xFFFF, 3)),
            encode_instruction(0xFE, Instruction.FAST_SYNC_READ, struct.pack("<HHBB", 0, 65520, 3, 4)),
            encode_instruction(0xFE, Instruction.FAST_BULK_READ, struct.pack("<BHHBHH", 3, 0, 0xFFFF, 4, 132, 4)),
            encode_instruction(0xFE, Instruction.SYNC_READ, struct.pack("<HHBBBB", 0, 0xFFFF, 1, 2, 3, 4)),
            encode_instruction(0xFE, Instruction.BULK_READ, struct.pack("<BHHBHH", 1, 600, 300, 2, 0, 65535)),
            encode_instruction(2, Instruction.READ, struct.pack("<HH", 0, 0xFFFF)),
            encode_instruction(4, Instruction.READ, struct.pack("<HH", 0xFFFD, 0xFFFF)),
            encode_instruction(3, Instruction.READ, struct.pack("<HH", 132, 4)),
            encode_instruction(0xFE, Instruction.PING),
            encode_instruction(1, 0x7F),                       # undefined instruction: Instruction Error
        ]
        self._ids = [1, 2, 3, 4, 0xFE, 0xFD, 0] + [r.randrange(256) for _ in range(4)]

    def piece(self) -> bytes:
        r = self.rng
        self.pieces += 1
        kind = r.random()
        if kind < 0.3:
            return r.randbytes(r.randint(1, 32))
        if kind < 0.6:   # a header with a random LEN (short, medium or up to 65535) and some body
            length = r.choice([r.randint(0, 8), r.randint(3, 300), r.randint(0, 0xFFFF)])
            return HEADER + bytes([r.choice(self._ids)]) + struct.pack("<H", length) + r.randbytes(r.randint(0, 24))
        pkt = bytearray(r.choice(self.valid))
        if kind < 0.75:
            return bytes(pkt)
        if kind < 0.9:
            return bytes(pkt[: r.randint(1, len(pkt) - 1)])
        i = r.randrange(len(pkt))
        pkt[i] ^= r.randint(1, 255)
        return bytes(pkt)


class Probe:
    """Sync Read of Present Position from IDs 1-4 over a raw pyserial port."""

    def __init__(self, ser):
        self.ser = ser
        self.wire = encode_instruction(0xFE, Instruction.SYNC_READ, struct.pack("<HH", *PRESENT_POSITION) + bytes(IDS))

    def drain(self, quiet_s: float, busy_until: float) -> int:
        """Read and drop replies until the line has been silent for `quiet_s` after `busy_until` (when what was
        written would have left a real wire); the bytes dropped."""
        dropped, last = 0, max(time.monotonic(), busy_until)
        while time.monotonic() - last < quiet_s:
            got = self.ser.read(65536)
            if got:
                dropped += len(got)
                last = time.monotonic()
            else:
                time.sleep(5e-4)
        return dropped

    def settle(self, quiet_s: float, busy_until: float) -> int:
        """Drain (see `drain`), then send a marker and drop every reply up to and including the marker's, so that
        the server has answered all that was written before; the markers sent. Each marker reads a length of its
        own, which no reply to a fuzz piece or to an earlier marker has, so only the last marker's reply ends the
        wait."""
        deadline = None     # counted from the first marker: long replies to the burst may hold the line before it
        markers = 0
        while deadline is None or time.monotonic() < deadline:
            self.drain(quiet_s, busy_until)
            if deadline is None:
                deadline = time.monotonic() + SETTLE_DEADLINE_S
            markers += 1
            length = 5 + markers
            self.ser.write(encode_instruction(MARKER_ID, Instruction.READ, struct.pack("<HH", 0, length)))
            parser = Parser(PROBE_TIMEOUT_S, accept_status=True)
            resend_at = min(deadline, time.monotonic() + MARKER_WAIT_S)
            while True:
                data = self.ser.read(65536)
                if data:
                    got = parser.feed(data, time.monotonic())
                    for n, p in enumerate(got):
                        if p.id == MARKER_ID and p.instruction == 0x55 and len(getattr(p, "params", b"")) == 1 + length:
                            # the server answers in order: nothing may come after the last marker's reply
                            assert n == len(got) - 1 and not parser.buffered, f"after the marker: {data.hex(' ')}"
                            return markers
                elif time.monotonic() > resend_at:
                    break
                else:
                    time.sleep(2e-4)
            busy_until = 0.0
        raise AssertionError(f"no reply to {markers} markers within {SETTLE_DEADLINE_S} s")

    def ask(self) -> tuple[list, bytes]:
        """Send the probe; (the packets that came back, good or corrupt, and their bytes)."""
        self.ser.write(self.wire)
        # the client side is no servo: a reply paced out with a pause (a starved server) is still one reply
        parser = Parser(PROBE_TIMEOUT_S, accept_status=True)
        got: list = []
        raw = b""
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while len(got) < len(IDS):
            data = self.ser.read(65536)
            if data:
                raw += data
                got += parser.feed(data, time.monotonic())
            elif time.monotonic() > deadline:    # checked after a read: a reader that woke late still reads once
                break
            else:
                time.sleep(2e-4)
        return got, raw


def expected_ticks(state: dict) -> dict[int, float]:
    return {i: 2048 + state[JOINT[i]]["position_measured"] * TICKS_PER_RAD for i in IDS}


def run(daemon, n_pieces: int, burst: int) -> dict:
    """A seeded, header-biased stream (random bytes; FF FF FD 00 headers with random IDs and LEN; valid reads with
    absurd lengths, among them a Fast Sync Read of 65 535 bytes; valid packets cut short or with one byte flipped)
    written to the pty in bursts, straight through pyserial. After each burst the test waits until the line has been
    silent for `QUIET_S` (> the 1.5 ms inter-byte timeout of Protocol 2.0 §Instruction Packet) plus the burst's wire
    time, counted from when the burst would have left a real wire, and until the server has answered a marker (a
    Read from ID 1 that no fuzz piece asks for, sent after the silence and again after another silence if a fuzz
    packet swallowed it): a server the host kept from running answers the burst late, and those replies must not be
    taken for the probe's. Then one probe: a Sync Read of Present Position from IDs 1-4. Every probe must be
    answered on its first attempt, with nothing else on the line, by the four servos in order, with error 0 and the
    position the loop's state gives (lock-step rig, so the state cannot move between the `step` reply and the
    probe). The daemon must stay up, log no traceback and isolate no failure, and its RSS (/proc/<pid>/status
    VmRSS) must grow by less than 5 MB from after the first tenth of the run to its end."""
    import serial

    ser = serial.Serial(daemon.rig.port, BAUD, timeout=0)
    stream, probe = Stream(SEED), Probe(ser)
    state = daemon.step(1)["state"]
    probes = rounds = markers = 0
    rss_start = None
    try:
        while stream.pieces < n_pieces:
            chunk = b"".join(stream.piece() for _ in range(burst))
            # the pty takes the burst at once; the emulated 1 Mbit/s wire carries it for its wire time, which the
            # server models (replies to it come after that), so the silence counts from then. On the half-duplex
            # wire the replies to the burst delay the rest of it too, and a reply may wait for as long as the
            # burst took on the wire (a CRC-failed packet can claim all of it): the silence must last that long
            burst_s = wire_time_s(len(chunk), BAUD)
            busy_until = time.monotonic() + burst_s
            ser.write(chunk)
            markers += probe.settle(QUIET_S + burst_s, busy_until)
            got, raw = probe.ask()
            probes += 1
            context = f"probe {probes} after {stream.pieces} pieces, replies {raw.hex(' ')}"
            answers = [(p.id, p.instruction, getattr(p, "params", b"corrupt")[:1]) for p in got]
            assert answers == [(i, 0x55, b"\x00") for i in IDS], f"{context}: {got}"
            want = expected_ticks(state)
            for p in got:
                ticks = int.from_bytes(p.params[1:5], "little", signed=True)
                assert abs(ticks - want[p.id]) <= 1, f"{context}: ID {p.id} at {ticks}, state says {want[p.id]}"
            rounds += 1
            if rounds % 20 == 0:
                state = daemon.step(3)["state"]    # the joints move on; the next probes must follow
                assert daemon.alive, daemon.stderr()
            if rss_start is None and stream.pieces >= n_pieces // 10:
                rss_start = rss_kb(daemon.proc.pid)
        rss_end = rss_kb(daemon.proc.pid)
    finally:
        ser.close()
    status = daemon.ok("status")["status"]
    assert status["loop_alive"] is True
    log = daemon.stderr()
    assert "Traceback" not in log and "not answered" not in log, log[-2000:]
    assert rss_end - rss_start < RSS_GROWTH_LIMIT_KB, f"RSS {rss_start} -> {rss_end} kB"
    return {"pieces": stream.pieces, "probes": probes, "markers": markers, "rss_start_kb": rss_start,
            "rss_end_kb": rss_end}


@pytest.fixture(scope="module", params=[False, True], ids=["paced", "fast"])
def daemon(request, module_launcher):
    fast = request.param
    return module_launcher.start(write_dxl_rig(module_launcher.dir, f"fuzz-stream-{'fast' if fast else 'paced'}",
                                               fast=fast, lockstep=True))


def test_stream_fuzz_every_probe_answered(daemon, record_property):
    result = run(daemon, 10_000, burst=20)
    record_property("dynamixel_stream_fuzz", result)
    print(result)


@pytest.mark.soak
def test_stream_fuzz_soak(daemon, record_property):
    result = run(daemon, 1_000_000, burst=400)
    record_property("dynamixel_stream_fuzz_soak", result)
    print(result)
