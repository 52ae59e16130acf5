"""A Protocol 2.0 bus of simulated servos: who executes an instruction, who answers, and when.

`DynamixelBus.handle` takes one received packet and returns the status packets the servos on the
bus send back, each with its start time after the end of the instruction on the wire (Return Delay
Time, the replies before it in a Sync/Bulk Read, the per-ID slot of a broadcast Ping). Reply rules:
notes/dynamixel.md §1.5 (broadcast, Status Return Level, secondary ID), §2 (instructions), §2.1–2.2
(Fast reads, order).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from types import SimpleNamespace
from typing import NamedTuple

from drivers.dynamixel.protocol import (
    ALERT,
    BROADCAST_ID,
    CorruptPacket,
    ErrorCode,
    Instruction,
    Packet,
    ProtocolError,
    decode_bulk_read,
    decode_bulk_write,
    decode_read,
    decode_sync_read,
    decode_sync_write,
    decode_write,
    encode_fast_status,
    encode_status,
)
from drivers.ports import wire_time_s
from firmware_models.dynamixel.servo import DynamixelServo, Reply
from hil.daemon.faults import BusFaults

_PING_REPLY_BYTES = 14          # FF FF FD 00 ID 07 00 55 ERR model_L model_H fw CRC_L CRC_H
# The instruction codes as plain ints for the per-packet comparisons: looking up an IntEnum member costs
# ~150 ns in Python 3.11, and a packet makes a dozen such comparisons.
INS = SimpleNamespace(**{i.name: int(i) for i in Instruction})
_READS = frozenset({INS.SYNC_READ, INS.FAST_SYNC_READ, INS.BULK_READ, INS.FAST_BULK_READ})
_KNOWN = frozenset(int(i) for i in Instruction) - {Instruction.STATUS}
_NO_REINDEX = frozenset({Instruction.PING, Instruction.READ, *_READS})   # instructions that change no register
# BusFaults fields read for every servo of every packet: any(map(...)) iterates in C, a generator in Python
_WRONG_BAUD = attrgetter("wrong_baud")
_ACTIVE = attrgetter("active")


class Transmission(NamedTuple):   # a tuple: built per reply, a frozen dataclass costs 3× as much
    """A status packet and when it starts: `offset_s` after the instruction's last byte [s]."""

    data: bytes
    offset_s: float
    servo: int | None    # index of the sending servo on the bus (None: a combined Fast reply)


