"""The resynchronising receive-side parser every length-prefixed serial frame shares (Dynamixel Protocol 2.0, the
FF FF frame of Dynamixel Protocol 1.0 and Feetech): hunting for a header, a check failure that resynchronises from
the byte after the failed header, the inter-byte gap rule and wire-time accounting. A protocol's subclass says
where its frame ends, how it is checked and what packet it makes (docs/protocols/dynamixel.md, "Packets")."""

from __future__ import annotations

from typing import Any


class ResyncParser:
    """Feed it bytes as they arrive; it returns complete packets in wire order.

    It searches for HEADER, asks `_frame_end` where the frame ends (-1: not a header after all, that byte is
    dropped) and checks it (`_check_ok`). A failed check yields a corrupt packet and the search restarts at the
    byte after the failed header, because a corrupt length may have swallowed real packets.

    Inter-byte gap: if over `inter_byte_timeout_s` seconds passed since the previous bytes arrived, a buffered
    partial packet is dropped and the new bytes are parsed fresh, unless they complete it with a good check (a pty
    hands one write over in two reads when the kernel's worker runs between them, pty(7)). Bytes read together
    carry no arrival times, so the gap is also inferred from the bytes: when what has arrived ends with a complete,
    good packet whose header lies inside the span an earlier header claims, the earlier header is taken as stale: a
    controller that sent a whole packet and waits for its answer has left the line silent. Only a good packet at
    the very end of the received bytes does this, so a packet still arriving is never cut.

    Wire time: each packet's `wire_len` counts the bytes the line carried for it (header to check), less what a
    packet returned before already covered, so the wire time summed over the packets never exceeds the bytes that
    arrived.

    Counters: garbage_bytes (bytes skipped while hunting for a header, rejected headers and the rescanned bytes of
    failed packets), crc_errors, timeouts (partial packets dropped by the gap rule, measured or inferred).
    Memory: between calls at most one incomplete packet is kept.
    """

    HEADER: bytes = b""
    PREFIX_LEN = 0       # bytes from the header's first to the last one `_frame_end` reads
    MIN_LENGTH = 0       # the smallest frame past the prefix: `_frame_end` never returns less than i + these two
    STALE_MIN = 0        # a dropped partial packet of this many bytes or more that starts with HEADER is a timeout

    def __init__(self, inter_byte_timeout_s: float) -> None:
        self.inter_byte_timeout_s = inter_byte_timeout_s
        self.garbage_bytes = 0
        self.crc_errors = 0
        self.timeouts = 0
        self._buf = bytearray()  # unparsed tail: empty, a header prefix, or one incomplete packet
        self._need = 0           # len(_buf) below which parsing cannot progress
        self._covered = 0        # leading bytes of _buf whose wire time a returned packet already counted
        self._last = 0.0         # arrival time of the last non-empty chunk [s]

    # ------------------------------------------------------------------ what a protocol says
    def _frame_end(self, buf: bytes | bytearray, i: int) -> int:
        """End of the frame whose header is at `i` (PREFIX_LEN bytes are there); -1 if it cannot be a header."""
        raise NotImplementedError

    def _check_ok(self, buf: bytes | bytearray, i: int, end: int) -> bool:
        """The frame buf[i:end] carries a good checksum or CRC."""
        raise NotImplementedError

    def _packet(self, buf: bytes | bytearray, i: int, end: int, wire_len: int) -> Any:
        """The packet of the good frame buf[i:end]; None to drop it (its bytes stay uncovered)."""
        raise NotImplementedError

    def _corrupt(self, buf: bytes | bytearray, i: int, end: int, wire_len: int) -> Any:
        """The corrupt packet of the failed frame buf[i:end]."""
        raise NotImplementedError

    def _whole(self, data: bytes) -> Any:
        """The packet if `data` is exactly one good packet (a fast path), else None: then `data` is scanned."""
        return None

    # ------------------------------------------------------------------ the parser
    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a packet."""
        return len(self._buf)

    def reset(self) -> None:
        """Forget any partial packet (counters are kept)."""
        self._buf.clear()
        self._need = 0
        self._covered = 0

    def feed(self, data: bytes, now: float) -> list:
        """Add bytes that arrived at time `now` (seconds, monotonic) and return the packets they completed, in
        wire order. An empty `data` only applies the gap rule."""
        buf = self._buf
        if buf and now - self._last > self.inter_byte_timeout_s and not self._completes(buf, data):
            if buf.startswith(self.HEADER) and len(buf) >= self.STALE_MIN:
                self.timeouts += 1
            else:
                self.garbage_bytes += len(buf)
            buf.clear()
            self._need = 0
            self._covered = 0
        if not data:
            return []
        self._last = now
        out: list = []
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
            packet = self._whole(data)   # the chunk is exactly one good packet: the usual case on a quiet bus
            if packet is not None:
                out.append(packet)
                return out
            self._covered = 0
            keep = self._scan(data, out)
            if keep < len(data):
                buf += data[keep:]
            self._covered = max(0, self._covered - keep)
        return out

    def _header_prefix_len(self, buf: bytes | bytearray, start: int) -> int:
        """Length of the longest suffix of buf[start:] that could still grow into a header."""
        header = self.HEADER
        for k in range(len(header) - 1, 0, -1):
            if buf.endswith(header[:k], start):
                return k
        return 0

    def _scan(self, buf: bytes | bytearray, out: list) -> int:
        """Parse complete packets from `buf` into `out`; return the index from which bytes must be kept.

        Sets self._need to the buffer length (counted from that index) needed before a rescan can progress.
        """
        n = len(buf)
        pos = 0
        covered = self._covered
        find = buf.find
        header = self.HEADER
        prefix = self.PREFIX_LEN
        tail = -2   # start of the complete packet that ends the bytes (-1: none); found on first need
        while True:
            i = find(header, pos)
            if i < 0:
                keep = n - self._header_prefix_len(buf, pos)
                self.garbage_bytes += keep - pos
                self._need = 0
                self._covered = covered
                return keep
            self.garbage_bytes += i - pos
            if n - i < prefix:
                self._need = prefix
                self._covered = covered
                return i
            end = self._frame_end(buf, i)
            if end < 0:   # not a header after all
                self.garbage_bytes += 1
                pos = i + 1
                continue
            bad = end > n or not self._check_ok(buf, i, end)
            if bad:
                if tail == -2:
                    tail = self._tail_packet(buf, i + 1)
                if i < tail < end:   # the line went silent after a whole packet: this header was stale
                    self.timeouts += 1
                    self.garbage_bytes += tail - i
                    pos = tail
                    continue
            if end > n:
                self._need = end - i
                self._covered = covered
                return i
            if bad:
                # the length may be the corrupt byte: resynchronise from the next byte, not from `end`
                self.crc_errors += 1
                out.append(self._corrupt(buf, i, end, max(0, end - max(i, covered))))
                covered = max(covered, end)
                self.garbage_bytes += 1
                pos = i + 1
                continue
            pos = end
            packet = self._packet(buf, i, end, max(0, end - max(i, covered)))
            if packet is not None:
                out.append(packet)
                covered = max(covered, end)

    def _completes(self, buf: bytes | bytearray, data: bytes) -> bool:
        """`data` completes the packet whose header (or the start of it) is buffered in `buf`, with a good check."""
        prefix = self.PREFIX_LEN
        head = bytes(buf[:prefix]) + bytes(data[:max(0, prefix - len(buf))])
        if len(head) < prefix or not head.startswith(self.HEADER):
            return False
        end = self._frame_end(head, 0)
        if end < 0 or not len(buf) < end <= len(buf) + len(data):
            return False
        whole = bytes(buf) + bytes(data[:end - len(buf)])
        return self._check_ok(whole, 0, end)

    def _tail_packet(self, buf: bytes | bytearray, start: int) -> int:
        """Index of the first header at or after `start` whose packet is complete, good and ends exactly at the
        end of `buf`; -1 if there is none."""
        n = len(buf)
        header = self.HEADER
        k = buf.find(header, start)
        while 0 <= k <= n - self.PREFIX_LEN - self.MIN_LENGTH:
            if self._frame_end(buf, k) == n and self._check_ok(buf, k, n):
                return k
            k = buf.find(header, k + 1)
        return -1
