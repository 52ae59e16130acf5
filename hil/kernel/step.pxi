# The step (core.pyx includes this): step_all advances a rig a block of actuators at a time on their
# lanes (struct-of-arrays), step_block runs the lane passes of the C headers on them.

cdef extern from "select.h" nogil:
    double hil_sel(int c, double a, double b)

cdef extern from "args.h" nogil:
    void hil_args_pass(const double* P, Py_ssize_t st, int m, const double* theta, const double* omega,
                       const double* theta_m, const double* omega_m, double* sin_x, double* exp_x, double* pow_x,
                       double* pow_a, int64_t* use_pow)

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
                        double* i2t, double* housing, double* temperature, double* torque, double* i_out, double* v_out, double* derated, double* zoh_a,
                        double* zoh_ea, double* zoh_inv_a, double* dfdw, int uses)



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
    double housing_rise[BLOCK]
    double i2t[BLOCK]
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
    double dfdw[BLOCK]          # the actuator torque's derivative in ω (implicitfast: motor.h → load.h)
    # … and with backlash the motor side's angle and velocity at the output's scale, θ + gap, ω + gap rate
    double theta_m[BLOCK]
    double omega_m[BLOCK]
    # the extended mechanics' state (plan.pxi `plan_mech`), held only for a block that uses them (lanes_load `mech`;
    # step_block zeroes their padding lanes)
    double gap[BLOCK]           # backlash: motor side − output [rad], its rate [rad/s]
    double gap_rate[BLOCK]
    double dwell[BLOCK]         # time the budget has held the joint [s]


# lanes(): a Block and its alignment fit in LANE_DOUBLES
assert sizeof(Block) + 63 <= LANE_DOUBLES * sizeof(double), "raise LANE_DOUBLES"


cdef inline Block* lanes(double* buf) noexcept nogil:
    # a Block at the first 64-byte boundary of buf (LANE_DOUBLES doubles): its rows' vectors never
    # straddle a cache line
    return <Block*>((<size_t>buf + 63) & ~(<size_t>63))



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
    cdef double* mech
    while j0 < n:
        m = <int>(n - j0 if n - j0 < BLOCK else BLOCK)
        mech = plan_mech(plan, n) + MECH_STATE * j0 if <int>plan_block(plan, j0)[PL_BLOCK_KINDS * BLOCK] & USES_MECH_X else NULL
        lanes_load(b, &s[j0], m, mech)
        inputs_load(b, &inp[j0], m, dt)
        hil_step(b, plan_block(plan, j0), &p[j0], &s[j0], m, padded(m), dt, path)
        lanes_store(b, &s[j0], m, mech)
        j0 += m


cdef inline int math_path(Py_ssize_t n) noexcept nogil:
    """The vector-math path of a rig of n actuators: hil_simd, libm's below HIL_SIMD_MIN_N."""
    return hil_simd if n >= HIL_SIMD_MIN_N else 0


cdef inline int padded(int m) noexcept nogil:
    """m lanes rounded up to whole vectors (LANE_PAD) for isa.h's AVX2 copies: the lane passes run their
    vectorized loop for a partial block too, not GCC's scalar remainder, where each of their selects costs
    moves between vector and integer registers. m itself for the baseline copy, which runs the passes lane by lane (isa.h): padding
    lanes would only be more lanes to compute."""
    return (m + LANE_PAD - 1) & ~(LANE_PAD - 1) if hil_simd >= HIL_SIMD_AVX2 else m


cdef inline void lanes_load(Block* b, const State* s, int m, const double* mech) noexcept nogil:
    """The State fields step_block's lanes hold, from the records of m actuators; the padding lanes
    [m, padded(m)) of those and of the inputs zeroed (their results are never stored: zeros keep them
    free of denormals, which would slow the vector arithmetic; the passes write the rest of the block's
    arrays before they read them). The extended mechanics' state from `mech` (plan_mech's, at the first
    of the m actuators; NULL where the block does not use them: step_block zeroes their padding lanes)."""
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
        b.housing_rise[j] = st.housing_rise
        b.i2t[j] = st.i2t
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
    if mech != NULL:
        for j in range(m):
            b.gap[j] = mech[MECH_STATE * j + MECH_GAP]
            b.gap_rate[j] = mech[MECH_STATE * j + MECH_GAP_RATE]
            b.dwell[j] = mech[MECH_STATE * j + MECH_DWELL]


