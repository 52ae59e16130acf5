# cython: language_level=3
"""Fixed-rate real-time loop around the kernel, in a nogil thread.

Absolute deadlines, simulation time tick·dt whatever the wall clock does, a lateness histogram and an overrun
count; Python reaches the loop only through lock-free rings and a seqlock'd snapshot whose pages are mapped in
place at build. The timing rules and their sources: docs/architecture.md, Timing.
"""

from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free
from posix.mman cimport MAP_ANONYMOUS, MAP_FAILED, MAP_POPULATE, MAP_PRIVATE, PROT_READ, PROT_WRITE, mmap, munmap
from libc.string cimport memcmp, memcpy, memset
from libc.math cimport isnan
from posix.unistd cimport write as c_write, read as c_read

import os
from collections.abc import Mapping

import numpy as np

from hil.kernel.core cimport (Hand, Kernel, Params, Plan, State, Input, actuator_at_start, hand_take,
                              motor_side_at_rest, prepare, step_all)
from hil.loop.primitives cimport (hil_add, hil_fence, hil_load, hil_now_ns, hil_sleep_until, hil_store,
                                  hil_wait_readable)
from hil.loop.publisher cimport Sample, SampleRing, publish_ring
from hil.loop.realtime cimport realtime

# the loop's Python users import the publisher's binding and the real-time setup with the loop
from hil.loop.publisher import bind_libzmq  # noqa: F401
from hil.loop.realtime import RT_MODES, lock_memory, realtime_thread  # noqa: F401

DEF HIST_BINS = 10000  # 1 µs bins: 0 … 9.999 ms; the last bin collects everything later

cdef enum:
    CMD_SET_U = 1
    CMD_SET_ENABLE = 2
    CMD_SET_EXTERNAL = 3
    CMD_SET_PARAMS = 4
    CMD_SET_STATE = 5          # a = theta, b = omega; NaN leaves a value unchanged
    CMD_CLEAR_LATCHES = 6
    CMD_SET_TEMPERATURE = 7    # a = absolute winding temperature [°C]
    CMD_PAUSE = 8
    CMD_RESUME = 9
    CMD_RESET_STATE = 10       # the actuator's state as a new kernel starts it (`actuator_at_start`)
    CMD_SET_HAND = 11          # hand = a hand's path and feel (stiffness 0: let go); the loop sets start, t0

cdef uint64_t _ONE = 1

cdef packed struct Command:
    int64_t kind
    int64_t index
    double a
    double b
    Params params
    Hand hand

cdef struct Shared:
    int64_t stop
    int64_t paused
    int64_t steps_requested    # lock-step: total ticks the host asked for
    int64_t tick               # ticks done; simulation time = tick · period
    int64_t publish_seq
    int64_t cmd_head
    int64_t cmd_tail
    int64_t smp_head
    int64_t smp_tail
    int64_t sample_drops
    int64_t publish_errors     # zmq_send failures (the state stream lost a frame)
    int64_t wakeups
    int64_t overruns
    int64_t skipped
    int64_t max_lateness_ns
    int64_t work_ns            # time spent stepping, summed
    int64_t rt_mode
    int64_t snap_seq
    int64_t start_ns
    int64_t deadline_ns        # deadline of the tick being computed
    int64_t hist[HIST_BINS]


# ---------------------------------------------------------------------------------------- state view
# Every State field is 8 bytes (double, int64_t or uint64_t) and Cython's State -> dict conversion lists them
# in declaration order, so field i sits at byte 8·i (checked here, at import). With every byte 0xFF the dict also
# tells the types apart: a double reads NaN, an int64_t -1, a uint64_t 2**64 - 1.
cdef State _probe
memset(&_probe, 0xFF, sizeof(State))
_probe_fields = <dict> _probe
_STATE_KEYS = tuple(_probe_fields)
cdef dict _STATE_INDEX = {k: i for i, k in enumerate(_STATE_KEYS)}
cdef tuple _STATE_KINDS = tuple(0 if isinstance(v, float) else 1 if v < 0 else 2 for v in _probe_fields.values())
if sizeof(State) != 8 * len(_STATE_KEYS) or <char*> &_probe.temperature - <char*> &_probe != 8 * _STATE_INDEX["temperature"]:
    raise ImportError("hil.loop.rt: State is not a packed array of 8-byte fields in declaration order")
