"""Reading a pty's far end in the bus tests: the bytes a proxy mirror forwarded, as many as expected."""

from __future__ import annotations

import contextlib
import os
import select
import time


def read_exactly(fd: int, n: int, timeout: float = 2.0) -> bytes:
    """Up to `n` bytes from `fd`, waiting at most `timeout` [s] for all of them."""
    out, end = b"", time.monotonic() + timeout
    while len(out) < n and time.monotonic() < end:
        if select.select([fd], [], [], 0.05)[0]:
            with contextlib.suppress(BlockingIOError):
                out += os.read(fd, n - len(out))
    return out
