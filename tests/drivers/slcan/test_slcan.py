"""The SLCAN adapter on real ptys, driven by the unchanged python-can slcan client and by a raw host.

Expected replies come from the Lawicel CANUSB protocol (CR = OK, BEL = error, `z`/`Z` after a
transmit) and from what python-can 4.6's can/interfaces/slcan.py writes and parses; frame timing
from the CAN 2.0 worst-case frame length (135 bits for 8 bytes, standard id).
"""

from __future__ import annotations

import itertools
import os
import queue
import re
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import can
import pytest
import serial

from drivers.emulated.slcan.adapter import BITRATES, CanFrame, SlcanAdapter, encode_frame, frame_bits, parse_frame
from drivers.wire.ports import PtyPort

OK, BEL = b"\r", b"\x07"
PYTHON_CAN_BITRATES = [10_000, 20_000, 50_000, 100_000, 125_000, 250_000, 500_000, 750_000, 1_000_000]


class Node:
    """The bus side of a test: collects what `on_frame` receives."""

    def __init__(self) -> None:
        self.rx: queue.Queue[tuple[CanFrame, float, float]] = queue.Queue()

    def __call__(self, frame: CanFrame, t: float) -> None:
        self.rx.put((frame, t, time.monotonic()))

    def get(self, timeout: float = 2.0) -> CanFrame:
        return self.rx.get(timeout=timeout)[0]


@pytest.fixture
def make_adapter(tmp_path: Path) -> Iterator[Callable[..., tuple[SlcanAdapter, Node]]]:
    started: list[SlcanAdapter] = []

    def make(on_frame: Callable[[CanFrame, float], None] | None = None, **kw) -> tuple[SlcanAdapter, Node]:
        node = Node()
        adapter = SlcanAdapter(PtyPort(tmp_path / f"ttyCAN{len(started)}"), on_frame or node, **kw)
        started.append(adapter)
        adapter.start()
        return adapter, node

    yield make
    for adapter in started:
        if adapter.is_alive():
            adapter.stop()
            assert adapter.error is None, adapter.error


@pytest.fixture
def adapter(make_adapter) -> tuple[SlcanAdapter, Node]:
    return make_adapter()


def python_can(path: str, **kw) -> can.BusABC:
    kw.setdefault("bitrate", 1_000_000)
    return can.Bus(interface="slcan", channel=path, sleep_after_open=0, **kw)


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    """Until `cond()`; generous, as a loaded host may starve the thread that makes it true for a while."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.002)


def commands(a: SlcanAdapter, n: int) -> list[tuple[bytes, bytes]]:
    """The adapter's command log once it holds `n` entries (python-can never waits for replies)."""
    wait_for(lambda: len(a.commands) >= n)
    return list(a.commands)


class RawHost:
    """A host program talking Lawicel by hand over pyserial (any baud: the adapter ignores it)."""

    def __init__(self, path: str, baud: int = 115200) -> None:
        self.ser = serial.Serial(path, baud, timeout=0.05)
        self.buf = bytearray()

    def close(self) -> None:
        self.ser.close()

    def _fill(self, deadline: float) -> None:
        chunk = self.ser.read(max(1, self.ser.in_waiting))
        assert chunk or time.monotonic() < deadline, f"no reply; have {bytes(self.buf)!r}"
        self.buf += chunk

    def reply(self, timeout: float = 2.0) -> bytes:
        """The next reply: bytes up to and including the first CR or BEL."""
        deadline = time.monotonic() + timeout
        while True:
            ends = [i for i in (self.buf.find(b"\r"), self.buf.find(b"\x07")) if i >= 0]
            if ends:
                end = min(ends) + 1
                out = bytes(self.buf[:end])
                del self.buf[:end]
                return out
            self._fill(deadline)

    def cmd(self, line: bytes) -> bytes:
        self.ser.write(line + b"\r")
        return self.reply()

    def lines(self, n: int, timeout: float = 5.0) -> list[tuple[bytes, float]]:
        """`n` CR-terminated lines with the time.monotonic() each was seen."""
        out: list[tuple[bytes, float]] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            while (i := self.buf.find(b"\r")) >= 0 and len(out) < n:
                out.append((bytes(self.buf[: i + 1]), time.monotonic()))
                del self.buf[: i + 1]
            if len(out) < n:
                self._fill(deadline)
        return out

    def drain(self, quiet_s: float = 0.15) -> bytes:
        """Everything until nothing has arrived for `quiet_s`."""
        got = bytes(self.buf)
        self.buf.clear()
        last = time.monotonic()
        while time.monotonic() - last < quiet_s:
            chunk = self.ser.read(max(1, self.ser.in_waiting))
            if chunk:
                got += chunk
                last = time.monotonic()
        return got


