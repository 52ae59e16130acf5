"""Proxy mirror of a CAN bus of eRobs: our SLCAN pty between an unchanged controller and the real bus.

The controller opens our pty as its SLCAN adapter (paced at the CAN bit rate as usual, `drivers/can/slcan.py`).
Every frame it transmits goes to the real bus through python-can as it came, and every frame the real bus carries
comes back to the controller as it came, in order: the controller sees the real bus, unchanged. On the side, the
rig's CANopen nodes on this bus are the simulated twins of the real ones (same node IDs): they hear the same frames
— NMT, SYNC, RPDOs, SDO writes of controlword, mode, targets and PDO mapping — so the twin drives follow the
controller's commands; their own frames are dropped. They also hear the real nodes' frames, as nodes on one bus do
(heartbeat consumers, say).

With a recorder, each real frame that carries drive values — a TPDO, or an expedited SDO upload reply —
is decoded to SI with the twin's units and PDO mapping (the same SDO writes configured both), beside the
twin's values of the same objects read at the same instant. A TPDO holds 8 bytes (position and velocity
fill it), so the frames of one SYNC cycle make one state: a node's values are gathered until one of them
arrives again (the next cycle's TPDO, the next SDO poll) — in the order the real bus sent them, whatever
the wall-clock timing — and logged at the time of the first gathered frame as `/real/<joint>/state` and
`/sim/<joint>/state` (a state needs the position 0x6064; the last one when the mirror stops). Every
controller frame addressed to a node goes to `/bus/<joint>/commands`. Assumed: the real node powered up
with the EDS's PDO maps, as the twin did (a map the real node stored with 0x1010 and the controller never
rewrote would be decoded wrongly).
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable

import can

from drivers.can.interface import to_frame, to_message
from drivers.can.slcan import CanFrame
from drivers.canopen.bus import CanopenBus
from drivers.canopen.node import CanopenNode
from drivers.canopen.pdo import od_variable
from drivers.erob.drives import ErobDrives
from drivers.faults import BusFaults
from drivers.ports import PtyPort
from drivers.server import ServerThread
from drivers.side_by_side import SideBySideLog, record_pair
from firmware_models.erob.cia402 import Cia402Drive, Units

__all__ = ["CanMirror"]

log = logging.getLogger("servo-hil")

_SDO_TX, _SDO_RX = 0x580, 0x600
_SDO_UPLOAD_REPLY, _SDO_DOWNLOAD = 0x40, 0x20       # command specifier bits 5..7 of byte 0
_EXPEDITED, _SIZE_GIVEN = 0x02, 0x01
_OPERATION_ENABLED = (0x6F, 0x27)                   # statusword mask → value (CiA 402-2 FSA)

# drive object → (state field, SI conversion with the drive's units)
_STATE_OBJECTS: dict[tuple[int, int], tuple[str, Callable[[Units, int], float | bool]]] = {
    (0x6064, 0): ("position", lambda u, x: u.position_rad(x)),
    (0x606C, 0): ("velocity", lambda u, x: u.velocity_rad(x)),
    (0x6078, 0): ("current", lambda u, x: u.current_a(x)),
    (0x6077, 0): ("torque", lambda u, x: u.torque_nm(x)),
    (0x607A, 0): ("goal", lambda u, x: u.position_rad(x)),
    (0x6079, 0): ("voltage", lambda u, x: x / 1000.0),                          # mV
    (0x22A2, 0): ("temperature", lambda u, x: float(x)),                          # °C
    (0x6041, 0): ("enable", lambda u, x: x & _OPERATION_ENABLED[0] == _OPERATION_ENABLED[1]),
}


def _state_fields(items: list[tuple[int, int, int]], units: Units) -> dict:
    """The recorder's state fields (SI) of the drive objects in `items` ((index, subindex, raw value))."""
    out = {}
    for index, subindex, value in items:
        known = _STATE_OBJECTS.get((index, subindex))
        if known is not None and isinstance(value, int):
            out[known[0]] = known[1](units, value)
    return out


