# The Feetech firmware laws (LAW_STS_PWM, LAW_STS), per actuator inside step_block (core.pyx includes this
# after dynamixel.pxi, whose `clip` it uses). Both keep their setpoint in the State fields the Dynamixel law
# uses (traj_pos, traj_vel, pos_integral, vel_integral, duty, traj_valid): an actuator runs one law.


cdef inline void sts_setpoint(const Params* p, State* s, double goal, double dt) noexcept nogil:
    """The position setpoint's next step toward `goal` [rad]: at most sts_speed [rad/s] (Goal Speed; 0 holds
    it, inf lets it jump), its speed changing by at most sts_acc [rad/s²] (Acceleration, 0 = at once).

    Without acceleration this is bam's STS3215 limiter, q_s = clip(goal, q_s − v·dt, q_s + v·dt)
    (bam/feetech/actuator.py `STS3215Actuator.compute_control`), the same bits. With it the setpoint
    brakes so that it stops on the goal: the fastest speed from which a stop at a a step ends within the
    distance e is a·dt·(√(1 + 8|e|/(a·dt²)) − 1)/2 (a discrete stop covers v·dt + (v − a·dt)·dt + … ≤ |e|).
    The STS manual gives the units of Goal_Speed and Acceleration but not the profile's shape: the
    trapezoid is our choice, the one a speed and an acceleration limit alone define."""
    cdef double v = p.sts_speed, a = p.sts_acc, e, lim, vel, old = s.traj_pos
    if a <= 0:
        s.traj_pos = clip(goal, s.traj_pos - v * dt, s.traj_pos + v * dt)
        s.traj_vel = (s.traj_pos - old) / dt
        return
    e = goal - s.traj_pos
    lim = a * dt * (sqrt(1.0 + 8.0 * fabs(e) / (a * dt * dt)) - 1.0) * 0.5
    if lim > v:
        lim = v
    vel = clip(lim if e >= 0 else -lim, s.traj_vel - a * dt, s.traj_vel + a * dt)
    if (goal - (s.traj_pos + vel * dt)) * e <= 0:
        # it reaches (or would pass) the goal this step: it lands there, moving the rest of the way (at rest from
        # the next step; these last two steps may brake harder than a, by what the step grid leaves over)
        s.traj_pos = goal
        s.traj_vel = e / dt
        return
    s.traj_pos += vel * dt
    s.traj_vel = vel


cdef inline double sts_pwm_law(const Params* p, State* s, double goal, double thm, bint enabled,
                               double dt) noexcept nogil:
    """bam's STS3215 law (bam/feetech/actuator.py `STS3215Actuator.compute_control`): the setpoint limited
    to sts_speed (bam's max_velocity), duty = (q_s − q)·kp·error_gain, ±max_duty; the duty [-1, 1].

    bam runs its limiter whether or not the torque is on, and so does this. bam starts the setpoint at 0 for
    every log; here it starts from the measured position (the same for bam's rollouts, which start at 0)."""
    cdef double duty
    if not s.traj_valid:
        s.traj_pos = thm
        s.traj_vel = 0.0
        s.traj_valid = 1
    sts_setpoint(p, s, goal, dt)
    duty = clip((s.traj_pos - thm) * p.sts_p * p.sts_error_gain, -p.max_duty, p.max_duty)
    s.duty = duty if enabled else 0.0
    return s.duty


cdef inline double sts_firmware(const Params* p, State* s, double u, double thm, double omega, bint enabled,
                                double dt) noexcept nogil:
    """Feetech STS firmware: the duty [-1, 1] for Operating Mode (33) sts_mode (Feetech STS memory table;
    firmware_models/feetech/law.py converts the registers):
    - STS_POSITION, STS_STEP: u = goal position [rad]. The setpoint (sts_setpoint) and a PID on its error:
      duty = (q_s − θ)·P·error_gain + ki·∫(q_s − θ)dt + kd·(q̇_s − ω), zero inside the dead band
      [−sts_dead_neg, sts_dead_pos] of the error (CW/CCW Dead Zone, 26/27). Step mode moves by relative
      steps on the bus; firmware_models turns each into the absolute goal, so the loop is position's.
    - STS_WHEEL: u = goal velocity [rad/s], within ±sts_speed, reached at sts_acc; a PI on the
      velocity error with the speed loop's gains (37, 39).
    - STS_PWM: u = duty (Goal Time (44) in open-loop mode), open loop.
    Outside the dead band, the shaft still (|ω| ≤ sts_rest_speed), the position duty is at least sts_punch (Minimum Startup Force,
    24). Every duty within
    ±max_duty (Torque Limit (48)), then times sts_polarity (Phase bits 0 and 7). With the torque off (or a teleported shaft) the setpoint
    follows the shaft, as the Dynamixel law's does, so a move starts from where the shaft is. With ki = kd = 0,
    no acceleration and no dead band, position mode gives sts_pwm_law's bits while the torque is on."""
    cdef double clamp = p.max_duty, duty, e, ev
    cdef int64_t mode = p.sts_mode
    if not enabled or not s.traj_valid:
        s.traj_pos = thm
        s.traj_vel = 0.0
        s.pos_integral = 0.0
        s.vel_integral = 0.0
        s.duty = 0.0
        s.traj_valid = enabled
        if not enabled:
            return 0.0
    if mode == STS_PWM:
        duty = clip(u, -clamp, clamp)
        s.traj_pos = thm
        s.traj_vel = omega
    elif mode == STS_WHEEL:
        u = clip(u, -p.sts_speed, p.sts_speed)
        if p.sts_acc > 0:
            s.traj_vel = clip(u, s.traj_vel - p.sts_acc * dt, s.traj_vel + p.sts_acc * dt)
        else:
            s.traj_vel = u
        s.traj_pos = thm
        ev = s.traj_vel - omega
        duty = p.sts_kvp * ev + p.sts_kvi * s.vel_integral
        if p.sts_kvi > 0 and (fabs(duty) < clamp or duty * ev < 0):
            s.vel_integral += ev * dt    # anti-windup: integrate only while unsaturated
        duty = clip(duty, -clamp, clamp)
    else:   # STS_POSITION, STS_STEP
        sts_setpoint(p, s, u, dt)
        e = s.traj_pos - thm
        if (p.sts_dead_pos > 0 or p.sts_dead_neg > 0) and -p.sts_dead_neg <= e <= p.sts_dead_pos:
            duty = 0.0                   # inside the dead zone the firmware drives nothing
        else:
            duty = e * p.sts_p * p.sts_error_gain + p.sts_ki * s.pos_integral + p.sts_kd * (s.traj_vel - omega)
            if p.sts_ki > 0 and (fabs(duty) < clamp or duty * e < 0):
                s.pos_integral += e * dt
            if p.sts_punch > 0 and fabs(omega) <= p.sts_rest_speed and duty != 0 and fabs(duty) < p.sts_punch:
                # Minimum Startup Force (24), the memory table's "minimum output starting torque" (0.1 % of the
                # locked-rotor torque): the least output that starts the shaft, while it is still
                duty = p.sts_punch if duty > 0 else -p.sts_punch
        duty = clip(duty, -clamp, clamp)
    # Phase (18) bits 0 (drive) and 7 (feedback): one of them alone turns the loop's sign (firmware_models
    # mirrors the goal for bit 7); 1.0 leaves every bit of the duty as it was
    duty = duty * p.sts_polarity
    s.duty = duty
    return duty
