# cython: language_level=3
"""Servos driving a MuJoCo multibody model: the kernel's actuators coupled to the hinges of an mjModel.

One physics step advances every bound joint at once, in the order of bam's `MujocoController.update()`
followed by `mj_step`; a tick is `substeps` such steps in one nogil call. The coupling step by step, and
how the hinges' armature and damping follow the kernel's parameters: docs/robots.md.
"""

from cpython.pycapsule cimport PyCapsule_New
from libc.math cimport exp, fabs, pow
from libc.stdint cimport int64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy

import numpy as np

from hil.kernel.core cimport Input, Kernel, Params, Plan, State, hand_torque, step_all
from hil.loop.rt cimport TickHook


cdef extern from *:
    """
    #include <time.h>
    static inline int64_t hil_robot_now_ns(void) {
        struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    }
    static inline int64_t hil_robot_load(int64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void hil_robot_add(int64_t* p, int64_t v) { __atomic_add_fetch(p, v, __ATOMIC_ACQ_REL); }
    static inline void hil_robot_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
    """
    int64_t hil_robot_now_ns() nogil
    int64_t hil_robot_load(int64_t* p) nogil
    void hil_robot_add(int64_t* p, int64_t v) nogil
    void hil_robot_fence() nogil


cdef extern from "mujoco/mujoco.h" nogil:
    ctypedef double mjtNum
    ctypedef struct mjOption:
        mjtNum timestep
    ctypedef struct mjModel:
        int nv
        int nu
        int nbody
        mjOption opt
        mjtNum* dof_frictionloss
        mjtNum* dof_damping
        mjtNum* dof_armature
    ctypedef struct mjData:
        int nefc
        mjtNum time
        mjtNum* qpos
        mjtNum* qvel
        mjtNum* ctrl
        mjtNum* qfrc_actuator
        mjtNum* qfrc_bias
        mjtNum* qfrc_applied
        mjtNum* qfrc_constraint
        mjtNum* efc_force
        int* efc_id
        int* efc_type
        mjtNum* xpos
        mjtNum* xquat
    void mj_step(const mjModel* m, mjData* d)
    void mj_forward(const mjModel* m, mjData* d)
    void mj_setConst(mjModel* m, mjData* d)
    int mjCNSTR_FRICTION_DOF


# bam's friction budget as the kernel computes it (hil/kernel/load.h), read from the kernel's plan
# (hil/kernel/plan.h: the block of actuator j holds column c of its lane k at [c·HIL_BLOCK + k])
cdef extern from "plan.h" nogil:
    int HIL_BLOCK
    int HIL_PLAN_COLUMNS
cdef extern from "load.h" nogil:
    double hil_budget(const double* P, Py_ssize_t st, Py_ssize_t j, double tau_m, double tau_e, double w,
                      double s)
    double hil_budget_heated(const double* P, Py_ssize_t st, Py_ssize_t j, double bud, double t_rise)


cdef struct Coupling:
    mjModel* m
    mjData* d
    mjData* scratch        # mj_setConst's workspace (it overwrites the state with qpos0): not the robot's data
    Params* params
    Plan* plan
    State* states
    Input* inputs
    Py_ssize_t n
    double dt
    int substeps
    int* qpos_adr          # per actuator: the joint's qpos address, dof address and motor actuator id
    int* dof_adr
    int* act_id
    int* budget            # per actuator: bam's friction budget on (else the joint has no friction loss)
    int* dof_act           # per dof of the model: the actuator bound to it, −1 if none
    double* friction       # per actuator: the joint's friction-loss force of the previous step [N·m]
    double* theta_w        # per actuator: the θ / ω the engine last wrote into the kernel's state
    double* omega_w
    double* hinge          # per actuator: armature, gear, B1 and Kv its hinge was last given (NaN: never)
    int64_t const_updates  # mj_setConst calls after a hinge's inertia changed
    int64_t step_ns        # time spent in physics steps, and in their mj_step [ns] (benchmarks)
    int64_t mj_ns
    int64_t tick           # ticks run
    int64_t pose_every     # copy the bodies' poses every this many ticks (0: never)
    double* poses          # POSE_RING slots of nbody × (x, y, z, qw, qx, qy, qz); copy k in slot k % POSE_RING
    int64_t* pose_tick     # per slot: the tick and simulation time [s] of its copy
    double* pose_time
    int64_t pose_count     # copies made; copy k is complete once this exceeds k (a reader's release point)



