/* step_all's body (step.pxi `step_block`: one step of a block of actuators on its lanes) compiled
   three times: for AVX2, for AVX2 with AVX-512VL, and for the x86-64 baseline, the copy picked per call
   by the path of vmath.h (hil_simd: an AVX2 copy for the avx2 and avx512 paths, the AVX-512VL one
   where the CPU has it).

   The same C, only the encoding differs: VEX three-operand arithmetic (fewer register moves),
   blends, 4-lane vectors. No FMA (it is a separate instruction set and -ffp-contract=off stays), so
   the copies give the same bits (tests/hil/test_kernel_vmath.py). GCC 12 vectorizes the lane passes
   of the baseline copy only without the padding lanes (step.pxi `padded`), which it does not know to
   be unused there: that copy (the scalar path, CPUs without AVX2) runs them lane by lane. */

#ifndef HIL_ISA_H
#define HIL_ISA_H

#include "vmath.h"

/* Cython's name for step.pxi's `step_block` in the core module (__pyx_f_ + length-prefixed module path and
   name). Declared here, before Cython defines it, so that both copies below inline all of it; `flatten`
   inlines its passes (sense.h, law.h, motor.h, load.h, …) too, which GCC would otherwise leave as one baseline
   copy called from both. */
#define HIL_STEP_BODY __pyx_f_3hil_6kernel_4core_step_block
static inline __attribute__((always_inline)) void HIL_STEP_BODY(void* b, const double* P, const void* p, void* s, int m,
                                                                int mv, double dt, int path);

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx2"), noinline, flatten))
static void hil_step_avx2(void* b, const double* P, const void* p, void* s, int m, int mv, double dt, int path) {
    HIL_STEP_BODY(b, P, p, s, m, mv, dt, path);
}
/* The same 256-bit code where the CPU has AVX-512VL: its three-operand bitwise instruction (vpternlogq)
   makes each select.h blend one instruction instead of three, and masks live in k registers. Vectors stay
   256 bits wide (no 512-bit arithmetic, so no AVX-512 clock licence) but on the avx512 path, whose vector
   math this copy inlines. */
__attribute__((target("avx2,avx512f,avx512vl,prefer-vector-width=256"), noinline, flatten))
static void hil_step_avx512vl(void* b, const double* P, const void* p, void* s, int m, int mv, double dt, int path) {
    HIL_STEP_BODY(b, P, p, s, m, mv, dt, path);
}
static int hil_cpu_avx512vl(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
}
static int hil_use_avx512vl = 0;   /* api.pxi sets it from hil_cpu_avx512vl() (tests switch it off) */
#define HIL_STEP_AVX2(b, P, p, s, m, mv, dt, path)                                                     \
    if (hil_simd >= HIL_SIMD_AVX2) {                                                                   \
        if (hil_use_avx512vl) hil_step_avx512vl(b, P, p, s, m, mv, dt, path);                         \
        else hil_step_avx2(b, P, p, s, m, mv, dt, path);                                              \
        return;                                                                                        \
    }
#else
static int hil_cpu_avx512vl(void) { return 0; }
static int hil_use_avx512vl = 0;
#define HIL_STEP_AVX2(b, P, p, s, m, mv, dt, path)
#endif

__attribute__((noinline, flatten))
static void hil_step_default(void* b, const double* P, const void* p, void* s, int m, int mv, double dt, int path) {
    HIL_STEP_BODY(b, P, p, s, m, mv, dt, path);
}

/* the copy for the active path (hil_simd ≤ hil_simd_max(): never AVX2 code on a CPU without it; the
   AVX-512VL copy only where hil_cpu_avx512vl()) */
static void hil_step(void* b, const double* P, const void* p, void* s, int m, int mv, double dt, int path) {
    HIL_STEP_AVX2(b, P, p, s, m, mv, dt, path)
    hil_step_default(b, P, p, s, m, mv, dt, path);
}

#endif
