"""Serve one Dynamixel bus on one port: read, parse, execute, answer paced like the wire, and run the servos'
firmware housekeeping between packets (docs/protocols/dynamixel.md, "The bus thread")."""

from __future__ import annotations

import abc
import collections
import contextlib
import json
import logging
import os
import select
import threading
import time
from collections.abc import Callable

from drivers.emulated.dynamixel.bus import DynamixelBus, bursts
from drivers.emulated.dynamixel.protocol import Parser
from drivers.wire.ports import PacedWriter, PortError, PtyPort, SerialDevicePort, wire_time_s
from drivers.wire.server import ServerThread

log = logging.getLogger("servo-hil")


class BusThread(ServerThread, abc.ABC):
    """A thread that serves a bus of simulated servos on the controller's `port` until `stop()`
    (`ServerThread`: real-time scheduling, `error`, `stop_fd`).

    Subclasses implement `serve()` (returning once `stop_fd` is readable)."""

    def __init__(self, bus: DynamixelBus, port: PtyPort, name: str,
                 batch: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 fifo_priority: int = 0):
        super().__init__(f"servo-hil-bus-{name}", fifo_priority)
        self.bus = bus
        self.port = port
        self.batch = batch      # what one packet changes reaches the simulation at one tick (a Sync Write)
        self.lock = threading.Lock()   # the servos are touched by this thread and by rig `reset`
        self._closing: list = [port]   # closed by stop()
        self.role = ""                  # banner detail: line speed or what it mirrors (set by attach)

    @property
    def path(self) -> str:
        return self.port.path

    @property
    def errors_isolated(self) -> int:
        """Packets whose handling raised, left unanswered (DynamixelBus.handle), and received bytes the parser
        raised on (`parse`), for `status`."""
        return self.bus.errors_isolated

    @property
    def summary(self) -> str:
        """The start-up banner's detail: IDs and line speed."""
        ids = ", ".join(str(s.id) for s in self.bus.servos)
        return f"IDs {ids}, {self.role}" if self.role else f"IDs {ids}"

    def close(self) -> None:
        for part in self._closing:
            part.close()

    def parse(self, parser: Parser, data: bytes, now: float) -> list:
        """`parser.feed(data, now)`. Should the parser raise on some bytes, they are dropped with whatever partial
        packet it held (silence: the controller times out and resends, as after line noise), counted and logged
        with the bus's isolated packets, and the thread reads on."""
        try:
            return parser.feed(data, now)
        except Exception as exc:
            parser.reset()
            self.bus.failures.record(exc, "parser", data, "bytes dropped")
            return []

    @abc.abstractmethod
    def serve(self) -> None:
        """Serve the port until `stop_fd` is readable."""


def _schedstat(fd: int) -> tuple[int, int]:
    """The calling thread's total time runnable but waiting for a CPU [ns] and the times it was put on a CPU, from
    its open /proc/thread-self/schedstat `fd` (sched-stats.rst)."""
    _, delay, slices = os.pread(fd, 64, 0).split()
    return int(delay), int(slices)


