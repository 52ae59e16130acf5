# C-level interface of the servo kernel: one nogil call advances N actuators by one step.
# Other Cython modules (the real-time loop) cimport `Params`, `Plan`, `State`, `Input`, `prepare` and
# `step_all`. All quantities are SI; "motor side" means before the gear (g·θ), "output" means after it.

from libc.stdint cimport int64_t, uint64_t

cdef enum:
    # firmware control law (what turns the command u into voltage, current or torque)
    LAW_VOLTAGE = 0       # dcmotor controller layer, input="voltage": u = volts
    LAW_POSITION = 1      # dcmotor controller layer, input="position": u = setpoint in gear·rad
    LAW_VELOCITY = 2      # dcmotor controller layer, input="velocity": u = setpoint in gear·rad/s
    LAW_DXL_PWM = 3       # bam Dynamixel voltage law: u = goal position [rad]
    LAW_EROB_PD = 4       # bam eRob current law: u = goal position [rad]
    LAW_CURRENT = 5       # u = motor current [A]
    LAW_TORQUE = 6        # u = output torque [N·m]
    LAW_DXL = 7           # Dynamixel firmware (modes, profile, PID): u = goal in the unit of dxl_mode
    LAW_STS_PWM = 8       # bam Feetech STS3215 law (speed-limited setpoint, voltage law): u = goal position [rad]
    LAW_STS = 9           # Feetech STS firmware (modes, setpoint profile, PID): u = goal in the unit of sts_mode

    # dxl_mode: what the Dynamixel law regulates (firmware_models maps the Operating Mode register to it)
    DXL_PWM = 0               # the duty: u = goal duty [-1, 1]
    DXL_CURRENT = 1           # the current: u = goal current [A]
    DXL_VELOCITY = 2          # the velocity: u = goal velocity [rad/s]
    DXL_POSITION = 3          # the position through the profile and PID: u = goal position [rad]
    DXL_CURRENT_POSITION = 4  # the position, its PID output a current capped by Goal Current: u = goal position [rad]

    # sts_mode: the Feetech STS Operating Mode (33) values, what the Feetech law regulates
    STS_POSITION = 0          # the position through the setpoint and PID: u = goal position [rad]
    STS_WHEEL = 1             # the velocity (wheel mode): u = goal velocity [rad/s]
    STS_PWM = 2               # open loop: u = duty [-1, 1]
    STS_STEP = 3              # relative steps, made absolute by firmware_models: u = goal position [rad]

    INTEGRATOR_EULER = 0  # MuJoCo's semi-implicit Euler with implicit damping
    INTEGRATOR_BAM = 1    # bam's step: velocity first, q += dq·dt + ½·a·dt², |dq| ≤ 100 rad/s
    INTEGRATOR_IMPLICITFAST = 2  # MuJoCo's implicitfast: Euler with the actuator's velocity derivative implicit

    FAULT_OPEN_CIRCUIT = 1    # bits of State.fault_flags
    FAULT_SUPPLY = 2          # supply voltage overridden (sag / surge)
    FAULT_ENCODER_NOISE = 4
    FAULT_DERATED = 8         # thermal current derating active
    FAULT_OVERHEAT = 16       # winding above temp_limit: torque shut down (latched)
    FAULT_ENCODER_STUCK = 32
    FAULT_ENCODER_SLIP = 64
    FAULT_OVERLOAD = 128      # |i| above overload_current for longer than overload_time (latched)


# Params: every field, its unit and neutral value in params.def (setup.py writes params.pxi from it)
include "params.pxi"


cdef packed struct State:
    double theta               # output angle [rad]
    double omega               # output velocity [rad/s]
    double slew_u              # slewed setpoint
    double integral            # controller integral state
    double temp_rise           # winding temperature above ambient [K]
    double housing_rise        # housing temperature above ambient [K] (two-node thermal model)
    double bristle             # LuGre z [rad]
    double current             # armature current state [A] (inductive model)
    double i2t                 # ∫(i² − i_cont²)dt spent of the peak budget [A²·s] (0: full budget)
    double oc_timer            # steps |i| has exceeded oc_current in a row
    int64_t oc_active          # open-circuit fault latched
    int64_t shutdown           # torque shut down by a latched fault in shutdown_mask (until cleared)
    int64_t latched            # latched fault bits (FAULT_OVERHEAT, FAULT_OVERLOAD)
    double ol_timer            # steps |i| has exceeded overload_current in a row
    # -- Dynamixel firmware state (LAW_DXL); the Feetech laws (LAW_STS_PWM, LAW_STS) keep their setpoint in
    #    traj_valid, traj_pos, traj_vel, pos_integral, vel_integral and duty (feetech.pxi)
    int64_t traj_valid         # 0: the trajectory restarts from the measured shaft position
    double dxl_goal            # goal the running profile was planned for (NaN: plan on the next step)
    double traj_pos            # Position Trajectory [rad]
    double traj_vel            # Velocity Trajectory [rad/s]
    double traj_acc            # [rad/s²]
    double prof_vmax           # this move's peak velocity along prof_dir [rad/s]
    double prof_amax           # this move's profile acceleration [rad/s²]
    double prof_p0             # the move's plan: start position [rad],
    double prof_v0             # start velocity along prof_dir [rad/s],
    double prof_dir            # direction ±1, distance along it [rad], and
    double prof_d
    double prof_t1             # durations of the ramp to prof_vmax, the cruise and the stop [s]
    double prof_t2
    double prof_t3
    int64_t prof_k             # steps since the plan
    int64_t prof_active        # profile ongoing (Moving Status bit 1)
    int64_t prof_type          # Moving Status bits 5..4: 0 step, 1 rectangular, 2 triangular, 3 trapezoidal
    double pos_integral        # ∫ position error dt [rad·s]
    double vel_integral        # ∫ velocity error dt [rad]
    double duty                # PWM duty the firmware applied this step [-1, 1] (Present PWM)
    double enc_offset          # accumulated encoder slip [rad]
    int64_t fault_flags
    int64_t k                  # steps taken; t = k·dt
    uint64_t rng
    double gauss_spare         # second normal deviate of the polar method
    int64_t has_spare
    # -- what step k produced (state above is already k+1)
    double theta_meas          # measured output position used by the firmware [rad]
    double torque              # actuator torque at the output [N·m]
    double friction_torque     # budget friction torque applied at the output [N·m]
    double i_out               # armature current that made the torque [A]
    double v_out               # terminal voltage [V]
    double temperature         # absolute winding temperature at the start of the step [°C]