@pytest.fixture
def raw(adapter) -> Iterator[RawHost]:
    host = RawHost(adapter[0].path)
    yield host
    host.close()


# ------------------------------------------------------------------------------------------ frames, codec


def test_frame_bits_worst_case_formula():
    assert frame_bits(CanFrame(0x123, bytes(8))) == 135
    assert frame_bits(CanFrame(0x123, b"")) == 55
    assert frame_bits(CanFrame(0x1234567, bytes(8), extended=True)) == 160
    assert frame_bits(CanFrame(0x1234567, b"", extended=True)) == 80
    # a remote frame requesting 8 bytes carries none on the wire
    assert frame_bits(CanFrame(0x123, remote=True, dlc=8)) == 55
    assert [frame_bits(CanFrame(1, bytes(n))) for n in range(9)] == [55, 65, 75, 85, 95, 105, 115, 125, 135]


@pytest.mark.parametrize("kw", [
    {"id": 0x800},
    {"id": -1},
    {"id": 0x2000_0000, "extended": True},
    {"id": 1, "data": bytes(9)},
    {"id": 1, "data": b"\x01", "remote": True},
    {"id": 1, "remote": True, "dlc": 9},
    {"id": 1, "data": b"\x01\x02", "dlc": 3},
])
def test_can_frame_rejects_impossible_frames(kw):
    with pytest.raises(ValueError):
        CanFrame(**kw)


def test_encode_parse_round_trip():
    frames = [CanFrame(0x7FF, bytes(range(8))), CanFrame(0, b""), CanFrame(0x1FFF_FFFF, b"\xab", extended=True),
              CanFrame(0x65, remote=True, dlc=3), CanFrame(0x1234, extended=True, remote=True, dlc=8)]
    for f in frames:
        line = encode_frame(f)
        assert line.endswith(b"\r")
        assert parse_frame(line[:-1]) == f
    assert encode_frame(CanFrame(0x123, b"\xbe\xef")) == b"t1232BEEF\r"
    assert encode_frame(CanFrame(0x1ABCDEF, b"", extended=True)) == b"T01ABCDEF0\r"
    assert encode_frame(CanFrame(0x123, remote=True, dlc=4), timestamp_ms=60_001) == b"r12340001\r"
    assert parse_frame(b"t1232beef") == CanFrame(0x123, b"\xbe\xef")   # lower-case hex accepted


# ------------------------------------------------------------------------------------------ python-can


def test_python_can_open_close_sequence(adapter):
    a, _ = adapter
    assert not a.is_open and a.bitrate is None
    bus = python_can(a.path)
    # python-can: C, S8, the empty "no data bitrate" command, O (set_bitrate), then O again (__init__)
    assert commands(a, 5) == [(b"C", BEL), (b"S8", OK), (b"", OK), (b"O", OK), (b"O", BEL)]
    assert a.is_open and a.bitrate == 1_000_000 and not a.listen_only
    bus.shutdown()
    assert commands(a, 6)[-1] == (b"C", OK)
    assert not a.is_open


@pytest.mark.parametrize("bitrate", PYTHON_CAN_BITRATES)
def test_python_can_bitrates_map_to_s_codes(adapter, bitrate):
    a, _ = adapter
    bus = python_can(a.path, bitrate=bitrate)
    try:
        code = PYTHON_CAN_BITRATES.index(bitrate)
        assert (f"S{code}".encode(), OK) in commands(a, 5)
        assert a.is_open
        assert a.bitrate == bitrate == BITRATES[code]
    finally:
        bus.shutdown()


