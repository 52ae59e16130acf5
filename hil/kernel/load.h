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

/* friction that varies with the winding temperature, which the friction paper leaves out (Duclusaud et al.
   §VII-A): the budget `bud` of lane j, every coefficient scaled alike by max(0, 1 + α_f·(T − T0)), with the
   winding `t_rise` [K] above ambient; `bud` itself where α_f is not given */
static inline double hil_budget_heated(const double* restrict P, ptrdiff_t st, ptrdiff_t j, double bud,
                                       double t_rise) {
#define C(col) P[(col) * st + j]
    double ft = 1.0 + C(PL_FRICTION_TEMPCOEF) * (t_rise + C(PL_AMBIENT) - C(PL_REFTEMP));
    return hil_sel(C(PL_FRICTION_TEMP) != 0, bud * hil_sel(ft > 0.0, ft, 0.0), bud);
#undef C
}

/* Lanes [0, m) of a block; P = the plan's columns at the block's first actuator (stride st); `uses` the
   block's kinds (plan.h: the budget, bam's step, the bristle hold and the extended mechanics only for a
   block that uses them).
   In: sin_q = sin(θ + q_offset), stribeck = exp(−|ω/θ̇s|^α), the bristle hold's zoh_a, zoh_ea =
   exp(a·dt), zoh_inv_a = 1/a, zoh_v = L̇ (pass 3), ext = external torque, torque = actuator torque (pass 3),
   T = winding temperature above ambient (pass 3) [K], dfdw = ∂torque/∂ω of the actuator (motor.h, read
   on implicitfast lanes only) [N·m·s/rad].
   In/out: theta, omega (the output's), bristle, gap, gap_rate (backlash: motor side − output), dwell (time
   the budget has held the joint) [s]. Out: friction = the budget's friction torque [N·m]. */
#define HIL_LOAD_ARGS                                                                                  \
    const double* restrict P, ptrdiff_t st, int m, double dt, const double* restrict sin_q,           \
    const double* restrict stribeck, const double* restrict zoh_a, const double* restrict zoh_ea,     \
    const double* restrict zoh_inv_a,                                                                  \
    const double* restrict zoh_v, const double* restrict ext, const double* restrict torque,          \
    const double* restrict T, const double* restrict dfdw,                                             \
    double* restrict theta, double* restrict omega, double* restrict bristle, double* restrict gap,   \
    double* restrict gap_rate, double* restrict dwell, double* restrict friction

/* bam's stopping torque clipped to the budget: the friction torque of a body whose τ_stop = Meff·ω/dt +
   τ_net would hold it still (bam/simulate.py `Simulator.step`) */
static inline double hil_stop(double bud, double tau_stop) {
    double stop = fabs(tau_stop);
    return -hil_sign(tau_stop) * hil_sel(bud < stop, bud, stop);
}

