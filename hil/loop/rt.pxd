# The loop's types and accessors other extensions use at C speed: a StateView's struct (firmware_models/dynamixel/
# present.pyx computes Present registers from it without a Python lookup per field), and the snapshot and command
# ring of a running RealtimeLoop (a Dynamixel servo's `JointLink`: a servo's state, time and goal per packet
# without a Python call).
from libc.stdint cimport int64_t

from hil.kernel.core cimport State


cdef class StateView:
    cdef State st


cdef struct SnapshotRef:
    # where a RealtimeLoop keeps its seqlock'd state snapshot and tick count: valid while the loop object lives
    # (the holder keeps a reference to it)
    int64_t* seq               # odd while the loop writes the snapshot
    const State* states        # n States, consistent with one tick when seq was even and unchanged around the copy
    int64_t* tick              # ticks run so far
    int64_t n

cdef int snapshot_ref(object loop, SnapshotRef* out) except -1
cdef void read_snapshot(const SnapshotRef* ref, int64_t j, State* out) noexcept nogil
cdef int64_t read_tick(const SnapshotRef* ref) noexcept nogil
cdef int push_command(object loop, int kind, int64_t index, double a, double b, bint commit) except -1


cdef struct TickHook:
    # other physics a RealtimeLoop ticks instead of its kernel's steps (the robot engine: the kernel coupled to a
    # MuJoCo model): fn(ctx) runs one whole tick without the GIL; handed over as a PyCapsule named "hil.loop.TickHook"
    void (*fn)(void* ctx) noexcept nogil
    void* ctx