def test_python_can_unknown_bitrate_code_is_refused(adapter):
    a, node = adapter
    bus = python_can(a.path, bitrate=83_300)   # python-can's S9: not a Lawicel code
    try:
        log = commands(a, 5)
        assert (b"S9", BEL) in log
        assert a.bitrate is None and not a.is_open         # no bitrate: O refused too
        assert log[-2:] == [(b"O", BEL), (b"O", BEL)]
        errors = a.stats.errors
        bus.send(can.Message(arbitration_id=0x10, data=b"\x01", is_extended_id=False))
        wait_for(lambda: a.stats.errors == errors + 1)
        assert node.rx.empty() and a.stats.frames_from_host == 0
    finally:
        bus.shutdown()


@pytest.mark.parametrize(("timing", "btr", "bitrate"), [
    (can.BitTiming(f_clock=8_000_000, brp=1, tseg1=5, tseg2=2, sjw=1), b"s0014", 1_000_000),
    (can.BitTiming(f_clock=8_000_000, brp=4, tseg1=13, tseg2=2, sjw=1), b"s031C", 125_000),
])
def test_python_can_btr_timing(adapter, timing, btr, bitrate):
    a, _ = adapter
    bus = can.Bus(interface="slcan", channel=a.path, timing=timing, sleep_after_open=0)
    try:
        assert commands(a, 4) == [(b"C", BEL), (btr, OK), (b"O", OK), (b"O", BEL)]   # no empty line here
        assert a.bitrate == bitrate
    finally:
        bus.shutdown()


def test_python_can_version_and_serial(make_adapter):
    a, _ = make_adapter(hw_version=10, sw_version=13, serial_number="A1B2")
    bus = python_can(a.path)
    try:
        assert bus.get_version(2.0) == (10, 13)
        assert bus.get_serial_number(2.0) == "A1B2"
    finally:
        bus.shutdown()


HOST_FRAMES = [
    can.Message(arbitration_id=0x000, data=b"", is_extended_id=False),
    *[can.Message(arbitration_id=0x600 + n, data=bytes(range(0xA0, 0xA0 + n)), is_extended_id=False)
      for n in range(1, 9)],
    can.Message(arbitration_id=0x7FF, data=b"\xff" * 8, is_extended_id=False),
    can.Message(arbitration_id=0x1ABCDEF0, data=b"\x01\x02\x03", is_extended_id=True),
    can.Message(arbitration_id=0x00000001, data=b"", is_extended_id=True),
    can.Message(arbitration_id=0x701, is_extended_id=False, is_remote_frame=True, dlc=1),
    can.Message(arbitration_id=0x1FFFFFFF, is_extended_id=True, is_remote_frame=True, dlc=8),
]


def test_host_frames_reach_on_frame(adapter):
    a, node = adapter
    bus = python_can(a.path)
    try:
        wait_for(lambda: a.is_open)
        for msg in HOST_FRAMES:
            bus.send(msg)
        got = [node.rx.get(timeout=2.0) for _ in HOST_FRAMES]
    finally:
        bus.shutdown()
    for msg, (frame, _, _) in zip(HOST_FRAMES, got, strict=True):
        assert frame.id == msg.arbitration_id
        assert frame.extended == msg.is_extended_id
        assert frame.remote == msg.is_remote_frame
        assert frame.length == msg.dlc
        assert frame.data == (b"" if msg.is_remote_frame else bytes(msg.data))
    assert a.stats.frames_from_host == len(HOST_FRAMES)
    # each frame reaches the bus side once its last bit is on the wire, one wire time after the last
    for (_, t_prev, _), (frame, t, called) in itertools.pairwise(got):
        assert t - t_prev >= frame_bits(frame) / 1e6 - 1e-9
        assert called >= t
    assert node.rx.empty()


def test_host_burst_is_paced_and_lossless(adapter):
    """1000 frames written as fast as python-can can: the adapter holds back (stops reading the pty
    past TX_QUEUE frames) instead of dropping, and the bus side sees them one wire time apart."""
    a, node = adapter
    bus = python_can(a.path)
    try:
        wait_for(lambda: a.is_open)
        t0 = time.monotonic()
        for i in range(1000):
            bus.send(can.Message(arbitration_id=0x200 + (i & 0xFF), data=i.to_bytes(8, "big"), is_extended_id=False))
        got = [node.rx.get(timeout=2.0) for _ in range(1000)]
    finally:
        bus.shutdown()
    assert [int.from_bytes(f.data, "big") for f, _, _ in got] == list(range(1000))
    assert got[-1][1] - t0 >= 1000 * 135e-6
    assert all(t - t_prev >= 135e-6 - 1e-9 for (_, t_prev, _), (_, t, _) in itertools.pairwise(got))
    assert a.stats.frames_from_host == 1000 and a.stats.errors == 2     # only python-can's first C and second O


