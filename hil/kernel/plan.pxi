# The plan (plan.h; core.pyx includes this): `prepare` derives the Params fields and writes an actuator's
# row of the struct-of-arrays copy the lane passes read.

include "plan_columns.pxi"

cdef void prepare(Params* P, Plan* plan, Py_ssize_t j, double dt) noexcept nogil:
    """Fill the derived fields of actuator j's P[j] for step size dt and its row of the plan, and its
    block's PL_BLOCK_KINDS (call after any change of P[j])."""
    cdef Params* p = &P[j]
    cdef double* blk = plan_block(plan, j)
    cdef int kinds = 0, i
    p._inertia = p.load_inertia + p.mass * p.length * p.length + p.arm_mass * p.length * p.length / 3.0 \
        + p.armature * p.gear * p.gear
    p._motor_inertia = p.armature * p.gear * p.gear
    p._decay = 1.0 - exp(-dt / p.te) if p.te > 0 else 0.0
    # reciprocals of the divisors that do not change from step to step, and the pendulum's m·g·l
    p._inv_dt = 1.0 / dt
    p._inv_te = 1.0 / p.te if p.te > 0 else 0.0
    p._inv_thermal_r = 1.0 / p.thermal_r if p.thermal_r > 0 else 0.0
    p._inv_thermal_c = 1.0 / p.thermal_c if p.thermal_c != 0 else 0.0
    p._inv_thermal_r2 = 1.0 / p.thermal_r2 if p.thermal_r2 > 0 else 0.0
    p._inv_thermal_c2 = 1.0 / p.thermal_c2 if p.thermal_c2 > 0 else 0.0
    p._inv_lugre_ws = 1.0 / p.lugre_ws if p.lugre_ws != 0 else 0.0
    p._inv_dtheta_stribeck = 1.0 / p.dtheta_stribeck if p.dtheta_stribeck > 0 else 0.0
    p._i_sat = p.tau_max / p.kt if p.tau_max > 0 and p.kt > 0 else INFINITY
    p._i2t_budget = (p.peak_current * p.peak_current - p._i_sat * p._i_sat) * p.peak_time if p.peak_current > 0 else 0.0
    p._gravity_torque = -(p.mass + 0.5 * p.arm_mass) * p.gravity * p.length
    p._counts_per_rad = p.encoder_counts / (2.0 * M_PI) if p.encoder_counts > 0 else 0.0
    p._rad_per_count = (2.0 * M_PI) / p.encoder_counts if p.encoder_counts > 0 else 0.0
    plan_row(p, blk + j % BLOCK, BLOCK)
    for i in range(BLOCK):
        kinds |= <int>blk[PL_KINDS * BLOCK + i]
    blk[PL_BLOCK_KINDS * BLOCK] = kinds


cdef void motor_side_at_rest(const Plan* plan, Py_ssize_t n, Py_ssize_t j) noexcept nogil:
    """Actuator j's motor side moving with its output (backlash gap rate 0; the gap kept): what setting
    the joint's velocity means for both sides, a reset to rest among them (n actuators in the kernel)."""
    plan_mech(plan, n)[MECH_STATE * j + MECH_GAP_RATE] = 0.0


cdef void actuator_at_start(const Params* p, const Plan* plan, State* s, Py_ssize_t n, Py_ssize_t j) noexcept nogil:
    """Actuator j's state as a new kernel starts it: every state zero (controller integrals, trajectory, current,
    thermal nodes, bristle, i²t budget, backlash gap, dwell) and the noise stream back at its seed; its step count
    kept. What a rig `reset` starts from, before it sets the initial angle and temperature."""
    cdef int64_t k = s[j].k
    memset(&s[j], 0, sizeof(State))
    s[j].k = k
    s[j].rng = p[j].seed if p[j].seed else 1
    memset(plan_mech(plan, n) + MECH_STATE * j, 0, MECH_STATE * sizeof(double))


cdef inline double* plan_mech(const Plan* plan, Py_ssize_t n) noexcept nogil:
    """The extended mechanics' state of a kernel of n actuators (core.pxd `Plan`): MECH_STATE doubles an
    actuator, after the last block's columns."""
    return plan.col + (n + BLOCK - 1) // BLOCK * (HIL_PLAN_COLUMNS * BLOCK)