DEF POSE_RING = 1024   # slots of copies of the bodies' poses: a reader may be ~10 s behind at 100 Hz


cdef inline double stribeck(const Params* p, double w) noexcept nogil:
    # bam/model.py compute_frictions: exp(−|θ̇/θ̇s|^α), no Stribeck term without θ̇s
    return exp(-pow(fabs(w / p.dtheta_stribeck), p.alpha)) if p.dtheta_stribeck > 0 else 0.0


cdef bint sync_hinges(Coupling* c) noexcept nogil:
    """Give each hinge its servo's reflected inertia armature·g² (`dof_armature`) and viscous damping B1·g² plus
    bam's Kv where the budget applies (`dof_damping`; bam/mujoco.py `MujocoController`, MuJoCo dcmotor damping
    through gear²) where these parameters changed since the last copy; True if any did."""
    cdef Py_ssize_t j
    cdef const Params* p
    cdef double* h
    cdef double g2
    cdef int dof
    cdef bint changed = False, inertia = False
    for j in range(c.n):
        p = &c.params[j]
        h = &c.hinge[4 * j]
        if p.armature == h[0] and p.gear == h[1] and p.damping_b1 == h[2] and p.friction_viscous == h[3]:
            continue
        dof = c.dof_adr[j]
        g2 = p.gear * p.gear
        if not (p.armature == h[0] and p.gear == h[1]):
            c.m.dof_armature[dof] = p.armature * g2
            inertia = True
        c.m.dof_damping[dof] = p.damping_b1 * g2 + (p.friction_viscous if c.budget[j] else 0.0)
        h[0], h[1], h[2], h[3] = p.armature, p.gear, p.damping_b1, p.friction_viscous
        changed = True
    if inertia:
        # the constants the compiler derives from the mass matrix at qpos0 (src/engine/engine_setconst.c
        # `mj_setConst`: dof_invweight0 sets the friction-loss rows' regularization), as bam/mujoco.py does
        mj_setConst(c.m, c.scratch)
        c.const_updates += 1
    return changed


