/* The kernel's plan: a struct-of-arrays copy of the Params fields step_all's lane passes read (args.h,
   sense.h, law.h, motor.h, load.h), so that a pass loads 4 (AVX2) actuators' value of a field with one instruction instead of one
   per actuator from 856-byte Params records.

   Blocked like step_all (core.pxd `Plan`): the block of actuators [b·HIL_BLOCK, (b+1)·HIL_BLOCK) owns
   HIL_PLAN_COLUMNS × HIL_BLOCK consecutive doubles, column c of its actuator k at [c·HIL_BLOCK + k]. A
   pass thus reads one contiguous 13 KiB stretch per block; whole-rig columns n doubles apart would put
   every column of an actuator in the same L1 set whenever n·8 bytes is a multiple of 4 KiB.

   core.pyx `prepare` writes actuator j's values from its Params whenever they change (Kernel.set_params,
   the real-time loop's parameter command); nothing else writes them. Flags are 1.0 / 0.0 (a compare of
   doubles selects lanes in the same vector width as the arithmetic). */

#ifndef HIL_PLAN_H
#define HIL_PLAN_H

#define HIL_BLOCK 32   /* actuators per block of step_all and of the plan (their Params and State stay in L1) */

enum {
    /* load, integration (pass 4) */
    PL_GEAR,                /* g */
    PL_GRAVITY_TORQUE,      /* −(m + m_arm/2)·g·l [N·m] */
    PL_DAMPING_B1,          /* B1, B2, B3 (motor side) */
    PL_DAMPING_B2,
    PL_DAMPING_B3,
    PL_INERTIA,             /* total inertia about the output axis [kg·m²] */
    PL_INV_DT,              /* 1/dt [1/s] */
    PL_EULER,               /* flag: INTEGRATOR_EULER (else bam's) */
    /* bam friction budget (pass 4) */
    PL_BUDGET,              /* flag: budget on */
    PL_STRIBECK,            /* flag: θ̇s > 0 (the Stribeck factor exp(−|ω/θ̇s|^α), else 0) */
    PL_QUADRATIC,           /* flag: M6 quadratic term */
    PL_KC,                  /* friction_base */
    PL_KV,                  /* friction_viscous */
    PL_KCS,                 /* friction_stribeck */
    PL_KL,                  /* load_friction_base */
    PL_KLS,                 /* load_friction_stribeck */
    PL_KM,                  /* load_friction_motor */
    PL_KE,                  /* load_friction_external */
    PL_KMS,                 /* load_friction_motor_stribeck */
    PL_KES,                 /* load_friction_external_stribeck */
    PL_KMQ,                 /* load_friction_motor_quad */
    PL_KEQ,                 /* load_friction_external_quad */
    /* LuGre bristle (pass 4) */
    PL_BRISTLE,             /* flag: σ0 > 0 and the law is not LAW_TORQUE */
    /* motor: current, heating, electrical torque (pass 3, motor.h) */
    PL_MOTORCONST,          /* K [N·m/A] */
    PL_INDUCTIVE,           /* flag: t_e > 0 (else quasi-static current) */
    PL_TE,                  /* t_e [s] */
    PL_INV_TE,              /* 1/t_e [1/s] */
    PL_DECAY,               /* 1 − exp(−dt/t_e) */
    PL_DIDT_LIMITED,        /* flag: didt_max > 0 */
    PL_DIDT_MAX,            /* [A/s] */
    PL_THERMAL,             /* flag: R_T > 0 */
    PL_INV_THERMAL_R,       /* 1/R_T [W/K] */
    PL_INV_THERMAL_C,       /* 1/C [K/J] */
    PL_AMBIENT,             /* [°C] */
    PL_ELECTRICAL,          /* flag: the law is not LAW_TORQUE (the motor makes the torque) */
    PL_TAU_LIMITED,         /* flag: tau_max > 0 */
    PL_TAU_MAX,             /* [N·m] motor side */
    PL_DERATE,              /* flag: derate_i_rated > 0 */
    PL_DERATE_I_RATED,      /* [A] */
    PL_DERATE_I_SAFE,       /* [A] */
    PL_DERATE_T1,           /* [°C] */
    PL_DERATE_T2,           /* [°C] */
    PL_DERATE_INV_SPAN,     /* 1/(T2 − T1) [1/K] (0 where T2 = T1) */
    PL_EFFICIENCY,          /* η */
    PL_COG,                 /* flag: cog_amplitude != 0 */
    PL_COG_AMPLITUDE,       /* [N·m] */
    PL_LUGRE,               /* flag: σ0 > 0 */
    PL_LUGRE_S0,            /* σ0, σ1, τc, τs */
    PL_LUGRE_S1,
    PL_LUGRE_TC,
    PL_LUGRE_TS,
    /* transcendental arguments (pass 1, args.h) */
    PL_COG_POLES,           /* Np */
    PL_COG_PHASE,           /* [rad] */
    PL_Q_OFFSET,            /* [rad] */
    PL_INV_LUGRE_WS,        /* 1/ωs [s/rad] */
    PL_INV_DTHETA_STRIBECK, /* 1/θ̇s [s/rad] */
    PL_ALPHA,               /* Stribeck exponent α */
    /* dcmotor controller layer (pass 3a, law.h) */
    PL_DC_LAW,              /* flag: LAW_VOLTAGE, LAW_POSITION or LAW_VELOCITY */
    PL_LAW_POSITION,        /* flag: LAW_POSITION */
    PL_LAW_VELOCITY,        /* flag: LAW_VELOCITY */
    PL_KP,                  /* kp, ki, kd */
    PL_KI,
    PL_KD,
    PL_SLEW,                /* [u/s]; 0 = none */
    PL_IMAX,                /* integral clamp; 0 = none */
    PL_VMAX,                /* [V]; 0 = none */
    /* the other laws (pass 3a, law.h) */
    PL_VMODE,               /* flag: a voltage law (the dcmotor ones, LAW_DXL_PWM, LAW_DXL) */
    PL_LAW_DXL_PWM,         /* flags: LAW_DXL_PWM, LAW_EROB_PD, LAW_CURRENT, LAW_TORQUE, LAW_DXL */
    PL_LAW_EROB_PD,
    PL_LAW_CURRENT,
    PL_LAW_TORQUE,
    PL_LAW_DXL,
    PL_CTRL_LIMITED,        /* flag: clip the command to [ctrl_lo, ctrl_hi] */
    PL_CTRL_LO,
    PL_CTRL_HI,
    PL_DUTY_GAIN,           /* error_gain·fw_kp [duty/rad] */
    PL_MAX_DUTY,
    PL_MAX_CURRENT,         /* [A]; 0 = no limiter */
    PL_PD_KP,               /* [A/rad] */
    PL_PD_D,                /* pd_damping·√pd_kp [A·s/rad] */
    PL_MAX_AMPS,            /* [A] */
    /* sensing and faults (pass 3a, sense.h) */
    PL_VS,                  /* supply [V]: supply_override if given, else supply_v */
    PL_INV_VS,              /* 1/vs [1/V] */
    PL_STATIC_FLAGS,        /* fault bits set by the parameters alone: encoder noise / stuck, supply override */
    PL_ENC_STUCK,           /* flag */
    PL_ENC_SLIP,            /* [rad/s] */
    PL_ENC_NOISE,           /* std-dev [rad] */
    PL_ENC_QUANTIZED,       /* flag: encoder_counts > 0 */
    PL_COUNTS_PER_RAD,
    PL_RAD_PER_COUNT,
    PL_RESISTANCE,          /* R0 [ohm] */
    PL_TEMPCOEF,            /* α [1/K] */
    PL_REFTEMP,             /* T0 [°C] */
    PL_TEMP_LIMIT,          /* [°C]; 0 = none */
    PL_SHUT_OVERHEAT,       /* flags: shutdown_mask holds FAULT_OVERHEAT, FAULT_OVERLOAD */
    PL_SHUT_OVERLOAD,
    PL_OC_FRACTION,         /* open fraction of a revolution; 0 = no open-circuit fault */
    PL_OC_TIME,             /* [s] */
    PL_OC_CURRENT,          /* [A] */
    PL_OC_DURATION,         /* [s] */
    PL_OL_CURRENT,          /* overload_current [A]; 0 = none */
    PL_OL_TIME,             /* overload_time [s] */
    /* what step_block runs for a block (HIL_* kinds below, as a double) */
    PL_KINDS,               /* the actuator's: the vector math, laws and features it uses */
    PL_BLOCK_KINDS,         /* lane 0: the OR over the block's lanes (prepare keeps it) */
    HIL_PLAN_COLUMNS
};

