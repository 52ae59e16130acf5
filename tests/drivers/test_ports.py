"""The port layer on real Linux ptys: raw bytes, baud read-back, client reopen, symlinks, pacing.

No mocks: the far end is pyserial, dynamixel_sdk's PortHandler, a plain os.open() of the slave,
or a separate reader process (for timing, so the GIL cannot blur what it measures).
"""

from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import serial
from dynamixel_sdk import PortHandler

from drivers.wire.ports import PacedWriter, PortError, PtyPort, SerialDevicePort, wire_time_s
from hil.loop.rt import realtime_thread
from servo_hil.daemon.telemetry import StealMeter

ALL_BYTES = bytes(range(256))


@pytest.fixture
def pty(tmp_path: Path) -> Iterator[PtyPort]:
    with PtyPort(tmp_path / "ttyDXL") as p:
        yield p


def read_exact(read: Callable[[], bytes], n: int, timeout_s: float = 2.0) -> bytes:
    """Collect `n` bytes from a non-blocking `read`, failing the test after `timeout_s`."""
    buf = bytearray()
    deadline = time.monotonic() + timeout_s
    while len(buf) < n:
        assert time.monotonic() < deadline, f"only {len(buf)} of {n} bytes arrived"
        chunk = read()
        if chunk:
            buf += chunk
        else:
            time.sleep(1e-4)
    return bytes(buf)


def raw_client(path: str) -> int:
    """Open the slave the way a plain program would: no pyserial, so no termios of its own."""
    return os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)


def fd_read(fd: int) -> Callable[[], bytes]:
    def read() -> bytes:
        try:
            return os.read(fd, 65536)
        except BlockingIOError:
            return b""

    return read


# --- pty basics -------------------------------------------------------------------------------


def test_path_is_a_symlink_to_the_pts_device(pty: PtyPort, tmp_path: Path) -> None:
    assert pty.device.startswith("/dev/pts/")
    assert pty.path == str(tmp_path / "ttyDXL")
    assert os.readlink(pty.path) == pty.device
    with PtyPort() as bare:
        assert bare.path == bare.device
        assert bare.device.startswith("/dev/pts/")
        assert bare.device != pty.device


def test_no_echo_before_any_client_opens(pty: PtyPort) -> None:
    # A cooked pty would echo these back to the master (as ^C^@... escapes).
    pty.write(b"\x03\x00ab\r\n\x7f")
    time.sleep(0.02)
    assert pty.read() == b""
    fd = raw_client(pty.path)
    try:
        assert read_exact(fd_read(fd), 7) == b"\x03\x00ab\r\n\x7f"  # no CR/LF translation either
    finally:
        os.close(fd)


def test_all_byte_values_both_ways_with_a_plain_client(pty: PtyPort) -> None:
    fd = raw_client(pty.path)
    try:
        pty.write(ALL_BYTES)
        assert read_exact(fd_read(fd), 256) == ALL_BYTES
        os.write(fd, ALL_BYTES)
        assert read_exact(pty.read, 256) == ALL_BYTES
        time.sleep(0.01)
        assert pty.read() == b"" and fd_read(fd)() == b""  # nothing echoed either way
    finally:
        os.close(fd)


def test_all_byte_values_both_ways_with_pyserial(pty: PtyPort) -> None:
    with serial.Serial(pty.path, 57600, timeout=0) as ser:
        pty.write(ALL_BYTES)
        assert read_exact(lambda: ser.read(4096), 256) == ALL_BYTES
        ser.write(ALL_BYTES)
        assert read_exact(pty.read, 256) == ALL_BYTES


def test_fresh_pty_reports_the_kernel_default_baud(pty: PtyPort) -> None:
    assert pty.baud() == 38400


@pytest.mark.parametrize("baud", [57600, 1_000_000, 3_000_000, 4_000_000])
def test_baud_set_by_pyserial_is_read_back(pty: PtyPort, baud: int) -> None:
    with serial.Serial(pty.path, baud, timeout=0) as ser:
        assert pty.baud() == baud
        ser.baudrate = 115200  # changed on an open port, as a Baud Rate register change would
        assert pty.baud() == 115200
    assert pty.baud() == 115200  # the setting outlives the client: it belongs to the pty


