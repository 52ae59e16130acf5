"""Tests for the Protocol 2.0 codec (drivers/emulated/dynamixel/protocol.py).

Byte vectors are the e-manual's own examples (ROBOTIS e-manual "Protocol 2.0", Instruction Details; stored copy
ROBOTIS-GIT/emanual docs/en/dxl/protocol2.md) including the Fast Sync Read example (§Fast Sync Read) and the
"CRC Calculation" page.
Compatibility tests drive the real dynamixel-sdk 4.1.0 PacketHandler and Group* classes through an in-memory port.
"""

from __future__ import annotations

import contextlib
import itertools
import struct

import dynamixel_sdk as sdk
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drivers.emulated.dynamixel.protocol import (
    ALERT,
    BROADCAST_ID,
    HEADER,
    MAX_WIRE_LEN,
    CorruptPacket,
    ErrorCode,
    Instruction,
    Packet,
    Parser,
    ProtocolError,
    crc16,
    decode_bulk_read,
    decode_bulk_write,
    decode_read,
    decode_status,
    decode_sync_read,
    decode_sync_write,
    decode_write,
    encode_fast_status,
    encode_instruction,
    encode_status,
    stuff,
    unstuff,
)

H = bytes.fromhex


def parse_all(data: bytes, **kw) -> list[Packet | CorruptPacket]:
    return Parser(**kw).feed(data, 0.0)


def packet_of(wire: bytes) -> Packet:
    """The Packet a clean encoded instruction should parse to."""
    (p,) = parse_all(wire)
    assert isinstance(p, Packet)
    return p


def _crc16_bitwise(data: bytes, crc: int = 0) -> int:
    """Independent reference: plain MSB-first shift register, polynomial 0x8005 (e-manual "CRC Calculation")."""
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


# ------------------------------------------------------------------------------------------------ CRC


def test_crc_check_value():
    assert crc16(b"123456789") == 0xFEE8  # CRC-16/UMTS catalogue check value


def test_crc_emanual_ping():
    assert crc16(H("FF FF FD 00 01 03 00 01")) == 0x4E19  # sent as 19 4E


def test_crc_fast_sync_read_instruction():
    # Protocol 2.0 §Fast Sync Read example: ID FE, Present Position (132), 4 bytes, IDs 3, 7, 4 -> CRC 20 F2
    wire = encode_instruction(BROADCAST_ID, Instruction.FAST_SYNC_READ, bytes([132, 0, 4, 0, 3, 7, 4]))
    assert wire == H("FF FF FD 00 FE 0A 00 8A 84 00 04 00 03 07 04 20 F2")


@given(st.binary(max_size=300), st.binary(max_size=300), st.integers(0, 0xFFFF))
def test_crc_matches_bitwise_and_runs(a, b, init):
    assert crc16(a, init) == _crc16_bitwise(a, init)
    assert crc16(a + b) == crc16(b, crc16(a))


def test_crc_accepts_buffers_and_rejects_bad_init():
    data = bytes(range(37))
    assert crc16(bytearray(data)) == crc16(memoryview(data)) == _crc16_bitwise(data)
    assert crc16(b"") == 0
    assert crc16(b"\x00") == 0
    with pytest.raises(ValueError):
        crc16(b"x", 0x10000)
    with pytest.raises(ValueError):
        crc16(b"x", -1)


# ------------------------------------------------------------------------------------------------ e-manual vectors

# (builder, expected wire bytes) from the e-manual's Instruction Details examples (XM430-W210, model 1030 = 0x0406,
# firmware 38 = 0x26). The instruction packets also go through the parser and back.
EMANUAL_INSTRUCTIONS = [
    ("ping", 1, Instruction.PING, b"", "FF FF FD 00 01 03 00 01 19 4E"),
    ("broadcast ping", BROADCAST_ID, Instruction.PING, b"", "FF FF FD 00 FE 03 00 01 31 42"),
    ("read", 1, Instruction.READ, H("84 00 04 00"), "FF FF FD 00 01 07 00 02 84 00 04 00 1D 15"),
    ("write", 1, Instruction.WRITE, H("74 00 00 02 00 00"), "FF FF FD 00 01 09 00 03 74 00 00 02 00 00 CA 89"),
    ("reg write", 1, Instruction.REG_WRITE, H("68 00 C8 00 00 00"), "FF FF FD 00 01 09 00 04 68 00 C8 00 00 00 AE 8E"),
    ("action", 1, Instruction.ACTION, b"", "FF FF FD 00 01 03 00 05 02 CE"),
    ("factory reset", 1, Instruction.FACTORY_RESET, H("01"), "FF FF FD 00 01 04 00 06 01 A1 E6"),
    ("reboot", 1, Instruction.REBOOT, b"", "FF FF FD 00 01 03 00 08 2F 4E"),
    ("clear", 1, Instruction.CLEAR, H("01 44 58 4C 22"), "FF FF FD 00 01 08 00 10 01 44 58 4C 22 B1 DC"),
    (
        "sync read",
        BROADCAST_ID,
        Instruction.SYNC_READ,
        H("84 00 04 00 01 02"),
        "FF FF FD 00 FE 09 00 82 84 00 04 00 01 02 CE FA",
    ),
    (
        "sync write",
        BROADCAST_ID,
        Instruction.SYNC_WRITE,
        H("74 00 04 00 01 96 00 00 00 02 AA 00 00 00"),
        "FF FF FD 00 FE 11 00 83 74 00 04 00 01 96 00 00 00 02 AA 00 00 00 82 87",
    ),
    (
        "bulk read",
        BROADCAST_ID,
        Instruction.BULK_READ,
        H("01 90 00 02 00 02 92 00 01 00"),
        "FF FF FD 00 FE 0D 00 92 01 90 00 02 00 02 92 00 01 00 1A 05",
    ),
    (
        "bulk write",
        BROADCAST_ID,
        Instruction.BULK_WRITE,
        H("01 20 00 02 00 A0 00 02 1F 00 01 00 50"),
        "FF FF FD 00 FE 10 00 93 01 20 00 02 00 A0 00 02 1F 00 01 00 50 B7 68",
    ),
    (
        "fast sync read (e-manual example)",
        BROADCAST_ID,
        Instruction.FAST_SYNC_READ,
        H("84 00 04 00 03 07 04"),
        "FF FF FD 00 FE 0A 00 8A 84 00 04 00 03 07 04 20 F2",
    ),
]