def bus_frame(i: int) -> CanFrame:
    """A varied frame: standard, extended and remote, 0..8 data bytes."""
    n = i % 9
    if i % 7 == 3:
        return CanFrame(i & 0x7FF, remote=True, dlc=n, extended=i % 2 == 0)
    if i % 3 == 1:
        return CanFrame((i * 7919) & 0x1FFF_FFFF, (i & 0xFF).to_bytes(1, "little") * n, extended=True)
    return CanFrame(i & 0x7FF, bytes((i + k) & 0xFF for k in range(n)))


def assert_message_is(msg: can.Message | None, frame: CanFrame) -> None:
    assert msg is not None
    assert (msg.arbitration_id, msg.is_extended_id, msg.is_remote_frame, msg.dlc) == (
        frame.id, frame.extended, frame.remote, frame.length)
    assert bytes(msg.data) == frame.data


def assert_frames_reach_python_can(a, count: int) -> None:
    """`count` frames the bus sends reach a python-can client on the adapter, in order, and nothing more."""
    bus = python_can(a.path)
    try:
        wait_for(lambda: a.is_open)
        frames = [bus_frame(i) for i in range(count)]
        for f in frames:
            a.send(f)
        for f in frames:
            assert_message_is(bus.recv(2.0), f)
        assert bus.recv(0.05) is None
    finally:
        bus.shutdown()


def test_bus_frames_reach_python_can_in_order_without_loss(adapter):
    a, _ = adapter
    assert_frames_reach_python_can(a, 1500)
    s = a.stats
    assert (s.frames_to_host, s.dropped) == (1500, 0)


def test_send_is_thread_safe(adapter, raw):
    a, _ = adapter
    raw.cmd(b"S8")
    raw.cmd(b"O")
    per_thread = 400

    def produce(k: int) -> None:
        for i in range(per_thread):
            a.send(CanFrame(0x100 + k, i.to_bytes(2, "big")))

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = [line for line, _ in raw.lines(4 * per_thread)]
    seen: dict[int, list[int]] = {k: [] for k in range(4)}
    for line in lines:
        f = parse_frame(line[:-1])
        seen[f.id - 0x100].append(int.from_bytes(f.data, "big"))
    assert all(v == list(range(per_thread)) for v in seen.values())


@pytest.mark.parametrize("bitrate", [1_000_000, 125_000])
def test_bus_frames_are_paced_at_the_bitrate(adapter, bitrate):
    a, _ = adapter
    bus = python_can(a.path, bitrate=bitrate)
    try:
        wait_for(lambda: a.is_open)
        frames = [CanFrame(0x181, bytes([i]) * 8) for i in range(100)]
        wire = sum(frame_bits(f) for f in frames) / bitrate       # 13.5 ms at 1 Mbit/s, 108 ms at 125 kbit/s
        t0 = time.monotonic()
        for f in frames:
            a.send(f)
        for f in frames:
            assert_message_is(bus.recv(2.0), f)
        elapsed = time.monotonic() - t0
    finally:
        bus.shutdown()
    assert wire <= elapsed < wire + 1.5


@pytest.mark.parametrize("code", [8, 4])
def test_each_frame_arrives_no_earlier_than_the_wire_allows(adapter, raw, code):
    a, _ = adapter
    assert raw.cmd(f"S{code}".encode()) == OK
    assert raw.cmd(b"O") == OK
    bit_s = 1.0 / BITRATES[code]
    frames = [CanFrame(0x181, bytes([i]) * 8) for i in range(100)]
    t0 = time.monotonic()
    for f in frames:
        a.send(f)
    got = raw.lines(len(frames))
    for i, (line, seen) in enumerate(got):
        assert line == encode_frame(frames[i])
        assert seen - t0 >= (i + 1) * 135 * bit_s
    assert got[-1][1] - t0 < 100 * 135 * bit_s + 0.5     # 13.5 ms at S8, 108 ms at S4: generous bound


