/* Sensing and faults of step_all (step.pxi step_block), lane by lane over the plan's columns (plan.h)
   and the block's arrays, branch-free like motor.h so GCC vectorizes them:
   - hil_sense_pass (pass 3a, before the law): the encoder (stuck, slip, noise, quantization), the
     open-circuit fault (time trigger, open fraction of each motor revolution), the winding's resistance
     and temperature, the overheating latch and the shutdown it causes;
   - hil_fault_latch_pass (after the motor, pass 3b): the latches that watch the current i_out (the
     behavioural open-circuit trigger, the overload), and the step's fault bits.
   Integer State fields live in the lanes as doubles (small integers, exact); fault bits as a double
   holding their sum (distinct bits, exact), the latched bits as one flag each. Each lane's values are the same bits as the branchy code they replaced. */

#ifndef HIL_SENSE_H
#define HIL_SENSE_H

#include <math.h>
#include <stddef.h>
#include "plan.h"
#include "select.h"

#define HIL_FAULT_OPEN_CIRCUIT 1.0   /* core.pxd FAULT_* bits */
#define HIL_FAULT_DERATED 8.0
#define HIL_FAULT_OVERHEAT 16.0
#define HIL_FAULT_ENCODER_SLIP 64.0
#define HIL_FAULT_OVERLOAD 128.0

/* The polar method's scale sqrt(−2·log r / r) of the fresh pairs, lanes [0, m), in place of r
   (gauss_r: r; gauss_log: log r). Only for a step that drew a pair: hil_sense_pass reads it on those
   lanes only. */
static inline void hil_gauss_scale_pass(int m, const double* restrict gauss_log, double* restrict gauss_r) {
    int j;
#pragma GCC ivdep
    for (j = 0; j < m; j++) gauss_r[j] = sqrt(-2.0 * gauss_log[j] / gauss_r[j]);
}

/* Lanes [0, m); P = the plan's columns at the block's first actuator (stride st); `uses` the block's
   kinds (plan.h: the noise and open-circuit code runs only for a block that uses them).
   In: theta (pre-step θ [rad]), k (steps taken), the noise pair of pass 1 / 2 (gauss_x, gauss_y, and
   gauss_r: the polar method's scale where a pair was drawn, hil_gauss_scale_pass), temp_rise [K],
   lat_overheat / lat_overload (1: that bit latched), enable (the input).
   In/out: theta_meas (the measured position [rad]; the last one where the encoder is stuck), enc_offset
   (slip [rad]), has_spare / gauss_spare (the polar method's second deviate), oc_active (open-circuit
   latch), shutdown (torque off by a latched fault).
   Out: flags (the fault bits known before the motor, latches aside), overheat (1: latch FAULT_OVERHEAT),
   open (the winding is open now), R [ohm] and G = 1/R [S], T (temperature above ambient, 0 without a thermal state)
   [K], temperature [°C] (NaN without), enabled (the law drives: enabled and not shut down).
   always_inline: GCC 12's early inliner left this pass out of isa.h's flattened copies (a call to one
   baseline clone, not vectorized). */
#define HIL_SENSE_ARGS                                                                                 \
    const double* restrict P, ptrdiff_t st, int m, double dt, const double* restrict theta,           \
    const double* restrict k, const double* restrict gauss_x, const double* restrict gauss_y,         \
    const double* restrict gauss_r, const double* restrict temp_rise,                                 \
    const double* restrict lat_overheat, const double* restrict lat_overload,                         \
    const double* restrict enable, double* restrict theta_meas, double* restrict enc_offset,          \
    double* restrict has_spare, double* restrict gauss_spare, double* restrict oc_active,             \
    double* restrict shutdown, double* restrict flags, double* restrict overheat, double* restrict open, \
    double* restrict R, double* restrict G, double* restrict T, double* restrict temperature,          \
    double* restrict enabled
#define HIL_SENSE_CALL                                                                                 \
    P, st, m, dt, theta, k, gauss_x, gauss_y, gauss_r, temp_rise, lat_overheat, lat_overload, enable,  \
    theta_meas, enc_offset, has_spare, gauss_spare, oc_active, shutdown, flags, overheat, open, R, G,  \
    T, temperature, enabled
