# cython: language_level=3
"""A Dynamixel servo's Present items from the kernel state, in C: the register ⇄ SI rules of the firmware.

`PresentItems` is the only implementation of these rules; `refresh()` writes the Present items a read
returns from the kernel's `State` straight into the control table's bytes, so a Sync Read runs no Python per
servo. Rules, rounding and their e-manual sections: docs/dynamixel.md, Present items.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.math cimport M_PI, fabs, rint
from libc.stdint cimport int64_t, uint8_t

from firmware_models.dynamixel.joint_link cimport JointLink
from hil.kernel.core cimport State, encoder_reading

# register units (e-manual §Specifications; §Present Position(132), §PWM Limit(36))
cdef enum:
    _PULSES_PER_REV = 4096      # 12-bit absolute encoder
    _ZERO_PULSE = 2048          # 0 rad = middle of the range (the SDK's easy models agree)
    _PWM_FULL = 885             # Goal/Present PWM and PWM Limit: 885 = 100 %
PULSES_PER_REV = _PULSES_PER_REV
ZERO_PULSE = _ZERO_PULSE
PWM_FULL = _PWM_FULL
cdef double _RAD_PER_PULSE = 2.0 * M_PI / 4096
cdef double _VELOCITY_UNIT = 0.229 * (2.0 * M_PI / 60.0)   # 0.229 rpm [rad/s per unit]
RAD_PER_PULSE = _RAD_PER_PULSE
VELOCITY_UNIT = _VELOCITY_UNIT                        # Present/Goal Velocity, Profile Velocity [rad/s per unit]

# the items refresh() computes, in this order (indices into PresentItems' address/size arrays)
ITEMS = ("Realtime Tick", "Moving", "Moving Status", "Present PWM", "Present Current", "Present Velocity",
         "Present Position", "Velocity Trajectory", "Position Trajectory", "Present Input Voltage",
         "Present Temperature")


cdef inline void _put(uint8_t* p, int size, double v) noexcept nogil:
    """`v` (an integer value) little-endian, two's complement, saturated to a signed `size`-byte item."""
    cdef double hi = <double> ((<int64_t> 1 << (8 * size - 1)) - 1)
    cdef double lo = -hi - 1.0
    cdef int64_t x
    if v != v:
        x = 0
    elif v > hi:
        x = <int64_t> hi
    elif v < lo:
        x = <int64_t> lo
    else:
        x = <int64_t> v
    cdef int k
    for k in range(size):
        p[k] = <uint8_t> (x >> (8 * k))


