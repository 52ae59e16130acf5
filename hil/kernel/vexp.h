/* exp of one double, branch-free, so that GCC vectorizes a loop of it (vmath.h's vector paths): no
   call and no array round trip through a vector ABI. Only IEEE arithmetic, bit operations, selects and
   fma(): compiled for a CPU with FMA (vmath.h's vector paths require it) each fma() is one instruction,
   and being exactly rounded it gives the same bits in a vector lane as in GCC's scalar remainder.

   Method (Tang / fdlibm e_exp.c's reduction): x = k·ln2 + r, |r| ≤ ln2/2, with ln2 split in two so that
   k·ln2_hi is exact (fdlibm's constants); e^r by its Taylor series to r^13 (the truncation error
   r^14/14! < 5e-18 is far below half an ulp), summed as 1 + (r + r²·P(r)) so that the last rounding
   dominates (≤ 1 ulp against libm, tests/hil/test_kernel_vmath.py); 2^k inserted in the exponent bits,
   in two halves so that k = 1024 still gives +inf and the bottom of the normal range stays reachable.
   Results below the normal range (x ≤ HIL_EXP_LOW) are the caller's to take from libm, as libmvec
   itself does. */

#ifndef HIL_VEXP_H
#define HIL_VEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "select.h"

#define HIL_EXP_SHIFT 0x1.8p52   /* adding it rounds |v| < 2^51 to an integer, read back from the low bits */

static inline double hil_exp_lane(double x) {
    const double inv_ln2 = 0x1.71547652b82fep0, ln2_hi = 0x1.62e42fee00000p-1, ln2_lo = 0x1.a39ef35793c76p-33;
    const double shift = HIL_EXP_SHIFT;
    double xc = hil_clip(x, -746.0, 710.0);   /* k stays in [−1077, 1025]; NaN passes */
    double t = fma(xc, inv_ln2, shift), kd = t - shift;
    double r = fma(-kd, ln2_lo, fma(-kd, ln2_hi, xc));   /* the inner one is exact (Sterbenz) */
    /* P(r) = 1/2! + r/3! + … + r^11/13! by Estrin's scheme: a short dependency chain (Horner's 12
       multiply-adds in a row left the vector pipes idle) */
    double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4, p;
    double a0 = fma(r, 1.0 / 6.0, 1.0 / 2.0), a1 = fma(r, 1.0 / 120.0, 1.0 / 24.0);
    double a2 = fma(r, 1.0 / 5040.0, 1.0 / 720.0), a3 = fma(r, 1.0 / 362880.0, 1.0 / 40320.0);
    double a4 = fma(r, 1.0 / 39916800.0, 1.0 / 3628800.0), a5 = fma(r, 1.0 / 6227020800.0, 1.0 / 479001600.0);
    uint64_t k, k1, k2, shift_bits;
    double s1, s2;
    p = fma(r8, fma(r2, a5, a4), fma(r4, fma(r2, a3, a2), fma(r2, a1, a0)));
    p = 1.0 + fma(r2, p, r);
    /* 2^k as 2^k1 · 2^k2, k1 = ⌊k/2⌋: logical shifts of a non-negative integer only (AVX2 has no 64-bit
       arithmetic shift) */
    memcpy(&k, &t, sizeof k);
    memcpy(&shift_bits, &shift, sizeof shift_bits);
    k -= shift_bits;
    k1 = ((k + 2048) >> 1) - 1024;
    k2 = k - k1;
    k1 = (k1 + 1023) << 52;
    k2 = (k2 + 1023) << 52;
    memcpy(&s1, &k1, sizeof s1);
    memcpy(&s2, &k2, sizeof s2);
    return p * s1 * s2;
}

#endif