def test_an_answer_is_due_one_wire_time_after_the_frame_it_answers(make_adapter):
    """A node that takes 8 ms to compute its answer and sends it with `ready` = the end of the request: at
    10 kbit/s the 8-byte answer spends 13.5 ms on the wire, so the host sees it one wire time after the
    request ended (never earlier), not compute time + wire time (21.5 ms) after."""
    ends: queue.Queue[float] = queue.Queue()
    answer = CanFrame(0x181, bytes(8))
    adapter: list[SlcanAdapter] = []

    def on_frame(frame: CanFrame, t: float) -> None:
        time.sleep(0.008)
        adapter[0].send(answer, ready=t)
        ends.put(t)

    a, _ = make_adapter(on_frame)
    adapter.append(a)
    host = RawHost(a.path)
    try:
        assert host.cmd(b"S0") == OK
        assert host.cmd(b"O") == OK
        delays = []
        for _ in range(5):
            assert host.cmd(b"t2000") == b"z\r"
            line, seen = host.lines(1)[0]
            assert line == encode_frame(answer)
            delays.append(seen - ends.get(timeout=2.0))
    finally:
        host.close()
    wire = frame_bits(answer) / 10_000
    assert min(delays) >= wire - 1e-4
    assert statistics.median(delays) < wire + 0.006


# ------------------------------------------------------------------------------------------ raw Lawicel


def test_bitrate_codes_and_refusals(adapter, raw):
    a, _ = adapter
    for code, rate in BITRATES.items():
        assert raw.cmd(f"S{code}".encode()) == OK
        assert a.bitrate == rate
    for bad in (b"S9", b"SA", b"S", b"S10", b"s12", b"sZZZZ", b"s0000F"):
        assert raw.cmd(bad) == BEL, bad
    assert a.bitrate == 1_000_000
    assert raw.cmd(b"s031C") == OK and a.bitrate == 125_000
    assert raw.cmd(b"O") == OK
    assert raw.cmd(b"S8") == BEL and raw.cmd(b"s0014") == BEL   # no bitrate change on an open channel
    assert a.bitrate == 125_000


def test_open_requires_a_bitrate_and_close_an_open_channel(adapter, raw):
    a, _ = adapter
    assert raw.cmd(b"O") == BEL and not a.is_open
    assert raw.cmd(b"C") == BEL
    assert raw.cmd(b"S6") == OK
    assert raw.cmd(b"O") == OK and a.is_open
    assert raw.cmd(b"O") == BEL and raw.cmd(b"L") == BEL
    assert raw.cmd(b"C") == OK and not a.is_open


def test_version_serial_and_status_flags(adapter, raw):
    assert raw.cmd(b"V") == b"V0100\r"
    assert raw.cmd(b"v") == b"v0100\r"
    assert raw.cmd(b"N") == b"NSH01\r"
    assert raw.cmd(b"F") == BEL                          # only on an open channel
    raw.cmd(b"S8")
    raw.cmd(b"O")
    assert raw.cmd(b"F") == b"F00\r"
    assert raw.cmd(b"V") == b"V0100\r"                   # also while open


def test_frame_while_closed_is_refused(adapter, raw):
    a, node = adapter
    assert raw.cmd(b"t1232BEEF") == BEL
    raw.cmd(b"S8")
    assert raw.cmd(b"t1232BEEF") == BEL                  # bitrate set, still closed
    raw.cmd(b"O")
    assert raw.cmd(b"t1232BEEF") == b"z\r"
    assert node.get() == CanFrame(0x123, b"\xbe\xef")
    raw.cmd(b"C")
    assert raw.cmd(b"T1234567800") == BEL
    assert node.rx.empty() and a.stats.frames_from_host == 1


def test_transmit_acks(adapter, raw):
    _, node = adapter
    raw.cmd(b"S8")
    raw.cmd(b"O")
    assert raw.cmd(b"t0000") == b"z\r"
    assert raw.cmd(b"T1FFFFFFF811223344556677889") == BEL   # 9 data bytes: malformed
    assert raw.cmd(b"T1FFFFFFF81122334455667788") == b"Z\r"
    assert raw.cmd(b"r7018") == b"z\r"
    assert raw.cmd(b"R000000010") == b"Z\r"
    assert [node.get() for _ in range(4)] == [
        CanFrame(0, b""), CanFrame(0x1FFFFFFF, bytes.fromhex("1122334455667788"), extended=True),
        CanFrame(0x701, remote=True, dlc=8), CanFrame(1, extended=True, remote=True, dlc=0)]


