/* Pass 1 of step_all (step.pxi step_block), the part without the noise generator: the arguments of a
   block's sines, exponentials and powers from the pre-step state, lane by lane over the plan's columns
   (plan.h), branch-free like motor.h and load.h so GCC vectorizes it; every slot is written, unused
   ones with harmless values. Each lane's values are the same bits as the branchy code it replaced. */

#ifndef HIL_ARGS_H
#define HIL_ARGS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "plan.h"
#include "select.h"

/* Lanes [0, m); P = the plan's columns at the block's first actuator (stride st). In: theta, omega (the
   output's), theta_m, omega_m (the motor side's at the output's scale: the same arrays but with backlash).
   Out: sin_x[j] = Np·g·θm + φ (cogging), sin_x[HIL_BLOCK + j] = θ + q_offset (pendulum); exp_x[j] =
   −(g·ωm/ωs)² (LuGre; 0 without), exp_x[HIL_BLOCK + j] = bam's Stribeck −|ω/θ̇s|^α for α = 1 and 2 (0 without, or for
   another α, whose |ω/θ̇s| and α go to pow_x and pow_a with use_pow = 1; else 1, 1 and 0). */
static inline void hil_args_pass(const double* restrict P, ptrdiff_t st, int m, const double* restrict theta,
                                 const double* restrict omega, const double* restrict theta_m,
                                 const double* restrict omega_m, double* restrict sin_x, double* restrict exp_x,
                                 double* restrict pow_x, double* restrict pow_a, int64_t* restrict use_pow) {
#define C(col) P[(col) * st + j]
    int j;
#pragma GCC ivdep
    for (j = 0; j < m; j++) {
        double th = theta[j], w = omega[j], x, xs, alpha = C(PL_ALPHA);
        int64_t stribeck = (C(PL_BUDGET) != 0) & (C(PL_STRIBECK) != 0);
        int64_t use = stribeck & (alpha != 1.0) & (alpha != 2.0);
        sin_x[j] = C(PL_COG_POLES) * (C(PL_GEAR) * theta_m[j]) + C(PL_COG_PHASE);
        sin_x[HIL_BLOCK + j] = th + C(PL_Q_OFFSET);
        x = hil_sel(C(PL_LUGRE) != 0, C(PL_GEAR) * omega_m[j] * C(PL_INV_LUGRE_WS), 0.0);
        exp_x[j] = -x * x;
        xs = fabs(w * C(PL_INV_DTHETA_STRIBECK));
        exp_x[HIL_BLOCK + j] = hil_sel(stribeck & (alpha == 1.0), -xs, hil_sel(stribeck & (alpha == 2.0), -(xs * xs), 0.0));
        pow_x[j] = hil_sel(use, xs, 1.0);
        pow_a[j] = hil_sel(use, alpha, 1.0);
        use_pow[j] = use;
    }
#undef C
}

#endif
