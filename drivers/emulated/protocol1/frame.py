"""The FF FF frame that Dynamixel Protocol 1.0 and Feetech's SCS/STS protocol share: checksum, encoders and a
resynchronising receive-side parser; what a packet means is the bus's `Dialect` (docs/protocols/protocol1.md)."""

from __future__ import annotations

import enum
from typing import NamedTuple

from drivers.wire.framing import ResyncParser

__all__ = [
    "BROADCAST_ID",
    "HEADER",
    "MAX_WIRE_LEN",
    "CorruptPacket",
    "FrameError",
    "Instruction",
    "Packet",
    "Parser",
    "checksum",
    "decode_status",
    "encode_instruction",
    "encode_status",
]

HEADER = b"\xff\xff"
BROADCAST_ID = 0xFE
"""Packet ID every device executes (Protocol 1.0 §Packet ID; Feetech SCS protocol §ID)."""
_PREFIX_LEN = 4          # FF FF ID LEN
_MIN_LENGTH = 2          # INST + CHK: the smallest legal LEN
MAX_WIRE_LEN = _PREFIX_LEN + 0xFF
"""Largest packet on the wire, header to checksum [bytes]: LEN is one byte."""


class FrameError(ValueError):
    """Parameters that do not fit an instruction's layout (length, field count)."""


class Instruction(enum.IntEnum):
    """Instruction bytes of the FF FF frame (Protocol 1.0 §Instruction Packet; Feetech SCS protocol §Instruction
    types, where 0x82 is SYNC READ). A dialect lists which of them its servos execute."""

    PING = 0x01
    READ = 0x02
    WRITE = 0x03
    REG_WRITE = 0x04
    ACTION = 0x05
    RESET = 0x06
    SYNC_READ = 0x82
    SYNC_WRITE = 0x83
    BULK_READ = 0x92


def checksum(body: bytes | bytearray | memoryview) -> int:
    """~(sum of ID, LEN, INST/ERR and parameters) & 0xFF (Protocol 1.0 §Instruction Packet, Check Sum)."""
    return ~sum(body) & 0xFF


def _frame(pid: int, first: int, params: bytes) -> bytes:
    if not 0 <= pid <= 0xFE:
        raise FrameError(f"ID {pid} outside 0..254")
    if len(params) > 0xFF - _MIN_LENGTH:
        raise FrameError(f"{len(params)} parameter bytes do not fit LEN (at most {0xFF - _MIN_LENGTH})")
    body = bytes((pid, len(params) + _MIN_LENGTH, first & 0xFF)) + bytes(params)
    return HEADER + body + bytes((checksum(body),))


def encode_instruction(pid: int, instruction: int, params: bytes = b"") -> bytes:
    """An instruction packet to device `pid` (0..253, 0xFE broadcast)."""
    return _frame(pid, instruction, params)


def encode_status(pid: int, error: int, params: bytes = b"") -> bytes:
    """A status packet from device `pid` with error byte `error` (bits in the dialect's meaning)."""
    return _frame(pid, error, params)


class Packet(NamedTuple):
    """A received packet with a good checksum.

    id: 0..253 device, 0xFE broadcast. instruction: the byte after LEN (unknown values are kept: the dialect decides
    what the servo makes of them). params: parameter bytes. wire_len: bytes the line carried for it (header to
    checksum, less what a packet returned before already covered), for wire-time accounting.
    """

    id: int
    instruction: int
    params: bytes
    wire_len: int


class CorruptPacket(NamedTuple):
    """Header and LEN were recognised but the checksum did not match; fields as received (maybe corrupt)."""

    id: int
    instruction: int
    wire_len: int


def decode_status(packet: Packet) -> tuple[int, bytes]:
    """(error byte, params) of a status packet the parser returned (the frame's INST field is the error byte)."""
    return packet.instruction, packet.params


class Parser(ResyncParser):
    """Resynchronising receive-side parser of the FF FF frame; the search, the gap rule and the wire-time accounting
    are `ResyncParser`'s.

    It searches for FF FF followed by an ID other than FF (a run of FF is a longer header: the last two FF start
    it), reads LEN (< 2 is impossible: that header is dropped), and checks the checksum.
    Counters: those of `ResyncParser`; `checksum_errors` is `crc_errors` under this frame's name.
    """

    HEADER = HEADER
    PREFIX_LEN = _PREFIX_LEN
    MIN_LENGTH = _MIN_LENGTH
    STALE_MIN = len(HEADER) + 1     # FF FF and an ID: two FF alone are no packet yet

    def __init__(self, inter_byte_timeout_s: float = 1.5e-3) -> None:
        """inter_byte_timeout_s [s]: gap after which a partial packet is dropped (ROBOTIS' figure for its buses,
        e-manual Protocol 2.0 §Instruction Packet; neither Protocol 1.0 nor Feetech's manual gives one)."""
        super().__init__(inter_byte_timeout_s)

    @property
    def checksum_errors(self) -> int:
        """Frames whose checksum did not match."""
        return self.crc_errors

    def _frame_end(self, buf: bytes | bytearray, i: int) -> int:
        if buf[i + 2] == 0xFF:            # FF FF FF: the header starts one byte later
            return -1
        length = buf[i + 3]
        return -1 if length < _MIN_LENGTH else i + _PREFIX_LEN + length

    def _check_ok(self, buf: bytes | bytearray, i: int, end: int) -> bool:
        return checksum(memoryview(buf)[i + 2:end - 1]) == buf[end - 1]

    def _packet(self, buf: bytes | bytearray, i: int, end: int, wire_len: int) -> Packet:
        return Packet(buf[i + 2], buf[i + 4], bytes(buf[i + 5:end - 1]), wire_len)

    def _corrupt(self, buf: bytes | bytearray, i: int, end: int, wire_len: int) -> CorruptPacket:
        return CorruptPacket(buf[i + 2], buf[i + 4], wire_len)