del _probe_fields


cdef class StateView:
    """One actuator's kernel State as a read-only mapping (the keys of `state_of()`'s dict), read from a copy of
    the C struct when indexed: fetching it costs one copy instead of building a 44-entry dict, for firmware
    models that look at a few fields per snapshot (a Sync Read of 12 servos fetches 12 states per tick). Its struct
    `st` is declared in rt.pxd, for extensions that read it directly."""

    def __getitem__(self, key):
        cdef Py_ssize_t i = _STATE_INDEX[key]
        cdef char* p = (<char*> &self.st) + 8 * i
        cdef int kind = _STATE_KINDS[i]
        if kind == 0:
            return (<double*> p)[0]
        if kind == 1:
            return (<int64_t*> p)[0]
        return (<uint64_t*> p)[0]

    def get(self, key, default=None):
        return self[key] if key in _STATE_INDEX else default

    def __contains__(self, key):
        return key in _STATE_INDEX

    def __iter__(self):
        return iter(_STATE_KEYS)

    def __len__(self):
        return len(_STATE_KEYS)

    def keys(self):
        return _STATE_KEYS

    def values(self):
        return self.to_dict().values()

    def items(self):
        return self.to_dict().items()

    def to_dict(self):
        """The same dict `RealtimeLoop.state_of()` returns."""
        return self.st

    def __eq__(self, other):
        if isinstance(other, StateView):   # the same bytes: the same state (NaN fields included)
            return memcmp(&self.st, &(<StateView> other).st, sizeof(State)) == 0
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self):
        return f"StateView({self.to_dict()!r})"


Mapping.register(StateView)


cdef void* prefaulted(size_t size) noexcept:
    """`size` bytes of zeroed memory whose pages are all in place now, or NULL. calloc leaves a large block's pages
    to demand paging (each mapped at its first write): for the sample ring, a page fault in the loop thread for each
    of its pages until the ring has filled once. mmap(2) MAP_POPULATE prefaults a private writable mapping's pages
    as written ones, so the loop never faults on them. Free with `unmap`."""
    cdef void* p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0)
    return NULL if p == MAP_FAILED else p


cdef void unmap(void* p, size_t size) noexcept:
    if p != NULL:
        munmap(p, size)


