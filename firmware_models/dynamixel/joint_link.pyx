# cython: language_level=3
"""What a servo's firmware reads from and sends to its joint on every packet, in C.

A `JointLink` wraps a `hil.joint.Joint`: for an actuator of the running loop (a `GoalPort`) it reads the
loop's snapshot and queues goals through the loop's shared memory, as `RealtimeLoop.state_view` reads it, with
no Python call per servo; for any other Joint it calls the Joint's methods.
"""

from hil.kernel.core cimport State

cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident()   # threading.get_ident()
from hil.loop.rt cimport StateView, push_command, read_snapshot, read_tick, snapshot_ref

from hil.joint import GoalPort
from hil.loop.rt import COMMANDS, RealtimeLoop

cdef int SET_U = COMMANDS["set_u"]


cdef class JointLink:
    """The C-level link of a servo to `joint`."""

    def __init__(self, joint):
        self.joint = joint
        loop = getattr(joint, "loop", None)
        if isinstance(loop, RealtimeLoop) and isinstance(joint, GoalPort):   # actuator joint.j of the running loop
            self.port, self.loop, self.j, self.period_s = joint, loop, joint.j, joint.period_s
            snapshot_ref(loop, &self.ref)
            if not 0 <= self.j < self.ref.n:
                raise IndexError(f"actuator index {self.j} out of range")

    cdef int state(self, State* out) except -1:
        """The joint's kernel State as of the loop's latest snapshot (`Joint.read_state()`)."""
        if self.loop is not None:
            read_snapshot(&self.ref, self.j, out)
            return 0
        st = self.joint.read_state()
        if type(st) is StateView:
            out[0] = (<StateView> st).st
        else:
            out[0] = dict(st)
        return 0

    cdef double time_s(self) except? -1.0:
        """Simulation time [s] (`Joint.time_s()`: ticks × period, as LiveJoint computes it)."""
        if self.loop is not None:
            return read_tick(&self.ref) * self.period_s
        return self.joint.time_s()

    cdef int set_goal(self, double u) except -1:
        """`Joint.command(goal=u)`. Inside a batch on this thread (`GoalPort.batch_thread`, a bus packet: the
        thread holds the lock on the ring), one command staged on the loop's ring in C; otherwise, or when the ring
        is full, `GoalPort.queue_goal`."""
        if self.loop is None:
            self.joint.command(goal=u)
            return 0
        batch_thread = self.port.batch_thread
        if batch_thread is not None and <unsigned long> batch_thread == PyThread_get_thread_ident():
            if push_command(self.loop, SET_U, self.j, u, 0.0, False):
                return 0
        self.port.queue_goal(u)
        return 0
