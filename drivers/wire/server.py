"""What every bus server of a rig is (`BusServer`), the real-time thread every one of them runs (`ServerThread`), and
what a server does with an input whose handling raised (`InputFailures`); docs/protocols/wire.md."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["BusServer", "InputFailures", "ServerThread"]

log = logging.getLogger("servo-hil")


@runtime_checkable
class BusServer(Protocol):
    """A bus of simulated devices that controllers reach at `path`."""

    name: str

    @property
    def path(self) -> str:
        """Where controllers connect: a pty or device path, a ZeroMQ endpoint."""
        ...

    @property
    def summary(self) -> str:
        """One line for the start-up banner: the devices served and how (line speed, what is mirrored)."""
        ...

    @property
    def error(self) -> BaseException | None:
        """What stopped the server (or a thread it depends on), if anything; the daemon polls it."""
        ...

    @property
    def errors_isolated(self) -> int:
        """Inputs (packets, frames, requests) whose handling raised and that were answered as the device answers
        what it cannot carry out, then left behind (`InputFailures`); `status` reports it per bus."""
        ...

    def start(self) -> None:
        """Serve from now on (in the server's own threads)."""
        ...

    def stop(self, timeout: float = 1.0) -> None:
        """Stop serving and release what the server holds (ports, sockets) within `timeout` [s]; idempotent."""
        ...


class InputFailures:
    """The inputs of one server whose handling raised: each is counted (`count`) and logged at WARNING with the
    input's bytes, once per kind of failure (exception type and `kind`, e.g. the instruction; later ones of the
    same kind at DEBUG), so that one bad input, or a stream of them, is one line in the log. The server answers
    it as the device answers what it cannot carry out (silence, an error reply, an abort code) and serves the
    next input: a controller sending garbage must not take the bus down."""

    LOGGED_BYTES = 48     # bytes of an input shown in its log line
    MAX_KINDS = 4096      # kinds remembered as logged (a fuzzer's variety must not grow memory)

    def __init__(self, what: str, text: bool = False):
        """`what` names the input in the log line, e.g. "dynamixel packet"; `text`: the inputs are lines of ASCII
        (SLCAN), shown as such rather than in hex."""
        self.what = what
        self.text = text
        self.count = 0
        self._logged: set[tuple] = set()

    def record(self, exc: BaseException, kind: object, data: bytes, answer: str) -> None:
        """Input `data` raised `exc`; `answer` says what the device made of it (e.g. "not answered")."""
        self.count += 1
        key = (type(exc), kind)
        level = logging.DEBUG if key in self._logged else logging.WARNING
        if len(self._logged) < self.MAX_KINDS:
            self._logged.add(key)
        text = str(exc)
        if len(text) > 200:
            text = f"{text[:200]}..."
        shown = self.ascii(data) if self.text else self.hex(data)
        log.log(level, "%s %s (%s: %s): %s", self.what, answer, type(exc).__name__, text, shown)

    @classmethod
    def hex(cls, data: bytes) -> str:
        """`data` in hex, cut after LOGGED_BYTES bytes with the total length named."""
        if len(data) <= cls.LOGGED_BYTES:
            return bytes(data).hex(" ")
        return f"{bytes(data[:cls.LOGGED_BYTES]).hex(' ')} ... ({len(data)} bytes)"

    @classmethod
    def ascii(cls, data: bytes) -> str:
        """`data` as a quoted ASCII line (other bytes escaped), cut after LOGGED_BYTES bytes likewise."""
        shown = repr(bytes(data[:cls.LOGGED_BYTES]).decode("ascii", "backslashreplace"))
        return shown if len(data) <= cls.LOGGED_BYTES else f"{shown} ... ({len(data)} bytes)"


class ServerThread(threading.Thread):
    """A time-critical thread that serves until `stop()`.

    As it starts, the thread asks for SCHED_FIFO at `fifo_priority` (1..99; 0: not tried), else for 1 ns timer
    slack (`hil.loop.realtime.realtime_thread`; `rt_mode` says which): a reply must not wait behind other
    processes' time slices, and a wait must end on time. Then it runs `serve()` (or `target(stopping)`), which
    returns once `stopping` is set; `stop_fd` becomes readable at the same moment, for a serve loop that waits
    in poll()/select(). The exception that ends the thread is kept in `error` and logged with its traceback.
    `stop()` ends the thread, then `close()` releases what it served on.
    """

    def __init__(self, name: str, fifo_priority: int = 0, target: Callable[[threading.Event], None] | None = None):
        super().__init__(name=name, daemon=True)
        self.fifo_priority = fifo_priority
        self.rt_mode = ""                  # the hil.loop.realtime.RT_MODES name it got, once running
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.stop_fd, self._stop_w = os.pipe()
        self._serve_target = target
        self._stopped = False

    def run(self) -> None:
        from hil.loop.realtime import realtime_thread

        try:
            self.rt_mode = realtime_thread(self.fifo_priority)
            self.serve()
        except BaseException as exc:   # a dead server must be visible: the daemon checks `error`
            self.error = exc
            log.exception("%s stopped", self.name)
        finally:
            self.finish()

    def serve(self) -> None:
        """Serve until `stopping` is set."""
        if self._serve_target is None:
            raise NotImplementedError(f"{type(self).__name__} serves nothing")
        self._serve_target(self.stopping)

    def finish(self) -> None:
        """Run by the thread as it ends, however it ends (what only the serving thread may close)."""

    def close(self) -> None:
        """Run by `stop()` once the thread has ended or was never started: release ports and the like."""

    def stop(self, timeout: float = 1.0) -> None:
        """End the thread (it notices at once when it waits on `stop_fd` or `stopping`), wait for it up to
        `timeout` [s], then `close()`; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.stopping.set()
        os.write(self._stop_w, b"x")
        if self.ident is not None and self is not threading.current_thread():
            self.join(timeout)
        try:
            self.close()
        finally:
            os.close(self.stop_fd)
            os.close(self._stop_w)