cdef class RealtimeLoop:
    """The loop thread's shared memory and its body; `run()` blocks (call it from a thread)."""

    cdef Kernel kernel            # keeps the arrays below alive
    cdef Params* P
    cdef Plan* plan               # the kernel's, derived from P by prepare()
    cdef State* S
    cdef Input* I
    cdef Py_ssize_t n
    cdef double dt
    cdef Shared* sh
    cdef Command* cmds
    cdef Sample* samples
    cdef State* snap_states
    cdef Input* snap_inputs
    cdef int64_t cmd_cap, smp_cap
    cdef int64_t staged            # commands written but not yet published to the loop
    cdef readonly int64_t period_ns
    cdef readonly int substeps
    cdef object physics           # keeps the hook below alive
    cdef TickHook* hook           # NULL: the kernel's own steps
    cdef readonly int publish_every
    cdef readonly int fifo_priority
    cdef readonly int64_t spin_ns
    cdef readonly bint lockstep
    cdef readonly int notify_fd    # eventfd the loop signals after each publish (the publisher waits on it)
    cdef readonly int wake_fd      # eventfd the host signals in lock-step mode (commands, steps, stop)

    def __cinit__(self, Kernel kernel, double rate_hz, int substeps=1, int publish_every=1,
                  int fifo_priority=50, double spin_us=0.0, bint lockstep=False,
                  int64_t command_capacity=4096, int64_t sample_capacity=1 << 16, physics=None):
        if not (1.0 <= rate_hz <= 20000.0):
            raise ValueError(f"rate_hz must be within 1..20000, got {rate_hz}")
        if substeps < 1 or publish_every < 1:
            raise ValueError("substeps and publish_every must be >= 1")
        self.kernel = kernel
        self.P, self.S, self.I, self.n, self.dt = kernel.params, kernel.states, kernel.inputs, kernel.n, kernel.dt
        self.plan = &kernel.plan
        self.period_ns = <int64_t>(1e9 / rate_hz + 0.5)
        if abs(kernel.dt * substeps * 1e9 - self.period_ns) > 1.0:
            raise ValueError(f"kernel dt {kernel.dt} s × {substeps} substeps != period {self.period_ns} ns")
        self.substeps = substeps
        if physics is not None:   # its tick_hook() runs the substeps of the kernel's actuators and more
            self.physics = physics
            self.hook = <TickHook*>PyCapsule_GetPointer(physics.tick_hook(), b"hil.loop.TickHook")
        self.publish_every = publish_every
        self.fifo_priority = fifo_priority
        self.spin_ns = <int64_t>(spin_us * 1000.0)
        self.lockstep = lockstep
        self.cmd_cap = command_capacity
        self.smp_cap = sample_capacity
        if command_capacity < 1 or sample_capacity < 1:
            raise ValueError("command_capacity and sample_capacity must be >= 1")
        self.sh = <Shared*> prefaulted(sizeof(Shared))
        self.cmds = <Command*> prefaulted(command_capacity * sizeof(Command))
        self.samples = <Sample*> prefaulted(sample_capacity * sizeof(Sample))
        self.snap_states = <State*> calloc(kernel.n, sizeof(State))
        self.snap_inputs = <Input*> calloc(kernel.n, sizeof(Input))
        if not (self.sh and self.cmds and self.samples and self.snap_states and self.snap_inputs):
            raise MemoryError()
        self.notify_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        memcpy(self.snap_states, kernel.states, kernel.n * sizeof(State))
        memcpy(self.snap_inputs, kernel.inputs, kernel.n * sizeof(Input))

    def __dealloc__(self):
        if self.notify_fd > 0:
            os.close(self.notify_fd)
        if self.wake_fd > 0:
            os.close(self.wake_fd)
        unmap(self.sh, sizeof(Shared))
        unmap(self.cmds, self.cmd_cap * sizeof(Command))
        unmap(self.samples, self.smp_cap * sizeof(Sample))
        free(self.snap_states)
        free(self.snap_inputs)

    # ---------------------------------------------------------------- loop thread side
    cdef void _apply_commands(self) noexcept nogil:
        cdef int64_t head = hil_load(&self.sh.cmd_head)
        cdef int64_t tail = self.sh.cmd_tail
        cdef Command* c
        while tail < head:
            c = &self.cmds[tail % self.cmd_cap]
            if c.kind == CMD_PAUSE:
                self.sh.paused = 1
            elif c.kind == CMD_RESUME:
                self.sh.paused = 0
            elif 0 <= c.index < self.n:
                if c.kind == CMD_SET_U:
                    self.I[c.index].u = c.a
                elif c.kind == CMD_SET_ENABLE:
                    self.I[c.index].enable = c.a
                elif c.kind == CMD_SET_EXTERNAL:
                    self.I[c.index].external_torque = c.a
                elif c.kind == CMD_SET_PARAMS:
                    self.P[c.index] = c.params
                    prepare(self.P, self.plan, c.index, self.dt)
                elif c.kind == CMD_SET_STATE:
                    if not isnan(c.a):
                        self.S[c.index].theta = c.a
                        self.S[c.index].traj_valid = 0
                    if not isnan(c.b):
                        self.S[c.index].omega = c.b
                        motor_side_at_rest(self.plan, self.n, c.index)   # with backlash: both sides
                elif c.kind == CMD_CLEAR_LATCHES:
                    self.S[c.index].oc_active = 0
                    self.S[c.index].oc_timer = 0.0
                    self.S[c.index].shutdown = 0
                    self.S[c.index].latched = 0
                    self.S[c.index].ol_timer = 0.0
                    self.S[c.index].enc_offset = 0.0
                elif c.kind == CMD_SET_TEMPERATURE:
                    self.S[c.index].temp_rise = c.a - self.P[c.index].ambient
                elif c.kind == CMD_RESET_STATE:
                    actuator_at_start(self.P, self.plan, self.S, self.n, c.index)
                elif c.kind == CMD_SET_HAND:
                    hand_take(&self.I[c.index], &self.S[c.index], c.hand, self.dt)
            tail += 1
        if tail != self.sh.cmd_tail:
            self._snapshot()   # readers see commands applied even while paused / between steps
        hil_store(&self.sh.cmd_tail, tail)

    cdef void _snapshot(self) noexcept nogil:
        # seqlock: the counter is odd while the copy is being written
        hil_add(&self.sh.snap_seq, 1)
        hil_fence()
        memcpy(self.snap_states, self.S, self.n * sizeof(State))
        memcpy(self.snap_inputs, self.I, self.n * sizeof(Input))
        hil_add(&self.sh.snap_seq, 1)

    cdef void _tick(self) noexcept nogil:
        cdef int s
        cdef int64_t j, head, tail, seq
        cdef Sample* o
        cdef int64_t t0 = hil_now_ns()
        if self.hook != NULL:
            self.hook.fn(self.hook.ctx)
        else:
            for s in range(self.substeps):
                step_all(self.P, self.plan, self.S, self.I, self.n, self.dt)
        self.sh.work_ns += hil_now_ns() - t0
        self.sh.tick += 1
        self._snapshot()
        if self.sh.tick % self.publish_every:
            return
        head = self.sh.smp_head
        tail = hil_load(&self.sh.smp_tail)
        if head - tail + self.n > self.smp_cap:
            self.sh.sample_drops += 1   # the consumer is behind: drop this publish, keep running
            self.sh.publish_seq += 1
            return
        seq = self.sh.publish_seq
        self.sh.publish_seq += 1
        for j in range(self.n):
            o = &self.samples[(head + j) % self.smp_cap]
            o.seq = seq
            o.tick = self.sh.tick
            o.deadline_ns = self.sh.deadline_ns
            o.index = j
            o.t = self.S[j].k * self.dt
            o.theta = self.S[j].theta
            o.theta_meas = self.S[j].theta_meas
            o.omega = self.S[j].omega
            o.torque = self.S[j].torque
            o.current = self.S[j].i_out
            o.voltage = self.S[j].v_out
            o.temperature = self.S[j].temperature
            o.u = self.I[j].u
            o.enable = self.I[j].enable
            o.external_torque = self.I[j].external_torque
            o.law = self.P[j].law
            o.fault_flags = self.S[j].fault_flags
        hil_store(&self.sh.smp_head, head + self.n)
        c_write(self.notify_fd, &_ONE, 8)   # wake the publisher: samples are ready (one syscall, no GIL)

    cdef void _run(self) noexcept nogil:
        cdef int64_t next_ns, now, late, b
        cdef uint64_t drained
        self.sh.rt_mode = realtime(self.fifo_priority)
        next_ns = hil_now_ns()
        self.sh.start_ns = next_ns
        while not hil_load(&self.sh.stop):
            if self.lockstep:
                self._apply_commands()
                if self.sh.tick < hil_load(&self.sh.steps_requested):
                    self.sh.deadline_ns = hil_now_ns()
                    self._tick()
                else:
                    # idle until the host commits commands, asks for steps or stops (it writes
                    # wake_fd after each); the timeout is only a safety net
                    hil_wait_readable(self.wake_fd, 100)
                    c_read(self.wake_fd, &drained, 8)
                continue
            next_ns += self.period_ns
            if self.spin_ns > 0:
                hil_sleep_until(next_ns - self.spin_ns)
                while hil_now_ns() < next_ns:
                    pass
            else:
                hil_sleep_until(next_ns)
            now = hil_now_ns()
            late = now - next_ns
            self.sh.wakeups += 1
            b = late // 1000
            self.sh.hist[b if b < HIST_BINS else HIST_BINS - 1] += 1
            if late > self.sh.max_lateness_ns:
                self.sh.max_lateness_ns = late
            if late > self.period_ns:
                self.sh.overruns += 1
                if late > 100 * self.period_ns:
                    # A stall (hypervisor steal, suspend): realign instead of racing through the backlog.
                    self.sh.skipped += late // self.period_ns
                    next_ns = now
            self._apply_commands()
            if not self.sh.paused:
                self.sh.deadline_ns = next_ns
                self._tick()

    # ---------------------------------------------------------------- Python side
    def run(self):
        """The loop body; returns after `stop()`. Holds no GIL while running."""
        with nogil:
            self._run()

    def stop(self):
        hil_store(&self.sh.stop, 1)
        self._wake()

    def _wake(self):
        if self.lockstep:   # the idle lock-step loop sleeps on wake_fd until the host has news
            os.eventfd_write(self.wake_fd, 1)

    def push(self, int kind, int64_t index=0, double a=0.0, double b=0.0, dict params=None, bint commit=True,
             dict hand=None):
        """Queue one command (callers serialise pushes); False when the ring is full. `params`: a Params record
        (set_params), `hand`: a Hand record (set_hand).

        With commit=False the command is staged: it and every command staged before it reach the loop
        together at the next `commit()`, so the loop applies all of them at the same tick or none.
        """
        return self._push(kind, index, a, b, params, commit, hand) == 1

    cdef int _push(self, int kind, int64_t index, double a, double b, dict params, bint commit,
                   dict hand=None) except -1:
        """push(): 1 if queued, 0 when the ring is full."""
        cdef int64_t head = self.sh.cmd_head + self.staged
        if head - hil_load(&self.sh.cmd_tail) >= self.cmd_cap:
            return 0
        cdef Command* c = &self.cmds[head % self.cmd_cap]
        c.kind = kind
        c.index = index
        c.a = a
        c.b = b
        if params is not None:
            c.params = params
        if hand is not None:
            c.hand = hand
        self.staged += 1
        if commit:
            self.commit()
        return 1

    def commit(self):
        """Publish every staged command to the loop at once (one release store of the ring head)."""
        hil_store(&self.sh.cmd_head, self.sh.cmd_head + self.staged)
        self.staged = 0
        self._wake()

    def commands_pending(self):
        return hil_load(&self.sh.cmd_head) - hil_load(&self.sh.cmd_tail)

    def request_steps(self, int64_t n):
        """Lock-step: allow n more ticks; returns the tick count to wait for."""
        cdef int64_t target = hil_add(&self.sh.steps_requested, n)
        self._wake()
        return target

    def publish(self, size_t socket, list topics, int64_t[::1] bus_flags, int64_t stamp_offset_ns,
                bint stamp_sim_time, int64_t[::1] known_flags, double wait_s=0.0, bint single_frame=False,
                size_t tap_socket=0, int64_t tap_every=1):
        """Publish the loop's samples into a libzmq PUB socket without the GIL (the publisher's hot path): drain
        the sample ring, then wait on `notify_fd` for the next tick's samples and drain again, until a sample's
        fault flags differ from `known_flags[index]` (updated), `wait_s` [s] has passed, or the loop stopped.
        `wait_s` = 0: drain once. Waiting here instead of in Python keeps the GIL out of every tick's path.

        Each sample goes out as [topics[index], msgpack map (docs/configuration.md), timestamp]: the deadline in
        epoch seconds ("%d.%09d" of deadline_ns + stamp_offset_ns, exact to the ns), or with stamp_sim_time the
        simulation time ("%.9f"); `bus_flags[index]` is OR-ed into its fault flags. With `single_frame` each
        sample is one frame instead: topics[index] is the msgpack head of `{rig: {joint: map}}` and the frame
        ends with `"timestamp": <seconds, float64>` (the same stamp). `tap_socket` (a second PUB socket's
        `underlying`, 0: none) also gets the samples whose seq is a multiple of `tap_every`. `socket` is pyzmq's
        `Socket.underlying`; only the thread that owns the socket may call this. Returns (messages sent,
        [(index, flags, t, temperature)] for the samples whose flags changed, in order, at most 64).
        """
        if len(topics) != self.kernel.n:
            raise ValueError("topics, bus_flags and known_flags need one entry per actuator")
        cdef SampleRing ring
        ring.samples, ring.capacity, ring.notify_fd = self.samples, self.smp_cap, self.notify_fd
        ring.head, ring.tail, ring.stop = &self.sh.smp_head, &self.sh.smp_tail, &self.sh.stop
        return publish_ring(&ring, socket, topics, bus_flags, stamp_offset_ns, stamp_sim_time, known_flags, wait_s,
                            &self.sh.publish_errors, single_frame, tap_socket, tap_every)

    def snapshot(self):
        """(states, inputs) of every actuator as lists of dicts, consistent with one tick."""
        cdef int64_t s1, s2, n = self.kernel.n
        while True:
            s1 = hil_load(&self.sh.snap_seq)
            if s1 & 1:
                continue
            st = [self.snap_states[j] for j in range(n)]
            inp = [self.snap_inputs[j] for j in range(n)]
            hil_fence()
            s2 = hil_load(&self.sh.snap_seq)
            if s1 == s2:
                return st, inp

    cdef State _state(self, int64_t j) except *:
        """Actuator j's State from the snapshot, consistent with one tick (seqlock read)."""
        cdef SnapshotRef ref
        cdef State st
        if not 0 <= j < self.kernel.n:
            raise IndexError(f"actuator index {j} out of range")
        snapshot_ref(self, &ref)
        read_snapshot(&ref, j, &st)
        return st

    def state_of(self, int64_t j):
        """The kernel State (a dict) of actuator j, consistent with one tick (cheaper than snapshot())."""
        return self._state(j)

    def state_view(self, int64_t j):
        """state_of(j) as a StateView: the same values, one struct copy instead of a dict (firmware models)."""
        cdef StateView v = StateView.__new__(StateView)
        v.st = self._state(j)
        return v

    @property
    def snapshot_seq(self):
        """Changes whenever the snapshot that state_of() and snapshot() read is republished: a reader that saw
        the same value before and after fetching a state may keep using it (servo_hil/daemon/live_rig.LiveJoint)."""
        return hil_load(&self.sh.snap_seq)

    @property
    def tick(self):
        """Ticks run so far."""
        return hil_load(&self.sh.tick)

    def telemetry(self):
        """Counters and the lateness histogram (µs bins) of the loop so far."""
        hist = np.array([self.sh.hist[i] for i in range(HIST_BINS)], dtype=np.int64)
        return {
            "tick": hil_load(&self.sh.tick), "wakeups": self.sh.wakeups, "overruns": self.sh.overruns,
            "skipped_periods": self.sh.skipped, "max_lateness_ns": self.sh.max_lateness_ns,
            "sample_drops": self.sh.sample_drops, "publish_errors": self.sh.publish_errors,
            "work_ns": self.sh.work_ns,
            "paused": bool(self.sh.paused), "rt_mode": RT_MODES[self.sh.rt_mode],
            "start_ns": self.sh.start_ns, "period_ns": self.period_ns, "histogram_us": hist,
        }