static inline __attribute__((always_inline)) void hil_sense_lanes(HIL_SENSE_ARGS, const int uses) {
#define C(col) P[(col) * st + j]
    int j;
#pragma GCC ivdep
    for (j = 0; j < m; j++) {
        double q, off, L, frac, Tr, temp, res;
        int64_t stuck = (C(PL_ENC_STUCK) != 0) & (k[j] > 0), oc, hot, shut;
        /* the encoder: slip, then noise (Marsaglia's polar method: the spare deviate, or a fresh pair's
           first with its second kept), then quantization to whole counts */
        off = enc_offset[j] + C(PL_ENC_SLIP) * dt;
        q = theta[j] + off;
        if (uses & HIL_USES_NOISE) {
            double r = gauss_r[j], spare = gauss_spare[j], noise = C(PL_ENC_NOISE);
            int64_t noisy = noise > 0, has = has_spare[j] != 0;
            int64_t use_spare = (!stuck) & noisy & has, fresh = (!stuck) & noisy & (!has);
            q = hil_sel(use_spare, q + noise * spare, hil_sel(fresh, q + noise * (gauss_x[j] * r), q));
            gauss_spare[j] = hil_sel(fresh, gauss_y[j] * r, spare);
            has_spare[j] = hil_sel(use_spare, 0.0, hil_sel(fresh, 1.0, has_spare[j]));
        }
        q = hil_sel(C(PL_ENC_QUANTIZED) != 0, hil_floor(q * C(PL_COUNTS_PER_RAD) + 0.5) * C(PL_RAD_PER_COUNT), q);
        theta_meas[j] = hil_sel(stuck, theta_meas[j], q);
        off = hil_sel(stuck, enc_offset[j], off);
        enc_offset[j] = off;
        /* open circuit: latched from oc_time on; then the source sees an open winding for oc_fraction of
           each motor revolution (Simscape). Without oc_fraction > 0 only a latch set from outside. */
        if (uses & HIL_USES_OC) {
            oc = (oc_active[j] != 0) | ((C(PL_OC_FRACTION) > 0) & (k[j] * dt >= C(PL_OC_TIME)));
            L = C(PL_GEAR) * theta[j];
            frac = L * (1.0 / (2.0 * M_PI));
            frac = frac - hil_floor(frac);
            open[j] = hil_sel(oc & (frac < C(PL_OC_FRACTION)), 1.0, 0.0);
        } else {
            oc = oc_active[j] != 0;
            open[j] = 0.0;
        }
        oc_active[j] = hil_sel(oc, 1.0, 0.0);
        flags[j] = C(PL_STATIC_FLAGS) + hil_sel(off != 0, HIL_FAULT_ENCODER_SLIP, 0.0)
                   + hil_sel(oc, HIL_FAULT_OPEN_CIRCUIT, 0.0);
        /* the winding at its temperature; overheating latches and, with the latch in shutdown_mask,
           shuts the torque off until the host clears it */
        Tr = hil_sel(C(PL_THERMAL) != 0, temp_rise[j], 0.0);
        res = hil_sel(C(PL_THERMAL) != 0,
                      C(PL_RESISTANCE) * (1.0 + C(PL_TEMPCOEF) * (Tr + C(PL_AMBIENT) - C(PL_REFTEMP))),
                      C(PL_RESISTANCE));
        R[j] = res;
        G[j] = 1.0 / res;
        T[j] = Tr;
        temp = hil_sel(C(PL_THERMAL) != 0, Tr + C(PL_AMBIENT), NAN);
        temperature[j] = temp;
        hot = (C(PL_TEMP_LIMIT) > 0) & (temp > C(PL_TEMP_LIMIT));
        overheat[j] = hil_sel(hot, 1.0, 0.0);
        shut = (shutdown[j] != 0) | ((C(PL_SHUT_OVERHEAT) != 0) & (hot | (lat_overheat[j] != 0)))
               | ((C(PL_SHUT_OVERLOAD) != 0) & (lat_overload[j] != 0));
        shutdown[j] = hil_sel(shut, 1.0, 0.0);
        enabled[j] = hil_sel((enable[j] != 0) & !shut, 1.0, 0.0);
    }
#undef C
}
static inline __attribute__((always_inline)) void hil_sense_pass(HIL_SENSE_ARGS, int uses) {
#define HIL_SENSE(kinds) hil_sense_lanes(HIL_SENSE_CALL, (kinds))
    HIL_VERSIONS2(uses, HIL_USES_NOISE, HIL_USES_OC, HIL_SENSE)
#undef HIL_SENSE
}

