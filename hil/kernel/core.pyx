# cython: language_level=3
"""Servo physics kernel: firmware law → motor → friction → load → integrate, for N actuators at once.

Step order and semantics follow MuJoCo 3.11's `dcmotor` (notes/mujoco_dcmotor.md §3, Euler) and bam's
`Simulator.step` (notes/bam.md §2.4); the oracle tests hold both to round-off.
"""

from libc.math cimport exp, fabs, sin, sqrt, log, pow, isnan, M_PI, INFINITY, NAN
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset
from libc.stdint cimport int64_t, uint64_t

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from "<stdlib.h>" nogil:
    void* aligned_alloc(size_t alignment, size_t size)   # C11 (Cython's libc.stdlib lacks it)

cdef extern from "vmath.h" nogil:
    int hil_simd                # path of step_all (0 scalar, 1 AVX2, 2 AVX-512): its pass 2's vector math
                                # and, from AVX2 on, its code compiled for AVX2 (isa.h)
    int hil_simd_max()          # best path this CPU and build support
    int HIL_SIMD_MIN_N          # smaller rigs use libm's scalar functions
    int HIL_SIMD_AVX2           # hil_simd from which isa.h runs an AVX2 copy
    void hil_vsin(double* x, int n, int path)
    void hil_vexp(double* x, int n, int path)
    void hil_vlog(double* x, int n, int path)
    void hil_vpow(double* x, const double* y, int n, int path)

cdef extern from "isa.h" nogil:
    void hil_step(void* b, const double* P, const void* p, void* s, int m, int mv, double dt,
                  int path)   # step_block, per ISA
    int hil_use_avx512vl        # the AVX2 paths run the copy compiled with AVX-512VL
    int hil_cpu_avx512vl()      # this CPU and build have it

cdef extern from "plan.h" nogil:
    enum:
        HIL_BLOCK
    enum:
        PL_GEAR, PL_GRAVITY_TORQUE, PL_DAMPING_B1, PL_DAMPING_B2, PL_DAMPING_B3, PL_INERTIA, PL_INV_DT,
        PL_EULER, PL_BUDGET, PL_STRIBECK, PL_QUADRATIC, PL_KC, PL_KV, PL_KCS, PL_KL, PL_KLS, PL_KM, PL_KE,
        PL_KMS, PL_KES, PL_KMQ, PL_KEQ, PL_BRISTLE, PL_MOTORCONST, PL_INDUCTIVE, PL_TE, PL_INV_TE, PL_DECAY,
        PL_DIDT_LIMITED, PL_DIDT_MAX, PL_THERMAL, PL_INV_THERMAL_R, PL_INV_THERMAL_C, PL_AMBIENT, PL_ELECTRICAL,
        PL_TAU_LIMITED, PL_TAU_MAX, PL_DERATE, PL_DERATE_I_RATED, PL_DERATE_I_SAFE, PL_DERATE_T1, PL_DERATE_T2,
        PL_DERATE_INV_SPAN, PL_INV_VS,
        PL_EFFICIENCY, PL_COG, PL_COG_AMPLITUDE, PL_LUGRE, PL_LUGRE_S0, PL_LUGRE_S1, PL_LUGRE_TC, PL_LUGRE_TS,
        PL_COG_POLES, PL_COG_PHASE, PL_Q_OFFSET, PL_INV_LUGRE_WS, PL_INV_DTHETA_STRIBECK, PL_ALPHA,
        PL_DC_LAW, PL_LAW_POSITION, PL_LAW_VELOCITY, PL_KP, PL_KI, PL_KD, PL_SLEW, PL_IMAX, PL_VMAX,
        PL_VMODE, PL_LAW_DXL_PWM, PL_LAW_EROB_PD, PL_LAW_CURRENT, PL_LAW_TORQUE, PL_LAW_DXL, PL_CTRL_LIMITED,
        PL_CTRL_LO, PL_CTRL_HI, PL_DUTY_GAIN, PL_MAX_DUTY, PL_MAX_CURRENT, PL_PD_KP, PL_PD_D, PL_MAX_AMPS,
        PL_VS, PL_STATIC_FLAGS, PL_ENC_STUCK, PL_ENC_SLIP, PL_ENC_NOISE, PL_ENC_QUANTIZED, PL_COUNTS_PER_RAD,
        PL_RAD_PER_COUNT, PL_RESISTANCE, PL_TEMPCOEF, PL_REFTEMP, PL_TEMP_LIMIT, PL_SHUT_OVERHEAT,
        PL_SHUT_OVERLOAD, PL_OC_FRACTION, PL_OC_TIME, PL_OC_CURRENT, PL_OC_DURATION, PL_OL_CURRENT, PL_OL_TIME,
        PL_KINDS, PL_BLOCK_KINDS,
        HIL_PLAN_COLUMNS
    enum:
        NEED_POW "HIL_NEED_POW"
        NEED_LOG "HIL_NEED_LOG"
        NEED_ZOH "HIL_NEED_ZOH"
        LAWS_DXL "HIL_LAWS_DXL"
        LAWS_DXL_PWM "HIL_LAWS_DXL_PWM"
        LAWS_CURRENT "HIL_LAWS_CURRENT"
        USES_DC_LAW "HIL_USES_DC_LAW"
        USES_QS "HIL_USES_QS"
        USES_DERATE "HIL_USES_DERATE"
        USES_LUGRE "HIL_USES_LUGRE"
        USES_NOISE "HIL_USES_NOISE"
        USES_OC "HIL_USES_OC"
        USES_OVERLOAD "HIL_USES_OVERLOAD"
        USES_BUDGET "HIL_USES_BUDGET"
        USES_BAM "HIL_USES_BAM"
        USES_COG "HIL_USES_COG"
        USES_PENDULUM "HIL_USES_PENDULUM"
        USES_STRIBECK "HIL_USES_STRIBECK"

cdef extern from "select.h" nogil:
    double hil_sel(int c, double a, double b)

cdef extern from "args.h" nogil:
    void hil_args_pass(const double* P, Py_ssize_t st, int m, const double* theta, const double* omega,
                       double* sin_x, double* exp_x, double* pow_x, double* pow_a, int64_t* use_pow)

cdef extern from "noise.h" nogil:
    enum:
        HIL_NOISE_RETRY
        HIL_NOISE_DREW
    double hil_uniform(uint64_t* state)
    int hil_noise_draws(const double* P, Py_ssize_t st, int j, const double* k, const double* has_spare)
    int hil_noise_pass(const double* P, Py_ssize_t st, int m, const double* k, const double* has_spare,
                       uint64_t* rng, double* gauss_x, double* gauss_y, double* gauss_r, double* gauss_log,
                       int64_t* retry)

cdef extern from "sense.h" nogil:
    void hil_gauss_scale_pass(int m, const double* gauss_log, double* gauss_r)
    void hil_sense_pass(const double* P, Py_ssize_t st, int m, double dt, const double* theta, const double* k,
                        const double* gauss_x, const double* gauss_y, const double* gauss_r,
                        const double* temp_rise, const double* lat_overheat,
                        const double* lat_overload, const double* enable, double* theta_meas,
                        double* enc_offset, double* has_spare, double* gauss_spare, double* oc_active,
                        double* shutdown, double* flags, double* overheat, double* open, double* R, double* G,
                        double* T, double* temperature, double* enabled, int uses)
    void hil_fault_latch_pass(const double* P, Py_ssize_t st, int m, double dt, const double* i_out,
                              const double* derated, const double* overheat, double* oc_active,
                              double* oc_timer, double* ol_timer, double* lat_overheat,
                              double* lat_overload, double* flags, int uses)

