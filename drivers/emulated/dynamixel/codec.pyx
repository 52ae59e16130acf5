# cython: language_level=3
"""Protocol 2.0 CRC-16, packet framing and the instructions' parameter decoders in C: the per-packet byte work of
the bus server, re-exported by protocol.py (docs/protocols/dynamixel.md, "Packets")."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from libc.stdint cimport uint8_t, uint16_t
from libc.string cimport memcpy, memset

cdef uint16_t _TABLE[256]   # one byte per step: 0x0000, 0x8005, 0x800F, 0x000A, ... (e-manual "CRC Calculation")


cdef void _build_table() noexcept:
    # CRC-16/UMTS: polynomial 0x8005, MSB first (e-manual "CRC calculation", update_crc's table)
    cdef unsigned int i, k, c
    for i in range(256):
        c = i << 8
        for k in range(8):
            c = ((c << 1) ^ 0x8005) if c & 0x8000 else (c << 1)
        _TABLE[i] = c & 0xFFFF


_build_table()

cdef enum:
    PREFIX = 7          # FF FF FD 00 ID LEN_L LEN_H
    MAX_LENGTH = 0xFFFF  # LEN is 16 bits
    STATUS = 0x55


cdef inline uint16_t _crc(const uint8_t* p, Py_ssize_t n, uint16_t crc) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        crc = <uint16_t>((crc << 8) ^ _TABLE[((crc >> 8) ^ p[i]) & 0xFF])
    return crc


def crc16(data, long crc=0):
    """CRC-16/UMTS of `data` (poly 0x8005, init 0, MSB first; e-manual "CRC Calculation"), returned as an int 0..0xFFFF.

    `crc` continues a running CRC: crc16(a + b) == crc16(b, crc16(a)). This is how the intermediate CRCs of a
    Fast Sync/Bulk Read reply are formed (Protocol 2.0 §Fast Sync Read). On the wire the CRC is sent low byte first.
    """
    if not 0 <= crc <= 0xFFFF:
        raise ValueError(f"crc must be 0..0xFFFF, got {crc}")
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return _crc(<const uint8_t*> view.buf, view.len, <uint16_t> crc)
    finally:
        PyBuffer_Release(&view)


cdef Py_ssize_t _stuffed_len(const uint8_t* head, Py_ssize_t nh, const uint8_t* p, Py_ssize_t n) noexcept:
    """Length of head + p after stuffing (Protocol 2.0 §Packet Process: an FD after every FF FF FD)."""
    cdef Py_ssize_t i, extra = 0
    cdef uint8_t a = 0, b = 0, c   # the two bytes before the current one, in the output stream
    for i in range(nh + n):
        c = head[i] if i < nh else p[i - nh]
        if a == 0xFF and b == 0xFF and c == 0xFD:
            extra += 1
            a, b = c, 0xFD   # the inserted FD breaks the pattern: FF FF FD FF FF FD stuffs twice
        else:
            a, b = b, c
    return nh + n + extra


cdef Py_ssize_t _stuff_into(uint8_t* out, const uint8_t* head, Py_ssize_t nh,
                            const uint8_t* p, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i, o = 0
    cdef uint8_t c
    for i in range(nh + n):
        c = head[i] if i < nh else p[i - nh]
        out[o] = c
        o += 1
        if c == 0xFD and o >= 3 and out[o - 2] == 0xFF and out[o - 3] == 0xFF:
            out[o] = 0xFD
            o += 1
    return o


cdef bytes _packet(int id, const uint8_t* head, Py_ssize_t nh, object params):
    """FF FF FD 00 | id | LEN | stuffed(head + params) | CRC (Protocol 2.0 §Instruction Packet, §Packet Process,
    §Status Packet)."""
    if not 0 <= id <= 0xFF:
        raise ValueError(f"id must be 0..255, got {id}")
    if type(params) is bytes:        # every reply the bus builds: no buffer request
        return _framed(id, head, nh, <const uint8_t*> PyBytes_AS_STRING(params), PyBytes_GET_SIZE(params))
    cdef Py_buffer view
    if not isinstance(params, (bytearray, memoryview)):
        params = bytes(params)     # a list of ints, as bytes() takes it
    PyObject_GetBuffer(params, &view, PyBUF_SIMPLE)
    try:
        return _framed(id, head, nh, <const uint8_t*> view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


cdef bytes _framed(int id, const uint8_t* head, Py_ssize_t nh, const uint8_t* params, Py_ssize_t n):
    """_packet of the `n` bytes at `params`."""
    cdef Py_ssize_t body = _stuffed_len(head, nh, params, n)
    cdef Py_ssize_t length = body + 2                # LEN counts the stuffed body and the CRC
    if length > MAX_LENGTH:
        raise ValueError(f"packet too long: LEN would be {length} > 65535")
    cdef bytes out = PyBytes_FromStringAndSize(NULL, PREFIX + length)
    cdef uint8_t* o = <uint8_t*> PyBytes_AS_STRING(out)
    cdef uint16_t crc
    o[0] = 0xFF
    o[1] = 0xFF
    o[2] = 0xFD
    o[3] = 0x00
    o[4] = <uint8_t> id
    o[5] = length & 0xFF
    o[6] = length >> 8
    _stuff_into(o + PREFIX, head, nh, params, n)
    crc = _crc(o, PREFIX + body, 0)
    o[PREFIX + body] = crc & 0xFF
    o[PREFIX + body + 1] = crc >> 8
    return out


def encode_instruction(int id, int instruction, params=b""):
    """Instruction packet: header, `id`, LEN, `instruction`, stuffed `params`, CRC (e-manual "Packet Process").

    Used by tests, the bench and the hardware mirror. id and instruction must be bytes (0..255); 253 and 255 are
    not valid device IDs (Protocol 2.0 §Packet ID) but are not refused here, so tests can build odd packets.
    """
    if not 0 <= instruction <= 0xFF:
        raise ValueError(f"instruction must be 0..255, got {instruction}")
    cdef uint8_t head[1]
    head[0] = <uint8_t> instruction
    return _packet(id, head, 1, params)


def encode_status(int id, int error, params=b""):
    """Status packet (instruction 0x55) from device `id` with `error` byte (ErrorCode | ALERT) and `params`.

    Instruction, error and params are stuffed (Protocol 2.0 §Packet Process), as the SDK's `rxPacket` expects.
    """
    return status_packet(id, error, params)


cdef bytes status_packet(int id, int error, object params):
    """encode_status for C callers (the bus's reads): no Python call per reply."""
    if not 0 <= error <= 0xFF:
        raise ValueError(f"error must be 0..255, got {error}")
    cdef uint8_t head[2]
    head[0] = STATUS
    head[1] = <uint8_t> error
    return _packet(id, head, 2, params)


def encode_fast_status(segments):
    """The single combined Fast Sync Read / Fast Bulk Read reply (Protocol 2.0 §Fast Sync Read), never stuffed.

    segments: (id, error, data) per device, in the order the instruction listed them. Layout:
    FF FF FD 00 FE LEN_L LEN_H 55 | ERR1 ID1 DATA1 CRC1 | ... | ERRn IDn DATAn CRCn with
    LEN = 1 + sum(len(data_i) + 4). CRC_k is the running CRC of the whole packet from the first FF through the
    end of DATA_k (earlier segments' CRC bytes included), so the last one is the ordinary packet CRC.
    """
    segs = [(int(i), int(e), bytes(d)) for i, e, d in segments]
    if not segs:
        raise ValueError("a fast status packet needs at least one segment")
    cdef Py_ssize_t length = 1, k = PREFIX + 1, n
    cdef uint16_t crc
    cdef int dev_id, error
    cdef bytes data, out
    for dev_id, error, data in segs:
        if not (0 <= dev_id <= 0xFF and 0 <= error <= 0xFF):
            raise ValueError(f"id and error must be 0..255, got {dev_id}, {error}")
        length += len(data) + 4
    if length > MAX_LENGTH:
        raise ValueError(f"packet too long: LEN would be {length} > 65535")
    out = PyBytes_FromStringAndSize(NULL, PREFIX + length)
    cdef uint8_t* o = <uint8_t*> PyBytes_AS_STRING(out)
    o[0] = 0xFF
    o[1] = 0xFF
    o[2] = 0xFD
    o[3] = 0x00
    o[4] = 0xFE                  # BROADCAST_ID: the combined reply's ID (Protocol 2.0 §Fast Sync Read)
    o[5] = length & 0xFF
    o[6] = length >> 8
    o[7] = STATUS
    for dev_id, error, data in segs:
        n = len(data)
        o[k] = <uint8_t> error
        o[k + 1] = <uint8_t> dev_id
        if n:
            memcpy(o + k + 2, PyBytes_AS_STRING(data), n)
        k += 2 + n
        crc = _crc(o, k, 0)      # running CRC from the first FF (earlier CRC bytes included)
        o[k] = crc & 0xFF
        o[k + 1] = crc >> 8
        k += 2
    return out



# ---------------------------------------------------------------------------------------------------
# Parameter decoders for incoming instructions (Protocol 2.0 §Instruction Details). They check the
# *structure* of the parameter block only; whether an address or length suits a control table is the firmware
# model's business. A block that asks for nothing (zero data length, no device listed) is treated as malformed.
# In C: a Sync Write of 12 splits into its items here instead of a Python loop of slices.


class ProtocolError(ValueError):
    """A packet whose parameters do not fit its instruction."""


cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* t, Py_ssize_t n)   # what tuple.__new__(subtype, …) allocates with


