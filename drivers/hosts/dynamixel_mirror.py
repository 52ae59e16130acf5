"""Proxy mirror of a Dynamixel bus: our pty between an unchanged controller and the real bus, the rig's servos as
the real servos' twins, and the side-by-side log of both (docs/protocols/dynamixel.md, "Proxy mirror")."""

from __future__ import annotations

import contextlib
import logging
import select
import threading
import time
from collections.abc import Callable

from drivers.emulated.dynamixel.bus import DynamixelBus
from drivers.emulated.dynamixel.protocol import (
    BROADCAST_ID,
    CorruptPacket,
    Instruction,
    Packet,
    Parser,
    ProtocolError,
    decode_bulk_read,
    decode_bulk_write,
    decode_read,
    decode_status,
    decode_sync_read,
    decode_sync_write,
    decode_write,
    encode_instruction,
)
from drivers.emulated.dynamixel.server import BusThread
from drivers.hosts.side_by_side import SideBySideLog, record_pair
from drivers.wire.ports import PtyPort, SerialDevicePort

log = logging.getLogger("servo-hil")

_WRITES = (Instruction.WRITE, Instruction.REG_WRITE)
# what the twin takes from the real servo, in the order a controller writes them: mode with torque off, torque,
# then the goals (the firmware sets Goal Position to Present Position as torque comes on)
_STATE_ITEMS = ("Operating Mode", "Torque Enable")   # written in this order, then the goal items
_GOAL_ITEMS = ("Goal PWM", "Goal Current", "Goal Velocity", "Profile Acceleration", "Profile Velocity",
               "Goal Position")
_STATE_KEYS = {"Torque Enable": "enable", "Operating Mode": "mode"}
_ATTACH_TIMEOUT_S = 0.1      # per read of the real servo at start; no reply: the twin keeps its power-up state


