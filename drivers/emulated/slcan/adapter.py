"""A pty that behaves as a Lawicel / CANable-style SLCAN (serial-line CAN) USB adapter, so that a controller's
unchanged python-can opens it as its USB-CAN adapter: the Lawicel ASCII protocol, frames paced at the CAN bit rate,
and the classic CAN frame (`CanFrame`) the nodes behind it exchange (docs/protocols/slcan.md)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from drivers.emulated.slcan.codec import encode_line, parse_line
from drivers.wire.ports import PtyPort, SerialDevicePort
from drivers.wire.server import InputFailures, ServerThread

__all__ = [
    "BITRATES",
    "CanFrame",
    "SlcanAdapter",
    "SlcanStats",
    "encode_frame",
    "frame_bits",
    "parse_frame",
]

log = logging.getLogger("servo-hil")

# `Sn` code -> bit/s (Lawicel: S0..S8)
BITRATES: dict[int, int] = {
    0: 10_000, 1: 20_000, 2: 50_000, 3: 100_000, 4: 125_000,
    5: 250_000, 6: 500_000, 7: 750_000, 8: 1_000_000,
}

_OK = b"\r"
_BEL = b"\x07"
_HEX = frozenset(b"0123456789abcdefABCDEF")
_MAX_LINE = 64            # longest valid line is 26 bytes (T + 8 id + 1 dlc + 16 data); longer is garbage
_BTR_CLOCK_HZ = 8_000_000  # SJA1000 at 16 MHz: the CAN clock its BTR registers divide; python-can requires 8 MHz
_TIMESTAMP_WRAP_MS = 60_000
_STD_MAX = 0x7FF
_EXT_MAX = 0x1FFF_FFFF

# status flags (`F`): bit 0 receive FIFO full (frames for the host lost), bit 1 transmit FIFO full
_FLAG_RX_FULL = 0x01
_FLAG_BUS_ERROR = 0x80    # bit 7: bus error (an error frame was seen)


@dataclass(frozen=True, slots=True)
class CanFrame:
    """A classic CAN 2.0 frame. `dlc` is the length a remote frame requests (None: 0 for a remote
    frame, len(data) for a data frame; given for a data frame, it must equal len(data))."""

    id: int
    data: bytes = b""
    extended: bool = False
    remote: bool = False
    dlc: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", bytes(self.data))
        top = _EXT_MAX if self.extended else _STD_MAX
        if not 0 <= self.id <= top:
            kind = "extended" if self.extended else "standard"
            raise ValueError(f"CAN id {self.id:#x} out of range 0..{top:#x} ({kind})")
        if len(self.data) > 8:
            raise ValueError(f"CAN frame carries at most 8 data bytes, got {len(self.data)}")
        if self.remote and self.data:
            raise ValueError("a remote frame carries no data")
        if self.dlc is not None:
            if not 0 <= self.dlc <= 8:
                raise ValueError(f"dlc must be 0..8, got {self.dlc}")
            if not self.remote and self.dlc != len(self.data):
                raise ValueError(f"dlc {self.dlc} does not match {len(self.data)} data bytes")

    @property
    def length(self) -> int:
        """The DLC on the wire: requested length of a remote frame, else the number of data bytes."""
        if self.dlc is not None:
            return self.dlc
        return len(self.data)


def frame_bits(frame: CanFrame) -> int:
    """Worst-case bits [bit] `frame` occupies on the wire, including bit stuffing and the 3-bit
    interframe space: g + 8n + 13 + floor((g + 8n - 1) / 4), with g = 34 (11-bit id) or 54 (29-bit
    id) stuffable control bits and n data bytes (0 for a remote frame) — the CAN 2.0A/B bound of
    Davis, Burns, Bril, Lukkien (2007). 8 data bytes: 135 bits standard, 160 extended."""
    g = 54 if frame.extended else 34
    n = 0 if frame.remote else len(frame.data)
    return g + 8 * n + 13 + (g + 8 * n - 1) // 4


def encode_frame(frame: CanFrame, timestamp_ms: int | None = None) -> bytes:
    """The line (with CR) a Lawicel adapter sends the host for a received `frame`; `timestamp_ms`
    (0..59999) appended as 4 hex digits when timestamps are on."""
    stamp = -1 if timestamp_ms is None else timestamp_ms % _TIMESTAMP_WRAP_MS
    return encode_line(frame.id, frame.data, frame.extended, frame.remote, frame.length, stamp)


def parse_frame(line: bytes) -> CanFrame:
    """The frame in a host's transmit command `line` (`t`/`T`/`r`/`R`, without CR); ValueError if
    it is malformed (wrong id width, id out of range, DLC not 0..8, data not exactly DLC bytes of hex)."""
    ident, data, extended, remote, dlc = parse_line(line if type(line) is bytes else bytes(line))
    if remote:
        return CanFrame(ident, b"", extended=extended, remote=True, dlc=dlc)
    return CanFrame(ident, data, extended=extended)


@dataclass(slots=True)
class SlcanStats:
    """Counters of one adapter (a snapshot when read through `SlcanAdapter.stats`)."""

    frames_from_host: int = 0   # frames the host transmitted that were accepted (z/Z)
    frames_to_host: int = 0     # frames written to the host
    errors: int = 0             # BEL replies: malformed lines, refused commands
    dropped: int = 0            # frames lost: sent to a closed channel, discarded by close, buffer overflow


_TO_HOST = 0
_FROM_HOST = 1


class SlcanAdapter(ServerThread):
    """The thread that plays a USB SLCAN adapter on `port` until `stop()`.

    `on_frame(frame, t)` is called from this thread for every frame the host transmits on an open
    channel, once the frame has been on the wire: `t` [s, time.monotonic()] is when its last bit
    was sent. It may call `send()` (e.g. an SDO reply). Whatever one frame raises in it, or one command
    line in the adapter, stays with that input (`InputFailures`): counted in
    `errors_isolated`, logged at WARNING with the line the host sent, a command line refused with BEL, a
    frame left with what the nodes sent before the failure; the adapter then serves the next line. Any
    other exception stops the adapter and is kept in `error` (the daemon checks it and stops).

    `bitrate` [bit/s] is the CAN bitrate the adapter starts with (None: `O` is refused until the
    host sets one with `S`/`s`, as on a Lawicel adapter). `hw_version`, `sw_version` (0..99) and
    `serial_number` (4 letters or digits) are what `V` and `N` report.

    `fifo_priority` (1..99, 0 = do not try): the thread asks for SCHED_FIFO at this priority (below the
    real-time loop's), else for 1 ns timer slack (`ServerThread`; `rt_mode` says which):
    the wire pacing wakes it at each frame's end, and a default thread's timeouts end up to its timer slack
    (prctl(2) PR_SET_TIMERSLACK) late and wait behind every other process.

    `timer(now)`, if set before `start()`, is called from this thread after every wake-up and returns
    when it wants to be called next [s, time.monotonic()] or None; it may `send()` and shares the
    errors rule of `on_frame`. It lets the owner run periodic work in this thread instead of a second
    one contending with it.
    """

    TX_QUEUE = 64           # host frames waiting for the wire before we stop reading the pty
    RX_BACKLOG = 4096       # frames for the host waiting for the wire before more are dropped
    OUT_LIMIT = 65536       # bytes for the host the pty has not taken yet before frames are dropped

    def __init__(self, port: PtyPort | SerialDevicePort, on_frame: Callable[[CanFrame, float], None],
                 name: str = "slcan", *, bitrate: int | None = None, hw_version: int = 1,
                 sw_version: int = 0, serial_number: str = "SH01", fifo_priority: int = 0) -> None:
        if not (0 <= hw_version <= 99 and 0 <= sw_version <= 99):
            raise ValueError(f"versions must be 0..99, got {hw_version}, {sw_version}")
        if len(serial_number) != 4 or not serial_number.isascii() or not serial_number.isalnum():
            raise ValueError(f"serial number must be 4 letters or digits, got {serial_number!r}")
        if bitrate is not None and not 0 < bitrate <= 1_000_000:
            raise ValueError(f"bitrate must be 1..1000000 bit/s, got {bitrate}")
        super().__init__(f"servo-hil-bus-{name}", fifo_priority)
        self.port = port
        self.on_frame = on_frame
        self.timer: Callable[[float], float | None] | None = None
        self.bitrate: int | None = bitrate
        self.is_open = False
        self.listen_only = False
        self.timestamps = False
        self.flags = 0
        # the last non-frame commands (without CR) and our replies, for diagnostics and tests
        self.commands: collections.deque[tuple[bytes, bytes]] = collections.deque(maxlen=256)
        self._version = f"{hw_version:02d}{sw_version:02d}".encode("ascii")
        self._serial = serial_number.encode("ascii")
        self._stats = SlcanStats()
        self.failures = InputFailures(f"slcan {name}:", text=True)
        self._stats_lock = threading.Lock()
        self._inbox: collections.deque[tuple[float, CanFrame, int]] = collections.deque()  # send() -> thread
        self._wire: collections.deque[tuple[float, int, CanFrame]] = collections.deque()  # (due, direction, frame)
        self._wire_free = 0.0       # when the last frame scheduled on the bus ends
        self._host_pending = 0      # host frames in _wire
        self._bus_pending = 0       # frames for the host in _wire
        self._t_open = 0.0
        self._in = bytearray()      # bytes from the host not yet run as commands
        self._line_overflow = False
        self._out = bytearray()     # bytes for the host the pty has not taken yet
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_lock = threading.Lock()   # send() vs stop() closing the wake pipe
        self._closed = False

    # ----------------------------------------------------------------- public API (any thread)

    @property
    def path(self) -> str:
        return self.port.path

    @property
    def errors_isolated(self) -> int:
        """Lines and frames whose handling raised (see the class docstring), for `status`."""
        return self.failures.count

    @property
    def stats(self) -> SlcanStats:
        with self._stats_lock:
            return dataclasses.replace(self._stats)

    def send(self, frame: CanFrame, lost_bits: int = 0, ready: float | None = None) -> None:
        """Put `frame` from a simulated node on the bus; the host gets it once it has crossed the
        wire, if the channel is open then (else it is counted in `stats.dropped`). Thread-safe,
        never blocks; frames go on the wire in the order of `send` calls.

        `lost_bits` [bit] of wire time go before it: a first copy destroyed by a bit error plus its
        error frame, which the CAN controller retransmits at once (status flag bit 7, bus error).

        `ready` [s, time.monotonic()]: when the node had the frame ready for the wire (None: now). A
        node answering a frame passes that frame's end (`on_frame`'s `t`), so that the time we take
        to compute the answer is not wire time: the answer's bits are due as if the node had answered
        at once, and it is written late only if computing it took longer than its wire time."""
        if not isinstance(frame, CanFrame):
            raise TypeError(f"expected a CanFrame, got {type(frame).__name__}")
        with self._wake_lock:
            if self._closed:
                self._count(dropped=1)
                return
            self._inbox.append((time.monotonic() if ready is None else ready, frame, lost_bits))
            if threading.get_ident() == self.ident:     # on_frame / timer: the loop takes the inbox next
                return
            with contextlib.suppress(BlockingIOError):  # a full pipe already wakes the thread
                os.write(self._wake_w, b"\0")

    def close(self) -> None:
        """`stop()`, once the thread ended: the port and the wake pipe close."""
        self.port.close()
        with self._wake_lock:
            self._closed = True
            os.close(self._wake_r)
            os.close(self._wake_w)

    # ----------------------------------------------------------------- the thread

    def serve(self) -> None:
        # every step is skipped when it has nothing to do: the loop wakes at each frame's end on the wire
        fd, stop_r, wake_r = self.port.fileno(), self.stop_fd, self._wake_r
        wire, inbox, monotonic, wait = self._wire, self._inbox, time.monotonic, select.select
        all_readers, control = [stop_r, wake_r, fd], [stop_r, wake_r]
        timer_due: float | None = None
        while True:
            if inbox:
                self._take_inbox()
            due = wire[0][0] if wire else None
            if timer_due is not None and (due is None or timer_due < due):
                due = timer_due
            timeout = None if due is None else max(0.0, due - monotonic())
            readers = all_readers if self._host_pending < self.TX_QUEUE else control
            ready = wait(readers, [fd] if self._out else (), (), timeout)[0]
            if ready:
                if stop_r in ready:
                    return
                if wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 4096)
                if fd in ready:
                    self._in += self.port.read()
            if self._in:
                self._feed(monotonic())
            if self._out:
                self._flush(fd)         # replies first: the host must not wait for on_frame
            if inbox:
                self._take_inbox()
            if wire and wire[0][0] <= monotonic():
                self._run_due(monotonic(), fd)
                if self._in:
                    self._feed(monotonic())     # lines held back while the transmit queue was full
                if self._out:
                    self._flush(fd)
            if self.timer is not None:
                timer_due = self.timer(monotonic())

    def _count(self, **deltas: int) -> None:
        with self._stats_lock:
            for key, n in deltas.items():
                setattr(self._stats, key, getattr(self._stats, key) + n)

    def _schedule(self, ready: float, direction: int, frame: CanFrame, lost_bits: int = 0) -> None:
        assert self.bitrate is not None  # the channel is open
        start = max(ready, self._wire_free) + lost_bits / self.bitrate
        self._wire_free = start + frame_bits(frame) / self.bitrate
        self._wire.append((self._wire_free, direction, frame))

    def _take_inbox(self) -> None:
        while self._inbox:
            t, frame, lost_bits = self._inbox.popleft()
            if not self.is_open or self._bus_pending >= self.RX_BACKLOG:
                if self.is_open:
                    self.flags |= _FLAG_RX_FULL
                self._count(dropped=1)
                continue
            if lost_bits:
                self.flags |= _FLAG_BUS_ERROR
            self._schedule(t, _TO_HOST, frame, lost_bits)
            self._bus_pending += 1

    def _run_due(self, now: float, fd: int) -> None:
        while self._wire and self._wire[0][0] <= now:
            due, direction, frame = self._wire.popleft()
            if direction == _FROM_HOST:
                self._host_pending -= 1
                self._flush(fd)         # what is due for the host goes out before a node takes its time
                try:
                    self.on_frame(frame, due)
                except Exception as exc:
                    self.failures.record(exc, ("frame", frame.id), encode_frame(frame), "frame failed in the nodes")
                continue
            self._bus_pending -= 1
            if len(self._out) >= self.OUT_LIMIT:   # the host is not reading
                self.flags |= _FLAG_RX_FULL
                self._count(dropped=1)
                continue
            stamp = int((due - self._t_open) * 1000.0) % _TIMESTAMP_WRAP_MS if self.timestamps else None
            self._out += encode_frame(frame, stamp)
            with self._stats_lock:
                self._stats.frames_to_host += 1

    def _flush(self, fd: int) -> None:
        if not self._out:
            return
        try:
            n = os.write(fd, self._out)
        except BlockingIOError:
            return
        del self._out[:n]

    def _feed(self, now: float) -> None:
        """Run the complete lines received so far, until TX_QUEUE host frames wait for the wire."""
        while self._host_pending < self.TX_QUEUE:
            end = self._in.find(b"\r")
            if end < 0:
                if len(self._in) > _MAX_LINE:   # a runaway line: keep nothing, refuse it at its CR
                    self._in.clear()
                    self._line_overflow = True
                return
            line = bytes(self._in[:end]).replace(b"\n", b"")
            del self._in[:end + 1]
            overflow, self._line_overflow = self._line_overflow or len(line) > _MAX_LINE, False
            try:
                reply = _BEL if overflow else self._execute(line, now)
            except Exception as exc:    # the adapter's answer to a command it cannot carry out (Lawicel: BEL)
                self.failures.record(exc, ("command", line[:1]), line + b"\r", "command answered BEL")
                reply = _BEL
            if reply == _BEL:
                self._count(errors=1)
            self._out += reply

    def _execute(self, line: bytes, now: float) -> bytes:
        """Run one command line (without CR); return the reply bytes."""
        if line[:1] in (b"t", b"T", b"r", b"R"):
            return self._transmit(line, now)
        reply = self._command(line)
        self.commands.append((line, reply))
        return reply

    def _transmit(self, line: bytes, now: float) -> bytes:
        if not self.is_open or self.listen_only:
            return _BEL
        try:
            frame = parse_frame(line)
        except ValueError:
            return _BEL
        self._schedule(now, _FROM_HOST, frame)
        self._host_pending += 1
        with self._stats_lock:
            self._stats.frames_from_host += 1
        return b"Z\r" if frame.extended else b"z\r"

    def _command(self, line: bytes) -> bytes:
        cmd, arg = line[:1], line[1:]
        if line == b"":
            return _OK
        if cmd in (b"O", b"L") and not arg:
            if self.is_open or self.bitrate is None:
                return _BEL
            self.is_open, self.listen_only = True, cmd == b"L"
            self._t_open = time.monotonic()
            self._wire_free = 0.0
            self.flags = 0
            return _OK
        if line == b"C":
            if not self.is_open:
                return _BEL
            self._close()
            return _OK
        if cmd == b"S":
            if self.is_open or len(arg) != 1 or arg[0] - 0x30 not in BITRATES:
                return _BEL
            self.bitrate = BITRATES[arg[0] - 0x30]
            return _OK
        if cmd == b"s":
            rate = _btr_bitrate(arg)
            if self.is_open or rate is None:
                return _BEL
            self.bitrate = rate
            return _OK
        if cmd == b"Z":
            if self.is_open or arg not in (b"0", b"1"):
                return _BEL
            self.timestamps = arg == b"1"
            return _OK
        if line == b"V":
            return b"V" + self._version + _OK
        if line == b"v":
            return b"v" + self._version + _OK
        if line == b"N":
            return b"N" + self._serial + _OK
        if line == b"F":
            if not self.is_open:
                return _BEL
            flags, self.flags = self.flags, 0
            return f"F{flags:02X}\r".encode("ascii")
        return _BEL

    def _close(self) -> None:
        """`C`: the controller leaves the bus; whatever waited for the wire or for the USB link is lost."""
        dropped = len(self._wire)   # frames sent to the host afterwards are dropped by _take_inbox
        self._wire.clear()
        self._host_pending = self._bus_pending = 0
        self.is_open = self.listen_only = False
        if dropped:
            self._count(dropped=dropped)
        self._out.clear()


def _btr_bitrate(arg: bytes) -> int | None:
    """Bitrate [bit/s] of SJA1000 BTR0/BTR1 given as 4 hex digits `xxyy`, or None if invalid."""
    if len(arg) != 4 or not set(arg) <= _HEX:
        return None
    btr0, btr1 = int(arg[:2], 16), int(arg[2:], 16)
    brp = (btr0 & 0x3F) + 1
    tseg1 = (btr1 & 0x0F) + 1
    tseg2 = ((btr1 >> 4) & 0x07) + 1
    rate = round(_BTR_CLOCK_HZ / (brp * (1 + tseg1 + tseg2)))
    return rate if 1_000 <= rate <= 1_000_000 else None
