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


def _header_prefix_len(buf: bytes | bytearray, start: int) -> int:
    """Length of the longest suffix of buf[start:] that could still grow into a header (0..3)."""
    if buf.endswith(b"\xff\xff\xfd", start):
        return 3
    if buf.endswith(b"\xff\xff", start):
        return 2
    if buf.endswith(b"\xff", start):
        return 1
    return 0


class Parser:
    """Resynchronising receive-side parser (Protocol 2.0 §Instruction Packet; §Packet Process, "Processing Order
    of Reception").

    Feed it bytes as they arrive; it returns complete packets. It searches for FF FF FD 00 (FF FF FD FD and any
    other reserved byte are not headers), reads LEN (< 3 is impossible: that header is dropped), checks the CRC
    over the stuffed bytes and only then unstuffs. A CRC failure yields a CorruptPacket and the search restarts at
    the byte after the failed header, because a corrupt LEN may have swallowed real packets. Status packets
    (instruction 0x55, other devices' replies on a shared bus) are dropped and counted unless `accept_status`.

    Inter-byte gap (Protocol 2.0 §Instruction Packet): if over `inter_byte_timeout_s` seconds passed since the
    previous bytes arrived, a buffered partial packet is dropped and the new bytes are parsed fresh, unless they
    complete it with a good CRC. The gap is measured between reads on the reader's clock, and bytes a controller
    wrote at once can reach it in two reads with the host's scheduling between them (a pty hands writes over in a
    kernel worker, pty(7); a USB serial adapter in transfers; the reader itself may wake late): a packet whose CRC
    matches across such a gap was not cut by a silent line. Bytes read together carry no arrival times (a reader
    that was late reads a stale partial packet and the next packet at once), so the gap is also inferred from the
    bytes: when what has arrived ends with a complete packet with a good CRC whose header lies inside the span an
    earlier header claims (incomplete, or complete with a bad CRC), the earlier header is taken as stale, as if the
    gap had been seen: a controller that sent a whole packet and waits for its answer has left the line silent. Only
    a complete, CRC-checked packet at the very end of the received bytes does this, so a packet still arriving is
    never cut.

    Python dynamixel-sdk 4.1.0 never stuffs (txPacket discards addStuffing's result), so its packets may carry a
    raw FF FF FD 00 in their data. That is harmless because the body is taken by LEN, not searched; raw
    FF FF FD FD in such data is unstuffed to FF FF FD here, as the e-manual receiving rule (and a servo) does.

    Memory: between calls at most one incomplete packet is kept (< MAX_WIRE_LEN = 65542 bytes).

    Counters: garbage_bytes (bytes skipped while hunting for a header, including rejected headers and the rescanned
    bytes of CRC-failed packets), crc_errors, status_packets_ignored, timeouts (partial packets dropped by the gap
    rule, measured or inferred).
    """

    def __init__(self, inter_byte_timeout_s: float = 1.5e-3, *, accept_status: bool = False) -> None:
        """inter_byte_timeout_s: gap in seconds after which a partial packet is dropped (e-manual: 1.5 ms).
        accept_status: return status packets (0x55) instead of dropping them; for tools and tests that listen to
        replies. Fast Sync/Bulk Read replies are not stuffed and must not be decoded as normal status packets.
        """
        self.inter_byte_timeout_s = inter_byte_timeout_s
        self.accept_status = accept_status
        self.garbage_bytes = 0
        self.crc_errors = 0
        self.status_packets_ignored = 0
        self.timeouts = 0
        self._buf = bytearray()  # unparsed tail: empty, a header prefix, or one incomplete packet
        self._need = 0  # len(_buf) below which parsing cannot progress
        self._covered = 0  # leading bytes of _buf whose wire time a returned packet already counted
        self._last = 0.0  # arrival time of the last non-empty chunk

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a packet."""
        return len(self._buf)

    def reset(self) -> None:
        """Forget any partial packet (counters are kept)."""
        self._buf.clear()
        self._need = 0

    def feed(self, data: bytes, now: float) -> list[Packet | CorruptPacket]:
        """Add bytes that arrived at time `now` (seconds, monotonic) and return the packets they completed, in
        wire order. An empty `data` only applies the gap rule.
        """
        buf = self._buf
        if buf and now - self._last > self.inter_byte_timeout_s and not self._completes(buf, data):  # e-manual: 1.5 ms
            if buf.startswith(HEADER):
                self.timeouts += 1
            else:
                self.garbage_bytes += len(buf)
            buf.clear()
            self._need = 0
            self._covered = 0
        if not data:
            return []
        self._last = now
        out: list[Packet | CorruptPacket] = []
        if buf:
            buf += data
            if len(buf) < self._need and self._tail_packet(buf, 1) < 0:
                return out
            keep = self._scan(buf, out)
            del buf[:keep]
            self._covered = max(0, self._covered - keep)
        else:
            if type(data) is not bytes:
                data = bytes(data)
            # the chunk is exactly one good instruction packet (the usual case on a quiet bus): in C
            packet = whole_packet(data, Packet)
            if packet is not None:
                out.append(packet)
                return out
            self._covered = 0
            keep = self._scan(data, out)
            if keep < len(data):
                buf += data[keep:]
            self._covered = max(0, self._covered - keep)
        return out

    def _scan(self, buf: bytes | bytearray, out: list[Packet | CorruptPacket]) -> int:
        """Parse complete packets from `buf` into `out`; return the index from which bytes must be kept.

        Sets self._need to the buffer length (counted from that index) needed before a rescan can progress.
        """
        n = len(buf)
        pos = 0
        covered = self._covered
        find = buf.find
        tail = -2   # start of the complete packet that ends the bytes (-1: none); found on first need
        while True:
            i = find(HEADER, pos)
            if i < 0:
                keep = n - _header_prefix_len(buf, pos)
                self.garbage_bytes += keep - pos
                self._need = 0
                self._covered = covered
                return keep
            self.garbage_bytes += i - pos
            if n - i < _PREFIX_LEN:
                self._need = _PREFIX_LEN
                self._covered = covered
                return i
            length = buf[i + 5] | (buf[i + 6] << 8)
            if length < _MIN_LENGTH:  # impossible LEN: not a header after all
                self.garbage_bytes += 1
                pos = i + 1
                continue
            end = i + _PREFIX_LEN + length
            bad = end > n or crc16(buf[i : end - 2]) != buf[end - 2] | (buf[end - 1] << 8)
            if bad:
                if tail == -2:
                    tail = self._tail_packet(buf, i + 1)
                if i < tail < end:   # the line went silent after a whole packet: this header was stale
                    self.timeouts += 1
                    self.garbage_bytes += tail - i
                    pos = tail
                    continue
            if end > n:
                self._need = _PREFIX_LEN + length
                self._covered = covered
                return i
            if bad:
                # The LEN field may be the corrupt byte: resynchronise from the next byte, not from `end`.
                self.crc_errors += 1
                out.append(CorruptPacket(buf[i + 4], buf[i + 7], max(0, end - max(i, covered))))
                covered = max(covered, end)
                self.garbage_bytes += 1
                pos = i + 1
                continue
            pos = end
            instruction = buf[i + 7]
            if instruction == _STATUS and not self.accept_status:
                self.status_packets_ignored += 1
                continue
            body = buf[i + 7 : end - 2]  # instruction + params, still stuffed
            if _STUFFED in body:
                body = body.replace(_STUFFED, _STUFF_PATTERN)
            out.append(Packet(buf[i + 4], instruction, bytes(body[1:]), max(0, end - max(i, covered))))
            covered = max(covered, end)

    @staticmethod
    def _completes(buf: bytes | bytearray, data: bytes) -> bool:
        """`data` completes the packet whose header (or the start of it) is buffered in `buf`, with a good CRC."""
        head = bytes(buf) + bytes(data[:_PREFIX_LEN])
        if len(head) < _PREFIX_LEN or not head.startswith(HEADER):
            return False
        length = head[5] | (head[6] << 8)
        end = _PREFIX_LEN + length
        if length < _MIN_LENGTH or not len(buf) < end <= len(buf) + len(data):
            return False
        whole = bytes(buf) + bytes(data[:end - len(buf)])
        return crc16(whole[:end - 2]) == whole[end - 2] | (whole[end - 1] << 8)

    @staticmethod
    def _tail_packet(buf: bytes | bytearray, start: int) -> int:
        """Index of the first header at or after `start` whose packet is complete, has a good CRC and ends
        exactly at the end of `buf`; -1 if there is none."""
        n = len(buf)
        k = buf.find(HEADER, start)
        while 0 <= k <= n - _PREFIX_LEN - _MIN_LENGTH:
            if k + _PREFIX_LEN + (buf[k + 5] | (buf[k + 6] << 8)) == n \
                    and crc16(buf[k : n - 2]) == buf[n - 2] | (buf[n - 1] << 8):
                return k
            k = buf.find(HEADER, k + 1)
        return -1
