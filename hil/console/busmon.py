"""The bus monitor: what a Dynamixel bus thread parses, counted and the last packets kept, for the console.

It wraps the bus thread's `parse` step (drivers/dynamixel/server.py: bytes in, packets with a good CRC out): the
wrapper counts the packets and keeps the last `KEPT` decoded (ID, instruction, parameters). The bus thread does
this in a few hundred nanoseconds per read; nothing is sent anywhere from it.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from drivers.dynamixel.protocol import Instruction

KEPT = 20            # last packets kept per bus
PARAMS_SHOWN = 16    # parameter bytes shown per packet


class PacketLog:
    """One bus's packet counter and last packets (`seen` runs in the bus thread)."""

    def __init__(self) -> None:
        self.count = 0
        self.last: deque[tuple[float, int, int, bytes]] = deque(maxlen=KEPT)
        self._mark = (time.monotonic(), 0)
        self._lock = threading.Lock()

    def seen(self, packets: list, now: float) -> None:
        for p in packets:
            self.last.append((now, p.id, p.instruction, p.params[:PARAMS_SHOWN]))
        self.count += len(packets)

    def report(self) -> dict:
        """Packets in all, per second since the previous report (at least 0.5 s apart), the last ones decoded."""
        now, count = time.monotonic(), self.count
        with self._lock:
            t0, c0 = self._mark
            rate = (count - c0) / (now - t0) if now > t0 else 0.0
            if now - t0 >= 0.5:
                self._mark = (now, count)
        last = []
        for t, pid, ins, params in reversed(list(self.last)):
            try:
                name = Instruction(ins).name
            except ValueError:
                name = f"0x{ins:02X}"
            last.append({"age_s": now - t, "id": pid, "instruction": name, "params": params.hex(" ")})
        return {"packets": count, "packets_per_s": rate, "last": last}


def attach(server) -> PacketLog | None:
    """A PacketLog fed by `server`'s parse step, or None for a bus that parses no Dynamixel packets."""
    if not hasattr(server, "parser") or not callable(getattr(server, "parse", None)):
        return None
    log, parse = PacketLog(), server.parse

    def counted(parser, data, now):
        packets = parse(parser, data, now)
        if packets:
            log.seen(packets, now)
        return packets

    server.parse = counted
    return log
