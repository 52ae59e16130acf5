# cython: language_level=3
"""A Protocol 2.0 bus of simulated servos: who executes an instruction, who answers, and when; in C, so that a Sync
Read runs from packet to status packets without a Python call (docs/protocols/dynamixel.md, "Who answers")."""

from libc.math cimport fabs
from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc

import numpy as np

from drivers.emulated.dynamixel.codec cimport (
    decode_bulk_read,
    decode_bulk_write,
    decode_read,
    decode_sync_read,
    decode_sync_write,
    decode_write,
    named_tuple,
    status_packet,
)
from firmware_models.dynamixel.servo_core cimport Reply, ServoCore

from drivers.emulated.dynamixel.protocol import (
    ALERT,
    BROADCAST_ID,
    CorruptPacket,
    ErrorCode,
    Instruction,
    ProtocolError,
    encode_fast_status,
)
from drivers.wire.ports import wire_time_s
from drivers.wire.faults import BUS_FLAG_BITS, BusFaults, Transmission, apply_faults
from drivers.wire.server import InputFailures

_PING_REPLY_BYTES = 14          # FF FF FD 00 ID 07 00 55 ERR model_L model_H fw CRC_L CRC_H
# the instruction codes and header values as C ints (from protocol.py's enum: one table of them)
cdef int PING = Instruction.PING, READ = Instruction.READ, WRITE = Instruction.WRITE
cdef int REG_WRITE = Instruction.REG_WRITE, ACTION = Instruction.ACTION, FACTORY_RESET = Instruction.FACTORY_RESET
cdef int REBOOT = Instruction.REBOOT, CLEAR = Instruction.CLEAR, BACKUP = Instruction.CONTROL_TABLE_BACKUP
cdef int SYNC_READ = Instruction.SYNC_READ, FAST_SYNC_READ = Instruction.FAST_SYNC_READ
cdef int BULK_READ = Instruction.BULK_READ, FAST_BULK_READ = Instruction.FAST_BULK_READ
cdef int SYNC_WRITE = Instruction.SYNC_WRITE, BULK_WRITE = Instruction.BULK_WRITE, STATUS = Instruction.STATUS
cdef int BROADCAST = BROADCAST_ID, ALERT_BIT = ALERT
cdef frozenset _KNOWN = frozenset(int(i) for i in Instruction) - {STATUS}
# in BusFaults.active: a servo that hears nothing (another baud rate, or unplugged)
cdef int64_t DEAF_BITS = BUS_FLAG_BITS["wrong_baud"] | BUS_FLAG_BITS["unplugged"]


def packet_bytes(packet) -> bytes:
    """A received packet as it was on the wire (header, ID, LEN, instruction, unstuffed parameters; no CRC)."""
    params = packet.params if hasattr(packet, "params") else b""
    body = bytes([packet.instruction]) + params
    return b"\xff\xff\xfd\x00" + bytes([packet.id & 0xFF]) + ((len(body) + 2) & 0xFFFF).to_bytes(2, "little") + body


cdef inline bint _is_read(int ins) noexcept:
    return ins == SYNC_READ or ins == FAST_SYNC_READ or ins == BULK_READ or ins == FAST_BULK_READ


cdef inline bint _changes_no_register(int ins) noexcept:
    return ins == PING or ins == READ or _is_read(ins)


cdef inline object _tx(bytes data, double offset_s, object servo):
    """Transmission(data, offset_s, servo) without a Python call (one per status packet)."""
    return named_tuple(Transmission, (data, offset_s, servo))


cdef inline bint _due(ServoCore servo, int instruction) noexcept:
    """Status Return Level: 0 = Ping only, 1 = Ping and Read, 2 = all (e-manual §Status Return Level(68))."""
    if instruction == PING:
        return True
    return servo.status_return_level >= 1 if instruction == READ else servo.status_return_level >= 2


cdef inline Reply _read(ServoCore servo, Py_ssize_t address, Py_ssize_t length):
    """The servo's Read: its C core's, or its firmware's (servo.py) when the core leaves it to that."""
    cdef Reply r = servo.read_at(address, length)
    return r if r is not None else servo.read(address, length)


cdef inline Reply _write(ServoCore servo, Py_ssize_t address, bytes data):
    """The servo's Write: its C core's (a new goal at most), or its firmware's (servo.py) for the rest."""
    cdef Reply r = servo.write_at(address, data)
    return r if r is not None else servo.write(address, data)


