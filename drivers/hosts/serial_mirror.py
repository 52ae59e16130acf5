"""Proxy mirror of a serial servo bus, whatever its packet format: our pty between an unchanged controller and the
real bus, the rig's servos as the real servos' twins, and the side-by-side log of both (docs/mirror.md).

`SerialMirror` forwards and follows; a `MirrorWire` says what the packets of one protocol mean to it (Dynamixel
Protocol 2.0: `drivers.hosts.dynamixel_mirror`; the FF FF frame of Feetech and Protocol 1.0:
`drivers.hosts.protocol1_mirror`). The twins are firmware models with `spec.has/item`, `table.get/data`,
`refresh(address, length)` and `decode_state(address, data)`.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import select
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from drivers.emulated.dynamixel.server import BusThread
from drivers.hosts.side_by_side import SideBySideLog, record_pair
from drivers.wire.ports import PtyPort, SerialDevicePort

log = logging.getLogger("servo-hil")

_ATTACH_TIMEOUT_S = 0.1      # per read of the real servo at start; no reply: the twin keeps its power-up state
_SPAN_BYTES = 64             # items at most this far apart are read at start in one read


class Request(NamedTuple):
    """What one instruction of the controller tells the mirror.

    reads: ID → (address, length) of the data its coming status packet carries. write: (ID, address, data) of a
    unicast write a status packet will acknowledge. unconfirmed: (ID, address, length) of changes no status
    packet confirms (broadcast, Sync, Bulk or registered writes, a reset). commands: (ID, log message) of each
    write, for `/bus/<joint>/commands`.
    """

    reads: dict[int, tuple[int, int]]
    write: tuple[int, int, bytes] | None
    unconfirmed: list[tuple[int, int, int]]
    commands: list[tuple[int, dict]]


NOTHING = Request({}, None, [], [])


class MirrorWire(abc.ABC):
    """One protocol as the mirror needs it: its parsers, what a request and a reply mean, and the items of the
    servo's state it follows (`mode_item` and `torque_item`, written in that order, then `goal_items`; None: a
    family without an operating-mode register)."""

    broadcast_id = 0xFE
    mode_item: str | None
    torque_item: str
    goal_items: tuple[str, ...]
    goal_position: str          # its value is the twin's goal in the log

    @abc.abstractmethod
    def parser(self, replies: bool) -> Any:
        """A new receive-side parser of the controller's instructions, or (`replies`) of the real servos'
        status packets."""

    @abc.abstractmethod
    def good(self, packet: Any) -> bool:
        """Whether the parser returned a whole packet with a good checksum."""

    @abc.abstractmethod
    def read_instruction(self, sid: int, address: int, length: int) -> bytes:
        """The bytes of a Read of `length` bytes at `address` from servo `sid`."""

    @abc.abstractmethod
    def reply(self, packet: Any) -> tuple[int, bytes] | None:
        """(error byte, data) of a real servo's status packet that reports success; None for anything else."""

    @abc.abstractmethod
    def request(self, packet: Any) -> Request:
        """What the controller's instruction `packet` asks (NOTHING where it asks nothing the mirror follows)."""

    @abc.abstractmethod
    def value(self, servo: Any, name: str, raw: bytes) -> int:
        """The register value of item `name`'s bytes `raw`."""

    @abc.abstractmethod
    def write_packet(self, servo: Any, name: str, value: int) -> Any:
        """A Write of `value` to item `name` of `servo`, as the twin's bus takes it (`bus.handle`)."""

    @property
    def state_items(self) -> tuple[str, ...]:
        return (self.mode_item, self.torque_item) if self.mode_item else (self.torque_item,)

    @property
    def state_keys(self) -> dict[str, str]:
        return {self.torque_item: "enable"} | ({self.mode_item: "mode"} if self.mode_item else {})


