"""A bus of simulated servos on the FF FF frame: who executes an instruction, who answers, and when; what differs
between Dynamixel 1.0 and Feetech is the bus's `Dialect` (docs/protocols/protocol1.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from drivers.emulated.protocol1.frame import (
    BROADCAST_ID,
    CorruptPacket,
    FrameError,
    Instruction,
    Packet,
    encode_status,
)
from drivers.wire.faults import BusFaults, Transmission, apply_faults
from drivers.wire.ports import wire_time_s
from drivers.wire.server import InputFailures

__all__ = ["Dialect", "Protocol1Bus", "Protocol1Servo", "Reply", "Transmission", "packet_bytes"]

_PING_REPLY_BYTES = 6          # FF FF ID 02 ERR CHK


class Reply(NamedTuple):
    """What a servo makes of one instruction: its status packet's error byte and parameters. A servo may return
    any (error, params) pair: firmware models sit below this layer and do not import it."""

    error: int
    params: bytes = b""


class Protocol1Servo(Protocol):
    """What the bus needs of a simulated servo (its firmware model implements it). An instruction's method returns
    the servo's Reply, or None where the servo stays silent."""

    id: int
    baud_bps: int                  # the rate its Baud Rate register selects [bit/s]
    return_delay_s: float          # Return Delay Time [s]
    status_return_level: int

    def ping(self) -> tuple[int, bytes] | None: ...
    def read(self, address: int, length: int) -> tuple[int, bytes] | None: ...
    def write(self, address: int, data: bytes) -> tuple[int, bytes] | None: ...
    def reg_write(self, address: int, data: bytes) -> tuple[int, bytes] | None: ...
    def action(self) -> tuple[int, bytes] | None: ...
    def reset(self) -> tuple[int, bytes] | None: ...
    def housekeeping(self) -> None: ...


@dataclass(frozen=True)
class Dialect:
    """What one protocol on the FF FF frame makes of an instruction.

    instructions: the instruction bytes its servos execute (others: `instruction_error`).
    read_level / all_level: the lowest Status Return Level at which a Read, and every other instruction, is
    answered (Ping always is). checksum_error / instruction_error / length_error: the error bit a unicast packet
    with a bad checksum, an unknown instruction or parameters of the wrong length is answered with; None: the servo
    stays silent. error_bits: name → bit of the status error byte, for documentation and the servos.
    """

    name: str
    instructions: frozenset[int]
    read_level: int
    all_level: int
    error_bits: dict[str, int]
    checksum_error: int | None = None
    instruction_error: int | None = None
    length_error: int | None = None

    def answers(self, level: int, instruction: int) -> bool:
        """Whether a servo at Status Return Level `level` answers a unicast `instruction`."""
        if instruction == Instruction.PING:
            return True
        return level >= (self.read_level if instruction == Instruction.READ else self.all_level)


def packet_bytes(packet: Packet | CorruptPacket) -> bytes:
    """A received packet as the log shows it (header, ID, LEN, instruction, parameters; no checksum)."""
    params = packet.params if isinstance(packet, Packet) else b""
    return bytes((0xFF, 0xFF, packet.id & 0xFF, (len(params) + 2) & 0xFF, packet.instruction & 0xFF)) + params


def _read_params(p: bytes) -> tuple[int, int]:
    if len(p) != 2:
        raise FrameError(f"READ takes 2 parameters (address, length), got {len(p)}")
    return p[0], p[1]


def _write_params(p: bytes) -> tuple[int, bytes]:
    if len(p) < 2:
        raise FrameError(f"WRITE takes an address and at least 1 data byte, got {len(p)} bytes")
    return p[0], p[1:]