/* Lanes [0, m), after the motor: the latches that watch the current i_out, then the step's fault bits.
   |i_out| above a trigger current for longer than its duration, counted in steps (summing dt drifts:
   100 × 1e-4 < 0.01): the open-circuit trigger arms while that fault is not latched; the overload
   (Dynamixel Hardware Error bit 5) wherever overload_current > 0.
   In: i_out [A], derated (1: thermal derating limits the current), overheat (sense pass).
   In/out: oc_active, oc_timer, ol_timer [steps], lat_overheat / lat_overload (1: the bit is latched),
   flags (in: the sense pass's; out: the step's State.fault_flags, latches and derating included).
   `uses`: the block's kinds (the open-circuit trigger and the overload only for a block with them). */
#define HIL_LATCH_ARGS                                                                                 \
    const double* restrict P, ptrdiff_t st, int m, double dt, const double* restrict i_out,           \
    const double* restrict derated, const double* restrict overheat, double* restrict oc_active,      \
    double* restrict oc_timer, double* restrict ol_timer, double* restrict lat_overheat,              \
    double* restrict lat_overload, double* restrict flags
static inline __attribute__((always_inline)) void hil_fault_latch_lanes(HIL_LATCH_ARGS, const int uses) {
#define C(col) P[(col) * st + j]
    int j;
#pragma GCC ivdep
    for (j = 0; j < m; j++) {
        double ia = fabs(i_out[j]), hot, heavy_long = lat_overload[j];
        if (uses & HIL_USES_OC) {
            double t_oc = oc_timer[j] + 1.0;
            int64_t armed = (C(PL_OC_FRACTION) > 0) & (oc_active[j] == 0), over = ia > C(PL_OC_CURRENT);
            oc_timer[j] = hil_sel(armed, hil_sel(over, t_oc, 0.0), oc_timer[j]);
            oc_active[j] = hil_sel(armed & over & (t_oc * dt >= C(PL_OC_DURATION) * (1.0 - 1e-12)), 1.0, oc_active[j]);
        }
        if (uses & HIL_USES_OVERLOAD) {
            double t_ol = ol_timer[j] + 1.0;
            int64_t watched = C(PL_OL_CURRENT) > 0, heavy = ia > C(PL_OL_CURRENT);
            ol_timer[j] = hil_sel(watched, hil_sel(heavy, t_ol, 0.0), ol_timer[j]);
            heavy_long = hil_sel(watched & heavy & (t_ol * dt >= C(PL_OL_TIME) * (1.0 - 1e-12)), 1.0, heavy_long);
        }
        hot = hil_sel(overheat[j] != 0, 1.0, lat_overheat[j]);
        lat_overload[j] = heavy_long;
        lat_overheat[j] = hot;
        flags[j] = flags[j] + hil_sel(derated[j] != 0, HIL_FAULT_DERATED, 0.0)
                   + hil_sel(hot != 0, HIL_FAULT_OVERHEAT, 0.0) + hil_sel(heavy_long != 0, HIL_FAULT_OVERLOAD, 0.0);
    }
#undef C
}
static inline __attribute__((always_inline)) void hil_fault_latch_pass(HIL_LATCH_ARGS, int uses) {
#define HIL_LATCH(kinds)                                                                               \
    hil_fault_latch_lanes(P, st, m, dt, i_out, derated, overheat, oc_active, oc_timer, ol_timer,       \
                          lat_overheat, lat_overload, flags, (kinds))
    HIL_VERSIONS2(uses, HIL_USES_OC, HIL_USES_OVERLOAD, HIL_LATCH)
#undef HIL_LATCH
}

#endif
