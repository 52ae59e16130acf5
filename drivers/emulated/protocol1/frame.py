"""The FF FF frame that Dynamixel Protocol 1.0 and Feetech's SCS/STS protocol share: checksum, encoders and a
resynchronising receive-side parser.

Wire layout (ROBOTIS e-manual "Protocol 1.0" §Instruction Packet, §Status Packet; Feetech "SCS communication
protocol" manual §Instruction packet, which copies it)::

    instruction:  FF FF | ID | LEN | INST | PARAM 1..N | CHK
    status:       FF FF | ID | LEN | ERR  | PARAM 1..N | CHK

LEN = N + 2 (the instruction or error byte and the checksum); CHK = ~(ID + LEN + INST + PARAM...) & 0xFF.
ID 0xFE is broadcast. Nothing here knows a control table, an error bit or timing: the bus (`bus.py`) and its
`Dialect` decide what a packet means and when it is answered. Instruction and status frames look alike, so the
parser returns every well-formed frame as an instruction: on the controller's side of a pty only its own
instructions arrive.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

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


class Parser:
    """Resynchronising receive-side parser of the FF FF frame.

    Feed bytes as they arrive; it returns complete packets in wire order. It searches for FF FF followed by an ID
    other than FF (a run of FF is a longer header: the last two FF start it), reads LEN (< 2 is impossible: that
    header is dropped), and checks the checksum. A checksum failure yields a CorruptPacket and the search restarts
    at the byte after the failed header, because a corrupt LEN may have swallowed real packets.

    Inter-byte gap: after over `inter_byte_timeout_s` without bytes a buffered partial packet is dropped, unless the
    new bytes complete it with a good checksum (a pty may hand one write over in two reads). A partial packet whose
    claimed span holds a complete, good packet ending exactly at the end of what arrived is stale too: the controller
    sent that packet and waits for its answer, so the line was silent after the partial one.

    Counters: garbage_bytes, checksum_errors, timeouts (partial packets dropped by the gap rule).
    """

    def __init__(self, inter_byte_timeout_s: float = 1.5e-3) -> None:
        """inter_byte_timeout_s [s]: gap after which a partial packet is dropped (ROBOTIS' figure for its buses,
        e-manual Protocol 2.0 §Instruction Packet; neither Protocol 1.0 nor Feetech's manual gives one)."""
        self.inter_byte_timeout_s = inter_byte_timeout_s
        self.garbage_bytes = 0
        self.checksum_errors = 0
        self.timeouts = 0
        self._buf = bytearray()
        self._covered = 0       # leading bytes of _buf whose wire time a returned packet already counted
        self._last = 0.0

    @property
    def crc_errors(self) -> int:
        """`checksum_errors` under the name the bus statistics use for every protocol."""
        return self.checksum_errors

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a packet."""
        return len(self._buf)

    def reset(self) -> None:
        """Forget any partial packet (counters are kept)."""
        self._buf.clear()
        self._covered = 0

    def feed(self, data: bytes, now: float) -> list[Packet | CorruptPacket]:
        """Add bytes that arrived at `now` [s, monotonic]; the packets they completed, in wire order."""
        buf = self._buf
        if buf and now - self._last > self.inter_byte_timeout_s and not self._completes(buf, data):
            if buf.startswith(HEADER) and len(buf) > 2:
                self.timeouts += 1
            else:
                self.garbage_bytes += len(buf)
            buf.clear()
            self._covered = 0
        if not data:
            return []
        self._last = now
        buf += data
        out: list[Packet | CorruptPacket] = []
        keep = self._scan(buf, out)
        del buf[:keep]
        self._covered = max(0, self._covered - keep)
        return out

    def _scan(self, buf: bytearray, out: list[Packet | CorruptPacket]) -> int:
        """Cut complete packets from `buf` into `out`; the index from which bytes must be kept."""
        n = len(buf)
        pos = 0
        covered = self._covered
        tail = -2       # start of a good packet that ends the bytes (-1: none); looked for on first need
        while True:
            i = buf.find(HEADER, pos)
            if i < 0:
                keep = n - 1 if n > pos and buf[n - 1] == 0xFF else n
                self.garbage_bytes += keep - pos
                self._covered = covered
                return keep
            self.garbage_bytes += i - pos
            if n - i < _PREFIX_LEN:
                self._covered = covered
                return i
            if buf[i + 2] == 0xFF:            # FF FF FF: the header starts one byte later
                self.garbage_bytes += 1
                pos = i + 1
                continue
            length = buf[i + 3]
            if length < _MIN_LENGTH:
                self.garbage_bytes += 1
                pos = i + 1
                continue
            end = i + _PREFIX_LEN + length
            bad = end > n or checksum(memoryview(buf)[i + 2:end - 1]) != buf[end - 1]
            if bad:
                if tail == -2:
                    tail = self._tail_packet(buf, i + 1)
                if i < tail < end:             # the line went silent after a whole packet: this header was stale
                    self.timeouts += 1
                    self.garbage_bytes += tail - i
                    pos = tail
                    continue
            if end > n:
                self._covered = covered
                return i
            if bad:
                self.checksum_errors += 1
                out.append(CorruptPacket(buf[i + 2], buf[i + 4], max(0, end - max(i, covered))))
                covered = max(covered, end)
                self.garbage_bytes += 1
                pos = i + 1
                continue
            out.append(Packet(buf[i + 2], buf[i + 4], bytes(buf[i + 5:end - 1]), max(0, end - max(i, covered))))
            covered = max(covered, end)
            pos = end

    @staticmethod
    def _completes(buf: bytearray, data: bytes) -> bool:
        """`data` completes the packet whose header is buffered in `buf`, with a good checksum."""
        head = bytes(buf[:_PREFIX_LEN]) + bytes(data[:max(0, _PREFIX_LEN - len(buf))])
        if len(head) < _PREFIX_LEN or not head.startswith(HEADER) or head[2] == 0xFF or head[3] < _MIN_LENGTH:
            return False
        end = _PREFIX_LEN + head[3]
        if not len(buf) < end <= len(buf) + len(data):
            return False
        whole = bytes(buf) + bytes(data[:end - len(buf)])
        return checksum(whole[2:end - 1]) == whole[end - 1]

    @staticmethod
    def _tail_packet(buf: bytearray, start: int) -> int:
        """Index of the first header at or after `start` whose packet has a good checksum and ends exactly at the
        end of `buf`; -1 if none."""
        n = len(buf)
        k = buf.find(HEADER, start)
        while 0 <= k <= n - _PREFIX_LEN - _MIN_LENGTH:
            if buf[k + 2] != 0xFF and k + _PREFIX_LEN + buf[k + 3] == n \
                    and checksum(memoryview(buf)[k + 2:n - 1]) == buf[n - 1]:
                return k
            k = buf.find(HEADER, k + 1)
        return -1
