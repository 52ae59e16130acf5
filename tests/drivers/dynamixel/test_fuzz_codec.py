"""Coverage-guided fuzz (hypothesis) of the Dynamixel receive side in-process: the resynchronising Parser, the
instructions' parameter decoders (C, through their Python entry points) and DynamixelBus.handle with real servos.
Oracles: the e-manual's layouts (Protocol 2.0 §Instruction Packet ... §Instruction Details), written out here
independently of the decoders; the bus may answer anything a servo answers but never more bytes than the control
tables hold, never raises, and never isolates a failure (`errors_isolated` stays 0: isolation is for bugs)."""

from __future__ import annotations

import logging
import random
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drivers.emulated.dynamixel import bus as bus_module
from drivers.emulated.dynamixel import codec
from drivers.emulated.dynamixel.bus import DynamixelBus
from drivers.emulated.dynamixel.protocol import (
    HEADER,
    MAX_WIRE_LEN,
    CorruptPacket,
    ErrorCode,
    Instruction,
    Packet,
    Parser,
    ProtocolError,
    encode_instruction,
    unstuff,
)
from firmware_models.dynamixel.control_table import load_model
from firmware_models.dynamixel.servo import DynamixelServo
from hil.joint import KernelJoint
from hil.kernel import Kernel
from hil.params.catalog import entry
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

# each property checks >= 10^4 inputs in the normal run: FUZZ_EXAMPLES examples, each the drawn input plus VARIANTS
# random ones seeded by the example (hypothesis's own example generation is the slow part); 10^5 examples under soak
FUZZ_EXAMPLES = 1_000
SOAK_EXAMPLES = 100_000
VARIANTS = 9   # random inputs per example besides the drawn one
_fuzz = settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_soak = settings(_fuzz, max_examples=SOAK_EXAMPLES)

# byte soup biased towards the framing: headers, stuffing, LEN bytes that claim short and long packets
_tokens = st.one_of(
    st.binary(min_size=1, max_size=12),
    st.just(HEADER), st.just(b"\xff\xff\xfd\xfd"), st.just(b"\xff"), st.just(b"\xff\xff"), st.just(b"\xff\xff\xfd"),
    st.builds(lambda i, n: HEADER + bytes([i]) + struct.pack("<H", n), st.integers(0, 255), st.integers(0, 0xFFFF)),
)
noise = st.lists(_tokens, max_size=24).map(b"".join)


def random_noise(rng: random.Random) -> bytes:
    """What `noise` draws, from a seeded generator."""
    out = []
    for _ in range(rng.randint(0, 24)):
        k = rng.randrange(4)
        if k == 0:
            out.append(rng.randbytes(rng.randint(1, 12)))
        elif k == 1:
            out.append(rng.choice([HEADER, b"\xff\xff\xfd\xfd", b"\xff", b"\xff\xff", b"\xff\xff\xfd"]))
        else:
            out.append(HEADER + bytes([rng.randrange(256)]) + struct.pack("<H", rng.choice(
                [rng.randint(0, 8), rng.randint(0, 300), rng.randint(0, 0xFFFF)])))
    return b"".join(out)