GARBAGE = [b"hello", b"t12", b"t123", b"t12381122", b"t8000", b"t1239112233445566778899", b"t12G0",
           b"t1231AAB", b"T12345678", b"T200000000", b"r1231AA", b"R1234567", b"\xff\xfe", b"X" * 100,
           b"O1", b"C0", b"VV", b"Z2", b"d1231AA", b"Y2", b"M00000000", b"t 1231AA"]


def test_garbage_gets_bel_and_the_next_frame_still_works(adapter, raw):
    a, node = adapter
    raw.cmd(b"S8")
    raw.cmd(b"O")
    for line in GARBAGE:
        assert raw.cmd(line) == BEL, line
    assert a.stats.errors == len(GARBAGE)
    assert raw.cmd(b"t1232BEEF") == b"z\r"
    assert node.get() == CanFrame(0x123, b"\xbe\xef")
    assert node.rx.empty() and a.is_open
    # CRLF from a terminal works too
    raw.ser.write(b"t4560\r\n")
    assert raw.reply() == b"z\r"
    assert node.get() == CanFrame(0x456, b"")


def test_a_runaway_line_is_not_buffered(adapter, raw):
    a, node = adapter
    raw.cmd(b"S8")
    raw.cmd(b"O")
    raw.ser.write(b"7" * 200_000)                       # no CR: a host gone mad, or the wrong protocol
    wait_for(lambda: len(a._in) == 0 and a._line_overflow)   # (white box) nothing of it kept
    assert raw.cmd(b"t1230") == BEL                     # the runaway line ends here: one BEL for all of it
    assert raw.cmd(b"t1230") == b"z\r"
    assert node.get() == CanFrame(0x123, b"")


def test_garbage_from_python_can_host(adapter):
    a, node = adapter
    bus = python_can(a.path)
    try:
        wait_for(lambda: a.is_open)
        bus.serialPortOrig.write(b"\x00\x01garbage\rt99\r")   # what a confused host might write
        bus.send(can.Message(arbitration_id=0x321, data=b"\x05", is_extended_id=False))
        assert node.get() == CanFrame(0x321, b"\x05")
        a.send(CanFrame(0x322, b"\x06"))
        assert_message_is(bus.recv(2.0), CanFrame(0x322, b"\x06"))
    finally:
        bus.shutdown()
    assert a.stats.errors == 4                          # C and second O of python-can, the two garbage lines


def test_listen_only(adapter):
    a, node = adapter
    bus = python_can(a.path, listen_only=True)
    try:
        assert commands(a, 5)[-2:] == [(b"L", OK), (b"L", BEL)]
        assert a.is_open and a.listen_only
        bus.send(can.Message(arbitration_id=0x10, data=b"\x01", is_extended_id=False))
        wait_for(lambda: a.stats.errors == 3)              # C on the closed channel, the second L, the frame
        a.send(CanFrame(0x11, b"\x02"))
        assert_message_is(bus.recv(2.0), CanFrame(0x11, b"\x02"))
    finally:
        bus.shutdown()
    assert node.rx.empty() and a.stats.frames_from_host == 0


def test_timestamps(adapter, raw):
    a, _ = adapter
    assert raw.cmd(b"Z1") == OK
    raw.cmd(b"S8")
    raw.cmd(b"O")
    assert raw.cmd(b"Z0") == BEL                          # only on a closed channel
    a.send(CanFrame(0x123, b"\xbe\xef"))
    a.send(CanFrame(0x1ABCDEF, b"", extended=True))
    (first, _), (second, _) = raw.lines(2)
    m1 = re.fullmatch(rb"t1232BEEF([0-9A-F]{4})\r", first)
    m2 = re.fullmatch(rb"T01ABCDEF0([0-9A-F]{4})\r", second)
    assert m1 and m2
    ms1, ms2 = int(m1[1], 16), int(m2[1], 16)
    assert 0 <= ms1 <= ms2 < 0xEA60 and ms2 - ms1 <= 50
    raw.cmd(b"C")
    raw.close()
    # python-can slices the data by the DLC, so timestamped frames parse the same
    assert_frames_reach_python_can(a, 30)


