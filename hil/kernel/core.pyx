# cython: language_level=3
"""Servo physics kernel: firmware law → motor → friction → load → integrate, for N actuators at once.

Step order and semantics follow MuJoCo 3.11's `dcmotor` (engine_forward.c `mj_fwdActuation`, Euler) and bam's
`Simulator.step` (bam/simulate.py; friction paper §IV-D, Algorithm 1); the oracle tests hold both to round-off.
"""

from libc.math cimport exp, fabs, sin, sqrt, log, pow, isnan, M_PI, INFINITY, NAN
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset
from libc.stdint cimport int64_t, uint64_t

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from "<stdlib.h>" nogil:
    void* aligned_alloc(size_t alignment, size_t size)   # C11 (Cython's libc.stdlib lacks it)

cdef extern from "vmath.h" nogil:
    int hil_simd                # path of step_all (0 scalar, 1 AVX2, 2 AVX-512): its pass 2's vector math
                                # and, from AVX2 on, its code compiled for AVX2 (isa.h)
    int hil_simd_max()          # best path this CPU and build support
    int HIL_SIMD_MIN_N          # smaller rigs use libm's scalar functions
    int HIL_SIMD_AVX2           # hil_simd from which isa.h runs an AVX2 copy
    void hil_vsin(double* x, int n, int path)
    void hil_vexp(double* x, int n, int path)
    void hil_vlog(double* x, int n, int path)
    void hil_vpow(double* x, const double* y, int n, int path)

cdef extern from "isa.h" nogil:
    void hil_step(void* b, const double* P, const void* p, void* s, int m, int mv, double dt,
                  int path)   # step_block, per ISA
    int hil_use_avx512vl        # the AVX2 paths run the copy compiled with AVX-512VL
    int hil_cpu_avx512vl()      # this CPU and build have it

cdef extern from "plan.h" nogil:
    enum:
        HIL_BLOCK
        HIL_PLAN_COLUMNS
        PL_KINDS            # the columns params.def names: plan_columns.pxi
        PL_BLOCK_KINDS
    enum:
        NEED_POW "HIL_NEED_POW"
        NEED_LOG "HIL_NEED_LOG"
        NEED_ZOH "HIL_NEED_ZOH"
        LAWS_DXL "HIL_LAWS_DXL"
        LAWS_DXL_PWM "HIL_LAWS_DXL_PWM"
        LAWS_CURRENT "HIL_LAWS_CURRENT"
        LAWS_STS "HIL_LAWS_STS"
        USES_DC_LAW "HIL_USES_DC_LAW"
        USES_QS "HIL_USES_QS"
        USES_DERATE "HIL_USES_DERATE"
        USES_LUGRE "HIL_USES_LUGRE"
        USES_NOISE "HIL_USES_NOISE"
        USES_OC "HIL_USES_OC"
        USES_OVERLOAD "HIL_USES_OVERLOAD"
        USES_BUDGET "HIL_USES_BUDGET"
        USES_BAM "HIL_USES_BAM"
        USES_COG "HIL_USES_COG"
        USES_PENDULUM "HIL_USES_PENDULUM"
        USES_STRIBECK "HIL_USES_STRIBECK"
        USES_MOTOR_X "HIL_USES_MOTOR_X"
        USES_BACKLASH "HIL_USES_BACKLASH"
        USES_MECH_X "HIL_USES_MECH_X"
        USES_IMPLICIT "HIL_USES_IMPLICIT"

cdef extern from "load.h" nogil:
    double sign "hil_sign"(double x)
    double hil_budget(const double* P, Py_ssize_t st, Py_ssize_t j, double tau_m, double tau_e, double w,
                      double s)
    void hil_load_pass(const double* P, Py_ssize_t st, int m, double dt, const double* sin_q,
                       const double* stribeck, const double* zoh_a, const double* zoh_ea, const double* zoh_inv_a,
                       const double* zoh_v,
                       const double* ext, const double* torque, const double* T, const double* dfdw, double* theta,
                       double* omega, double* bristle, double* gap, double* gap_rate, double* dwell,
                       double* friction, int uses)

cdef enum:
    BLOCK = HIL_BLOCK   # actuators per block of step_all (plan.h): their Params and State stay in L1
    LANE_DOUBLES = 72 * BLOCK + 8   # room for a Block (up to 72 rows of BLOCK doubles) at a 64-byte boundary
    LANE_PAD = 4     # lanes per vector of isa.h's AVX2 copy (2 of the baseline's): padded()


include "plan.pxi"
include "dynamixel.pxi"
include "feetech.pxi"
include "step.pxi"
include "api.pxi"
