"""Byte ports a bus server listens on — a pty the controller opens as its serial adapter (`PtyPort`), a real serial
device (`SerialDevicePort`) — and wire-time pacing of replies (`PacedWriter`); docs/protocols/wire.md."""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import math
import os
import secrets
import select
import termios
import time
import tty
from types import TracebackType
from typing import Protocol, Self

import serial

__all__ = [
    "PacedWriter",
    "Port",
    "PortError",
    "PtyPort",
    "SerialDevicePort",
    "wire_time_s",
]

_WRITE_STALL_S = 1.0  # a write that makes no progress for this long fails instead of hanging the bus thread

# termios Bnnn constant -> bits per second, built from whatever this Python's termios defines
# (on Linux: B50 .. B4000000). B0 means "hang up", not a speed, so it is left out.
_SPEEDS: dict[int, int] = {
    getattr(termios, name): int(name[1:])
    for name in dir(termios)
    if name.startswith("B") and name[1:].isdigit() and int(name[1:]) > 0
}

# Custom rates (pyserial's path for e.g. 250000 bps) set c_cflag to BOTHER and store the rate in
# struct termios2, which only the TCGETS2 ioctl returns. Values as in pyserial for Linux
# (x86, arm, riscv; on other architectures the ioctl fails and only the Bnnn rates are known).
_TCGETS2 = 0x802C542A
_TERMIOS2_OSPEED = 10  # index of c_ospeed in struct termios2 viewed as 32-bit ints


class PortError(OSError):
    """A port could not be opened, written or read; the message names the path."""


class Port(Protocol):
    """What a bus server needs from a port."""

    path: str

    def fileno(self) -> int: ...
    def read(self, max_bytes: int = 65536) -> bytes: ...
    def write(self, data: bytes) -> None: ...
    def baud(self) -> int | None: ...
    def close(self) -> None: ...


def wire_time_s(n_bytes: int, baud: int) -> float:
    """Time [s] that `n_bytes` take on an 8N1 line at `baud` [bit/s]: 10 bit times per byte."""
    if baud <= 0:
        raise ValueError(f"baud must be positive, got {baud}")
    return n_bytes * 10.0 / baud


def _tty_speed(fd: int, buf: array.array | None = None) -> int | None:
    """Output speed [bit/s] of the terminal `fd` refers to (the rate the controller transmits at), or None
    if it is not a known rate. One TCGETS2 ioctl, into `buf` when given (a caller asking per read reuses
    one): the kernel keeps c_ospeed in bit/s for the Bnnn codes as well as for custom (BOTHER) rates.
    Where that ioctl fails (another architecture's TCGETS2), the Bnnn code tcgetattr reports."""
    if buf is None:
        buf = array.array("i", [0] * 64)
    try:
        fcntl.ioctl(fd, _TCGETS2, buf)
    except OSError:
        return _SPEEDS.get(termios.tcgetattr(fd)[5])
    return buf[_TERMIOS2_OSPEED] if buf[_TERMIOS2_OSPEED] > 0 else None