cdef inline int _note(ServoCore servo, double now_s) except -1:
    """An instruction reached the servo: its Bus Watchdog restarts, or trips (servo.py) after too long a silence."""
    if servo.note(now_s):
        servo.trip_watchdog()
    return 0


cdef inline int _error_byte(ServoCore servo, int error) noexcept:
    return error | (ALERT_BIT if servo._hw_error else 0)   # the alert bit: a hardware error is latched


cdef class DynamixelBus:
    """Servos sharing one bus. `faults[i]` are the injected bus faults of servo i (`BusFaults`)."""

    cdef public list servos
    cdef readonly list faults
    cdef public dict stats
    cdef readonly object failures       # packets whose handling raised: answered with silence, counted, logged
    cdef double _now           # simulation time of the packet being handled [s]
    cdef list _all, _identity
    cdef dict _ids, _addressed
    cdef Py_ssize_t _first[256]   # _ids[id][0] for every ID byte, -1 if none: _primary when every servo listens
    cdef long _common_baud
    cdef list _flag_sinks         # each fault's `flag_sink`, kept alive for _flags
    cdef int64_t** _flags      # per servo: its BusFaults' `active` bits, as the fault keeps them in its flag sink

    def __cinit__(self):
        self._flags = NULL

    def __dealloc__(self):
        free(self._flags)

    def __init__(self, servos, faults=None):
        self.servos = list(servos)
        self.faults = list(faults) if faults is not None else [BusFaults() for _ in self.servos]
        if len(self.faults) != len(self.servos):
            raise ValueError(f"{len(self.servos)} servos and {len(self.faults)} BusFaults")
        # a BusFaults writes its `active` bits into its flag sink on every change (LiveRig gives each one a view of
        # bus_flag_bits, for the state publisher): the bus reads them there, in C, on every packet
        cdef int64_t[::1] view
        self._flag_sinks = []
        self._flags = <int64_t**> malloc(max(1, len(self.faults)) * sizeof(int64_t*))
        if self._flags == NULL:
            raise MemoryError()
        for i, f in enumerate(self.faults):
            if f.flag_sink is None:
                f.flag_sink = np.zeros(1, dtype=np.int64)
            view = f.flag_sink
            self._flag_sinks.append(view)
            self._flags[i] = &view[0]
        self.stats = {"instructions": 0, "replies": 0, "crc_errors": 0, "ignored": 0}
        self.failures = InputFailures("dynamixel packet")
        self._now = 0.0
        self._all = list(range(len(self.servos)))
        self._reindex()

    @property
    def errors_isolated(self):
        """Packets whose handling raised (`handle`), for `status`."""
        return self.failures.count

    # ------------------------------------------------------------------ entry point
    def handle(self, packet, baud):
        """Execute `packet` (a Packet or CorruptPacket) on every servo it addresses that listens at `baud`
        (None: all listen); the list of Transmissions the servos send back.

        Whatever one packet raises stays with that packet: it gets no answer (a device that cannot carry an
        instruction out stays silent, and the controller times out as on a real bus), the failure is counted in
        `errors_isolated` and logged at WARNING with the packet's bytes (once per kind of failure and
        instruction; later ones at DEBUG: `InputFailures`), and the bus serves the next packet."""
        try:
            return self._handle(packet, baud)
        except Exception as exc:
            self.failures.record(exc, packet.instruction, packet_bytes(packet), "not answered")
            if self._identities() != self._identity:
                self._reindex()      # a write carried out before the failure may have changed an ID
            return []

    cdef list _handle(self, packet, baud):
        cdef list listening, targets, out
        cdef Py_ssize_t i
        cdef ServoCore s
        cdef double now
        self.stats["instructions"] += 1
        # a BusFaults' `active` has a bit per injected fault, wrong_baud's too: one pass over them per packet
        cdef int64_t active = 0
        for i in range(len(self.faults)):
            active |= self._flags[i][0]
        cdef bint faulty = active != 0
        if (baud is None or baud == self._common_baud) and not active & DEAF_BITS:
            listening = self._all
        else:
            listening = [i for i, s in enumerate(self.servos)
                         if not self.faults[i].deaf and (baud is None or s.baud_bps == baud)]
        cdef long bps = baud or ((<ServoCore> self.servos[listening[0]]).baud_bps if listening else 1_000_000)
        if isinstance(packet, CorruptPacket):
            self.stats["crc_errors"] += 1
            i = self._primary(listening, packet.id)
            if i < 0 or not _due(self.servos[i], packet.instruction):
                return []
            s = self.servos[i]
            return self._finish([self._status(s, i, ErrorCode.CRC, b"", s.return_delay_s)], faulty)
        cdef int pid = packet.id
        if pid == BROADCAST:
            targets = listening
        else:
            targets = [i for i in self._addressed.get(pid, ()) if listening is self._all or i in listening]
        now = (<ServoCore> self.servos[targets[0]]).link.time_s() if targets else 0.0
        for i in targets:
            _note(self.servos[i], now)
        cdef int ins = packet.instruction
        try:
            self._now = now
            out = self._dispatch(pid, ins, packet.params, listening, targets, bps)
        except ProtocolError:
            out = self._unicast_error(pid, ins, listening, ErrorCode.DATA_LENGTH)
        if not _changes_no_register(ins) and self._identities() != self._identity:
            self._reindex()      # a write changed an ID, secondary ID or Baud Rate
        return self._finish(out, faulty)

    cdef list _identities(self):
        cdef ServoCore s
        return [s.identity for s in self.servos]

    def _reindex(self):
        cdef ServoCore s
        self._identity = self._identities()
        ids = {}
        for i, s in enumerate(self.servos):
            ids.setdefault(s.id, []).append(i)   # the same ID may sit at two baud rates
        self._ids = ids
        for k in range(256):
            self._first[k] = ids[k][0] if k in ids else -1
        addressed = {}
        for i, s in enumerate(self.servos):
            addressed.setdefault(s.id, []).insert(0, i)
            if s.secondary_id is not None and s.secondary_id != s.id:
                addressed.setdefault(s.secondary_id, []).append(i)
        self._addressed = addressed
        bauds = {s.baud_bps for s in self.servos}
        self._common_baud = bauds.pop() if len(bauds) == 1 else -1

    # ------------------------------------------------------------------ dispatch
    cdef list _dispatch(self, int pid, int ins, bytes p, list listening, list targets, long bps):
        cdef Reply reply
        cdef Py_ssize_t primary, i
        cdef ServoCore servo
        if _is_read(ins):
            return self._group_read(ins, p, listening, bps) if pid == BROADCAST else []
        if ins == SYNC_WRITE:
            address, _, items = decode_sync_write(p)
            for sid, data in items:
                self._write_one(listening, sid, address, data, pid)
            return []
        if ins == BULK_WRITE:
            for sid, address, data in decode_bulk_write(p):
                self._write_one(listening, sid, address, data, pid)
            return []
        if ins == PING:
            return self._ping(pid, listening, bps)
        if pid == BROADCAST:
            self._broadcast(ins, p, targets)
            return []
        primary = self._primary(targets, pid)
        if primary < 0:
            for i in targets:                   # addressed through the secondary ID: execute, never answer
                self._secondary_write(i, ins, p)
            return []
        servo = self.servos[primary]
        addressed_id = servo.id
        if ins not in _KNOWN or not servo.supports(ins):
            reply = Reply(ErrorCode.INSTRUCTION)
        elif ins == READ:
            address, length = decode_read(p)
            reply = _read(servo, address, length)
        elif ins == WRITE:
            address, data = decode_write(p)
            reply = _write(servo, address, data)
        elif ins == REG_WRITE:
            reply = servo.reg_write(*decode_write(p))
        elif ins == ACTION:
            reply = servo.action()
        elif ins == REBOOT or ins == FACTORY_RESET:
            return self._then_reset(primary, ins, p)
        elif ins == CLEAR:
            reply = servo.clear(p)
        elif ins == BACKUP:
            reply = servo.backup(p)
        else:
            reply = Reply(ErrorCode.INSTRUCTION)
        if not _due(servo, ins):
            return []
        # A write of the ID is answered from the ID it was sent to: the SDK's txRxPacket waits for a status of the
        # request's ID, and LeRobot's setup_motor (motors_bus.py) writes the new ID at the old one expecting it.
        return [_tx(status_packet(addressed_id, _error_byte(servo, reply.error), reply.params), servo.return_delay_s,
                    primary)]

    cdef list _then_reset(self, Py_ssize_t i, int ins, bytes params):
        """Reboot / Factory Reset: the status goes out with the settings before the reset (Protocol 2.0 §Reboot,
        §Factory Reset)."""
        cdef ServoCore servo = self.servos[i]
        if ins == FACTORY_RESET and len(params) != 1:
            raise ProtocolError("Factory Reset takes one parameter")
        out = [self._status(servo, i, 0, b"", servo.return_delay_s)] if _due(servo, ins) else []
        reply = servo.reboot() if ins == REBOOT else servo.factory_reset(params[0])
        if reply.error and out:
            out = [self._status(servo, i, reply.error, b"", out[0].offset_s)]
        return out

    cdef _broadcast(self, int ins, bytes p, list targets):
        """Broadcast Write, Reg Write, Action, Reboot, Factory Reset, Clear: executed, never answered."""
        if ins == FACTORY_RESET and p[:1] == b"\xff":
            # refused by FW42+: a broadcast reset-all would give every servo ID 1 (Protocol 2.0 §Factory Reset)
            return
        for i in targets:
            s = self.servos[i]
            if not (<ServoCore> s).supports(ins):
                continue
            if ins == WRITE:
                s.write(*decode_write(p))
            elif ins == REG_WRITE:
                s.reg_write(*decode_write(p))
            elif ins == ACTION:
                s.action()
            elif ins == REBOOT:
                s.reboot()
            elif ins == FACTORY_RESET and len(p) == 1:
                s.factory_reset(p[0])
            elif ins == CLEAR:
                s.clear(p)

    cdef _secondary_write(self, Py_ssize_t i, int ins, bytes p):
        """Through a secondary ID only RAM can be written (e-manual §Secondary(Shadow) ID(12))."""
        if ins == WRITE or ins == REG_WRITE:
            address, data = decode_write(p)
            if address >= 64:
                (self.servos[i].write if ins == WRITE else self.servos[i].reg_write)(address, data)
        elif ins == ACTION:
            self.servos[i].action()

    cdef _write_one(self, list listening, int sid, address, data, int to):
        """One servo's part of a Sync / Bulk Write (none if `sid` is not listening)."""
        cdef Py_ssize_t i = self._primary(listening, sid)
        if i < 0:
            return
        cdef ServoCore s = self.servos[i]
        if to != BROADCAST:   # broadcast: handle() has noted the instruction on every listener
            _note(s, self._now)
        _write(s, address, data)

    cdef list _ping(self, int pid, list listening, long bps):
        cdef ServoCore s
        cdef Py_ssize_t i
        if pid != BROADCAST:
            i = self._primary(listening, pid)
            if i < 0:
                return []
            s = self.servos[i]
            r = s.ping()
            return [self._status(s, i, r.error, r.params, s.return_delay_s)]
        # Broadcast: every servo answers in its own slot, ID × one ping reply's wire time after its
        # return delay, so replies never overlap and come back in ID order (our slot model; the
        # e-manual says only "in arranged order", Protocol 2.0 §Ping).
        slot = wire_time_s(_PING_REPLY_BYTES, bps)
        out = []
        for i in sorted(listening, key=lambda k: self.servos[k].id):
            s = self.servos[i]
            r = s.ping()
            out.append(self._status(s, i, r.error, r.params, s.return_delay_s + s.id * slot))
        return out

    cdef list _group_read(self, int ins, bytes p, list listening, long bps):
        cdef list out = []
        cdef double t = 0.0
        cdef Py_ssize_t address, length
        cdef double byte_s = wire_time_s(1, bps)   # [s] per byte on the wire
        if ins == SYNC_READ or ins == FAST_SYNC_READ:
            address, length, ids = decode_sync_read(p)
            if ins == FAST_SYNC_READ:
                return self._fast_read(ins, [(sid, address, length) for sid in ids], listening)
            for sid in ids:
                self._read_one(out, listening, sid, address, length, &t, byte_s)
            return out
        wanted = decode_bulk_read(p)
        if ins == FAST_BULK_READ:
            return self._fast_read(ins, wanted, listening)
        for sid, address, length in wanted:
            self._read_one(out, listening, sid, address, length, &t, byte_s)
        return out

    cdef int _read_one(self, list out, list listening, int sid, Py_ssize_t address, Py_ssize_t length,
                       double* t, double byte_s) except -1:
        """Servo `sid`'s status packet of a (Bulk) Sync Read, appended to `out`; `t` [s] is where the previous one
        ended on the wire (after the instruction's end) and moves past this one."""
        cdef Py_ssize_t i = self._primary(listening, sid)
        if i < 0:
            return 0               # an absent ID leaves no reply (the SDK's GroupSyncRead.rxPacket then times out)
        cdef ServoCore s = self.servos[i]   # handle() has noted the instruction on every target (broadcast)
        if s.status_return_level < 1:
            return 0
        cdef Reply r = _read(s, address, length)
        # each servo starts its Return Delay Time after the previous status packet ends
        t[0] += s.return_delay_s
        tx = self._status(s, i, r.error, r.params, t[0])
        out.append(tx)
        t[0] += len(<bytes> (<tuple> tx)[0]) * byte_s
        return 0

    cdef list _fast_read(self, int ins, list wanted, list listening):
        """Fast Sync / Fast Bulk Read: one packet from ID 0xFE, each device appends its segment
        (Protocol 2.0 §Fast Sync Read)."""
        cdef ServoCore s
        cdef Reply r
        cdef Py_ssize_t i
        members = []
        for sid, address, length in wanted:
            i = self._primary(listening, sid)
            if i < 0 or not (<ServoCore> self.servos[i]).supports(ins):
                # the devices build one packet between them: a missing link breaks the chain and
                # nobody completes it (our model; Protocol 2.0 §Fast Sync Read is silent) — the SDK times out
                return []
            s = self.servos[i]
            if s.status_return_level < 1:
                continue
            r = _read(s, address, length)
            if r.error and length > len(s.table.data):
                # a segment is `length` bytes whatever the error: no device can fill more than its control table
                # holds, the chain breaks and nobody completes the packet (as for a missing member above)
                return []
            members.append((s, r, length))
        if not members:
            return []
        segs = [(s.id, _error_byte(s, r.error), r.params if not r.error else bytes(n)) for s, r, n in members]
        return [_tx(encode_fast_status(segs), (<ServoCore> members[0][0]).return_delay_s, None)]

    # ------------------------------------------------------------------ helpers
    cdef Py_ssize_t _primary(self, list candidates, int sid) except -2:
        """The index of the servo whose (primary) ID is `sid`, if it is among `candidates`; -1 if none."""
        if candidates is self._all:   # every servo listens (the usual case): the first one indexed under sid
            return self._first[sid] if 0 <= sid < 256 else -1
        at = self._ids.get(sid)
        if not at:
            return -1
        for i in at:
            if i in candidates:
                return i
        return -1

    cdef object _status(self, ServoCore servo, Py_ssize_t i, int error, bytes params, double offset_s):
        return _tx(status_packet(servo.id, _error_byte(servo, error), params), offset_s, i)

    cdef list _unicast_error(self, int pid, int ins, list listening, int error):
        if pid == BROADCAST:
            return []
        cdef Py_ssize_t i = self._primary(listening, pid)
        if i < 0 or not _due(self.servos[i], ins):
            return []
        cdef ServoCore s = self.servos[i]
        return [self._status(s, i, error, b"", s.return_delay_s)]

    cdef list _finish(self, list out, bint faulty):
        """Apply each sender's injected bus faults (drop, corrupt, delay); `faulty`: any is injected."""
        if not faulty:   # no fault injected (the usual case): every reply as it is
            self.stats["replies"] += len(out)
            return out
        done = apply_faults(out, self.faults)
        self.stats["replies"] += len(done)
        return done


def bursts(list replies, long baud):
    """Replies that follow each other without a gap on the wire (a Sync Read with Return Delay Time 0) as one
    paced write: every byte is released at the same time as before, with fewer syscalls and one final spin
    instead of one per reply (the server thread). (data, offset [s] after the instruction's end) per
    burst, for `replies` (Transmissions in wire order) at `baud` [bit/s]."""
    cdef list out = [], parts = []
    cdef double start = 0.0, nxt = 0.0, offset, byte_s = wire_time_s(1, baud)   # [s] per byte
    cdef bytes data
    for tx in replies:   # Transmissions: tuples (data, offset_s, servo)
        data, offset = (<tuple> tx)[0], (<tuple> tx)[1]
        if parts and fabs(offset - nxt) > 1e-9:
            out.append((b"".join(parts), start))
            parts = []
        if not parts:
            start = nxt = offset
        parts.append(data)
        nxt += len(data) * byte_s
    if parts:
        out.append((b"".join(parts), start))
    return out
