"""Dynamixel Protocol 2.0 codec: CRC-16, byte stuffing, packet encoders, parameter decoders and a resynchronising
receive-side parser; it knows no control table and no timing (docs/protocols/dynamixel.md, "Packets")."""

from __future__ import annotations

import enum
from typing import NamedTuple

# CRC-16, packet framing and the instructions' parameter decoders are C (codec.pyx, the server's per-packet byte
# work); this module re-exports them
from drivers.emulated.dynamixel.codec import (
    ProtocolError,
    crc16,
    decode_bulk_read,
    decode_bulk_write,
    decode_read,
    decode_sync_read,
    decode_sync_write,
    decode_write,
    encode_fast_status,
    encode_instruction,
    encode_status,
    whole_packet,
)
from drivers.wire.framing import ResyncParser
from firmware_models.dynamixel.control_table import ErrorCode  # the servo and the wire share the error numbers

__all__ = [
    "ALERT",
    "BROADCAST_ID",
    "HEADER",
    "MAX_WIRE_LEN",
    "CorruptPacket",
    "ErrorCode",
    "Instruction",
    "Packet",
    "Parser",
    "ProtocolError",
    "crc16",
    "decode_bulk_read",
    "decode_bulk_write",
    "decode_read",
    "decode_status",
    "decode_sync_read",
    "decode_sync_write",
    "decode_write",
    "encode_fast_status",
    "encode_instruction",
    "encode_status",
    "stuff",
    "unstuff",
]

HEADER = b"\xff\xff\xfd\x00"
"""Header (FF FF FD) plus the reserved byte, which is always 00 and acts as part of the header
(Protocol 2.0 §Instruction Packet)."""
BROADCAST_ID = 0xFE
"""Packet ID that every device executes (Protocol 2.0 §Packet ID); also the ID of a Fast Sync/Bulk Read reply
(§Fast Sync Read)."""
ALERT = 0x80
"""Error-byte bit 7: a hardware error is latched, see Hardware Error Status (Protocol 2.0 §Status Packet;
e-manual §Hardware Error Status(70))."""

_STATUS = 0x55
_STUFF_PATTERN = b"\xff\xff\xfd"  # Protocol 2.0 §Packet Process: sender inserts FD after every FF FF FD
_STUFFED = b"\xff\xff\xfd\xfd"
_PREFIX_LEN = 7  # FF FF FD 00 ID LEN_L LEN_H
_MIN_LENGTH = 3  # INST + CRC_L + CRC_H: the smallest legal LEN field
_MAX_LENGTH = 0xFFFF  # LEN is 16 bits
MAX_WIRE_LEN = _PREFIX_LEN + _MAX_LENGTH
"""Largest possible packet on the wire, in bytes (header to CRC): 7 + 65535."""


class Instruction(enum.IntEnum):
    """Instruction byte (Protocol 2.0 §Instruction Packet, §Instruction Details)."""

    PING = 0x01
    READ = 0x02
    WRITE = 0x03
    REG_WRITE = 0x04
    ACTION = 0x05
    FACTORY_RESET = 0x06
    REBOOT = 0x08
    CLEAR = 0x10
    CONTROL_TABLE_BACKUP = 0x20
    STATUS = 0x55
    SYNC_READ = 0x82
    SYNC_WRITE = 0x83
    FAST_SYNC_READ = 0x8A
    BULK_READ = 0x92
    BULK_WRITE = 0x93
    FAST_BULK_READ = 0x9A


# --------------------------------------------------------------------------------------------------
# Byte stuffing (Protocol 2.0 §Packet Process). FF FF FD cannot overlap itself, so a single left-to-right
# replace is exactly the e-manual's scan, and its inverse.


def stuff(body: bytes) -> bytes:
    """Insert an FD after every FF FF FD in `body` (instruction + parameters, never the CRC;
    Protocol 2.0 §Packet Process).

    After stuffing, every FF FF FD inside the body is followed by FD, so no header can appear inside a packet.
    """
    return bytes(body).replace(_STUFF_PATTERN, _STUFFED)


def unstuff(body: bytes) -> bytes:
    """Inverse of `stuff`: turn every FF FF FD FD back into FF FF FD (Protocol 2.0 §Packet Process)."""
    return bytes(body).replace(_STUFFED, _STUFF_PATTERN)


# --------------------------------------------------------------------------------------------------
# Packets


