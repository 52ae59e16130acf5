/* sin, exp, log and pow over the kernel's short per-block arrays (core.pyx step_all, pass 2), in place.

   Each function is one branch-free scalar routine (Cody–Waite reduction, fdlibm's polynomials for sin
   and log, Taylor for exp; within 2 ulp of glibc's libm, pow see below; tests/hil/test_kernel_vmath.py).
   The array loops are compiled three times (x86-64 baseline without FMA, AVX2 + FMA, AVX-512F + FMA)
   and picked at run time (hil_simd, from __builtin_cpu_supports). Within a path every lane performs the
   same IEEE operations (no reassociation), so an actuator's step never depends on how many others
   share its block; the FMA paths differ from the scalar one by round-off (≤ 1 ulp per function). */

#ifndef HIL_VMATH_H
#define HIL_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define HIL_SIMD_SCALAR 0
#define HIL_SIMD_AVX2 1
#define HIL_SIMD_AVX512 2

static int hil_simd = HIL_SIMD_SCALAR;

#define HIL_INLINE static inline __attribute__((always_inline))

HIL_INLINE uint64_t hil_bits(double x) { uint64_t u; memcpy(&u, &x, sizeof u); return u; }
HIL_INLINE double hil_double(uint64_t u) { double x; memcpy(&x, &u, sizeof x); return x; }

#define HIL_RND 6755399441055744.0          /* 1.5·2^52: (x + RND) − RND is x rounded to an integer */
#define HIL_LN2_HI 6.93147180369123816490e-01   /* ln 2 = HI + LO, HI of 32 bits (k·HI exact) */
#define HIL_LN2_LO 1.90821492927058770002e-10
#define HIL_PIO2_1 1.5707963267341256e+00       /* π/2 in 33-bit pieces (k·piece exact for k < 2^20) */
#define HIL_PIO2_2 6.077100506303966e-11
#define HIL_PIO2_3 2.0222662487111665e-21
#define HIL_PIO2_3T 8.4784276603689e-32
#define HIL_SIN_MAX 1.0e6                   /* larger |x|: libm's sin (exact reduction), also per lane */

/* e^x for x ≤ 709 (larger: +inf); x < −708 gives 0 (libm: a subnormal below 3e-308).
   x = k·ln2 + r (fdlibm e_exp.c's reduction), |r| ≤ ln2/2; e^r = 1 + r + r²·A(r), A the Taylor
   polynomial to r^13 (truncation < 2^-57) in Estrin's scheme: no division, a short dependency chain. */
HIL_INLINE double hil_exp1(double x) {
    double xc = x < -708.0 ? -708.0 : (x > 709.0 ? 709.0 : x);
    double t = xc * 1.44269504088896338700e+00 + HIL_RND;
    double k = t - HIL_RND;
    double r = (xc - k * HIL_LN2_HI) - k * HIL_LN2_LO;
    double r2 = r * r, r4 = r2 * r2;
    double a01 = 1.0 / 2.0 + r * (1.0 / 6.0), a23 = 1.0 / 24.0 + r * (1.0 / 120.0);
    double a45 = 1.0 / 720.0 + r * (1.0 / 5040.0), a67 = 1.0 / 40320.0 + r * (1.0 / 362880.0);
    double a89 = 1.0 / 3628800.0 + r * (1.0 / 39916800.0), a1011 = 1.0 / 479001600.0 + r * (1.0 / 6227020800.0);
    double A = (a01 + r2 * a23) + r4 * ((a45 + r2 * a67) + r4 * (a89 + r2 * a1011));
    double y = 1.0 + (r + r2 * A);
    y = y * hil_double((hil_bits(t) - hil_bits(HIL_RND) + 1023) << 52);   /* × 2^k */
    y = x < -708.0 ? 0.0 : y;
    return x > 709.0 ? INFINITY : y;
}

/* sin x for |x| ≤ HIL_SIN_MAX: x = k·π/2 + r with π/2 in three 33-bit pieces and a tail (fdlibm's
   medium reduction), |r| ≤ π/4; fdlibm k_sin.c / k_cos.c polynomials, quadrant k mod 4. */
HIL_INLINE double hil_sin1(double x) {
    double ax = fabs(x);
    double t = ax * 6.36619772367581382433e-01 + HIL_RND;
    double k = t - HIL_RND;
    uint64_t q = hil_bits(t) - hil_bits(HIL_RND);
    double r = (((ax - k * HIL_PIO2_1) - k * HIL_PIO2_2) - k * HIL_PIO2_3) - k * HIL_PIO2_3T;
    double z = r * r;
    double ps = 8.33333333332248946124e-03 + z * (-1.98412698298579493134e-04 + z * (2.75573137070700676789e-06
                + z * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10)));
    double s = r + z * r * (-1.66666666666666324348e-01 + z * ps);
    double pc = z * (4.16666666666666019037e-02 + z * (-1.38888888888741095749e-03 + z * (2.48015872894767294178e-05
                + z * (-2.75573143513906633035e-07 + z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11)))));
    double hz = 0.5 * z, w = 1.0 - hz;
    double c = w + (((1.0 - w) - hz) + z * pc);
    double y = (q & 1) ? c : s;
    y = (q & 2) ? -y : y;
    return x < 0.0 ? -y : y;
}

