/* step_all's body (core.pyx `step_block`: one step of a block of actuators on its lanes) compiled
   twice: for AVX2 and for the x86-64 baseline, the copy picked per call by the path of vmath.h
   (hil_simd: AVX2 for the avx2 and avx512 paths).

   The same C, only the encoding differs: VEX three-operand arithmetic (fewer register moves),
   blends, 4-lane vectors. No FMA (it is a separate instruction set and -ffp-contract=off stays), so
   both copies give the same bits (tests/hil/test_kernel_vmath.py). GCC 12 vectorizes the lane passes
   of the baseline copy only without the padding lanes (core.pyx `padded`), which it does not know to
   be unused there: that copy (the scalar path, CPUs without AVX2) runs them lane by lane. */

#ifndef HIL_ISA_H
#define HIL_ISA_H

#include "vmath.h"

/* Cython's name for core.pyx's module-level `step_block` (__pyx_f_ + length-prefixed module path and
   name). Declared here, before Cython defines it, so that both copies below inline all of it; `flatten`
   inlines its passes (sense.h, law.h, motor.h, load.h, …) too, which GCC would otherwise leave as one baseline
   copy called from both (callgrind showed the AVX2 copy no better than the baseline then). */
#define HIL_STEP_BODY __pyx_f_3hil_6kernel_4core_step_block
static inline __attribute__((always_inline)) void HIL_STEP_BODY(void* b, const double* P, const void* p, void* s, int m,
                                                                int mv, double dt, int path);

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx2"), noinline, flatten))
static void hil_step_avx2(void* b, const double* P, const void* p, void* s, int m, int mv, double dt, int path) {
    HIL_STEP_BODY(b, P, p, s, m, mv, dt, path);
}
#define HIL_STEP_AVX2(b, P, p, s, m, mv, dt, path) if (hil_simd >= HIL_SIMD_AVX2) { hil_step_avx2(b, P, p, s, m, mv, dt, path); return; }
#else
#define HIL_STEP_AVX2(b, P, p, s, m, mv, dt, path)
#endif

__attribute__((noinline, flatten))
static void hil_step_default(void* b, const double* P, const void* p, void* s, int m, int mv, double dt, int path) {
    HIL_STEP_BODY(b, P, p, s, m, mv, dt, path);
}

/* the copy for the active path (hil_simd ≤ hil_simd_max(): never AVX2 code on a CPU without it) */
static void hil_step(void* b, const double* P, const void* p, void* s, int m, int mv, double dt, int path) {
    HIL_STEP_AVX2(b, P, p, s, m, mv, dt, path)
    hil_step_default(b, P, p, s, m, mv, dt, path);
}

#endif