class Packet(NamedTuple):   # a tuple: built per packet, a frozen dataclass costs several times as much
    """A received packet with a good CRC.

    id: Packet ID (0..252 device, 0xFE broadcast). instruction: instruction byte (unknown values are kept, so
    the bus can answer Instruction Error). params: parameters, already unstuffed. wire_len: bytes the line carried
    from the end of the previous packet the parser returned (or from this one's header, if later) to this one's
    last CRC byte, for wire-time accounting: a packet after a clean gap counts header to CRC inclusive (stuffed);
    one that overlaps a CRC-failed span already returned counts only its bytes past that span, so the wire
    time summed over the packets never exceeds the bytes that arrived.
    """

    id: int
    instruction: int
    params: bytes
    wire_len: int


class CorruptPacket(NamedTuple):
    """Framing was recognised (header and LEN) but the CRC did not match.

    id / instruction are as received and may themselves be corrupt; wire_len as for Packet (7 + LEN as claimed,
    less what earlier returned packets already covered), in bytes.
    The bus may answer CRC Error (0x03) where a reply is due (Protocol 2.0 §Status Packet; unverified on
    hardware).
    """

    id: int
    instruction: int
    wire_len: int


def decode_status(packet: Packet) -> tuple[int, bytes]:
    """(error byte, params) of a normal status packet (instruction 0x55). Not for Fast Sync/Bulk Read replies."""
    if packet.instruction != _STATUS:
        raise ProtocolError(f"not a status packet: instruction 0x{packet.instruction:02X}")
    if not packet.params:
        raise ProtocolError("status packet without an error byte")
    return packet.params[0], bytes(packet.params[1:])


# --------------------------------------------------------------------------------------------------
# Receive side


class Parser(ResyncParser):
    """Resynchronising receive-side parser (Protocol 2.0 §Instruction Packet; §Packet Process, "Processing Order
    of Reception"); the search, the gap rule and the wire-time accounting are `ResyncParser`'s.

    It searches for FF FF FD 00 (FF FF FD FD and any other reserved byte are not headers), reads LEN (< 3 is
    impossible: that header is dropped), checks the CRC over the stuffed bytes and only then unstuffs. Status
    packets (instruction 0x55, other devices' replies on a shared bus) are dropped and counted unless
    `accept_status`. The gap (e-manual: 1.5 ms) is measured between reads on the reader's clock; bytes a controller
    wrote at once can reach it in two reads (a USB serial adapter hands them over in transfers; the reader itself
    may wake late), so a packet whose CRC matches across such a gap was not cut by a silent line.

    Python dynamixel-sdk 4.1.0 never stuffs (txPacket discards addStuffing's result), so its packets may carry a
    raw FF FF FD 00 in their data. That is harmless because the body is taken by LEN, not searched; raw
    FF FF FD FD in such data is unstuffed to FF FF FD here, as the e-manual receiving rule (and a servo) does.

    Memory: between calls at most one incomplete packet is kept (< MAX_WIRE_LEN = 65542 bytes).
    Counters: those of `ResyncParser`, and status_packets_ignored.
    """

    HEADER = HEADER
    PREFIX_LEN = _PREFIX_LEN
    MIN_LENGTH = _MIN_LENGTH
    STALE_MIN = len(HEADER)

    def __init__(self, inter_byte_timeout_s: float = 1.5e-3, *, accept_status: bool = False) -> None:
        """inter_byte_timeout_s: gap in seconds after which a partial packet is dropped (e-manual: 1.5 ms).
        accept_status: return status packets (0x55) instead of dropping them; for tools and tests that listen to
        replies. Fast Sync/Bulk Read replies are not stuffed and must not be decoded as normal status packets.
        """
        super().__init__(inter_byte_timeout_s)
        self.accept_status = accept_status
        self.status_packets_ignored = 0

    def _frame_end(self, buf: bytes | bytearray, i: int) -> int:
        length = buf[i + 5] | (buf[i + 6] << 8)
        return -1 if length < _MIN_LENGTH else i + _PREFIX_LEN + length

    def _check_ok(self, buf: bytes | bytearray, i: int, end: int) -> bool:
        return crc16(buf[i : end - 2]) == buf[end - 2] | (buf[end - 1] << 8)

    def _packet(self, buf: bytes | bytearray, i: int, end: int, wire_len: int) -> Packet | None:
        instruction = buf[i + 7]
        if instruction == _STATUS and not self.accept_status:
            self.status_packets_ignored += 1
            return None
        body = buf[i + 7 : end - 2]  # instruction + params, still stuffed
        if _STUFFED in body:
            body = body.replace(_STUFFED, _STUFF_PATTERN)
        return Packet(buf[i + 4], instruction, bytes(body[1:]), wire_len)

    def _corrupt(self, buf: bytes | bytearray, i: int, end: int, wire_len: int) -> CorruptPacket:
        return CorruptPacket(buf[i + 4], buf[i + 7], wire_len)

    def _whole(self, data: bytes) -> Packet | None:
        return whole_packet(data, Packet)   # in C: header, LEN, CRC, status filter and unstuffing of one packet
