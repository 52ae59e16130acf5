"""The bus monitor: what each bus thread handles, counted and the last packets kept, for the console.

It wraps one step of each bus thread (a Dynamixel bus's `parse`, a CANopen bus's adapter callback and `send`,
an Etherban server's `handle`) with a counter and a fixed-size deque of raw packets; decoding waits for the
console's request, so the bus thread spends well under a microsecond on it.
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
from collections import deque

from drivers.emulated.dynamixel.protocol import Instruction
from drivers.emulated.etherban import etherban_pb2 as pb
from drivers.emulated.protocol1.frame import Instruction as FrameInstruction
from drivers.emulated.protocol1.server import Protocol1Server

KEPT = 20            # last packets kept per bus
PARAMS_SHOWN = 16    # parameter bytes shown per packet


class PacketLog:
    """One bus's packet counter and last packets (`seen` runs in the bus thread), named by `instructions`, the
    instruction set of the bus's protocol."""

    def __init__(self, instructions: type[enum.IntEnum] = Instruction) -> None:
        self.instructions = instructions
        self.count = 0
        self.last: deque[tuple[float, int, int, bytes]] = deque(maxlen=KEPT)
        self._mark = (time.monotonic(), 0)
        self._lock = threading.Lock()

    def seen(self, packets: list, now: float) -> None:
        for p in packets:
            self.last.append((now, p.id, p.instruction, p.params[:PARAMS_SHOWN]))
        self.count += len(packets)

    def _rate(self) -> dict:
        """Packets in all and per second since the previous report (at least 0.5 s apart)."""
        now, count = time.monotonic(), self.count
        with self._lock:
            t0, c0 = self._mark
            rate = (count - c0) / (now - t0) if now > t0 else 0.0
            if now - t0 >= 0.5:
                self._mark = (now, count)
        return {"now": now, "count": count, "rate": rate}

    def report(self) -> dict:
        """Packets in all, per second since the previous report, the last ones decoded."""
        out = self._rate()
        now, count, rate = out["now"], out["count"], out["rate"]
        last = []
        for t, pid, ins, params in reversed(list(self.last)):
            try:
                name = self.instructions(ins).name
            except ValueError:
                name = f"0x{ins:02X}"
            last.append({"age_s": now - t, "id": pid, "instruction": name, "params": params.hex(" ")})
        return {"packets": count, "packets_per_s": rate, "last": last, "columns": DXL_COLUMNS}


DXL_COLUMNS = [["id", "ID"], ["instruction", "instruction"], ["params", f"parameters (first {PARAMS_SHOWN} bytes)"]]
CAN_COLUMNS = [["direction", "from"], ["cob_id", "COB-ID"], ["service", "service"], ["node", "node"],
               ["data", "data"]]
ETHERBAN_COLUMNS = [["bytes", "bytes"], ["orders", "orders (device: mode target)"]]
# CiA 301 §7.3.3, the predefined connection set: the COB-ID's function code (bits 10..7) names the service
CAN_SERVICES = {0x0: "NMT", 0x1: "SYNC/EMCY", 0x2: "TIME", 0x3: "TPDO1", 0x4: "RPDO1", 0x5: "TPDO2", 0x6: "RPDO2",
                0x7: "TPDO3", 0x8: "RPDO3", 0x9: "TPDO4", 0xA: "RPDO4", 0xB: "SDO (server)", 0xC: "SDO (client)",
                0xE: "heartbeat"}


def can_service(cob_id: int) -> tuple[str, int | None]:
    """(service, node ID or None) of a CANopen COB-ID (CiA 301 predefined connection set)."""
    function, node = cob_id >> 7, cob_id & 0x7F
    if cob_id == 0x000:
        return "NMT", None
    if cob_id == 0x080:
        return "SYNC", None
    if cob_id == 0x100:
        return "TIME", None
    if cob_id in (0x7E4, 0x7E5):
        return "LSS", None
    name = CAN_SERVICES.get(function, "other")
    return ("EMCY" if function == 0x1 else name), node