EMANUAL_STATUS = [
    ("ping reply ID 1", 1, 0, H("06 04 26"), "FF FF FD 00 01 07 00 55 00 06 04 26 65 5D"),
    ("ping reply ID 2", 2, 0, H("06 04 26"), "FF FF FD 00 02 07 00 55 00 06 04 26 6F 6D"),
    ("read reply", 1, 0, H("A6 00 00 00"), "FF FF FD 00 01 08 00 55 00 A6 00 00 00 8C C0"),
    ("sync read reply ID 2", 2, 0, H("1F 08 00 00"), "FF FF FD 00 02 08 00 55 00 1F 08 00 00 BA BE"),
    ("empty reply", 1, 0, b"", "FF FF FD 00 01 04 00 55 00 A1 0C"),
    ("bulk read reply ID 1", 1, 0, H("77 00"), "FF FF FD 00 01 06 00 55 00 77 00 C3 69"),
    ("bulk read reply ID 2", 2, 0, H("24"), "FF FF FD 00 02 05 00 55 00 24 8B A9"),
]


@pytest.mark.parametrize(
    ("name", "id", "inst", "params", "wire"), EMANUAL_INSTRUCTIONS, ids=[v[0] for v in EMANUAL_INSTRUCTIONS]
)
def test_emanual_instruction_vectors(name, id, inst, params, wire):
    assert encode_instruction(id, inst, params) == H(wire), name
    p = packet_of(H(wire))
    assert (p.id, p.instruction, p.params, p.wire_len) == (id, inst, params, len(H(wire)))


@pytest.mark.parametrize(("name", "id", "error", "params", "wire"), EMANUAL_STATUS, ids=[v[0] for v in EMANUAL_STATUS])
def test_emanual_status_vectors(name, id, error, params, wire):
    assert encode_status(id, error, params) == H(wire), name
    (p,) = parse_all(H(wire), accept_status=True)
    assert p.id == id
    assert decode_status(p) == (error, params)


def test_emanual_ping_reply_is_xm430_w210():
    # The e-manual's ping example: ID 1, XM430-W210, Model Number 1030 (0x0406), firmware 38 (0x26).
    model, fw = 1030, 38
    assert encode_status(1, 0, struct.pack("<HB", model, fw)) == H("FF FF FD 00 01 07 00 55 00 06 04 26 65 5D")


def test_fast_sync_read_reply_emanual_example():
    # Protocol 2.0 §Fast Sync Read example: IDs 3, 7, 4; Present Position 166, 2079, 1023 (4 bytes); LEN 0x19;
    # CRCs 84 08, 16 CA, D1 9E.
    segs = [(3, 0, struct.pack("<i", 166)), (7, 0, struct.pack("<i", 2079)), (4, 0, struct.pack("<i", 1023))]
    wire = encode_fast_status(segs)
    assert wire == H("FF FF FD 00 FE 19 00 55 00 03 A6 00 00 00 84 08 00 07 1F 08 00 00 16 CA 00 04 FF 03 00 00 D1 9E")
    # each intermediate CRC is the running CRC of everything before it
    for end in (14, 22, 30):
        assert crc16(wire[:end]) == wire[end] | wire[end + 1] << 8


def test_fast_status_is_not_stuffed_and_validates():
    data = H("FF FF FD 00")
    wire = encode_fast_status([(1, ALERT | ErrorCode.DATA_RANGE, data)])
    assert wire[8:14] == bytes([0x84, 1]) + data  # raw, no FD inserted
    assert wire[5] | wire[6] << 8 == 1 + len(data) + 4
    assert crc16(wire[:-2]) == wire[-2] | wire[-1] << 8
    with pytest.raises(ValueError):
        encode_fast_status([])
    with pytest.raises(ValueError):
        encode_fast_status([(1, 0, bytes(70000))])


def test_enums():
    assert Instruction.FAST_BULK_READ == 0x9A and Instruction.CONTROL_TABLE_BACKUP == 0x20
    assert ErrorCode.ACCESS == 7 and ALERT == 0x80 and BROADCAST_ID == 0xFE and HEADER == b"\xff\xff\xfd\x00"
    assert issubclass(ProtocolError, ValueError)


# ------------------------------------------------------------------------------------------------ stuffing

_stuffy_bytes = st.lists(st.sampled_from([0xFF, 0xFD, 0x00, 0x55, 0x01]), max_size=40).map(bytes)
_params = st.one_of(st.binary(max_size=40), _stuffy_bytes)


def test_stuff_examples():
    assert stuff(H("FF FF FD")) == H("FF FF FD FD")
    assert stuff(H("FF FF FF FD 00")) == H("FF FF FF FD FD 00")
    assert stuff(H("FF FF FD FD")) == H("FF FF FD FD FD")
    assert stuff(H("FF FF FD FF FF FD")) == H("FF FF FD FD FF FF FD FD")
    assert stuff(H("FF FD FF FD")) == H("FF FD FF FD")
    assert unstuff(H("FF FF FD FD FD")) == H("FF FF FD FD")
    assert unstuff(bytearray(H("01 FF FF FD FD"))) == H("01 FF FF FD")


