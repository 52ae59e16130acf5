# A servo's link to its joint at C level, for the per-packet steps (present.pyx, servo_core.pyx).
from libc.stdint cimport int64_t

from hil.kernel.core cimport State
from hil.loop.rt cimport SnapshotRef


cdef class JointLink:
    cdef readonly object joint
    cdef object loop, port          # a GoalPort joint (hil.joint) and its RealtimeLoop; None for any other Joint
    cdef SnapshotRef ref
    cdef int64_t j
    cdef double period_s

    cdef int state(self, State* out) except -1
    cdef double time_s(self) except? -1.0
    cdef int set_goal(self, double u) except -1