class DynamixelBus:
    """Servos sharing one bus. `faults[i]` are the injected bus faults of servo i (daemon issue)."""

    def __init__(self, servos: Sequence[DynamixelServo], faults: Sequence[BusFaults] | None = None):
        self.servos = list(servos)
        self.faults = list(faults) if faults is not None else [BusFaults() for _ in self.servos]
        self.stats = {"instructions": 0, "replies": 0, "crc_errors": 0, "ignored": 0}
        self._now = 0.0   # simulation time of the packet being handled [s]
        self._all = list(range(len(self.servos)))
        self._reindex()

    # ------------------------------------------------------------------ entry point
    def handle(self, packet: Packet | CorruptPacket, baud: int | None) -> list[Transmission]:
        """Execute `packet` on every servo it addresses that listens at `baud` (None: all listen)."""
        self.stats["instructions"] += 1
        if (baud is None or baud == self._common_baud) and not any(map(_WRONG_BAUD, self.faults)):
            listening = self._all
        else:
            listening = [i for i, s in enumerate(self.servos)
                         if not self.faults[i].wrong_baud and (baud is None or s.baud_bps == baud)]
        bps = baud or (self.servos[listening[0]].baud_bps if listening else 1_000_000)
        if isinstance(packet, CorruptPacket):
            self.stats["crc_errors"] += 1
            i = self._primary(listening, packet.id)
            if i is None or not self._due(self.servos[i], packet.instruction):
                return []
            return self._finish([self._status(i, ErrorCode.CRC, b"", self.servos[i].return_delay_s)], bps)
        if packet.id == BROADCAST_ID:
            targets = listening
        else:
            targets = [i for i in self._addressed.get(packet.id, ()) if listening is self._all or i in listening]
        now = self.servos[targets[0]].joint.time_s() if targets else 0.0
        for i in targets:
            self.servos[i].note_instruction(now)
        try:
            self._now = now
            out = self._dispatch(packet, listening, targets, bps)
        except ProtocolError:
            out = self._unicast_error(packet, listening, ErrorCode.DATA_LENGTH)
        if packet.instruction not in _NO_REINDEX and self._identities() != self._identity:
            self._reindex()      # a write changed an ID, secondary ID or Baud Rate
        return self._finish(out, bps)

    def _identities(self) -> list[tuple[int, int | None, int]]:
        return [s.identity for s in self.servos]

    def _reindex(self) -> None:
        self._identity = self._identities()
        ids: dict[int, list[int]] = {}
        for i, s in enumerate(self.servos):
            ids.setdefault(s.id, []).append(i)   # the same ID may sit at two baud rates
        self._ids = ids
        addressed: dict[int, list[int]] = {}
        for i, s in enumerate(self.servos):
            addressed.setdefault(s.id, []).insert(0, i)
            if s.secondary_id is not None and s.secondary_id != s.id:
                addressed.setdefault(s.secondary_id, []).append(i)
        self._addressed = addressed
        bauds = {s.baud_bps for s in self.servos}
        self._common_baud = bauds.pop() if len(bauds) == 1 else -1

    # ------------------------------------------------------------------ dispatch
    def _dispatch(self, pkt: Packet, listening: list[int], targets: list[int], bps: int) -> list[Transmission]:
        ins, p = pkt.instruction, pkt.params
        if ins in _READS:
            return self._group_read(pkt, listening, bps) if pkt.id == BROADCAST_ID else []
        if ins == INS.SYNC_WRITE:
            address, _, items = decode_sync_write(p)
            self._group_write(listening, [(sid, address, data) for sid, data in items], pkt.id)
            return []
        if ins == INS.BULK_WRITE:
            self._group_write(listening, decode_bulk_write(p), pkt.id)
            return []
        if ins == INS.PING:
            return self._ping(pkt, listening, bps)
        if pkt.id == BROADCAST_ID:
            self._broadcast(ins, p, targets)
            return []
        primary = self._primary(targets, pkt.id)
        if primary is None:
            for i in targets:                   # addressed through the secondary ID: execute, never answer
                self._secondary_write(i, ins, p)
            return []
        servo = self.servos[primary]
        if ins not in _KNOWN or not servo.supports(ins):
            reply = Reply(ErrorCode.INSTRUCTION)
        elif ins == INS.READ:
            reply = servo.read(*decode_read(p))
        elif ins == INS.WRITE:
            reply = servo.write(*decode_write(p))
        elif ins == INS.REG_WRITE:
            reply = servo.reg_write(*decode_write(p))
        elif ins == INS.ACTION:
            reply = servo.action()
        elif ins in (INS.REBOOT, INS.FACTORY_RESET):
            return self._then_reset(primary, ins, p)
        elif ins == INS.CLEAR:
            reply = servo.clear(p)
        elif ins == INS.CONTROL_TABLE_BACKUP:
            reply = servo.backup(p)
        else:
            reply = Reply(ErrorCode.INSTRUCTION)
        if not self._due(servo, ins):
            return []
        return [self._status(primary, reply.error, reply.params, servo.return_delay_s)]

    def _then_reset(self, i: int, ins: int, params: bytes) -> list[Transmission]:
        """Reboot / Factory Reset: the status goes out with the settings before the reset (notes §2)."""
        servo = self.servos[i]
        if ins == INS.FACTORY_RESET and len(params) != 1:
            raise ProtocolError("Factory Reset takes one parameter")
        out = [self._status(i, 0, b"", servo.return_delay_s)] if self._due(servo, ins) else []
        reply = servo.reboot() if ins == INS.REBOOT else servo.factory_reset(params[0])
        if reply.error and out:
            out = [self._status(i, reply.error, b"", out[0].offset_s)]
        return out

    def _broadcast(self, ins: int, p: bytes, targets: list[int]) -> None:
        """Broadcast Write, Reg Write, Action, Reboot, Factory Reset, Clear: executed, never answered."""
        if ins == INS.FACTORY_RESET and p[:1] == b"\xff":
            return   # refused since FW42: a broadcast reset-all would give every servo ID 1 (notes §2)
        for i in targets:
            s = self.servos[i]
            if not s.supports(ins):
                continue
            if ins == INS.WRITE:
                s.write(*decode_write(p))
            elif ins == INS.REG_WRITE:
                s.reg_write(*decode_write(p))
            elif ins == INS.ACTION:
                s.action()
            elif ins == INS.REBOOT:
                s.reboot()
            elif ins == INS.FACTORY_RESET and len(p) == 1:
                s.factory_reset(p[0])
            elif ins == INS.CLEAR:
                s.clear(p)

    def _secondary_write(self, i: int, ins: int, p: bytes) -> None:
        """Through a secondary ID only RAM can be written (notes §1.5)."""
        if ins in (INS.WRITE, INS.REG_WRITE):
            address, data = decode_write(p)
            if address >= 64:
                (self.servos[i].write if ins == INS.WRITE else self.servos[i].reg_write)(address, data)
        elif ins == INS.ACTION:
            self.servos[i].action()

    def _group_write(self, listening: list[int], items: list[tuple[int, int, bytes]], to: int) -> None:
        servos, now = self.servos, self._now
        for sid, address, data in items:
            i = self._primary(listening, sid)
            if i is not None:
                s = servos[i]
                if to != BROADCAST_ID:   # broadcast: handle() has noted the instruction on every listener
                    s.note_instruction(now)
                s.write(address, data)

    def _ping(self, pkt: Packet, listening: list[int], bps: int) -> list[Transmission]:
        if pkt.id != BROADCAST_ID:
            i = self._primary(listening, pkt.id)
            if i is None:
                return []
            r = self.servos[i].ping()
            return [self._status(i, r.error, r.params, self.servos[i].return_delay_s)]
        # Broadcast: every servo answers in its own slot, ID × one ping reply's wire time after its
        # return delay, so replies never overlap and come back in ID order (our slot model; the
        # e-manual says only "in arranged order", notes §2.2).
        slot = wire_time_s(_PING_REPLY_BYTES, bps)
        out = []
        for i in sorted(listening, key=lambda k: self.servos[k].id):
            s = self.servos[i]
            r = s.ping()
            out.append(self._status(i, r.error, r.params, s.return_delay_s + s.id * slot))
        return out

    def _group_read(self, pkt: Packet, listening: list[int], bps: int) -> list[Transmission]:
        ins = pkt.instruction
        if ins in (INS.SYNC_READ, INS.FAST_SYNC_READ):
            address, length, ids = decode_sync_read(pkt.params)
            wanted = [(sid, address, length) for sid in ids]
        else:
            wanted = decode_bulk_read(pkt.params)
        if ins in (INS.FAST_SYNC_READ, INS.FAST_BULK_READ):
            return self._fast_read(ins, wanted, listening)
        servos, primary = self.servos, self._primary
        out, t = [], 0.0
        for sid, address, length in wanted:
            i = primary(listening, sid)
            if i is None:
                continue           # an absent ID leaves no reply (the SDK then times out, notes §2.2)
            s = servos[i]          # handle() has noted the instruction on every target (broadcast)
            if s.status_return_level < 1:
                continue
            r = s.read(address, length)
            # each servo starts its Return Delay Time after the previous status packet ends
            t += s.return_delay_s
            tx = self._status(i, r.error, r.params, t)
            out.append(tx)
            t += wire_time_s(len(tx.data), bps)
        return out

    def _fast_read(self, ins: int, wanted: list[tuple[int, int, int]], listening: list[int]) -> list[Transmission]:
        """Fast Sync / Fast Bulk Read: one packet from ID 0xFE, each device appends its segment (notes §2.1)."""
        servos = self.servos
        members = []
        for sid, address, length in wanted:
            i = self._primary(listening, sid)
            if i is None or not servos[i].supports(ins):
                # the devices build one packet between them: a missing link breaks the chain and
                # nobody completes it (our model; the e-manual is silent, notes §2.1) — the SDK times out
                return []
            s = servos[i]
            if s.status_return_level < 1:
                continue
            members.append((i, s.read(address, length), length))
        if not members:
            return []
        segs = [(servos[i].id, self._error_byte(i, r.error), r.params if not r.error else bytes(n))
                for i, r, n in members]
        return [Transmission(encode_fast_status(segs), servos[members[0][0]].return_delay_s, None)]

    # ------------------------------------------------------------------ helpers
    def _primary(self, candidates: list[int], sid: int) -> int | None:
        """The servo whose (primary) ID is `sid`, if it is among `candidates`."""
        at = self._ids.get(sid)
        if not at:
            return None
        if candidates is self._all:   # every servo listens (the usual case): the first one indexed under sid
            return at[0]
        for i in at:
            if i in candidates:
                return i
        return None

    @staticmethod
    def _due(servo: DynamixelServo, instruction: int) -> bool:
        """Status Return Level: 0 = Ping only, 1 = Ping and Read, 2 = all (notes §1.5)."""
        if instruction == INS.PING:
            return True
        level = servo.status_return_level
        return level >= 1 if instruction == INS.READ else level >= 2

    def _error_byte(self, i: int, error: int) -> int:
        return int(error) | (ALERT if self.servos[i].alert else 0)

    def _status(self, i: int, error: int, params: bytes, offset_s: float) -> Transmission:
        return Transmission(encode_status(self.servos[i].id, self._error_byte(i, error), params), offset_s, i)

    def _unicast_error(self, pkt: Packet, listening: list[int], error: int) -> list[Transmission]:
        if pkt.id == BROADCAST_ID:
            return []
        i = self._primary(listening, pkt.id)
        if i is None or not self._due(self.servos[i], pkt.instruction):
            return []
        return [self._status(i, error, b"", self.servos[i].return_delay_s)]

    def _finish(self, out: list[Transmission], bps: int) -> list[Transmission]:
        """Apply each sender's injected bus faults (drop, corrupt, delay)."""
        faults = self.faults
        if not any(map(_ACTIVE, faults)):   # no fault injected (the usual case): every reply as it is
            self.stats["replies"] += len(out)
            return out
        done = []
        for tx in out:
            f = None if tx.servo is None else faults[tx.servo]
            if f is None or not f.active:
                done.append(tx)      # what apply() would return: the reply unchanged, no extra delay
                continue
            data, extra = f.apply(tx.data)
            if data is not None:
                done.append(Transmission(data, tx.offset_s + extra, tx.servo))
        self.stats["replies"] += len(done)
        return done
