# cython: language_level=3
"""The checks a Dynamixel control table makes on a Write, in C: the engine's only implementation of them.

`WriteChecks` holds a model's rules per item address in C arrays and checks a value or a whole packet against
the table's bytes as they were before the packet, so a Sync Write of 12 goals runs no Python per servo. Rules,
error numbers and precedence (Protocol 2.0 §Status Packet): docs/dynamixel.md.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp, memcpy

from firmware_models.dynamixel.errors import ControlTableError

cdef enum:
    READ_ONLY = 0x01
    EEPROM = 0x02
    SIGNED = 0x04
    TIME_BASED = 0x08     # time_based_max replaces max while Drive Mode bit 2 is set
    GUARDED = 0x10        # read-only (Data Range Error) while the Bus Watchdog has tripped
    LIMITED = 0x20        # bounded by a limit item
    LIMIT_LOW = 0x40      # ... and a low limit item (else ±limit)
    ANY_MODE = 0x80       # ... in every Operating Mode (else only those in `modes`)
    MASKED = 0x100
    CHOICES = 0x200
    ACCESS = 7            # Protocol 2.0 error numbers (errors.ErrorCode)
    DATA_LENGTH = 5
    DATA_RANGE = 4
    DATA_LIMIT = 6


def _error(int code, str message):
    return ControlTableError(code, message)


cdef class WriteChecks:
    """A model's write rules (a `ModelSpec`), checked against one table's bytes at a time (fields: write_checks.pxd)."""

    def __cinit__(self):
        self.rules = NULL
        self.owner = NULL
        self.indirect = NULL

    def __dealloc__(self):
        free(self.rules)
        free(self.owner)
        free(self.indirect)

    def __init__(self, spec):
        cdef Py_ssize_t size = spec.size
        cdef Rule* r
        self.size = size
        self.rules = <Rule*> calloc(size, sizeof(Rule))
        self.owner = <int*> calloc(size, sizeof(int))
        self.indirect = <uint8_t*> calloc(size, 1)
        if self.rules == NULL or self.owner == NULL or self.indirect == NULL:
            raise MemoryError()
        for b in spec.indirect:
            for a in range(b.data, min(b.data + b.count, size)):
                self.indirect[a] = 1
            for a in range(b.address, min(b.address + 2 * b.count, size)):
                self.indirect[a] = 1
        for a in range(size):
            self.owner[a] = -1
        self.names = [None] * size
        self.choices = {}
        self.limits = {}
        self.a_torque = spec.item("Torque Enable").address
        # -1 on a model without the item (Protocol 1.0): no rule then reads it (no limit_modes, no time_based_max)
        self.a_mode = spec.item("Operating Mode").address if spec.has("Operating Mode") else -1
        self.a_drive = spec.item("Drive Mode").address if spec.has("Drive Mode") else -1
        self.a_watchdog = spec.item("Bus Watchdog").address if spec.has("Bus Watchdog") else -1
        guarded = {spec.item(n).address for n in spec.watchdog_guarded} if self.a_watchdog >= 0 else set()
        for it in spec.items:
            a = it.address
            for b in range(a, a + it.size):
                self.owner[b] = a
            self.names[a] = it.name
            r = &self.rules[a]
            r.size = it.size
            r.lo, r.hi, r.mask = it.min, it.max, 0 if it.mask is None else it.mask
            r.flags = ((READ_ONLY if it.access == "R" else 0) | (EEPROM if it.eeprom else 0)
                       | (SIGNED if it.signed else 0) | (GUARDED if a in guarded else 0)
                       | (MASKED if it.mask is not None else 0))
            if it.time_based_max is not None:
                r.flags |= TIME_BASED
                r.tb_hi = it.time_based_max
            if it.choices is not None:
                r.flags |= CHOICES
                self.choices[a] = it.choices
            if it.limit is not None:
                up = spec.item(it.limit)
                r.flags |= LIMITED
                r.up_addr, r.up_size, r.up_signed = up.address, up.size, up.signed
                if it.limit_low is not None:
                    low = spec.item(it.limit_low)
                    r.flags |= LIMIT_LOW
                    r.low_addr, r.low_size, r.low_signed = low.address, low.size, low.signed
                if it.limit_modes is None:
                    r.flags |= ANY_MODE
                else:
                    for m in it.limit_modes:
                        if not 0 <= m < 64:
                            raise ValueError(f"{it.name}: limit mode {m} is not 0..63")
                        r.modes |= (<uint64_t> 1) << m
                self.limits[a] = f"{it.limit_low + '..' if it.limit_low else '±'}{it.limit}"

    # ------------------------------------------------------------------ one item
    cdef object _access_problem(self, Py_ssize_t a, bint locked):
        """Why a write to the item at `a` is an Access Error (read-only, or EEPROM while Torque Enable = 1)."""
        cdef int flags = self.rules[a].flags
        if flags & READ_ONLY:
            return f"{self.names[a]} is read-only"
        if locked and flags & EEPROM:
            return f"{self.names[a]} is EEPROM and Torque Enable = 1"
        return None

    cdef object _check(self, const uint8_t* data, Py_ssize_t a, int64_t v):
        """Raise the Data Range Error of writing `v` to the item at `a`; return its Data Limit problem (or None)."""
        cdef const Rule* r = &self.rules[a]
        cdef int64_t hi = r.hi, top, bottom
        cdef bint time_based = r.flags & TIME_BASED and data[self.a_drive] & 0x04
        if time_based:
            hi = r.tb_hi
        cdef bint limited = (r.flags & LIMITED and not time_based
                             and (r.flags & ANY_MODE or (data[self.a_mode] < 64 and r.modes >> data[self.a_mode] & 1)))
        if (v < r.lo or v > hi) and not limited:
            # an item bounded by a limit item has that limit as its range: beyond it is a Data Limit
            # Error whatever the limit item's own maximum (e-manual §Goal PWM(100): range ±PWM Limit(36))
            raise _error(DATA_RANGE, f"{self.names[a]} = {v} outside {r.lo}..{hi}")
        if r.flags & CHOICES and v not in self.choices[a]:
            raise _error(DATA_RANGE, f"{self.names[a]} = {v} is not one of {sorted(self.choices[a])}")
        if r.flags & MASKED and v & ~r.mask:
            raise _error(DATA_RANGE, f"{self.names[a]} = {v:#x} sets bits outside {r.mask:#x}")
        if r.flags & GUARDED and data[self.a_watchdog] == 0xFF:
            raise _error(DATA_RANGE, f"{self.names[a]}: the Bus Watchdog has tripped (reads -1)")
        if not limited:
            return None
        top = register_value(data + r.up_addr, r.up_size, r.up_signed)
        bottom = register_value(data + r.low_addr, r.low_size, r.low_signed) if r.flags & LIMIT_LOW else -top
        if v < bottom or v > top:
            return f"{self.names[a]} = {v} outside {bottom}..{top} ({self.limits[a]})"
        return None

    def check(self, bytearray table, Py_ssize_t address, int64_t value):
        """Writing `value` to the item at `address` of `table` (its bytes before the packet): raise its Data Range
        Error (ControlTableError), return its Data Limit problem, or None."""
        self._table(table)
        if not 0 <= address < self.size or self.names[address] is None:
            raise KeyError(f"no item starts at address {address}")
        return self._check(<const uint8_t*> PyByteArray_AS_STRING(table), address, value)

    def access_problem(self, Py_ssize_t address, bint locked):
        """Why a write to the item at `address` is an Access Error, or None."""
        if not 0 <= address < self.size or self.names[address] is None:
            raise KeyError(f"no item starts at address {address}")
        return self._access_problem(address, locked)

    cdef uint8_t* _table(self, bytearray table) except NULL:
        if PyByteArray_GET_SIZE(table) != self.size:
            raise ValueError(f"control table of {PyByteArray_GET_SIZE(table)} bytes, the model has {self.size}")
        return <uint8_t*> PyByteArray_AS_STRING(table)

    # ------------------------------------------------------------------ a packet
    cpdef object write_direct(self, bytearray table, Py_ssize_t address, bytes data):
        """ControlTable.write of `data` at `address` when the write touches no Indirect Data or Indirect Address
        byte: checked and applied, all or nothing; the names of the items whose value changed, in address order.
        None (nothing checked or written) when it touches one: the table's own path does those. Raises
        ControlTableError with the first error of the highest precedence (Access > Data Length > Data Range >
        Data Limit), a write outside the table or of no data included."""
        cdef Py_ssize_t n = PyBytes_GET_SIZE(data), end = address + n, a
        if address < 0 or address >= self.size or end > self.size:
            raise _error(ACCESS, f"write {address}+{n} outside the control table (0..{self.size - 1})")
        if n == 0:
            raise _error(DATA_LENGTH, f"write of no data at {address}")
        for a in range(address, end):
            if self.indirect[a]:
                return None
        return self._write(table, address, data)

    def write(self, bytearray table, Py_ssize_t address, bytes data):
        """Check `data` at `address` (inside the table, touching no Indirect Data) and apply it, all or nothing.

        Returns the names of the items whose value changed, in address order; raises ControlTableError with the
        first error of the highest precedence (Access > Data Length > Data Range > Data Limit)."""
        return self._write(table, address, data)

    cdef list _write(self, bytearray table, Py_ssize_t address, bytes data):
        cdef uint8_t* t = self._table(table)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(data), end = address + n, a, ia, ie
        cdef const uint8_t* d = <const uint8_t*> PyBytes_AS_STRING(data)
        if address < 0 or n <= 0 or end > self.size:
            raise ValueError(f"write {address}+{n} outside the table")
        cdef bint locked = t[self.a_torque] != 0
        cdef const Rule* r
        access = length = limit_err = None
        if self.owner[address] == address and self.rules[address].size == n:   # one whole item: the common case
            r = &self.rules[address]
            access = self._access_problem(address, locked)
            if access is not None:
                raise _error(ACCESS, access)
            limit_err = self._check(t, address, register_value(d, r.size, r.flags & SIGNED))
            if limit_err is not None:
                raise _error(DATA_LIMIT, limit_err)
            if memcmp(t + address, d, n) == 0:
                return []
            memcpy(t + address, d, n)
            return [self.names[address]]
        items = []
        a = address
        while a < end:
            ia = self.owner[a]
            if ia < 0:
                if access is None:
                    access = f"address {a} is not defined"
                a += 1
                continue
            if access is None:
                access = self._access_problem(ia, locked)
            ie = ia + self.rules[ia].size
            if ia < address or ie > end:
                if length is None:
                    length = f"write {address}+{n} covers part of {self.names[ia]} ({ia}+{self.rules[ia].size})"
            else:
                items.append(ia)
            a = ie
        if access is not None:
            raise _error(ACCESS, access)
        if length is not None:
            raise _error(DATA_LENGTH, length)
        changed = []
        for ia in items:
            r = &self.rules[ia]
            err = self._check(t, ia, register_value(d + ia - address, r.size, r.flags & SIGNED))   # raises Data Range
            if err is not None and limit_err is None:
                limit_err = err
            if memcmp(t + ia, d + ia - address, r.size):
                changed.append(self.names[ia])
        if limit_err is not None:
            raise _error(DATA_LIMIT, limit_err)
        memcpy(t + address, d, n)
        return changed