cdef class PresentItems:
    """One servo's register ⇄ SI rules and the firmware values they depend on.

    The servo keeps `sign` (−1 in reverse mode, Drive Mode bit 0), `turn_offset` (pulses removed from the
    continuous count by a multi-turn reset), `homing` (Homing Offset), `moving_threshold`, `mode` (Operating
    Mode), `vin` (supply [V]) and `ambient` [°C] up to date; `current_a` is the Present Current unit [A] and
    `max_duty` the duty at PWM 885.
    (Its fields are declared in present.pxd, for the servo's C core to call `read` without a Python call.)
    """

    def __init__(self, spec, double current_a, double max_duty, double in_position_window_pulses,
                 double following_error_window_pulses):
        cdef int k
        for k, name in enumerate(ITEMS):
            if name == "Present Current" and not spec.has(name):
                name = "Present Load"   # XL430: its load estimate in the current's place, `current_a` its unit
            if spec.has(name):
                it = spec.item(name)
                self.addr[k] = it.address
                self.size[k] = it.size
            else:
                self.addr[k] = -1
                self.size[k] = 0
        self.a_torque = spec.item("Torque Enable").address
        self.a_goal = spec.item("Goal Position").address if spec.has("Goal Position") else -1
        self.table_size = spec.size
        # a read reaching Indirect Data may return any item through it: all of them are computed
        self.indirect_lo = min(b.data for b in spec.indirect) if spec.indirect else 1 << 30
        self.current_a = current_a
        self.max_duty = max_duty
        self.in_position_window = in_position_window_pulses
        self.following_window = following_error_window_pulses
        self.sign = 1
        self.mode = 0

    # ------------------------------------------------------------------ register ⇄ SI
    cdef double _raw(self, double theta) noexcept nogil:
        return _ZERO_PULSE + rint(self.sign * theta / _RAD_PER_PULSE)

    cdef double _position(self, double theta) noexcept nogil:
        return self._raw(theta) - self.turn_offset + self.homing

    def encoder_pulses(self, JointLink link):
        """The continuous encoder count [pulses] the joint's state reads (through `link`), reverse mode applied."""
        cdef State st
        link.state(&st)
        return int(self._raw(encoder_reading(&st)))

    def position_register(self, double theta):
        """Present Position [pulses] of output angle `theta` [rad]: multi-turn offset and homing applied."""
        return int(self._position(theta))

    def position_si(self, int64_t register):
        """The output angle [rad] a Present/Goal Position register value stands for."""
        return self._position_si(register)

    def velocity_si(self, int64_t register):
        """[rad/s] of a Present/Goal Velocity register value."""
        return self._velocity_si(register)

    def current_si(self, int64_t register):
        """[A] of a Present/Goal Current register value."""
        return self._current_si(register)

    def duty_si(self, int64_t register):
        """The duty [-1, 1] of a Goal PWM register value."""
        return self._duty_si(register)

    cdef double _position_si(self, int64_t register) noexcept nogil:
        return self.sign * (register - self.homing + self.turn_offset - _ZERO_PULSE) * _RAD_PER_PULSE

    cdef double _velocity_si(self, int64_t register) noexcept nogil:
        return self.sign * register * _VELOCITY_UNIT

    cdef double _current_si(self, int64_t register) noexcept nogil:
        return self.sign * register * self.current_a

    cdef double _duty_si(self, int64_t register) noexcept nogil:
        return self.sign * register / <double> _PWM_FULL * self.max_duty

    # ------------------------------------------------------------------ kernel state → registers
    def refresh(self, JointLink link, bytearray data, Py_ssize_t address=0, Py_ssize_t end=1 << 16):
        """Compute into `data` (the control table) the Present items a read of address..end returns (all of them
        by default), from the joint's state (and simulation time, for Realtime Tick) through `link`."""
        self._refresh(link, data, address, end)

    cdef int _refresh(self, JointLink link, bytearray data, Py_ssize_t address, Py_ssize_t end) except -1:
        if PyByteArray_GET_SIZE(data) < self.table_size:
            raise ValueError(f"control table of {PyByteArray_GET_SIZE(data)} bytes, the model has {self.table_size}")
        if end > self.indirect_lo:
            address, end = 0, 1 << 30
        cdef bint want[N_ITEMS]
        cdef bint any_state = False
        cdef int k
        for k in range(N_ITEMS):
            want[k] = self.addr[k] >= 0 and self.addr[k] < end and self.addr[k] + self.size[k] > address
            if want[k] and k != TICK and k != VOLTAGE:
                any_state = True
        cdef uint8_t* p = <uint8_t*> PyByteArray_AS_STRING(data)
        cdef double now_s
        if want[TICK]:
            now_s = link.time_s()
            _put(p + self.addr[TICK], self.size[TICK], <double> ((<int64_t> (now_s * 1000.0)) % 32768))
        if want[VOLTAGE]:
            _put(p + self.addr[VOLTAGE], self.size[VOLTAGE], rint(self.vin * 10))
        if not any_state:
            return 0
        cdef State st
        link.state(&st)
        self._compute(&st, p, want)
        return 0

    cdef object read(self, JointLink link, bytearray data, Py_ssize_t address, Py_ssize_t end):
        """`refresh()`, then the bytes of the read address..end, when it lies in the table below Indirect Data
        (where a read returns the table's own bytes); None otherwise (the table's `read` decides)."""
        self._refresh(link, data, address, end)
        if address < 0 or end <= address or end > self.indirect_lo or end > PyByteArray_GET_SIZE(data):
            return None
        return PyBytes_FromStringAndSize(PyByteArray_AS_STRING(data) + address, end - address)

    cdef void _compute(self, const State* st, uint8_t* p, const bint* want) noexcept nogil:
        cdef double velocity = rint(self.sign * st.omega / _VELOCITY_UNIT)
        cdef double temp
        cdef bint profiling = st.prof_active != 0 and self.mode in (1, 3, 4, 5)
        if want[POSITION]:
            _put(p + self.addr[POSITION], self.size[POSITION], self._position(encoder_reading(st)))
        if want[VELOCITY]:
            _put(p + self.addr[VELOCITY], self.size[VELOCITY], velocity)
        if want[CURRENT]:
            _put(p + self.addr[CURRENT], self.size[CURRENT], rint(self.sign * st.i_out / self.current_a))
        if want[PWM]:
            _put(p + self.addr[PWM], self.size[PWM], rint(self.sign * st.duty / self.max_duty * _PWM_FULL))
        if want[VEL_TRAJ]:
            _put(p + self.addr[VEL_TRAJ], self.size[VEL_TRAJ], rint(self.sign * st.traj_vel / _VELOCITY_UNIT))
        if want[POS_TRAJ]:
            _put(p + self.addr[POS_TRAJ], self.size[POS_TRAJ], self._position(st.traj_pos))
        if want[TEMPERATURE]:
            # the kernel computes `temperature` in each step; before the first, it is ambient + rise
            temp = st.temperature if st.k > 0 else self.ambient + st.temp_rise
            _put(p + self.addr[TEMPERATURE], self.size[TEMPERATURE], rint(temp if temp == temp else self.ambient))
        if want[MOVING]:
            _put(p + self.addr[MOVING], self.size[MOVING], 1.0 if fabs(velocity) > self.moving_threshold or profiling
                 else 0.0)
        if want[MOVING_STATUS]:
            _put(p + self.addr[MOVING_STATUS], self.size[MOVING_STATUS], self._moving_status(st, p, profiling))

    cdef double _moving_status(self, const State* st, const uint8_t* p, bint profiling) noexcept nogil:
        """Bits: 0 in position, 1 profile ongoing, 3 following error, 5..4 profile type (e-manual
        §Moving Status(123))."""
        if self.mode not in (1, 3, 4, 5):
            return 0
        cdef int64_t status = (st.prof_type & 3) << 4 | (0x02 if profiling else 0)
        cdef int goal
        if self.mode != 1 and p[self.a_torque] and self.a_goal >= 0:
            goal = <int> (p[self.a_goal] | p[self.a_goal + 1] << 8 | p[self.a_goal + 2] << 16
                          | <unsigned int> p[self.a_goal + 3] << 24)
            if fabs(goal - self._position(encoder_reading(st))) <= self.in_position_window and not profiling:
                status |= 0x01
            if fabs(st.traj_pos - encoder_reading(st)) / _RAD_PER_PULSE > self.following_window:
                status |= 0x08
        return <double> status