cdef inline double* plan_block(const Plan* plan, Py_ssize_t j) noexcept nogil:
    """The plan's columns of the block holding actuator j (plan.h)."""
    return plan.col + (j // BLOCK) * (HIL_PLAN_COLUMNS * BLOCK)


cdef inline void plan_row(const Params* p, double* c, Py_ssize_t st) noexcept nogil:
    """The plan's columns of one actuator (plan.h), from its prepared Params; c[k·st] is column k: the
    fields params.def plans as they are (plan_copy), then the columns derived from them."""
    plan_copy(p, c, st)
    c[PL_EULER * st] = p.integrator != INTEGRATOR_BAM
    c[PL_IMPLICIT * st] = p.integrator == INTEGRATOR_IMPLICITFAST
    c[PL_GAP * st] = backlash(p)
    c[PL_BUDGET * st] = p.budget != 0 or stiction(p)   # the rising static friction is a budget of its own
    c[PL_STRIBECK * st] = p.dtheta_stribeck > 0
    c[PL_QUADRATIC * st] = p.budget_quadratic != 0
    c[PL_FRICTION_TEMP * st] = p.friction_tempcoef != 0
    c[PL_STICTION * st] = stiction(p)
    c[PL_BRISTLE * st] = p.lugre_s0 > 0 and p.law != LAW_TORQUE
    c[PL_INDUCTIVE * st] = p.te > 0
    c[PL_DIDT_LIMITED * st] = p.didt_max > 0
    c[PL_THERMAL * st] = p.thermal_r > 0
    c[PL_TWO_NODE * st] = p.thermal_r > 0 and p.thermal_r2 > 0
    c[PL_FLUX * st] = p.flux_tempcoef != 0
    c[PL_ELECTRICAL * st] = p.law != LAW_TORQUE
    c[PL_TAU_LIMITED * st] = p.tau_max > 0 and not p.peak_current > 0   # the peak limiter bounds the current
    c[PL_DERATE * st] = p.derate_i_rated > 0
    c[PL_LIMIT_CURRENT * st] = p.current_limiter != 0 or p.peak_current > 0
    c[PL_PEAK * st] = p.peak_current > 0
    c[PL_DERATE_INV_SPAN * st] = 1.0 / (p.derate_t2 - p.derate_t1) if p.derate_t2 != p.derate_t1 else 0.0
    c[PL_COG * st] = p.cog_amplitude != 0
    c[PL_LUGRE * st] = p.lugre_s0 > 0
    c[PL_DC_LAW * st] = p.law <= LAW_VELOCITY
    c[PL_LAW_POSITION * st] = p.law == LAW_POSITION
    c[PL_LAW_VELOCITY * st] = p.law == LAW_VELOCITY
    c[PL_VMODE * st] = p.law <= LAW_DXL_PWM or p.law == LAW_DXL or p.law == LAW_STS_PWM or p.law == LAW_STS
    c[PL_LAW_DXL_PWM * st] = p.law == LAW_DXL_PWM
    c[PL_LAW_EROB_PD * st] = p.law == LAW_EROB_PD
    c[PL_LAW_CURRENT * st] = p.law == LAW_CURRENT
    c[PL_LAW_TORQUE * st] = p.law == LAW_TORQUE
    c[PL_LAW_DXL * st] = p.law == LAW_DXL
    c[PL_CTRL_LIMITED * st] = p.ctrl_limited != 0
    c[PL_PD_D * st] = p.pd_damping * sqrt(p.pd_kp)
    c[PL_VS * st] = p.supply_v if isnan(p.supply_override) else p.supply_override
    c[PL_INV_VS * st] = 1.0 / c[PL_VS * st]   # ±inf for no supply: dxl_pwm's limiter bounds stay infinite
    c[PL_STATIC_FLAGS * st] = ((FAULT_ENCODER_NOISE if p.encoder_noise > 0 else 0)
                               + (FAULT_ENCODER_STUCK if p.encoder_stuck else 0)
                               + (0 if isnan(p.supply_override) else FAULT_SUPPLY))
    c[PL_ENC_STUCK * st] = p.encoder_stuck != 0
    c[PL_ENC_QUANTIZED * st] = p.encoder_counts > 0
    c[PL_SHUT_OVERHEAT * st] = (p.shutdown_mask & FAULT_OVERHEAT) != 0
    c[PL_SHUT_OVERLOAD * st] = (p.shutdown_mask & FAULT_OVERLOAD) != 0
    c[PL_KINDS * st] = kinds(p)


cdef inline int kinds(const Params* p) noexcept nogil:
    """What actuator p's step computes (plan.h HIL_* kinds; from its prepared Params, as the plan's flags)."""
    cdef bint voltage_law = p.law <= LAW_DXL_PWM or p.law == LAW_DXL or p.law == LAW_STS_PWM or p.law == LAW_STS
    cdef bint stribeck = (p.budget != 0 or stiction(p)) and p.dtheta_stribeck > 0
    cdef bint implicit = p.integrator == INTEGRATOR_IMPLICITFAST
    return ((NEED_POW if stribeck and p.alpha != 1.0 and p.alpha != 2.0 else 0)
            | (NEED_ZOH if p.lugre_s0 > 0 and p.law != LAW_TORQUE else 0)
            | (LAWS_DXL if p.law == LAW_DXL else 0) | (LAWS_DXL_PWM if p.law == LAW_DXL_PWM else 0)
            | (LAWS_STS if p.law == LAW_STS_PWM or p.law == LAW_STS else 0)
            | (LAWS_CURRENT if p.law == LAW_EROB_PD or p.law == LAW_CURRENT else 0)
            | (USES_DC_LAW if p.law <= LAW_VELOCITY else 0)
            | (USES_QS if voltage_law and not p.te > 0 else 0)
            | (USES_DERATE if p.derate_i_rated > 0 else 0)
            | (USES_MOTOR_X if p.current_limiter != 0 or p.peak_current > 0 or p.iron_loss != 0
               or p.flux_tempcoef != 0 or p.thermal_r2 > 0 else 0)
            | (USES_IMPLICIT if implicit else 0)
            | (USES_BACKLASH if backlash(p) else 0)
            | (USES_MECH_X if backlash(p) or stiction(p) or implicit else 0)
            | (USES_LUGRE if p.lugre_s0 > 0 else 0)
            | (USES_NOISE if p.encoder_noise > 0 else 0)
            | (USES_OC if p.oc_fraction > 0 else 0)
            | (USES_OVERLOAD if p.overload_current > 0 else 0)
            | (USES_BUDGET if p.budget != 0 or stiction(p) else 0)
            | (USES_BAM if p.integrator == INTEGRATOR_BAM else 0)
            | (USES_COG if p.cog_amplitude != 0 else 0)
            | (USES_PENDULUM if p._gravity_torque != 0 else 0)
            | (USES_STRIBECK if stribeck else 0))


cdef inline bint backlash(const Params* p) noexcept nogil:
    """Gear backlash on: a band to cross and a motor side with inertia of its own to cross it."""
    return p.backlash > 0 and p.armature > 0


cdef inline bint stiction(const Params* p) noexcept nogil:
    """Rising static friction on (both of its parameters given)."""
    return p.stiction_rise > 0 and p.stiction_time > 0
