# The Dynamixel firmware law (LAW_DXL), per actuator inside step_block (core.pyx includes this).

cdef inline double clip(double x, double lo, double hi) noexcept nogil:
    # the per-actuator code's clip: branches (predicted) cost less there than select.h's blend `hil_clip`,
    # which the lane passes need to vectorize; both return the same value
    return lo if x < lo else (hi if x > hi else x)



cdef inline void dxl_plan(const Params* p, State* s, double goal) noexcept nogil:
    """A new goal position: plan the move from the running trajectory (velocity override, e-manual
    "Profile Velocity"), velocity- or time-based (Drive Mode bit 2): e-manual §Profile Velocity(112),
    §Profile Acceleration(108), §Drive Mode(10).

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


cdef inline double dxl_compliance_duty(const Params* p, double e) noexcept nogil:
    """The AX's position law (AX-12A e-manual §Compliance Margin/Slope, §Punch): no output while the error e [rad]
    lies within its margin, Punch at the margin's edge, rising along the slope beyond it (the caller clips)."""
    if e > p.dxl_margin_pos:
        return p.dxl_punch + p.dxl_slope_pos * (e - p.dxl_margin_pos)
    if e < -p.dxl_margin_neg:
        return -p.dxl_punch + p.dxl_slope_neg * (e + p.dxl_margin_neg)
    return 0.0


cdef inline double dxl_firmware(const Params* p, State* s, double u, double thm, double omega, double vs,
                                double R, double emf, bint enabled, double dt) noexcept nogil:
    """Dynamixel firmware (e-manual §Operating Mode(11) block diagrams, §Position PID Gain): the duty
    cycle [-1, 1] the inverter applies. Current loops are modelled as ideal with voltage feed-forward
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
    else:   # DXL_POSITION, DXL_CURRENT_POSITION
        if u != s.dxl_goal:
            dxl_plan(p, s, u)
        dxl_profile(s, dt)
        e = s.traj_pos - thm
        if p.dxl_compliance:
            duty = dxl_compliance_duty(p, e)
        else:
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
        # firmware current limiter (bam XL330): |(duty·vin − emf)/R| ≤ max_current; Goal PWM bounds the output
        # last, in every mode (e-manual §Goal PWM(100)), as bam's law clips to its max duty last
        ilim = R * p.max_current
        duty = clip(clip(duty, (emf - ilim) / vs, (emf + ilim) / vs), -clamp, clamp)
    s.duty = duty
    return duty
