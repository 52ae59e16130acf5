/* sin, exp, log and pow over the kernel's short per-block arrays (step.pxi step_all, pass 2), in place.

   The vector paths call glibc's libmvec for sin and log (the x86-64 vector ABI: _ZGVdN4v_* for AVX2,
   _ZGVeN8v_* for AVX-512; ≤ 4 ulp, the functions gcc emits for `omp simd` loops under -ffast-math) and
   compute exp, and pow as exp(y·log x), with vexp.h's exp, which GCC vectorizes inline; the path is
   picked at run time (hil_simd, from __builtin_cpu_supports; api.pxi defaults to AVX2, see there).
   Each lane's result depends only on its argument (libmvec's padded last vector, GCC's scalar remainder
   of the same operations), so an actuator's step does not depend on its position in a block
   (tests/hil/test_kernel_vmath.py). Without glibc on x86-64, without FMA, or when forced
   (hil_simd = 0), every call is libm's. */

#ifndef HIL_VMATH_H
#define HIL_VMATH_H

#include <math.h>
#include "vexp.h"

#define HIL_SIMD_SCALAR 0
#define HIL_SIMD_AVX2 1
#define HIL_SIMD_AVX512 2

static int hil_simd = HIL_SIMD_SCALAR;   /* the path step_all uses for rigs of HIL_SIMD_MIN_N or more */
/* A one-lane libmvec call (padded to a vector) costs more than libm's scalar call: smaller rigs stay
   on libm, so a rig's actuators all take one path whatever their position (round-off apart, a rig's
   size does not change its results either: ≤ 4 ulp per function). */
#define HIL_SIMD_MIN_N 8

/* the tail (and the scalar path): libm */
static void hil_sin_libm(double* x, const double* y, int i, int n) { (void)y; for (; i < n; i++) x[i] = sin(x[i]); }
/* At and below HIL_EXP_LOW exp(x) is at the bottom of the normal range or below, where libm rounds a
   subnormal result once and vexp.h's two scalings would round it twice: the vector paths take libm's exp
   for exactly those lanes (as libmvec itself does), and below HIL_EXP_ZERO, where libm returns +0 after an
   underflow path of its own, +0 directly. HIL_EXP_LOW is glibc 2.36's libmvec bound (found by bisection). */
#define HIL_EXP_LOW (-708.39599609375)
#define HIL_EXP_ZERO (-746.0)
static inline double hil_exp1(double x) { return x < HIL_EXP_ZERO ? 0.0 : exp(x); }
static void hil_exp_libm(double* x, const double* y, int i, int n) { (void)y; for (; i < n; i++) x[i] = hil_exp1(x[i]); }
static void hil_log_libm(double* x, const double* y, int i, int n) { (void)y; for (; i < n; i++) x[i] = log(x[i]); }
static void hil_pow_libm(double* x, const double* y, int i, int n) { for (; i < n; i++) x[i] = pow(x[i], y[i]); }

#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

/* libmvec's entry points (glibc ≥ 2.22; declared by <math.h> only under -ffast-math) */
__m256d _ZGVdN4v_sin(__m256d);
__m256d _ZGVdN4v_log(__m256d);
__m512d _ZGVeN8v_sin(__m512d);
__m512d _ZGVeN8v_log(__m512d);

/* exp of an array on a vector path: hil_exp_lane (vexp.h), which GCC vectorizes in each instruction-set
   copy, ≤ 1 ulp from libm (libmvec's exp would add a call and a round trip per vector). The
   lanes whose result is below the normal range, (HIL_EXP_ZERO, HIL_EXP_LOW], keep their (negative)
   argument in the loop and take libm's exp after it: the same bits as the libm path there. */
#define HIL_EXP_ARRAY(sfx, attr)                                                                      \
    attr static void hil_exp_##sfx(double* x, const double* y, int n) {                               \
        int i;                                                                                         \
        int64_t low = 0;                                                                               \
        (void)y;                                                                                       \
        for (i = 0; i < n; i++) {                                                                      \
            double v = x[i];                                                                           \
            int64_t t = (v <= HIL_EXP_LOW) & (v >= HIL_EXP_ZERO);                                      \
            low |= t;                                                                                  \
            x[i] = hil_sel(t, v, hil_exp_lane(v));                                                     \
        }                                                                                              \
        if (low)                                                                                       \
            for (i = 0; i < n; i++)                                                                    \
                if (x[i] < 0.0) x[i] = exp(x[i]);                                                      \
    }

