/* The encoder noise generator of step_all (step.pxi step_block, pass 1): each actuator's xorshift64*
   stream (State.rng) and Marsaglia's polar method. The first attempt of a block's pairs runs lane by
   lane and branch-free, so GCC vectorizes it (the 64-bit multiply as 32-bit products, the conversion to
   double by exponent bits: AVX2 has neither instruction); the rejected lanes (1 − π/4 ≈ 21 %), and the
   lanes of a partial vector, draw with `hil_uniform` per actuator (step.pxi `noise_polar`). Each lane
   draws the same numbers in the same order as a per-actuator loop, so the stream stays a pure function
   of (seed, k). */

#ifndef HIL_NOISE_H
#define HIL_NOISE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "plan.h"
#include "select.h"

#define HIL_NOISE_RETRY 1   /* hil_noise_pass: some lane's first pair was rejected */
#define HIL_NOISE_DREW 2    /* some lane drew a pair */
#define HIL_XORSHIFT_STAR_M 2685821657736338717ULL   /* xorshift64*'s output multiplier */
#define HIL_TWO_POW_M53 (1.0 / 9007199254740992.0)   /* 2^−53: 53 bits to (0, 1] */

/* the state after x (xorshift64: 12, 25, 27) */
static inline uint64_t hil_xorshift(uint64_t x) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return x;
}

/* xorshift64*'s output of state x as a double in (0, 1]: the top 53 bits of x·M times 2^−53, plus
   1e-300 so that it is never 0 (log). The 53-bit integer becomes a double through the exponent bits of
   2^52 (its upper 52 bits) and one exact addition (its last bit). */
static inline double hil_uniform_of(uint64_t x) {
    const double two52 = 0x1p52;
    uint64_t v = (x * HIL_XORSHIFT_STAR_M) >> 11, h = (v >> 1) | 0x4330000000000000ULL;
    double d;
    memcpy(&d, &h, sizeof d);
    d = 2.0 * (d - two52) + hil_sel((v & 1) != 0, 1.0, 0.0);
    return d * HIL_TWO_POW_M53 + 1e-300;
}

/* the next uniform deviate of a stream, advancing it: hil_uniform_of's value, for per-actuator code
   (the same bits by the scalar conversion, shorter than the vectorizable one) */
static inline double hil_uniform(uint64_t* state) {
    *state = hil_xorshift(*state);
    return (double)((*state * HIL_XORSHIFT_STAR_M) >> 11) * HIL_TWO_POW_M53 + 1e-300;
}

/* Lane j draws a pair this step: its encoder is noisy, holds no spare deviate and is not stuck after the
   first step. P = the plan's columns at the block's first actuator (stride st). */
static inline int hil_noise_draws(const double* restrict P, ptrdiff_t st, int j, const double* restrict k,
                                  const double* restrict has_spare) {
#define C(col) P[(col) * st + j]
    return (C(PL_ENC_NOISE) > 0) & (has_spare[j] == 0) & !((C(PL_ENC_STUCK) != 0) & (k[j] > 0));
#undef C
}

/* Lanes [0, m) (whole vectors: step.pxi draws a partial one's lanes per actuator); P as above. Out: a
   drawing lane's first attempt (gauss_x, gauss_y in (−1, 1], gauss_r = gauss_log = x² + y²; 0, 0, 1, 1
   for a lane that does not draw), rng advanced past it, retry = 1 where 0 < r < 1 failed. Returns
   HIL_NOISE_DREW and HIL_NOISE_RETRY as they apply to some lane; without a drawing lane only the neutral values (and no
   retry: the caller reads it only with HIL_NOISE_RETRY). */
static inline int hil_noise_pass(const double* restrict P, ptrdiff_t st, int m, const double* restrict k,
                                 const double* restrict has_spare, uint64_t* restrict rng,
                                 double* restrict gauss_x, double* restrict gauss_y, double* restrict gauss_r,
                                 double* restrict gauss_log, int64_t* restrict retry) {
    int j;
    int64_t drew = 0, again = 0;
    for (j = 0; j < m; j++) drew |= hil_noise_draws(P, st, j, k, has_spare);
    if (!drew) {   /* a step that uses the spares (every other one, for actuators that started together) */
        for (j = 0; j < m; j++) {
            gauss_x[j] = gauss_y[j] = 0.0;
            gauss_r[j] = gauss_log[j] = 1.0;
        }
        return 0;
    }
#pragma GCC ivdep
    for (j = 0; j < m; j++) {
        int64_t draw = hil_noise_draws(P, st, j, k, has_spare);
        uint64_t s0 = rng[j], s1 = hil_xorshift(s0), s2 = hil_xorshift(s1), keep = -(uint64_t)draw;
        double x = 2.0 * hil_uniform_of(s1) - 1.0, y = 2.0 * hil_uniform_of(s2) - 1.0, r = x * x + y * y;
        int64_t rejected = draw & !((0.0 < r) & (r < 1.0));
        rng[j] = (s2 & keep) | (s0 & ~keep);
        gauss_x[j] = hil_sel(draw, x, 0.0);
        gauss_y[j] = hil_sel(draw, y, 0.0);
        gauss_r[j] = gauss_log[j] = hil_sel(draw, r, 1.0);
        retry[j] = rejected;
        again |= rejected;
    }
    return HIL_NOISE_DREW | (again ? HIL_NOISE_RETRY : 0);
}

#endif
