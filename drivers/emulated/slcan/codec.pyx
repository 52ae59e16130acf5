# cython: language_level=3
"""Lawicel SLCAN frame lines in C (`parse_line`, `encode_line`): the per-frame text work of the SLCAN adapter
(docs/protocols/slcan.md, "Frame lines")."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE

cdef const char* _DIGITS = b"0123456789ABCDEF"

cdef enum:
    TIMESTAMP_WRAP_MS = 60000


cdef inline int _nibble(unsigned char c) noexcept:
    """The value of hex digit `c` (either case), -1 if it is none."""
    if 48 <= c <= 57:
        return c - 48
    if 65 <= c <= 70:
        return c - 55
    if 97 <= c <= 102:
        return c - 87
    return -1


def parse_line(bytes line):
    """(id, data, extended, remote, dlc) of a host's transmit command `line` (`t`/`T`/`r`/`R`, no CR);
    ValueError if it is not one or is malformed (id of 3 / 8 hex digits, DLC 0..8, whole data bytes in
    hex, none in a remote frame, exactly DLC of them in a data frame). The id's range is CanFrame's check."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(line), width, i, nbytes
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(line)
    cdef unsigned char kind = p[0] if n else 0
    cdef unsigned long ident = 0
    cdef int v, hi, lo, dlc
    cdef bint remote = kind == b"r" or kind == b"R"
    cdef unsigned char buf[8]
    if kind == b"t" or kind == b"r":
        width = 3
    elif kind == b"T" or kind == b"R":
        width = 8
    else:
        raise ValueError(f"not a frame command: {line!r}")
    # the layout of a well-formed line: letter, id, DLC digit, 0..8 pairs of hex digits
    nbytes = (n - 2 - width) // 2
    if n < 2 + width or (n - 2 - width) % 2 or nbytes > 8:
        raise ValueError(f"malformed frame command (id of {width} hex digits, DLC 0..8, data as hex): {line!r}")
    for i in range(1, 1 + width):
        v = _nibble(p[i])
        if v < 0:
            raise ValueError(f"malformed frame command (id of {width} hex digits, DLC 0..8, data as hex): {line!r}")
        ident = ident << 4 | v
    dlc = p[1 + width] - 48
    if not 0 <= dlc <= 8:
        raise ValueError(f"malformed frame command (id of {width} hex digits, DLC 0..8, data as hex): {line!r}")
    for i in range(nbytes):
        hi = _nibble(p[2 + width + 2 * i])
        lo = _nibble(p[3 + width + 2 * i])
        if hi < 0 or lo < 0:
            raise ValueError(f"malformed frame command (id of {width} hex digits, DLC 0..8, data as hex): {line!r}")
        buf[i] = <unsigned char>(hi << 4 | lo)
    if remote:
        if nbytes:
            raise ValueError(f"remote frame command carries data: {line!r}")
        return ident, b"", width == 8, True, dlc
    if nbytes != dlc:
        raise ValueError(f"data must be exactly {dlc} bytes of hex: {line!r}")
    return ident, PyBytes_FromStringAndSize(<char*>buf, nbytes), width == 8, False, dlc


def encode_line(unsigned long ident, bytes data, bint extended, bint remote, int dlc, long timestamp_ms=-1):
    """The line (with CR) a Lawicel adapter sends the host for a received frame: `dlc` is the DLC on the
    wire (the requested length of a remote frame), `data` the data bytes (none for a remote frame);
    `timestamp_ms` ≥ 0 is appended modulo 60000 as 4 hex digits (−1: timestamps off)."""
    cdef Py_ssize_t nbytes = PyBytes_GET_SIZE(data), width = 8 if extended else 3, i, k = 0
    cdef const unsigned char* d = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef char out[40]      # T + 8 id + DLC + 16 data + 4 stamp + CR = 31 at most
    cdef long stamp
    if nbytes > 8 or not 0 <= dlc <= 8:
        raise ValueError(f"a CAN frame line carries at most 8 data bytes and a DLC digit, got {nbytes}, {dlc}")
    out[0] = (b"R" if remote else b"T") if extended else (b"r" if remote else b"t")
    for i in range(width):
        out[width - i] = _DIGITS[(ident >> (4 * i)) & 0xF]
    k = 1 + width
    out[k] = <char>(48 + dlc)
    k += 1
    for i in range(nbytes):
        out[k] = _DIGITS[d[i] >> 4]
        out[k + 1] = _DIGITS[d[i] & 0xF]
        k += 2
    if timestamp_ms >= 0:
        stamp = timestamp_ms % TIMESTAMP_WRAP_MS
        for i in range(4):
            out[k + 3 - i] = _DIGITS[(stamp >> (4 * i)) & 0xF]
        k += 4
    out[k] = b"\r"
    return PyBytes_FromStringAndSize(out, k + 1)