@given(st.one_of(st.binary(max_size=200), _stuffy_bytes))
def test_stuff_round_trip_and_no_header_inside(x):
    s = stuff(x)
    assert unstuff(s) == x
    assert len(s) == len(x) + x.count(H("FF FF FD"))
    i = s.find(H("FF FF FD"))
    while i >= 0:
        assert i + 3 < len(s) and s[i + 3] == 0xFD, s.hex(" ")
        i = s.find(H("FF FF FD"), i + 1)
    assert HEADER not in s


@given(st.integers(0, 0xFE), st.sampled_from(list(Instruction)), _params)
def test_stuffed_instruction_parses_to_original(id, inst, params):
    wire = encode_instruction(id, inst, params)
    length = wire[5] | wire[6] << 8
    assert length == 2 + len(stuff(bytes([inst]) + params))  # LEN counts the stuffed bytes (+ CRC)
    assert len(wire) == 7 + length
    if inst == Instruction.STATUS:
        assert parse_all(wire) == []
        return
    assert parse_all(wire) == [Packet(id, inst, params, len(wire))]


@given(st.integers(0, 0xFC), st.integers(0, 0xFF), _params)
def test_stuffed_status_round_trip(id, error, params):
    wire = encode_status(id, error, params)
    (p,) = parse_all(wire, accept_status=True)
    assert p.wire_len == len(wire) == 7 + (wire[5] | wire[6] << 8)
    assert decode_status(p) == (error, params)


def test_length_field_counts_stuffed_bytes():
    params = H("74 00 FF FF FD 00")
    wire = encode_instruction(1, Instruction.WRITE, params)
    assert wire[5] == 3 + len(params) + 1
    assert H("FF FF FD FD 00") in wire
    assert packet_of(wire) == Packet(1, Instruction.WRITE, params, len(wire))


def test_encoders_reject_out_of_range():
    with pytest.raises(ValueError):
        encode_instruction(256, 1)
    with pytest.raises(ValueError):
        encode_instruction(1, 1, bytes(65533))  # LEN would be 65536
    assert len(encode_instruction(1, 1, bytes(65532))) == MAX_WIRE_LEN
    with pytest.raises(ValueError):
        encode_status(1, 256)


def test_decode_status_rejects_non_status():
    with pytest.raises(ProtocolError):
        decode_status(Packet(1, Instruction.READ, b"\x00", 11))
    with pytest.raises(ProtocolError):
        decode_status(Packet(1, Instruction.STATUS, b"", 10))


# ------------------------------------------------------------------------------------------------ parser

P1 = encode_instruction(1, Instruction.READ, H("84 00 04 00"))
P2 = encode_instruction(BROADCAST_ID, Instruction.SYNC_WRITE, H("74 00 04 00 01 FF FF FD 00 02 AA FF FF FD"))
P3 = encode_instruction(BROADCAST_ID, Instruction.SYNC_READ, H("84 00 04 00 01 02"))
STREAM = [P1, P2, P3]
EXPECTED = [packet_of(p) for p in STREAM]


def test_parser_merged_packets_in_one_chunk():
    parser = Parser()
    assert parser.feed(b"".join(STREAM), 0.0) == EXPECTED
    assert parser.buffered == 0 and parser.garbage_bytes == 0
    assert EXPECTED[1].params == H("74 00 04 00 01 FF FF FD 00 02 AA FF FF FD")  # unstuffed


def test_parser_split_at_every_offset():
    data = b"".join(STREAM)
    for k in range(len(data) + 1):
        parser = Parser()
        got = parser.feed(data[:k], 0.0) + parser.feed(data[k:], 1e-3)
        assert got == EXPECTED, k
        assert parser.buffered == 0


def test_parser_split_at_every_pair_of_offsets():
    data = P1 + P2
    for a in range(len(data) + 1):
        for b in range(a, len(data) + 1):
            parser = Parser()
            got = parser.feed(data[:a], 0.0) + parser.feed(data[a:b], 7e-4) + parser.feed(data[b:], 14e-4)
            assert got == EXPECTED[:2], (a, b)


def test_parser_byte_by_byte():
    parser = Parser()
    got = []
    for k, byte in enumerate(b"".join(STREAM)):
        got += parser.feed(bytes([byte]), k * 1e-5)
    assert got == EXPECTED


def test_parser_accepts_bytearray_and_memoryview():
    assert Parser().feed(bytearray(P1), 0.0) == EXPECTED[:1]
    assert Parser().feed(memoryview(P1 + P3), 0.0) == [EXPECTED[0], EXPECTED[2]]


@pytest.mark.parametrize(
    "prefix",
    [
        b"\x00\x01garbage",
        H("FF"),
        H("FF FF"),
        H("FF FF FD"),
        H("FF FF FF FF FF"),
        H("FF FF FD FD"),  # a stuffed sequence, not a header
        H("FF FF FD 01 01 03 00"),  # reserved byte not 00
        H("FF FF FD FD 00 01 03 00 01"),
    ],
    ids=lambda b: b.hex(),
)
@pytest.mark.parametrize("split", [False, True])
def test_parser_garbage_prefix_and_suffix(prefix, split):
    parser = Parser()
    suffix = H("00 FF FF")
    data = prefix + P1 + P3 + suffix
    # split: garbage that ends in a header prefix must not eat the start of the real header
    got = parser.feed(prefix, 0.0) + parser.feed(data[len(prefix) :], 1e-3) if split else parser.feed(data, 0.0)
    assert got == [EXPECTED[0], EXPECTED[2]]
    assert parser.garbage_bytes == len(prefix) + 1  # the trailing FF FF is kept: it may start a header
    assert parser.buffered == 2


@pytest.mark.parametrize("tail", [H("FF"), H("FF FF"), H("FF FF FD"), H("FF FF FD 00"), P1[:9]], ids=lambda b: b.hex())
def test_parser_keeps_possible_header_start(tail):
    parser = Parser()
    assert parser.feed(b"\x13\x37" + tail, 0.0) == []
    assert parser.buffered == len(tail)
    assert parser.feed(P1[len(tail) :], 1e-3) == [EXPECTED[0]]


