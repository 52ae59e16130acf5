"""One CANopen node (CiA 301: NMT, heartbeat, node guarding, SYNC, EMCY, SDO, PDO) on top of its CiA 402 drive
model; services, NMT gating and SDO checks: docs/protocols/canopen.md, "A node's services"."""

from __future__ import annotations

import logging
import struct
import sys
import time
from collections.abc import Callable

from canopen.objectdictionary import NUMBER_TYPES, ODVariable
from canopen.sdo import SdoAbortedError, SdoServer
from canopen.sdo.constants import (
    ABORT_GENERAL_ERROR,
    ABORT_INVALID_COMMAND_SPECIFIER,
    ABORT_INVALID_VALUE,
    ABORT_LENGTH_NOT_MATCHED,
    ABORT_NO_SDO_CONNECTION,
    ABORT_READ_WRITEONLY,
    ABORT_STORE_APPLICATION,
    ABORT_VALUE_TOO_HIGH,
    ABORT_VALUE_TOO_LOW,
    ABORT_WRITE_READONLY,
    EXPEDITED,
    NO_MORE_DATA,
    REQUEST_ABORTED,
    REQUEST_BLOCK_DOWNLOAD,
    REQUEST_BLOCK_UPLOAD,
    REQUEST_DOWNLOAD,
    REQUEST_SEGMENT_DOWNLOAD,
    REQUEST_SEGMENT_UPLOAD,
    REQUEST_UPLOAD,
    SIZE_SPECIFIED,
)

from drivers.emulated.canopen.pdo import PDO_COUNT, Pdo, is_pdo_object, od_variable
from drivers.emulated.slcan.adapter import CanFrame
from firmware_models.cia402 import Cia402Drive

__all__ = ["CanopenNode", "NmtState"]

# canopen's SDO server logs every transfer at INFO: thousands a second on a busy bus
logging.getLogger("canopen.sdo.server").setLevel(logging.WARNING)


class NmtState:
    """NMT states as the heartbeat byte encodes them."""

    INITIALISING = 0x00
    STOPPED = 0x04
    OPERATIONAL = 0x05
    PRE_OPERATIONAL = 0x7F


# NMT command specifiers
NMT_START, NMT_STOP, NMT_PRE_OPERATIONAL, NMT_RESET_NODE, NMT_RESET_COMMUNICATION = 0x01, 0x02, 0x80, 0x81, 0x82

# EMCY codes the communication layer raises (CiA 301 Table 21)
EMCY_RESET = 0x0000
EMCY_PDO_LENGTH = 0x8210          # PDO not processed due to length error
EMCY_PDO_LENGTH_EXCEEDED = 0x8220
EMCY_SYNC_LENGTH = 0x8240         # unexpected SYNC data length
EMCY_GUARD = 0x8130               # life guard error or heartbeat error
ERROR_REGISTER_COMMUNICATION = 0x10

SAVE_SIGNATURE = 0x65766173       # "save" little-endian (CiA 301 §7.5.2.13)
# commands and set-points: not stored by 0x1010 (a drive powers up without a pending command)
_NOT_STORED = frozenset({0x6040, 0x6060, 0x6071, 0x607A, 0x60B0, 0x60B1, 0x60B2, 0x60FF, 0x1003})
_EMCY_BACKLOG = 32                # EMCYs held while STOPPED