# ---------------------------------------------------------------------------------------- C accessors (rt.pxd)
cdef int snapshot_ref(object loop, SnapshotRef* out) except -1:
    """Where RealtimeLoop `loop` keeps its snapshot, for `read_snapshot` and `read_tick` (TypeError if it is none)."""
    cdef RealtimeLoop rl = <RealtimeLoop?> loop
    out.seq = &rl.sh.snap_seq
    out.states = rl.snap_states
    out.tick = &rl.sh.tick
    out.n = rl.kernel.n
    return 0


cdef void read_snapshot(const SnapshotRef* ref, int64_t j, State* out) noexcept nogil:
    """Actuator j's State (0 <= j < ref.n) from the snapshot, consistent with one tick (the seqlock's reader)."""
    cdef int64_t s1
    while True:
        s1 = hil_load(ref.seq)
        if s1 & 1:
            continue
        out[0] = ref.states[j]
        hil_fence()
        if hil_load(ref.seq) == s1:
            return


cdef int64_t read_tick(const SnapshotRef* ref) noexcept nogil:
    """Ticks run so far (`RealtimeLoop.tick`)."""
    return hil_load(ref.tick)


cdef int push_command(object loop, int kind, int64_t index, double a, double b, bint commit) except -1:
    """`loop.push(kind, index, a, b, None, commit)` from C (the caller serialises pushes): 1 if queued, 0 if full."""
    return (<RealtimeLoop?> loop)._push(kind, index, a, b, None, commit)


COMMANDS = {"set_u": CMD_SET_U, "set_enable": CMD_SET_ENABLE, "set_external": CMD_SET_EXTERNAL,
            "set_params": CMD_SET_PARAMS, "set_state": CMD_SET_STATE, "clear_latches": CMD_CLEAR_LATCHES,
            "set_temperature": CMD_SET_TEMPERATURE, "reset_state": CMD_RESET_STATE, "pause": CMD_PAUSE,
            "resume": CMD_RESUME, "set_hand": CMD_SET_HAND}

