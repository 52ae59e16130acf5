"""Serve one FF FF bus on one port: the Protocol 2.0 server's thread with this frame's parser.

Reading, pacing and timing are those of `drivers.emulated.dynamixel.server.DynamixelServer` (a reply starts after the
instruction's wire time plus its offset, its bytes paced at the baud rate the controller set on the pty); only the
parser and the bus differ.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from drivers.emulated.dynamixel.server import DynamixelServer
from drivers.emulated.protocol1.bus import Protocol1Bus
from drivers.emulated.protocol1.frame import Parser
from drivers.wire.ports import PtyPort, SerialDevicePort

__all__ = ["Protocol1Server"]


class Protocol1Server(DynamixelServer):
    """The thread that answers for every servo of `bus` on `port` (`fast`: no pacing, no delays)."""

    def __init__(self, bus: Protocol1Bus, port: PtyPort | SerialDevicePort, fast: bool = False,
                 housekeeping_s: float = 0.01, name: str = "feetech",
                 batch: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 fifo_priority: int = 0):
        super().__init__(bus, port, fast, housekeeping_s, name, batch, fifo_priority)   # type: ignore[arg-type]
        self.parser = Parser()   # type: ignore[assignment]