class _SdoServer(SdoServer):
    """canopen's SDO server with the checks CiA 301 §7.2.4.3 asks and it lacks (abort 0x05040001,
    command specifier not valid, as CANopenNode answers): a segment request outside a segmented
    transfer of that direction, and block uploads (block transfers are not supported; with pst = 0 the
    client forbids the switch to a normal upload, which canopen's server would make). An expedited
    download that does not indicate its size is taken at the object's size (§7.2.4.3.3)."""

    _UPLOAD, _DOWNLOAD = "upload", "download"

    def __init__(self, rx_cobid: int, tx_cobid: int, node):
        super().__init__(rx_cobid, tx_cobid, node)
        self._transfer: str | None = None     # the segmented transfer in progress

    def on_request(self, can_id, data, timestamp):
        ccs = data[0] & 0xE0
        if ccs in (REQUEST_UPLOAD, REQUEST_DOWNLOAD, REQUEST_BLOCK_UPLOAD, REQUEST_BLOCK_DOWNLOAD):
            self._transfer = None
            self._buffer = None
            _, self._index, self._subindex = struct.unpack_from("<BHB", data)
        expected = {REQUEST_SEGMENT_UPLOAD: self._UPLOAD, REQUEST_SEGMENT_DOWNLOAD: self._DOWNLOAD}.get(ccs)
        if ccs in (REQUEST_BLOCK_UPLOAD, REQUEST_BLOCK_DOWNLOAD) or (
                expected is not None and self._transfer != expected):
            self.abort(ABORT_INVALID_COMMAND_SPECIFIER)
            return
        super().on_request(can_id, data, timestamp)
        if ccs == REQUEST_ABORTED:
            self._transfer = None
        elif ccs == REQUEST_UPLOAD and self._buffer:
            self._transfer = self._UPLOAD
        elif ccs == REQUEST_DOWNLOAD and self._buffer is not None and not data[0] & EXPEDITED:
            self._transfer = self._DOWNLOAD
        elif (ccs == REQUEST_SEGMENT_UPLOAD and not self._buffer) or (
                ccs == REQUEST_SEGMENT_DOWNLOAD and data[0] & NO_MORE_DATA):
            self._transfer = None

    def abort(self, abort_code=ABORT_GENERAL_ERROR):
        self._transfer = None
        super().abort(abort_code)
        # a request whose handling raised gets canopen's general-error abort (as from CANopenNode); the exception then
        # goes on to the adapter, which counts it and logs it once with the frame, instead of canopen's traceback
        failure = sys.exc_info()[1]
        if failure is not None and not isinstance(failure, SdoAbortedError):
            raise failure

    def reset(self) -> None:
        """Power-up state: no transfer in progress (NMT reset node / communication)."""
        self._transfer = None
        self._buffer = None
        self._toggle = 0

    def init_download(self, request):
        command = request[0]
        if command & EXPEDITED and not command & SIZE_SPECIFIED:
            _, index, subindex = struct.unpack_from("<BHB", request)
            try:
                size = len(self._node.variable(index, subindex)) // 8
            except SdoAbortedError:
                size = 4
            if 1 <= size < 4:   # present it as size-indicated: canopen then slices the data to it
                request = bytes([REQUEST_DOWNLOAD | EXPEDITED | SIZE_SPECIFIED | (4 - size) << 2]) + request[1:]
        super().init_download(request)