def hold_lock_file(path: str | os.PathLike, note: str, mode: int = 0o644) -> int | str:
    """Take an exclusive flock(2) on the file `path` (created) and write `note` into it: the fd that holds it, or,
    where another process holds it, the note that process wrote. A lock file its holder removed between our open
    and our lock is not the file at that path any more: opened again (the inode check). OSError where the file
    cannot be created (with `mode`)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip()
            os.close(fd)
            return holder
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{note}\n".encode(), 0)
            return fd
        os.close(fd)


def _lock_link(link: str) -> int:
    """An fd holding an exclusive flock(2) on `<link>.lock`, the file holding the holder's pid; PortError
    naming the holder when another process has it."""
    parent = os.path.dirname(os.path.abspath(link))
    if not os.path.isdir(parent):
        raise PortError(f"cannot create pty link {link!r}: directory {parent!r} does not exist")
    try:
        held = hold_lock_file(f"{link}.lock", str(os.getpid()))
    except OSError as exc:
        raise PortError(f"cannot create the lock of pty link {link!r}: {exc.strerror}") from exc
    if isinstance(held, str):
        raise PortError(f"pty link {link!r} is in use by another servo-hil (pid {held or '?'}): stop it or "
                        "give another port path")
    return held


def _unlock_link(link: str, fd: int) -> None:
    """Remove `<link>.lock` while still holding it, then release it."""
    if fd < 0:
        return
    with contextlib.suppress(OSError):
        os.unlink(f"{link}.lock")
    os.close(fd)


class _ClosesOnExit:
    """`with port:` closes the port on leaving the block, whatever the port type."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class PtyPort(_ClosesOnExit):
    """A pseudo-terminal the controller opens as if it were a USB serial adapter.

    We hold the master (non-blocking); the controller opens `path`. Our own slave fd stays open
    for the life of the port: the SDK closes and reopens the slave on every `setBaudRate`, and
    without a second holder each of those closes would make the master fail with EIO.
    Bytes we write while no client has the port open wait in the slave's input queue (the SDK
    flushes them when it opens); when that queue is full, `write` fails after about 1 s.
    """

    def __init__(self, link: str | os.PathLike[str] | None = None) -> None:
        """Open a pty pair; if `link` is given, publish the slave as a symlink `link` -> /dev/pts/N.

        An existing symlink at `link` is replaced atomically (a stale one from a crashed run is
        the usual case); anything else there, or a missing parent directory, is a `PortError`.
        A link is held with an exclusive lock on `<link>.lock` for the life of the port: a link held
        by another running process is a `PortError` and is left alone (the kernel drops the lock of
        a killed process, whose link is then replaced).
        """
        self._lock = -1
        if link is not None:
            self._lock = _lock_link(os.fspath(link))
        self._master, self._slave = os.openpty()
        self._link: str | None = None
        try:
            # Raw before any client can open it: a cooked pty echoes what we write back to us
            # and mangles control bytes (0x03, CR/LF) that are ordinary data on a servo bus.
            tty.setraw(self._slave)
            attrs = termios.tcgetattr(self._slave)
            # setraw (3.11) leaves these input translations alone; cfmakeraw clears them too.
            attrs[0] &= ~(termios.IGNBRK | termios.PARMRK | termios.INLCR | termios.IGNCR | termios.IXOFF)
            termios.tcsetattr(self._slave, termios.TCSANOW, attrs)
            os.set_blocking(self._master, False)
            self.device: str = os.ttyname(self._slave)
            if link is not None:
                self._link = self._publish(os.fspath(link))
        except BaseException:
            os.close(self._master)
            os.close(self._slave)
            if link is not None:
                _unlock_link(os.fspath(link), self._lock)
            raise
        self.path: str = self._link if self._link is not None else self.device
        self._termios2 = array.array("i", [0] * 64)   # baud()'s ioctl buffer, reused: baud() runs per read
        self._poll = select.poll()
        self._poll.register(self._master, select.POLLOUT)

    def _publish(self, link: str) -> str:
        parent = os.path.dirname(os.path.abspath(link))
        if not os.path.isdir(parent):
            raise PortError(f"cannot create pty link {link!r}: directory {parent!r} does not exist")
        if os.path.lexists(link) and not os.path.islink(link):
            raise PortError(f"cannot create pty link {link!r}: it exists and is not a symlink")
        # Create under a unique name, then rename over the old link: a client never sees the name missing.
        tmp = os.path.join(parent, f".{os.path.basename(link)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            os.symlink(self.device, tmp)
            os.replace(tmp, link)
        except OSError as exc:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            raise PortError(f"cannot create pty link {link!r} -> {self.device}: {exc.strerror}") from exc
        return link

    def fileno(self) -> int:
        """The master fd, for select/poll (readable when the controller has written bytes)."""
        self._check_open()
        return self._master

    def read(self, max_bytes: int = 65536) -> bytes:
        """Up to `max_bytes` bytes the controller wrote; b"" at once if there are none."""
        self._check_open()
        try:
            return os.read(self._master, max_bytes)
        except BlockingIOError:
            return b""
        except OSError as exc:
            if exc.errno == errno.EIO:  # no holder of the slave left (cannot happen while we keep ours)
                return b""
            raise PortError(f"read from pty {self.path!r} failed: {exc.strerror}") from exc

    def write(self, data: bytes) -> None:
        """Write all of `data` to the controller.

        Waits for buffer space when the pty is full; raises `PortError` when no byte could be
        written for about 1 s (e.g. nobody is reading the slave).
        """
        self._check_open()
        view = data               # a memoryview only after a partial write: the usual write takes it all
        deadline = None           # set when a write makes no progress
        while view:
            try:
                n = os.write(self._master, view)
            except BlockingIOError:
                n = 0
            except OSError as exc:
                raise PortError(f"write to pty {self.path!r} failed: {exc.strerror}") from exc
            if n:
                view = memoryview(view)[n:]
                deadline = None
                continue
            if deadline is None:
                deadline = time.monotonic() + _WRITE_STALL_S
            left = deadline - time.monotonic()
            if left <= 0:
                raise PortError(
                    f"write to pty {self.path!r} stalled for {_WRITE_STALL_S:.0f} s with {len(view)} of "
                    f"{len(data)} bytes unsent (is anyone reading it?)"
                )
            self._poll.poll(left * 1000.0)

    def baud(self) -> int | None:
        """The baud rate [bit/s] the controller set on its side, or None if it is not a known rate.

        ioctls on a pty master act on the slave's termios, so this is what pyserial set. A pty that
        no client has configured reports the kernel default, 38400.
        """
        self._check_open()
        return _tty_speed(self._master, self._termios2)

    def close(self) -> None:
        """Close both fds and remove the symlink if it still points at our device. Idempotent."""
        if self._master < 0:
            return
        if self._link is not None:
            try:
                # Another run may have taken over the name; only remove a link that is still ours.
                if os.readlink(self._link) == self.device:
                    os.unlink(self._link)
            except OSError:
                pass
        os.close(self._master)
        os.close(self._slave)
        self._master = self._slave = -1
        if self._link is not None:
            _unlock_link(self._link, self._lock)

    def _check_open(self) -> None:
        if self._master < 0:
            raise PortError(f"pty {self.path!r} is closed")

    def __repr__(self) -> str:
        return f"PtyPort(path={self.path!r}, device={self.device!r})"


class SerialDevicePort(_ClosesOnExit):
    """A real serial device (e.g. a controller board wired through a USB-RS485 adapter) via pyserial.

    Unlike a pty, the line really runs at `baud`: the servo side decides it (Baud Rate register),
    so `baud()` returns what we configured and `set_baud` follows a register change.
    """

    def __init__(self, device: str, baud: int) -> None:
        """Open `device` at `baud` [bit/s], 8N1, non-blocking reads, writes bounded to 1 s."""
        self.path: str = device
        self.device: str = device
        self._baud = baud
        try:
            self._ser = serial.Serial(device, baud, timeout=0, write_timeout=_WRITE_STALL_S)
        except (serial.SerialException, ValueError, OSError) as exc:
            raise PortError(f"cannot open serial device {device!r}: {exc}") from exc

    def fileno(self) -> int:
        """The device fd, for select/poll."""
        return self._ser.fileno()

    def read(self, max_bytes: int = 65536) -> bytes:
        """Up to `max_bytes` received bytes; b"" at once if there are none."""
        try:
            return self._ser.read(max_bytes)
        except serial.SerialException as exc:  # includes a USB adapter being unplugged
            raise PortError(f"read from serial device {self.device!r} failed: {exc}") from exc

    def write(self, data: bytes) -> None:
        """Write all of `data`; `PortError` if the device does not take it within about 1 s."""
        try:
            self._ser.write(data)
        except serial.SerialException as exc:  # SerialTimeoutException is a subclass
            raise PortError(f"write to serial device {self.device!r} failed: {exc}") from exc

    def baud(self) -> int | None:
        """The configured line rate [bit/s]."""
        return self._baud

    def set_baud(self, baud: int) -> None:
        """Change the line rate [bit/s], e.g. after the controller wrote the Baud Rate register."""
        try:
            self._ser.baudrate = baud
        except (serial.SerialException, ValueError) as exc:
            raise PortError(f"cannot set {baud} bit/s on serial device {self.device!r}: {exc}") from exc
        self._baud = baud

    def close(self) -> None:
        """Close the device. Idempotent."""
        self._ser.close()

    def __repr__(self) -> str:
        return f"SerialDevicePort(device={self.device!r}, baud={self._baud})"


class PacedWriter:
    """Writes a reply so the far end sees it no earlier than the real wire would deliver it.

    A pty has no baud rate of its own. Byte i (counting from 1) of a reply started at `start`
    becomes visible at `start + i` byte times, released in chunks of at least ~100 µs of wire
    time to keep syscalls few. Chunks due before the reply's last `spin_s` wait with `time.sleep`
    only (it never wakes early; a late wake releases every byte already due, so lateness does not
    accumulate). The last `spin_s` of the reply, whose end the controller actually times, are spun
    whichever chunks fall in them: a short reply (15 bytes are 150 µs at 1 Mbit/s) is then spun from
    before its first chunk, which a sleep of a thread at normal priority could overshoot by 50 µs
    of timer slack plus its wake-up, past the last byte's due time. Spinning the whole reply would
    pin a core for long ones (17 ms for 100 bytes at 57600 bit/s).
    """

    _MIN_CHUNK_S = 100e-6

    def __init__(self, port: Port, spin_s: float = 2e-4) -> None:
        """`port`: where to write; `spin_s` [s]: how long before the final due time to stop sleeping and spin."""
        self.port = port
        self.spin_s = spin_s
        self.first_write = 0.0   # time.monotonic() [s] as the last reply's first bytes were written

    def _wait_until(self, t: float, spin_from: float) -> float:
        """Return time.monotonic() [s] once it is >= t: sleep until min(t, spin_from), then spin."""
        now = time.monotonic()
        wake = min(t, spin_from)
        if wake > now:
            time.sleep(wake - now)
            now = time.monotonic()
        while now < t:
            now = time.monotonic()
        return now

    def write_at(self, data: bytes, start: float, baud: int | None) -> float:
        """Write `data` as a UART at `baud` [bit/s] that starts sending at `start` would deliver it.

        `start` is on time.monotonic() [s]: when the first start bit goes on the wire. The last byte
        lands at `start + wire_time_s(len(data), baud)`. `baud` None or 0: no pacing, everything is
        written at once (not before `start`). Returns time.monotonic() [s] after the last byte was written.
        """
        n = len(data)
        if not baud:
            self.first_write = self._wait_until(start, start - self.spin_s)
            if n:
                self.port.write(data)
            return time.monotonic()
        byte_s = wire_time_s(1, baud)
        chunk = max(1, math.ceil(self._MIN_CHUNK_S / byte_s))
        # the last spin_s of the reply are spun, whichever chunks fall in them: a sleep there could wake
        # after the last byte's due time
        spin_from = start + n * byte_s - self.spin_s
        sent = 0
        while sent < n:
            end = min(n, sent + chunk)
            now = self._wait_until(start + end * byte_s, spin_from)
            if not sent:
                self.first_write = now
            # After a late wake, release everything whose last bit has passed, never a byte early.
            end = max(end, min(n, math.floor((now - start) / byte_s)))
            self.port.write(data[sent:end])
            sent = end
        return time.monotonic()
