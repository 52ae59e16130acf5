"""Proxy mirror of a bus on the FF FF frame (Feetech SCS/STS, Dynamixel Protocol 1.0): what its packets mean to the
serial mirror (`drivers.hosts.serial_mirror`; docs/mirror.md, docs/feetech.md "Mirror").

Instruction layouts: Protocol 1.0 §Instruction Packet, §SYNC WRITE, §BULK READ (ROBOTIS e-manual); Feetech SCS
protocol manual §READ, §WRITE, §SYNC READ, §SYNC WRITE. Addresses and lengths are one byte; a status packet's
first field is its error byte.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from drivers.emulated.protocol1.bus import Protocol1Bus
from drivers.emulated.protocol1.dynamixel import ERROR_BITS as DYNAMIXEL1_ERRORS
from drivers.emulated.protocol1.frame import (
    BROADCAST_ID,
    Instruction,
    Packet,
    Parser,
    decode_status,
    encode_instruction,
)
from drivers.hosts.serial_mirror import NOTHING, MirrorWire, Request, SerialMirror
from drivers.hosts.side_by_side import SideBySideLog
from drivers.wire.ports import PtyPort, SerialDevicePort
from firmware_models.feetech.control_table import decode_sign, encode_sign

__all__ = ["Dynamixel1Wire", "FeetechWire", "Protocol1Mirror", "Protocol1Wire"]


class Protocol1Wire(MirrorWire):
    """The FF FF frame. `failures`: the error bits that say the instruction was not carried out (its reply's data
    is not the servo's); a family's items and their encoding come from a subclass."""

    failures = 0

    def parser(self, replies: bool) -> Parser:
        return Parser()      # instruction and status frames look alike: one parser reads both

    def good(self, packet) -> bool:
        return isinstance(packet, Packet)

    def read_instruction(self, sid: int, address: int, length: int) -> bytes:
        return encode_instruction(sid, Instruction.READ, bytes((address, length)))

    def reply(self, packet: Packet) -> tuple[int, bytes] | None:
        error, data = decode_status(packet)
        return None if error & self.failures else (error, data)

    def request(self, packet: Packet) -> Request:
        ins, pid, p = packet.instruction, packet.id, packet.params
        if ins == Instruction.READ and len(p) == 2:
            return Request({pid: (p[0], p[1])}, None, [], [])
        if ins in (Instruction.WRITE, Instruction.REG_WRITE) and len(p) >= 2:
            command = [(pid, _command(ins, p[0], p[1:]))]
            if ins == Instruction.WRITE and pid != BROADCAST_ID:
                return Request({}, (pid, p[0], p[1:]), [], command)
            return Request({}, None, [(pid, p[0], len(p) - 1)], command)
        if ins == Instruction.SYNC_WRITE and len(p) >= 2 and p[1] and not (len(p) - 2) % (p[1] + 1):
            address, n = p[0], p[1]
            items = [(p[k], p[k + 1:k + 1 + n]) for k in range(2, len(p), n + 1)]
            return Request({}, None, [(i, address, n) for i, _ in items],
                           [(i, _command(ins, address, d)) for i, d in items])
        if ins == Instruction.SYNC_READ and len(p) >= 2:
            return Request({i: (p[0], p[1]) for i in p[2:]}, None, [], [])
        if ins == Instruction.BULK_READ and len(p) >= 1 and not (len(p) - 1) % 3:
            return Request({p[k + 1]: (p[k + 2], p[k]) for k in range(1, len(p), 3)}, None, [], [])
        if ins == Instruction.RESET:
            return Request({}, None, [(pid, 0, 256)], [])
        return NOTHING


def _command(ins: int, address: int, data: bytes) -> dict:
    return {"instruction": Instruction(ins).name, "address": address, "data": bytes(data).hex()}


class FeetechWire(Protocol1Wire):
    """Feetech STS servos (firmware_models.feetech): Operating_Mode (33) is EEPROM, Torque_Enable (40) and the goals
    RAM (STS memory table); items in the model's byte order, sign-magnitude where it says so. Every error bit
    reports the servo's state beside good data (drivers/emulated/protocol1/feetech.py): none is a refusal."""

    mode_item, torque_item = "Operating_Mode", "Torque_Enable"
    goal_items = ("Acceleration", "Goal_Time", "Goal_Velocity", "Torque_Limit", "Goal_Position")
    goal_position = "Goal_Position"

    def value(self, servo, name: str, raw: bytes) -> int:
        return decode_sign(int.from_bytes(raw, servo.spec.byte_order), servo.spec.item(name).sign_bit)

    def write_packet(self, servo, name: str, value: int) -> Packet:
        it = servo.spec.item(name)
        raw = max(0, min(encode_sign(value, it.sign_bit), (1 << (8 * it.size)) - 1))
        params = bytes((it.address,)) + raw.to_bytes(it.size, servo.spec.byte_order)
        return Packet(servo.id, Instruction.WRITE, params, 6 + len(params))


class Dynamixel1Wire(Protocol1Wire):
    """Dynamixel Protocol 1.0 servos (firmware_models.dynamixel.protocol1): no operating-mode register (the angle
    limits, EEPROM, choose joint or wheel mode), Torque Enable (24) and the goals RAM, items little-endian (e-manual
    AX-12A / MX-64 Control Table). Instruction, Checksum and Range errors refuse the packet, Angle Limit a goal
    (Protocol 1.0 §Status Packet); the others report the servo's state beside good data."""

    mode_item, torque_item = None, "Torque Enable"
    goal_items = ("Goal Acceleration", "Moving Speed", "Torque Limit", "Goal Position")
    goal_position = "Goal Position"
    failures = (DYNAMIXEL1_ERRORS["instruction"] | DYNAMIXEL1_ERRORS["checksum"] | DYNAMIXEL1_ERRORS["range"]
                | DYNAMIXEL1_ERRORS["angle_limit"])

    def value(self, servo, name: str, raw: bytes) -> int:
        return servo.spec.item(name).decode(raw)

    def write_packet(self, servo, name: str, value: int) -> Packet:
        it = servo.spec.item(name)
        params = bytes((it.address,)) + it.encode(value)
        return Packet(servo.id, Instruction.WRITE, params, 6 + len(params))


class Protocol1Mirror(SerialMirror):
    """Forwards between `controller` (our pty) and `real` (the real FF FF bus) and drives the `twin` bus, whose
    servos `wire` knows (FeetechWire by default)."""

    def __init__(self, twin: Protocol1Bus, controller: PtyPort, real: SerialDevicePort, joints: dict[int, str],
                 record: SideBySideLog | None = None,
                 batch: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext, name: str = "mirror",
                 wire: Protocol1Wire | None = None):
        super().__init__(wire or FeetechWire(), twin, controller, real, joints, record, batch, name)