class FrameLog(PacketLog):
    """A CANopen bus's frames, both ways: `seen` runs in the adapter's thread and in the nodes' senders (a deque
    append and an itertools counter are atomic in CPython, so no lock is taken on the bus's path)."""

    def __init__(self, adapter) -> None:
        super().__init__()
        self.adapter = adapter
        self._counter = itertools.count()
        self._next = 0

    def frame(self, direction: str, frame, now: float) -> None:
        self.last.append((now, direction, frame.id, bytes(frame.data[:8]), frame.remote))
        self._next = next(self._counter) + 1

    def report(self) -> dict:
        self.count = self._next
        out = self._rate()
        rows = []
        for t, direction, cob_id, data, remote in reversed(list(self.last)):
            service, node = can_service(cob_id)
            rows.append({"age_s": out["now"] - t, "direction": direction, "cob_id": f"0x{cob_id:03X}",
                         "service": service, "node": node, "data": "RTR" if remote else data.hex(" ")})
        stats = self.adapter.stats
        wire = {k: getattr(stats, k) for k in ("frames_from_host", "frames_to_host", "errors", "dropped")
                if hasattr(stats, k)}
        return {"packets": out["count"], "packets_per_s": out["rate"], "last": rows, "columns": CAN_COLUMNS,
                "wire": wire}



class RequestLog(PacketLog):
    """An Etherban server's requests (`seen` in its thread): their bytes kept, decoded as protobuf on report."""

    def __init__(self, server) -> None:
        super().__init__()
        self.server = server
        self._counter = itertools.count()
        self._next = 0

    def request(self, frames: list[bytes], now: float) -> None:
        self.last.append((now, b"".join(frames)[:256]))
        self._next = next(self._counter) + 1

    def report(self) -> dict:
        self.count = self._next
        out = self._rate()
        rows = []
        for t, raw in reversed(list(self.last)):
            request = pb.Request()
            try:
                request.ParseFromString(raw)
                orders = ", ".join(f"{o.device}: {pb.OperationMode.Name(o.operation_mode)} {o.target:.4g}"
                                   for o in request.orders) or "none"
            except Exception:   # a malformed request is shown as such; the server answered it already
                orders = "not an etherban Request"
            rows.append({"age_s": out["now"] - t, "bytes": len(raw), "orders": orders})
        return {"packets": out["count"], "packets_per_s": out["rate"], "last": rows, "columns": ETHERBAN_COLUMNS}


def attach(server) -> PacketLog | None:
    """A log fed by `server`'s bus thread: Dynamixel packets, CANopen frames or Etherban requests; None for a
    bus with none of these steps."""
    adapter = getattr(server, "adapter", None)
    if callable(getattr(adapter, "on_frame", None)) and callable(getattr(adapter, "send", None)):
        return _attach_can(adapter)
    if callable(getattr(server, "handle", None)) and hasattr(server, "devices") and not hasattr(server, "parser"):
        return _attach_etherban(server)
    if not hasattr(server, "parser") or not callable(getattr(server, "parse", None)):
        return None
    # the FF FF frame (Dynamixel 1.0, Feetech) has an instruction set of its own: 0x06 is RESET, 0x10 none
    log, parse = PacketLog(FrameInstruction if isinstance(server, Protocol1Server) else Instruction), server.parse

    def counted(parser, data, now):
        packets = parse(parser, data, now)
        if packets:
            log.seen(packets, now)
        return packets

    server.parse = counted
    return log


def _attach_can(adapter) -> FrameLog:
    log, on_frame, send = FrameLog(adapter), adapter.on_frame, adapter.send

    def heard(frame, t):
        log.frame("host", frame, t)
        return on_frame(frame, t)

    def sent(frame, *args, **kwargs):
        log.frame("node", frame, time.monotonic())
        return send(frame, *args, **kwargs)

    adapter.on_frame, adapter.send = heard, sent
    return log


def _attach_etherban(server) -> RequestLog:
    log, handle = RequestLog(server), server.handle

    def counted(frames):
        log.request(frames, time.monotonic())
        return handle(frames)

    server.handle = counted
    return log
