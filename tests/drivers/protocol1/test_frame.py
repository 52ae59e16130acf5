"""The FF FF frame: checksums of the e-manual's worked examples, encoders, and the resynchronising parser."""

from __future__ import annotations

import random

from drivers.emulated.protocol1.frame import (
    CorruptPacket,
    Packet,
    Parser,
    checksum,
    encode_instruction,
    encode_status,
)

# ROBOTIS e-manual Protocol 1.0 §Instruction Packet examples: READ of the internal temperature of ID 1, its status
READ_TEMPERATURE = bytes.fromhex("FF FF 01 04 02 2B 01 CC")
STATUS_32C = bytes.fromhex("FF FF 01 03 00 20 DB")


def test_checksums_of_the_manual_examples():
    assert checksum(READ_TEMPERATURE[2:-1]) == 0xCC
    assert encode_instruction(1, 0x02, bytes([0x2B, 0x01])) == READ_TEMPERATURE
    assert encode_status(1, 0x00, bytes([0x20])) == STATUS_32C
    # Feetech ping of ID 1 as feetech-servo-sdk's txPacket builds it: FF FF 01 02 01 ~(1+2+1)
    assert encode_instruction(1, 0x01) == bytes.fromhex("FF FF 01 02 01 FB")


def test_parser_cuts_packets_and_skips_garbage():
    p = Parser()
    wire = b"\x00\x12" + READ_TEMPERATURE + b"\xff" + encode_instruction(0xFE, 0x83, b"\x2a\x02\x01\x10\x00")
    out = p.feed(wire, 0.0)
    assert out == [Packet(1, 2, b"\x2b\x01", 8), Packet(0xFE, 0x83, b"\x2a\x02\x01\x10\x00", 11)]
    assert p.garbage_bytes == 3
    assert p.buffered == 0


def test_parser_reports_a_bad_checksum_and_resynchronises():
    p = Parser()
    bad = bytearray(READ_TEMPERATURE)
    bad[-1] ^= 0x55
    out = p.feed(bytes(bad) + READ_TEMPERATURE, 0.0)
    assert isinstance(out[0], CorruptPacket) and out[0].id == 1
    assert out[1] == Packet(1, 2, b"\x2b\x01", 8)
    assert p.checksum_errors == 1


def test_parser_joins_a_packet_split_across_reads():
    p = Parser()
    assert p.feed(READ_TEMPERATURE[:3], 0.0) == []
    assert p.feed(READ_TEMPERATURE[3:], 0.0005) == [Packet(1, 2, b"\x2b\x01", 8)]


def test_gap_drops_a_stale_partial_packet():
    p = Parser()
    assert p.feed(b"\xff\xff\x01\x09\x03", 0.0) == []     # claims 9 more bytes, never sent
    out = p.feed(READ_TEMPERATURE, 0.1)                   # the line was silent for 100 ms
    assert out == [Packet(1, 2, b"\x2b\x01", 8)]
    assert p.timeouts == 1


def test_stale_partial_read_together_with_the_next_packet():
    # a late reader gets both at once: the good packet that ends the bytes shows the first was abandoned
    p = Parser()
    out = p.feed(b"\xff\xff\x01\x30\x03\x00" + READ_TEMPERATURE, 0.0)
    assert out == [Packet(1, 2, b"\x2b\x01", 8)]


def test_extra_ff_before_the_id_is_part_of_the_header():
    p = Parser()
    assert p.feed(b"\xff" + READ_TEMPERATURE, 0.0) == [Packet(1, 2, b"\x2b\x01", 8)]


def test_random_bytes_never_raise_and_a_following_packet_still_parses():
    rng = random.Random(7)
    p = Parser()
    for k in range(10_000):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        p.feed(junk, k * 1.0)
        assert p.buffered <= 259
    out = p.feed(READ_TEMPERATURE, 1e6)
    assert out[-1] == Packet(1, 2, b"\x2b\x01", 8)
