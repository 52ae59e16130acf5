/* Pass 3a of step_all (core.pyx step_blocks), the dcmotor controller layer (LAW_VOLTAGE, LAW_POSITION,
   LAW_VELOCITY; MuJoCo 3.7–3.11 "v1"): slew limit, PID, integral clamp (anti-windup), Vmax and supply
   clip, and the advance of the slew and integral states. Lane by lane over the plan's columns (plan.h),
   branch-free like motor.h so GCC vectorizes it; the only copy of this law: firmware_step leaves
   these lanes' voltage to it. Each lane's values are the same bits as the branchy code it replaced. */

#ifndef HIL_LAW_H
#define HIL_LAW_H

#include <stddef.h>
#include "plan.h"
#include "select.h"

/* Lanes [0, m); P = the plan's columns at the block's first actuator (stride st). In: u (command after
   the ctrlrange clip), Lm (measured g·θ), Ld (g·ω), vs (supply [V]; ≤ 0 = ideal), vmode (the lane's law
   requests a voltage: the controller states advance, as mj_nextActivation does for every voltage law).
   In/out: slew_u, integral (the states), V (written for the dcmotor lanes only). */
static inline void hil_dc_law_pass(const double* restrict P, ptrdiff_t st, int m, double dt,
                                   const double* restrict u_in, const double* restrict Lm_in,
                                   const double* restrict Ld_in, const double* restrict vs_in,
                                   const double* restrict vmode, double* restrict slew_u,
                                   double* restrict integral, double* restrict V_out) {
#define C(col) P[(col) * st + j]
    int j;
#pragma GCC ivdep
    for (j = 0; j < m; j++) {
        double u = u_in[j], Lm = Lm_in[j], Ld = Ld_in[j], vs = vs_in[j], su = slew_u[j], integ = integral[j];
        double slew = C(PL_SLEW), ki = C(PL_KI), imax = C(PL_IMAX), kp = C(PL_KP), vmax = C(PL_VMAX);
        double e, V, Vp, Vv, rate_slew, rate_int, integ1;
        int dc = C(PL_DC_LAW) != 0, pos = C(PL_LAW_POSITION) != 0, vel = C(PL_LAW_VELOCITY) != 0;
        int slewed = dc & (slew > 0), vm = vmode[j] != 0;
        u = hil_sel(slewed, hil_clip(u, su - slew * dt, su + slew * dt), u);
        rate_slew = hil_sel(slewed, (u - su) * C(PL_INV_DT), 0.0);
        /* anti-windup: at the clamp, only an error that leads back inside integrates
           (Cython's min(e, 0.0) and max(e, 0.0): 0 < e ? 0 : e and 0 > e ? 0 : e) */
        e = hil_sel(pos, u - Lm, u);
        e = hil_sel((imax > 0) & (integ >= imax), hil_sel(0.0 < e, 0.0, e),
                    hil_sel((imax > 0) & (integ <= -imax), hil_sel(0.0 > e, 0.0, e), e));
        rate_int = hil_sel(dc & (ki > 0), e, 0.0);
        Vp = kp * (u - Lm) + ki * integ - C(PL_KD) * Ld;
        Vv = kp * (u - Ld) + ki * (integ - Lm);
        V = hil_sel(pos, Vp, hil_sel(vel, Vv, u));
        V = hil_sel(vmax > 0, hil_clip(V, -vmax, vmax), V);
        V = hil_sel(vs > 0, hil_clip(V, -vs, vs), V);
        V_out[j] = hil_sel(dc, V, V_out[j]);
        slew_u[j] = hil_sel((slew > 0) & vm, su + dt * rate_slew, su);
        integ1 = integ + dt * rate_int;
        integ1 = hil_sel(imax > 0, hil_clip(integ1, -imax, imax), integ1);
        integral[j] = hil_sel((ki > 0) & vm, integ1, integ);
    }
#undef C
}

#endif
