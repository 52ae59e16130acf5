"""A wiretap on an SLCAN serial line, for the mirror tests: a pty whose far end relays every byte, unchanged, to
another SLCAN pty (an adapter), and logs the CAN frames that cross it each way. The host (a controller's python-can
`slcan`, or the mirror's) opens `tap.path` as its adapter; the tap opens the adapter's pty as a client. Bytes go
through as they come; the `t/T/r/R` lines are parsed (Lawicel format, independently of
drivers/emulated/slcan/adapter.py) into (id, data, extended, remote) per direction: `to_adapter` (what the host
transmitted) and `to_host` (what the bus delivered to the host)."""

from __future__ import annotations

import os
import select
import threading
import tty

Frame = tuple[int, bytes, bool, bool]


def parse_line(line: bytes) -> Frame | None:
    """The frame of a Lawicel `tiiil<data>` / `Tiiiiiiiil<data>` / `r…` / `R…` line (a trailing timestamp ignored)."""
    kind = line[:1]
    if kind not in (b"t", b"T", b"r", b"R"):
        return None
    width = 8 if kind in (b"T", b"R") else 3
    ident, dlc = int(line[1:1 + width], 16), int(line[1 + width:2 + width])
    data = b"" if kind in (b"r", b"R") else bytes.fromhex(line[2 + width:2 + width + 2 * dlc].decode())
    return ident, data, kind in (b"T", b"R"), kind in (b"r", b"R")


class SlcanTap(threading.Thread):
    """Relays between a new pty (`path`, for the host) and the adapter pty `adapter_path`; logs frames."""

    def __init__(self, adapter_path: str):
        super().__init__(daemon=True, name="slcan-tap")
        self._host, slave = os.openpty()
        tty.setraw(slave)
        self.path = os.ttyname(slave)
        self._slave = slave                      # kept open so the pty survives the host's close/reopen
        self._adapter = os.open(adapter_path, os.O_RDWR | os.O_NOCTTY)
        tty.setraw(self._adapter)
        self.to_adapter: list[Frame] = []
        self.to_host: list[Frame] = []
        self._lines = {self._host: bytearray(), self._adapter: bytearray()}
        self._lock = threading.Lock()
        self._stop_r, self._stop_w = os.pipe()

    def frames(self) -> tuple[list[Frame], list[Frame]]:
        """(to_adapter, to_host) so far."""
        with self._lock:
            return list(self.to_adapter), list(self.to_host)

    def run(self) -> None:
        peer = {self._host: self._adapter, self._adapter: self._host}
        log = {self._host: self.to_adapter, self._adapter: self.to_host}
        while True:
            ready, _, _ = select.select([self._host, self._adapter, self._stop_r], [], [])
            if self._stop_r in ready:
                return
            for fd in (self._host, self._adapter):
                if fd not in ready:
                    continue
                try:
                    data = os.read(fd, 4096)
                    os.write(peer[fd], data)
                except OSError:     # a side hung up (EIO): a daemon that ended closed its pty; the line is gone
                    return
                buf = self._lines[fd]
                buf += data
                while (end := buf.find(b"\r")) >= 0:
                    frame = parse_line(bytes(buf[:end]).lstrip(b"\x07"))
                    del buf[:end + 1]
                    if frame is not None:
                        with self._lock:
                            log[fd].append(frame)

    def close(self) -> None:
        os.write(self._stop_w, b"x")
        self.join(2.0)
        for fd in (self._host, self._slave, self._adapter, self._stop_r, self._stop_w):
            os.close(fd)