def test_custom_baud_is_read_back_through_termios2(pty: PtyPort) -> None:
    # Not a Bnnn constant: pyserial sets BOTHER and the rate via TCSETS2.
    with serial.Serial(pty.path, 250_000, timeout=0):
        assert pty.baud() == 250_000


def test_dynamixel_sdk_port_handler(pty: PtyPort) -> None:
    ph = PortHandler(pty.path)
    assert ph.openPort()
    try:
        assert pty.baud() == 1_000_000  # openPort() sets 1 Mbps
        assert ph.setBaudRate(57600)  # closes and reopens the slave
        assert pty.baud() == 57600
        ping = bytes.fromhex("ffff fd00 0103 0001 194e")
        ph.writePort(ping)
        assert read_exact(pty.read, len(ping)) == ping
        pty.write(ALL_BYTES)
        assert read_exact(lambda: ph.readPort(256), 256) == ALL_BYTES
    finally:
        ph.closePort()


def test_client_close_and_reopen_does_not_break_our_side(pty: PtyPort) -> None:
    for i in range(5):
        with serial.Serial(pty.path, 57600, timeout=0) as ser:
            ser.write(bytes([i]) * 3)
            assert read_exact(pty.read, 3) == bytes([i]) * 3
            pty.write(b"ok")
            assert read_exact(lambda: ser.read(16), 2) == b"ok"
        # Client gone: without our own slave fd the master would now report EIO and poll readable forever.
        assert pty.read() == b""
        readable, _, _ = select.select([pty], [], [], 0.01)
        assert readable == []


def test_64_kib_both_ways(pty: PtyPort) -> None:
    payload = os.urandom(65536)
    with serial.Serial(pty.path, 4_000_000, timeout=5) as ser:  # read() returns once it has all
        got = bytearray()
        reader = threading.Thread(target=lambda: got.extend(ser.read(len(payload))))
        reader.start()
        pty.write(payload)  # more than the pty buffers: needs the partial-write handling
        reader.join(5)
        assert bytes(got) == payload

        writer = threading.Thread(target=ser.write, args=(payload,))
        writer.start()
        assert read_exact(pty.read, len(payload), timeout_s=5) == payload
        writer.join(5)


def test_write_with_nobody_reading_fails_after_about_a_second(pty: PtyPort) -> None:
    t0 = time.monotonic()
    with pytest.raises(PortError, match=r"ttyDXL.*stalled"):
        pty.write(b"\x55" * (1 << 20))
    assert 0.9 < time.monotonic() - t0 < 3.0


def test_link_that_is_a_regular_file_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "ttyDXL"
    link.write_text("keep me")
    with pytest.raises(PortError, match=r"ttyDXL.*not a symlink"):
        PtyPort(link)
    assert link.read_text() == "keep me"


def test_link_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PortError, match="does not exist"):
        PtyPort(tmp_path / "nope" / "ttyDXL")


def test_stale_symlink_is_replaced(tmp_path: Path) -> None:
    link = tmp_path / "ttyDXL"
    link.symlink_to("/dev/pts/does-not-exist")
    with PtyPort(link) as p:
        assert os.readlink(link) == p.device
    assert [f.name for f in tmp_path.iterdir()] == []  # no temp link left behind, and ours removed


def test_close_is_idempotent_and_removes_only_our_link(tmp_path: Path) -> None:
    link = tmp_path / "ttyDXL"
    first = PtyPort(link)
    first.close()
    first.close()
    assert not os.path.lexists(link) and not os.path.lexists(f"{link}.lock")
    with pytest.raises(PortError, match="closed"):
        first.read()
    second = PtyPort(link)
    os.replace(link, tmp_path / "moved")          # someone else took the name over
    os.symlink("/dev/null", link)
    second.close()
    assert os.readlink(link) == "/dev/null"       # not ours any more: left alone


