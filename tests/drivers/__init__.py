"""Helpers shared by the driver tests."""

from __future__ import annotations

import time

import serial


def read_serial(ser: serial.Serial, n: int, timeout_s: float, poll_s: float = 1e-4) -> bytes:
    """Up to `n` bytes from a non-blocking pyserial port (timeout=0), waiting at most `timeout_s` [s] and
    polling every `poll_s` [s] while nothing has arrived."""
    out = bytearray()
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        chunk = ser.read(n - len(out))
        if chunk:
            out += chunk
        else:
            time.sleep(poll_s)
    return bytes(out)
