/* Pass 3a of step_all (step.pxi step_block), the firmware laws but LAW_DXL's (dynamixel.pxi `dxl_firmware`,
   per actuator), lane by lane over the plan's columns (plan.h), branch-free like motor.h so GCC
   vectorizes them; the only copy of these laws. Three passes, the last two run only for a block that
   holds such a law (a lone actuator's step would otherwise wait on the slowest law of all; each pass
   overwrites only its own lanes' request):
   - hil_law_pass: the command's clean-up (NaN → 0, ctrlrange), the dcmotor controller layer
     (LAW_VOLTAGE, LAW_POSITION, LAW_VELOCITY; MuJoCo 3.7–3.11 "v1": slew limit, PID, integral clamp
     (anti-windup), Vmax and supply clip, and the advance of the slew and integral states), an ideal
     output torque (LAW_TORQUE);
   - hil_dxl_pwm_pass: bam's Dynamixel voltage law with its current limiter (LAW_DXL_PWM);
   - hil_current_law_pass: bam's eRob current law (LAW_EROB_PD) or a commanded current (LAW_CURRENT),
     within the supply's band.
   Each lane's values are the same bits as the branchy code they replaced. */

#ifndef HIL_LAW_H
#define HIL_LAW_H

#include <math.h>
#include <stddef.h>
#include "plan.h"
#include "select.h"

/* Lanes [0, m); P = the plan's columns at the block's first actuator (stride st).
   In: u_in (the command), thm (measured θ [rad]), omega (the motor side's ω [rad/s] at the output's scale:
   the output's, or with backlash ω + gap rate), open (the winding is open now),
   enabled (the law drives).
   In/out: slew_u, integral (the dcmotor states; they advance on every voltage law, as
   mj_nextActivation does).
   Out: u (the command after the clean-up: the other laws' input), Ld (g·ω [rad/s]), and the motor's
   lanes (motor.h HilLawOut): vmode, off, V [V] (the dcmotor laws'; 0 on LAW_DXL lanes, whose
   dxl_firmware sets it, and on the current and torque laws'), i and f (0: the current laws' pass sets
   theirs), torque (LAW_TORQUE's output torque [N·m], else 0). `uses`: the block's kinds (plan.h; the
   dcmotor layer only for a block that holds such a law). */
#define HIL_LAW_ARGS                                                                                   \
    const double* restrict P, ptrdiff_t st, int m, double dt, const double* restrict u_in,            \
    const double* restrict thm, const double* restrict omega, const double* restrict open,            \
    const double* restrict enabled, double* restrict slew_u, double* restrict integral,               \
    double* restrict u_out, double* restrict Ld_out, double* restrict vmode, double* restrict off,    \
    double* restrict V_out, double* restrict i_out, double* restrict f_out, double* restrict torque
static inline __attribute__((always_inline)) void hil_law_lanes(HIL_LAW_ARGS, const int uses) {
#define C(col) P[(col) * st + j]
    int j;
#pragma GCC ivdep
    for (j = 0; j < m; j++) {
        double u = u_in[j], Ld = C(PL_GEAR) * omega[j], su = slew_u[j], integ = integral[j];
        double slew = C(PL_SLEW), ki = C(PL_KI), imax = C(PL_IMAX), rate_slew = 0.0, rate_int = 0.0, integ1;
        int64_t vm = C(PL_VMODE) != 0, en = enabled[j] != 0;
        u = hil_sel(isnan(u), 0.0, u);
        u = hil_sel(C(PL_CTRL_LIMITED) != 0, hil_clip(u, C(PL_CTRL_LO), C(PL_CTRL_HI)), u);
        u_out[j] = u;
        Ld_out[j] = Ld;
        vmode[j] = hil_sel(vm, 1.0, 0.0);
        off[j] = hil_sel(!en | (open[j] != 0), 1.0, 0.0);
        torque[j] = hil_sel((C(PL_LAW_TORQUE) != 0) & en, u, 0.0);
        i_out[j] = 0.0;
        f_out[j] = 0.0;
        V_out[j] = 0.0;
        if (uses & HIL_USES_DC_LAW) {   /* dcmotor controller layer */
            double Lm = C(PL_GEAR) * thm[j], vs = C(PL_VS), kp = C(PL_KP), vmax = C(PL_VMAX), e, V, Vp, Vv, us;
            int64_t dc = C(PL_DC_LAW) != 0, pos = C(PL_LAW_POSITION) != 0, vel = C(PL_LAW_VELOCITY) != 0;
            int64_t slewed = dc & (slew > 0);
            us = hil_sel(slewed, hil_clip(u, su - slew * dt, su + slew * dt), u);
            rate_slew = hil_sel(slewed, (us - su) * C(PL_INV_DT), 0.0);
            /* anti-windup: at the clamp, only an error that leads back inside integrates
               (Cython's min(e, 0.0) and max(e, 0.0): 0 < e ? 0 : e and 0 > e ? 0 : e) */
            e = hil_sel(pos, us - Lm, us);
            e = hil_sel((imax > 0) & (integ >= imax), hil_sel(0.0 < e, 0.0, e),
                        hil_sel((imax > 0) & (integ <= -imax), hil_sel(0.0 > e, 0.0, e), e));
            rate_int = hil_sel(dc & (ki > 0), e, 0.0);
            Vp = kp * (us - Lm) + ki * integ - C(PL_KD) * Ld;
            Vv = kp * (us - Ld) + ki * (integ - Lm);
            V = hil_sel(pos, Vp, hil_sel(vel, Vv, us));
            V = hil_sel(vmax > 0, hil_clip(V, -vmax, vmax), V);
            V = hil_sel(vs > 0, hil_clip(V, -vs, vs), V);
            V_out[j] = hil_sel(dc, V, 0.0);
        }
        /* the slew and integral states advance on every voltage law (at rate 0 but the dcmotor's) */
        slew_u[j] = hil_sel((slew > 0) & vm, su + dt * rate_slew, su);
        integ1 = integ + dt * rate_int;
        integ1 = hil_sel(imax > 0, hil_clip(integ1, -imax, imax), integ1);
        integral[j] = hil_sel((ki > 0) & vm, integ1, integ);
    }
#undef C
}
static inline __attribute__((always_inline)) void hil_law_pass(HIL_LAW_ARGS, int uses) {
#define HIL_LAW(kinds)                                                                                 \
    hil_law_lanes(P, st, m, dt, u_in, thm, omega, open, enabled, slew_u, integral, u_out, Ld_out, vmode, \
                  off, V_out, i_out, f_out, torque, (kinds))
    HIL_VERSIONS1(uses, HIL_USES_DC_LAW, HIL_LAW)
#undef HIL_LAW
}

