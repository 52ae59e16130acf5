/* The kernel's plan: a struct-of-arrays copy of the Params fields step_all's lane passes read (args.h,
   sense.h, law.h, motor.h, load.h), so that a pass loads 4 (AVX2) actuators' value of a field with one
   instruction instead of one per actuator from the Params records.

   Blocked like step_all (core.pxd `Plan`): the block of actuators [b·HIL_BLOCK, (b+1)·HIL_BLOCK) owns
   HIL_PLAN_COLUMNS × HIL_BLOCK consecutive doubles, column c of its actuator k at [c·HIL_BLOCK + k]. A
   pass thus reads one contiguous stretch per block; whole-rig columns n doubles apart would put
   every column of an actuator in the same L1 set whenever n·8 bytes is a multiple of 4 KiB.

   plan.pxi `prepare` writes actuator j's values from its Params whenever they change (Kernel.set_params,
   the real-time loop's parameter command); nothing else writes them. Flags are 1.0 / 0.0 (a compare of
   doubles selects lanes in the same vector width as the arithmetic). */

#ifndef HIL_PLAN_H
#define HIL_PLAN_H

#define HIL_BLOCK 32   /* actuators per block of step_all and of the plan (their Params and State stay in L1) */

/* The columns: params.def's planned fields and derived columns, in its order; then what step_block runs
   for a block (HIL_* kinds below, as a double). */
enum {
#define HIL_PARAM(type, name, neutral, doc)
#define HIL_PLANNED(type, name, column, neutral, doc) PL_##column,
#define HIL_COLUMN(column, doc) PL_##column,
#include "params.def"
#undef HIL_PARAM
#undef HIL_PLANNED
#undef HIL_COLUMN
    PL_KINDS,               /* the actuator's: the vector math, laws and features it uses */
    PL_BLOCK_KINDS,         /* lane 0: the OR over the block's lanes (prepare keeps it) */
    HIL_PLAN_COLUMNS
};

/* Kinds of work an actuator's step needs (PL_KINDS; plan.pxi `plan_row` sets them from its Params).
   step_block and the lane passes run a feature's code only when some lane of the block uses it
   (PL_BLOCK_KINDS): a branch on a block-uniform value outside the lane loops, each pass compiled in a
   version per combination of the kinds it tests (HIL_VERSIONS*). Where no lane uses a feature, every
   lane's select would discard its value, so skipping it changes no bit. */
enum {
    HIL_NEED_POW = 1,           /* bam's Stribeck |ω/θ̇s|^α with α not 1 or 2 */
    HIL_NEED_LOG = 2,           /* per step, not in the plan: a fresh pair of the noise generator */
    HIL_NEED_ZOH = 4,           /* the LuGre bristle's hold (σ0 > 0, not LAW_TORQUE) */
    HIL_LAWS_DXL = 8,           /* the Dynamixel firmware (dynamixel.pxi dxl_firmware) */
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
    HIL_USES_STRIBECK = 131072, /* the budget's Stribeck factor: an exponential */
    HIL_USES_MOTOR_X = 262144,  /* current limiter, peak budget, iron loss, flux derating, two thermal nodes */
    HIL_USES_BACKLASH = 524288, /* gear backlash: the motor side's own angle and velocity */
    HIL_USES_MECH_X = 1048576,  /* backlash, rising static friction, implicitfast (load.h) */
    HIL_USES_IMPLICIT = 2097152, /* implicitfast: the actuator's velocity derivative (motor.h) */
    HIL_LAWS_STS = 4194304      /* the Feetech laws (feetech.pxi sts_pwm_law, sts_firmware) */
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
#define HIL_VERSIONS3X(uses, a, b, c, x, F)                                                            \
    switch ((uses) & ((a) | (b) | (c))) {                                                              \
    case 0: F(x); break;                                                                               \
    case (a): F((a) | (x)); break;                                                                     \
    case (b): F((b) | (x)); break;                                                                     \
    case (a) | (b): F((a) | (b) | (x)); break;                                                         \
    case (c): F((c) | (x)); break;                                                                     \
    case (a) | (c): F((a) | (c) | (x)); break;                                                         \
    case (b) | (c): F((b) | (c) | (x)); break;                                                         \
    default: F((a) | (b) | (c) | (x)); break;                                                          \
    }
#define HIL_VERSIONS3(uses, a, b, c, F) HIL_VERSIONS3X(uses, a, b, c, 0, F)
#define HIL_VERSIONS4(uses, a, b, c, d, F)                                                             \
    if ((uses) & (d)) { HIL_VERSIONS3X(uses, a, b, c, d, F) } else { HIL_VERSIONS3X(uses, a, b, c, 0, F) }

#endif
