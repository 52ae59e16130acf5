# PresentItems' fields and its C-level `read`, for `ServoCore` (the bus's per-servo core).
from libc.stdint cimport int64_t, uint8_t

from firmware_models.dynamixel.joint_link cimport JointLink
from hil.kernel.core cimport State

# the items refresh() computes, in the order of present.pyx's ITEMS (indices into the address/size arrays)
cdef enum:
    TICK, MOVING, MOVING_STATUS, PWM, CURRENT, VELOCITY, POSITION, VEL_TRAJ, POS_TRAJ, VOLTAGE, TEMPERATURE, N_ITEMS


cdef class PresentItems:
    cdef public int sign
    cdef public int64_t turn_offset, homing, moving_threshold
    cdef public int mode
    cdef public double vin, ambient
    cdef readonly double current_a, max_duty
    cdef double in_position_window, following_window   # Moving Status bits 0 and 3 [pulses]
    cdef Py_ssize_t addr[N_ITEMS]        # -1: the model has no such item
    cdef int size[N_ITEMS]
    cdef Py_ssize_t a_torque, a_goal, table_size, indirect_lo

    cdef double _raw(self, double theta) noexcept nogil
    cdef double _position(self, double theta) noexcept nogil
    cdef double _position_si(self, int64_t register) noexcept nogil
    cdef double _velocity_si(self, int64_t register) noexcept nogil
    cdef double _current_si(self, int64_t register) noexcept nogil
    cdef double _duty_si(self, int64_t register) noexcept nogil
    cdef int _refresh(self, JointLink link, bytearray data, Py_ssize_t address, Py_ssize_t end) except -1
    cdef object read(self, JointLink link, bytearray data, Py_ssize_t address, Py_ssize_t end)
    cdef void _compute(self, const State* st, uint8_t* p, const bint* want) noexcept nogil
    cdef double _moving_status(self, const State* st, const uint8_t* p, bint profiling) noexcept nogil
