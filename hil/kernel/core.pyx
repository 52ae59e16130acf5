# cython: language_level=3
"""Servo physics kernel: firmware law → motor → friction → load → integrate, for N actuators at once.

Step order and semantics follow MuJoCo 3.11's `dcmotor` (notes/mujoco_dcmotor.md §3, Euler) and bam's
`Simulator.step` (notes/bam.md §2.4); the oracle tests hold both to round-off.
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
    enum:
        PL_GEAR, PL_GRAVITY_TORQUE, PL_DAMPING_B1, PL_DAMPING_B2, PL_DAMPING_B3, PL_INERTIA, PL_INV_DT,
        PL_EULER, PL_BUDGET, PL_STRIBECK, PL_QUADRATIC, PL_KC, PL_KV, PL_KCS, PL_KL, PL_KLS, PL_KM, PL_KE,
        PL_KMS, PL_KES, PL_KMQ, PL_KEQ, PL_BRISTLE, PL_MOTORCONST, PL_INDUCTIVE, PL_TE, PL_INV_TE, PL_DECAY,
        PL_DIDT_LIMITED, PL_DIDT_MAX, PL_THERMAL, PL_INV_THERMAL_R, PL_INV_THERMAL_C, PL_AMBIENT, PL_ELECTRICAL,
        PL_TAU_LIMITED, PL_TAU_MAX, PL_DERATE, PL_DERATE_I_RATED, PL_DERATE_I_SAFE, PL_DERATE_T1, PL_DERATE_T2,
        PL_DERATE_INV_SPAN, PL_INV_VS,
        PL_EFFICIENCY, PL_COG, PL_COG_AMPLITUDE, PL_LUGRE, PL_LUGRE_S0, PL_LUGRE_S1, PL_LUGRE_TC, PL_LUGRE_TS,
        PL_COG_POLES, PL_COG_PHASE, PL_Q_OFFSET, PL_INV_LUGRE_WS, PL_INV_DTHETA_STRIBECK, PL_ALPHA,
        PL_DC_LAW, PL_LAW_POSITION, PL_LAW_VELOCITY, PL_KP, PL_KI, PL_KD, PL_SLEW, PL_IMAX, PL_VMAX,
        PL_VMODE, PL_LAW_DXL_PWM, PL_LAW_EROB_PD, PL_LAW_CURRENT, PL_LAW_TORQUE, PL_LAW_DXL, PL_CTRL_LIMITED,
        PL_CTRL_LO, PL_CTRL_HI, PL_DUTY_GAIN, PL_MAX_DUTY, PL_MAX_CURRENT, PL_PD_KP, PL_PD_D, PL_MAX_AMPS,
        PL_VS, PL_STATIC_FLAGS, PL_ENC_STUCK, PL_ENC_SLIP, PL_ENC_NOISE, PL_ENC_QUANTIZED, PL_COUNTS_PER_RAD,
        PL_RAD_PER_COUNT, PL_RESISTANCE, PL_TEMPCOEF, PL_REFTEMP, PL_TEMP_LIMIT, PL_SHUT_OVERHEAT,
        PL_SHUT_OVERLOAD, PL_OC_FRACTION, PL_OC_TIME, PL_OC_CURRENT, PL_OC_DURATION, PL_OL_CURRENT, PL_OL_TIME,
        PL_KINDS, PL_BLOCK_KINDS,
        HIL_PLAN_COLUMNS
    enum:
        NEED_POW "HIL_NEED_POW"
        NEED_LOG "HIL_NEED_LOG"
        NEED_ZOH "HIL_NEED_ZOH"
        LAWS_DXL "HIL_LAWS_DXL"
        LAWS_DXL_PWM "HIL_LAWS_DXL_PWM"
        LAWS_CURRENT "HIL_LAWS_CURRENT"
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

cdef extern from "load.h" nogil:
    double sign "hil_sign"(double x)
    double hil_budget(const double* P, Py_ssize_t st, Py_ssize_t j, double tau_m, double tau_e, double w,
                      double s)
    void hil_load_pass(const double* P, Py_ssize_t st, int m, double dt, const double* sin_q,
                       const double* stribeck, const double* zoh_a, const double* zoh_ea, const double* zoh_inv_a,
                       const double* zoh_v,
                       const double* ext, const double* torque, double* theta, double* omega,
                       double* bristle, double* friction, int uses)

cdef enum:
    BLOCK = HIL_BLOCK   # actuators per block of step_all (plan.h): their Params and State stay in L1
    LANE_DOUBLES = 64 * BLOCK + 8   # room for a Block (up to 64 rows of BLOCK doubles) at a 64-byte boundary
    LANE_PAD = 4     # lanes per vector of isa.h's AVX2 copy (2 of the baseline's): padded()


include "plan.pxi"
include "dynamixel.pxi"
include "step.pxi"
include "api.pxi"