def test_parser_drops_foreign_status_packets():
    status = encode_status(3, 0, H("FF FF FD 00 12"))
    parser = Parser()
    assert parser.feed(P1 + status + encode_status(4, 0) + P3, 0.0) == [EXPECTED[0], EXPECTED[2]]
    assert parser.status_packets_ignored == 2
    assert parser.garbage_bytes == 0


def test_parser_accept_status_option():
    status = encode_status(3, ErrorCode.ACCESS, b"")
    (p,) = Parser(accept_status=True).feed(status, 0.0)
    assert decode_status(p) == (ErrorCode.ACCESS, b"")


def test_parser_bad_crc_then_next_packet():
    bad = bytearray(P1)
    bad[-1] ^= 0x01
    parser = Parser()
    got = parser.feed(bytes(bad) + P3, 0.0)
    assert got == [CorruptPacket(1, Instruction.READ, len(P1)), EXPECTED[2]]
    assert parser.crc_errors == 1
    assert parser.buffered == 0


def test_parser_bad_crc_in_params():
    bad = bytearray(P2)
    bad[12] ^= 0x40
    parser = Parser()
    assert parser.feed(bytes(bad) + P1, 0.0) == [
        CorruptPacket(BROADCAST_ID, Instruction.SYNC_WRITE, len(P2)),
        EXPECTED[0],
    ]


def test_parser_corrupt_length_swallowing_real_packets_resyncs_inside():
    # LEN of the first packet corrupted upwards: it claims the next packet(s); the CRC fails and the parser
    # must search for headers inside the bytes it had claimed.
    bad = bytearray(P1)
    bad[5] += 20
    data = bytes(bad) + P2 + P3
    parser = Parser()
    got = parser.feed(data, 0.0)
    assert got[0] == CorruptPacket(1, Instruction.READ, len(P1) + 20)
    # P2's first 20 bytes were on the wire as part of the claimed span: only the rest is counted again
    assert got[1:] == [EXPECTED[1]._replace(wire_len=len(P2) - 20), EXPECTED[2]]


def test_parser_header_inside_corrupt_payload_found():
    # An unstuffed frame (as a broken sender would make) carrying a complete packet in its payload, bad CRC.
    inner = encode_instruction(7, Instruction.PING)
    body = bytes([Instruction.WRITE]) + H("10 00") + inner
    outer = HEADER + bytes([1, len(body) + 2, 0]) + body + H("00 00")
    parser = Parser()
    got = parser.feed(outer + P3, 0.0)
    # the inner packet's bytes were on the wire as part of the outer one: no wire time of its own
    assert got == [CorruptPacket(1, Instruction.WRITE, len(outer)), packet_of(inner)._replace(wire_len=0),
                   EXPECTED[2]]


def test_parser_length_below_three_is_not_a_header():
    for length in (0, 1, 2):
        junk = HEADER + bytes([1, length, 0])
        parser = Parser()
        assert parser.feed(junk + P1, 0.0) == [EXPECTED[0]]
        assert parser.garbage_bytes == len(junk)


def test_parser_unknown_instruction_passes_through():
    wire = encode_instruction(1, 0x07, H("AA"))
    assert packet_of(wire) == Packet(1, 0x07, H("AA"), len(wire))


def test_parser_gap_rule_drops_stale_partial():
    half = len(P1) // 2
    parser = Parser()
    assert parser.feed(P1[:half], 0.0) == []
    assert parser.feed(P2[half:], 0.002) == []  # 2 ms > 1.5 ms: partial dropped, the rest parsed as new bytes
    assert parser.timeouts == 1
    assert parser.buffered == 0
    # a packet after the gap is parsed from scratch
    assert parser.feed(P3, 0.004) == [EXPECTED[2]]


@pytest.mark.parametrize("cut", [2, 5, 9, len(P2) - 1])
def test_parser_keeps_a_partial_that_the_bytes_after_a_gap_complete(cut):
    """A packet written at once but read in two parts with the host's scheduling between them (a pty's kernel
    worker, the reader's late wake-up): its CRC matches across the gap, so it is understood, and what follows
    it in the same read too."""
    parser = Parser()
    assert parser.feed(P2[:cut], 0.0) == []
    assert parser.feed(P2[cut:] + P3, 0.005) == [EXPECTED[1], EXPECTED[2]]
    assert parser.timeouts == 0 and parser.buffered == 0


def test_parser_drops_a_partial_that_the_bytes_after_a_gap_do_not_complete():
    """The same cut, but the rest has a byte changed on the way: the partial is stale, and the new bytes are
    hunted for a header from scratch (the next packet is understood)."""
    parser = Parser()
    rest = bytearray(P2[9:])
    rest[3] ^= 0x01
    assert parser.feed(P2[:9], 0.0) == []
    assert parser.feed(bytes(rest) + P3, 0.005) == [EXPECTED[2]]
    assert parser.timeouts == 1


def test_parser_gap_rule_keeps_fresh_partial():
    half = len(P1) // 2
    parser = Parser()
    assert parser.feed(P1[:half], 0.0) == []
    assert parser.feed(P1[half:], 0.001) == [EXPECTED[0]]  # 1 ms < 1.5 ms
    assert parser.timeouts == 0


def test_parser_gap_then_complete_packet_in_new_chunk():
    parser = Parser()
    parser.feed(P2[:11], 0.0)
    assert parser.feed(P1, 0.0016) == [EXPECTED[0]]
    assert parser.timeouts == 1


def test_parser_gap_measured_from_last_arrival():
    parser = Parser()
    t = 0.0
    got = []
    for b in P2:  # one byte per ms: total span far above 1.5 ms, but every gap below it
        got += parser.feed(bytes([b]), t)
        t += 1e-3
    assert got == [EXPECTED[1]]