/* bam Dynamixel voltage law on the LAW_DXL_PWM lanes of [0, m): duty from the position error, the
   firmware current limiter |(duty·vin − emf)/R| ≤ max_current, the PWM limit. In: u (cleaned), thm,
   Ld, R (hil_law_pass, sense.h). Out: V [V] on those lanes. */
static inline void hil_dxl_pwm_pass(const double* restrict P, ptrdiff_t st, int m, const double* restrict u,
                                    const double* restrict thm, const double* restrict Ld,
                                    const double* restrict R, double* restrict V) {
#define C(col) P[(col) * st + j]
    int j;
#pragma GCC ivdep
    for (j = 0; j < m; j++) {
        double vs = C(PL_VS), inv_vs = C(PL_INV_VS), kt = C(PL_KT), ilim = R[j] * C(PL_MAX_CURRENT);
        double e = C(PL_DUTY_GAIN) * (u[j] - thm[j]);
        e = hil_sel(C(PL_MAX_CURRENT) > 0, hil_clip(e, (kt * Ld[j] - ilim) * inv_vs, (kt * Ld[j] + ilim) * inv_vs), e);
        V[j] = hil_sel(C(PL_LAW_DXL_PWM) != 0, vs * hil_clip(e, -C(PL_MAX_DUTY), C(PL_MAX_DUTY)), V[j]);
    }
#undef C
}

/* Current laws on the LAW_EROB_PD and LAW_CURRENT lanes of [0, m): bam's eRob PD or the command,
   within the supply feasibility band of a current-controlled drive (bam ErobActuator, 48 V); an open
   winding carries none. In: u (cleaned), thm, omega, Ld, R and G = 1/R, open, enabled. Out on those lanes: i [A],
   f = kt·i [N·m] and the terminal voltage V = R·i + kt·Ld. */
static inline void hil_current_law_pass(const double* restrict P, ptrdiff_t st, int m,
                                        const double* restrict u, const double* restrict thm,
                                        const double* restrict omega, const double* restrict Ld_in,
                                        const double* restrict R_in, const double* restrict G_in,
                                        const double* restrict open,
                                        const double* restrict enabled, double* restrict V,
                                        double* restrict i_out, double* restrict f_out) {
#define C(col) P[(col) * st + j]
    int j;
#pragma GCC ivdep
    for (j = 0; j < m; j++) {
        double vs = C(PL_VS), kt = C(PL_KT), R = R_in[j], G = G_in[j], Ld = Ld_in[j], i_pd, i, f;
        int64_t en = enabled[j] != 0, opened = open[j] != 0;
        int64_t current_law = (C(PL_LAW_EROB_PD) != 0) | (C(PL_LAW_CURRENT) != 0);
        i_pd = hil_clip(hil_sel(en, C(PL_PD_KP) * (u[j] - thm[j]) - C(PL_PD_D) * omega[j], 0.0),
                        -C(PL_MAX_AMPS), C(PL_MAX_AMPS));
        i = hil_sel(C(PL_LAW_EROB_PD) != 0, i_pd, hil_sel(en, u[j], 0.0));
        f = kt * i;
        f = hil_sel(vs > 0, hil_clip(f, -kt * G * vs - kt * kt * G * Ld, kt * G * vs - kt * kt * G * Ld), f);
        i = hil_sel(vs > 0, f / kt, i);
        i = hil_sel(opened, 0.0, i);
        f = hil_sel(opened, 0.0, f);
        V[j] = hil_sel(current_law, R * i + kt * Ld, V[j]);
        i_out[j] = hil_sel(current_law, i, i_out[j]);
        f_out[j] = hil_sel(current_law, f, f_out[j]);
    }
#undef C
}

#endif
