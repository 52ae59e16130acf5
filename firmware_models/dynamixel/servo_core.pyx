# cython: language_level=3
"""The part of a simulated Dynamixel servo the bus touches on every packet, in C: its only implementation.

`ServoCore` is the base class of `DynamixelServo` (servo.py). It holds what the bus reads per servo and packet
(ID, secondary ID, Baud Rate, Return Delay Time, Status Return Level, the latched Hardware Error Status behind
the alert bit) as C fields, and runs the per-servo steps that the bus (drivers/dynamixel/bus.pyx) calls from C: noting an instruction for the Bus
Watchdog, executing a Read, and a Write: its checks (write_checks.pyx, through the ControlTable), the torque-on
by a goal write and what the firmware does because of it (`apply`; a new goal, the common case, is one kernel
command). servo.py keeps the rarer steps `apply` calls (torque, mode switch, kernel parameters), reboot and
hardware errors, and keeps these fields up to date (`_cache`).
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

# what a change of each item makes `apply` do, as bits: one lookup per changed item instead of a set test per effect
cdef enum:
    CACHE = 1
    TORQUE = 2
    MODE = 4
    WATCHDOG = 8
    PARAMS = 16
    GOAL = 32
cdef dict _EFFECTS = {}
for _bit, _names in ((CACHE, _CACHED_ITEMS), (TORQUE, ("Torque Enable",)), (MODE, ("Operating Mode",)),
                     (WATCHDOG, ("Bus Watchdog",)), (PARAMS, _PARAM_ITEMS), (GOAL, _GOAL_INPUTS)):
    for _name in _names:
        _EFFECTS[_name] = _EFFECTS.get(_name, 0) | _bit


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
    indexes servos by), `return_delay_s` [s], `status_return_level`, `_hw_error` (latched HW_* bits), the addresses of Bus Watchdog,
    Torque Enable, Drive Mode and the goal items, and provides `housekeeping()`, `_check_watchdog(now_s)`,
    `_hw_shutdown()`, `_cache()`, `_torque(on, keep_goal)`, `_single_turn()`, `_set_goal_from_present()` and
    `_kernel_params()`."""

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

    cpdef bint supports(self, int instruction):
        """Whether the model executes `instruction` (its control table's instruction list)."""
        return instruction in self._instructions

    @property
    def alert(self):
        """Bit 7 of every status packet's error byte while a hardware error is latched (Protocol 2.0
        §Status Packet, Alert)."""
        return self._hw_error != 0

    def note_instruction(self, now_s=None):
        """An instruction packet reached this servo at simulation time `now_s` [s] (default: now):
        the Bus Watchdog restarts (e-manual §Bus Watchdog(98))."""
        self.note(self.link.time_s() if now_s is None else now_s)

    cdef int note(self, double now_s) except -1:
        if (<unsigned char*> PyByteArray_AS_STRING(self.regs))[self._a_watchdog]:   # Bus Watchdog on (or tripped)
            self._check_watchdog(now_s)   # a silence that already exceeded the watchdog trips it first
        self._last_instruction_s = now_s
        return 0

    def read(self, Py_ssize_t address, Py_ssize_t length):
        """Read `length` bytes at `address`: the Present items as of the loop's latest state, then the table's bytes."""
        return self.read_at(address, length)

    cdef Reply read_at(self, Py_ssize_t address, Py_ssize_t length):
        cdef Py_ssize_t end = address + length
        if address <= 70 and end > 64:
            self.housekeeping()   # Torque Enable / Hardware Error Status as of now
        params = self._units.read(self.link, self.regs, address, end)   # refresh() and the plain bytes
        if params is not None:
            return reply(0, params)
        try:
            return reply(0, self.table.read(address, length))
        except ControlTableError as exc:
            return reply(exc.code, b"")   # an error reply has no parameters (Protocol 2.0 §Status Packet)

    def write(self, Py_ssize_t address, data):
        """Write `data` at `address` as a Write instruction does: checked, applied all or nothing, then acted on."""
        return self.write_at(address, data if type(data) is bytes else bytes(data))

    cdef Reply write_at(self, Py_ssize_t address, bytes data):
        cdef Py_ssize_t end = address + len(data)
        if address <= 64 < end:
            self.housekeeping()   # a torque-on must see the hardware errors as of now
        cdef bint wakes = self._torque_on_by_goal(address, end)
        if wakes:
            self.table.set("Torque Enable", 1)
        try:
            # in C unless the write touches Indirect Data or an Indirect Address (the table does those)
            changed = self._checks.write_direct(self.regs, address, data)
            if changed is None:
                changed = self.table.write_indirect(address, data)
        except ControlTableError as exc:
            if wakes:
                self.table.set("Torque Enable", 0)
            return reply(exc.code, b"")
        if wakes:
            changed = ["Torque Enable", *changed]
        return reply(self.apply(changed, wakes) if changed else 0, b"")

    cdef bint _torque_on_by_goal(self, Py_ssize_t address, Py_ssize_t end) except -1:
        """Drive Mode bit 3 (FW45+): a write to a goal item turns the torque on (e-manual §Drive Mode(10))."""
        if address > 116 or end <= 100:
            return False                          # no goal item (100..119) in the write
        cdef const unsigned char* regs = <const unsigned char*> PyByteArray_AS_STRING(self.regs)
        if regs[self._a_torque] or not regs[self._a_drive] & 0x08 or self._hw_shutdown():
            return False
        cdef int k
        for k in range(4):
            if self._goal_addr[k] >= 0 and address <= self._goal_addr[k] < end:
                return True
        return False

    cdef int apply(self, list changed, bint goal_wakes) except -1:
        cdef int effects = 0
        for name in changed:
            effects |= <int> _EFFECTS.get(name, 0)
        if effects & CACHE:
            self._cache()
        if effects & TORQUE:
            on = self.table.get("Torque Enable") == 1
            if on and self._hw_shutdown():
                # Only a reboot allows torque on after a shutdown (e-manual §Shutdown(63)); silent on the reply.
                self.table.set("Torque Enable", 0)
                return 1
            self._torque(on, keep_goal=goal_wakes)
        if effects & MODE:
            for name, value in self.table.mode_defaults(self._units.mode).items():
                self.table.set(name, value)
            if self.table.get("Operating Mode") == 3:
                self._single_turn()
            self._set_goal_from_present()
        if effects & WATCHDOG and self.table.get("Bus Watchdog") == 0:
            self._last_instruction_s = self.link.time_s()
        if effects & PARAMS:
            self.joint.command(params=self._kernel_params())
        if effects & GOAL:
            self.link.set_goal(self.kernel_goal())
        return 0

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