def test_parser_empty_feed_applies_gap_rule_only():
    parser = Parser(inter_byte_timeout_s=0.01)
    parser.feed(P1[:5], 0.0)
    assert parser.feed(b"", 0.005) == [] and parser.buffered == 5  # 5 ms < 10 ms: kept
    assert parser.feed(P1[5:], 0.009) == [EXPECTED[0]]  # the empty feed did not count as an arrival
    parser.feed(P1[:5], 1.0)
    assert parser.feed(b"", 1.02) == [] and parser.buffered == 0  # a poll expires the stale partial
    assert parser.timeouts == 1
    parser.feed(P1[:5], 2.0)
    parser.feed(b"", 2.008)
    assert parser.feed(P2, 2.012) == [EXPECTED[1]]  # 12 ms since the last real bytes: the partial dropped
    assert parser.timeouts == 2


def test_parser_memory_bounded_for_long_claimed_length():
    # A header claiming the largest length: the parser waits for 65542 bytes, never more, then resyncs.
    claim = HEADER + bytes([1, 0xFF, 0xFF, Instruction.WRITE])
    parser = Parser()
    parser.feed(claim, 0.0)
    chunk = bytes(range(256)) * 16
    got = []
    fed = len(claim)
    while fed < MAX_WIRE_LEN + len(P1):
        got += parser.feed(chunk, 0.0)
        fed += len(chunk)
        assert parser.buffered <= MAX_WIRE_LEN
    assert got[0] == CorruptPacket(1, Instruction.WRITE, MAX_WIRE_LEN)
    assert parser.buffered < 4096


def test_parser_garbage_never_accumulates():
    parser = Parser()
    for k in range(200):
        parser.feed(bytes(range(k % 7, 250)) + b"\xff", k * 1e-4)
        assert parser.buffered <= 1
    assert parser.garbage_bytes > 40000


def test_parser_largest_packet():
    params = (bytes(range(256)) * 256)[:65532]  # no FF FF FD inside: LEN = 65535
    wire = encode_instruction(BROADCAST_ID, Instruction.SYNC_WRITE, params)
    assert len(wire) == MAX_WIRE_LEN
    parser = Parser()
    got = []
    for i in range(0, len(wire), 1000):
        got += parser.feed(wire[i : i + 1000], i * 1e-6)
    assert got == [Packet(BROADCAST_ID, Instruction.SYNC_WRITE, params, MAX_WIRE_LEN)]


# ------------------------------------------------------------------------------------------------ decoders


def test_decoders_valid():
    assert decode_read(H("84 00 04 00")) == (132, 4)
    assert decode_write(H("74 00 00 02 00 00")) == (116, H("00 02 00 00"))
    assert decode_sync_read(H("84 00 04 00 03 07 04")) == (132, 4, [3, 7, 4])
    assert decode_sync_write(H("74 00 04 00 01 96 00 00 00 02 AA 00 00 00")) == (
        116,
        4,
        [(1, H("96 00 00 00")), (2, H("AA 00 00 00"))],
    )
    assert decode_bulk_read(H("01 90 00 02 00 02 92 00 01 00")) == [(1, 144, 2), (2, 146, 1)]
    assert decode_bulk_write(H("01 20 00 02 00 A0 00 02 1F 00 01 00 50")) == [(1, 32, H("A0 00")), (2, 31, H("50"))]
    assert decode_read(H("3E 02 00 01")) == (574, 256)  # 16-bit little-endian fields


@pytest.mark.parametrize(
    ("decoder", "params"),
    [
        (decode_read, b""),
        (decode_read, H("84 00 04")),
        (decode_read, H("84 00 04 00 00")),
        (decode_read, H("84 00 00 00")),  # zero length
        (decode_write, b""),
        (decode_write, H("74 00")),  # no data
        (decode_sync_read, H("84 00 04 00")),  # no ID
        (decode_sync_read, H("84 00 00 00 01")),  # zero length
        (decode_sync_read, H("84")),
        (decode_sync_write, H("74 00 04")),
        (decode_sync_write, H("74 00 04 00")),  # no device
        (decode_sync_write, H("74 00 04 00 01 96 00 00")),  # short data
        (decode_sync_write, H("74 00 04 00 01 96 00 00 00 02")),  # trailing ID without data
        (decode_sync_write, H("74 00 00 00 01")),  # zero length
        (decode_bulk_read, b""),
        (decode_bulk_read, H("01 90 00 02")),
        (decode_bulk_read, H("01 90 00 02 00 02")),
        (decode_bulk_read, H("01 90 00 02 00 01 92 00 01 00")),  # the same ID twice
        (decode_bulk_read, H("01 90 00 00 00")),  # zero length
        (decode_bulk_write, b""),
        (decode_bulk_write, H("01 20 00 02")),
        (decode_bulk_write, H("01 20 00 02 00 A0")),  # data cut short
        (decode_bulk_write, H("01 20 00 02 00 A0 00 02")),  # truncated second header
        (decode_bulk_write, H("01 20 00 01 00 A0 01 1F 00 01 00 50")),  # the same ID twice
        (decode_bulk_write, H("01 20 00 00 00")),  # zero length
    ],
    ids=lambda v: v.hex() if isinstance(v, bytes) else v.__name__,
)
def test_decoders_malformed(decoder, params):
    with pytest.raises(ProtocolError):
        decoder(params)


@given(st.binary(max_size=60))
def test_decoders_raise_only_protocol_error(params):
    for decoder in (
        decode_read,
        decode_write,
        decode_sync_read,
        decode_sync_write,
        decode_bulk_read,
        decode_bulk_write,
    ):
        with contextlib.suppress(ProtocolError):
            decoder(params)


