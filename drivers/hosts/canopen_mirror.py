"""Proxy mirror of a CANopen bus: our SLCAN pty between an unchanged controller and the real bus, the rig's nodes as
the real nodes' twins, and the side-by-side log of both (docs/protocols/canopen.md, "Proxy mirror")."""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable

import can

from drivers.emulated.canopen.bus import CanopenBus
from drivers.emulated.canopen.node import NMT_PRE_OPERATIONAL, NMT_START, NMT_STOP, CanopenNode
from drivers.emulated.canopen.pdo import od_variable
from drivers.emulated.slcan.adapter import CanFrame
from drivers.hosts.can_interface import to_frame, to_message
from drivers.hosts.side_by_side import SideBySideLog, record_pair
from drivers.schedulers.cia402_drives import Cia402Drives
from drivers.wire.faults import BusFaults
from drivers.wire.ports import PtyPort
from drivers.wire.server import ServerThread
from firmware_models.cia402 import (
    CONTROLWORD,
    MODE,
    MODE_DISPLAY,
    POSITION_ACTUAL,
    STATUSWORD,
    TARGET_POSITION,
    Cia402Drive,
    Mode,
    State,
    Units,
)
from firmware_models.cia402.state_machine import STATE_BITS

__all__ = ["CanMirror"]

log = logging.getLogger("servo-hil")

_SDO_TX, _SDO_RX = 0x580, 0x600
_SDO_UPLOAD_REPLY, _SDO_DOWNLOAD = 0x40, 0x20       # command specifier bits 5..7 of byte 0
_SDO_DOWNLOAD_REPLY = 0x60                          # initiate download response (CiA 301 §7.2.4.3.3)
_MODE_KEY = (0x60, 0x60, 0x00)                      # 0x6060 sub 0, little-endian index
_EXPEDITED, _SIZE_GIVEN = 0x02, 0x01
_OPERATION_ENABLED = (0x6F, 0x27)                   # statusword mask → value (CiA 402-2 FSA)
# per SDO upload from a real node at start [s]; no reply: the twin keeps its state. A drive answers within a
# millisecond; the adapter and a busy host add the rest (python-canopen's SdoClient.RESPONSE_TIMEOUT is 0.3 s)
_ATTACH_TIMEOUT_S = 1.0
# CiA 402 states whose statusword leaves bit 5 (quick stop) open
_BIT5_FREE = (State.NOT_READY_TO_SWITCH_ON, State.SWITCH_ON_DISABLED, State.FAULT_REACTION_ACTIVE, State.FAULT)
# controlwords from Switch on disabled up to each state (CiA 402 transitions 2, 3, 4)
_LADDER = {State.SWITCH_ON_DISABLED: (), State.READY_TO_SWITCH_ON: (0x06,), State.SWITCHED_ON: (0x06, 0x07),
           State.OPERATION_ENABLED: (0x06, 0x07, 0x0F)}
_DISABLE_VOLTAGE, _FAULT_RESET = 0x00, 0x80
# heartbeat NMT state byte → the NMT command that puts a node in it (CiA 301 §7.2.8.3)
_NMT_COMMAND = {0x05: NMT_START, 0x04: NMT_STOP, 0x7F: NMT_PRE_OPERATIONAL}

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
    (0x6061, 0): ("mode", lambda u, x: int(x)),
}


def statusword_state(statusword: int) -> State:
    """The CiA 402 state a statusword shows (bits 0–3, 5, 6; CiA 402-2 Table 30)."""
    for state, bits in STATE_BITS.items():
        mask = 0x4F if state in _BIT5_FREE else 0x6F
        if statusword & mask == bits:
            return state
    return State.NOT_READY_TO_SWITCH_ON