class DynamixelServer(BusThread):
    """The thread that answers for every servo of `bus` on `port`."""

    # a paced reply whose last byte leaves this much after its due time [s] is counted late: the host held the thread
    # (dynamixel-sdk waits tens of ms for a status packet: port_handler.py setPacketTimeout, LATENCY_TIMER)
    LATE_S = 1e-3
    TRACE_ROWS = 1 << 17

    def __init__(self, bus: DynamixelBus, port: PtyPort | SerialDevicePort, fast: bool = False,
                 housekeeping_s: float = 0.01, name: str = "dynamixel",
                 batch: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 fifo_priority: int = 0):
        super().__init__(bus, port, name, batch, fifo_priority)
        self.fast = fast
        self.housekeeping_s = housekeeping_s
        self.parser = Parser()
        self.writer = PacedWriter(port)
        self._wire_free = 0.0   # when the controller's previous instruction finished on the wire
        self.late_replies = 0       # paced replies late by over LATE_S (see wire_stats)
        self.max_reply_late_s = 0.0
        self.replies_dropped = 0    # replies nobody read (the port refused them)
        # $SERVO_HIL_WIRE_TRACE (a directory): each paced reply's times are kept (the last TRACE_ROWS) and written
        # to <dir>/<thread name>.jsonl as the thread ends, for `servo-hil bench lost-replies`
        self.trace_dir = os.environ.get("SERVO_HIL_WIRE_TRACE") or None
        self.trace: collections.deque | None = collections.deque(maxlen=self.TRACE_ROWS) if self.trace_dir else None
        self._wake = (0.0, 0, 0)   # traced: (thread in poll() [s], then its run delay [ns] and CPU slices to wake)

    @property
    def wire_stats(self) -> dict[str, float]:
        """What this thread saw on the wire, for `status` (`bus_wire`) and `servo-hil bench soak`: partial packets
        dropped at the inter-byte gap, CRC errors and garbage bytes (`Parser`); paced replies whose last byte left
        over LATE_S behind its due time counted from when the thread woke with the request, and the latest [ms];
        replies dropped because nobody read the port."""
        p = self.parser
        return {"partial_packets_dropped": p.timeouts, "crc_errors": p.crc_errors, "garbage_bytes": p.garbage_bytes,
                "late_replies": self.late_replies, "max_reply_late_ms": self.max_reply_late_s * 1e3,
                "replies_dropped": self.replies_dropped}

    def serve(self) -> None:
        fd, stop_r = self.port.fileno(), self.stop_fd
        read, monotonic = self.port.read, time.monotonic
        poller = select.poll()   # registered once: a wake is one poll() and one read()
        poller.register(fd, select.POLLIN)
        poller.register(stop_r, select.POLLIN)
        servos = self.bus.servos
        # one servo's housekeeping at a time, round robin: each servo every housekeeping_s, and never
        # all of them between two packets
        step = self.housekeeping_s / len(servos)
        due, turn = monotonic(), 0
        # traced: when the thread went into poll(), then how long it was runnable but not running and how often it
        # was put on a CPU until it held the GIL again (the kernel's schedstat): a late wake owes the first to the
        # CPU, and shows many slices where it waited for the GIL (a timed wait of the switch interval each)
        sched = os.open("/proc/thread-self/schedstat", os.O_RDONLY) if self.trace is not None else -1
        try:
            while True:
                if sched >= 0:
                    polled, (delay0, slices0) = monotonic(), _schedstat(sched)
                events = poller.poll(max(0.0, due - monotonic()) * 1e3)   # [ms]
                now = monotonic()   # the earliest moment we know the bytes were there
                if sched >= 0:
                    delay, slices = _schedstat(sched)
                    self._wake = (polled, delay - delay0, slices - slices0)
                if self._serve_events(events, stop_r, read, now):
                    return
                if now >= due:
                    with self.lock:
                        servos[turn % len(servos)].housekeeping()
                    turn += 1
                    due = max(due + step, now)
        finally:
            if sched >= 0:
                os.close(sched)

    def _serve_events(self, events: list, stop_r: int, read: Callable[[], bytes], now: float) -> bool:
        """Read and answer what poll() reported at `now`; True when `stop_r` asks the thread to end."""
        for f, _ in events:
            if f == stop_r:
                return True
            data = read()   # a hang-up or error shows here too
            if data:
                self._answer(self.parse(self.parser, data, now), now)
        return False

    def _answer(self, packets: list, received: float) -> None:
        baud = self.port.baud()   # the rate those bytes came at: one query per read, not per packet
        for packet in packets:
            with self.lock, self.batch():
                replies = self.bus.handle(packet, baud)
            if not replies:
                if baud and not self.fast:
                    self._wire_free = max(received, self._wire_free) + wire_time_s(packet.wire_len, baud)
                continue
            if self.fast or not baud:
                self._write(b"".join([tx.data for tx in replies]), 0.0, None)   # one syscall for them all
                continue
            # the pty delivers an instruction at once; on the wire it takes its bytes' time, after
            # whatever the controller sent before it (a Sync Write just ahead of a Sync Read)
            end = max(received, self._wire_free) + wire_time_s(packet.wire_len, baud)
            self._wire_free = end
            handled = time.monotonic() if self.trace is not None else 0.0
            for data, offset_s in bursts(replies, baud):
                due = end + offset_s
                last = self._write(data, due, baud)
                self._wire_free = max(self._wire_free, last)
                late = last - due - wire_time_s(len(data), baud)
                if late > self.LATE_S:
                    self.late_replies += 1
                self.max_reply_late_s = max(self.max_reply_late_s, late)
                if self.trace is not None:
                    self.trace.append((packet.instruction, *self._wake, received, handled, due,
                                       self.writer.first_write, last, len(data)))

    def finish(self) -> None:
        """Write the trace, if one was asked for: a JSON line per paced reply, times on time.monotonic() [s]."""
        if self.trace is None or self.trace_dir is None:
            return
        keys = ("instruction", "polled", "run_delay_ns", "wake_slices", "received", "handled", "due", "first_write",
                "last_write", "bytes")
        try:
            with open(os.path.join(self.trace_dir, f"{self.name}.jsonl"), "w") as f:
                f.writelines(json.dumps(dict(zip(keys, row, strict=True))) + "\n" for row in self.trace)
        except OSError as exc:
            log.warning("%s: wire trace not written: %s", self.name, exc)

    def _write(self, data: bytes, start: float, baud: int | None) -> float:
        try:
            return self.writer.write_at(data, start, baud)
        except PortError as exc:
            # nobody reads the port (controller gone): the reply is lost, as on an open bus
            log.debug("reply dropped: %s", exc)
            self.replies_dropped += 1
            return start