# ------------------------------------------------------------------------------------------------ dynamixel-sdk


class FakeSdkPort:
    """Enough of dynamixel_sdk.PortHandler for the packet handler: records writes, serves queued replies.

    `responder(bytes_written) -> bytes to queue`. A read with nothing queued counts as the packet timeout.
    """

    def __init__(self, responder=None):
        self.is_using = False
        self.written: list[bytes] = []
        self.rx = bytearray()
        self.responder = responder

    def clearPort(self):
        self.rx.clear()

    def writePort(self, packet):
        data = bytes(packet)
        self.written.append(data)
        if self.responder is not None:
            self.rx += self.responder(data)
        return len(data)

    def readPort(self, length):
        out = bytes(self.rx[:length])
        del self.rx[:length]
        return out

    def setPacketTimeout(self, packet_length):
        pass

    def setPacketTimeoutMillis(self, msec):
        pass

    def isPacketTimeout(self):
        return not self.rx

    def getBaudRate(self):
        return 1_000_000


class MiniBus:
    """A few servos with a flat 256-byte memory each, answering through this module's encoders only."""

    def __init__(self, ids=(1, 2, 3)):
        self.mem = {i: bytearray(256) for i in ids}
        for i in ids:
            self.mem[i][0:3] = struct.pack("<HB", 1020, 45)
        self.parser = Parser()
        self.t = 0.0
        self.seen: list[Packet] = []

    def __call__(self, data: bytes) -> bytes:
        self.t += 1.0  # each SDK write is a fresh burst
        out = b""
        for pkt in self.parser.feed(data, self.t):
            assert isinstance(pkt, Packet)
            self.seen.append(pkt)
            out += self.answer(pkt)
        return out

    def answer(self, pkt: Packet) -> bytes:
        inst, mem = pkt.instruction, self.mem
        if inst == Instruction.PING:
            ids = sorted(mem) if pkt.id == BROADCAST_ID else [pkt.id]
            return b"".join(encode_status(i, 0, bytes(mem[i][0:3])) for i in ids)
        if inst == Instruction.READ:
            a, n = decode_read(pkt.params)
            return encode_status(pkt.id, 0, bytes(mem[pkt.id][a : a + n]))
        if inst == Instruction.WRITE:
            a, d = decode_write(pkt.params)
            mem[pkt.id][a : a + len(d)] = d
            return encode_status(pkt.id, 0)
        if inst == Instruction.SYNC_WRITE:
            a, _, items = decode_sync_write(pkt.params)
            for i, d in items:
                mem[i][a : a + len(d)] = d
            return b""
        if inst == Instruction.BULK_WRITE:
            for i, a, d in decode_bulk_write(pkt.params):
                mem[i][a : a + len(d)] = d
            return b""
        if inst == Instruction.SYNC_READ:
            a, n, ids = decode_sync_read(pkt.params)
            return b"".join(encode_status(i, 0, bytes(mem[i][a : a + n])) for i in ids)
        if inst == Instruction.FAST_SYNC_READ:
            a, n, ids = decode_sync_read(pkt.params)
            return encode_fast_status([(i, 0, bytes(mem[i][a : a + n])) for i in ids])
        if inst == Instruction.BULK_READ:
            return b"".join(encode_status(i, 0, bytes(mem[i][a : a + n])) for i, a, n in decode_bulk_read(pkt.params))
        if inst == Instruction.FAST_BULK_READ:
            return encode_fast_status([(i, 0, bytes(mem[i][a : a + n])) for i, a, n in decode_bulk_read(pkt.params)])
        return encode_status(pkt.id, ErrorCode.INSTRUCTION)


@pytest.fixture
def sdk_bus():
    bus = MiniBus()
    return sdk.PacketHandler(2.0), FakeSdkPort(bus), bus


def _u32(v: int) -> int:
    return v & 0xFFFFFFFF


STUFFY = 0x00FDFFFF  # little-endian bytes FF FF FD 00: must be stuffed on the wire


def test_sdk_ping_bytes_and_reply(sdk_bus):
    ph, port, bus = sdk_bus
    model, result, error = ph.ping(port, 1)
    assert (model, result, error) == (1020, sdk.COMM_SUCCESS, 0)
    assert port.written == [H("FF FF FD 00 01 03 00 01 19 4E")]  # the e-manual ping, byte for byte
    assert bus.seen == [Packet(1, Instruction.PING, b"", 10)]


def test_sdk_broadcast_ping(sdk_bus):
    ph, port, _ = sdk_bus
    found, result = ph.broadcastPing(port)
    assert result == sdk.COMM_SUCCESS
    assert found == {1: [1020, 45], 2: [1020, 45], 3: [1020, 45]}


def test_sdk_write_and_read_with_header_like_data(sdk_bus):
    ph, port, bus = sdk_bus
    assert ph.write4ByteTxRx(port, 2, 116, STUFFY) == (sdk.COMM_SUCCESS, 0)
    wire = port.written[-1]
    # SDK 4.1.0 sends this unstuffed (see test_sdk_4_1_0_never_stuffs): a real header inside the parameters.
    # The parser takes LEN bytes after the header without searching inside them, so the write still arrives.
    assert wire == encode_instruction(2, Instruction.WRITE, b"")[:5] + H("09 00 03 74 00 FF FF FD 00") + wire[-2:]
    assert bus.seen[-1] == Packet(2, Instruction.WRITE, H("74 00 FF FF FD 00"), len(wire))
    assert bus.mem[2][116:120] == H("FF FF FD 00")
    bus.mem[1][128:132] = H("FF FF FD 00")  # our status reply is stuffed, the SDK must unstuff it
    value, result, error = ph.read4ByteTxRx(port, 1, 128)
    assert (value, result, error) == (STUFFY, sdk.COMM_SUCCESS, 0)
    assert bus.seen[-1].params == H("80 00 04 00")