cdef inline void lanes_store(const Block* b, State* s, int m, double* mech) noexcept nogil:
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
        st.housing_rise = b.housing_rise[j]
        st.i2t = b.i2t[j]
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
    if mech != NULL:
        for j in range(m):
            mech[MECH_STATE * j + MECH_GAP] = b.gap[j]
            mech[MECH_STATE * j + MECH_GAP_RATE] = b.gap_rate[j]
            mech[MECH_STATE * j + MECH_DWELL] = b.dwell[j]


cdef inline void inputs_load(Block* b, const Input* inp, int m, double dt) noexcept nogil:
    cdef int j
    for j in range(m):
        b.cmd[j] = inp[j].u
        b.enable[j] = inp[j].enable
        b.ext[j] = inp[j].external_torque
        hand_load(b, &inp[j].hand, j, dt)


cdef inline void hand_load(Block* b, const Hand* h, int j, double dt) noexcept nogil:
    """A hand's torque joins lane j's external torque, from the state on the lanes before the step."""
    if h.stiffness > 0.0:
        b.ext[j] += hand_torque(h, b.theta[j], b.omega[j], b.k[j] * dt)


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
       actuators, but the Dynamixel and Feetech firmware's (LAW_DXL: `dxl_firmware`; LAW_STS_PWM, LAW_STS:
       feetech.pxi; per actuator); then the motor, vectorized too (motor.h `hil_motor_pass`), the latches watching its
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
    cdef double* theta_m = b.theta      # the motor side (cogging, back-EMF, LuGre): the output's but with backlash
    cdef double* omega_m = b.omega
    law.vmode, law.off, law.V, law.i = &b.vmode[0], &b.off[0], &b.V[0], &b.i[0]
    law.f, law.R, law.G, law.T, law.Ld = &b.f[0], &b.R[0], &b.G[0], &b.T[0], &b.Ld[0]
    if need & USES_MECH_X:
        for j in range(m, mv):      # padding lanes: zeros, as lanes_load leaves the other state rows
            b.gap[j] = 0.0
            b.gap_rate[j] = 0.0
            b.dwell[j] = 0.0
    if need & USES_BACKLASH:
        for j in range(mv):     # (a lane without backlash keeps the output's: its gap is not kept)
            b.theta_m[j] = hil_sel(P[PL_GAP * BLOCK + j] != 0, b.theta[j] + b.gap[j], b.theta[j])
            b.omega_m[j] = hil_sel(P[PL_GAP * BLOCK + j] != 0, b.omega[j] + b.gap_rate[j], b.omega[j])
        theta_m = b.theta_m
        omega_m = b.omega_m
    hil_args_pass(P, BLOCK, mv, b.theta, b.omega, theta_m, omega_m, b.sin_x, b.exp_x, b.pow_x, b.pow_a, b.use_pow)
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
    hil_law_pass(P, BLOCK, mv, dt, b.cmd, b.theta_meas, omega_m, b.open, b.enabled, b.slew_u, b.integral,
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
                                           P[PL_KT * BLOCK + j] * b.Ld[j], b.enabled[j] != 0, dt)
    if need & LAWS_STS:
        for j in range(m):
            if p[j].law == LAW_STS_PWM:
                b.V[j] = P[PL_VS * BLOCK + j] * sts_pwm_law(&p[j], &s[j], b.u[j], b.theta_meas[j],
                                                            b.enabled[j] != 0, dt)
            elif p[j].law == LAW_STS:
                b.V[j] = P[PL_VS * BLOCK + j] * sts_firmware(&p[j], &s[j], b.u[j], b.theta_meas[j], b.omega[j],
                                                             b.enabled[j] != 0, dt)
    hil_motor_pass(P, BLOCK, mv, dt, law, b.sin_x, b.exp_x, b.bristle, b.current,
                   b.temp_rise, b.i2t, b.housing_rise, b.temperature, b.torque, b.i_out, b.v_out, b.derated, b.zoh_a, b.zoh_ea, b.zoh_inv_a, b.dfdw, need)
    hil_fault_latch_pass(P, BLOCK, mv, dt, b.i_out, b.derated, b.overheat, b.oc_active, b.oc_timer, b.ol_timer,
                         b.lat_overheat, b.lat_overload, b.flags, need)
    if need & NEED_ZOH:
        hil_vexp(b.zoh_ea, m, path)
    hil_load_pass(P, BLOCK, mv, dt, b.sin_x + BLOCK, b.exp_x + BLOCK, b.zoh_a, b.zoh_ea, b.zoh_inv_a,
                  b.Ld, b.ext, b.torque, b.T, b.dfdw, b.theta, b.omega, b.bristle, b.gap, b.gap_rate, b.dwell,
                  b.friction, need)
    for j in range(mv):
        b.k[j] += 1.0