class MirrorServer(BusThread):
    """Forwards between `controller` (our pty) and `real` (the real bus) and drives the `twin` bus."""

    def __init__(self, twin: DynamixelBus, controller: PtyPort, real: SerialDevicePort, joints: dict[int, str],
                 record: SideBySideLog | None = None,
                 batch: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext, name: str = "mirror"):
        super().__init__(twin, controller, name, batch)
        self.real = real
        self.joints = joints            # servo ID → joint name
        self.record = record            # a servo_hil.logs.mcap.SideBySideLog, or None
        self.forwarded = {"to_real": 0, "to_controller": 0}
        self._requests = Parser()                      # the controller's instructions
        self._replies = Parser(accept_status=True)     # the real servos' status packets
        self._pending: dict[int, tuple[int, int]] = {}  # ID → (address, length) of the read it answers
        self._writing: dict[int, tuple[int, bytes]] = {}  # ID → (address, data) of the write it acknowledges
        self.real_state: dict[int, dict[str, int]] = {}  # ID → the real servo's last reported _STATE_ITEMS
        self.syncs = 0                                   # times the twin took the real servo's state
        self.attached = threading.Event()                # set once the twins took the real state at start
        self._closing += [real] + ([record] if record is not None else [])

    def serve(self) -> None:
        self.attach()
        self.attached.set()
        ctl, real = self.port.fileno(), self.real.fileno()
        baud = None
        while True:
            ready, _, _ = select.select([ctl, real, self.stop_fd], [], [], 0.05)
            if self.stop_fd in ready:
                return
            now = time.monotonic()
            if ctl in ready:
                data = self.port.read()
                if data:
                    b = self.port.baud()
                    if b and b != baud:
                        self.real.set_baud(b)    # the real line runs at the speed the controller chose
                        baud = b
                    self.forwarded["to_real"] += len(data)
                    self.real.write(data)        # first the wire, unchanged; then the twin
                    for packet in self.parse(self._requests, data, now):
                        self._to_twin(packet)
            if real in ready:
                data = self.real.read()
                if data:
                    self.forwarded["to_controller"] += len(data)
                    self.port.write(data)
                    for packet in self.parse(self._replies, data, now):
                        self._from_real(packet)

    # ------------------------------------------------------------------ the twin follows the real servo
    def attach(self) -> None:
        """Read each twin's mode, torque and goal items from the real servo and write them into the twin."""
        for servo in self.bus.servos:
            names = [n for n in (*_STATE_ITEMS, *_GOAL_ITEMS) if servo.spec.has(n)]
            values: dict[str, int] = {}
            for span in _spans(servo, names):
                data = self._read_real(servo.id, *span)
                if data is None:
                    log.warning("mirror %s: ID %d did not answer a read of %d bytes at %d on the real bus; "
                                "the twin keeps its power-up state until a reply shows the real one",
                                self.name, servo.id, span[1], span[0])
                    break
                values.update(_items(servo, names, span[0], data))
            else:
                self._take(servo, values, "attach")

    def _read_real(self, dxl_id: int, address: int, length: int) -> bytes | None:
        """The data of one Read of the real servo (before the controller is served), None without a good reply."""
        self.real.write(encode_instruction(dxl_id, Instruction.READ, address.to_bytes(2, "little")
                                           + length.to_bytes(2, "little")))
        parser, end = Parser(accept_status=True), time.monotonic() + _ATTACH_TIMEOUT_S
        while (left := end - time.monotonic()) > 0:
            if not select.select([self.real.fileno()], [], [], left)[0]:
                break
            for packet in parser.feed(self.real.read(), time.monotonic()):
                if isinstance(packet, Packet) and packet.id == dxl_id and packet.instruction == Instruction.STATUS:
                    error, data = decode_status(packet)
                    return data if not error & 0x7F and len(data) == length else None
        return None

    def _take(self, servo, values: dict[str, int], reason: str, t_ns: int | None = None) -> None:
        """Write the real servo's `values` (item → raw value) into the twin, then record the sync."""
        real = {k: values[k] for k in _STATE_ITEMS if k in values}
        self.real_state.setdefault(servo.id, {}).update(real)
        with self.lock, self.batch():
            before = {k: servo.table.get(k) for k in _STATE_ITEMS}
            mode = values.get("Operating Mode")
            writes = []
            torque = before["Torque Enable"]
            if mode is not None and mode != before["Operating Mode"]:
                writes += [("Torque Enable", 0), ("Operating Mode", mode)]
                torque = 0
            # before the goals: torque on sets Goal Position to Present Position
            if values.get("Torque Enable", torque) != torque:
                writes.append(("Torque Enable", values["Torque Enable"]))
            writes += [(n, values[n]) for n in _GOAL_ITEMS if n in values]
            for name, value in writes:
                item = servo.spec.item(name)
                params = item.address.to_bytes(2, "little") + item.encode(value)
                self.bus.handle(Packet(servo.id, Instruction.WRITE, params, 12 + len(params)), None)
            after = {k: servo.table.get(k) for k in _STATE_ITEMS}
        if reason == "divergence" or after != before:     # at start, an event only if the twin changed
            self.syncs += 1
            joint = self.joints.get(servo.id)
            log.info("mirror %s: twin ID %d takes the real servo's state (%s): %s", self.name, servo.id, reason,
                     ", ".join(f"{k} {v}" for k, v in real.items()))
            if self.record is not None and joint:
                self.record.event(joint, t_ns or time.time_ns(), {
                    "event": "twin_sync", "reason": reason,
                    "real": {_STATE_KEYS[k]: v for k, v in real.items()},
                    "sim_before": {_STATE_KEYS[k]: v for k, v in before.items()},
                    "sim_after": {_STATE_KEYS[k]: v for k, v in after.items()}})

    def _states(self, servo, real: dict, sim: dict) -> None:
        """Add enable and mode to a real/sim pair (the twin's registers, the real servo's last reported ones), and
        the twin's goal to its side."""
        known = self.real_state.get(servo.id, {})
        for name, key in _STATE_KEYS.items():
            if key == "enable":
                sim.setdefault(key, bool(servo.table.get(name)))
                if name in known:
                    real.setdefault(key, bool(known[name]))
            else:
                sim[key] = servo.table.get(name)
                if name in known:
                    real[key] = known[name]
        if "goal" not in sim and servo.spec.has("Goal Position"):
            # every goal write reaches the twin: its Goal Position is the controller's goal, read or not
            it = servo.spec.item("Goal Position")
            sim.update(servo.decode_state(it.address, bytes(servo.table.data[it.address:it.address + it.size])))

    # ------------------------------------------------------------------ twin side
    def _to_twin(self, packet: Packet | CorruptPacket) -> None:
        if isinstance(packet, CorruptPacket):
            return
        self._note_request(packet)
        with self.lock, self.batch():
            self.bus.handle(packet, None)     # the twin executes it; its replies stay here
        if self.record is not None and packet.instruction in _WRITES:
            address, data = decode_write(packet.params)
            joint = self.joints.get(packet.id)
            if joint:
                self.record.command(joint, time.time_ns(), {"instruction": Instruction(packet.instruction).name,
                                                            "address": address, "data": data.hex()})

    def _note_request(self, packet: Packet) -> None:
        """Remember which addresses the coming replies carry, per ID."""
        ins = packet.instruction
        try:
            if ins == Instruction.READ:
                self._pending[packet.id] = decode_read(packet.params)
            elif ins == Instruction.WRITE and packet.id != BROADCAST_ID:
                self._writing[packet.id] = decode_write(packet.params)
            elif ins in (Instruction.WRITE, Instruction.REG_WRITE):
                address, data = decode_write(packet.params)
                self._unconfirmed(packet.id, address, len(data))
            elif ins == Instruction.SYNC_WRITE:
                address, length, items = decode_sync_write(packet.params)
                for dxl_id, _ in items:
                    self._unconfirmed(dxl_id, address, length)
            elif ins == Instruction.BULK_WRITE:
                for dxl_id, address, data in decode_bulk_write(packet.params):
                    self._unconfirmed(dxl_id, address, len(data))
            elif ins in (Instruction.REBOOT, Instruction.FACTORY_RESET):
                self._unconfirmed(packet.id, 0, 1 << 16)
            elif ins == Instruction.SYNC_READ:
                address, length, ids = decode_sync_read(packet.params)
                self._pending.update({i: (address, length) for i in ids})
            elif ins == Instruction.BULK_READ:
                self._pending.update({i: (a, n) for i, a, n in decode_bulk_read(packet.params)})
        except ProtocolError:
            pass

    def _unconfirmed(self, dxl_id: int, address: int, length: int) -> None:
        """A change no status packet confirms (Sync/Bulk/broadcast/registered writes, Reboot): the real servo's
        Torque Enable and Operating Mode, if touched, are unknown until a reply reports them again."""
        for servo in self.bus.servos:
            if dxl_id in (servo.id, BROADCAST_ID):
                known = self.real_state.get(servo.id, {})
                for name in _STATE_ITEMS:
                    item = servo.spec.item(name)
                    if address <= item.address < address + length:
                        known.pop(name, None)

    # ------------------------------------------------------------------ real side
    def _from_real(self, packet: Packet | CorruptPacket) -> None:
        if isinstance(packet, CorruptPacket) or packet.instruction != Instruction.STATUS:
            return
        read, write = self._pending.pop(packet.id, None), self._writing.pop(packet.id, None)
        servo = next((s for s in self.bus.servos if s.id == packet.id), None)
        if servo is None or (read is None and write is None):
            return
        try:
            error, data = decode_status(packet)
        except ProtocolError:
            return
        if error & 0x7F:
            return
        t_ns = time.time_ns()
        if read is None:                     # the real servo acknowledged a write: it holds those values now
            address, written = write
            names = [n for n in (*_STATE_ITEMS, *_GOAL_ITEMS) if servo.spec.has(n)]
            self._follow(servo, _items(servo, names, address, written), t_ns)
            return
        address, length = read
        if len(data) != length:
            return
        names = [n for n in (*_STATE_ITEMS, *_GOAL_ITEMS) if servo.spec.has(n)]
        reported = _items(servo, names, address, data)
        joint = self.joints.get(packet.id)
        if self.record is not None and joint is not None:
            with self.lock:
                real = servo.decode_state(address, data)
                servo.refresh(address, length)
                sim = servo.decode_state(address, bytes(servo.table.data[address:address + length]))
                self.real_state.setdefault(servo.id, {}).update({k: reported[k] for k in _STATE_ITEMS
                                                                 if k in reported})
                self._states(servo, real, sim)
            record_pair(self.record, joint, t_ns, real, sim)   # as they were: a disagreement shows in the log
        self._follow(servo, reported, t_ns)

    def _follow(self, servo, reported: dict[str, int], t_ns: int) -> None:
        """The twin takes the real servo's state when `reported` (item → raw value) shows a different one."""
        if not any(k in reported for k in _STATE_ITEMS):
            return
        with self.lock:
            differs = any(servo.table.get(k) != v for k, v in reported.items() if k in _STATE_ITEMS)
        if differs:
            self._take(servo, reported, "divergence", t_ns)
        else:
            self.real_state.setdefault(servo.id, {}).update({k: reported[k] for k in _STATE_ITEMS
                                                             if k in reported})


def _items(servo, names: list[str], address: int, data: bytes) -> dict[str, int]:
    """Raw values of the items `names` that lie wholly within `data` read (or written) at `address`."""
    out = {}
    for name in names:
        item = servo.spec.item(name)
        if address <= item.address and item.address + item.size <= address + len(data):
            raw = data[item.address - address:item.address - address + item.size]
            out[name] = int.from_bytes(raw, "little", signed=item.signed)
    return out


def _spans(servo, names: list[str]) -> list[tuple[int, int]]:
    """(address, length) reads covering the items `names`: one per group of items at most 64 bytes apart."""
    items = sorted((servo.spec.item(n) for n in names), key=lambda it: it.address)
    spans: list[list[int]] = []
    for it in items:
        if spans and it.address + it.size - spans[-1][0] <= 64:
            spans[-1][1] = it.address + it.size - spans[-1][0]
        else:
            spans.append([it.address, it.size])
    return [(a, n) for a, n in spans]