class SerialMirror(BusThread):
    """Forwards between `controller` (our pty) and `real` (the real bus) and drives the `twin` bus, whose packets
    `wire` reads."""

    def __init__(self, wire: MirrorWire, twin: Any, controller: PtyPort, real: SerialDevicePort,
                 joints: dict[int, str], record: SideBySideLog | None = None,
                 batch: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext, name: str = "mirror"):
        super().__init__(twin, controller, name, batch)
        self.wire = wire
        self.real = real
        self.joints = joints            # servo ID → joint name
        self.record = record            # a servo_hil.logs.mcap.SideBySideRecorder, or None
        self.forwarded = {"to_real": 0, "to_controller": 0}
        self._requests = wire.parser(replies=False)     # the controller's instructions
        self._replies = wire.parser(replies=True)       # the real servos' status packets
        self._pending: dict[int, tuple[int, int]] = {}  # ID → (address, length) of the read it answers
        self._writing: dict[int, tuple[int, bytes]] = {}  # ID → (address, data) of the write it acknowledges
        self.real_state: dict[int, dict[str, int]] = {}  # ID → the real servo's last reported state items
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
    def _followed(self, servo) -> list[str]:
        return [n for n in (*self.wire.state_items, *self.wire.goal_items) if servo.spec.has(n)]

    def attach(self) -> None:
        """Read each twin's mode, torque and goal items from the real servo and write them into the twin."""
        for servo in self.bus.servos:
            names = self._followed(servo)
            values: dict[str, int] = {}
            for span in _spans(servo, names):
                data = self._read_real(servo.id, *span)
                if data is None:
                    log.warning("mirror %s: ID %d did not answer a read of %d bytes at %d on the real bus; "
                                "the twin keeps its power-up state until a reply shows the real one",
                                self.name, servo.id, span[1], span[0])
                    break
                values.update(self._items(servo, names, span[0], data))
            else:
                self._take(servo, values, "attach")

    def _read_real(self, sid: int, address: int, length: int) -> bytes | None:
        """The data of one Read of the real servo (before the controller is served), None without a good reply."""
        self.real.write(self.wire.read_instruction(sid, address, length))
        parser, end = self.wire.parser(replies=True), time.monotonic() + _ATTACH_TIMEOUT_S
        while (left := end - time.monotonic()) > 0:
            if not select.select([self.real.fileno()], [], [], left)[0]:
                break
            for packet in parser.feed(self.real.read(), time.monotonic()):
                if self.wire.good(packet) and packet.id == sid and (reply := self.wire.reply(packet)) is not None:
                    return reply[1] if len(reply[1]) == length else None
        return None

    def _take(self, servo, values: dict[str, int], reason: str, t_ns: int | None = None) -> None:
        """Write the real servo's `values` (item → raw value) into the twin, then record the sync."""
        wire, keys = self.wire, self.wire.state_keys
        real = {k: values[k] for k in wire.state_items if k in values}
        self.real_state.setdefault(servo.id, {}).update(real)
        with self.lock, self.batch():
            before = {k: servo.table.get(k) for k in wire.state_items if servo.spec.has(k)}
            mode = values.get(wire.mode_item)
            writes = []
            torque = before[wire.torque_item]
            if mode is not None and wire.mode_item and mode != before.get(wire.mode_item):
                writes += [(wire.torque_item, 0), (wire.mode_item, mode)]
                torque = 0
            # before the goals: torque on sets the goal position to the present one
            if values.get(wire.torque_item, torque) != torque:
                writes.append((wire.torque_item, values[wire.torque_item]))
            writes += [(n, values[n]) for n in wire.goal_items if n in values]
            for name, value in writes:
                self.bus.handle(wire.write_packet(servo, name, value), None)
            if wire.torque_item in values and servo.table.get(wire.torque_item) != values[wire.torque_item]:
                # a goal write turned the torque on (Protocol 1.0 firmware): back to the real servo's state
                self.bus.handle(wire.write_packet(servo, wire.torque_item, values[wire.torque_item]), None)
            after = {k: servo.table.get(k) for k in before}
        if reason == "divergence" or after != before:     # at start, an event only if the twin changed
            self.syncs += 1
            joint = self.joints.get(servo.id)
            log.info("mirror %s: twin ID %d takes the real servo's state (%s): %s", self.name, servo.id, reason,
                     ", ".join(f"{k} {v}" for k, v in real.items()))
            if self.record is not None and joint:
                self.record.event(joint, t_ns or time.time_ns(), {
                    "event": "twin_sync", "reason": reason,
                    "real": {keys[k]: v for k, v in real.items()},
                    "sim_before": {keys[k]: v for k, v in before.items()},
                    "sim_after": {keys[k]: v for k, v in after.items()}})

    def _states(self, servo, real: dict, sim: dict) -> None:
        """Add enable and mode to a real/sim pair (the twin's registers, the real servo's last reported ones), and
        the twin's goal to its side."""
        known = self.real_state.get(servo.id, {})
        for name, key in self.wire.state_keys.items():
            if not servo.spec.has(name):     # a model without the item (an SCS servo has no Operating_Mode)
                continue
            if key == "enable":
                sim.setdefault(key, bool(servo.table.get(name)))
                if name in known:
                    real.setdefault(key, bool(known[name]))
            else:
                sim[key] = servo.table.get(name)
                if name in known:
                    real[key] = known[name]
        goal = self.wire.goal_position
        if "goal" not in sim and servo.spec.has(goal):
            # every goal write reaches the twin: its goal register is the controller's goal, read or not
            it = servo.spec.item(goal)
            sim.update(servo.decode_state(it.address, bytes(servo.table.data[it.address:it.address + it.size])))

    # ------------------------------------------------------------------ twin side
    def _to_twin(self, packet) -> None:
        if not self.wire.good(packet):
            return
        request = self.wire.request(packet)
        self._note_request(packet.id, request)
        with self.lock, self.batch():
            self.bus.handle(packet, None)     # the twin executes it; its replies stay here
        if self.record is not None:
            t_ns = time.time_ns()
            for sid, message in request.commands:
                joint = self.joints.get(sid)
                if joint:
                    self.record.command(joint, t_ns, message)

    def _note_request(self, sid: int, request: Request) -> None:
        """Remember which addresses the coming replies carry, per ID."""
        for i, span in request.reads.items():
            self._pending[i] = span
            self._writing.pop(i, None)
        if request.write is not None:
            i, address, data = request.write
            self._writing[i] = (address, data)
            self._pending.pop(i, None)
        for i, address, length in request.unconfirmed:
            self._unconfirmed(i, address, length)

    def _unconfirmed(self, sid: int, address: int, length: int) -> None:
        """A change no status packet confirms: the real servo's torque and mode items, if touched, are unknown
        until a reply reports them again."""
        for servo in self.bus.servos:
            if sid in (servo.id, self.wire.broadcast_id):
                known = self.real_state.get(servo.id, {})
                for name in filter(servo.spec.has, self.wire.state_items):
                    item = servo.spec.item(name)
                    if address <= item.address < address + length:
                        known.pop(name, None)

    # ------------------------------------------------------------------ real side
    def _from_real(self, packet) -> None:
        if not self.wire.good(packet):
            return
        reply = self.wire.reply(packet)
        read, write = self._pending.pop(packet.id, None), self._writing.pop(packet.id, None)
        servo = next((s for s in self.bus.servos if s.id == packet.id), None)
        if reply is None or servo is None or (read is None and write is None):
            return
        _, data = reply
        t_ns = time.time_ns()
        names = self._followed(servo)
        if read is None:                     # the real servo acknowledged a write: it holds those values now
            address, written = write
            self._follow(servo, self._items(servo, names, address, written), t_ns)
            return
        address, length = read
        if len(data) != length:
            return
        reported = self._items(servo, names, address, data)
        joint = self.joints.get(packet.id)
        if self.record is not None and joint is not None:
            with self.lock:
                real = servo.decode_state(address, data)
                servo.refresh(address, length)
                sim = servo.decode_state(address, bytes(servo.table.data[address:address + length]))
                self.real_state.setdefault(servo.id, {}).update({k: reported[k] for k in self.wire.state_items
                                                                 if k in reported})
                self._states(servo, real, sim)
            record_pair(self.record, joint, t_ns, real, sim)   # as they were: a disagreement shows in the log
        self._follow(servo, reported, t_ns)

    def _follow(self, servo, reported: dict[str, int], t_ns: int) -> None:
        """The twin takes the real servo's state when `reported` (item → raw value) shows a different one."""
        state = {k: v for k, v in reported.items() if k in self.wire.state_items}
        if not state:
            return
        with self.lock:
            differs = any(servo.table.get(k) != v for k, v in state.items())
        if differs:
            self._take(servo, reported, "divergence", t_ns)
        else:
            self.real_state.setdefault(servo.id, {}).update(state)

    def _items(self, servo, names: list[str], address: int, data: bytes) -> dict[str, int]:
        """Values of the items `names` that lie wholly within `data` read (or written) at `address`."""
        out = {}
        for name in names:
            item = servo.spec.item(name)
            if address <= item.address and item.address + item.size <= address + len(data):
                out[name] = self.wire.value(servo, name, data[item.address - address:item.address - address
                                                               + item.size])
        return out


def _spans(servo, names: list[str]) -> list[tuple[int, int]]:
    """(address, length) reads covering the items `names`: one per group of items at most 64 bytes apart."""
    items = sorted((servo.spec.item(n) for n in names), key=lambda it: it.address)
    spans: list[list[int]] = []
    for it in items:
        if spans and it.address + it.size - spans[-1][0] <= _SPAN_BYTES:
            spans[-1][1] = it.address + it.size - spans[-1][0]
        else:
            spans.append([it.address, it.size])
    return [(a, n) for a, n in spans]
