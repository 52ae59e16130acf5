# C-level interface of the servo kernel: one nogil call advances N actuators by one step.
# Other Cython modules (the real-time loop) cimport `Params`, `Plan`, `State`, `Input`, `prepare` and
# `step_all`.
# All quantities are SI; "motor side" means before the gear (g·θ), "output" means after it.

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

    DXL_CURRENT = 0           # dxl_mode, the Operating Mode register value: u = goal current [A]
    DXL_VELOCITY = 1          # u = goal velocity [rad/s]
    DXL_POSITION = 3          # u = goal position [rad]
    DXL_EXTENDED_POSITION = 4
    DXL_CURRENT_POSITION = 5  # current-based position: u = goal position [rad]
    DXL_PWM = 16              # u = goal duty [-1, 1]

    INTEGRATOR_EULER = 0  # MuJoCo's semi-implicit Euler with implicit damping
    INTEGRATOR_BAM = 1    # bam's step: velocity first, q += dq·dt + ½·a·dt², |dq| ≤ 100 rad/s

    FAULT_OPEN_CIRCUIT = 1    # bits of State.fault_flags
    FAULT_SUPPLY = 2          # supply voltage overridden (sag / surge)
    FAULT_ENCODER_NOISE = 4
    FAULT_DERATED = 8         # thermal current derating active
    FAULT_OVERHEAT = 16       # winding above temp_limit: torque shut down (latched)
    FAULT_ENCODER_STUCK = 32
    FAULT_ENCODER_SLIP = 64
    FAULT_OVERLOAD = 128      # |i| above overload_current for longer than overload_time (latched)