cdef object named_tuple(object cls, tuple values):
    """`cls(*values)` of a NamedTuple class `cls`, built as tuple.__new__(cls, values) builds it: without the Python
    call of a NamedTuple's __new__ (or of tuple.__new__), which costs more than a status packet's encoding."""
    cdef Py_ssize_t n = len(values), k
    cdef object t = PyType_GenericAlloc(<PyTypeObject*> cls, n)
    cdef object v
    for k in range(n):
        v = values[k]
        Py_INCREF(v)
        PyTuple_SET_ITEM(t, k, v)
    return t


def whole_packet(bytes data, packet_type):
    """`packet_type(id, instruction, params, wire_len)` (protocol.Packet) if `data` is exactly one instruction packet
    with a good CRC and nothing to unstuff (the usual chunk on a quiet bus), else None (the parser's full scan then
    decides, with the same result for such a chunk)."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data), k
    cdef const uint8_t* p = <const uint8_t*> PyBytes_AS_STRING(data)
    if n < 10 or p[0] != 0xFF or p[1] != 0xFF or p[2] != 0xFD or p[3] != 0 or n != 7 + (p[5] | p[6] << 8):
        return None
    if p[7] == 0x55 or _crc(p, n - 2, 0) != (p[n - 2] | p[n - 1] << 8):
        return None                      # a status packet, or a bad CRC
    for k in range(7, n - 5):
        if p[k] == 0xFF and p[k + 1] == 0xFF and p[k + 2] == 0xFD and p[k + 3] == 0xFD:
            return None                  # stuffed
    return named_tuple(packet_type, (p[4], p[7], PyBytes_FromStringAndSize(<const char*> p + 8, n - 10), n))


cdef inline bytes _as_bytes(object params):
    return params if type(params) is bytes else bytes(params)


cdef inline int _u16(const uint8_t* p, Py_ssize_t i) noexcept:
    return p[i] | (p[i + 1] << 8)


cpdef object decode_read(params):
    """Read / (REG) params: address L/H, length L/H → (address, length in bytes)."""
    cdef bytes b = _as_bytes(params)
    cdef const uint8_t* p = <const uint8_t*> PyBytes_AS_STRING(b)
    if len(b) != 4:
        raise ProtocolError(f"Read needs 4 parameter bytes, got {len(b)}")
    cdef int length = _u16(p, 2)
    if length == 0:
        raise ProtocolError("Read of 0 bytes")
    return _u16(p, 0), length


cpdef object decode_write(params):
    """Write / Reg Write params: address L/H, data... → (address, data); at least one data byte."""
    cdef bytes b = _as_bytes(params)
    cdef Py_ssize_t n = len(b)
    if n < 3:
        raise ProtocolError(f"Write needs an address and at least 1 data byte, got {n} bytes")
    cdef const uint8_t* p = <const uint8_t*> PyBytes_AS_STRING(b)
    return _u16(p, 0), PyBytes_FromStringAndSize(<const char*> p + 2, n - 2)


cpdef object decode_sync_read(params):
    """Sync Read / Fast Sync Read params: address L/H, length L/H, ID... → (address, length in bytes, ids).

    The IDs keep their order: the replies must come back in it (Protocol 2.0 §Sync Read; SDK
    group_sync_read.py `GroupSyncRead.rxPacket`).
    """
    cdef bytes b = _as_bytes(params)
    if len(b) < 5:
        raise ProtocolError(f"Sync Read needs address, length and at least one ID, got {len(b)} bytes")
    cdef const uint8_t* p = <const uint8_t*> PyBytes_AS_STRING(b)
    cdef int length = _u16(p, 2)
    if length == 0:
        raise ProtocolError("Sync Read of 0 bytes")
    return _u16(p, 0), length, list(b[4:])


cpdef object decode_sync_write(params):
    """Sync Write params: address L/H, length L/H, then per device ID + `length` data bytes.

    Returns (address, length in bytes, [(id, data)]).
    """
    cdef bytes b = _as_bytes(params)
    cdef Py_ssize_t size = len(b), n, i, stride
    if size < 4:
        raise ProtocolError(f"Sync Write needs address and length, got {size} bytes")
    cdef const uint8_t* p = <const uint8_t*> PyBytes_AS_STRING(b)
    cdef int address = _u16(p, 0), length = _u16(p, 2)
    if length == 0:
        raise ProtocolError("Sync Write of 0 bytes")
    stride = length + 1
    n = size - 4
    if n == 0 or n % stride:
        raise ProtocolError(f"Sync Write: {n} bytes after the header is not a positive multiple of 1 + {length}")
    cdef list items = []
    for i in range(4, size, stride):
        items.append((p[i], PyBytes_FromStringAndSize(<const char*> p + i + 1, length)))
    return address, length, items


cpdef object decode_bulk_read(params):
    """Bulk Read / Fast Bulk Read params: per device ID, address L/H, length L/H → [(id, address, length)].

    The same ID twice is a ProtocolError (e-manual: "The same ID cannot be used multiple times").
    """
    cdef bytes b = _as_bytes(params)
    cdef Py_ssize_t n = len(b), i
    if n == 0 or n % 5:
        raise ProtocolError(f"Bulk Read needs a positive multiple of 5 parameter bytes, got {n}")
    cdef const uint8_t* p = <const uint8_t*> PyBytes_AS_STRING(b)
    cdef bint seen[256]
    memset(seen, 0, sizeof(seen))
    cdef int dev_id, address, length
    cdef list out = []
    for i in range(0, n, 5):
        dev_id, address, length = p[i], _u16(p, i + 1), _u16(p, i + 3)
        if seen[dev_id]:
            raise ProtocolError(f"Bulk Read lists ID {dev_id} twice")
        if length == 0:
            raise ProtocolError(f"Bulk Read of 0 bytes from ID {dev_id}")
        seen[dev_id] = True
        out.append((dev_id, address, length))
    return out


cpdef object decode_bulk_write(params):
    """Bulk Write params: per device ID, address L/H, length L/H, data → [(id, address, data)].

    The same ID twice is a ProtocolError (e-manual: "it can only write once for each individual device").
    """
    cdef bytes b = _as_bytes(params)
    cdef Py_ssize_t n = len(b), i = 0, end
    if n == 0:
        raise ProtocolError("Bulk Write without any device")
    cdef const uint8_t* p = <const uint8_t*> PyBytes_AS_STRING(b)
    cdef bint seen[256]
    memset(seen, 0, sizeof(seen))
    cdef int dev_id, address, length
    cdef list out = []
    while i < n:
        if n - i < 5:
            raise ProtocolError(f"Bulk Write: truncated device header at parameter byte {i}")
        dev_id, address, length = p[i], _u16(p, i + 1), _u16(p, i + 3)
        if seen[dev_id]:
            raise ProtocolError(f"Bulk Write lists ID {dev_id} twice")
        if length == 0:
            raise ProtocolError(f"Bulk Write of 0 bytes to ID {dev_id}")
        end = i + 5 + length
        if end > n:
            raise ProtocolError(f"Bulk Write: ID {dev_id} announces {length} bytes, only {n - i - 5} present")
        seen[dev_id] = True
        out.append((dev_id, address, PyBytes_FromStringAndSize(<const char*> p + i + 5, length)))
        i = end
    return out