def test_a_live_link_is_not_taken_over(tmp_path: Path) -> None:
    """Regression: a second port on the same path replaced the first's link (the first ran on, unreachable)."""
    link = tmp_path / "ttyDXL"
    with PtyPort(link) as first:
        with pytest.raises(PortError, match=rf"ttyDXL.*in use.*pid {os.getpid()}"):
            PtyPort(link)
        assert os.readlink(link) == first.device
    with PtyPort(link) as again:                  # released on close
        assert os.readlink(link) == again.device


def test_the_link_of_a_killed_process_is_replaced(tmp_path: Path) -> None:
    link = tmp_path / "ttyDXL"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from drivers.wire.ports import PtyPort; "
                               f"p = PtyPort({str(link)!r}); print(p.device, flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        device = holder.stdout.readline().strip()
        assert os.readlink(link) == device
        with pytest.raises(PortError, match="in use"):
            PtyPort(link)
    finally:
        holder.kill()
        holder.wait(5.0)
    assert os.path.islink(link)                   # SIGKILL leaves the link (and its lock file) behind
    with PtyPort(link) as p:
        assert os.readlink(link) == p.device
        assert Path(f"{link}.lock").read_text().strip() == str(os.getpid())


# --- real serial device (exercised through a pty, which pyserial treats as one) ----------------


def test_serial_device_open_error_names_the_device() -> None:
    with pytest.raises(PortError, match="/dev/ttyUSB-servo-hil-missing"):
        SerialDevicePort("/dev/ttyUSB-servo-hil-missing", 57600)


def test_serial_device_port_over_a_pty(pty: PtyPort) -> None:
    with SerialDevicePort(pty.device, 115200) as dev:
        assert dev.path == pty.device
        assert dev.baud() == 115200 and pty.baud() == 115200
        assert dev.read() == b""
        dev.write(ALL_BYTES)
        assert read_exact(pty.read, 256) == ALL_BYTES
        pty.write(ALL_BYTES)
        assert read_exact(dev.read, 256) == ALL_BYTES
        readable, _, _ = select.select([dev.fileno()], [], [], 0)
        assert readable == []
        dev.set_baud(1_000_000)
        assert dev.baud() == 1_000_000 and pty.baud() == 1_000_000


# --- pacing -----------------------------------------------------------------------------------


def test_wire_time() -> None:
    assert wire_time_s(100, 57600) == pytest.approx(100 * 10 / 57600)
    assert wire_time_s(1, 1_000_000) == pytest.approx(10e-6)
    with pytest.raises(ValueError):
        wire_time_s(1, 0)


_READER = """
import json, os, select, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_NOCTTY)
n, runs = int(sys.argv[2]), int(sys.argv[3])
print("ready", flush=True)
for _ in range(runs):
    got, obs = 0, []
    while got < n:
        select.select([fd], [], [])
        got += len(os.read(fd, 65536))
        obs.append((got, time.monotonic()))
    print(json.dumps(obs), flush=True)
"""