def random_probe(rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        return encode_instruction(rng.randint(0, 252), Instruction.PING)
    return encode_instruction(rng.randint(0, 252), Instruction.READ,
                              struct.pack("<HH", rng.randint(0, 0xFFFF), rng.randint(1, 0xFFFF)))

# the probe: a Read or Ping a controller sends after the line was silent
probes = st.one_of(
    st.builds(lambda i: encode_instruction(i, Instruction.PING), st.integers(0, 252)),
    st.builds(lambda i, a, n: encode_instruction(i, Instruction.READ, struct.pack("<HH", a, n)),
              st.integers(0, 252), st.integers(0, 0xFFFF), st.integers(1, 0xFFFF)),
)


# ------------------------------------------------------------------------------------------------ Parser
def _feed_all(parser: Parser, chunks: list[tuple[bytes, float]]) -> list:
    out, t = [], 0.0
    for data, gap in chunks:
        t += gap
        got = parser.feed(data, t)
        for item in got:
            assert isinstance(item, Packet | CorruptPacket)
        assert parser.buffered <= MAX_WIRE_LEN
        out += got
    return out


def _stale_then_probe(garbage: bytes, probe: bytes, split: int) -> None:
    parser = Parser()
    stream = garbage + probe
    cut = len(garbage) + (len(probe) * split) // 4
    chunks = [(stream[:cut], 0.0), (stream[cut:], 1e-4)] if 0 < cut < len(stream) else [(stream, 0.0)]
    got = _feed_all(parser, chunks)
    expected = (probe[4], probe[7], unstuff(probe[8:-2]))
    assert got and isinstance(got[-1], Packet), f"{stream.hex()}: {got}"
    assert (got[-1].id, got[-1].instruction, got[-1].params) == expected, f"{stream.hex()}: {got}"
    assert parser.buffered == 0


@_fuzz
@given(noise, probes, st.integers(0, 3), st.randoms(use_true_random=False))
def test_a_packet_after_a_stale_partial_is_understood_even_when_read_together(garbage, probe, split, rng):
    """A reader that was late reads the stale bytes and the packet after the silence in one go (or cut
    anywhere): the packet is still understood, as a servo that saw the e-manual's inter-byte gap understands it."""
    _stale_then_probe(garbage, probe, split)
    for _ in range(VARIANTS):
        _stale_then_probe(random_noise(rng), random_probe(rng), rng.randint(0, 3))


def _gap_then_probe(chunks: list[tuple[bytes, float]], probe: bytes) -> None:
    parser = Parser()
    t = sum(g for _, g in chunks)
    _feed_all(parser, chunks)
    got = parser.feed(probe, t + 2e-3)
    assert [(p.id, p.instruction, p.params) for p in got] == [(probe[4], probe[7], unstuff(probe[8:-2]))]


@_fuzz
@given(st.lists(st.tuples(noise, st.floats(0.0, 4e-3)), max_size=4), probes, st.randoms(use_true_random=False))
def test_a_packet_after_the_inter_byte_timeout_is_understood(chunks, probe, rng):
    """After more than 1.5 ms of silence (Protocol 2.0 §Instruction Packet) a clean packet is understood,
    whatever came before."""
    _gap_then_probe(chunks, probe)
    for _ in range(VARIANTS):
        _gap_then_probe([(random_noise(rng), rng.uniform(0.0, 4e-3)) for _ in range(rng.randint(0, 4))],
                        random_probe(rng))


# ------------------------------------------------------------------------------------------------ decoders
def _oracle_read(p: bytes):
    if len(p) != 4:
        return None
    address, length = struct.unpack("<HH", p)
    return None if length == 0 else (address, length)


def _oracle_sync_read(p: bytes):
    if len(p) < 5:
        return None
    address, length = struct.unpack("<HH", p[:4])
    return None if length == 0 else (address, length, list(p[4:]))


def _oracle_bulk_read(p: bytes):
    if not p or len(p) % 5:
        return None
    out, seen = [], set()
    for k in range(0, len(p), 5):
        dev, address, length = struct.unpack("<BHH", p[k:k + 5])
        if dev in seen or length == 0:
            return None
        seen.add(dev)
        out.append((dev, address, length))
    return out


def _decoded(fn, params):
    try:
        return fn(params)
    except ProtocolError:
        return None


_param_bytes = st.one_of(st.binary(max_size=40), st.lists(st.sampled_from([0, 1, 4, 0xFF, 0xFD, 0x84]),
                                                          max_size=40).map(bytes))


def _random_params(rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        return rng.randbytes(rng.randint(0, 40))
    return bytes(rng.choice([0, 1, 4, 0xFF, 0xFD, 0x84]) for _ in range(rng.randint(0, 40)))


@_fuzz
@given(_param_bytes, st.randoms(use_true_random=False))
def test_read_decoders_follow_the_emanual_layout(params, rng):
    for p in [params] + [_random_params(rng) for _ in range(VARIANTS)]:
        _check_read_decoders(p)


def _check_read_decoders(params: bytes) -> None:
    got = _decoded(codec.decode_read, params)
    assert (None if got is None else tuple(got)) == _oracle_read(params)
    got = _decoded(codec.decode_sync_read, params)
    assert (None if got is None else (got[0], got[1], list(got[2]))) == _oracle_sync_read(params)
    got = _decoded(codec.decode_bulk_read, params)
    assert (None if got is None else [tuple(x) for x in got]) == _oracle_bulk_read(params)


@_fuzz
@given(_param_bytes, st.randoms(use_true_random=False))
def test_write_decoders_raise_only_protocol_errors(params, rng):
    for p in [params] + [_random_params(rng) for _ in range(VARIANTS)]:
        _check_write_decoders(p)


def _check_write_decoders(params: bytes) -> None:
    for fn in (codec.decode_write, codec.decode_sync_write, codec.decode_bulk_write):
        got = _decoded(fn, params)
        if got is None:
            continue
        if fn is codec.decode_write:
            assert (got[0], bytes(got[1])) == (params[0] | params[1] << 8, params[2:])
        elif fn is codec.decode_sync_write:
            address, length, items = got
            assert (address, length) == struct.unpack("<HH", params[:4])
            assert sum(1 + len(d) for _, d in items) == len(params) - 4
            assert all(len(d) == length for _, d in items)
        else:
            assert sum(5 + len(d) for _, _, d in got) == len(params)


# ------------------------------------------------------------------------------------------------ bus
def _servo(catalog: str, sid: int, kernel: Kernel, i: int) -> DynamixelServo:
    kernel.set_params(i, kernel_params(entry(catalog).actuator(), LoadConfig(mass=0.3, length=0.1),
                                       EncoderConfig(), FaultConfig(), "euler"))
    return DynamixelServo(load_model(catalog), KernelJoint(kernel, i), {"ID": sid, "Baud Rate": 3,
                                                                         "Return Delay Time": 0})


@pytest.fixture(scope="module")
def bus() -> DynamixelBus:
    """An MX-64(2.0) (ID 1, no fast reads) and an XM430-W350 (ID 3) on one bus."""
    kernel = Kernel(2, 1e-3)
    return DynamixelBus([_servo("mx64", 1, kernel, 0), _servo("xm430_w350", 3, kernel, 1)])


def _table_max(bus: DynamixelBus) -> int:
    return max(len(s.table.data) for s in bus.servos)


READS = (Instruction.READ, Instruction.SYNC_READ, Instruction.FAST_SYNC_READ, Instruction.BULK_READ,
         Instruction.FAST_BULK_READ, Instruction.PING)
_lengths = st.one_of(st.integers(1, 16), st.integers(0, 0xFFFF), st.sampled_from([0xFFFF, 65520, 1000, 700]))
_read_params = st.one_of(
    st.builds(lambda a, n, ids: struct.pack("<HH", a, n) + bytes(ids), st.integers(0, 0xFFFF), _lengths,
              st.lists(st.sampled_from([1, 3, 7, 0xFE]), max_size=4)),
    st.builds(lambda rows: b"".join(struct.pack("<BHH", *r) for r in rows),
              st.lists(st.tuples(st.sampled_from([1, 3, 9]), st.integers(0, 0xFFFF), _lengths), max_size=3)),
    st.binary(max_size=20),
)


def _check_handled(bus: DynamixelBus, pid: int, ins: int, params: bytes) -> list:
    before = bus.errors_isolated
    replies = bus.handle(Packet(pid, ins, params, 10 + len(params)), None)
    assert bus.errors_isolated == before, f"isolated: {ins:#x} {params.hex()}"
    # never more than a control table holds: a status packet carries at most a whole table (stuffed: one FD per
    # FF FF FD, Protocol 2.0 §Packet Process) and its 11 bytes of framing; a Fast reply one unstuffed segment per
    # ID listed (§Fast Sync Read)
    table = _table_max(bus)
    listed = max(1, len(params) - 4 if ins == Instruction.FAST_SYNC_READ else len(params) // 5)
    for tx in replies:
        limit = 8 + listed * (table + 4) if tx.data[4] == 0xFE else 11 + table + table // 3
        assert len(tx.data) <= limit, f"{ins:#x} {params.hex()}: {len(tx.data)} bytes"
    return replies


def _random_read(rng: random.Random) -> tuple[int, int, bytes]:
    def length() -> int:
        return rng.choice([rng.randint(1, 16), rng.randint(0, 0xFFFF), 0xFFFF, 65520, 1000, 700])
    k = rng.randrange(3)
    if k == 0:
        params = struct.pack("<HH", rng.randint(0, 0xFFFF), length()) + bytes(
            rng.choice([1, 3, 7, 0xFE]) for _ in range(rng.randint(0, 4)))
    elif k == 1:
        params = b"".join(struct.pack("<BHH", rng.choice([1, 3, 9]), rng.randint(0, 0xFFFF), length())
                          for _ in range(rng.randint(0, 3)))
    else:
        params = rng.randbytes(rng.randint(0, 20))
    return rng.choice([1, 3, 0xFE, 7]), rng.choice(READS), params


@_fuzz
@given(st.sampled_from([1, 3, 0xFE, 7]), st.sampled_from(READS), _read_params, st.randoms(use_true_random=False))
def test_reads_never_answer_more_than_the_tables_hold(bus, pid, ins, params, rng):
    _check_handled(bus, pid, ins, params)
    for _ in range(VARIANTS):
        _check_handled(bus, *_random_read(rng))


@_fuzz
@given(st.sampled_from([1, 3, 0xFE]), st.integers(0, 255), st.binary(max_size=24))
def test_any_instruction_is_handled_without_isolation(bus, pid, ins, params):
    if ins in (Instruction.FACTORY_RESET, Instruction.REBOOT) or (ins == Instruction.WRITE and params[:1] in
                                                                   (b"\x07", b"\x08", b"\x0c")):
        return   # a new ID, baud rate or secondary ID changes who answers the next examples, not the property
    _check_handled(bus, pid, ins, params)
    for s in bus.servos:
        s.reboot()   # undo anything a write changed (torque, limits, indirect addresses)


def test_a_fast_read_of_65535_bytes_is_not_answered(bus):
    """15 bytes on the wire: a Fast Sync Read of 65 535 bytes from ID 3; no device can fill a segment longer than
    its control table, the combined packet is never completed (the controller times out), the bus lives."""
    wire = bytes.fromhex("ff ff fd 00 fe 08 00 8a 84 00 ff ff 03 a8 01")
    (packet,) = Parser().feed(wire, 0.0)
    assert _check_handled(bus, packet.id, packet.instruction, packet.params) == []
    for length in (65520, 1000):
        assert _check_handled(bus, 0xFE, Instruction.FAST_SYNC_READ, struct.pack("<HHB", 0, length, 3)) == []
        assert _check_handled(bus, 0xFE, Instruction.FAST_BULK_READ, struct.pack("<BHH", 3, 132, length)) == []
    # the bus still answers, and a Fast Sync Read that fits is answered with the 4 bytes asked for
    (tx,) = _check_handled(bus, 0xFE, Instruction.FAST_SYNC_READ, struct.pack("<HHB", 132, 4, 3))
    assert len(tx.data) == 8 + 2 + 4 + 2


@pytest.mark.parametrize("ins", [Instruction.READ, Instruction.SYNC_READ, Instruction.BULK_READ])
def test_reads_past_the_table_end_answer_access_error_without_data(bus, ins):
    """e-manual "Status Packet": Access Error for a read of an address that is not defined, no parameters
    (Protocol 2.0 §Status Packet)."""
    if ins == Instruction.READ:
        pid, params = 3, struct.pack("<HH", 0, 0xFFFF)
    elif ins == Instruction.SYNC_READ:
        pid, params = 0xFE, struct.pack("<HHBB", 132, 65520, 1, 3)
    else:
        pid, params = 0xFE, struct.pack("<BHHBHH", 1, 0, 0xFFFF, 3, 600, 200)
    replies = _check_handled(bus, pid, ins, params)
    assert [(tx.data[4], tx.data[8] & 0x7F, len(tx.data)) for tx in replies] == \
        [(sid, ErrorCode.ACCESS, 11) for sid in ((3,) if ins == Instruction.READ else (1, 3))]


def test_a_failure_inside_one_packet_is_isolated(bus, monkeypatch, caplog):
    """Whatever a packet raises stays with it: no answer, counted, one WARNING line with its bytes; the next
    packet is served. (The failure is injected in `encode_fast_status`, which raises on an oversized reply.)"""
    def too_long(segments):
        raise ValueError("packet too long")

    fast = Packet(0xFE, Instruction.FAST_SYNC_READ, struct.pack("<HHB", 132, 4, 3), 15)
    monkeypatch.setattr(bus_module, "encode_fast_status", too_long)
    before = bus.errors_isolated
    with caplog.at_level(logging.DEBUG, logger="servo-hil"):
        assert bus.handle(fast, None) == []
        assert bus.handle(fast, None) == []
    assert bus.errors_isolated == before + 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "ff ff fd 00 fe" in warnings[0] and "ValueError" in warnings[0], warnings
    monkeypatch.undo()
    (tx,) = bus.handle(Packet(3, Instruction.PING, b"", 10), None)
    assert tx.data[4] == 3 and tx.data[8] == 0


@pytest.mark.soak
@_soak
@given(noise, probes, st.integers(0, 3))
def test_parser_soak(garbage, probe, split):
    _stale_then_probe(garbage, probe, split)


@pytest.mark.soak
@_soak
@given(st.sampled_from([1, 3, 0xFE, 7]), st.sampled_from(READS), _read_params)
def test_bus_reads_soak(bus, pid, ins, params):
    _check_handled(bus, pid, ins, params)


def test_the_bus_thread_serves_on_after_an_isolated_failure(tmp_path, monkeypatch):
    """The same injected failure under the server's thread on a real pty: the Fast Sync Read gets no answer, the
    Ping after it does, the thread is still alive and `errors_isolated` (what `status` reports) counts one."""
    import serial

    from drivers.emulated.dynamixel.server import DynamixelServer
    from drivers.wire.ports import PtyPort

    kernel = Kernel(1, 1e-3)
    server = DynamixelServer(DynamixelBus([_servo("xm430_w350", 3, kernel, 0)]), PtyPort(tmp_path / "tty"), fast=True)

    def too_long(segments):
        raise ValueError("packet too long")

    monkeypatch.setattr(bus_module, "encode_fast_status", too_long)
    server.start()
    client = serial.Serial(str(tmp_path / "tty"), 1_000_000, timeout=1.0)
    try:
        client.write(encode_instruction(0xFE, Instruction.FAST_SYNC_READ, struct.pack("<HHB", 132, 4, 3)))
        client.write(encode_instruction(3, Instruction.PING))
        reply = client.read(14)
        assert len(reply) == 14 and reply[4] == 3 and reply[7:9] == b"\x55\x00"
        assert server.errors_isolated == 1 and server.is_alive() and server.error is None
    finally:
        client.close()
        server.stop()


def test_the_bus_thread_drops_bytes_the_parser_raises_on_and_reads_on(tmp_path, monkeypatch, caplog):
    """Should the parser raise on some received bytes (a bug: the fuzz tests above find none), the thread drops them
    as line noise (no answer), counts them with the isolated packets, logs them once, and answers the next Ping."""
    import serial

    from drivers.emulated.dynamixel.protocol import Parser
    from drivers.emulated.dynamixel.server import DynamixelServer
    from drivers.wire.ports import PtyPort

    kernel = Kernel(1, 1e-3)
    server = DynamixelServer(DynamixelBus([_servo("xm430_w350", 3, kernel, 0)]), PtyPort(tmp_path / "tty"), fast=True)
    feed = Parser.feed
    poison = b"\xde\xad\xbe\xef"

    def planted(self, data, now):
        if poison in data:
            raise IndexError("planted in the parser")
        return feed(self, data, now)

    monkeypatch.setattr(Parser, "feed", planted)
    server.start()
    client = serial.Serial(str(tmp_path / "tty"), 1_000_000, timeout=1.0)
    try:
        for n in (1, 2):
            client.write(poison)
            deadline = time.monotonic() + 5.0
            while server.errors_isolated < n:   # each in a read of its own, apart from the Ping
                assert time.monotonic() < deadline, f"{server.errors_isolated} isolated, expected {n}"
                time.sleep(0.002)
        client.write(encode_instruction(3, Instruction.PING))
        reply = client.read(14)
        assert len(reply) == 14 and reply[4] == 3 and reply[7:9] == b"\x55\x00"
        assert server.errors_isolated == 2 and server.is_alive() and server.error is None
    finally:
        client.close()
        server.stop()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "bytes dropped (IndexError" in warned[0] and "de ad be ef" in warned[0], warned
