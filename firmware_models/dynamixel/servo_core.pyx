# cython: language_level=3
"""The part of a simulated Dynamixel servo the bus touches on every packet, in C: its only implementation.

`ServoCore`, the base class of `DynamixelServo`, never calls into it: it runs the Bus Watchdog's note, a Read
and a Write whose only effect is a new goal, and answers None to anything more, which the caller hands to the
servo's `read` / `write` (docs/dynamixel.md, What runs in C on every packet).
"""

from cpython.bytearray cimport PyByteArray_AS_STRING
from libc.stdint cimport int64_t, uint8_t

from firmware_models.dynamixel.joint_link cimport JointLink
from firmware_models.dynamixel.write_checks cimport register_value

from firmware_models.dynamixel.control_table import ControlTableError

POSITION_MODES = (3, 4, 5)
GOAL_ITEMS = ("Goal PWM", "Goal Current", "Goal Velocity", "Goal Position")

# items kept as attributes by the servo's _cache()
cdef frozenset _CACHED_ITEMS = frozenset({"ID", "Secondary(Shadow) ID", "Baud Rate", "Return Delay Time",
                                          "Status Return Level", "Drive Mode", "Operating Mode", "Homing Offset",
                                          "Moving Threshold"})
# items whose change alters the kernel parameters of the firmware law
cdef frozenset _PARAM_ITEMS = frozenset({
    "Operating Mode", "Drive Mode", "PWM Limit", "Current Limit", "Velocity Limit", "Temperature Limit", "Shutdown",
    "Velocity I Gain", "Velocity P Gain", "Position D Gain", "Position I Gain", "Position P Gain",
    "Feedforward 2nd Gain", "Feedforward 1st Gain", "Goal PWM", "Goal Current", "Profile Acceleration",
    "Profile Velocity", "Bus Watchdog"})
# items whose change moves the kernel goal
cdef frozenset _GOAL_INPUTS = frozenset({*GOAL_ITEMS, "Homing Offset", "Drive Mode", "Operating Mode"})

# what a change of each item makes the firmware do, as bits (servo.py acts on all but GOAL, which this core does)
cdef enum:
    CACHE = 1
    TORQUE = 2
    MODE = 4
    WATCHDOG = 8
    PARAMS = 16
    GOAL = 32
    FIRMWARE = 64        # per byte only: Indirect Data / Address, whose item is known only at the write
EFFECT_CACHE, EFFECT_TORQUE, EFFECT_MODE, EFFECT_WATCHDOG, EFFECT_PARAMS, EFFECT_GOAL = (
    CACHE, TORQUE, MODE, WATCHDOG, PARAMS, GOAL)
cdef dict _EFFECTS = {}
for _bit, _names in ((CACHE, _CACHED_ITEMS), (TORQUE, ("Torque Enable",)), (MODE, ("Operating Mode",)),
                     (WATCHDOG, ("Bus Watchdog",)), (PARAMS, _PARAM_ITEMS), (GOAL, _GOAL_INPUTS)):
    for _name in _names:
        _EFFECTS[_name] = _EFFECTS.get(_name, 0) | _bit

cdef double _WATCHDOG_UNIT_S = 0.020   # Bus Watchdog(98) unit [s] (e-manual §Bus Watchdog(98))
BUS_WATCHDOG_UNIT_S = _WATCHDOG_UNIT_S


def effects_of(changed):
    """The EFFECT_* bits of a write that changed the items named in `changed`."""
    cdef int effects = 0
    for name in changed:
        effects |= <int> _EFFECTS.get(name, 0)
    return effects


cdef class Reply:
    """What an instruction produced: the Protocol 2.0 error number (0 = none) and the status params."""

    def __init__(self, int error=0, bytes params=b""):
        self.error = error
        self.params = params

    def __eq__(self, other):
        if not isinstance(other, Reply):
            return NotImplemented
        return self.error == (<Reply> other).error and self.params == (<Reply> other).params

    __hash__ = None

    def __repr__(self):
        return f"Reply(error={self.error}, params={self.params!r})"


cdef Reply reply(int error, bytes params):
    """A Reply without a Python call (one per servo of a Sync Read)."""
    cdef Reply r = Reply.__new__(Reply)
    r.error = error
    r.params = params
    return r