class CanMirror(CanopenBus):
    """The CAN bus `name` mirrored: the controller on `controller` (our SLCAN pty), the real nodes on `real`
    (a python-can bus, described by `real_label`), the rig's `nodes` as twins. `joints`: node ID → joint."""

    def __init__(self, drives: ErobDrives, nodes: list[tuple[Cia402Drive, int, BusFaults]], controller: PtyPort,
                 real: can.BusABC, real_label: str, joints: dict[int, str], record: SideBySideLog | None = None,
                 bitrate: int = 1_000_000, name: str = "can"):
        super().__init__(drives, nodes, controller, bitrate, name)
        self.real = real
        self.real_label = real_label
        self.joints = joints
        self.record = record
        self.forwarded = {"to_real": 0, "to_controller": 0}   # frames
        self.send_errors = 0
        self._cycle: dict[int, tuple[int, dict, dict]] = {}   # node ID → (t_ns, real, sim) gathered so far
        self._reader = ServerThread(f"servo-hil-mirror-{name}", target=self._read_real)

    @property
    def summary(self) -> str:
        return f"{super().summary}; mirroring {self.real_label}"

    @property
    def error(self) -> BaseException | None:
        return self._reader.error or super().error

    def start(self) -> None:
        super().start()
        self._reader.start()

    def stop(self, timeout: float = 1.0) -> None:
        self._reader.stop(timeout)
        super().stop(timeout)
        self.real.shutdown()
        if self.record is not None:
            with self.drives.lock:
                self._log_cycles()
            self.record.close()

    # ------------------------------------------------------------------ controller → real bus (adapter thread)
    def _sender(self, faults: BusFaults) -> Callable[[CanFrame], None]:
        return lambda frame: None            # the twins' own frames stay here: the real nodes answer

    def _on_frame(self, frame: CanFrame, t: float) -> None:
        try:
            self.real.send(to_message(frame))    # first the wire, unchanged; then the twins
            self.forwarded["to_real"] += 1
        except can.CanError as exc:
            self.send_errors += 1
            if self.send_errors == 1:
                log.warning("mirror %s: a frame could not be sent to %s: %s (counted, logged once)",
                            self.name, self.real_label, exc)
        super()._on_frame(frame, t)
        if self.record is not None:
            self._log_command(frame)

    def _log_command(self, frame: CanFrame) -> None:
        """A controller frame addressed to a node, on its joint's /bus/<joint>/commands."""
        if frame.extended or frame.remote:
            return
        cid, data = frame.id, frame.data
        with self.drives.lock:
            for node in self.nodes:
                message = _command(node, cid, data)
                joint = self.joints.get(node.id)
                if message is not None and joint is not None:
                    self.record.command(joint, time.time_ns(), message)

    # ------------------------------------------------------------------ real bus → controller (reader thread)
    def _read_real(self, stop: threading.Event) -> None:
        while not stop.is_set():
            msg = self.real.recv(0.05)
            frame = None if msg is None else to_frame(msg)
            if frame is None:
                continue
            self.adapter.send(frame)          # unchanged, in arrival order, paced on our wire
            self.forwarded["to_controller"] += 1
            t_ns = time.time_ns()
            super()._on_frame(frame, time.monotonic())   # the twins hear the real nodes too
            if self.record is not None:
                self._log_state(frame, t_ns)

    def _log_state(self, frame: CanFrame, t_ns: int) -> None:
        if frame.extended or frame.remote:
            return
        with self.drives.lock:
            for node in self.nodes:
                items = _reply_items(node, frame.id, frame.data)
                if not items:
                    continue
                drive = node.drive
                real = _state_fields(items, drive.units)
                drive.refresh()                   # the twin's actual values now, as a SYNC samples them
                sim = _state_fields([(i, s, drive.values.get((i, s))) for i, s, _ in items], drive.units)
                held = self._cycle.get(node.id)
                if held is not None and held[1].keys() & real.keys():
                    self._log_cycles(node.id)     # a value again: the previous sample is complete
                    held = None
                if held is None:
                    self._cycle[node.id] = (t_ns, real, sim)
                else:
                    held[1].update(real)
                    held[2].update(sim)
                return

    def _log_cycles(self, node_id: int | None = None) -> None:
        """Log the values gathered for `node_id` (None: every node) as one real/sim pair (under the lock)."""
        for n in [node_id] if node_id is not None else list(self._cycle):
            held = self._cycle.pop(n, None)
            joint = self.joints.get(n)
            if held is not None and joint is not None:
                record_pair(self.record, joint, *held)


def _reply_items(node: CanopenNode, cid: int, data: bytes) -> list[tuple[int, int, int]]:
    """(index, subindex, value) of the drive objects a real frame from `node` carries: one of its TPDOs
    (decoded with the twin's mapping) or an expedited SDO upload reply; [] for anything else."""
    if cid == _SDO_TX + node.id:
        if len(data) == 8 and data[0] & 0xE0 == _SDO_UPLOAD_REPLY and data[0] & _EXPEDITED:
            index, subindex = struct.unpack_from("<HB", data, 1)
            size = 4 - (data[0] >> 2 & 3) if data[0] & _SIZE_GIVEN else 4
            try:
                var = od_variable(node.od, index, subindex)
                value = var.decode_raw(bytes(data[4:4 + min(size, len(var) // 8)]))
            except Exception:       # an object the twin's EDS lacks, or a size that does not fit it
                return []
            return [(index, subindex, value)]
        return []
    for p in node.tpdos:
        if p.valid and p.entries and cid == p.can_id and len(data) >= p.length:
            return [(index, subindex, value) for (index, subindex), value in p.unpack(data)]
    return []


def _command(node: CanopenNode, cid: int, data: bytes) -> dict | None:
    """The bus command a controller frame gives `node`: NMT, SDO download, RPDO; None if none."""
    if cid == 0 and len(data) == 2 and data[1] in (0, node.id):
        return {"service": "nmt", "command": data[0]}
    if cid == _SDO_RX + node.id and len(data) == 8 and data[0] & 0xE0 == _SDO_DOWNLOAD:
        index, subindex = struct.unpack_from("<HB", data, 1)
        message = {"service": "sdo_download", "index": index, "subindex": subindex}
        if data[0] & _EXPEDITED:
            size = 4 - (data[0] >> 2 & 3) if data[0] & _SIZE_GIVEN else 4
            message["data"] = bytes(data[4:4 + size])
        return message
    for p in node.rpdos:
        if p.valid and p.entries and cid == p.can_id and len(data) >= p.length:
            return {"service": "rpdo", "cob_id": cid, "data": data,
                    "objects": {f"0x{i:04X}:{s}": v for (i, s), v in p.unpack(data)}}
    return None
