"""Proxy mirror of a Dynamixel Protocol 2.0 bus: what its packets mean to the serial mirror
(`drivers.hosts.serial_mirror`; docs/protocols/dynamixel.md, "Proxy mirror")."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from drivers.emulated.dynamixel.bus import DynamixelBus
from drivers.emulated.dynamixel.protocol import (
    BROADCAST_ID,
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
from drivers.hosts.serial_mirror import NOTHING, MirrorWire, Request, SerialMirror
from drivers.hosts.side_by_side import SideBySideLog
from drivers.wire.ports import PtyPort, SerialDevicePort

_ALERT = 0x80        # error bit 7 (Protocol 2.0 §Status Packet): a hardware error is latched, the data is good


class DynamixelWire(MirrorWire):
    """Protocol 2.0 (e-manual §Instruction Details): 2-byte addresses and lengths, items little-endian."""

    mode_item, torque_item = "Operating Mode", "Torque Enable"
    goal_items = ("Goal PWM", "Goal Current", "Goal Velocity", "Profile Acceleration", "Profile Velocity",
                  "Goal Position")
    goal_position = "Goal Position"

    def parser(self, replies: bool) -> Parser:
        return Parser(accept_status=replies)

    def good(self, packet) -> bool:
        return isinstance(packet, Packet)

    def read_instruction(self, sid: int, address: int, length: int) -> bytes:
        return encode_instruction(sid, Instruction.READ, address.to_bytes(2, "little") + length.to_bytes(2, "little"))

    def reply(self, packet: Packet) -> tuple[int, bytes] | None:
        if packet.instruction != Instruction.STATUS:
            return None
        try:
            error, data = decode_status(packet)
        except ProtocolError:
            return None
        return None if error & ~_ALERT else (error, data)

    def request(self, packet: Packet) -> Request:
        ins, pid = packet.instruction, packet.id
        try:
            if ins == Instruction.READ:
                return Request({pid: decode_read(packet.params)}, None, [], [])
            if ins in (Instruction.WRITE, Instruction.REG_WRITE):
                address, data = decode_write(packet.params)
                command = [(pid, _command(ins, address, data))]
                if ins == Instruction.WRITE and pid != BROADCAST_ID:
                    return Request({}, (pid, address, data), [], command)
                return Request({}, None, [(pid, address, len(data))], command)
            if ins == Instruction.SYNC_WRITE:
                address, length, items = decode_sync_write(packet.params)
                return Request({}, None, [(i, address, length) for i, _ in items],
                               [(i, _command(ins, address, data)) for i, data in items])
            if ins == Instruction.BULK_WRITE:
                items = decode_bulk_write(packet.params)
                return Request({}, None, [(i, a, len(d)) for i, a, d in items],
                               [(i, _command(ins, a, d)) for i, a, d in items])
            if ins in (Instruction.REBOOT, Instruction.FACTORY_RESET):
                return Request({}, None, [(pid, 0, 1 << 16)], [])
            if ins == Instruction.SYNC_READ:
                address, length, ids = decode_sync_read(packet.params)
                return Request({i: (address, length) for i in ids}, None, [], [])
            if ins == Instruction.BULK_READ:
                return Request({i: (a, n) for i, a, n in decode_bulk_read(packet.params)}, None, [], [])
        except ProtocolError:
            pass
        return NOTHING

    def value(self, servo, name: str, raw: bytes) -> int:
        return servo.spec.item(name).decode(raw)

    def write_packet(self, servo, name: str, value: int) -> Packet:
        item = servo.spec.item(name)
        params = item.address.to_bytes(2, "little") + item.encode(value)
        return Packet(servo.id, Instruction.WRITE, params, 12 + len(params))


def _command(ins: int, address: int, data: bytes) -> dict:
    return {"instruction": Instruction(ins).name, "address": address, "data": data.hex()}


class MirrorServer(SerialMirror):
    """Forwards between `controller` (our pty) and `real` (the real Dynamixel bus) and drives the `twin` bus."""

    def __init__(self, twin: DynamixelBus, controller: PtyPort, real: SerialDevicePort, joints: dict[int, str],
                 record: SideBySideLog | None = None,
                 batch: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext, name: str = "mirror"):
        super().__init__(DynamixelWire(), twin, controller, real, joints, record, batch, name)