cdef extern from "law.h" nogil:
    void hil_law_pass(const double* P, Py_ssize_t st, int m, double dt, const double* u_in, const double* thm,
                      const double* omega, const double* open, const double* enabled, double* slew_u,
                      double* integral, double* u, double* Ld, double* vmode, double* off, double* V,
                      double* i, double* f, double* torque, int uses)
    void hil_dxl_pwm_pass(const double* P, Py_ssize_t st, int m, const double* u, const double* thm,
                          const double* Ld, const double* R, double* V)
    void hil_current_law_pass(const double* P, Py_ssize_t st, int m, const double* u, const double* thm,
                              const double* omega, const double* Ld, const double* R, const double* G,
                              const double* open,
                              const double* enabled, double* V, double* i, double* f)

cdef extern from "motor.h" nogil:
    ctypedef struct HilLawOut:
        const double* vmode
        const double* off
        const double* V
        const double* i
        const double* f
        const double* R
        const double* G
        const double* T
        const double* Ld
    void hil_motor_pass(const double* P, Py_ssize_t st, int m, double dt, HilLawOut law, const double* cog_sin,
                        const double* lugre_exp, const double* bristle, double* current, double* temp_rise,
                        double* torque, double* i_out, double* v_out, double* derated, double* zoh_a,
                        double* zoh_ea, double* zoh_inv_a, int uses)

cdef extern from "load.h" nogil:
    double sign "hil_sign"(double x)
    double hil_budget(const double* P, Py_ssize_t st, Py_ssize_t j, double tau_m, double tau_e, double w,
                      double s)
    void hil_load_pass(const double* P, Py_ssize_t st, int m, double dt, const double* sin_q,
                       const double* stribeck, const double* zoh_a, const double* zoh_ea, const double* zoh_inv_a,
                       const double* zoh_v,
                       const double* ext, const double* torque, double* theta, double* omega,
                       double* bristle, double* friction, int uses)

# AVX2 by default even where AVX-512 exists: AVX-512 gained nothing measurable here (bench/kernel.py,
# N = 1024: 166 ns per actuator-step on both paths), and on Intel Xeons AVX-512 arithmetic may lower the
# core's clock for every thread on it, the daemon's Python bus threads too. `_simd("avx512")` selects it.
hil_simd = min(hil_simd_max(), 1)
hil_use_avx512vl = hil_cpu_avx512vl()
SIMD_PATHS = ("scalar", "avx2", "avx512")


def _avx512vl(on=None):
    """Whether the avx2 and avx512 paths run step_all's copy compiled with AVX-512VL (isa.h; the default
    where the CPU has it); `on` switches it (tests: the plain AVX2 copy on such a CPU)."""
    global hil_use_avx512vl
    if on is not None:
        if on and not hil_cpu_avx512vl():
            raise ValueError("AVX-512VL is not available on this CPU or build")
        hil_use_avx512vl = 1 if on else 0
    return bool(hil_use_avx512vl)


def _simd(path=None):
    """The path step_all uses ("scalar", "avx2", "avx512"): vector math and compiled copy; `path`
    selects one (tests, bench/kernel.py --simd)."""
    global hil_simd
    if path is not None:
        level = SIMD_PATHS.index(path)
        if level > hil_simd_max():
            raise ValueError(f"{path} is not available on this CPU or build (best: {SIMD_PATHS[hil_simd_max()]})")
        hil_simd = level
    return SIMD_PATHS[hil_simd]


def _vmath(str fn, x, a=None):
    """vmath.h's `fn` ("sin", "exp", "log", "pow" with exponents a) of a float64 array, on the active
    path (tests)."""
    cdef double[::1] y = np.array(x, dtype=np.float64).ravel()
    cdef double[::1] e = np.broadcast_to(np.asarray(1.0 if a is None else a, dtype=np.float64),
                                         (y.shape[0],)).copy()
    cdef int n = <int>y.shape[0]
    if n == 0:
        return np.asarray(y)
    if fn == "sin":
        hil_vsin(&y[0], n, hil_simd)
    elif fn == "exp":
        hil_vexp(&y[0], n, hil_simd)
    elif fn == "log":
        hil_vlog(&y[0], n, hil_simd)
    elif fn == "pow":
        hil_vpow(&y[0], &e[0], n, hil_simd)
    else:
        raise ValueError(f"unknown function {fn!r}")
    return np.asarray(y)

# Names exported to Python (hil.kernel): the enum values above live only in C.
LAWS = {"voltage": LAW_VOLTAGE, "position": LAW_POSITION, "velocity": LAW_VELOCITY,
        "dxl_pwm": LAW_DXL_PWM, "erob_pd": LAW_EROB_PD, "current": LAW_CURRENT, "torque": LAW_TORQUE,
        "dxl": LAW_DXL}
DXL_MODES = {"current": DXL_CURRENT, "velocity": DXL_VELOCITY, "position": DXL_POSITION,
             "extended_position": DXL_EXTENDED_POSITION, "current_position": DXL_CURRENT_POSITION, "pwm": DXL_PWM}
INTEGRATORS = {"euler": INTEGRATOR_EULER, "bam": INTEGRATOR_BAM}
FAULT_BITS = {"open_circuit": FAULT_OPEN_CIRCUIT, "supply": FAULT_SUPPLY, "encoder_noise": FAULT_ENCODER_NOISE,
              "derated": FAULT_DERATED, "overheat": FAULT_OVERHEAT, "encoder_stuck": FAULT_ENCODER_STUCK,
              "encoder_slip": FAULT_ENCODER_SLIP, "overload": FAULT_OVERLOAD}

cdef enum:
    BLOCK = HIL_BLOCK   # actuators per block of step_all (plan.h): their Params and State stay in L1
    LANE_DOUBLES = 64 * BLOCK + 8   # room for a Block (up to 64 rows of BLOCK doubles) at a 64-byte boundary
    LANE_PAD = 4     # lanes per vector of isa.h's AVX2 copy (2 of the baseline's): padded()


cdef struct Block:
    # A block of BLOCK actuators as step_block's lanes (struct-of-arrays, the passes vectorize across
    # them). The State fields the passes read and write live here from `lanes_load` to `lanes_store`:
    # around every step in step_all, around all T steps in Kernel.run; integers as doubles (exact).
    # The rest of State (the Dynamixel firmware's) stays in the records.
    double k[BLOCK]             # steps taken
    double theta[BLOCK]         # θ, ω: pre-step (passes 1–3), then pass 4's results
    double omega[BLOCK]
    double bristle[BLOCK]
    double current[BLOCK]
    double temp_rise[BLOCK]
    double slew_u[BLOCK]
    double integral[BLOCK]
    double theta_meas[BLOCK]
    double enc_offset[BLOCK]
    double has_spare[BLOCK]
    double gauss_spare[BLOCK]
    uint64_t rng[BLOCK]         # the noise generator's stream (noise.h)
    double oc_active[BLOCK]
    double oc_timer[BLOCK]
    double ol_timer[BLOCK]
    double shutdown[BLOCK]
    double lat_overheat[BLOCK]  # 1: FAULT_OVERHEAT / FAULT_OVERLOAD latched (State.latched)
    double lat_overload[BLOCK]
    double flags[BLOCK]         # State.fault_flags, as the sum of its bits (sense.h)
    double temperature[BLOCK]   # what the step produced (State.temperature, torque, friction_torque, i_out,
    double torque[BLOCK]        # v_out): torque is the law's output torque, then the actuator's [N·m]
    double friction[BLOCK]
    double i_out[BLOCK]
    double v_out[BLOCK]
    # the step's Input (the rows up to here: lanes_load zeroes their padding lanes)
    double cmd[BLOCK]           # u
    double enable[BLOCK]
    double ext[BLOCK]           # external torque [N·m]
    # the step's scratch: the transcendentals, evaluated together (pass 2)
    double sin_x[2 * BLOCK]     # [0, BLOCK): cogging Np·L + phase, [BLOCK, 2·BLOCK): pendulum θ + q_offset → sines
    double exp_x[2 * BLOCK]     # [0, BLOCK): LuGre −(Ld/ωs)², [BLOCK, 2·BLOCK): Stribeck −|ω/θ̇s|^α → exponentials
    double pow_x[BLOCK]         # |ω/θ̇s| → |ω/θ̇s|^α (α not 1 or 2)
    double pow_a[BLOCK]         # α
    int64_t use_pow[BLOCK]      # (as wide as a double: the select below vectorizes)
    double gauss_r[BLOCK]       # polar method: r = x² + y² of a fresh pair (1 if none was drawn) → its scale
    double gauss_log[BLOCK]     # → log r
    double gauss_x[BLOCK]
    double gauss_y[BLOCK]
    int64_t gauss_retry[BLOCK]  # 1: the first pair was rejected (noise.h)
    double zoh_a[BLOCK]         # LuGre a of the bristle zero-order hold (pass 4)
    double zoh_ea[BLOCK]        # a·dt → exp(a·dt)
    double zoh_inv_a[BLOCK]     # 1/a
    # … what sensing hands to the laws (sense.h → law.h)
    double overheat[BLOCK]      # 1: latch FAULT_OVERHEAT
    double open[BLOCK]          # the winding is open now
    double enabled[BLOCK]       # the law drives (enabled and not shut down)
    double u[BLOCK]             # the command after NaN and ctrlrange clean-up (LAW_DXL's input)
    # … and the law's request to the motor (motor.h HilLawOut)
    double vmode[BLOCK]
    double off[BLOCK]
    double V[BLOCK]
    double i[BLOCK]
    double f[BLOCK]
    double R[BLOCK]
    double G[BLOCK]             # 1/R [S]
    double T[BLOCK]
    double Ld[BLOCK]            # g·ω [rad/s], also the bristle hold's velocity
    double derated[BLOCK]