class CanopenNode:
    """The CiA 301 services of one drive (node `node_id`) on its `drive`; frames out through `send`.

    Not thread-safe: the bus calls `handle`, `poll` and `boot` under the drives' lock."""

    def __init__(self, drive: Cia402Drive, node_id: int, send: Callable[[CanFrame], None]):
        if not 1 <= node_id <= 127:
            raise ValueError(f"CANopen node ID must be 1..127, got {node_id}")
        self.drive = drive
        self.id = node_id
        self.od = self.object_dictionary = drive.od    # the second name is the one canopen's SDO server reads
        self._send = send
        self.state = NmtState.INITIALISING
        self.sdo = _SdoServer(0x600 + node_id, 0x580 + node_id, self)
        self.sdo.network = self          # canopen's server answers through `send_message`
        self.sdo._index, self.sdo._subindex = 0, 0   # an abort before any request names 0000:00
        self.rpdos = [Pdo(self.od, drive.values, True, n) for n in range(PDO_COUNT)]
        self.tpdos = [Pdo(self.od, drive.values, False, n) for n in range(PDO_COUNT)]
        self._emcy_held: list[bytes] = []
        self._comm_error = False
        self._reset_timers(time.monotonic())

    # ------------------------------------------------------------------ NMT
    def boot(self, now: float | None = None) -> None:
        """End of a power-up or reset: boot-up frame, PRE-OPERATIONAL, PDO maps re-read."""
        now = time.monotonic() if now is None else now
        self.sdo.reset()
        for p in self.rpdos + self.tpdos:
            p.reload()
        self._reset_timers(now)
        self.state = NmtState.INITIALISING
        self._send(CanFrame(0x700 + self.id, b"\x00"))
        self.state = NmtState.PRE_OPERATIONAL

    def _reset_timers(self, now: float) -> None:
        self._now = now         # the time of the frame or poll being handled [s, the caller's clock]
        self._next_heartbeat = now + self._heartbeat_s()
        self._guard_toggle = 0
        self._guard_seen: float | None = None
        self._consumer_seen: float | None = None
        self._sync_length_error = False
        self._rpdo_length_error = [False] * PDO_COUNT

    def _nmt(self, cs: int, now: float) -> None:
        if cs == NMT_START:
            if self.state != NmtState.OPERATIONAL:
                self.state = NmtState.OPERATIONAL
                for p in self.tpdos:        # event-driven TPDOs go out once on entering OPERATIONAL
                    p.last_data = None
                self._flush_emcy()
                self._events(now)
        elif cs == NMT_STOP:
            self.state = NmtState.STOPPED
        elif cs == NMT_PRE_OPERATIONAL:
            self.state = NmtState.PRE_OPERATIONAL
            self._flush_emcy()
        elif cs == NMT_RESET_NODE:
            self.drive.reset()              # application and communication objects to power-up values
            self.boot(now)
        elif cs == NMT_RESET_COMMUNICATION:
            d = self.drive
            for key, value in d.defaults.items():
                if 0x1000 <= key[0] < 0x2000 and key[0] not in (0x1001, 0x1003):
                    d.values[key] = value
            self._comm_error = False
            self.boot(now)

    # ------------------------------------------------------------------ frames in
    def handle(self, frame: CanFrame, now: float) -> None:
        """A frame seen on the bus (sent by the host or another node)."""
        self._now = now
        if frame.extended:
            return
        cid, data, state = frame.id, frame.data, self.state
        if cid == 0:
            if not frame.remote and len(data) == 2 and data[1] in (0, self.id):
                self._nmt(data[0], now)
            return
        if cid == 0x700 + self.id:
            if frame.remote:
                self._guard(now)
            return
        if state == NmtState.STOPPED or state == NmtState.INITIALISING:
            return
        if frame.remote:
            if state == NmtState.OPERATIONAL:
                self._tpdo_request(cid, now)
            return
        if cid == self.sdo.rx_cobid:
            if len(data) == 8:              # CANopenNode ignores SDO frames of another length
                self.sdo.on_request(cid, data, now)
                self._after_write(now)
            return
        if cid == self.drive.values[(0x1005, 0)] & 0x7FF:
            self._sync(data, now)
            return
        consumer = self.drive.values.get((0x1016, 1), 0)
        if consumer and cid == 0x700 + (consumer >> 16 & 0x7F) and len(data) == 1:
            self._consumer_seen = now
            if self._comm_error:
                self._comm_error = False
                self._emcy(EMCY_RESET)
            return
        if state == NmtState.OPERATIONAL:
            for n, p in enumerate(self.rpdos):
                if p.valid and cid == p.can_id and p.entries:
                    self._rpdo(n, p, data, now)
                    return

    def is_sync(self, frame: CanFrame) -> bool:
        """`frame` is a SYNC (COB-ID of 0x1005, no data) whichever the NMT state (CiA 301 §7.2.5)."""
        return not (frame.extended or frame.remote or frame.data) and \
            frame.id == self.drive.values[(0x1005, 0)] & 0x7FF

    def _guard(self, now: float) -> None:
        self._send(CanFrame(0x700 + self.id, bytes([self._guard_toggle | self.state])))
        self._guard_toggle ^= 0x80
        self._guard_seen = now

    def _sync(self, data: bytes, now: float) -> None:
        if data:    # no SYNC counter 0x1019 here: a SYNC must be empty (CiA 301 §7.5.2.36)
            if not self._sync_length_error:
                self._sync_length_error = True
                self._emcy(EMCY_SYNC_LENGTH, ERROR_REGISTER_COMMUNICATION)
            return
        self._sync_length_error = False
        if self.state != NmtState.OPERATIONAL:
            return
        for p in self.rpdos:
            if p.valid and p.transmission_type <= 240 and p.last_data is not None:
                data_in, p.last_data = p.last_data, None
                self._apply(p, data_in)
        self.drive.refresh()            # TPDOs carry the values at the SYNC, not at the last tick
        for p in self.tpdos:
            if not p.valid or not p.entries:
                continue
            tt = p.transmission_type
            if tt == 0:
                out = p.pack()
                if out != p.last_data:
                    self._tpdo(p, out, now)
            elif tt <= 240:
                p.sync_count += 1
                if p.sync_count >= tt:
                    p.sync_count = 0
                    self._tpdo(p, p.pack(), now)
            elif tt == 252:
                p.sampled = p.pack()
        self._after_write(now)

    def _rpdo(self, n: int, p: Pdo, data: bytes, now: float) -> None:
        # CANopenNode's rule: shorter than mapped → not processed, EMCY 8210; longer → processed, EMCY 8220
        if len(data) != p.length:
            if not self._rpdo_length_error[n]:
                self._rpdo_length_error[n] = True
                code = EMCY_PDO_LENGTH if len(data) < p.length else EMCY_PDO_LENGTH_EXCEEDED
                self._emcy(code, ERROR_REGISTER_COMMUNICATION)
            if len(data) < p.length:
                return
        else:
            self._rpdo_length_error[n] = False
        if p.transmission_type <= 240:
            p.last_data = bytes(data[:p.length])    # applied at the next SYNC
            return
        self._apply(p, data)
        self._after_write(now)

    def _apply(self, p: Pdo, data: bytes) -> None:
        for (index, subindex), value in p.unpack(data):
            self.drive.write(index, subindex, value)   # a refused value is dropped: a PDO has no answer

    def _tpdo_request(self, cid: int, now: float) -> None:
        for p in self.tpdos:
            if p.valid and p.rtr_allowed and cid == p.can_id and p.entries:
                out = p.sampled if p.transmission_type == 252 and p.sampled is not None else p.pack()
                self._tpdo(p, out, now)
                return

    # ------------------------------------------------------------------ frames out
    def send_message(self, can_id: int, data: bytes, remote: bool = False) -> None:
        """canopen's `Network.send_message`, for the SDO server's answers."""
        self._send(CanFrame(can_id, bytes(data), remote=remote))

    def _tpdo(self, p: Pdo, data: bytes, now: float) -> None:
        p.last_data = data
        p.last_sent = now
        self._send(CanFrame(p.can_id, data))

    def _emcy(self, code: int, register_bits: int = 0, manufacturer: bytes = b"\0" * 5) -> None:
        reg = self.drive.values.get((0x1001, 0), 0) | register_bits | (
            ERROR_REGISTER_COMMUNICATION if self._comm_error else 0)
        payload = struct.pack("<HB", code, reg & 0xFF) + manufacturer[:5].ljust(5, b"\0")
        if self.state == NmtState.STOPPED:
            if len(self._emcy_held) < _EMCY_BACKLOG:
                self._emcy_held.append(payload)
            return
        self._send_emcy(payload)

    def _send_emcy(self, payload: bytes) -> None:
        cob = self.drive.values[(0x1014, 0)]
        if not cob & 0x8000_0000:        # bit 31: EMCY not valid
            self._send(CanFrame(cob & 0x7FF, payload))

    def _flush_emcy(self) -> None:
        held, self._emcy_held = self._emcy_held, []
        for payload in held:
            self._send_emcy(payload)

    def _after_write(self, now: float) -> None:
        """What a write (SDO, RPDO) or a SYNC may have caused: EMCYs, event-driven TPDOs."""
        for code, reg, manufacturer in self.drive.emcy_pending():
            self._emcy(code, reg, manufacturer)
        if self.state == NmtState.OPERATIONAL:
            self._events(now)

    def _events(self, now: float) -> None:
        for p in self.tpdos:
            if not p.valid or not p.entries or p.transmission_type < 254:
                continue
            if now - p.last_sent < p.inhibit_s:
                continue
            out = p.pack()
            timer = p.event_timer_s
            if out != p.last_data or (timer > 0 and now - p.last_sent >= timer):
                self._tpdo(p, out, now)

    # ------------------------------------------------------------------ time services
    def _heartbeat_s(self) -> float:
        return self.drive.values.get((0x1017, 0), 0) * 1e-3

    def poll(self, now: float) -> None:
        """After a drive tick: EMCYs, event-driven TPDOs, heartbeat, guarding and consumer timeouts."""
        self._now = now
        if self.state == NmtState.INITIALISING:
            return
        self._after_write(now)
        period = self._heartbeat_s()
        if period > 0 and now >= self._next_heartbeat:
            self._send(CanFrame(0x700 + self.id, bytes([self.state])))
            self._next_heartbeat = max(self._next_heartbeat + period, now)
        v = self.drive.values
        life_s = v.get((0x100C, 0), 0) * v.get((0x100D, 0), 0) * 1e-3
        if life_s > 0 and self._guard_seen is not None and now - self._guard_seen > life_s:
            self._guard_seen = None         # one event until guarding resumes
            self._communication_lost()
        consumer = v.get((0x1016, 1), 0)
        timeout_s = (consumer & 0xFFFF) * 1e-3
        if timeout_s > 0 and self._consumer_seen is not None and now - self._consumer_seen > timeout_s:
            self._consumer_seen = None
            self._communication_lost()

    def _communication_lost(self) -> None:
        self._comm_error = True
        self._emcy(EMCY_GUARD)
        behaviour = self.drive.values.get((0x1029, 1), 0)   # CiA 301 §7.5.2.32
        if behaviour == 0 and self.state == NmtState.OPERATIONAL:
            self.state = NmtState.PRE_OPERATIONAL
        elif behaviour == 2:
            self.state = NmtState.STOPPED

    # ------------------------------------------------------------------ the SDO server's data access
    def variable(self, index: int, subindex: int) -> ODVariable:
        """The object dictionary's variable at index:subindex (SdoAbortedError 0x06020000 / 0x06090011 if none)."""
        return od_variable(self.od, index, subindex)

    def get_data(self, index: int, subindex: int, check_readable: bool = False) -> bytes:
        var = self.variable(index, subindex)
        if check_readable and not var.readable:
            raise SdoAbortedError(ABORT_READ_WRITEONLY)
        value = self.drive.values.get((index, subindex))
        if value is None:
            if var.default is None:
                raise SdoAbortedError(ABORT_NO_SDO_CONNECTION)
            return var.encode_raw(var.default)
        if (index, subindex) == (0x1001, 0) and self._comm_error:
            value |= ERROR_REGISTER_COMMUNICATION
        return var.encode_raw(value)

    def set_data(self, index: int, subindex: int, data: bytes, check_writable: bool = False) -> None:
        var = self.variable(index, subindex)
        if check_writable and not var.writable:
            raise SdoAbortedError(ABORT_WRITE_READONLY)
        if var.data_type in NUMBER_TYPES and 8 * len(data) != len(var):
            raise SdoAbortedError(ABORT_LENGTH_NOT_MATCHED)
        value = var.decode_raw(bytes(data))
        if isinstance(value, (int, float)):
            if var.max is not None and value > var.max:
                raise SdoAbortedError(ABORT_VALUE_TOO_HIGH)
            if var.min is not None and value < var.min:
                raise SdoAbortedError(ABORT_VALUE_TOO_LOW)
        code = self._write(index, subindex, value)
        if code is not None:
            raise SdoAbortedError(code)

    def _write(self, index: int, subindex: int, value) -> int | None:
        v = self.drive.values
        if is_pdo_object(index):
            pdo = next(p for p in self.rpdos + self.tpdos if index in (p.comm, p.map))
            code = pdo.check_write(index, subindex, value)
            if code is None:
                v[(index, subindex)] = value
                pdo.reload()
            return code
        if index == 0x1010:
            if value != SAVE_SIGNATURE:
                return ABORT_STORE_APPLICATION
            self._store()
            return None
        if index == 0x1005 and value & 0x7FFF_F800:
            return ABORT_INVALID_VALUE      # we consume SYNC only, 11-bit
        if index == 0x1029 and value > 2:
            return ABORT_INVALID_VALUE
        if not isinstance(value, int):      # strings and domains: kept as given
            v[(index, subindex)] = value
            return None
        code = self.drive.write(index, subindex, value)
        if code is None:
            if index == 0x1017:
                self._next_heartbeat = self._now + value * 1e-3   # the producer restarts now
            elif index == 0x1016:
                self._consumer_seen = None
        return code

    def _store(self) -> None:
        """0x1010:1 "save": the writable objects become the power-up values (until the daemon exits)."""
        d = self.drive
        for key, value in d.values.items():
            if key[0] in _NOT_STORED:
                continue
            try:
                var = self.variable(*key)
            except SdoAbortedError:
                continue
            if var.writable:
                d.defaults[key] = value