def test_sdk_4_1_0_never_stuffs():
    # Protocol2PacketHandler.txPacket calls addStuffing(txpacket) and drops its return value; when stuffing is
    # needed addStuffing builds a new list, so the caller's packet goes out unstuffed (CRC over the raw bytes).
    ph = sdk.PacketHandler(2.0)
    port = FakeSdkPort()
    ph.writeTxOnly(port, 1, 116, 4, list(H("FF FF FD FD")))
    (wire,) = port.written
    assert wire[5] == 9 and H("FF FF FD FD") in wire and H("FF FF FD FD FD") not in wire
    # An e-manual receiver unstuffs FF FF FD FD, as a servo would: the data arrives one byte short.
    (pkt,) = parse_all(wire)
    assert pkt.params == H("74 00 FF FF FD")
    # What addStuffing itself returns is proper stuffing, and the parser undoes it.
    raw = [0xFF, 0xFF, 0xFD, 0x00, 1, 9, 0, Instruction.WRITE, *H("74 00 FF FF FD FD"), 0, 0]
    stuffed = ph.addStuffing(raw)
    crc = ph.updateCRC(0, stuffed, len(stuffed) - 2)
    stuffed[-2:] = [crc & 0xFF, crc >> 8]
    assert bytes(stuffed) == encode_instruction(1, Instruction.WRITE, H("74 00 FF FF FD FD"))
    assert packet_of(bytes(stuffed)).params == H("74 00 FF FF FD FD")


def test_sdk_other_instructions_decode(sdk_bus):
    ph, port, bus = sdk_bus
    ph.regWriteTxOnly(port, 1, 104, 4, list(H("C8 00 00 00")))
    ph.action(port, BROADCAST_ID)
    ph.reboot(port, 3)
    ph.clearMultiTurn(port, 1)
    ph.factoryReset(port, 2, 0x01)
    got = [(p.id, p.instruction, p.params) for p in bus.seen]
    assert got == [
        (1, Instruction.REG_WRITE, H("68 00 C8 00 00 00")),
        (BROADCAST_ID, Instruction.ACTION, b""),
        (3, Instruction.REBOOT, b""),
        (1, Instruction.CLEAR, H("01 44 58 4C 22")),
        (2, Instruction.FACTORY_RESET, H("01")),
    ]
    assert port.written[0] == encode_instruction(1, Instruction.REG_WRITE, H("68 00 C8 00 00 00"))


def test_sdk_sync_write_with_header_like_data(sdk_bus):
    ph, port, bus = sdk_bus
    gsw = sdk.GroupSyncWrite(port, ph, 116, 4)
    gsw.addParam(1, list(struct.pack("<I", STUFFY)))
    gsw.addParam(3, list(H("FF FF FD 01")))
    assert gsw.txPacket() == sdk.COMM_SUCCESS
    (pkt,) = bus.seen
    assert pkt.id == BROADCAST_ID and pkt.instruction == Instruction.SYNC_WRITE
    assert decode_sync_write(pkt.params) == (116, 4, [(1, H("FF FF FD 00")), (3, H("FF FF FD 01"))])
    assert pkt.wire_len == len(port.written[0]) == 14 + 10  # SDK 4.1.0: no stuffing bytes
    assert bus.mem[1][116:120] == H("FF FF FD 00") and bus.mem[3][116:120] == H("FF FF FD 01")


def test_sdk_bulk_write(sdk_bus):
    ph, port, bus = sdk_bus
    gbw = sdk.GroupBulkWrite(port, ph)
    gbw.addParam(1, 32, 2, [0xA0, 0x00])
    gbw.addParam(2, 31, 1, [0x50])
    assert gbw.txPacket() == sdk.COMM_SUCCESS
    assert port.written[0] == H("FF FF FD 00 FE 10 00 93 01 20 00 02 00 A0 00 02 1F 00 01 00 50 B7 68")
    assert decode_bulk_write(bus.seen[0].params) == [(1, 32, H("A0 00")), (2, 31, H("50"))]


@pytest.mark.parametrize("fast", [False, True])
def test_sdk_sync_read(sdk_bus, fast):
    ph, port, bus = sdk_bus
    values = {3: 166, 1: STUFFY, 2: _u32(-2079)}
    for i, v in values.items():
        bus.mem[i][132:136] = struct.pack("<I", v)
    gsr = sdk.GroupSyncRead(port, ph, 132, 4)
    for i in values:
        gsr.addParam(i)
    result = gsr.fastSyncRead() if fast else gsr.txRxPacket()
    assert result == sdk.COMM_SUCCESS
    for i, v in values.items():
        assert gsr.isAvailable(i, 132, 4)
        assert gsr.getData(i, 132, 4) == v
    (pkt,) = bus.seen
    assert pkt.instruction == (Instruction.FAST_SYNC_READ if fast else Instruction.SYNC_READ)
    assert decode_sync_read(pkt.params) == (132, 4, [3, 1, 2])


@pytest.mark.parametrize("fast", [False, True])
def test_sdk_bulk_read(sdk_bus, fast):
    ph, port, bus = sdk_bus
    bus.mem[1][132:136] = struct.pack("<I", STUFFY)
    bus.mem[2][146] = 36
    bus.mem[3][144:146] = struct.pack("<H", 119)
    gbr = sdk.GroupBulkRead(port, ph)
    # IDs chosen so that the `param.index(id)` lookup of the SDK's fastBulkReadRx (protocol2_packet_handler.py)
    # finds the right entry
    gbr.addParam(1, 132, 4)
    gbr.addParam(2, 146, 1)
    gbr.addParam(3, 144, 2)
    result = gbr.fastBulkRead() if fast else gbr.txRxPacket()
    assert result == sdk.COMM_SUCCESS
    assert gbr.getData(1, 132, 4) == STUFFY
    assert gbr.getData(2, 146, 1) == 36
    assert gbr.getData(3, 144, 2) == 119
    assert decode_bulk_read(bus.seen[0].params) == [(1, 132, 4), (2, 146, 1), (3, 144, 2)]