cdef void physics_step(Coupling* c) noexcept nogil:
    """One kernel step and one mj_step for every bound joint (the module docstring's steps 1–4)."""
    cdef mjModel* m = c.m
    cdef mjData* d = c.d
    cdef Py_ssize_t j, i, a
    cdef int dof
    cdef double tau_e, applied
    cdef const double* col
    cdef int64_t t0 = hil_robot_now_ns(), t1
    cdef bint moved = sync_hinges(c)
    # a θ / ω someone else wrote into the kernel's state (a state command, a reset) moves the hinge
    for j in range(c.n):
        if c.states[j].theta != c.theta_w[j] or c.states[j].omega != c.omega_w[j]:
            d.qpos[c.qpos_adr[j]] = c.states[j].theta
            d.qvel[c.dof_adr[j]] = c.states[j].omega
            moved = True
    if moved:
        mj_forward(m, d)   # the forces the friction budget reads belong to the new state and model
    for j in range(c.n):
        # the kernel's own load step is not the robot's: what acts on the output from outside acts on the hinge
        applied = c.inputs[j].external_torque
        if c.inputs[j].hand.stiffness > 0.0:
            applied += hand_torque(&c.inputs[j].hand, c.states[j].theta, c.states[j].omega, c.states[j].k * c.dt)
        d.qfrc_applied[c.dof_adr[j]] = applied
    step_all(c.params, c.plan, c.states, c.inputs, c.n, c.dt)
    for j in range(c.n):
        d.ctrl[c.act_id[j]] = c.states[j].torque
        c.friction[j] = 0.0
    # the friction-loss constraint forces of the previous step (efc_id of a FRICTION_DOF row is its dof)
    for i in range(d.nefc):
        if d.efc_type[i] == mjCNSTR_FRICTION_DOF:
            a = c.dof_act[d.efc_id[i]]
            if a >= 0:
                c.friction[a] += d.efc_force[i]
    for j in range(c.n):
        if c.budget[j]:
            dof = c.dof_adr[j]
            tau_e = -d.qfrc_bias[dof] + d.qfrc_constraint[dof] - c.friction[j]
            if d.qfrc_applied[dof] != 0.0:
                tau_e += d.qfrc_applied[dof]
            # w = 0: the viscous term is the joint's dof_damping, not part of the friction loss
            col = c.plan.col + (j // HIL_BLOCK) * HIL_PLAN_COLUMNS * HIL_BLOCK
            # scaled by the winding temperature as the kernel's own load scales it (friction_tempcoef)
            m.dof_frictionloss[dof] = hil_budget_heated(
                col, HIL_BLOCK, j % HIL_BLOCK,
                hil_budget(col, HIL_BLOCK, j % HIL_BLOCK, d.qfrc_actuator[dof], tau_e, 0.0,
                           stribeck(&c.params[j], d.qvel[dof])),
                c.states[j].temp_rise)
    t1 = hil_robot_now_ns()
    mj_step(m, d)
    c.mj_ns += hil_robot_now_ns() - t1
    write_back(c)
    c.step_ns += hil_robot_now_ns() - t0


cdef inline void write_back(Coupling* c) noexcept nogil:
    cdef Py_ssize_t j
    for j in range(c.n):
        c.states[j].theta = c.theta_w[j] = c.d.qpos[c.qpos_adr[j]]
        c.states[j].omega = c.omega_w[j] = c.d.qvel[c.dof_adr[j]]


cdef void robot_tick(Coupling* c) noexcept nogil:
    """One tick: `substeps` physics steps with the inputs in force, then the bodies' poses if due."""
    cdef int k
    for k in range(c.substeps):
        physics_step(c)
    c.tick += 1
    cdef int64_t slot
    cdef double* out
    if c.pose_every > 0 and c.tick % c.pose_every == 0:
        # ticks pose_every, 2·pose_every, …: exactly rate_hz / pose_every copies a second. The copy goes into
        # the ring's next slot and is released by pose_count, so a reader loses a copy only when it falls
        # POSE_RING copies behind (poses_since tells it by the copy numbers).
        slot = c.pose_count % POSE_RING
        out = &c.poses[slot * 7 * c.m.nbody]
        for k in range(c.m.nbody):
            memcpy(&out[7 * k], &c.d.xpos[3 * k], 3 * sizeof(double))
            memcpy(&out[7 * k + 3], &c.d.xquat[4 * k], 4 * sizeof(double))
        c.pose_tick[slot] = c.tick
        c.pose_time[slot] = c.d.time
        hil_robot_add(&c.pose_count, 1)


cdef void tick_entry(void* ctx) noexcept nogil:
    robot_tick(<Coupling*>ctx)


OUTPUTS = ("theta", "omega", "torque", "friction_torque", "current", "voltage", "temperature", "theta_meas",
           "fault_flags")


cdef class RobotEngine:
    """A kernel's actuators bound to hinges of a MuJoCo model (the model and data stay owned by their
    Python objects, which this engine keeps alive).

    `joints[j]` is actuator j's (qpos address, dof address, motor actuator id); `budget[j]` whether it
    applies bam's friction budget as the joint's friction loss. The kernel's dt must be the model's
    timestep; a tick is `substeps` steps. The hinges get the servos' armature and damping here (then
    `mj_forward`), and again whenever the kernel's parameters change them.
    """
    cdef Coupling c
    cdef TickHook hook
    cdef readonly Kernel kernel
    cdef readonly object model
    cdef readonly object data
    cdef object scratch
    cdef readonly int substeps

    def __cinit__(self, Kernel kernel, model, data, joints, budget, int substeps):
        cdef Py_ssize_t n = kernel.n, j
        if len(joints) != n or len(budget) != n:
            raise ValueError(f"{n} actuators but {len(joints)} joints and {len(budget)} budget flags")
        if substeps < 1:
            raise ValueError(f"substeps must be >= 1, got {substeps}")
        if kernel.dt != model.opt.timestep:
            raise ValueError(f"the kernel's dt {kernel.dt!r} s is not the model's timestep {model.opt.timestep!r} s")
        self.kernel, self.model, self.data, self.substeps = kernel, model, data, substeps
        self.scratch = type(data)(model)
        self.c.m = <mjModel*><size_t>model._address
        self.c.d = <mjData*><size_t>data._address
        self.c.scratch = <mjData*><size_t>self.scratch._address
        self.c.params, self.c.plan, self.c.states, self.c.inputs = kernel.params, &kernel.plan, kernel.states, \
            kernel.inputs
        self.c.n, self.c.dt, self.c.substeps = n, kernel.dt, substeps
        self.c.qpos_adr = <int*>calloc(n, sizeof(int))
        self.c.dof_adr = <int*>calloc(n, sizeof(int))
        self.c.act_id = <int*>calloc(n, sizeof(int))
        self.c.budget = <int*>calloc(n, sizeof(int))
        self.c.dof_act = <int*>calloc(max(self.c.m.nv, 1), sizeof(int))
        self.c.friction = <double*>calloc(n, sizeof(double))
        self.c.theta_w = <double*>calloc(n, sizeof(double))
        self.c.omega_w = <double*>calloc(n, sizeof(double))
        self.c.hinge = <double*>calloc(4 * n, sizeof(double))
        self.c.poses = <double*>calloc(POSE_RING * 7 * self.c.m.nbody, sizeof(double))
        self.c.pose_tick = <int64_t*>calloc(POSE_RING, sizeof(int64_t))
        self.c.pose_time = <double*>calloc(POSE_RING, sizeof(double))
        if not (self.c.qpos_adr and self.c.dof_adr and self.c.act_id and self.c.budget and self.c.dof_act
                and self.c.friction and self.c.theta_w and self.c.omega_w and self.c.hinge and self.c.poses
                and self.c.pose_tick and self.c.pose_time):
            raise MemoryError()
        self.hook.fn = tick_entry
        self.hook.ctx = &self.c
        for j in range(self.c.m.nv):
            self.c.dof_act[j] = -1
        for j in range(n):
            qa, da, aid = (int(x) for x in joints[j])
            if not (0 <= da < self.c.m.nv and 0 <= aid < self.c.m.nu):
                raise ValueError(f"actuator {j}: dof {da} / motor {aid} not in the model")
            if self.c.dof_act[da] >= 0:
                raise ValueError(f"actuator {j}: dof {da} is bound twice")
            self.c.qpos_adr[j], self.c.dof_adr[j], self.c.act_id[j] = qa, da, aid
            self.c.dof_act[da] = <int>j
            self.c.budget[j] = 1 if budget[j] else 0
        for j in range(4 * n):
            self.c.hinge[j] = float("nan")
        sync_hinges(&self.c)
        mj_forward(self.c.m, self.c.d)
        self.pull_state()

    def __dealloc__(self):
        free(self.c.qpos_adr)
        free(self.c.dof_adr)
        free(self.c.act_id)
        free(self.c.budget)
        free(self.c.dof_act)
        free(self.c.friction)
        free(self.c.theta_w)
        free(self.c.omega_w)
        free(self.c.hinge)
        free(self.c.poses)
        free(self.c.pose_tick)
        free(self.c.pose_time)

    def pull_state(self):
        """The joints' qpos / qvel as the kernel's θ / ω (after the caller changed the MuJoCo state)."""
        write_back(&self.c)

    def step(self, u=None, enable=None):
        """One tick with goals `u` and torque enables `enable` (per actuator; None keeps the last)."""
        cdef Py_ssize_t j
        if u is not None:
            uu = np.broadcast_to(np.asarray(u, dtype=np.float64), (self.c.n,))
            for j in range(self.c.n):
                self.c.inputs[j].u = uu[j]
        if enable is not None:
            ee = np.broadcast_to(np.asarray(enable, dtype=np.float64), (self.c.n,))
            for j in range(self.c.n):
                self.c.inputs[j].enable = ee[j]
        with nogil:
            robot_tick(&self.c)

    def run(self, u, enable=None):
        """T ticks in one nogil call; `u`, `enable`: (T, n). Returns (T, n) columns (OUTPUTS): the state
        before tick k (θ, ω, temperature) and what its first step produced (torque, friction-loss force of
        the joint, current, voltage, measured position, fault flags)."""
        cdef double[:, ::1] uu = np.array(np.broadcast_to(np.asarray(u, dtype=np.float64), (len(u), self.c.n)),
                                          order="C")
        cdef Py_ssize_t T = uu.shape[0], n = self.c.n, k, j, i, a
        cdef double[:, ::1] ee = np.array(np.broadcast_to(
            np.asarray(1.0 if enable is None else enable, dtype=np.float64), (T, n)), order="C")
        out = {name: np.empty((T, n)) for name in OUTPUTS}
        cdef double[:, ::1] o_th = out["theta"], o_w = out["omega"], o_tq = out["torque"]
        cdef double[:, ::1] o_tf = out["friction_torque"], o_i = out["current"], o_v = out["voltage"]
        cdef double[:, ::1] o_T = out["temperature"], o_m = out["theta_meas"], o_f = out["fault_flags"]
        cdef Coupling* c = &self.c
        cdef int s
        with nogil:
            for k in range(T):
                for j in range(n):
                    c.inputs[j].u = uu[k, j]
                    c.inputs[j].enable = ee[k, j]
                    o_th[k, j] = c.states[j].theta
                    o_w[k, j] = c.states[j].omega
                for s in range(c.substeps):
                    physics_step(c)
                    if s == 0:
                        for j in range(n):
                            o_tq[k, j] = c.states[j].torque
                            o_i[k, j] = c.states[j].i_out
                            o_v[k, j] = c.states[j].v_out
                            o_T[k, j] = c.states[j].temperature
                            o_m[k, j] = c.states[j].theta_meas
                            o_f[k, j] = <double>c.states[j].fault_flags
                            o_tf[k, j] = 0.0
                        for i in range(c.d.nefc):
                            if c.d.efc_type[i] == mjCNSTR_FRICTION_DOF:
                                a = c.dof_act[c.d.efc_id[i]]
                                if a >= 0:
                                    o_tf[k, a] += c.d.efc_force[i]
        return out

    def tick_hook(self):
        """A capsule ("hil.loop.TickHook") of the C function and context that run one tick of
        this engine: RealtimeLoop(physics=engine) calls it in place of its kernel steps, without the GIL."""
        return PyCapsule_New(&self.hook, b"hil.loop.TickHook", NULL)

    def publish_poses(self, int every):
        """Copy the bodies' poses every `every` ticks (0: never), for `read_poses` from another thread."""
        if every < 0:
            raise ValueError(f"every must be >= 0, got {every}")
        self.c.pose_every = every

    def poses_since(self, int64_t after=-1):
        """The copies of the bodies' poses numbered above `after` (copy k is made at tick (k + 1)·every) that
        the ring still holds, oldest first: [(k, tick, simulation time [s], (nbody, 7) array of world position
        x, y, z [m] and orientation quaternion w, x, y, z)]. The ring holds the last POSE_RING − 1 (1023)
        copies (the next one is being written into the last slot): a reader further behind finds the oldest
        gone, and the numbers jump. Safe from another thread than the engine's."""
        cdef int64_t count = hil_robot_load(&self.c.pose_count), first, k, slot
        cdef int64_t size = 7 * self.c.m.nbody
        first = max(after + 1, count - POSE_RING + 1, 0)
        copies = []
        cdef double[:, ::1] o
        for k in range(first, count):
            out = np.empty((self.c.m.nbody, 7))
            o = out
            slot = k % POSE_RING
            memcpy(&o[0, 0], &self.c.poses[slot * size], size * sizeof(double))
            copies.append((k, self.c.pose_tick[slot], self.c.pose_time[slot], out))
        hil_robot_fence()
        # the engine may have started copy c (overwriting copy c − POSE_RING) since `count` was read: drop
        # what it may have overwritten
        count = hil_robot_load(&self.c.pose_count)
        return [c for c in copies if c[0] > count - POSE_RING]

    def read_poses(self):
        """The latest copy of the bodies' poses: (tick, simulation time [s], (nbody, 7) array as in
        poses_since), or None before the first copy."""
        cdef int64_t count = hil_robot_load(&self.c.pose_count)
        copies = self.poses_since(count - 2)
        return copies[len(copies) - 1][1:] if copies else None

    @property
    def const_updates(self) -> int:
        """Times the model's constants were recomputed (mj_setConst) after a servo's armature or gear changed,
        the build's first included."""
        return self.c.const_updates

    @property
    def ticks(self) -> int:
        """Ticks run by `step` or a loop through `tick_hook` (`run` does not count)."""
        return self.c.tick

    @property
    def step_ns(self) -> int:
        """Time spent in physics steps so far [ns] (kernel, coupling and mj_step)."""
        return self.c.step_ns

    @property
    def mj_step_ns(self) -> int:
        """Of which in mj_step [ns]."""
        return self.c.mj_ns

    @property
    def time(self) -> float:
        """Simulation time [s]: MuJoCo's, k·timestep."""
        return self.c.d.time
