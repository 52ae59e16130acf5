/* Pass 3b of step_all (step.pxi step_block): the motor of a block of actuators — armature current,
   heating, torque saturation, thermal derating, gearbox efficiency, cogging and LuGre friction — lane
   by lane over the plan's columns (plan.h) and the block's arrays, branch-free like load.h, so GCC
   vectorizes it. Pass 3a (sense.h, law.h, and dynamixel.pxi `dxl_firmware` for LAW_DXL) hands over what
   the law asked for; each lane's result is the same bits as the branchy code it replaced. */

#ifndef HIL_MOTOR_H
#define HIL_MOTOR_H

#include <math.h>
#include <stddef.h>
#include "plan.h"
#include "select.h"

/* i_max(T) of the MuJoCo DC motor model §1.3.5 at absolute winding temperature t [°C]: the rated current
   up to T1, the safe one from T2, a smoothstep between */
static inline double hil_derated_current(const double* restrict P, ptrdiff_t st, ptrdiff_t j, double t) {
#define C(col) P[(col) * st + j]
    double x = (t - C(PL_DERATE_T1)) * C(PL_DERATE_INV_SPAN);
    double mid = C(PL_DERATE_I_SAFE) + (C(PL_DERATE_I_RATED) - C(PL_DERATE_I_SAFE)) * (1.0 - x * x * (3.0 - 2.0 * x));
    return hil_sel(t <= C(PL_DERATE_T1), C(PL_DERATE_I_RATED), hil_sel(t >= C(PL_DERATE_T2), C(PL_DERATE_I_SAFE), mid));
#undef C
}

/* The law's request per lane: */
typedef struct {
    const double* restrict vmode;    /* 1: a voltage law, V below is the terminal voltage asked for */
    const double* restrict off;      /* 1: torque off or the winding open (no current in a voltage law) */
    const double* restrict V;        /* [V] */
    const double* restrict i;        /* current law: its current [A] and motor torque kt·i [N·m] */
    const double* restrict f;
    const double* restrict R;        /* winding resistance at its temperature [ohm] */
    const double* restrict G;        /* its conductance 1/R [S] (one division per lane and step) */
    const double* restrict T;        /* winding temperature above ambient [K] (0 without a thermal state) */
    const double* restrict Ld;       /* motor-side velocity g·ω [rad/s] */
} HilLawOut;

/* Lanes [0, m); P = the plan's columns at the block's first actuator (stride st); `uses` the block's
   kinds (plan.h: the quasi-static current, derating and LuGre only for a block that uses them). In: law
   (above), cog_sin = sin(Np·L + φ), lugre_exp = exp(−(L̇/ωs)²), bristle = LuGre z. In/out: current [A],
   temp_rise [K], i2t (peak budget spent) [A²·s], housing (its rise, two-node thermal model) [K],
   temperature (the published one: the housing's with two nodes) [°C], torque (the law's output torque
   in, the actuator torque out) [N·m]. Out: i_out, v_out,
   derated (1: derating limits the current), the bristle hold's zoh_a, zoh_ea = a·dt and zoh_inv_a = 1/a
   (divided here, while the exponential of a·dt is still to come), dfdw = ∂torque/∂ω for implicitfast
   (written only for a block that uses it, HIL_USES_IMPLICIT) [N·m·s/rad]. */
#define HIL_MOTOR_ARGS                                                                                 \
    const double* restrict P, ptrdiff_t st, int m, double dt, HilLawOut law,                          \
    const double* restrict cog_sin, const double* restrict lugre_exp, const double* restrict bristle, \
    double* restrict current, double* restrict temp_rise, double* restrict i2t, double* restrict housing,  \
    double* restrict temperature, double* restrict torque,                                             \
    double* restrict i_out, double* restrict v_out, double* restrict derated, double* restrict zoh_a, \
    double* restrict zoh_ea, double* restrict zoh_inv_a, double* restrict dfdw
