/* Branch-free selects for the kernel's lane passes (motor.h, load.h). */

#ifndef HIL_SELECT_H
#define HIL_SELECT_H

#include <stdint.h>
#include <math.h>
#include <string.h>

/* c ? a : b without a branch (GCC turns a ?: of doubles into control flow, which stops the vectorizer):
   a bitwise blend, exactly one of the two values. Conditions are 64-bit, as wide as the doubles whose
   compares make them: an `int` condition in a loop of doubles made GCC vectorize the loop 8 lanes wide
   for the ints, packing each 4-lane compare mask into 32-bit lanes and back. */
static inline double hil_sel(int64_t c, double a, double b) {
    uint64_t ua, ub, mask = -(uint64_t)(c != 0);
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    ua = (ua & mask) | (ub & ~mask);
    memcpy(&a, &ua, sizeof a);
    return a;
}

static inline double hil_sign(double x) { return hil_sel(x > 0, 1.0, hil_sel(x < 0, -1.0, 0.0)); }

/* x clipped to [lo, hi]: lo if x < lo else (hi if x > hi else x), as dynamixel.pxi `clip` (the branchy twin
   for per-actuator code) */
static inline double hil_clip(double x, double lo, double hi) { return hil_sel(x < lo, lo, hil_sel(x > hi, hi, x)); }

/* floor(x), exactly (every double, ±0, ±inf and NaN), built from a select: GCC vectorizes floor() only
   without -ftrapping-math (roundpd), which the kernel keeps. For |x| < 2^52, adding and subtracting 2^52
   rounds |x| to the nearest integer (the default rounding mode; GCC does not reassociate without
   -ffast-math); one down where that overshot x. From 2^52 on every double is an integer. */
static inline double hil_floor(double x) {
    double a = fabs(x), r = copysign((a + 0x1p52) - 0x1p52, x);
    r = r - hil_sel(r > x, 1.0, 0.0);
    return hil_sel(a < 0x1p52, r, x);
}

#endif