/* pow of an array of x ≥ 0 (−0 taken as +0) on a vector path, as exp(y·log x): libmvec's log, then
   hil_exp_lane (libmvec's pow costs twice as much). The relative error grows with |y·log x|: ≤ 3 +
   |y·log x| ulp (tests/hil/test_kernel_vmath.py). The kernel's one power is bam's Stribeck factor
   exp(−|ω/θ̇s|^α): where the factor matters (|ω/θ̇s|^α of order 1) that is a few ulp, the factor itself
   within 2^−52 of libm's, and where |y·log x| is large the factor is 1 or 0 to far below round-off.
   x = +0 (an actuator held still by stiction): +0 for y > 0, +inf for y < 0; y = 0 gives 1 for every x. */
#define HIL_POW_ARRAY(sfx, attr)                                                                      \
    attr static void hil_pow_##sfx(double* x, const double* y, int n) {                               \
        int i;                                                                                         \
        hil_log_##sfx(x, y, n);                                                                        \
        for (i = 0; i < n; i++) x[i] = hil_sel(y[i] == 0.0, 1.0, hil_exp_lane(y[i] * x[i]));           \
    }

/* A path's function of an array: whole vectors, then the remaining lanes padded into one more vector
   (a lane's result never depends on where in the array it sits). */
#define HIL_VECTOR(fn, sfx, attr, w, V, load, store, call)                                            \
    attr static void hil_##fn##_##sfx(double* x, const double* y, int n) {                            \
        double px[w], py[w];                                                                           \
        int i = 0, k;                                                                                  \
        (void)y;                                                                                       \
        for (; i + w <= n; i += w) { V a = load(x + i), b = load(y + i); (void)b; store(x + i, call); } \
        if (i == n) return;                                                                            \
        for (k = 0; k < w; k++) { px[k] = i + k < n ? x[i + k] : 1.0; py[k] = i + k < n ? y[i + k] : 1.0; } \
        { V a = load(px), b = load(py); (void)b; store(px, call); }                                    \
        for (k = 0; i + k < n; k++) x[i + k] = px[k];                                                  \
    }
#define HIL_PATH(sfx, attr, w, V, load, store, isa)                                                   \
    HIL_VECTOR(sin, sfx, attr, w, V, load, store, _ZGV##isa##v_sin(a))                               \
    HIL_EXP_ARRAY(sfx, attr)                                                                         \
    HIL_VECTOR(log, sfx, attr, w, V, load, store, _ZGV##isa##v_log(a))                               \
    HIL_POW_ARRAY(sfx, attr)

HIL_PATH(avx2, __attribute__((target("avx2,fma"))), 4, __m256d, _mm256_loadu_pd, _mm256_storeu_pd, dN4)
HIL_PATH(avx512, __attribute__((target("avx512f,fma"))), 8, __m512d, _mm512_loadu_pd, _mm512_storeu_pd, eN8)

static int hil_simd_max(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("fma")) return HIL_SIMD_SCALAR;   /* vexp.h: every AVX2 CPU has it */
    if (__builtin_cpu_supports("avx512f")) return HIL_SIMD_AVX512;
    if (__builtin_cpu_supports("avx2")) return HIL_SIMD_AVX2;
    return HIL_SIMD_SCALAR;
}
#define HIL_DISPATCH(fn, x, y, n)                                                                    \
    if (path == HIL_SIMD_AVX512) fn##_avx512(x, y, n);                                               \
    else if (path == HIL_SIMD_AVX2) fn##_avx2(x, y, n);                                              \
    else fn##_libm(x, y, 0, n);
#else
static int hil_simd_max(void) { return HIL_SIMD_SCALAR; }
#define HIL_DISPATCH(fn, x, y, n) (void)path; fn##_libm(x, y, 0, n);
#endif

/* x[i] = f(x[i]) (pow: x[i] = x[i]^y[i]) for i < n, on `path` (≤ hil_simd_max()) */
static void hil_vsin(double* x, int n, int path) { HIL_DISPATCH(hil_sin, x, x, n) }
static void hil_vexp(double* x, int n, int path) { HIL_DISPATCH(hil_exp, x, x, n) }
static void hil_vlog(double* x, int n, int path) { HIL_DISPATCH(hil_log, x, x, n) }
static void hil_vpow(double* x, const double* y, int n, int path) { HIL_DISPATCH(hil_pow, x, y, n) }

#endif
