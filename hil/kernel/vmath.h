/* sin, exp, log and pow over the kernel's short per-block arrays (core.pyx step_all, pass 2), in place.

   The vector paths call glibc's libmvec (the x86-64 vector ABI: _ZGVdN4v_* for AVX2, _ZGVeN8v_* for
   AVX-512; ≤ 4 ulp, the same functions gcc emits for `omp simd` loops under -ffast-math), picked at run
   time (hil_simd, from __builtin_cpu_supports; core.pyx defaults to AVX2, see there). Each lane's result depends only on its argument, and
   the lanes that do not fill a whole vector go through libm, so an actuator's step depends on its
   position in a block only by that round-off (tests/hil/test_kernel_vmath.py). Without glibc on x86-64,
   or when forced (hil_simd = 0), every call is libm's. */

#ifndef HIL_VMATH_H
#define HIL_VMATH_H

#include <math.h>

#define HIL_SIMD_SCALAR 0
#define HIL_SIMD_AVX2 1
#define HIL_SIMD_AVX512 2

static int hil_simd = HIL_SIMD_SCALAR;   /* the path step_all uses for rigs of HIL_SIMD_MIN_N or more */
/* A one-lane libmvec call (padded to a vector) costs about twice libm's scalar call: smaller rigs stay
   on libm, so a rig's actuators all take one path whatever their position (round-off apart, a rig's
   size does not change its results either: ≤ 4 ulp per function). */
#define HIL_SIMD_MIN_N 8

/* the tail (and the scalar path): libm */
static void hil_sin_libm(double* x, const double* y, int i, int n) { (void)y; for (; i < n; i++) x[i] = sin(x[i]); }
/* At and below HIL_EXP_LOW exp(x) is at the bottom of the normal range or below, and libmvec computes
   such a lane by calling libm's exp for it after the whole vector (LuGre's −(L̇/ωs)² is far below at
   speed): the vector paths send exactly those lanes to libm themselves (hil_exp_lanes), and below
   HIL_EXP_ZERO, where libm returns +0 after an underflow path of its own, return +0 directly. The same
   bits as libmvec's, at a fraction of the cost. HIL_EXP_LOW is glibc 2.36's bound (found by bisection,
   AVX2 and AVX-512 alike); were another glibc's different, the lanes in between would differ by
   libmvec's ≤ 4 ulp, no more. */
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
__m256d _ZGVdN4v_exp(__m256d);
__m256d _ZGVdN4v_log(__m256d);
__m256d _ZGVdN4vv_pow(__m256d, __m256d);
__m512d _ZGVeN8v_sin(__m512d);
__m512d _ZGVeN8v_exp(__m512d);
__m512d _ZGVeN8v_log(__m512d);
__m512d _ZGVeN8vv_pow(__m512d, __m512d);

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
    HIL_VECTOR(exp, sfx, attr, w, V, load, store, hil_exp_lanes_##sfx(a))                            \
    HIL_VECTOR(log, sfx, attr, w, V, load, store, _ZGV##isa##v_log(a))                               \
    HIL_VECTOR(pow, sfx, attr, w, V, load, store, hil_pow_lanes_##sfx(a, b))

/* exp of one vector with its lanes at or below HIL_EXP_LOW (if any: one compare per vector) through libm */
#define HIL_EXP_LANES(sfx, attr, w, V, load, store, isa, tiny_mask)                                  \
    attr static inline V hil_exp_lanes_##sfx(V a) {                                                   \
        double in[w], out[w];                                                                          \
        int k;                                                                                         \
        if (!(tiny_mask)) return _ZGV##isa##v_exp(a);                                                 \
        store(in, a);                                                                                  \
        for (k = 0; k < w; k++) out[k] = in[k] <= HIL_EXP_LOW ? 0.0 : in[k];                           \
        store(out, _ZGV##isa##v_exp(load(out)));                                                       \
        for (k = 0; k < w; k++) if (in[k] <= HIL_EXP_LOW) out[k] = hil_exp1(in[k]);                    \
        return load(out);                                                                              \
    }
/* pow of one vector whose lanes with x = +0 and y > 0 are +0 (C99 F.9.4.4, what libm's pow returns):
   libmvec computes each such lane by calling libm's pow for it after the whole vector, and bam's
   Stribeck |ω/θ̇s|^α has them whenever an actuator stands still (stiction holds ω at exactly 0). One
   compare per vector; a vector of only such lanes skips the call. */
#define HIL_POW_ZERO(x, y) ((x) == 0.0 && !signbit(x) && (y) > 0.0)
#define HIL_POW_LANES(sfx, attr, w, V, load, store, isa, zero_mask, zero)                            \
    attr static inline V hil_pow_lanes_##sfx(V a, V b) {                                              \
        double x[w], y[w], r[w];                                                                       \
        int k, all = 1;                                                                                \
        if (!(zero_mask)) return _ZGV##isa##vv_pow(a, b);                                             \
        store(x, a);                                                                                   \
        store(y, b);                                                                                   \
        for (k = 0; k < w; k++) { all &= HIL_POW_ZERO(x[k], y[k]); r[k] = HIL_POW_ZERO(x[k], y[k]) ? 1.0 : x[k]; } \
        if (all) return zero;                                                                          \
        store(r, _ZGV##isa##vv_pow(load(r), b));                                                       \
        for (k = 0; k < w; k++) if (HIL_POW_ZERO(x[k], y[k])) r[k] = 0.0;                              \
        return load(r);                                                                                \
    }
HIL_POW_LANES(avx2, __attribute__((target("avx2"))), 4, __m256d, _mm256_loadu_pd, _mm256_storeu_pd, dN4,
              _mm256_movemask_pd(_mm256_cmp_pd(a, _mm256_setzero_pd(), _CMP_EQ_OQ)), _mm256_setzero_pd())
HIL_POW_LANES(avx512, __attribute__((target("avx512f"))), 8, __m512d, _mm512_loadu_pd, _mm512_storeu_pd, eN8,
              _mm512_cmp_pd_mask(a, _mm512_setzero_pd(), _CMP_EQ_OQ), _mm512_setzero_pd())

HIL_EXP_LANES(avx2, __attribute__((target("avx2"))), 4, __m256d, _mm256_loadu_pd, _mm256_storeu_pd, dN4,
              _mm256_movemask_pd(_mm256_cmp_pd(a, _mm256_set1_pd(HIL_EXP_LOW), _CMP_LE_OQ)))
HIL_EXP_LANES(avx512, __attribute__((target("avx512f"))), 8, __m512d, _mm512_loadu_pd, _mm512_storeu_pd, eN8,
              _mm512_cmp_pd_mask(a, _mm512_set1_pd(HIL_EXP_LOW), _CMP_LE_OQ))

HIL_PATH(avx2, __attribute__((target("avx2"))), 4, __m256d, _mm256_loadu_pd, _mm256_storeu_pd, dN4)
HIL_PATH(avx512, __attribute__((target("avx512f"))), 8, __m512d, _mm512_loadu_pd, _mm512_storeu_pd, eN8)

static int hil_simd_max(void) {
    __builtin_cpu_init();
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