# lanes(): a Block and its alignment fit in LANE_DOUBLES
assert sizeof(Block) + 63 <= LANE_DOUBLES * sizeof(double), "raise LANE_DOUBLES"


cdef inline Block* lanes(double* buf) noexcept nogil:
    # a Block at the first 64-byte boundary of buf (LANE_DOUBLES doubles): its rows' vectors never
    # straddle a cache line
    return <Block*>((<size_t>buf + 63) & ~(<size_t>63))


cdef inline double clip(double x, double lo, double hi) noexcept nogil:
    # the per-actuator code's clip: branches (predicted) cost less there than select.h's blend `hil_clip`,
    # which the lane passes need to vectorize; both return the same value
    return lo if x < lo else (hi if x > hi else x)


cdef inline double stribeck(const Params* p, double w) noexcept nogil:
    """bam's Stribeck factor exp(−|ω/θ̇s|^α), 0 without θ̇s (scalar; step_all evaluates it in pass 2)."""
    return exp(-pow(fabs(w / p.dtheta_stribeck), p.alpha)) if p.dtheta_stribeck > 0 else 0.0


cdef inline void dxl_plan(const Params* p, State* s, double goal) noexcept nogil:
    """A new goal position: plan the move from the running trajectory (velocity override, e-manual
    "Profile Velocity"), velocity- or time-based (Drive Mode bit 2), notes/dynamixel.md §4.3.

    The plan is exact: a ramp at ±a from the current velocity v0 to the peak vp, a cruise at vp and a
    stop at −a, along the direction in which the goal lies beyond the point where a stop now would end
    (so a goal behind a running move first brakes, through zero, then comes back)."""
    cdef double t3, t1, v, a, d, v0, vp, d1, d3
    s.dxl_goal = goal
    s.prof_active = 1
    s.prof_k = 0
    s.prof_p0 = s.traj_pos
    if p.dxl_time_profile:
        d = fabs(goal - s.traj_pos)
        t3 = p.dxl_prof_vel
        t1 = min(p.dxl_prof_acc, 0.5 * t3)      # the firmware clips t1 to half the move time
        if t3 <= 0:
            v, a = 0.0, 0.0
        elif t1 <= 0:
            v, a = d / t3, 0.0
        else:
            v = d / (t3 - t1)
            a = v / t1
    else:
        v, a = p.dxl_prof_vel, p.dxl_prof_acc
    if p.dxl_vel_limit > 0 and v > p.dxl_vel_limit:
        v = p.dxl_vel_limit              # Profile Velocity never exceeds the Velocity Limit
    s.prof_amax = a
    if v <= 0:
        s.prof_type = 0                  # step: the trajectory jumps to the goal
        return
    if a <= 0:                           # rectangular: constant velocity, no ramps
        s.prof_type = 1
        s.prof_dir = sign(goal - s.traj_pos)
        s.prof_d = fabs(goal - s.traj_pos)
        s.prof_v0 = v
        s.prof_vmax = v
        s.prof_t1 = 0.0
        s.prof_t2 = s.prof_d / v
        s.prof_t3 = 0.0
        return
    s.prof_dir = sign(goal - (s.traj_pos + s.traj_vel * fabs(s.traj_vel) / (2.0 * a)))
    if s.prof_dir == 0:
        s.prof_dir = 1.0
    d = s.prof_dir * (goal - s.traj_pos)
    v0 = s.prof_dir * s.traj_vel
    vp = sqrt(a * d + 0.5 * v0 * v0)     # peak of a triangle
    s.prof_type = 2
    if vp > v:
        vp = v
        s.prof_type = 3
    if v0 > vp:
        vp = min(v0, v) if v0 > v else v0
        s.prof_type = 3
    s.prof_t1 = fabs(vp - v0) / a
    d1 = 0.5 * (vp + v0) * s.prof_t1
    s.prof_t3 = vp / a
    d3 = 0.5 * vp * s.prof_t3
    s.prof_t2 = max(d - d1 - d3, 0.0) / vp if vp > 0 else 0.0
    s.prof_d = d
    s.prof_v0 = v0
    s.prof_vmax = vp


cdef inline void dxl_profile(State* s, double dt) noexcept nogil:
    """Position/Velocity Trajectory at the next step of the planned move."""
    cdef double tau, x, v, acc, a = s.prof_amax, sg, v0 = s.prof_v0, vp = s.prof_vmax, t1 = s.prof_t1
    cdef double t2 = s.prof_t2, t3 = s.prof_t3, d1
    if not s.prof_active:
        s.traj_acc = 0.0
        return
    if s.prof_type == 0:
        s.traj_pos = s.dxl_goal
        s.traj_vel = 0.0
        s.traj_acc = 0.0
        s.prof_active = 0
        return
    s.prof_k += 1
    tau = s.prof_k * dt
    if a <= 0:
        x, v, acc = vp * tau, vp, 0.0
        if tau >= t2:
            x, v = s.prof_d, 0.0
    elif tau < t1:
        sg = 1.0 if vp >= v0 else -1.0
        x = v0 * tau + 0.5 * sg * a * tau * tau
        v = v0 + sg * a * tau
        acc = sg * a
    else:
        d1 = 0.5 * (vp + v0) * t1
        if tau < t1 + t2:
            x, v, acc = d1 + vp * (tau - t1), vp, 0.0
        elif tau < t1 + t2 + t3:
            tau = tau - t1 - t2
            x = d1 + vp * t2 + vp * tau - 0.5 * a * tau * tau
            v = vp - a * tau
            acc = -a
        else:
            x, v, acc = s.prof_d, 0.0, 0.0
    if v == 0.0 and x == s.prof_d:
        s.traj_pos = s.dxl_goal          # exactly the goal at the end, whatever the round-off
        s.prof_active = 0
    else:
        s.traj_pos = s.prof_p0 + s.prof_dir * x
    s.traj_vel = s.prof_dir * v
    s.traj_acc = s.prof_dir * acc


