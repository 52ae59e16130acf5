"""Proxy mirror: our pty between an unchanged controller and the real Dynamixel bus.

Every byte the controller sends goes to the real bus as it came, and every byte the real servos send
back goes to the controller as it came: the controller sees the real bus, unchanged. On the side,
the instructions also reach a simulated twin of each servo (the rig's servos on this bus), so goal,
mode and gain writes seen on the wire drive the twin; its own replies are dropped. When a real reply
answers a read of the Present items, the real values and the twin's, read at the same moment, go to
the side-by-side recorder (`/real/<joint>/state`, `/sim/<joint>/state`), and each write to
`/bus/<joint>/commands`.
"""

from __future__ import annotations

import contextlib
import logging
import select
import time
from collections.abc import Callable

from drivers.dynamixel.bus import DynamixelBus
from drivers.dynamixel.protocol import (
    CorruptPacket,
    Instruction,
    Packet,
    Parser,
    ProtocolError,
    decode_bulk_read,
    decode_read,
    decode_status,
    decode_sync_read,
    decode_write,
)
from drivers.dynamixel.server import BusThread
from drivers.ports import PtyPort, SerialDevicePort
from drivers.side_by_side import SideBySideLog, record_pair

log = logging.getLogger("servo-hil")

_WRITES = (Instruction.WRITE, Instruction.REG_WRITE)


class MirrorServer(BusThread):
    """Forwards between `controller` (our pty) and `real` (the real bus) and drives the `twin` bus."""

    def __init__(self, twin: DynamixelBus, controller: PtyPort, real: SerialDevicePort, joints: dict[int, str],
                 record: SideBySideLog | None = None,
                 batch: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext, name: str = "mirror"):
        super().__init__(twin, controller, name, batch)
        self.real = real
        self.joints = joints            # servo ID → joint name
        self.record = record            # a hil.logs.mcap.SideBySideLog, or None
        self.forwarded = {"to_real": 0, "to_controller": 0}
        self._requests = Parser()                      # the controller's instructions
        self._replies = Parser(accept_status=True)     # the real servos' status packets
        self._pending: dict[int, tuple[int, int]] = {}  # ID → (address, length) of the read it answers
        self._closing += [real] + ([record] if record is not None else [])

    def serve(self) -> None:
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
                    for packet in self._requests.feed(data, now):
                        self._to_twin(packet)
            if real in ready:
                data = self.real.read()
                if data:
                    self.forwarded["to_controller"] += len(data)
                    self.port.write(data)
                    for packet in self._replies.feed(data, now):
                        self._from_real(packet)

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
            elif ins == Instruction.SYNC_READ:
                address, length, ids = decode_sync_read(packet.params)
                self._pending.update({i: (address, length) for i in ids})
            elif ins == Instruction.BULK_READ:
                self._pending.update({i: (a, n) for i, a, n in decode_bulk_read(packet.params)})
        except ProtocolError:
            pass

    # ------------------------------------------------------------------ real side
    def _from_real(self, packet: Packet | CorruptPacket) -> None:
        if self.record is None or isinstance(packet, CorruptPacket) or packet.instruction != Instruction.STATUS:
            return
        read = self._pending.pop(packet.id, None)
        joint = self.joints.get(packet.id)
        if read is None or joint is None:
            return
        try:
            error, data = decode_status(packet)
        except ProtocolError:
            return
        address, length = read
        if error & 0x7F or len(data) != length:
            return
        servo = next((s for s in self.bus.servos if s.id == packet.id), None)
        if servo is None:
            return
        t_ns = time.time_ns()
        with self.lock:
            real = servo.decode_state(address, data)
            servo.refresh(address, length)
            sim = servo.decode_state(address, bytes(servo.table.data[address:address + length]))
        record_pair(self.record, joint, t_ns, real, sim)