static inline __attribute__((always_inline)) void hil_motor_lanes(HIL_MOTOR_ARGS, const int uses) {
#define C(col) P[(col) * st + j]
    int j;
#pragma GCC ivdep
    for (j = 0; j < m; j++) {
        double R = law.R[j], G = law.G[j], V = law.V[j], Ld = law.Ld[j], T = law.T[j];
        /* magnet flux derating kt(T) = kt0(1 + α_m(T − T0)) (MuJoCo DC motor model §1.3.4); exactly kt0 without it */
        double kf = 1.0, kt = C(PL_KT);
        if (uses & HIL_USES_MOTOR_X) {
            kf = hil_sel(C(PL_FLUX) != 0, 1.0 + C(PL_FLUX_TEMPCOEF) * (T + C(PL_AMBIENT) - C(PL_REFTEMP)), 1.0);
            kt = kt * kf;
        }
        int64_t vmode = law.vmode[j] != 0, off = law.off[j] != 0, inductive = C(PL_INDUCTIVE) != 0;
        double i_state = current[j], di, i_next, i_v, f_v, i, f, fe, a = 0.0, imax_t = 0.0;
        int64_t i2t_spent = 0, limited = 0;
        /* voltage laws: the exact exponential current update (torque from i_{k+1}), or quasi-static */
        di = (V * G - kt * G * Ld - i_state) * C(PL_INV_TE);
        di = hil_sel(C(PL_DIDT_LIMITED) != 0, hil_clip(di, -C(PL_DIDT_MAX), C(PL_DIDT_MAX)), di);
        i_next = i_state + di * C(PL_TE) * C(PL_DECAY);
        i_v = i_state;
        f_v = kt * i_next;
        if (uses & HIL_USES_QS) {
            double i_qs = (V - kt * Ld) * G, f_qs = kt * G * V - kt * G * kt * Ld;
            i_v = hil_sel(inductive, i_state, i_qs);
            f_v = hil_sel(inductive, f_v, f_qs);
        }
        /* torque off / open winding: no current can flow, so neither torque nor back-EMF braking */
        i = hil_sel(vmode, hil_sel(off, 0.0, i_v), law.i[j]);
        f = hil_sel(vmode, hil_sel(off, 0.0, f_v), hil_sel(uses & HIL_USES_MOTOR_X, law.f[j] * kf, law.f[j]));
        i_next = hil_sel(vmode & !off & inductive, i_next, 0.0);
        v_out[j] = hil_sel(vmode & off, kt * Ld, V);
        if (uses & HIL_USES_MOTOR_X) {
            /* a servo's current limiter (current_limiter = 1): τmax/kt and the derated i_max(T) bound the
               current that flows, so heating, torque and the published current agree, and the drive
               lowers the terminal voltage to R·i + kt·g·ω (MuJoCo DC motor model §1.1, §1.3.5) */
            double il;
            il = C(PL_I_SAT);
            if (uses & HIL_USES_DERATE) {
                imax_t = hil_derated_current(P, st, j, T + C(PL_AMBIENT));
                il = hil_sel((C(PL_DERATE) != 0) & (imax_t < il), imax_t, il);
            }
            /* peak versus continuous (MuJoCo DC motor model §1.1): the peak current while the i²t budget lasts, the
               continuous one once it is spent; it refills at i_cont² − i² below the continuous current */
            int64_t peak = C(PL_PEAK) != 0, spent = i2t[j] >= C(PL_I2T_BUDGET);
            il = hil_sel(peak & !spent, C(PL_PEAK_CURRENT), il);
            int64_t lim = C(PL_LIMIT_CURRENT) != 0, flows = vmode & inductive;
            double i_c = hil_clip(i, -il, il), n_c = hil_clip(i_next, -il, il), i_f = hil_sel(flows, n_c, i_c);
            int64_t cut = lim & !(vmode & off) & (hil_sel(flows, n_c - i_next, i_c - i) != 0);
            limited = cut;
            v_out[j] = hil_sel(cut, R * i_f + kt * Ld, v_out[j]);
            f = hil_sel(cut, kt * i_f, f);
            i = hil_sel(lim, i_c, i);
            i_next = hil_sel(lim, n_c, i_next);
            i2t[j] = hil_sel(peak, hil_clip(i2t[j] + dt * (i_f * i_f - C(PL_I_SAT) * C(PL_I_SAT)), 0.0,
                                            C(PL_I2T_BUDGET)), i2t[j]);
            i2t_spent = peak & spent;
        }
        i_out[j] = hil_sel(vmode & inductive, i_next, i);
        current[j] = hil_sel(inductive, i_next, i_state);
        /* two thermal resistances (MuJoCo DC motor model §1.3): the winding sheds heat to the housing through R_th1,
           the housing to ambient through R_th2, and the servo's sensor reads the housing; one node: Th = 0 */
        if (uses & HIL_USES_MOTOR_X) {
            int64_t two = C(PL_TWO_NODE) != 0;
            double Th = hil_sel(two, housing[j], 0.0), q = (T - Th) * C(PL_INV_THERMAL_R);
            temp_rise[j] = hil_sel(C(PL_THERMAL) != 0,
                                   temp_rise[j] + dt * ((R * i * i + C(PL_IRON_LOSS) * Ld * Ld - q) * C(PL_INV_THERMAL_C)),
                                   temp_rise[j]);
            housing[j] = hil_sel(two, Th + dt * ((q - Th * C(PL_INV_THERMAL_R2)) * C(PL_INV_THERMAL_C2)), housing[j]);
            temperature[j] = hil_sel(two, Th + C(PL_AMBIENT), temperature[j]);
        }
        else {
            temp_rise[j] = hil_sel(C(PL_THERMAL) != 0,
                                   temp_rise[j] + dt * ((R * i * i - T * C(PL_INV_THERMAL_R)) * C(PL_INV_THERMAL_C)),
                                   temp_rise[j]);
        }
        /* electrical torque: saturation, derating, efficiency, cogging, LuGre */
        fe = hil_sel(C(PL_TAU_LIMITED) != 0, hil_clip(f, -C(PL_TAU_MAX), C(PL_TAU_MAX)), f);
        derated[j] = 0.0;
        if (uses & HIL_USES_DERATE) {
            imax_t = hil_derated_current(P, st, j, T + C(PL_AMBIENT));
            derated[j] = hil_sel((C(PL_ELECTRICAL) != 0) & (C(PL_DERATE) != 0) & (imax_t < C(PL_DERATE_I_RATED)), 1.0, 0.0);
            limited = limited | ((C(PL_DERATE) != 0) & ((fe < -kt * imax_t) | (fe > kt * imax_t)));
            fe = hil_sel(C(PL_DERATE) != 0, hil_clip(fe, -kt * imax_t, kt * imax_t), fe);
        }
        if (uses & HIL_USES_MOTOR_X)    /* a spent peak budget shows as derating */
            derated[j] = hil_sel(i2t_spent, 1.0, derated[j]);
        fe = fe * C(PL_EFFICIENCY);
        fe = hil_sel(C(PL_COG) != 0, fe + C(PL_COG_AMPLITUDE) * cog_sin[j], fe);
        if (uses & HIL_USES_LUGRE) {
            double gs = C(PL_LUGRE_TC) + (C(PL_LUGRE_TS) - C(PL_LUGRE_TC)) * lugre_exp[j], z = bristle[j], z_rate;
            a = hil_sel(gs > 0, -C(PL_LUGRE_S0) * fabs(Ld) / gs, 0.0);
            z_rate = a * z + Ld;
            fe = hil_sel(C(PL_LUGRE) != 0, fe - (C(PL_LUGRE_S0) * z + C(PL_LUGRE_S1) * z_rate), fe);
            a = hil_sel((C(PL_ELECTRICAL) != 0) & (C(PL_LUGRE) != 0), a, 0.0);
        }
        if (uses & HIL_USES_IMPLICIT) {
            /* implicitfast: ∂f/∂L̇ of a dcmotor as MuJoCo 3.11 takes it (engine_derivative.c `mjd_actuator_vel`,
               nameplate R0 and kt0): back-EMF −kt0²/R0 and the controller's kt0·dV/dL̇/R0 (dV/dL̇ = −kd in position,
               −kp in velocity), or kt0(dV/dL̇ − kt0)(1 − e^(−dt/te))/R0 through the current state; −σ1 of LuGre; none
               while the force sits at ±τmax. Beyond MuJoCo: × η, and no motor part while the torque is off
               or the current limiter or derating bind (the force then does not follow ω). */
            double kt0 = C(PL_KT), R0 = C(PL_RESISTANCE), dV, bv, tm = C(PL_TAU_MAX);
            dV = hil_sel(C(PL_LAW_POSITION) != 0, -C(PL_KD), hil_sel(C(PL_LAW_VELOCITY) != 0, -C(PL_KP), 0.0));
            bv = hil_sel(inductive, kt0 * (dV - kt0) * C(PL_DECAY) / R0, -kt0 * kt0 / R0 + kt0 * dV / R0);
            bv = hil_sel((C(PL_DC_LAW) != 0) & !off & !limited, bv * C(PL_EFFICIENCY), 0.0);
            bv = hil_sel((C(PL_LUGRE) != 0) & (C(PL_ELECTRICAL) != 0), bv - C(PL_LUGRE_S1), bv);
            int64_t clamped = (C(PL_TAU_LIMITED) != 0) & ((fe <= -tm) | (fe >= tm));
            dfdw[j] = hil_sel((C(PL_IMPLICIT) != 0) & !clamped, C(PL_GEAR) * bv * C(PL_GEAR), 0.0);
        }
        torque[j] = hil_sel(C(PL_ELECTRICAL) != 0, C(PL_GEAR) * fe, torque[j]);
        zoh_a[j] = a;
        zoh_ea[j] = a * dt;
        zoh_inv_a[j] = 1.0 / a;
    }
#undef C
}
static inline __attribute__((always_inline)) void hil_motor_pass(HIL_MOTOR_ARGS, int uses) {
#define HIL_MOTOR(kinds)                                                                               \
    hil_motor_lanes(P, st, m, dt, law, cog_sin, lugre_exp, bristle, current, temp_rise, i2t, housing,      \
                    temperature, torque, i_out, \
                    v_out, derated, zoh_a, zoh_ea, zoh_inv_a, dfdw, (kinds))
    /* implicitfast's derivative in one version with every other feature's code too (their selects keep
       each lane's bits), the common versions as compact as without it */
    if (uses & HIL_USES_IMPLICIT) {
        HIL_MOTOR(HIL_USES_QS | HIL_USES_DERATE | HIL_USES_LUGRE | HIL_USES_MOTOR_X | HIL_USES_IMPLICIT);
    } else {
        HIL_VERSIONS4(uses, HIL_USES_QS, HIL_USES_DERATE, HIL_USES_LUGRE, HIL_USES_MOTOR_X, HIL_MOTOR)
    }
#undef HIL_MOTOR
}

#endif