cdef inline double dxl_firmware(const Params* p, State* s, double u, double thm, double omega, double vs,
                                double R, double emf, bint enabled, double dt) noexcept nogil:
    """Dynamixel firmware (e-manual control block diagrams, notes/dynamixel.md §4.1): the duty cycle
    [-1, 1] the inverter applies. Current loops are modelled as ideal with voltage feed-forward
    (V = R·i* + back-EMF), clamped by Goal PWM like the real current controller's output."""
    cdef double clamp = min(p.dxl_goal_duty, p.max_duty), duty = 0.0, e, ev, i_star, ilim, acc
    cdef int64_t mode = p.dxl_mode
    if not enabled or not s.traj_valid:
        # torque off (or a teleported shaft): the trajectory follows the shaft, so a move starts from it
        s.traj_pos = thm
        s.traj_vel = 0.0
        s.traj_acc = 0.0
        s.prof_active = 0
        s.dxl_goal = NAN
        s.pos_integral = 0.0
        s.vel_integral = 0.0
        s.duty = 0.0
        s.traj_valid = enabled
        if not enabled:
            return 0.0
    if vs <= 0:
        vs = 1e-9
    if mode == DXL_PWM:
        duty = clip(u, -clamp, clamp)
    elif mode == DXL_CURRENT:
        duty = clip((R * u + emf) / vs, -clamp, clamp)
    elif mode == DXL_VELOCITY:
        if p.dxl_vel_limit > 0:
            u = clip(u, -p.dxl_vel_limit, p.dxl_vel_limit)
        # velocity mode uses Profile Acceleration only; time-based, it is the time to reach the goal [s]
        acc = p.dxl_prof_acc
        if p.dxl_time_profile:
            acc = fabs(u) / acc if acc > 0 else 0.0
        s.prof_type = 3 if acc > 0 else 0
        if acc > 0:
            s.traj_acc = clip(u - s.traj_vel, -acc * dt, acc * dt) / dt
        else:
            s.traj_acc = (u - s.traj_vel) / dt
        s.traj_vel += s.traj_acc * dt
        s.prof_active = s.traj_vel != u
        s.traj_pos = thm
        ev = s.traj_vel - omega
        duty = p.dxl_kvp * ev + p.dxl_kvi * s.vel_integral
        if p.dxl_kvi > 0 and (fabs(duty) < clamp or duty * ev < 0):
            s.vel_integral += ev * dt    # anti-windup: integrate only while unsaturated
        duty = clip(duty, -clamp, clamp)
    else:   # position modes 3, 4, 5
        if u != s.dxl_goal:
            dxl_plan(p, s, u)
        dxl_profile(s, dt)
        e = s.traj_pos - thm
        duty = (p.dxl_kpp * e + p.dxl_kpi * s.pos_integral + p.dxl_kpd * (s.traj_vel - omega)
                + p.dxl_kff1 * s.traj_vel + p.dxl_kff2 * s.traj_acc)
        if p.dxl_kpi > 0 and (fabs(duty) < clamp or duty * e < 0):
            s.pos_integral += e * dt
        if mode == DXL_CURRENT_POSITION:
            # the PID output is a desired current: the current duty would drive at stall, capped by Goal Current
            i_star = clip(duty * vs / R, -p.dxl_goal_current, p.dxl_goal_current)
            duty = clip((R * i_star + emf) / vs, -clamp, clamp)
        else:
            duty = clip(duty, -clamp, clamp)
    if p.max_current > 0 and mode != DXL_PWM:
        # firmware current limiter (bam XL330): |(duty·vin − emf)/R| ≤ max_current
        ilim = R * p.max_current
        duty = clip(duty, (emf - ilim) / vs, (emf + ilim) / vs)
    s.duty = duty
    return duty


cdef void prepare(Params* P, Plan* plan, Py_ssize_t j, double dt) noexcept nogil:
    """Fill the derived fields of actuator j's P[j] for step size dt and its row of the plan, and its
    block's PL_BLOCK_KINDS (call after any change of P[j])."""
    cdef Params* p = &P[j]
    cdef double* blk = plan_block(plan, j)
    cdef int kinds = 0, i
    p._inertia = p.load_inertia + p.mass * p.length * p.length + p.arm_mass * p.length * p.length / 3.0 \
        + p.armature * p.gear * p.gear
    p._decay = 1.0 - exp(-dt / p.te) if p.te > 0 else 0.0
    # reciprocals of the divisors that do not change from step to step, and the pendulum's m·g·l
    p._inv_dt = 1.0 / dt
    p._inv_te = 1.0 / p.te if p.te > 0 else 0.0
    p._inv_thermal_r = 1.0 / p.thermal_r if p.thermal_r > 0 else 0.0
    p._inv_thermal_c = 1.0 / p.thermal_c if p.thermal_c != 0 else 0.0
    p._inv_lugre_ws = 1.0 / p.lugre_ws if p.lugre_ws != 0 else 0.0
    p._inv_dtheta_stribeck = 1.0 / p.dtheta_stribeck if p.dtheta_stribeck > 0 else 0.0
    p._gravity_torque = -(p.mass + 0.5 * p.arm_mass) * p.gravity * p.length
    p._counts_per_rad = p.encoder_counts / (2.0 * M_PI) if p.encoder_counts > 0 else 0.0
    p._rad_per_count = (2.0 * M_PI) / p.encoder_counts if p.encoder_counts > 0 else 0.0
    plan_row(p, blk + j % BLOCK, BLOCK)
    for i in range(BLOCK):
        kinds |= <int>blk[PL_KINDS * BLOCK + i]
    blk[PL_BLOCK_KINDS * BLOCK] = kinds


