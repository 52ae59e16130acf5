# WriteChecks' fields and its C-level write, for `ServoCore` (a Write without a Python
# call), and the register decoder the firmware's C code shares.
from libc.stdint cimport int64_t, uint8_t, uint64_t


cdef inline int64_t register_value(const uint8_t* p, int size, bint signed) noexcept nogil:
    """Little-endian `size`-byte register value, two's complement when `signed`."""
    cdef uint64_t u = 0
    cdef int k
    for k in range(size):
        u |= (<uint64_t> p[k]) << (8 * k)
    if signed and size < 8 and u >> (8 * size - 1):
        return <int64_t> u - ((<int64_t> 1) << (8 * size))
    return <int64_t> u


cdef struct Rule:         # one item, at its start address
    int flags
    int size
    int64_t lo, hi, tb_hi, mask
    uint64_t modes        # bit m: the limit applies in Operating Mode m
    int up_addr, up_size, up_signed, low_addr, low_size, low_signed


cdef class WriteChecks:
    cdef Rule* rules               # by item start address
    cdef int* owner                # start address of the item covering each byte, -1 in gaps
    cdef uint8_t* indirect         # per byte: nonzero in Indirect Data and Indirect Address items
    cdef Py_ssize_t size
    cdef readonly Py_ssize_t a_torque, a_mode, a_drive, a_watchdog
    cdef list names                # item name by start address (None elsewhere)
    cdef dict choices              # start address -> frozenset of accepted values
    cdef dict limits               # start address -> "Low..Up" or "±Up", for messages

    cdef object _access_problem(self, Py_ssize_t a, bint locked)
    cdef object _check(self, const uint8_t* data, Py_ssize_t a, int64_t v)
    cdef uint8_t* _table(self, bytearray table) except NULL
    cdef list _write(self, bytearray table, Py_ssize_t address, bytes data)
    cpdef object write_direct(self, bytearray table, Py_ssize_t address, bytes data)