class Protocol1Bus:
    """Servos sharing one FF FF bus under `dialect`; `faults[i]` are servo i's injected bus faults."""

    def __init__(self, dialect: Dialect, servos: Sequence[Protocol1Servo],
                 faults: Sequence[BusFaults] | None = None):
        self.dialect = dialect
        self.servos = list(servos)
        self.faults = list(faults) if faults is not None else [BusFaults() for _ in self.servos]
        if len(self.faults) != len(self.servos):
            raise ValueError(f"{len(self.servos)} servos and {len(self.faults)} BusFaults")
        self.stats = {"instructions": 0, "replies": 0, "crc_errors": 0, "ignored": 0}
        self.failures = InputFailures(f"{dialect.name} packet")

    @property
    def errors_isolated(self) -> int:
        """Packets whose handling raised (`handle`), for `status`."""
        return self.failures.count

    def handle(self, packet: Packet | CorruptPacket, baud: int | None) -> list[Transmission]:
        """Execute `packet` on every servo it addresses that listens at `baud` [bit/s] (None: all listen); the
        Transmissions they send back. Whatever one packet raises stays with it: no answer (the controller times
        out), counted in `errors_isolated` and logged once per kind (`InputFailures`)."""
        try:
            return self._handle(packet, baud)
        except Exception as exc:
            self.failures.record(exc, packet.instruction, packet_bytes(packet), "not answered")
            return []

    # ------------------------------------------------------------------ dispatch
    def _handle(self, packet: Packet | CorruptPacket, baud: int | None) -> list[Transmission]:
        self.stats["instructions"] += 1
        listening = [i for i, s in enumerate(self.servos)
                     if not self.faults[i].deaf and (baud is None or s.baud_bps == baud)]
        bps = baud or (self.servos[listening[0]].baud_bps if listening else 0) or 1_000_000
        d = self.dialect
        if isinstance(packet, CorruptPacket):
            self.stats["crc_errors"] += 1
            i = self._find(listening, packet.id)
            if i < 0 or d.checksum_error is None or not d.answers(self.servos[i].status_return_level,
                                                                  packet.instruction):
                return []
            return self._finish([self._status(i, Reply(d.checksum_error), self.servos[i].return_delay_s)])
        pid, ins, p = packet.id, packet.instruction, packet.params
        try:
            out = self._dispatch(pid, ins, p, listening, bps)
        except FrameError:
            out = self._unicast_error(pid, ins, listening, d.length_error)
        return self._finish(out)

    def _dispatch(self, pid: int, ins: int, p: bytes, listening: list[int], bps: int) -> list[Transmission]:
        d = self.dialect
        if ins not in d.instructions:
            return self._unicast_error(pid, ins, listening, d.instruction_error)
        if ins == Instruction.SYNC_WRITE:
            self._sync_write(p, listening)
            return []
        if ins == Instruction.SYNC_READ or ins == Instruction.BULK_READ:
            return self._group_read(ins, p, listening, bps) if pid == BROADCAST_ID else []
        if ins == Instruction.PING:
            return self._ping(pid, listening, bps)
        if pid == BROADCAST_ID:
            for i in listening:
                self._execute(self.servos[i], ins, p)
            return []
        i = self._find(listening, pid)
        if i < 0:
            return []
        s = self.servos[i]
        sid = s.id
        reply = self._execute(s, ins, p)
        if reply is None or not d.answers(s.status_return_level, ins):
            return []
        # A write of the ID is answered from the ID it was sent to: the SDKs' txRxPacket waits for a status of the
        # request's ID, and LeRobot's setup_motor (motors_bus.py) writes the new ID at the old one expecting it.
        return [self._status(i, reply, s.return_delay_s, sid)]

    @staticmethod
    def _execute(s: Protocol1Servo, ins: int, p: bytes) -> tuple[int, bytes] | None:
        if ins == Instruction.READ:
            return s.read(*_read_params(p))
        if ins == Instruction.WRITE:
            return s.write(*_write_params(p))
        if ins == Instruction.REG_WRITE:
            return s.reg_write(*_write_params(p))
        if ins == Instruction.ACTION:
            return s.action()
        if ins == Instruction.RESET:
            return s.reset()
        return None

    def _sync_write(self, p: bytes, listening: list[int]) -> None:
        """SYNC WRITE: address, length L, then (ID, L data bytes) per servo; never answered (Protocol 1.0
        §SYNC WRITE; Feetech SCS protocol §SYNC WRITE)."""
        if len(p) < 2:
            raise FrameError(f"SYNC WRITE takes an address and a length, got {len(p)} bytes")
        address, n = p[0], p[1]
        body = p[2:]
        if n == 0 or len(body) % (n + 1):
            raise FrameError(f"SYNC WRITE of {n} bytes per servo: {len(body)} bytes is not a whole number of them")
        for k in range(0, len(body), n + 1):
            i = self._find(listening, body[k])
            if i >= 0:
                self.servos[i].write(address, body[k + 1:k + 1 + n])

    def _group_read(self, ins: int, p: bytes, listening: list[int], bps: int) -> list[Transmission]:
        """SYNC READ (address, length, ID...) or BULK READ (00, then (length, ID, address) per servo): each servo
        answers with its own status packet in the request's order, Return Delay after the one before it ends."""
        if ins == Instruction.SYNC_READ:
            if len(p) < 2:
                raise FrameError(f"SYNC READ takes an address and a length, got {len(p)} bytes")
            wanted = [(sid, p[0], p[1]) for sid in p[2:]]
        else:
            if len(p) < 1 or (len(p) - 1) % 3:
                raise FrameError(f"BULK READ takes 00 and 3 bytes per servo, got {len(p)} bytes")
            wanted = [(p[k + 1], p[k + 2], p[k]) for k in range(1, len(p), 3)]
        byte_s = wire_time_s(1, bps)   # [s] per byte
        t = 0.0
        out: list[Transmission] = []
        for sid, address, length in wanted:
            i = self._find(listening, sid)
            if i < 0:
                continue        # an absent ID leaves no reply: the client times out on it
            s = self.servos[i]
            if not self.dialect.answers(s.status_return_level, Instruction.READ):
                continue
            reply = s.read(address, length)
            if reply is None:
                continue        # the servo stays silent (a read it cannot carry out)
            t += s.return_delay_s
            tx = self._status(i, reply, t)
            out.append(tx)
            t += len(tx.data) * byte_s
        return out

    def _ping(self, pid: int, listening: list[int], bps: int) -> list[Transmission]:
        if pid != BROADCAST_ID:
            i = self._find(listening, pid)
            reply = self.servos[i].ping() if i >= 0 else None
            return [] if reply is None else [self._status(i, reply, self.servos[i].return_delay_s)]
        # Broadcast: every servo answers, in its own slot (ID × one ping reply's wire time after its Return Delay)
        # so that replies never overlap and come in ID order: the slot model of the Protocol 2.0 bus
        # (drivers/emulated/dynamixel/bus.pyx); Protocol 1.0 and Feetech's manual leave a broadcast Ping's
        # reply order unspecified, and LeRobot's FeetechMotorsBus._broadcast_ping reads whatever arrives.
        slot = wire_time_s(_PING_REPLY_BYTES, bps)
        out = []
        for i in sorted(listening, key=lambda k: self.servos[k].id):
            s = self.servos[i]
            reply = s.ping()
            if reply is not None:
                out.append(self._status(i, reply, s.return_delay_s + s.id * slot))
        return out

    # ------------------------------------------------------------------ helpers
    def _find(self, candidates: list[int], sid: int) -> int:
        """The index of the listening servo with ID `sid`; -1 if none."""
        for i in candidates:
            if self.servos[i].id == sid:
                return i
        return -1

    def _status(self, i: int, reply: tuple[int, bytes], offset_s: float, sid: int | None = None) -> Transmission:
        error, params = reply
        return Transmission(encode_status(self.servos[i].id if sid is None else sid, error, params), offset_s, i)

    def _unicast_error(self, pid: int, ins: int, listening: list[int], error: int | None) -> list[Transmission]:
        if error is None or pid == BROADCAST_ID:
            return []
        i = self._find(listening, pid)
        if i < 0 or not self.dialect.answers(self.servos[i].status_return_level, ins):
            return []
        return [self._status(i, Reply(error), self.servos[i].return_delay_s)]

    def _finish(self, out: list[Transmission]) -> list[Transmission]:
        """Apply each sender's injected bus faults (drop, corrupt, delay)."""
        done = apply_faults(out, self.faults)
        self.stats["replies"] += len(done)
        return done
