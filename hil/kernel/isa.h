/* step_all's body (core.pyx `step_blocks`) compiled twice: for AVX2 and for the x86-64 baseline, the
   copy picked per call by the path of vmath.h (hil_simd: AVX2 for the avx2 and avx512 paths).

   The same C, only the encoding differs: VEX three-operand arithmetic (fewer register moves),
   roundsd for floor (the baseline inlines a dozen instructions), blends. No FMA (it is a separate
   instruction set and -ffp-contract=off stays), so both copies give the same bits
   (tests/hil/test_kernel_vmath.py); callgrind: about 10 % fewer instructions per actuator-step. */

#ifndef HIL_ISA_H
#define HIL_ISA_H

#include "vmath.h"

/* Cython's name for core.pyx's module-level `step_blocks` (__pyx_f_ + length-prefixed module path and
   name). Declared here, before Cython defines it, so that both copies below inline all of it; `flatten`
   inlines its passes (firmware_step, motor.h, load.h, …) too, which GCC would otherwise leave as one baseline
   copy called from both (callgrind showed the AVX2 copy no better than the baseline then). */
#define HIL_STEP_BODY __pyx_f_3hil_6kernel_4core_step_blocks
static inline __attribute__((always_inline)) void HIL_STEP_BODY(const void* p, const void* plan, void* s, const void* inp,
                                                                Py_ssize_t n, double dt, int path);

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx2"), noinline, flatten))
static void hil_step_avx2(const void* p, const void* plan, void* s, const void* inp, Py_ssize_t n, double dt, int path) {
    HIL_STEP_BODY(p, plan, s, inp, n, dt, path);
}
#define HIL_STEP_AVX2(p, plan, s, inp, n, dt, path) if (hil_simd >= HIL_SIMD_AVX2) { hil_step_avx2(p, plan, s, inp, n, dt, path); return; }
#else
#define HIL_STEP_AVX2(p, plan, s, inp, n, dt, path)
#endif

__attribute__((noinline, flatten))
static void hil_step_default(const void* p, const void* plan, void* s, const void* inp, Py_ssize_t n, double dt, int path) {
    HIL_STEP_BODY(p, plan, s, inp, n, dt, path);
}

/* the copy for the active path (hil_simd ≤ hil_simd_max(): never AVX2 code on a CPU without it) */
static void hil_step(const void* p, const void* plan, void* s, const void* inp, Py_ssize_t n, double dt, int path) {
    HIL_STEP_AVX2(p, plan, s, inp, n, dt, path)
    hil_step_default(p, plan, s, inp, n, dt, path);
}

#endif