def test_frames_sent_while_closed_are_dropped(adapter):
    a, _ = adapter
    a.send(CanFrame(0x1, b"\x01"))
    wait_for(lambda: a.stats.dropped == 1)
    bus = python_can(a.path)
    try:
        wait_for(lambda: a.is_open)
        assert bus.recv(0.1) is None
        a.send(CanFrame(0x2, b"\x02"))
        assert_message_is(bus.recv(2.0), CanFrame(0x2, b"\x02"))
    finally:
        bus.shutdown()
    assert a.stats.frames_to_host == 1


def test_a_host_that_stops_reading_loses_frames_not_the_adapter(make_adapter):
    a, _ = make_adapter()
    a.OUT_LIMIT = 512
    host = RawHost(a.path)
    try:
        host.cmd(b"S8")
        host.cmd(b"O")
        n = 2000                                        # 44 kB: more than the pty and our buffer hold
        for i in range(n):
            a.send(CanFrame(0x200, i.to_bytes(8, "big")))
        wait_for(lambda: a.stats.frames_to_host + a.stats.dropped == n, timeout=5.0)
        assert a.stats.dropped > 0 and a.is_alive()
        received = host.drain().split(b"\r")[:-1]
        assert len(received) == a.stats.frames_to_host
        values = [int.from_bytes(parse_frame(line).data, "big") for line in received]
        assert values == sorted(values) and values[0] == 0          # in order, the oldest kept
        assert host.cmd(b"F") == b"F01\r"                # receive FIFO full, cleared by reading
        assert host.cmd(b"F") == b"F00\r"
        a.send(CanFrame(0x201, b""))
        assert host.lines(1)[0][0] == b"t2010\r"
    finally:
        host.close()


def test_close_discards_what_the_host_has_not_taken(adapter, raw):
    a, _ = adapter
    raw.cmd(b"S8")
    raw.cmd(b"O")
    n = 3000                                           # 66 kB: ~20 kB fit the pty, the rest waits in the adapter
    for i in range(n):
        a.send(CanFrame(0x200, i.to_bytes(8, "big")))
    wait_for(lambda: a.stats.frames_to_host == n)
    raw.ser.write(b"C\r")
    wait_for(lambda: not a.is_open)
    got = raw.drain()
    assert got.endswith(b"\r") and 0 < got.count(b"\r") < n // 2   # what the pty held, then the reply to C


def test_host_frames_beyond_the_tx_queue_wait_in_the_pty(make_adapter):
    """Past TX_QUEUE frames waiting for the wire, the adapter stops reading: the host's later frames
    (and their acks) wait, as a USB device NAKs, instead of piling up in the adapter."""
    a, node = make_adapter()
    host = RawHost(a.path)
    try:
        host.cmd(b"S2")                                 # 50 kbit/s: 2.7 ms per 8-byte frame
        host.cmd(b"O")
        n = 100
        frame_s = frame_bits(CanFrame(0x300, bytes(8))) / 50_000
        t0 = time.monotonic()
        host.ser.write(b"".join(encode_frame(CanFrame(0x300, i.to_bytes(8, "big"))) for i in range(n)))
        time.sleep(0.03)                                # ~11 frames leave the wire meanwhile
        early = host.ser.read(host.ser.in_waiting).count(b"z\r")
        deadline = time.monotonic() + 10.0              # (a loaded host may not have run the adapter yet)
        while early < a.TX_QUEUE and time.monotonic() < deadline:
            time.sleep(0.005)
            early += host.ser.read(host.ser.in_waiting).count(b"z\r")
        # beyond the queue, one ack per frame that left the wire since the write (however late this thread read)
        left = (time.monotonic() - t0) / frame_s
        assert a.TX_QUEUE <= early <= a.TX_QUEUE + left + 9, (early, left)
        got = [node.get() for _ in range(n)]
        assert [int.from_bytes(f.data, "big") for f in got] == list(range(n))
        assert early + host.drain(quiet_s=0.05).count(b"z\r") == n
    finally:
        host.close()