@contextmanager
def reader_process(path: str, n: int, runs: int) -> Iterator[Callable[[], list[tuple[int, float]]]]:
    """A separate process reading the slave; each call returns one run's (bytes so far, monotonic time) list."""
    proc = subprocess.Popen([sys.executable, "-c", _READER, path, str(n), str(runs)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None

    def line() -> str:
        ready, _, _ = select.select([proc.stdout], [], [], 5)
        assert ready, "reader process gave no answer within 5 s"
        return proc.stdout.readline()

    try:
        assert line().strip() == "ready"
        yield lambda: [tuple(o) for o in json.loads(line())]
    finally:
        proc.kill()
        proc.wait()


def last_byte_lateness(writer: PacedWriter, next_run, data: bytes, baud: int | None, due: float) -> float:
    """Write `data` (paced at `baud`, or at once when None) so that its last byte is due at `due`; how much
    later than `due` [s] the reader process saw it. Paced, every byte is checked against the wire."""
    n = len(data)
    wire = wire_time_s(n, baud) if baud else 0.0
    start = due - wire
    done = writer.write_at(data, start, baud)
    obs = next_run()
    assert obs[-1][0] == n and done >= due
    if baud:
        byte_s = wire_time_s(1, baud)
        for got, t in obs:  # every byte, not only the last, is seen no earlier than the wire allows
            assert t - start >= 0.99 * got * byte_s, f"{got} bytes seen {(got * byte_s - t + start) * 1e6:.0f} µs early"
        assert obs[-1][1] - start >= 0.99 * wire
    return obs[-1][1] - due


def in_bus_thread(work: Callable[[], object]) -> tuple[object, str]:
    """`work()` in a thread scheduled as the daemon's bus threads are (`realtime_thread`: SCHED_FIFO where the
    host allows it, else normal priority with 1 ns timer slack); its result and the mode the thread got.
    A normal-priority writer on a loaded host wakes up to 1 ms late from the sleeps between chunks."""
    out: list = []

    def run() -> None:
        mode = realtime_thread(10)
        try:
            out.append((work(), mode))
        except BaseException as exc:  # re-raised in the caller's thread
            out.append(exc)

    t = threading.Thread(target=run, name="paced-writer")
    t.start()
    t.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


@pytest.mark.parametrize("baud", [57600, 1_000_000])
def test_paced_reply_is_never_early_and_rarely_late(pty: PtyPort, baud: int) -> None:
    """Never early, byte by byte; late by no more than 1 ms (median) beyond a peer measured in the same run:
    the same bytes written at once at the paced reply's last due time, through the same pty to the same
    reader (what this host's wake-ups cost on their own; a loaded or stolen host delays both alike). Written
    from a thread scheduled as the daemon's bus threads are."""
    n, runs = 100, 30
    data = bytes(range(n))
    wire = wire_time_s(n, baud)
    writer = PacedWriter(pty)
    lateness: dict[str, list[float]] = {"paced": [], "peer": []}
    steal = StealMeter()
    with reader_process(pty.path, n, 2 * runs) as next_run:
        def write_runs() -> None:
            for _ in range(runs):  # alternating, so that a burst of load or steal meets both
                due = time.monotonic() + 0.5e-3 + wire  # as after a Return Delay Time
                lateness["paced"].append(last_byte_lateness(writer, next_run, data, baud, due))
                lateness["peer"].append(last_byte_lateness(writer, next_run, data, None, time.monotonic() + 0.5e-3))

        _, mode = in_bus_thread(write_runs)
    median = {k: statistics.median(v) for k, v in lateness.items()}
    figures = (f"PacedWriter {baud} bit/s, {n} bytes (wire {wire * 1e3:.2f} ms), {runs} runs, writer {mode}: lateness "
               f"of the last byte median {median['paced'] * 1e6:.0f} µs, max {max(lateness['paced']) * 1e6:.0f} µs; "
               f"the peer written at once median {median['peer'] * 1e6:.0f} µs, max {max(lateness['peer']) * 1e6:.0f} "
               f"µs; hypervisor steal {100 * steal.fraction():.1f} %")
    print(f"\n{figures}")
    assert median["paced"] < median["peer"] + 1e-3, figures


@pytest.mark.parametrize("baud", [None, 0])
def test_fast_mode_writes_at_once_but_not_before_start(pty: PtyPort, baud: int | None) -> None:
    data = bytes(range(100))
    writer = PacedWriter(pty)
    with reader_process(pty.path, len(data), 11) as next_run:
        delays = []
        for _ in range(10):
            start = time.monotonic()
            done = writer.write_at(data, start, baud)
            obs = next_run()
            assert obs[-1][0] == len(data)
            delays.append(done - start)
        # 100 bytes at 57600 bit/s would take 17 ms; unpaced they go out in well under 1 ms.
        assert statistics.median(delays) < 1e-3
        start = time.monotonic() + 0.02
        done = writer.write_at(data, start, baud)
        assert done >= start
        assert next_run()[0][1] >= start