/* ln x for x ≥ 0 (0: −inf, +inf: +inf, NaN: NaN): fdlibm e_log.c, x = 2^e·(1 + f), 1 + f in [√½, √2],
   ln(1 + f) = 2·atanh(f / (2 + f)) from its Remez polynomial (< 1 ulp). */
HIL_INLINE double hil_log1(double x) {
    double xs = x < 2.2250738585072014e-308 ? x * 18014398509481984.0 : x;    /* subnormal: × 2^54 */
    double e0 = x < 2.2250738585072014e-308 ? 1077.0 : 1023.0;
    uint64_t u = hil_bits(xs);
    double e = (hil_double((u >> 52) | 0x4330000000000000ULL) - 4503599627370496.0) - e0;
    double m = hil_double((u & 0x000FFFFFFFFFFFFFULL) | 0x3FF0000000000000ULL);      /* [1, 2) */
    e = m > 1.4142135623730951 ? e + 1.0 : e;
    m = m > 1.4142135623730951 ? 0.5 * m : m;
    double f = m - 1.0;
    double s = f / (2.0 + f), z = s * s, w = z * z;
    double R = z * (6.666666666666735130e-01 + w * (2.857142874366239149e-01 + w * (1.818357216161805012e-01
               + w * 1.479819860511658591e-01)))
             + w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
    double hfsq = 0.5 * f * f;
    double y = e * HIL_LN2_HI - ((hfsq - (s * (hfsq + R) + e * HIL_LN2_LO)) - f);
    y = x == 0.0 ? -INFINITY : y;
    y = x == INFINITY ? INFINITY : y;
    return x != x ? x : y;
}

/* x^a = e^(a·ln x) for x ≥ 0, a > 0 (the Stribeck |ω/θ̇s|^α); relative error ≈ |a·ln x|·2^-53
   (libm's pow: < 1 ulp), e.g. 18 ulp at |a·ln x| = 12. */
HIL_INLINE double hil_pow1(double x, double a) {
    return hil_exp1(a * hil_log1(x));
}

#define HIL_LOOP1(f) for (int i = 0; i < n; i++) x[i] = f(x[i]);
#define HIL_LOOP2(f) for (int i = 0; i < n; i++) x[i] = f(x[i], y[i]);
/* sin: lanes beyond HIL_SIN_MAX keep x, and libm finishes them below (|sin| ≤ 1 marks the done ones) */
#define HIL_SINK(x) (fabs(x) > HIL_SIN_MAX ? (x) : hil_sin1(x))

#define HIL_KERNELS(sfx, attr, pragma)                                                                  \
    attr static void hil_sin_##sfx(double* x, const double* y, int n) { (void)y; pragma HIL_LOOP1(HIL_SINK) } \
    attr static void hil_exp_##sfx(double* x, const double* y, int n) { (void)y; pragma HIL_LOOP1(hil_exp1) } \
    attr static void hil_log_##sfx(double* x, const double* y, int n) { (void)y; pragma HIL_LOOP1(hil_log1) } \
    attr static void hil_pow_##sfx(double* x, const double* y, int n) { pragma HIL_LOOP2(hil_pow1) }

/* The scalar reference path stays scalar (no auto-vectorization) and without FMA; the AVX2 and AVX-512
   paths are vectorized and contract a·b + c into FMAs (half the latency of the polynomials; the
   kernel's own arithmetic, outside these functions, never contracts). Without trapping math (FP
   exception flags are never read) GCC if-converts the selects for AVX2 as well. */
HIL_KERNELS(scalar, __attribute__((optimize("no-tree-vectorize", "no-trapping-math"))), )

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
HIL_KERNELS(avx2, __attribute__((target("avx2,fma"), optimize("no-trapping-math", "fp-contract=fast"))),
            _Pragma("omp simd"))
HIL_KERNELS(avx512, __attribute__((target("avx512f,fma"), optimize("no-trapping-math", "fp-contract=fast"))),
            _Pragma("omp simd"))

static int hil_simd_max(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("fma")) return HIL_SIMD_SCALAR;
    if (__builtin_cpu_supports("avx512f")) return HIL_SIMD_AVX512;
    if (__builtin_cpu_supports("avx2")) return HIL_SIMD_AVX2;
    return HIL_SIMD_SCALAR;
}
/* A path handles every n itself (its scalar remainder uses FMAs too), so results do not depend on n. */
#define HIL_DISPATCH(fn, x, y, n)                                                                    \
    if (hil_simd == HIL_SIMD_AVX512) fn##_avx512(x, y, n);                                           \
    else if (hil_simd == HIL_SIMD_AVX2) fn##_avx2(x, y, n);                                          \
    else fn##_scalar(x, y, n);
#else
static int hil_simd_max(void) { return HIL_SIMD_SCALAR; }
#define HIL_DISPATCH(fn, x, y, n) fn##_scalar(x, y, n);
#endif

/* x[i] = f(x[i]) (pow: x[i] = x[i]^y[i]) for i < n */
static void hil_vsin(double* x, int n) {
    HIL_DISPATCH(hil_sin, x, x, n)
    for (int i = 0; i < n; i++)
        if (fabs(x[i]) > HIL_SIN_MAX) x[i] = sin(x[i]);
}
static void hil_vexp(double* x, int n) { HIL_DISPATCH(hil_exp, x, x, n) }
static void hil_vlog(double* x, int n) { HIL_DISPATCH(hil_log, x, x, n) }
static void hil_vpow(double* x, const double* y, int n) { HIL_DISPATCH(hil_pow, x, y, n) }

#endif
