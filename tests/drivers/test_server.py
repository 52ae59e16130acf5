"""The real-time thread every bus server runs (drivers/wire/server.py, `ServerThread`): it serves until `stop()`, which
it notices at once through `stopping` or `stop_fd`; the exception that ends it is kept in `error`; `stop()` then
releases what it served on and closes its stop pipe, whether the thread ran, crashed or never started."""

from __future__ import annotations

import os
import select
import threading
import time

import pytest

from drivers.wire.server import ServerThread


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


class PipeServer(ServerThread):
    """Echoes bytes from one end of a pipe to another until stopped, waiting in select() on `stop_fd`."""

    def __init__(self):
        super().__init__("servo-hil-test-echo")
        self.inbox_r, self.inbox_w = os.pipe()
        self.outbox_r, self.outbox_w = os.pipe()
        self.finished_in: list[str] = []
        self.closed_after_thread: list[bool] = []

    def serve(self) -> None:
        while True:
            ready = select.select([self.inbox_r, self.stop_fd], [], [])[0]
            if self.stop_fd in ready:
                return
            os.write(self.outbox_w, os.read(self.inbox_r, 64))

    def finish(self) -> None:
        self.finished_in.append(threading.current_thread().name)

    def close(self) -> None:
        self.closed_after_thread.append(not self.is_alive())
        for fd in (self.inbox_r, self.inbox_w, self.outbox_r, self.outbox_w):
            os.close(fd)


def test_serves_until_stop_then_closes_once():
    server = PipeServer()
    server.start()
    os.write(server.inbox_w, b"ping")
    assert os.read(server.outbox_r, 64) == b"ping"
    t0 = time.monotonic()
    server.stop(timeout=2.0)
    assert time.monotonic() - t0 < 1.0          # woken by stop_fd, not by a timeout
    assert not server.is_alive() and server.error is None
    assert server.finished_in == ["servo-hil-test-echo"]        # finish() ran in the serving thread
    assert server.closed_after_thread == [True]                  # close() ran once the thread had ended
    assert server.rt_mode.startswith("SCHED_")                   # it asked for its scheduling as it started
    assert _closed(server.stop_fd)
    server.stop()                                                # idempotent
    assert server.closed_after_thread == [True]


def test_the_exception_that_ends_the_thread_is_kept_in_error(caplog):
    def crash(stopping: threading.Event) -> None:
        raise ValueError("device model bug")

    server = ServerThread("servo-hil-test-crash", target=crash)
    server.start()
    server.join(2.0)
    assert not server.is_alive()
    assert isinstance(server.error, ValueError) and str(server.error) == "device model bug"
    assert "servo-hil-test-crash stopped" in caplog.text and "Traceback" in caplog.text
    fd = server.stop_fd
    server.stop()
    assert _closed(fd)


def test_a_target_sees_stopping():
    seen = []

    def wait(stopping: threading.Event) -> None:
        seen.append(stopping.wait(5.0))

    server = ServerThread("servo-hil-test-wait", target=wait)
    server.start()
    server.stop(timeout=2.0)
    assert seen == [True] and not server.is_alive() and server.error is None


def test_never_started_stop_closes():
    server = PipeServer()
    fds = (server.inbox_r, server.stop_fd)
    server.stop()
    assert server.closed_after_thread == [True] and server.finished_in == []
    assert all(_closed(fd) for fd in fds)


def test_without_serve_or_target_the_thread_reports_it():
    server = ServerThread("servo-hil-test-empty")
    server.start()
    server.join(2.0)
    assert isinstance(server.error, NotImplementedError)
    server.stop()


@pytest.mark.parametrize("priority", [0, 10])
def test_rt_mode_names_what_the_host_granted(priority):
    server = ServerThread("servo-hil-test-rt", priority, target=lambda stopping: stopping.wait(5.0))
    server.start()
    deadline = time.monotonic() + 2.0
    while not server.rt_mode and time.monotonic() < deadline:
        time.sleep(0.01)
    policy = os.sched_getscheduler(server.native_id)
    server.stop()
    assert (server.rt_mode == "SCHED_FIFO") == (policy == os.SCHED_FIFO)
    if priority == 0:
        assert server.rt_mode != "SCHED_FIFO"