cdef packed struct Params:
    int64_t law
    int64_t integrator
    # -- motor (MuJoCo dcmotor semantics; constants on the motor side of the gear)
    double resistance          # R0 [ohm] at reftemp
    double motorconst          # K [N·m/A] = [V·s/rad]
    double efficiency          # gearbox efficiency η: electrical torque × η (seed 000 §1.2)
    double gear                # ratio g: output angle θ, motor angle g·θ
    double armature            # rotor inertia [kg·m²], reflected as armature·g²
    double te                  # electrical time constant L/R0 [s]; 0 = quasi-static current
    double didt_max            # [A/s]; 0 = unlimited
    double tau_max             # electrical torque clamp (motor side) [N·m]; 0 = none
    double thermal_r           # R_T [K/W]; 0 = no thermal state
    double thermal_c           # C [J/K]
    double tempcoef            # α [1/K]
    double reftemp             # T0 [°C]
    double ambient             # Ta [°C]
    double derate_i_rated      # thermal current derating (seed 000 §1.3.5) [A]; 0 = off
    double derate_i_safe       # [A]
    double derate_t1           # [°C] derating starts
    double derate_t2           # [°C] fully derated
    double cog_amplitude       # [N·m]
    double cog_poles           # periodicity Np
    double cog_phase           # [rad]
    double damping_b1          # passive drag −ω(B1 + B2|ω| + B3ω²)·g², [N·m·s/rad] …
    double damping_b2
    double damping_b3
    double lugre_s0            # σ0 [N·m/rad]; 0 = no bristle state
    double lugre_s1            # σ1 [N·m·s/rad]
    double lugre_tc            # Coulomb level τc [N·m]
    double lugre_ts            # static level τs [N·m]
    double lugre_ws            # Stribeck velocity ωs [rad/s]
    # -- dcmotor controller layer (volt units, MuJoCo 3.7–3.11 "v1")
    double kp
    double ki
    double kd
    double slew                # setpoint slew rate [u/s]; 0 = none
    double imax                # integral clamp (anti-windup); 0 = none
    double vmax                # controller voltage clamp [V]; 0 = none
    int64_t ctrl_limited
    double ctrl_lo
    double ctrl_hi
    # -- supply: Dynamixel vin, eRob bus voltage; 0 = ideal source (dcmotor laws)
    double supply_v
    # -- bam Dynamixel voltage law (notes/bam.md §2.2)
    double fw_kp               # raw Position P Gain register value
    double error_gain          # duty per (P unit · rad)
    double max_duty            # [0..1]
    double max_current         # firmware current limiter [A]; 0 = none
    # -- bam eRob current law (notes/bam.md §2.3)
    double pd_kp               # [A/rad]
    double pd_damping          # D = damping·√kp [A·s/rad]
    double max_amps            # [A]
    # -- bam friction budget M1–M6 (notes/bam.md §2.1), applied as a clipped stopping torque
    int64_t budget             # 0 = off
    int64_t budget_quadratic   # M6 quadratic term
    double friction_base       # Kc [N·m]
    double friction_viscous    # Kv [N·m·s/rad]
    double friction_stribeck   # Kcs [N·m]
    double dtheta_stribeck     # θ̇s [rad/s]; 0 = no Stribeck factor
    double alpha               # Stribeck exponent
    double load_friction_base            # Kl
    double load_friction_stribeck        # Kls
    double load_friction_motor           # Km
    double load_friction_external        # Ke
    double load_friction_motor_stribeck  # Kms
    double load_friction_external_stribeck  # Kes
    double load_friction_motor_quad      # Kmq [1/N·m]
    double load_friction_external_quad   # Keq [1/N·m]
    double q_offset                      # [rad] added to θ in the gravity torque
    # -- load at the output
    double load_inertia        # about the axis, pendulum point mass excluded [kg·m²]
    double mass                # pendulum point mass [kg] at `length`
    double length              # [m]
    double arm_mass            # uniform arm [kg] of `length`
    double gravity             # [m/s²]
    # -- faults (Simscape DC motor "Faults"; encoder)
    double oc_fraction         # open fraction of each motor revolution; 0 = no open-circuit fault
    double oc_time             # temporal trigger [s]; inf = never
    double oc_current          # behavioural trigger |i| > oc_current [A]; inf = never
    double oc_duration         # … for longer than this [s]
    double supply_override     # NaN = none; else replaces supply_v (sag / surge)
    double encoder_counts      # counts per output revolution; 0 = continuous
    double encoder_noise       # std-dev of measured-position noise [rad]
    int64_t encoder_stuck      # measured position frozen at its last value
    double encoder_slip        # measured position drifts away from the true one [rad/s]
    uint64_t seed              # noise seed
    double temp_limit          # overheating shutdown above this winding temperature [°C]; 0 = none
    double overload_current    # overload latch: |i| above this [A] …; 0 = no overload detection
    double overload_time       # … for longer than this [s]
    int64_t shutdown_mask      # latched fault bits that turn the torque off (FAULT_OVERHEAT | FAULT_OVERLOAD)
    # -- Dynamixel firmware (LAW_DXL), register values already converted to SI by firmware_models
    int64_t dxl_mode           # Operating Mode: DXL_* above
    int64_t dxl_time_profile   # Drive Mode bit 2: dxl_prof_vel / dxl_prof_acc are times [s]
    double dxl_kpp             # position P [duty/rad]
    double dxl_kpi             # position I [duty/(rad·s)]
    double dxl_kpd             # position D [duty·s/rad]
    double dxl_kff1            # velocity feed-forward [duty·s/rad]
    double dxl_kff2            # acceleration feed-forward [duty·s²/rad]
    double dxl_kvp             # velocity P [duty·s/rad]
    double dxl_kvi             # velocity I [duty/rad]
    double dxl_goal_duty       # Goal PWM as a duty clamp [0, 1] (below max_duty = PWM Limit)
    double dxl_goal_current    # Goal Current as a current clamp in current-based position [A]
    double dxl_prof_vel        # Profile Velocity [rad/s] (0 = none), or the move time t3 [s] if time-based
    double dxl_prof_acc        # Profile Acceleration [rad/s²] (0 = none), or the ramp time t1 [s]
    double dxl_vel_limit       # Velocity Limit [rad/s]; 0 = none
    # -- derived by prepare() from the fields above and dt; any value given here is overwritten
    double _inertia            # total inertia about the output axis [kg·m²]
    double _decay              # 1 − exp(−dt/t_e) of the exact current update
    double _counts_per_rad
    double _rad_per_count
    double _inv_dt             # 1/dt, 1/t_e, 1/R_T, 1/C, 1/ωs, 1/θ̇s (0 where the divisor is 0)
    double _inv_te
    double _inv_thermal_r
    double _inv_thermal_c
    double _inv_lugre_ws
    double _inv_dtheta_stribeck
    double _gravity_torque     # −(m + m_arm/2)·g·l: pendulum torque per sin(θ + q_offset)


cdef packed struct State:
    double theta               # output angle [rad]
    double omega               # output velocity [rad/s]
    double slew_u              # slewed setpoint
    double integral            # controller integral state
    double temp_rise           # winding temperature above ambient [K]
    double bristle             # LuGre z [rad]
    double current             # armature current state [A] (inductive model)
    double oc_timer            # steps |i| has exceeded oc_current in a row
    int64_t oc_active          # open-circuit fault latched
    int64_t shutdown           # torque shut down by a latched fault in shutdown_mask (until cleared)
    int64_t latched            # latched fault bits (FAULT_OVERHEAT, FAULT_OVERLOAD)
    double ol_timer            # steps |i| has exceeded overload_current in a row
    # -- Dynamixel firmware state (LAW_DXL)
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


cdef packed struct Input:
    double u
    double enable
    double external_torque     # [N·m] at the output


cdef struct Plan:
    # struct-of-arrays copy of the Params fields step_all's lane passes read, derived by prepare(); its
    # layout and columns: plan.h
    double* col


cdef void step_all(const Params* p, const Plan* plan, State* s, const Input* inp, Py_ssize_t n,
                   double dt) noexcept nogil
cdef void prepare(Params* p, Plan* plan, Py_ssize_t j, double dt) noexcept nogil


cdef class Kernel:
    cdef Params* params
    cdef Plan plan
    cdef State* states
    cdef Input* inputs
    cdef readonly Py_ssize_t n
    cdef readonly double dt
