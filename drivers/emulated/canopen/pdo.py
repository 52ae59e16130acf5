"""CiA 301 PDOs of one node: configuration checks, mapping, packing, transmission rules (docs/protocols/canopen.md,
"PDOs")."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from canopen.objectdictionary import SIGNED_TYPES, ObjectDictionary, ODVariable
from canopen.sdo import SdoAbortedError
from canopen.sdo.constants import ABORT_INVALID_VALUE, ABORT_NO_SUBINDEX
from canopen.sdo.constants import ABORT_NOT_IN_OD as ABORT_NO_OBJECT
from canopen.sdo.constants import ABORT_PDO_CANNOT_MAP as ABORT_CANNOT_MAP
from canopen.sdo.constants import ABORT_PDO_LENGTH_EXCEEDED as ABORT_MAP_LENGTH

COB_INVALID = 0x8000_0000
COB_NO_RTR = 0x4000_0000
_COB_RESERVED = 0x3FFF_F800     # bits 11..29: 29-bit frames are not supported
MAX_ENTRIES = 8
MAX_BITS = 64

RPDO_COMM, RPDO_MAP, TPDO_COMM, TPDO_MAP = 0x1400, 0x1600, 0x1800, 0x1A00
PDO_COUNT = 4

# CiA 301 dummy objects 0x0002..0x0007 (INTEGER8/16/32, UNSIGNED8/16/32): their size in bits
_DUMMY_BITS = {2: 8, 3: 16, 4: 32, 5: 8, 6: 16, 7: 32}

# struct codes by (bits, signed) for the integer types a PDO carries
_CODES = {(8, False): "B", (8, True): "b", (16, False): "H", (16, True): "h",
          (32, False): "I", (32, True): "i", (64, False): "Q", (64, True): "q"}


def is_pdo_object(index: int) -> bool:
    return RPDO_COMM <= index < RPDO_COMM + PDO_COUNT or RPDO_MAP <= index < RPDO_MAP + PDO_COUNT or \
        TPDO_COMM <= index < TPDO_COMM + PDO_COUNT or TPDO_MAP <= index < TPDO_MAP + PDO_COUNT


@dataclass(frozen=True, slots=True)
class Entry:
    """One mapped object: (index, subindex), its length [bit], and the struct code to pack it."""

    index: int
    subindex: int
    bits: int
    code: str | None      # None: a dummy entry (RPDO data skipped)


def od_variable(od: ObjectDictionary, index: int, subindex: int) -> ODVariable:
    """The variable at index:subindex of `od`; SdoAbortedError 0x06020000 / 0x06090011 if there is none."""
    if index not in od:
        raise SdoAbortedError(ABORT_NO_OBJECT)
    obj = od[index]
    if isinstance(obj, ODVariable):
        if subindex != 0:
            raise SdoAbortedError(ABORT_NO_SUBINDEX)
        return obj
    if subindex not in obj:
        raise SdoAbortedError(ABORT_NO_SUBINDEX)
    return obj[subindex]


def decode_entry(od: ObjectDictionary, raw: int, receive: bool) -> Entry | int:
    """The mapping entry 0xIIIISSLL as an `Entry`, or the abort code that refuses it."""
    index, subindex, bits = raw >> 16, (raw >> 8) & 0xFF, raw & 0xFF
    if index in _DUMMY_BITS and subindex == 0:
        return Entry(index, 0, bits, None) if receive and bits == _DUMMY_BITS[index] else ABORT_CANNOT_MAP
    try:
        var = od_variable(od, index, subindex)
    except SdoAbortedError as exc:
        return exc.code
    allowed = var.writable if receive else var.readable
    if not (var.pdo_mappable and allowed) or bits != len(var) or bits % 8:
        return ABORT_CANNOT_MAP
    code = _CODES.get((bits, var.data_type in SIGNED_TYPES))
    return Entry(index, subindex, bits, code) if code else ABORT_CANNOT_MAP


class Pdo:
    """RPDO or TPDO number n (0..3) of a node whose objects are in `values` (the drive's store)."""

    def __init__(self, od: ObjectDictionary, values: dict, receive: bool, n: int):
        self.od = od
        self.values = values
        self.receive = receive
        self.comm = (RPDO_COMM if receive else TPDO_COMM) + n
        self.map = (RPDO_MAP if receive else TPDO_MAP) + n
        self.entries: list[Entry] = []
        self.length = 0           # mapped bytes
        # the communication parameters, read back by reload() after every write to this PDO's objects
        # (node.py) and every reset, so that a frame costs no object-store lookups
        self.cob_id = self.can_id = self.transmission_type = 0
        self.valid = self.rtr_allowed = False
        self.inhibit_s = self.event_timer_s = 0.0
        self.sync_count = 0       # SYNCs since the last transmission (types 1..240)
        self.last_data: bytes | None = None   # TPDO: last transmitted data; RPDO: buffered for SYNC
        self.last_sent = -1e9     # TPDO: monotonic time of the last transmission [s]
        self.sampled: bytes | None = None     # TPDO type 252: data sampled at the last SYNC
        self.reload()

    # ------------------------------------------------------------------ configuration
    def reload(self) -> None:
        """Re-read the communication parameters and the mapping from the object store (after a reset or a
        write to any of this PDO's objects)."""
        v, comm = self.values, self.comm
        self.cob_id = v[(comm, 1)]
        self.can_id = self.cob_id & 0x7FF
        self.valid = not self.cob_id & COB_INVALID
        self.rtr_allowed = not self.cob_id & COB_NO_RTR
        self.transmission_type = v[(comm, 2)]
        self.inhibit_s = v.get((comm, 3), 0) * 1e-4
        self.event_timer_s = v.get((comm, 5), 0) * 1e-3
        entries = []
        for k in range(1, min(self.values.get((self.map, 0), 0), MAX_ENTRIES) + 1):
            e = decode_entry(self.od, self.values.get((self.map, k), 0), self.receive)
            if isinstance(e, int):    # an invalid stored map (only a bad EDS can do this): the PDO is empty
                entries = []
                break
            entries.append(e)
        self.entries = entries
        self.length = sum(e.bits for e in entries) // 8
        # one precompiled struct for the whole PDO: dummy entries are pad bytes
        self._struct = struct.Struct("<" + "".join(e.code or f"{e.bits // 8}x" for e in entries))
        self._keys = [(e.index, e.subindex) for e in entries if e.code is not None]
        self.last_data = None
        self.sampled = None
        self.sync_count = 0

    def check_write(self, index: int, subindex: int, value: int) -> int | None:
        """The abort code that refuses writing `value` to this PDO's index:subindex, or None."""
        if index == self.comm:
            if subindex == 1:
                can_id, valid = value & 0x7FF, not value & COB_INVALID
                if value & _COB_RESERVED or (valid and ((self.valid and can_id != self.can_id) or can_id == 0
                                                        or not self.entries)):
                    return ABORT_INVALID_VALUE
            elif subindex == 2:
                ok = value <= 240 or value >= (254 if self.receive else 252)
                if not ok:
                    return ABORT_INVALID_VALUE
            elif subindex == 3 and self.valid:
                return ABORT_INVALID_VALUE
            return None
        # mapping
        if self.valid or (subindex > 0 and self.values.get((self.map, 0), 0) != 0):
            return ABORT_INVALID_VALUE
        if subindex == 0:
            if value > MAX_ENTRIES:
                return ABORT_MAP_LENGTH
            bits = 0
            for k in range(1, value + 1):
                e = decode_entry(self.od, self.values.get((self.map, k), 0), self.receive)
                if isinstance(e, int):
                    return ABORT_CANNOT_MAP
                bits += e.bits
            if bits > MAX_BITS:
                return ABORT_MAP_LENGTH
            if bits == 0 and value > 0:
                return ABORT_INVALID_VALUE
            return None
        e = decode_entry(self.od, value, self.receive)
        return e if isinstance(e, int) else None

    # ------------------------------------------------------------------ data
    def pack(self) -> bytes:
        """The TPDO's data from the object store."""
        v = self.values
        return self._struct.pack(*[v[k] for k in self._keys])

    def unpack(self, data: bytes) -> list[tuple[tuple[int, int], int]]:
        """((index, subindex), value) of each mapped object in RPDO `data` (at least `length` bytes; dummies
        skipped)."""
        return list(zip(self._keys, self._struct.unpack_from(data), strict=True))
