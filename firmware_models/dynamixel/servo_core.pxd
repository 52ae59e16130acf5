# A servo's per-packet fields and instructions at C level, for the Dynamixel bus; `read_at` and
# `write_at` return None when the packet needs the Python firmware (servo.py's `read` / `write`).
from firmware_models.dynamixel.joint_link cimport JointLink
from firmware_models.dynamixel.present cimport PresentItems
from firmware_models.dynamixel.write_checks cimport WriteChecks


cdef class Reply:
    cdef public int error
    cdef public bytes params


cdef Reply reply(int error, bytes params)


cdef class ServoCore:
    cdef public object joint, table
    cdef readonly JointLink link
    cdef WriteChecks _checks
    cdef frozenset _instructions       # the instruction codes the model executes
    cdef Py_ssize_t _goal_addr[4]      # Goal PWM, Current, Velocity, Position (GOAL_ITEMS): address, -1 if absent
    cdef int _goal_size[4]
    cdef bint _goal_signed[4]
    cdef public PresentItems _units
    cdef public int id, status_return_level, baud_bps
    cdef public object secondary_id, identity
    cdef public double return_delay_s, _last_instruction_s
    cdef public int _hw_error
    cdef public Py_ssize_t _a_watchdog, _a_torque, _a_drive
    cdef Py_ssize_t _a_shutdown
    cdef bytes _effect_at              # per control-table byte: the effect bits of a write there
    cdef bytearray regs

    cpdef bint supports(self, int instruction)
    cdef bint note(self, double now_s) except -1
    cdef bint expired(self, double now_s)
    cdef bint shutdown_latched(self)
    cdef Reply read_at(self, Py_ssize_t address, Py_ssize_t length)
    cdef Reply _read(self, Py_ssize_t address, Py_ssize_t length)
    cdef Reply write_at(self, Py_ssize_t address, bytes data)
    cdef bint _torque_on_by_goal(self, Py_ssize_t address, Py_ssize_t end) except -1
    cdef double kernel_goal(self) except? -1.0