def follow(drive: Cia402Drive, state: State | None, mode: int | None) -> None:
    """Bring `drive` to `state` and `mode` (None: leave as is) the way a master does: mode 0x6060 (CSP after
    0x607A = actual position), then controlwords along the state machine. Fault states are not entered."""
    if mode is not None and mode != drive.read(*MODE_DISPLAY) and drive.mode_supported(mode):
        if mode == Mode.CSP:
            drive.refresh()
            drive.write(*TARGET_POSITION, drive.read(*POSITION_ACTUAL))
        drive.write(*MODE, mode)
    if state is None or state not in _LADDER or drive.state == state:
        return
    if drive.state == State.FAULT:
        drive.write(*CONTROLWORD, _DISABLE_VOLTAGE)
        drive.write(*CONTROLWORD, _FAULT_RESET)        # a rising edge of bit 7: fault reset (transition 15)
    if drive.state in _LADDER and list(_LADDER).index(drive.state) > list(_LADDER).index(state):
        drive.write(*CONTROLWORD, _DISABLE_VOLTAGE)    # down to Switch on disabled (transitions 7, 9, 10, 12)
    elif drive.state == State.QUICK_STOP_ACTIVE:
        drive.write(*CONTROLWORD, _DISABLE_VOLTAGE)
    ladder = _LADDER[state]
    if drive.state in _LADDER:
        ladder = ladder[list(_LADDER).index(drive.state):]
    for cw in ladder:
        drive.write(*CONTROLWORD, cw)


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

    def __init__(self, drives: Cia402Drives, nodes: list[tuple[Cia402Drive, int, BusFaults]], controller: PtyPort,
                 real: can.BusABC, real_label: str, joints: dict[int, str], record: SideBySideLog | None = None,
                 bitrate: int = 1_000_000, name: str = "can"):
        super().__init__(drives, nodes, controller, bitrate, name)
        self.real = real
        self.real_label = real_label
        self.joints = joints
        self.record = record
        self.forwarded = {"to_real": 0, "to_controller": 0}   # frames
        self.send_errors = 0
        # node ID → (t_ns, real, sim, the real fields frames carried) gathered so far
        self._cycle: dict[int, tuple[int, dict, dict, set]] = {}
        self.real_state: dict[int, dict] = {}   # node ID → the real drive's last reported "enable", "mode"
        self._mode_written: dict[int, int] = {}  # node ID → 0x6060 the controller wrote by SDO, unacknowledged
        self.syncs = 0                          # times a twin took the real drive's state
        self._reader = ServerThread(f"servo-hil-mirror-{name}", target=self._read_real)

    @property
    def summary(self) -> str:
        return f"{super().summary}; mirroring {self.real_label}"

    @property
    def error(self) -> BaseException | None:
        return self._reader.error or super().error

    def start(self) -> None:
        self.attach()
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

    # ------------------------------------------------------------------ the twins follow the real drives
    def attach(self) -> None:
        """Read each real node's statusword and mode display by SDO and put its twin in the same state."""
        for node in self.nodes:
            statusword = self._upload(node.id, 0x6041)
            mode = self._upload(node.id, 0x6061) if statusword is not None else None
            if statusword is None or mode is None:
                log.warning("mirror %s: node %d did not answer an SDO upload of 0x%04X on %s; its twin keeps its "
                            "power-up state until a real frame shows the drive's", self.name, node.id,
                            0x6041 if statusword is None else 0x6061, self.real_label)
                continue
            mode = struct.unpack("<b", bytes([mode & 0xFF]))[0]     # INTEGER8 (CiA 402 0x6061)
            with self.drives.lock:
                self._take(node, statusword, mode, "attach", time.time_ns())

    def _upload(self, node_id: int, index: int, subindex: int = 0) -> int | None:
        """One expedited SDO upload from a real node (CiA 301 §7.2.4.3.3), before the mirror forwards anything."""
        request = bytes([0x40, index & 0xFF, index >> 8, subindex, 0, 0, 0, 0])
        self.real.send(can.Message(arbitration_id=_SDO_RX + node_id, data=request, is_extended_id=False))
        end = time.monotonic() + _ATTACH_TIMEOUT_S
        while (left := end - time.monotonic()) > 0:
            msg = self.real.recv(left)
            if msg is None:
                return None
            data = bytes(msg.data)
            if (msg.arbitration_id == _SDO_TX + node_id and len(data) == 8 and data[1:4] == request[1:4]
                    and data[0] & 0xE0 == _SDO_UPLOAD_REPLY and data[0] & _EXPEDITED):
                size = 4 - (data[0] >> 2 & 3) if data[0] & _SIZE_GIVEN else 4
                return int.from_bytes(data[4:4 + size], "little")
        return None

    def _take(self, node: CanopenNode, statusword: int | None, mode: int | None, reason: str, t_ns: int) -> None:
        """The twin of `node` takes the real drive's state and mode (under the drives' lock); an event."""
        drive = node.drive
        real = self.real_state.setdefault(node.id, {})
        if statusword is not None:
            real["enable"] = statusword & _OPERATION_ENABLED[0] == _OPERATION_ENABLED[1]
        if mode is not None:
            real["mode"] = mode
        if drive.state == State.NOT_READY_TO_SWITCH_ON:
            drive.tick()      # a drive just powered up: its first control period (transition 1) comes first
        before = self._twin_state(drive)
        state = None if statusword is None else statusword_state(statusword)
        follow(drive, state, mode)
        after = self._twin_state(drive)
        if reason != "divergence" and after == before:      # at start, an event only if the twin changed
            return
        self.syncs += 1
        log.info("mirror %s: twin of node %d takes the real drive's state (%s): %s, mode %s", self.name, node.id,
                 reason, "?" if state is None else state.name, mode)
        joint = self.joints.get(node.id)
        if self.record is not None and joint is not None:
            self.record.event(joint, t_ns, {
                "event": "twin_sync", "reason": reason,
                "real": {"state": None if state is None else state.name, "mode": mode},
                "sim_before": before, "sim_after": after})

    @staticmethod
    def _twin_state(drive: Cia402Drive) -> dict:
        return {"state": drive.state.name, "mode": drive.read(*MODE_DISPLAY)}

    def _follow(self, node: CanopenNode, items: list[tuple[int, int, int]], t_ns: int) -> None:
        """Resync the twin when a real frame's statusword or mode display differs from the twin's (under the lock)."""
        values = {(i, s): v for i, s, v in items}
        statusword, mode = values.get(STATUSWORD), values.get(MODE_DISPLAY)
        drive = node.drive
        state = None if statusword is None else statusword_state(statusword)
        if (state in _LADDER and state != drive.state) or (mode is not None and mode != drive.read(*MODE_DISPLAY)):
            self._take(node, statusword, mode, "divergence", t_ns)
        else:
            real = self.real_state.setdefault(node.id, {})
            if statusword is not None:
                real["enable"] = statusword & _OPERATION_ENABLED[0] == _OPERATION_ENABLED[1]
            if mode is not None:
                real["mode"] = mode

    def _follow_nmt(self, frame: CanFrame) -> None:
        """A real heartbeat (0x700 + node ID, CiA 301 §7.2.8.3): the twin node takes its NMT state."""
        for node in self.nodes:
            if frame.id == 0x700 + node.id and len(frame.data) >= 1:
                cs = _NMT_COMMAND.get(frame.data[0] & 0x7F)
                if cs is not None and node.state != frame.data[0] & 0x7F:
                    with self.drives.lock:
                        node._nmt(cs, time.monotonic())
                    log.info("mirror %s: twin of node %d takes the real node's NMT state 0x%02X", self.name,
                             node.id, frame.data[0] & 0x7F)

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
        self._note_command(frame)
        if self.record is not None:
            self._log_command(frame)

    def _note_command(self, frame: CanFrame) -> None:
        """A controller command that may change a real drive's state or mode makes them unknown until the drive
        reports them (a statusword, 0x6061) or acknowledges the mode write (an SDO download response)."""
        if frame.extended or frame.remote:
            return
        with self.drives.lock:
            for node in self.nodes:
                message = _command(node, frame.id, frame.data)
                if message is None:
                    continue
                known = self.real_state.get(node.id, {})
                if message["service"] == "nmt":
                    known.clear()
                elif message["service"] == "sdo_download" and (message["index"], message["subindex"]) in (
                        CONTROLWORD, MODE):
                    known.pop("enable" if (message["index"], message["subindex"]) == CONTROLWORD else "mode", None)
                    if (message["index"], message["subindex"]) == MODE and "data" in message:
                        self._mode_written[node.id] = struct.unpack_from("<b", message["data"])[0]
                elif message["service"] == "rpdo":
                    if f"0x{CONTROLWORD[0]:04X}:0" in message["objects"]:
                        known.pop("enable", None)
                    if f"0x{MODE[0]:04X}:0" in message["objects"]:
                        known.pop("mode", None)

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
            self._from_real(frame, t_ns)

    def _from_real(self, frame: CanFrame, t_ns: int) -> None:
        """Log a real frame's drive values beside the twin's, then resync the twin if its state differs."""
        if frame.extended or frame.remote:
            return
        if frame.id & 0x780 == 0x700:
            self._follow_nmt(frame)
            return
        with self.drives.lock:
            for node in self.nodes:
                if frame.id == _SDO_TX + node.id and frame.data[:4] == bytes([_SDO_DOWNLOAD_REPLY, *_MODE_KEY]) \
                        and node.id in self._mode_written:    # the real drive took the mode the controller wrote
                    self.real_state.setdefault(node.id, {})["mode"] = self._mode_written.pop(node.id)
                items = _reply_items(node, frame.id, frame.data)
                if not items:
                    continue
                if self.record is not None:
                    self._log_state(node, items, t_ns)   # as they were: a disagreement shows in the log
                self._follow(node, items, t_ns)
                return

    def _log_state(self, node: CanopenNode, items: list[tuple[int, int, int]], t_ns: int) -> None:
        """Gather one real frame's values and the twin's of the same objects into the node's cycle (under the lock)."""
        drive = node.drive
        real = _state_fields(items, drive.units)
        drive.refresh()                   # the twin's actual values now, as a SYNC samples them
        sim = _state_fields([(i, s, drive.values.get((i, s))) for i, s, _ in items], drive.units)
        sim.update(enable=drive.state == State.OPERATION_ENABLED, mode=drive.read(*MODE_DISPLAY))
        held = self._cycle.get(node.id)
        if held is not None and held[3] & real.keys():
            self._log_cycles(node.id)     # a value again: the previous sample is complete
            held = None
        if held is None:
            self._cycle[node.id] = (t_ns, real, sim, set(real))
        else:
            held[1].update(real)
            held[2].update(sim)
            held[3].update(real)

    def _log_cycles(self, node_id: int | None = None) -> None:
        """Log the values gathered for `node_id` (None: every node) as one real/sim pair (under the lock)."""
        for n in [node_id] if node_id is not None else list(self._cycle):
            held = self._cycle.pop(n, None)
            joint = self.joints.get(n)
            if held is not None and joint is not None:
                t_ns, real, sim, _ = held
                # enable and mode the real drive last reported, when this cycle's frames did not carry them
                record_pair(self.record, joint, t_ns, self.real_state.get(n, {}) | real, sim)


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
