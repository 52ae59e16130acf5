"""The C codec (drivers/emulated/dynamixel/codec.pyx) against independent references.

The e-manual byte vectors are in test_protocol.py (they run through the same functions, which protocol.py re-exports);
here the encoders are compared with a packet assembled from the e-manual Protocol 2.0 rules (§Instruction Packet,
§Packet Process: stuff with bytes.replace, LEN of the stuffed body, CRC from the bitwise shift register) for arbitrary
inputs, including runs of FF FF FD that need stuffing, and with every buffer type the Python callers pass.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drivers.emulated.dynamixel import codec, protocol
from tests.drivers.dynamixel.test_protocol import _crc16_bitwise

_stuffy = st.lists(st.sampled_from([0xFF, 0xFD, 0x00, 0x55]), max_size=60).map(bytes)
_params = st.one_of(st.binary(max_size=300), _stuffy)


def _reference(id: int, head: bytes, params: bytes) -> bytes:
    body = (head + params).replace(b"\xff\xff\xfd", b"\xff\xff\xfd\xfd")   # §Packet Process
    prefix = b"\xff\xff\xfd\x00" + struct.pack("<BH", id, len(body) + 2)
    crc = _crc16_bitwise(prefix + body)
    return prefix + body + struct.pack("<H", crc)


def test_protocol_reexports_the_c_codec():
    for name in ("crc16", "encode_status", "encode_instruction", "encode_fast_status"):
        assert getattr(protocol, name) is getattr(codec, name)


@given(st.integers(0, 0xFF), st.integers(0, 0xFF), _params)
def test_status_equals_reference(id, error, params):
    assert codec.encode_status(id, error, params) == _reference(id, bytes((0x55, error)), params)


@given(st.integers(0, 0xFF), st.integers(0, 0xFF), _params)
def test_instruction_equals_reference(id, instruction, params):
    assert codec.encode_instruction(id, instruction, params) == _reference(id, bytes((instruction,)), params)


@given(st.binary(max_size=300), st.integers(0, 0xFFFF))
def test_crc_equals_bitwise(data, init):
    assert codec.crc16(data, init) == _crc16_bitwise(data, init)


@given(st.lists(st.tuples(st.integers(0, 252), st.integers(0, 0xFF), _stuffy), min_size=1, max_size=8))
def test_fast_status_running_crcs(segments):
    wire = codec.encode_fast_status(segments)
    assert wire[:8] == b"\xff\xff\xfd\x00\xfe" + struct.pack("<H", len(wire) - 7) + b"\x55"
    k = 8
    for dev_id, error, data in segments:   # never stuffed; each CRC covers all before it (§Fast Sync Read)
        assert wire[k:k + 2 + len(data)] == bytes((error, dev_id)) + data
        k += 2 + len(data)
        assert wire[k] | wire[k + 1] << 8 == _crc16_bitwise(wire[:k])
        k += 2
    assert k == len(wire)


@given(st.integers(0, 0xFF), st.sampled_from([0x02, 0x03, 0x55, 0x82, 0x83, 0xFF]), _params,
       st.integers(-1, 40), st.integers(0, 0xFF))
def test_whole_packet_agrees_with_the_full_scan(id, instruction, params, damage, byte):
    """The parser's C fast path (a chunk that is exactly one clean packet) gives what the full scan gives for it, or
    declines (None): stuffed bodies, status packets, bad CRCs, truncated or extended chunks."""
    wire = codec.encode_instruction(id, instruction, params)
    if damage >= 0:                     # a changed byte, or one byte too many
        wire = wire[:damage] + bytes((byte,)) + wire[damage + 1:] if damage < len(wire) else wire + bytes((byte,))
    fast = codec.whole_packet(wire, protocol.Packet)
    scanned: list = []
    protocol.Parser()._scan(wire, scanned)
    if fast is not None:
        assert type(fast) is protocol.Packet and [fast] == scanned and fast.params == params
    if damage < 0:                      # an intact packet: taken unless it is a status packet or stuffed
        assert (fast is not None) == (instruction != 0x55 and b"\xff\xff\xfd" not in bytes((instruction,)) + params)


def test_buffer_types_and_errors():
    p = bytes(range(0xF8, 0x100)) + b"\xff\xff\xfd"
    want = codec.encode_status(3, 0x80, p)
    assert codec.encode_status(3, 0x80, bytearray(p)) == codec.encode_status(3, 0x80, memoryview(p)) == want
    assert codec.encode_status(3, 0x80, list(p)) == want
    assert codec.encode_fast_status([(1, 0, bytearray(b"\x01\x02"))]) == codec.encode_fast_status([(1, 0, b"\x01\x02")])
    for bad in ((-1, 0), (256, 0), (1, -1), (1, 256)):
        with pytest.raises(ValueError):
            codec.encode_status(*bad)
    with pytest.raises(ValueError):
        codec.encode_fast_status([(1, 256, b"")])
    with pytest.raises(TypeError):
        codec.crc16("text")