/* Kinds of work an actuator's step needs (PL_KINDS; core.pyx `plan_row` sets them from its Params).
   step_block and the lane passes run a feature's code only when some lane of the block uses it
   (PL_BLOCK_KINDS): a branch on a block-uniform value outside the lane loops, each pass compiled in a
   version per combination of the kinds it tests (HIL_VERSIONS*). Where no lane uses a feature, every
   lane's select would discard its value, so skipping it changes no bit. */
enum {
    HIL_NEED_POW = 1,           /* bam's Stribeck |ω/θ̇s|^α with α not 1 or 2 */
    HIL_NEED_LOG = 2,           /* per step, not in the plan: a fresh pair of the noise generator */
    HIL_NEED_ZOH = 4,           /* the LuGre bristle's hold (σ0 > 0, not LAW_TORQUE) */
    HIL_LAWS_DXL = 8,           /* the Dynamixel firmware (core.pyx dxl_firmware) */
    HIL_LAWS_DXL_PWM = 16,      /* law.h hil_dxl_pwm_pass */
    HIL_LAWS_CURRENT = 32,      /* law.h hil_current_law_pass: LAW_EROB_PD, LAW_CURRENT */
    HIL_USES_DC_LAW = 64,       /* the dcmotor controller layer */
    HIL_USES_QS = 128,          /* a voltage law without inductance: the quasi-static current */
    HIL_USES_DERATE = 256,      /* thermal derating */
    HIL_USES_LUGRE = 512,       /* LuGre friction in the motor (σ0 > 0) */
    HIL_USES_NOISE = 1024,      /* encoder noise */
    HIL_USES_OC = 2048,         /* the open-circuit fault armed (oc_fraction > 0) */
    HIL_USES_OVERLOAD = 4096,   /* the overload latch (overload_current > 0) */
    HIL_USES_BUDGET = 8192,     /* bam's friction budget */
    HIL_USES_BAM = 16384,       /* bam's integrator */
    HIL_USES_COG = 32768,       /* cogging: a sine */
    HIL_USES_PENDULUM = 65536,  /* gravity on the load: a sine */
    HIL_USES_STRIBECK = 131072  /* the budget's Stribeck factor: an exponential */
};

/* F(k) for the constant k = the bits among a, b (c) that `uses` holds: one version of a lane loop per
   combination, each compiled with its kinds known (F: a macro calling an always_inline pass) */
#define HIL_VERSIONS1(uses, a, F) if ((uses) & (a)) { F(a); } else { F(0); }
#define HIL_VERSIONS2(uses, a, b, F)                                                                   \
    switch ((uses) & ((a) | (b))) {                                                                    \
    case 0: F(0); break;                                                                               \
    case (a): F(a); break;                                                                             \
    case (b): F(b); break;                                                                             \
    default: F((a) | (b)); break;                                                                      \
    }
#define HIL_VERSIONS3(uses, a, b, c, F)                                                                \
    switch ((uses) & ((a) | (b) | (c))) {                                                              \
    case 0: F(0); break;                                                                               \
    case (a): F(a); break;                                                                             \
    case (b): F(b); break;                                                                             \
    case (a) | (b): F((a) | (b)); break;                                                               \
    case (c): F(c); break;                                                                             \
    case (a) | (c): F((a) | (c)); break;                                                               \
    case (b) | (c): F((b) | (c)); break;                                                               \
    default: F((a) | (b) | (c)); break;                                                                \
    }

#endif
