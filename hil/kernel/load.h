/* Pass 4 of step_all (step.pxi step_block): load, bam's friction budget, integration and the LuGre
   bristle update of a block of actuators, lane by lane over struct-of-arrays data (the plan's columns,
   plan.h, and the block's arrays), written branch-free: every lane computes each feature's value and
   a select keeps it or the neutral one, so GCC vectorizes the loop (AVX2: 4 actuators per instruction
   in isa.h's AVX2 copy). A select returns one of two values exactly, so each lane's result is the same
   bits as the branchy per-actuator code it replaced, whatever its neighbours' features. */

#ifndef HIL_LOAD_H
#define HIL_LOAD_H

#include <math.h>
#include <stddef.h>
#include "plan.h"
#include "select.h"

#define HIL_BAM_MAX_VELOCITY 100.0   /* bam/simulate.py clips |dq| to 100 rad/s */

/* bam's M1–M6 budget τ_fm ≥ 0 (bam/model.py `compute_frictions`) of lane j with Stribeck factor s;
   unused terms have zero coefficients. The quadratic term applies while motor and external torque oppose:
   the smaller one's, none when they are equal. */
static inline double hil_budget(const double* restrict P, ptrdiff_t st, ptrdiff_t j, double tau_m,
                                double tau_e, double w, double s) {
#define C(col) P[(col) * st + j]
    double ae = fabs(tau_e), am = fabs(tau_m);
    double q_e = C(PL_KEQ) * tau_e * tau_e, q_m = C(PL_KMQ) * tau_m * tau_m;
    double q = hil_sel((C(PL_QUADRATIC) != 0) & (hil_sign(tau_m) != hil_sign(tau_e)),
                       hil_sel(ae < am, q_e, hil_sel(ae > am, q_m, 0.0)), 0.0);
    return (C(PL_KC)
            + C(PL_KL) * fabs(tau_m - tau_e)
            + fabs(C(PL_KE) * tau_e - C(PL_KM) * tau_m)
            + s * (C(PL_KCS)
                   + C(PL_KLS) * fabs(tau_m - tau_e)
                   + fabs(C(PL_KES) * tau_e - C(PL_KMS) * tau_m)
                   + q)
            + C(PL_KV) * fabs(w));
#undef C
}

/* Lanes [0, m) of a block; P = the plan's columns at the block's first actuator (stride st); `uses` the
   block's kinds (plan.h: the budget, bam's step and the bristle hold only for a block that uses them).
   In: sin_q = sin(θ + q_offset), stribeck = exp(−|ω/θ̇s|^α), the bristle hold's zoh_a, zoh_ea =
   exp(a·dt), zoh_inv_a = 1/a, zoh_v = L̇ (pass 3), ext = external torque, torque = actuator torque (pass 3),
   T = winding temperature above ambient (pass 3) [K].
   In/out: theta, omega, bristle. Out: friction = the budget's friction torque [N·m]. */
#define HIL_LOAD_ARGS                                                                                  \
    const double* restrict P, ptrdiff_t st, int m, double dt, const double* restrict sin_q,           \
    const double* restrict stribeck, const double* restrict zoh_a, const double* restrict zoh_ea,     \
    const double* restrict zoh_inv_a,                                                                  \
    const double* restrict zoh_v, const double* restrict ext, const double* restrict torque,          \
    const double* restrict T,                                                                          \
    double* restrict theta, double* restrict omega, double* restrict bristle, double* restrict friction
static inline __attribute__((always_inline)) void hil_load_lanes(HIL_LOAD_ARGS, const int uses) {
#define C(col) P[(col) * st + j]
    int j;
#pragma GCC ivdep
    for (j = 0; j < m; j++) {
        double g = C(PL_GEAR), w = omega[j], tau_act = torque[j], M = C(PL_INERTIA);
        double tau_e, tau_net, Meff, tau_stop, tau_f = 0.0, acc, wabs, w_euler, th_euler;
        int64_t euler = C(PL_EULER) != 0;
        tau_e = C(PL_GRAVITY_TORQUE) * sin_q[j] + ext[j];
        wabs = fabs(w);
        tau_net = tau_act + tau_e - w * (C(PL_DAMPING_B1) + C(PL_DAMPING_B2) * wabs + C(PL_DAMPING_B3) * w * w) * g * g;
        Meff = hil_sel(euler, M + dt * (C(PL_DAMPING_B1) + 2.0 * C(PL_DAMPING_B2) * wabs + 3.0 * C(PL_DAMPING_B3) * w * w) * g * g,
                       M);
        /* bam/simulate.py `Simulator.step`: the friction torque is the stopping torque clipped to the budget */
        if (uses & HIL_USES_BUDGET) {
            double bud = hil_budget(P, st, j, tau_act, tau_e, w, hil_sel(C(PL_STRIBECK) != 0, stribeck[j], 0.0));
            double stop, ft = 1.0 + C(PL_FRICTION_TEMPCOEF) * (T[j] + C(PL_AMBIENT) - C(PL_REFTEMP));
            /* friction that varies with the winding temperature, which the friction paper leaves out
               (Duclusaud et al. §VII-A): every budget coefficient scaled alike */
            bud = hil_sel(C(PL_FRICTION_TEMP) != 0, bud * hil_sel(ft > 0.0, ft, 0.0), bud);
            tau_stop = Meff * C(PL_INV_DT) * w + tau_net;
            stop = fabs(tau_stop);
            tau_f = -hil_sign(tau_stop) * hil_sel(bud < stop, bud, stop);
            tau_f = hil_sel(C(PL_BUDGET) != 0, tau_f, 0.0);
            tau_net = hil_sel(C(PL_BUDGET) != 0, tau_net + tau_f, tau_net);
        }
        friction[j] = tau_f;
        acc = tau_net / Meff;   /* a division: where the budget stops the joint, ω + dt·acc is exactly 0 */
        /* MuJoCo's semi-implicit Euler; bam's step, velocity clipped */
        w_euler = w + dt * acc;
        th_euler = theta[j] + dt * w_euler;
        if (uses & HIL_USES_BAM) {
            double w_bam = hil_clip(w + acc * dt, -HIL_BAM_MAX_VELOCITY, HIL_BAM_MAX_VELOCITY);
            double th_bam = theta[j] + w_bam * dt + 0.5 * acc * dt * dt;
            w_euler = hil_sel(euler, w_euler, w_bam);
            th_euler = hil_sel(euler, th_euler, th_bam);
        }
        theta[j] = th_euler;
        omega[j] = w_euler;
        /* LuGre bristle: the exact zero-order hold, the plain Euler step where a ≈ 0 */
        if (uses & HIL_NEED_ZOH) {
            double a = zoh_a[j], ea = zoh_ea[j], z = bristle[j];
            z = hil_sel(fabs(a) > 1e-15, ea * z + (ea - 1.0) * zoh_inv_a[j] * zoh_v[j], z + dt * zoh_v[j]);
            bristle[j] = hil_sel(C(PL_BRISTLE) != 0, z, bristle[j]);
        }
    }
#undef C
}
static inline __attribute__((always_inline)) void hil_load_pass(HIL_LOAD_ARGS, int uses) {
#define HIL_LOAD(kinds)                                                                                \
    hil_load_lanes(P, st, m, dt, sin_q, stribeck, zoh_a, zoh_ea, zoh_inv_a, zoh_v, ext, torque, T, theta, omega, \
                   bristle, \
                   friction, (kinds))
    HIL_VERSIONS3(uses, HIL_USES_BUDGET, HIL_USES_BAM, HIL_NEED_ZOH, HIL_LOAD)
#undef HIL_LOAD
}

#endif