cdef class ServoCore:
    """The per-packet core of a servo on `joint` with control table `table` and Present items `units`.

    The subclass (servo.py) sets `id`, `secondary_id` (None if unused), `baud_bps`, `identity` (what the bus
    indexes servos by), `return_delay_s` [s], `status_return_level`, `_hw_error` (latched HW_* bits) and the
    addresses of Bus Watchdog, Torque Enable and Drive Mode; this class calls none of its methods."""

    def __init__(self, joint, table, PresentItems units):
        self.joint = joint
        self.link = JointLink(joint)   # the joint's state, time and goal without a Python call (the running loop's)
        self.table = table
        self._checks = table.checks
        self._instructions = table.spec.instructions
        self._units = units
        self.regs = table.data   # the table's bytes: the same bytearray for the servo's life (resets assign into it)
        spec = table.spec
        cdef int k
        for k, name in enumerate(GOAL_ITEMS):
            it = spec.item(name) if spec.has(name) else None
            self._goal_addr[k] = it.address if it is not None else -1
            self._goal_size[k] = it.size if it is not None else 0
            self._goal_signed[k] = it is not None and it.signed
        self._a_shutdown = spec.item("Shutdown").address
        # per byte, the effects of a write to the item there (FIRMWARE on Indirect Data and Address bytes)
        effect_at = bytearray(spec.size)
        for it in spec.items:
            effect_at[it.address:it.address + it.size] = bytes([_EFFECTS.get(it.name, 0)]) * it.size
        for b in spec.indirect:
            for a in (*range(b.data, b.data + b.count), *range(b.address, b.address + 2 * b.count)):
                if a < spec.size:
                    effect_at[a] |= FIRMWARE
        self._effect_at = bytes(effect_at)

    cpdef bint supports(self, int instruction):
        """Whether the model executes `instruction` (its control table's instruction list)."""
        return instruction in self._instructions

    @property
    def alert(self):
        """Bit 7 of every status packet's error byte while a hardware error is latched (Protocol 2.0
        §Status Packet, Alert)."""
        return self._hw_error != 0

    # ------------------------------------------------------------------ Bus Watchdog
    def note_at(self, double now_s):
        """An instruction reached this servo at simulation time `now_s` [s]: the Bus Watchdog restarts (e-manual
        §Bus Watchdog(98)). True when the silence before it had already tripped the watchdog (the caller trips it)."""
        return self.note(now_s)

    cdef bint note(self, double now_s) except -1:
        cdef bint trips = self.expired(now_s)
        self._last_instruction_s = now_s
        return trips

    def watchdog_expired(self, double now_s):
        """Bus Watchdog on, torque on and no instruction for its value × 20 ms of simulation time up to `now_s` [s]
        (e-manual §Bus Watchdog(98)); a tripped watchdog (-1) expires no more."""
        return self.expired(now_s)

    cdef bint expired(self, double now_s):
        cdef const unsigned char* regs = <const unsigned char*> PyByteArray_AS_STRING(self.regs)
        cdef unsigned char wd = regs[self._a_watchdog]
        return (0 < wd < 128 and regs[self._a_torque] != 0
                and now_s - self._last_instruction_s > wd * _WATCHDOG_UNIT_S)

    cdef bint shutdown_latched(self):
        """A latched hardware error is one the Shutdown item (63) names: torque stays off until a reboot."""
        return (self._hw_error & (<const unsigned char*> PyByteArray_AS_STRING(self.regs))[self._a_shutdown]) != 0

    # ------------------------------------------------------------------ Read
    cdef Reply read_at(self, Py_ssize_t address, Py_ssize_t length):
        """The Read of `length` bytes at `address`, or None when it covers Torque Enable .. Hardware Error Status
        (64..70): those need the firmware's housekeeping as of now first (servo.py's `read`)."""
        if address <= 70 and address + length > 64:
            return None
        return self._read(address, length)

    def read_now(self, Py_ssize_t address, Py_ssize_t length):
        """Read `length` bytes at `address`: the Present items as of the loop's latest state, then the table's
        bytes (as they stand: housekeeping is the caller's)."""
        return self._read(address, length)

    cdef Reply _read(self, Py_ssize_t address, Py_ssize_t length):
        params = self._units.read(self.link, self.regs, address, address + length)   # refresh() and the plain bytes
        if params is not None:
            return reply(0, params)
        try:
            return reply(0, self.table.read(address, length))
        except ControlTableError as exc:
            return reply(exc.code, b"")   # an error reply has no parameters (Protocol 2.0 §Status Packet)

    # ------------------------------------------------------------------ Write
    cdef Reply write_at(self, Py_ssize_t address, bytes data):
        """The Write of `data` at `address` when at most a new goal follows from it: checked, applied all or
        nothing, and the kernel goal set. None, with nothing done, when it may need more of the firmware
        (housekeeping, a torque-on by a goal write, a torque, mode, parameter or identity change, Indirect
        items, any EEPROM item: the flash a state file keeps): servo.py's `write` does those."""
        cdef Py_ssize_t end = address + len(data), a
        if address < 64 or address <= 64 < end or self._torque_on_by_goal(address, end):
            return None
        if 0 <= address and end <= len(self._effect_at):   # else write_direct says why it is refused
            for a in range(address, end):
                if (<const unsigned char*> self._effect_at)[a] & ~GOAL:
                    return None
        try:
            changed = self._checks.write_direct(self.regs, address, data)
        except ControlTableError as exc:
            return reply(exc.code, b"")
        cdef int effects = 0
        for name in changed:
            effects |= <int> _EFFECTS.get(name, 0)
        if effects & GOAL:
            self.link.set_goal(self.kernel_goal())
        return reply(0, b"")

    def write_table(self, Py_ssize_t address, bytes data):
        """Check and apply `data` at `address`, all or nothing (the ControlTable's rules); the names of the items
        whose value changed. Raises ControlTableError. What the firmware does because of it is the caller's."""
        # in C unless the write touches Indirect Data or an Indirect Address (the table does those)
        changed = self._checks.write_direct(self.regs, address, data)
        return changed if changed is not None else self.table.write_indirect(address, data)

    def torque_on_by_goal(self, Py_ssize_t address, Py_ssize_t end):
        """Whether a write of address..end turns the torque on (Drive Mode bit 3, e-manual §Drive Mode(10))."""
        return self._torque_on_by_goal(address, end)

    cdef bint _torque_on_by_goal(self, Py_ssize_t address, Py_ssize_t end) except -1:
        """Drive Mode bit 3 (FW45+): a write to a goal item turns the torque on (e-manual §Drive Mode(10))."""
        if address > 116 or end <= 100:
            return False                          # no goal item (100..119) in the write
        cdef const unsigned char* regs = <const unsigned char*> PyByteArray_AS_STRING(self.regs)
        if regs[self._a_torque] or not regs[self._a_drive] & 0x08 or self.shutdown_latched():
            return False
        cdef int k
        for k in range(4):
            if self._goal_addr[k] >= 0 and address <= self._goal_addr[k] < end:
                return True
        return False

    def link_time_s(self):
        """Simulation time [s] as the joint link reads it (the running loop's)."""
        return self.link.time_s()

    def send_goal(self):
        """Set the kernel goal from the goal register the Operating Mode uses."""
        self.link.set_goal(self.kernel_goal())

    def _kernel_goal(self):
        """The kernel goal u (SI) of the goal register the Operating Mode uses."""
        return self.kernel_goal()

    cdef double kernel_goal(self) except? -1.0:
        cdef PresentItems u = self._units
        cdef int mode = u.mode
        # the goal register the mode uses, by its index in GOAL_ITEMS
        cdef int k = 3 if mode == 3 or mode == 4 or mode == 5 else 2 if mode == 1 else 1 if mode == 0 else 0
        if self._goal_addr[k] < 0:
            self.table.get(GOAL_ITEMS[k])   # the model has no such item: the table's KeyError names it
        cdef int64_t v = register_value((<const uint8_t*> PyByteArray_AS_STRING(self.regs)) + self._goal_addr[k],
                                        self._goal_size[k], self._goal_signed[k])
        if k == 3:
            return u._position_si(v)
        if k == 2:
            return u._velocity_si(v)
        if k == 1:
            return u._current_si(v)
        return u._duty_si(v)