def test_sdk_rx_packet_accepts_our_status_after_noise():
    ph = sdk.PacketHandler(2.0)
    port = FakeSdkPort()
    port.rx += H("00 FF FF FD FD 12") + encode_status(5, ALERT | ErrorCode.DATA_LIMIT, H("FF FF FD 00 07"))
    rx, result = ph.rxPacket(port, False)
    assert result == sdk.COMM_SUCCESS
    assert rx[4] == 5 and rx[8] == 0x86 and bytes(rx[9:14]) == H("FF FF FD 00 07")  # unstuffed by the SDK
    assert ph.getRxPacketError(rx[8]).startswith("[RxPacketError] Hardware error")


def test_sdk_rx_packet_fast_option_accepts_fast_status():
    ph = sdk.PacketHandler(2.0)
    port = FakeSdkPort()
    segs = [(3, 0, H("FF FF FD 00")), (9, ErrorCode.ACCESS, H("01 02 03 04"))]
    port.rx += encode_fast_status(segs)
    rx, result = ph.rxPacket(port, True)
    assert result == sdk.COMM_SUCCESS
    assert rx[4] == BROADCAST_ID
    assert bytes(rx[8:14]) == H("00 03 FF FF FD 00")  # raw, as the SDK expects for the fast reply


def test_sdk_rx_packet_rejects_our_corrupted_status():
    ph = sdk.PacketHandler(2.0)
    port = FakeSdkPort()
    bad = bytearray(encode_status(1, 0, H("A6 00 00 00")))
    bad[-3] ^= 1
    port.rx += bad
    _, result = ph.rxPacket(port, False)
    assert result == sdk.COMM_RX_CORRUPT


# ------------------------------------------------------------------------------------------------ fuzz

_INSTRUCTIONS = [int(i) for i in Instruction if i != Instruction.STATUS] + [0x07, 0x7F, 0xFF]


@st.composite
def _instruction_packets(draw):
    return encode_instruction(draw(st.integers(0, 0xFE)), draw(st.sampled_from(_INSTRUCTIONS)), draw(_params))


@st.composite
def _mutated(draw):
    wire = bytearray(draw(_instruction_packets()) if draw(st.booleans()) else encode_status(2, 0, draw(_params)))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "truncate", "duplicate", "insert", "delete"]))
        if not wire:
            break
        i = draw(st.integers(0, len(wire) - 1))
        if kind == "flip":
            wire[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del wire[i:]
        elif kind == "duplicate":
            j = draw(st.integers(i, len(wire)))
            wire[j:j] = wire[i:j]
        elif kind == "insert":
            wire[i:i] = draw(st.one_of(st.binary(min_size=1, max_size=8), st.sampled_from([HEADER, H("FF FF FD")])))
        else:
            del wire[i : i + draw(st.integers(1, 4))]
    return bytes(wire)


_pieces = st.lists(
    st.one_of(
        st.binary(max_size=40),
        _stuffy_bytes,
        _mutated(),
        _instruction_packets(),
        st.builds(encode_status, st.integers(0, 252), st.integers(0, 255), _params),
        st.just(HEADER + H("01 FF FF")),  # claims a 65535-byte packet
    ),
    max_size=8,
)


@st.composite
def _chunked(draw, data: bytes, max_gap: float):
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    bounds = [0, *cuts, len(data)]
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]  # gaps count between real arrivals
    gaps = draw(st.lists(st.floats(0.0, max_gap), min_size=len(chunks), max_size=len(chunks)))
    return list(zip(chunks, gaps, strict=True))


@st.composite
def _noisy_stream(draw):
    noise = b"".join(draw(_pieces))
    return draw(_chunked(noise, 3e-3)), draw(_instruction_packets())


def _check_noisy_stream(case):
    feeds, final = case
    parser = Parser()
    t = 0.0
    fed = counted = 0
    for chunk, gap in feeds:
        t += gap
        fed += len(chunk)
        for item in parser.feed(chunk, t):
            assert isinstance(item, Packet | CorruptPacket)
            counted += item.wire_len
            if isinstance(item, Packet):
                assert item.instruction != Instruction.STATUS
        assert parser.buffered <= MAX_WIRE_LEN
        assert counted <= fed   # overlapping CRC-failed spans are not counted twice on the wire
    # after a > 1.5 ms silence a clean packet is always understood, whatever came before
    assert parser.feed(final, t + 2e-3) == [packet_of(final)]
    assert parser.buffered == 0


_fuzz = given(_noisy_stream())


@_fuzz
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_noisy_stream_recovers(case):
    _check_noisy_stream(case)


@pytest.mark.soak
@_fuzz
@settings(max_examples=20000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_noisy_stream_recovers_soak(case):
    _check_noisy_stream(case)


@st.composite
def _clean_stream(draw):
    packets = draw(
        st.lists(st.one_of(_instruction_packets(), st.builds(encode_status, st.just(1), st.just(0), _params)))
    )
    return packets, draw(_chunked(b"".join(packets), 1.4e-3))


@given(_clean_stream())
@settings(max_examples=200, deadline=None)
def test_fuzz_clean_stream_any_chunking(case):
    packets, feeds = case
    expected = [p for p in (packet_of(w) if w[7] != 0x55 else None for w in packets) if p is not None]
    parser = Parser()
    t, got = 0.0, []
    for chunk, gap in feeds:
        t += gap
        got += parser.feed(chunk, t)
    assert got == expected
    assert parser.garbage_bytes == parser.crc_errors == parser.timeouts == 0
    assert parser.status_packets_ignored == len(packets) - len(expected)