def test_a_frame_that_raises_in_on_frame_is_isolated(make_adapter, caplog):
    """A frame whose handling raises stays with that frame: counted, logged once at WARNING with the line, and the
    adapter serves the next frame."""
    seen: list[CanFrame] = []

    def fails_on_id_1(frame: CanFrame, t: float) -> None:
        seen.append(frame)
        if frame.id == 1:
            raise RuntimeError("node bug")

    a, _ = make_adapter(on_frame=fails_on_id_1)
    host = RawHost(a.path)
    try:
        host.cmd(b"S8")
        host.cmd(b"O")
        for line in (b"t0010", b"t0010", b"t0021AB"):
            assert host.cmd(line) == b"z\r"
        deadline = time.monotonic() + 2.0
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert [f.id for f in seen] == [1, 1, 2] and seen[2].data == b"\xab"
        assert a.is_alive() and a.error is None and a.errors_isolated == 2
        assert host.cmd(b"V") == b"V0100\r"
    finally:
        host.close()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "node bug" in r.getMessage()]
    assert len(warned) == 1 and "'t0010\\r'" in warned[0], warned


def test_a_timer_crash_ends_the_adapter_and_is_kept_in_error(tmp_path):
    """What no input causes (the owner's periodic work, run after every wake-up) is not isolated: the thread ends,
    `error` says why (the daemon stops on it)."""
    a = SlcanAdapter(PtyPort(tmp_path / "ttyCAN"), lambda frame, t: None)

    def boom(now: float) -> float | None:
        raise RuntimeError("owner bug")

    a.timer = boom
    a.start()
    host = RawHost(a.path)
    try:
        host.ser.write(b"V\r")     # a wake-up
        a.join(2.0)
        assert not a.is_alive()
        assert isinstance(a.error, RuntimeError) and a.errors_isolated == 0
    finally:
        host.close()
        a.stop()


def test_stop_closes_everything(make_adapter):
    a, _ = make_adapter()
    path = a.path
    assert os.path.islink(path)
    a.stop()
    assert not a.is_alive() and a.error is None
    assert not os.path.lexists(path)
    a.send(CanFrame(1, b""))                             # after stop: counted, never raises
    assert a.stats.dropped == 1
    a.stop()                                             # idempotent


def test_python_can_config_from_environment(adapter, monkeypatch):
    a, node = adapter
    monkeypatch.setenv("CAN_INTERFACE", "slcan")
    monkeypatch.setenv("CAN_CHANNEL", a.path)
    monkeypatch.setenv("CAN_BITRATE", "500000")
    monkeypatch.setenv("CAN_CONFIG", '{"sleep_after_open": 0}')
    bus = can.Bus()
    try:
        wait_for(lambda: a.is_open)
        assert a.bitrate == 500_000
        bus.send(can.Message(arbitration_id=0x601, data=b"\x40\x00\x10\x00\x00\x00\x00\x00", is_extended_id=False))
        assert node.get() == CanFrame(0x601, b"\x40\x00\x10\x00\x00\x00\x00\x00")
    finally:
        bus.shutdown()


def test_a_restarted_host_gets_at_most_the_adapter_buffer_of_old_frames(adapter):
    """A controller that dies with the channel open leaves unread frames behind. Its successor
    (pyserial flushes the pty on open) must get no more of them than a USB adapter would buffer,
    not the whole backlog (stale SDO replies, old TPDOs)."""
    a, _ = adapter
    a.OUT_LIMIT = 4096
    first = RawHost(a.path)
    first.cmd(b"S8")
    first.cmd(b"O")
    n = 3000                                           # 66 kB: more than the pty and our buffer hold
    for i in range(n):
        a.send(CanFrame(0x581, i.to_bytes(8, "big")))
    wait_for(lambda: a.stats.frames_to_host + a.stats.dropped == n)
    assert a.stats.dropped > 0
    first.close()                                      # killed: no C, nothing read
    second = RawHost(a.path)
    try:
        stale = second.drain()
        assert 0 < len(stale) <= a.OUT_LIMIT + 22
        assert second.cmd(b"C") == OK and not a.is_open
        assert second.drain() == b""
    finally:
        second.close()