cdef enum:
    HAND_PATH = 8              # waypoints a hand's path holds


cdef packed struct Hand:
    # A person's hand on the output shaft (docs/commands.md, `hand`): a spring toward a setpoint that moves
    # from `start` through the waypoints at `speed`, a damper on the shaft's speed relative to it, the sum
    # within ±max_torque (a grip slips past it). stiffness 0: no hand.
    double stiffness           # [N·m/rad]
    double damping             # [N·m·s/rad]
    double max_torque          # [N·m]
    double speed               # [rad/s] of the setpoint; 0: the setpoint is the last waypoint at once
    double start               # [rad] the setpoint when the hand took this path (set by the loop)
    double t0                  # [s] the simulation time it did (set by the loop)
    int64_t count              # waypoints in path, 1 … HAND_PATH
    double path[8]             # [rad] the waypoints, in order (HAND_PATH)


cdef packed struct Input:
    double u
    double enable
    double external_torque     # [N·m] at the output
    Hand hand                  # added to external_torque, from the state at the start of each step


cdef inline double encoder_reading(const State* s) noexcept nogil:
    """What a servo's position register holds [rad]: the firmware's last encoder sample (`theta_meas`, the one
    its law used in the step just taken); before the first step, the shaft itself. Every family reads it."""
    return s.theta_meas if s.k > 0 else s.theta


cdef inline double hand_setpoint(const Hand* h, double t, double* rate) noexcept nogil:
    """Where the hand leads the shaft at simulation time t [rad], and how fast it moves there (`rate`, rad/s)."""
    cdef double at = h.start, left, leg
    cdef int64_t w
    rate[0] = 0.0
    if h.speed <= 0.0:
        return h.path[h.count - 1]
    left = h.speed * (t - h.t0)
    for w in range(h.count):
        leg = h.path[w] - at
        if left < (leg if leg >= 0.0 else -leg):
            rate[0] = h.speed if leg >= 0.0 else -h.speed
            return at + (left if leg >= 0.0 else -left)
        left -= (leg if leg >= 0.0 else -leg)
        at = h.path[w]
    return at


cdef inline void hand_take(Input* inp, const State* s, Hand h, double dt) noexcept nogil:
    """Put the hand `h` on the output now: it leads the shaft from where it holds it (a hand already there
    carries on from its setpoint, so a new path starts without a jump)."""
    cdef double rate, t = s.k * dt
    h.start = hand_setpoint(&inp.hand, t, &rate) if inp.hand.stiffness > 0.0 else s.theta
    h.t0 = t
    inp.hand = h


cdef inline double hand_torque(const Hand* h, double theta, double omega, double t) noexcept nogil:
    """The hand's torque on the output [N·m] for the shaft at θ [rad], ω [rad/s], at simulation time t [s]."""
    cdef double rate
    cdef double tau = h.stiffness * (hand_setpoint(h, t, &rate) - theta) - h.damping * (omega - rate)
    return -h.max_torque if tau < -h.max_torque else (h.max_torque if tau > h.max_torque else tau)


cdef struct Plan:
    # struct-of-arrays copy of the Params fields step_all's lane passes read, derived by prepare(); its
    # layout and columns: plan.h
    # layout and columns: plan.h. After the last block's columns: the extended mechanics' state, MECH_STATE
    # doubles an actuator (plan.pxi `plan_mech`), kept there rather than in State so that the records a
    # step copies to its lanes and back do not grow for it
    double* col


cdef enum:
    MECH_GAP = 0        # backlash: motor side − output, within ±backlash/2 [rad, output side]
    MECH_GAP_RATE = 1   # its rate [rad/s]
    MECH_DWELL = 2      # time the friction budget has held the joint so far [s]
    MECH_STATE = 3


cdef void step_all(const Params* p, const Plan* plan, State* s, const Input* inp, Py_ssize_t n,
                   double dt) noexcept nogil
cdef void prepare(Params* p, Plan* plan, Py_ssize_t j, double dt) noexcept nogil
cdef void motor_side_at_rest(const Plan* plan, Py_ssize_t n, Py_ssize_t j) noexcept nogil
cdef void actuator_at_start(const Params* p, const Plan* plan, State* s, Py_ssize_t n, Py_ssize_t j) noexcept nogil


cdef class Kernel:
    cdef Params* params
    cdef Plan plan
    cdef State* states
    cdef Input* inputs
    cdef readonly Py_ssize_t n
    cdef readonly double dt