static inline __attribute__((always_inline)) void hil_load_lanes(HIL_LOAD_ARGS, const int uses) {
#define C(col) P[(col) * st + j]
    int j;
#pragma GCC ivdep
    for (j = 0; j < m; j++) {
        double g = C(PL_GEAR), w = omega[j], tau_act = torque[j], M = C(PL_INERTIA);
        double tau_e, tau_net, Meff, tau_stop, tau_f = 0.0, acc, wabs, w_euler, th_euler;
        double wd = w, w0 = w, bud = 0.0, rise = 0.0, s = 0.0, drag, ddrag, imp = 0.0, Mm = 1.0;
        int64_t euler = C(PL_EULER) != 0, held = 0, gapped = 0;
        tau_e = C(PL_GRAVITY_TORQUE) * sin_q[j] + ext[j];
        if (uses & HIL_USES_MECH_X) {
            /* with backlash the motor side turns at ω + gap rate, and its drag is the motor's */
            gapped = C(PL_GAP) != 0;
            wd = hil_sel(gapped, w + gap_rate[j], w);
        }
        wabs = fabs(wd);
        drag = wd * (C(PL_DAMPING_B1) + C(PL_DAMPING_B2) * wabs + C(PL_DAMPING_B3) * wd * wd) * g * g;
        tau_net = tau_act + tau_e - drag;
        ddrag = dt * (C(PL_DAMPING_B1) + 2.0 * C(PL_DAMPING_B2) * wabs + 3.0 * C(PL_DAMPING_B3) * wd * wd) * g * g;
        Meff = hil_sel(euler, M + ddrag, M);
        if (uses & HIL_USES_MECH_X) {
            /* MuJoCo's implicitfast (engine_forward.c `mj_implicitSkip`): M − dt·∂f/∂ω, the actuator's
               velocity derivative (motor.h) next to the drag's */
            imp = dt * hil_sel(C(PL_IMPLICIT) != 0, dfdw[j], 0.0);
            Meff = hil_sel(C(PL_IMPLICIT) != 0, Meff - imp, Meff);
            /* in contact the two sides move as one: their momentum, then the common velocity */
            Mm = C(PL_MOTOR_INERTIA) + hil_sel(euler, ddrag, 0.0) - imp;
            w0 = hil_sel(gapped, (Mm * wd + (M - C(PL_MOTOR_INERTIA)) * w) / Meff, w);
        }
        /* bam/simulate.py `Simulator.step`: the friction torque is the stopping torque clipped to the budget */
        if (uses & HIL_USES_BUDGET) {
            s = hil_sel(C(PL_STRIBECK) != 0, stribeck[j], 0.0);
            bud = hil_budget_heated(P, st, j, hil_budget(P, st, j, tau_act, tau_e, w, s), T[j]);
            if (uses & HIL_USES_MECH_X) {
                /* rising static friction (Armstrong-Hélouvry, Dupont, Canudas de Wit, Automatica 30(7) 1994,
                   their seven-parameter model): after t held still the breakaway level grows by
                   (Fs∞ − Fs0)·t/(t + γ); the friction paper's §VII-A leaves this dwell-time effect out */
                double td = dwell[j];
                rise = hil_sel(C(PL_STICTION) != 0, C(PL_STICTION_RISE) * td / (td + hil_sel(C(PL_STICTION) != 0, C(PL_STICTION_TIME), 1.0)), 0.0);
                bud = bud + rise;
            }
            tau_stop = Meff * C(PL_INV_DT) * w0 + tau_net;
            tau_f = hil_sel(C(PL_BUDGET) != 0, hil_stop(bud, tau_stop), 0.0);
            tau_net = hil_sel(C(PL_BUDGET) != 0, tau_net + tau_f, tau_net);
            held = (C(PL_BUDGET) != 0) & !(bud < fabs(tau_stop));
        }
        friction[j] = tau_f;
        acc = tau_net / Meff;   /* a division: where the budget stops the joint, ω + dt·acc is exactly 0 */
        /* MuJoCo's semi-implicit Euler; bam's step, velocity clipped */
        w_euler = w0 + dt * acc;
        th_euler = theta[j] + dt * w_euler;
        if (uses & HIL_USES_BAM) {
            double w_bam = hil_clip(w + acc * dt, -HIL_BAM_MAX_VELOCITY, HIL_BAM_MAX_VELOCITY);
            double th_bam = theta[j] + w_bam * dt + 0.5 * acc * dt * dt;
            w_euler = hil_sel(euler | gapped, w_euler, w_bam);
            th_euler = hil_sel(euler | gapped, th_euler, th_bam);
        }
        if (uses & HIL_USES_MECH_X) {
            /* gear backlash (MuJoCo DC motor model §1.2: a dead band where the motor turns without the
               output): each side steps on its own (the semi-implicit step; a massless output stands
               still), the output under its load and the budget with no motor torque across the open
               gap; where that step would leave the band the teeth meet: a perfectly inelastic contact,
               both sides at the step above (their common velocity w0 + dt·acc) with the gap at the
               band's edge */
            double Jm = C(PL_MOTOR_INERTIA), Jl = M - Jm, half = 0.5 * C(PL_BACKLASH);
            double wm = wd + dt * (tau_act - drag) / hil_sel(gapped, Mm, 1.0);
            double bud_o = 0.0, f_o = 0.0, stop_o = Jl * C(PL_INV_DT) * w + tau_e, wo, gf;
            int64_t held_o = 0;
            if (uses & HIL_USES_BUDGET) {
                bud_o = hil_budget(P, st, j, 0.0, tau_e, w, s);
                bud_o = hil_budget_heated(P, st, j, bud_o, T[j]) + rise;
                f_o = hil_sel(C(PL_BUDGET) != 0, hil_stop(bud_o, stop_o), 0.0);
                held_o = (C(PL_BUDGET) != 0) & !(bud_o < fabs(stop_o));
            }
            wo = hil_sel(held_o | !(Jl > 0.0), 0.0, w + dt * (tau_e + f_o) / hil_sel(Jl > 0.0, Jl, 1.0));
            gf = gap[j] + dt * (wm - wo);
            int64_t contact = gapped & (fabs(gf) > half), free_ = gapped & !contact;
            th_euler = hil_sel(free_, theta[j] + dt * wo, th_euler);
            w_euler = hil_sel(free_, wo, w_euler);
            friction[j] = hil_sel(free_, f_o, friction[j]);
            held = (free_ & held_o) | (!free_ & held);
            gap[j] = hil_sel(contact, hil_sign(gf) * half, hil_sel(free_, gf, gap[j]));
            gap_rate[j] = hil_sel(contact, 0.0, hil_sel(free_, wm - wo, gap_rate[j]));
            dwell[j] = hil_sel(C(PL_STICTION) != 0, hil_sel(held, dwell[j] + dt, 0.0), dwell[j]);
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
    hil_load_lanes(P, st, m, dt, sin_q, stribeck, zoh_a, zoh_ea, zoh_inv_a, zoh_v, ext, torque, T, dfdw, theta, \
                   omega, bristle, gap, gap_rate, dwell, friction, (kinds))
    /* the extended mechanics in one version with every other feature's code too (their selects keep
       each lane's bits): the common versions stay as compact as they were */
    if (uses & HIL_USES_MECH_X) {
        HIL_LOAD(HIL_USES_BUDGET | HIL_USES_BAM | HIL_NEED_ZOH | HIL_USES_MECH_X);
    } else {
        HIL_VERSIONS3(uses, HIL_USES_BUDGET, HIL_USES_BAM, HIL_NEED_ZOH, HIL_LOAD)
    }
#undef HIL_LOAD
}

#endif