cdef inline double* plan_block(const Plan* plan, Py_ssize_t j) noexcept nogil:
    """The plan's columns of the block holding actuator j (plan.h)."""
    return plan.col + (j // BLOCK) * (HIL_PLAN_COLUMNS * BLOCK)


cdef inline void plan_row(const Params* p, double* c, Py_ssize_t st) noexcept nogil:
    """The plan's columns of one actuator (plan.h), from its prepared Params; c[k·st] is column k."""
    c[PL_GEAR * st] = p.gear
    c[PL_GRAVITY_TORQUE * st] = p._gravity_torque
    c[PL_DAMPING_B1 * st] = p.damping_b1
    c[PL_DAMPING_B2 * st] = p.damping_b2
    c[PL_DAMPING_B3 * st] = p.damping_b3
    c[PL_INERTIA * st] = p._inertia
    c[PL_INV_DT * st] = p._inv_dt
    c[PL_EULER * st] = p.integrator == INTEGRATOR_EULER
    c[PL_BUDGET * st] = p.budget != 0
    c[PL_STRIBECK * st] = p.dtheta_stribeck > 0
    c[PL_QUADRATIC * st] = p.budget_quadratic != 0
    c[PL_KC * st] = p.friction_base
    c[PL_KV * st] = p.friction_viscous
    c[PL_KCS * st] = p.friction_stribeck
    c[PL_KL * st] = p.load_friction_base
    c[PL_KLS * st] = p.load_friction_stribeck
    c[PL_KM * st] = p.load_friction_motor
    c[PL_KE * st] = p.load_friction_external
    c[PL_KMS * st] = p.load_friction_motor_stribeck
    c[PL_KES * st] = p.load_friction_external_stribeck
    c[PL_KMQ * st] = p.load_friction_motor_quad
    c[PL_KEQ * st] = p.load_friction_external_quad
    c[PL_BRISTLE * st] = p.lugre_s0 > 0 and p.law != LAW_TORQUE
    c[PL_MOTORCONST * st] = p.motorconst
    c[PL_INDUCTIVE * st] = p.te > 0
    c[PL_TE * st] = p.te
    c[PL_INV_TE * st] = p._inv_te
    c[PL_DECAY * st] = p._decay
    c[PL_DIDT_LIMITED * st] = p.didt_max > 0
    c[PL_DIDT_MAX * st] = p.didt_max
    c[PL_THERMAL * st] = p.thermal_r > 0
    c[PL_INV_THERMAL_R * st] = p._inv_thermal_r
    c[PL_INV_THERMAL_C * st] = p._inv_thermal_c
    c[PL_AMBIENT * st] = p.ambient
    c[PL_ELECTRICAL * st] = p.law != LAW_TORQUE
    c[PL_TAU_LIMITED * st] = p.tau_max > 0
    c[PL_TAU_MAX * st] = p.tau_max
    c[PL_DERATE * st] = p.derate_i_rated > 0
    c[PL_DERATE_I_RATED * st] = p.derate_i_rated
    c[PL_DERATE_I_SAFE * st] = p.derate_i_safe
    c[PL_DERATE_T1 * st] = p.derate_t1
    c[PL_DERATE_T2 * st] = p.derate_t2
    c[PL_DERATE_INV_SPAN * st] = 1.0 / (p.derate_t2 - p.derate_t1) if p.derate_t2 != p.derate_t1 else 0.0
    c[PL_EFFICIENCY * st] = p.efficiency
    c[PL_COG * st] = p.cog_amplitude != 0
    c[PL_COG_AMPLITUDE * st] = p.cog_amplitude
    c[PL_LUGRE * st] = p.lugre_s0 > 0
    c[PL_LUGRE_S0 * st] = p.lugre_s0
    c[PL_LUGRE_S1 * st] = p.lugre_s1
    c[PL_LUGRE_TC * st] = p.lugre_tc
    c[PL_LUGRE_TS * st] = p.lugre_ts
    c[PL_COG_POLES * st] = p.cog_poles
    c[PL_COG_PHASE * st] = p.cog_phase
    c[PL_Q_OFFSET * st] = p.q_offset
    c[PL_INV_LUGRE_WS * st] = p._inv_lugre_ws
    c[PL_INV_DTHETA_STRIBECK * st] = p._inv_dtheta_stribeck
    c[PL_ALPHA * st] = p.alpha
    c[PL_DC_LAW * st] = p.law <= LAW_VELOCITY
    c[PL_LAW_POSITION * st] = p.law == LAW_POSITION
    c[PL_LAW_VELOCITY * st] = p.law == LAW_VELOCITY
    c[PL_KP * st] = p.kp
    c[PL_KI * st] = p.ki
    c[PL_KD * st] = p.kd
    c[PL_SLEW * st] = p.slew
    c[PL_IMAX * st] = p.imax
    c[PL_VMAX * st] = p.vmax
    c[PL_VMODE * st] = p.law <= LAW_DXL_PWM or p.law == LAW_DXL
    c[PL_LAW_DXL_PWM * st] = p.law == LAW_DXL_PWM
    c[PL_LAW_EROB_PD * st] = p.law == LAW_EROB_PD
    c[PL_LAW_CURRENT * st] = p.law == LAW_CURRENT
    c[PL_LAW_TORQUE * st] = p.law == LAW_TORQUE
    c[PL_LAW_DXL * st] = p.law == LAW_DXL
    c[PL_CTRL_LIMITED * st] = p.ctrl_limited != 0
    c[PL_CTRL_LO * st] = p.ctrl_lo
    c[PL_CTRL_HI * st] = p.ctrl_hi
    c[PL_DUTY_GAIN * st] = p.error_gain * p.fw_kp
    c[PL_MAX_DUTY * st] = p.max_duty
    c[PL_MAX_CURRENT * st] = p.max_current
    c[PL_PD_KP * st] = p.pd_kp
    c[PL_PD_D * st] = p.pd_damping * sqrt(p.pd_kp)
    c[PL_MAX_AMPS * st] = p.max_amps
    c[PL_VS * st] = p.supply_v if isnan(p.supply_override) else p.supply_override
    c[PL_INV_VS * st] = 1.0 / c[PL_VS * st]   # ±inf for no supply: dxl_pwm's limiter bounds stay infinite
    c[PL_STATIC_FLAGS * st] = ((FAULT_ENCODER_NOISE if p.encoder_noise > 0 else 0)
                               + (FAULT_ENCODER_STUCK if p.encoder_stuck else 0)
                               + (0 if isnan(p.supply_override) else FAULT_SUPPLY))
    c[PL_ENC_STUCK * st] = p.encoder_stuck != 0
    c[PL_ENC_SLIP * st] = p.encoder_slip
    c[PL_ENC_NOISE * st] = p.encoder_noise
    c[PL_ENC_QUANTIZED * st] = p.encoder_counts > 0
    c[PL_COUNTS_PER_RAD * st] = p._counts_per_rad
    c[PL_RAD_PER_COUNT * st] = p._rad_per_count
    c[PL_RESISTANCE * st] = p.resistance
    c[PL_TEMPCOEF * st] = p.tempcoef
    c[PL_REFTEMP * st] = p.reftemp
    c[PL_TEMP_LIMIT * st] = p.temp_limit
    c[PL_SHUT_OVERHEAT * st] = (p.shutdown_mask & FAULT_OVERHEAT) != 0
    c[PL_SHUT_OVERLOAD * st] = (p.shutdown_mask & FAULT_OVERLOAD) != 0
    c[PL_OC_FRACTION * st] = p.oc_fraction
    c[PL_OC_TIME * st] = p.oc_time
    c[PL_OC_CURRENT * st] = p.oc_current
    c[PL_OC_DURATION * st] = p.oc_duration
    c[PL_OL_CURRENT * st] = p.overload_current
    c[PL_OL_TIME * st] = p.overload_time
    c[PL_KINDS * st] = kinds(p)


cdef inline int kinds(const Params* p) noexcept nogil:
    """What actuator p's step computes (plan.h HIL_* kinds; from its prepared Params, as the plan's flags)."""
    cdef bint voltage_law = p.law <= LAW_DXL_PWM or p.law == LAW_DXL
    cdef bint stribeck = p.budget != 0 and p.dtheta_stribeck > 0
    return ((NEED_POW if stribeck and p.alpha != 1.0 and p.alpha != 2.0 else 0)
            | (NEED_ZOH if p.lugre_s0 > 0 and p.law != LAW_TORQUE else 0)
            | (LAWS_DXL if p.law == LAW_DXL else 0) | (LAWS_DXL_PWM if p.law == LAW_DXL_PWM else 0)
            | (LAWS_CURRENT if p.law == LAW_EROB_PD or p.law == LAW_CURRENT else 0)
            | (USES_DC_LAW if p.law <= LAW_VELOCITY else 0)
            | (USES_QS if voltage_law and not p.te > 0 else 0)
            | (USES_DERATE if p.derate_i_rated > 0 else 0)
            | (USES_LUGRE if p.lugre_s0 > 0 else 0)
            | (USES_NOISE if p.encoder_noise > 0 else 0)
            | (USES_OC if p.oc_fraction > 0 else 0)
            | (USES_OVERLOAD if p.overload_current > 0 else 0)
            | (USES_BUDGET if p.budget != 0 else 0)
            | (USES_BAM if p.integrator != INTEGRATOR_EULER else 0)
            | (USES_COG if p.cog_amplitude != 0 else 0)
            | (USES_PENDULUM if p._gravity_torque != 0 else 0)
            | (USES_STRIBECK if stribeck else 0))


cdef inline void noise_polar(Block* b, int j) noexcept nogil:
    """Marsaglia's polar method for lane j from its stream's current state: pairs until one falls inside
    the unit circle (noise.h `hil_noise_pass` draws a whole vector's first pairs; this, a rejected lane's
    next ones and a partial vector's lanes)."""
    cdef double x, y, r
    while True:
        x = 2.0 * hil_uniform(&b.rng[j]) - 1.0
        y = 2.0 * hil_uniform(&b.rng[j]) - 1.0
        r = x * x + y * y
        if 0.0 < r < 1.0:
            break
    b.gauss_x[j] = x
    b.gauss_y[j] = y
    b.gauss_r[j] = r
    b.gauss_log[j] = r


cdef void step_all(const Params* p, const Plan* plan, State* s, const Input* inp, Py_ssize_t n,
                   double dt) noexcept nogil:
    """Advance n independent actuators by dt, a block of BLOCK actuators at a time: its State fields to
    the lanes, step_block (in the copy compiled for the active path: isa.h), back to the records; `plan`
    is the one prepare() keeps for p."""
    cdef double lanes_buf[LANE_DOUBLES]
    cdef Block* b = lanes(lanes_buf)
    cdef Py_ssize_t j0 = 0
    cdef int m, path = math_path(n)
    while j0 < n:
        m = <int>(n - j0 if n - j0 < BLOCK else BLOCK)
        lanes_load(b, &s[j0], m)
        inputs_load(b, &inp[j0], m)
        hil_step(b, plan_block(plan, j0), &p[j0], &s[j0], m, padded(m), dt, path)
        lanes_store(b, &s[j0], m)
        j0 += m


cdef inline int math_path(Py_ssize_t n) noexcept nogil:
    """The vector-math path of a rig of n actuators: hil_simd, libm's below HIL_SIMD_MIN_N."""
    return hil_simd if n >= HIL_SIMD_MIN_N else 0


cdef inline int padded(int m) noexcept nogil:
    """m lanes rounded up to whole vectors (LANE_PAD) for isa.h's AVX2 copies: the lane passes run their
    vectorized loop for a partial block too, not GCC's scalar remainder, where each of their selects costs
    moves between vector and integer registers (callgrind, N = 1: 2491 → 1809 instructions per
    actuator-step). m itself for the baseline copy, which runs the passes lane by lane (isa.h): padding
    lanes would only be more lanes to compute."""
    return (m + LANE_PAD - 1) & ~(LANE_PAD - 1) if hil_simd >= HIL_SIMD_AVX2 else m


cdef inline void lanes_load(Block* b, const State* s, int m) noexcept nogil:
    """The State fields step_block's lanes hold, from the records of m actuators; the padding lanes
    [m, padded(m)) of those and of the inputs zeroed (their results are never stored: zeros keep them
    free of denormals, which would slow the vector arithmetic; the passes write the rest of the block's
    arrays before they read them)."""
    cdef const State* st
    cdef int j, row, g = m & ~(LANE_PAD - 1)
    cdef double* rows = <double*>b
    if g < m:   # the last vector is partial: zeroed whole (one store per row), its actuators' lanes below
        for row in range(<int>((<char*>&b.sin_x[0] - <char*>b) // (BLOCK * sizeof(double)))):
            memset(&rows[row * BLOCK + g], 0, LANE_PAD * sizeof(double))
    for j in range(m):
        st = &s[j]
        b.k[j] = <double>st.k
        b.theta[j] = st.theta
        b.omega[j] = st.omega
        b.bristle[j] = st.bristle
        b.current[j] = st.current
        b.temp_rise[j] = st.temp_rise
        b.slew_u[j] = st.slew_u
        b.integral[j] = st.integral
        b.theta_meas[j] = st.theta_meas
        b.enc_offset[j] = st.enc_offset
        b.has_spare[j] = <double>st.has_spare
        b.gauss_spare[j] = st.gauss_spare
        b.rng[j] = st.rng
        b.oc_active[j] = <double>st.oc_active
        b.oc_timer[j] = st.oc_timer
        b.ol_timer[j] = st.ol_timer
        b.shutdown[j] = <double>st.shutdown
        b.lat_overheat[j] = (st.latched & FAULT_OVERHEAT) != 0
        b.lat_overload[j] = (st.latched & FAULT_OVERLOAD) != 0
        b.flags[j] = <double>st.fault_flags
        b.temperature[j] = st.temperature
        b.torque[j] = st.torque
        b.friction[j] = st.friction_torque
        b.i_out[j] = st.i_out
        b.v_out[j] = st.v_out


cdef inline void lanes_store(const Block* b, State* s, int m) noexcept nogil:
    """The lanes back to the records of m actuators (lanes_load's fields)."""
    cdef State* st
    cdef int j
    for j in range(m):
        st = &s[j]
        st.k = <int64_t>b.k[j]
        st.theta = b.theta[j]
        st.omega = b.omega[j]
        st.bristle = b.bristle[j]
        st.current = b.current[j]
        st.temp_rise = b.temp_rise[j]
        st.slew_u = b.slew_u[j]
        st.integral = b.integral[j]
        st.theta_meas = b.theta_meas[j]
        st.enc_offset = b.enc_offset[j]
        st.has_spare = <int64_t>b.has_spare[j]
        st.gauss_spare = b.gauss_spare[j]
        st.rng = b.rng[j]
        st.oc_active = <int64_t>b.oc_active[j]
        st.oc_timer = b.oc_timer[j]
        st.ol_timer = b.ol_timer[j]
        st.shutdown = <int64_t>b.shutdown[j]
        st.latched = (<int64_t>b.lat_overheat[j]) * FAULT_OVERHEAT | (<int64_t>b.lat_overload[j]) * FAULT_OVERLOAD
        st.fault_flags = <int64_t>b.flags[j]
        st.temperature = b.temperature[j]
        st.torque = b.torque[j]
        st.friction_torque = b.friction[j]
        st.i_out = b.i_out[j]
        st.v_out = b.v_out[j]


cdef inline void inputs_load(Block* b, const Input* inp, int m) noexcept nogil:
    cdef int j
    for j in range(m):
        b.cmd[j] = inp[j].u
        b.enable[j] = inp[j].enable
        b.ext[j] = inp[j].external_torque


cdef inline void step_block(void* lanes, const double* P, const void* params, void* states, int m, int mv,
                            double dt, int path) noexcept nogil:
    """Advance the m ≤ BLOCK actuators of a block by dt on their lanes (lanes_load), with the step's
    inputs in them (cmd, enable, ext); the lane passes run mv = padded(m) lanes (an argument: where GCC
    saw it computed, a multiple of 4, it stopped vectorizing the baseline copy's passes); P = the block's plan (plan.h), params and states its records (the
    Dynamixel firmware's fields). Four passes:
    1. the arguments of every transcendental, from the pre-step state (args.h `hil_args_pass`,
       vectorized across actuators; the noise generator's first pairs: noise.h `hil_noise_pass`, vectorized
       too, its rejected ones and a partial vector's per actuator: `noise_polar`);
    2. their sines, exponentials, logarithms and powers, a whole block per call (vmath.h: libmvec's sin
       and log and vexp.h's exp where the CPU has AVX2 and FMA and the rig has HIL_SIMD_MIN_N actuators
       or more, else libm; within round-off of each other);
    3. sensing and faults (sense.h `hil_sense_pass`), the firmware laws (law.h: `hil_law_pass`, and
       `hil_dxl_pwm_pass`, `hil_current_law_pass` for a block that holds such laws), all vectorized across
       actuators, but the Dynamixel firmware's (LAW_DXL: `dxl_firmware`, per actuator); then the motor, vectorized too (motor.h `hil_motor_pass`), the latches watching its
       current and the step's fault bits (sense.h `hil_fault_latch_pass`), the bristle hold's exp(a·dt);
    4. load, friction budget, integration and the LuGre bristle update (load.h `hil_load_pass`, over
       the plan's columns and the block's arrays: vectorized across actuators).
    Each actuator's result depends only on its own parameters, state and input; `path` is the vector
    math's (math_path of the rig). (Untyped pointers: isa.h declares this function before Cython
    defines the structs.)"""
    cdef Block* b = <Block*>lanes
    cdef const Params* p = <const Params*>params
    cdef State* s = <State*>states
    cdef HilLawOut law
    cdef int j, g, noise, need = <int>P[PL_BLOCK_KINDS * BLOCK]
    cdef double vs
    law.vmode, law.off, law.V, law.i = &b.vmode[0], &b.off[0], &b.V[0], &b.i[0]
    law.f, law.R, law.G, law.T, law.Ld = &b.f[0], &b.R[0], &b.G[0], &b.T[0], &b.Ld[0]
    hil_args_pass(P, BLOCK, mv, b.theta, b.omega, b.sin_x, b.exp_x, b.pow_x, b.pow_a, b.use_pow)
    if need & USES_NOISE:
        # the first pairs of whole vectors in one vectorized pass; a partial vector's lanes per actuator
        # (a lone actuator's step would wait on four lanes of emulated 64-bit multiplies)
        g = m & ~(LANE_PAD - 1)
        noise = 0
        if g:
            noise = hil_noise_pass(P, BLOCK, g, b.k, b.has_spare, b.rng, b.gauss_x, b.gauss_y, b.gauss_r,
                                   b.gauss_log, b.gauss_retry)
        if noise & HIL_NOISE_RETRY:
            for j in range(g):
                if b.gauss_retry[j]:
                    noise_polar(b, j)
        for j in range(g, mv):      # no pair unless drawn (r = 1: no denormals in the scale pass)
            b.gauss_x[j] = 0.0
            b.gauss_y[j] = 0.0
            b.gauss_r[j] = 1.0
            b.gauss_log[j] = 1.0
            if j < m and hil_noise_draws(P, BLOCK, j, b.k, b.has_spare):
                noise_polar(b, j)
                noise |= HIL_NOISE_DREW
        if noise & HIL_NOISE_DREW:
            need |= NEED_LOG
    if need & NEED_LOG:             # first: the measured position, pass 3's first need, waits on it
        hil_vlog(b.gauss_log, m, path)
        hil_gauss_scale_pass(mv, b.gauss_log, b.gauss_r)
    # a sine or exponential no lane of the block uses is left as its argument (its selects drop it)
    if need & USES_COG:
        hil_vsin(b.sin_x, m, path)
    if need & USES_PENDULUM:
        hil_vsin(b.sin_x + BLOCK, m, path)
    if need & NEED_POW:
        hil_vpow(b.pow_x, b.pow_a, m, path)
        for j in range(mv):
            b.exp_x[BLOCK + j] = hil_sel(b.use_pow[j], -b.pow_x[j], b.exp_x[BLOCK + j])
    if need & USES_LUGRE:
        hil_vexp(b.exp_x, m, path)
    if need & USES_STRIBECK:
        hil_vexp(b.exp_x + BLOCK, m, path)
    hil_sense_pass(P, BLOCK, mv, dt, b.theta, b.k, b.gauss_x, b.gauss_y, b.gauss_r,
                   b.temp_rise, b.lat_overheat, b.lat_overload, b.enable, b.theta_meas, b.enc_offset,
                   b.has_spare, b.gauss_spare, b.oc_active, b.shutdown, b.flags, b.overheat, b.open,
                   b.R, b.G, b.T, b.temperature, b.enabled, need)
    hil_law_pass(P, BLOCK, mv, dt, b.cmd, b.theta_meas, b.omega, b.open, b.enabled, b.slew_u, b.integral,
                 b.u, b.Ld, b.vmode, b.off, b.V, b.i, b.f, b.torque, need)
    if need & LAWS_DXL_PWM:
        hil_dxl_pwm_pass(P, BLOCK, mv, b.u, b.theta_meas, b.Ld, b.R, b.V)
    if need & LAWS_CURRENT:
        hil_current_law_pass(P, BLOCK, mv, b.u, b.theta_meas, b.omega, b.Ld, b.R, b.G, b.open, b.enabled, b.V, b.i,
                             b.f)
    if need & LAWS_DXL:
        for j in range(m):
            if P[PL_LAW_DXL * BLOCK + j] != 0:
                vs = P[PL_VS * BLOCK + j]
                b.V[j] = vs * dxl_firmware(&p[j], &s[j], b.u[j], b.theta_meas[j], b.omega[j], vs, b.R[j],
                                           P[PL_MOTORCONST * BLOCK + j] * b.Ld[j], b.enabled[j] != 0, dt)
    hil_motor_pass(P, BLOCK, mv, dt, law, b.sin_x, b.exp_x, b.bristle, b.current,
                   b.temp_rise, b.torque, b.i_out, b.v_out, b.derated, b.zoh_a, b.zoh_ea, b.zoh_inv_a, need)
    hil_fault_latch_pass(P, BLOCK, mv, dt, b.i_out, b.derated, b.overheat, b.oc_active, b.oc_timer, b.ol_timer,
                         b.lat_overheat, b.lat_overload, b.flags, need)
    if need & NEED_ZOH:
        hil_vexp(b.zoh_ea, m, path)
    hil_load_pass(P, BLOCK, mv, dt, b.sin_x + BLOCK, b.exp_x + BLOCK, b.zoh_a, b.zoh_ea, b.zoh_inv_a,
                  b.Ld, b.ext, b.torque, b.theta, b.omega, b.bristle, b.friction, need)
    for j in range(mv):
        b.k[j] += 1.0


cdef Params _zero_params() noexcept:
    cdef Params p
    memset(&p, 0, sizeof(Params))
    p.efficiency = 1.0
    p.gear = 1.0
    p.oc_time = INFINITY
    p.oc_current = INFINITY
    p.supply_override = NAN
    p.max_duty = 1.0
    p.seed = 1
    p.shutdown_mask = FAULT_OVERHEAT | FAULT_OVERLOAD
    p.dxl_mode = DXL_POSITION
    p.dxl_goal_duty = 1.0
    return p


def default_params():
    """Every kernel parameter with its neutral value (a dict; see core.pxd for names and units)."""
    return _zero_params()


def _per_step(x, Py_ssize_t T, Py_ssize_t n, double default):
    """(T, n) float64 view (no copy: broadcast strides) of None (default), a scalar, a (T,) column or (T, n)."""
    a = np.asarray(default if x is None else x, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    return np.broadcast_to(a, (T, n))


def friction_budget(dict params, tau_m, tau_e, double omega):
    """bam's friction budget τ_fm [N·m] for arrays of motor and external torque at velocity omega."""
    cdef Params p = params
    cdef double block[HIL_PLAN_COLUMNS * BLOCK]
    cdef Plan plan
    memset(block, 0, sizeof(block))
    plan.col = block
    prepare(&p, &plan, 0, 1.0)
    tm = np.asarray(tau_m, dtype=np.float64)
    te = np.asarray(tau_e, dtype=np.float64)
    tm, te = np.broadcast_arrays(tm, te)
    out = np.empty(tm.shape)
    cdef double[::1] a = np.ascontiguousarray(tm).ravel(), b = np.ascontiguousarray(te).ravel()
    cdef double[::1] o = out.reshape(-1)
    cdef Py_ssize_t j
    for j in range(a.shape[0]):
        o[j] = hil_budget(block, BLOCK, 0, a[j], b[j], omega, stribeck(&p, omega))
    return out


OUTPUTS = ("theta", "omega", "theta_meas", "torque", "friction_torque", "current", "voltage",
           "temperature", "fault_flags")


cdef class Kernel:
    """N actuators stepped together at a fixed dt [s].

    `set_params(j, dict)` takes a complete dict (start from `default_params()`); `set_state(j, …)`
    sets the joint state; `step(u, enable, external_torque)` advances one step; `run(...)` advances
    T steps in one nogil call and returns the pre-step state and what each step produced.
    """
    def __cinit__(self, Py_ssize_t n, double dt):
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not dt > 0:
            raise ValueError(f"dt must be > 0 s, got {dt}")
        self.n = n
        self.dt = dt
        self.params = <Params*> calloc(n, sizeof(Params))
        self.states = <State*> calloc(n, sizeof(State))
        self.inputs = <Input*> calloc(n, sizeof(Input))
        # at a cache line: every column of a block starts one (the lane passes load whole vectors of
        # them, which calloc's 16-byte alignment split across two lines in one process in two)
        cdef size_t plan_bytes = (n + BLOCK - 1) // BLOCK * HIL_PLAN_COLUMNS * BLOCK * sizeof(double)
        self.plan.col = <double*> aligned_alloc(64, plan_bytes)
        if not self.params or not self.states or not self.inputs or not self.plan.col:
            raise MemoryError()
        memset(self.plan.col, 0, plan_bytes)
        cdef Py_ssize_t j
        for j in range(n):
            self.params[j] = _zero_params()
            prepare(self.params, &self.plan, j, dt)
            self.states[j].rng = 1
            self.inputs[j].enable = 1.0

    def __dealloc__(self):
        free(self.params)
        free(self.states)
        free(self.inputs)
        free(self.plan.col)

    def _check(self, Py_ssize_t j):
        if j < 0 or j >= self.n:
            raise IndexError(f"actuator index {j} out of range 0..{self.n - 1}")

    def set_params(self, Py_ssize_t j, dict values):
        """Replace actuator j's parameters; `values` must hold every field of `default_params()`."""
        self._check(j)
        self.params[j] = values
        prepare(self.params, &self.plan, j, self.dt)
        if self.states[j].k == 0:
            self.states[j].rng = self.params[j].seed if self.params[j].seed else 1

    def get_params(self, Py_ssize_t j):
        self._check(j)
        return self.params[j]

    def set_state(self, Py_ssize_t j, theta=None, omega=None, temperature=None, current=None,
                  clear_latches=False):
        """Set the joint state [rad, rad/s], winding temperature [°C, absolute] or current [A].

        `clear_latches` resets the open-circuit, overheating and overload latches and the encoder slip.
        """
        self._check(j)
        if clear_latches:
            self.states[j].oc_active = 0
            self.states[j].oc_timer = 0.0
            self.states[j].shutdown = 0
            self.states[j].latched = 0
            self.states[j].ol_timer = 0.0
            self.states[j].enc_offset = 0.0
        if theta is not None:
            self.states[j].theta = theta
            self.states[j].traj_valid = 0
        if omega is not None:
            self.states[j].omega = omega
        if temperature is not None:
            self.states[j].temp_rise = temperature - self.params[j].ambient
        if current is not None:
            self.states[j].current = current

    def get_state(self, Py_ssize_t j):
        self._check(j)
        return self.states[j]

    def reset(self):
        """Back to k = 0 with every state zero (the noise stream restarts from its seed)."""
        cdef Py_ssize_t j
        for j in range(self.n):
            memset(&self.states[j], 0, sizeof(State))
            self.states[j].rng = self.params[j].seed if self.params[j].seed else 1

    @property
    def time(self):
        return self.states[0].k * self.dt

    def step(self, u, enable=None, external_torque=None):
        """Advance one step; arguments are scalars or length-n sequences."""
        cdef Py_ssize_t j
        if isinstance(u, float) and enable is None and external_torque is None:
            for j in range(self.n):   # fast path: one command for every actuator
                self.inputs[j].u = u
                self.inputs[j].enable = 1.0
                self.inputs[j].external_torque = 0.0
        else:
            uu = np.broadcast_to(np.asarray(u, dtype=np.float64), (self.n,))
            ee = np.broadcast_to(np.asarray(1.0 if enable is None else enable, dtype=np.float64), (self.n,))
            xx = np.broadcast_to(np.asarray(0.0 if external_torque is None else external_torque,
                                            dtype=np.float64), (self.n,))
            for j in range(self.n):
                self.inputs[j].u = uu[j]
                self.inputs[j].enable = ee[j]
                self.inputs[j].external_torque = xx[j]
        with nogil:
            step_all(self.params, &self.plan, self.states, self.inputs, self.n, self.dt)

    def run(self, u, enable=None, external_torque=None, record=True):
        """Advance T steps with per-step inputs of shape (T, n) (or (T,) broadcast over actuators).

        Returns a dict of (T, n) arrays, row k holding the state *before* step k (`theta`, `omega`,
        `temperature`) and what step k produced (`theta_meas`, `torque`, `friction_torque`,
        `current`, `voltage`, `fault_flags`). With record=False nothing is kept (benchmarks); with
        record="state" only `theta` and `omega` (rollouts scored on the joint state).
        """
        if record not in (True, False, "state"):
            raise ValueError(f"record must be True, False or 'state', got {record!r}")
        cdef Py_ssize_t T = np.shape(u)[0]
        cdef const double[:, :] uu = _per_step(u, T, self.n, 0.0)
        cdef const double[:, :] ee = _per_step(enable, T, self.n, 1.0)
        cdef const double[:, :] xx = _per_step(external_torque, T, self.n, 0.0)
        cdef Py_ssize_t rec_state = 1 if record else 0
        cdef Py_ssize_t rec = 1 if record is True else 0
        out = {name: np.empty((T if (rec or (rec_state and name in ("theta", "omega"))) else 0, self.n))
               for name in OUTPUTS}
        cdef double[:, ::1] o_th = out["theta"], o_w = out["omega"], o_thm = out["theta_meas"]
        cdef double[:, ::1] o_tq = out["torque"], o_tf = out["friction_torque"], o_i = out["current"]
        cdef double[:, ::1] o_v = out["voltage"], o_T = out["temperature"], o_f = out["fault_flags"]
        cdef Py_ssize_t k, j, j0
        cdef int m, path = math_path(self.n)
        cdef double lanes_buf[LANE_DOUBLES]
        cdef Block* b = lanes(lanes_buf)
        cdef const double* P
        with nogil:
            # A block of actuators at a time through all T steps (they are independent: the same
            # results as whole-rig steps), on its lanes: its records to the lanes once, back once, its
            # plan and lanes in L1 throughout instead of a rig larger than L2 streamed from L3 every step.
            j0 = 0
            while j0 < self.n:
                m = <int>min(BLOCK, self.n - j0)
                P = plan_block(&self.plan, j0)
                lanes_load(b, &self.states[j0], m)
                for k in range(T):
                    for j in range(m):
                        b.cmd[j] = uu[k, j0 + j]
                        b.enable[j] = ee[k, j0 + j]
                        b.ext[j] = xx[k, j0 + j]
                        if rec_state:
                            o_th[k, j0 + j] = b.theta[j]
                            o_w[k, j0 + j] = b.omega[j]
                    hil_step(b, P, &self.params[j0], &self.states[j0], m, padded(m), self.dt, path)
                    if not rec:
                        continue
                    for j in range(m):
                        o_thm[k, j0 + j] = b.theta_meas[j]
                        o_tq[k, j0 + j] = b.torque[j]
                        o_tf[k, j0 + j] = b.friction[j]
                        o_i[k, j0 + j] = b.i_out[j]
                        o_v[k, j0 + j] = b.v_out[j]
                        o_T[k, j0 + j] = b.temperature[j]
                        o_f[k, j0 + j] = b.flags[j]
                lanes_store(b, &self.states[j0], m)
                if T > 0:
                    for j in range(m):   # the last step's inputs, as step() leaves them
                        self.inputs[j0 + j].u = b.cmd[j]
                        self.inputs[j0 + j].enable = b.enable[j]
                        self.inputs[j0 + j].external_torque = b.ext[j]
                j0 += m
        return out
