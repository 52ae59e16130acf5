# The kernel's Python API (core.pyx includes it): `Kernel`, `default_params`, `friction_budget`, the
# vector-math path switches and the names of the C enums.

# AVX2 by default even where AVX-512 exists: AVX-512 gains nothing measurable here (docs/performance.md),
# and on Intel Xeons AVX-512 arithmetic may lower the core's clock for every thread on it, the daemon's
# Python bus threads too. `_simd("avx512")` selects it.
hil_simd = min(hil_simd_max(), 1)
hil_use_avx512vl = hil_cpu_avx512vl()
SIMD_PATHS = ("scalar", "avx2", "avx512")


def _avx512vl(on=None):
    """Whether the avx2 and avx512 paths run step_all's copy compiled with AVX-512VL (isa.h; the default
    where the CPU has it); `on` switches it (tests: the plain AVX2 copy on such a CPU)."""
    global hil_use_avx512vl
    if on is not None:
        if on and not hil_cpu_avx512vl():
            raise ValueError("AVX-512VL is not available on this CPU or build")
        hil_use_avx512vl = 1 if on else 0
    return bool(hil_use_avx512vl)


def _simd(path=None):
    """The path step_all uses ("scalar", "avx2", "avx512"): vector math and compiled copy; `path`
    selects one (tests, `servo-hil bench kernel --simd`)."""
    global hil_simd
    if path is not None:
        level = SIMD_PATHS.index(path)
        if level > hil_simd_max():
            raise ValueError(f"{path} is not available on this CPU or build (best: {SIMD_PATHS[hil_simd_max()]})")
        hil_simd = level
    return SIMD_PATHS[hil_simd]


def _vmath(str fn, x, a=None):
    """vmath.h's `fn` ("sin", "exp", "log", "pow" with exponents a) of a float64 array, on the active
    path (tests)."""
    cdef double[::1] y = np.array(x, dtype=np.float64).ravel()
    cdef double[::1] e = np.broadcast_to(np.asarray(1.0 if a is None else a, dtype=np.float64),
                                         (y.shape[0],)).copy()
    cdef int n = <int>y.shape[0]
    if n == 0:
        return np.asarray(y)
    if fn == "sin":
        hil_vsin(&y[0], n, hil_simd)
    elif fn == "exp":
        hil_vexp(&y[0], n, hil_simd)
    elif fn == "log":
        hil_vlog(&y[0], n, hil_simd)
    elif fn == "pow":
        hil_vpow(&y[0], &e[0], n, hil_simd)
    else:
        raise ValueError(f"unknown function {fn!r}")
    return np.asarray(y)

# Names exported to Python (hil.kernel): the enum values above live only in C.
LAWS = {"voltage": LAW_VOLTAGE, "position": LAW_POSITION, "velocity": LAW_VELOCITY,
        "dxl_pwm": LAW_DXL_PWM, "erob_pd": LAW_EROB_PD, "current": LAW_CURRENT, "torque": LAW_TORQUE,
        "dxl": LAW_DXL, "sts_pwm": LAW_STS_PWM, "sts": LAW_STS}
DXL_MODES = {"pwm": DXL_PWM, "current": DXL_CURRENT, "velocity": DXL_VELOCITY, "position": DXL_POSITION,
             "current_position": DXL_CURRENT_POSITION}
STS_MODES = {"position": STS_POSITION, "wheel": STS_WHEEL, "pwm": STS_PWM, "step": STS_STEP}
INTEGRATORS = {"euler": INTEGRATOR_EULER, "bam": INTEGRATOR_BAM, "implicitfast": INTEGRATOR_IMPLICITFAST}
FAULT_BITS = {"open_circuit": FAULT_OPEN_CIRCUIT, "supply": FAULT_SUPPLY, "encoder_noise": FAULT_ENCODER_NOISE,
              "derated": FAULT_DERATED, "overheat": FAULT_OVERHEAT, "encoder_stuck": FAULT_ENCODER_STUCK,
              "encoder_slip": FAULT_ENCODER_SLIP, "overload": FAULT_OVERLOAD}


cdef inline double stribeck(const Params* p, double w) noexcept nogil:
    """bam's Stribeck factor exp(−|ω/θ̇s|^α), 0 without θ̇s (scalar; step_all evaluates it in pass 2)."""
    return exp(-pow(fabs(w / p.dtheta_stribeck), p.alpha)) if p.dtheta_stribeck > 0 else 0.0



cdef Params _zero_params() noexcept:
    cdef Params p
    params_neutral(&p)
    return p


def default_params():
    """Every kernel parameter with its neutral value (a dict; params.def gives their units)."""
    return _zero_params()


def _per_step(x, Py_ssize_t T, Py_ssize_t n, double default):
    """(T, n) float64 view (no copy: broadcast strides) of None (default), a scalar, a (T,) column or (T, n)."""
    a = np.asarray(default if x is None else x, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    return np.broadcast_to(a, (T, n))


def friction_budget(dict params, tau_m, tau_e, double omega):
    """bam's friction budget τ_fm [N·m] for arrays of motor and external torque at velocity omega."""
    cdef Params p = params
    cdef double block[HIL_PLAN_COLUMNS * BLOCK]
    cdef Plan plan
    memset(block, 0, sizeof(block))
    plan.col = block
    prepare(&p, &plan, 0, 1.0)
    tm = np.asarray(tau_m, dtype=np.float64)
    te = np.asarray(tau_e, dtype=np.float64)
    tm, te = np.broadcast_arrays(tm, te)
    out = np.empty(tm.shape)
    cdef double[::1] a = np.ascontiguousarray(tm).ravel(), b = np.ascontiguousarray(te).ravel()
    cdef double[::1] o = out.reshape(-1)
    cdef Py_ssize_t j
    for j in range(a.shape[0]):
        o[j] = hil_budget(block, BLOCK, 0, a[j], b[j], omega, stribeck(&p, omega))
    return out


def peak_spent(dict params, double i2t):
    """Whether `i2t` [A²·s], a State's spent i²t, has used up the peak current's budget (i_peak² − i_cont²)·peak_time
    that the kernel derives from `params`: the kernel then holds the current to the continuous limit. False
    without a peak limit."""
    if not params["peak_current"] > 0:
        return False
    cdef Params p = params
    cdef double block[HIL_PLAN_COLUMNS * BLOCK]
    cdef Plan plan
    memset(block, 0, sizeof(block))
    plan.col = block
    prepare(&p, &plan, 0, 1.0)
    return i2t >= p._i2t_budget


OUTPUTS = ("theta", "omega", "theta_meas", "torque", "friction_torque", "current", "voltage",
           "temperature", "fault_flags")


def hand_record(path, double speed, double stiffness, double damping, double max_torque) -> dict:
    """A hand's record (core.pxd `Hand`) for `Kernel.set_hand` and the loop's set_hand command: a spring of
    `stiffness` [N·m/rad] toward a setpoint that moves through the waypoints `path` [rad, at most HAND_PATH] at
    `speed` [rad/s] (0: to the last at once), a damper of `damping` [N·m·s/rad] on the shaft's speed relative to it,
    the sum within ±`max_torque` [N·m]. stiffness 0: no hand. Raises ValueError naming what is out of range."""
    waypoints = [float(x) for x in ([path] if isinstance(path, (int, float)) else path)]
    if not 1 <= len(waypoints) <= HAND_PATH:
        raise ValueError(f"path: 1 to {HAND_PATH} waypoints, got {len(waypoints)}")
    for name, value in (("path", max(map(abs, waypoints))), ("speed", speed), ("stiffness", stiffness),
                        ("damping", damping), ("max_torque", max_torque)):
        if not (value >= 0.0 and value < 1e9):
            raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return {"stiffness": stiffness, "damping": damping, "max_torque": max_torque, "speed": speed, "start": 0.0,
            "t0": 0.0, "count": len(waypoints),   # (no negative indices here: the module turns wraparound off)
            "path": waypoints + [waypoints[len(waypoints) - 1]] * (HAND_PATH - len(waypoints))}


cdef class Kernel:
    """N actuators stepped together at a fixed dt [s].

    `set_params(j, dict)` takes a complete dict (start from `default_params()`); `set_state(j, …)`
    sets the joint state; `step(u, enable, external_torque)` advances one step; `run(...)` advances
    T steps in one nogil call and returns the pre-step state and what each step produced.
    """
    def __cinit__(self, Py_ssize_t n, double dt):
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not dt > 0:
            raise ValueError(f"dt must be > 0 s, got {dt}")
        self.n = n
        self.dt = dt
        self.params = <Params*> calloc(n, sizeof(Params))
        self.states = <State*> calloc(n, sizeof(State))
        self.inputs = <Input*> calloc(n, sizeof(Input))
        # at a cache line: every column of a block starts one (the lane passes load whole vectors of
        # them, which calloc's 16-byte alignment split across two lines in one process in two)
        cdef size_t plan_bytes = (n + BLOCK - 1) // BLOCK * HIL_PLAN_COLUMNS * BLOCK * sizeof(double) \
            + (n * MECH_STATE * sizeof(double) + 63) // 64 * 64     # and plan_mech's state, zeroed too
        self.plan.col = <double*> aligned_alloc(64, plan_bytes)
        if not self.params or not self.states or not self.inputs or not self.plan.col:
            raise MemoryError()
        memset(self.plan.col, 0, plan_bytes)
        cdef Py_ssize_t j
        for j in range(n):
            self.params[j] = _zero_params()
            prepare(self.params, &self.plan, j, dt)
            self.states[j].rng = 1
            self.inputs[j].enable = 1.0

    def __dealloc__(self):
        free(self.params)
        free(self.states)
        free(self.inputs)
        free(self.plan.col)

    def _check(self, Py_ssize_t j):
        if j < 0 or j >= self.n:
            raise IndexError(f"actuator index {j} out of range 0..{self.n - 1}")

    def set_params(self, Py_ssize_t j, dict values):
        """Replace actuator j's parameters; `values` must hold every field of `default_params()`."""
        self._check(j)
        self.params[j] = values
        prepare(self.params, &self.plan, j, self.dt)
        if self.states[j].k == 0:
            self.states[j].rng = self.params[j].seed if self.params[j].seed else 1

    def get_params(self, Py_ssize_t j):
        self._check(j)
        return self.params[j]

    def set_state(self, Py_ssize_t j, theta=None, omega=None, temperature=None, current=None,
                  clear_latches=False, gap=None):
        """Set the joint state [rad, rad/s] (with backlash the motor side keeps its gap and takes the output's
        velocity), winding temperature [°C, absolute], current [A] or the backlash gap, motor side − output
        [rad] (the motor side then at rest relative to the output).

        `clear_latches` resets the open-circuit, overheating and overload latches and the encoder slip.
        """
        self._check(j)
        if clear_latches:
            self.states[j].oc_active = 0
            self.states[j].oc_timer = 0.0
            self.states[j].shutdown = 0
            self.states[j].latched = 0
            self.states[j].ol_timer = 0.0
            self.states[j].enc_offset = 0.0
        if theta is not None:
            self.states[j].theta = theta
            self.states[j].traj_valid = 0
        if omega is not None:
            self.states[j].omega = omega
            motor_side_at_rest(&self.plan, self.n, j)
        if temperature is not None:
            self.states[j].temp_rise = temperature - self.params[j].ambient
        if current is not None:
            self.states[j].current = current
        if gap is not None:
            plan_mech(&self.plan, self.n)[MECH_STATE * j + MECH_GAP] = gap
            plan_mech(&self.plan, self.n)[MECH_STATE * j + MECH_GAP_RATE] = 0.0

    def get_state(self, Py_ssize_t j):
        """Actuator j's State (a dict), with the extended mechanics' `gap` [rad], `gap_rate` [rad/s] and
        `dwell` [s]."""
        self._check(j)
        cdef const double* mech = plan_mech(&self.plan, self.n) + MECH_STATE * j
        cdef dict out = self.states[j]
        out.update(gap=mech[MECH_GAP], gap_rate=mech[MECH_GAP_RATE], dwell=mech[MECH_DWELL])
        return out

    def reset(self):
        """Back to k = 0 with every state zero (the noise stream restarts from its seed)."""
        cdef Py_ssize_t j
        for j in range(self.n):
            actuator_at_start(self.params, &self.plan, self.states, self.n, j)
            self.states[j].k = 0

    @property
    def time(self):
        return self.states[0].k * self.dt

    def set_hand(self, Py_ssize_t j, dict hand):
        """Put a person's hand on actuator j's output from this step on (`hand_record`'s record; stiffness 0 lets
        go): it leads the shaft from where it holds it now (a hand already there carries on from its setpoint)."""
        self._check(j)
        hand_take(&self.inputs[j], &self.states[j], hand, self.dt)

    def hand_torque(self, Py_ssize_t j):
        """The torque [N·m] actuator j's hand puts on its output at the next step (0 without a hand)."""
        self._check(j)
        if self.inputs[j].hand.stiffness <= 0.0:
            return 0.0
        return hand_torque(&self.inputs[j].hand, self.states[j].theta, self.states[j].omega,
                           self.states[j].k * self.dt)

    def step(self, u, enable=None, external_torque=None):
        """Advance one step; arguments are scalars or length-n sequences."""
        cdef Py_ssize_t j
        if isinstance(u, float) and enable is None and external_torque is None:
            for j in range(self.n):   # fast path: one command for every actuator
                self.inputs[j].u = u
                self.inputs[j].enable = 1.0
                self.inputs[j].external_torque = 0.0
        else:
            uu = np.broadcast_to(np.asarray(u, dtype=np.float64), (self.n,))
            ee = np.broadcast_to(np.asarray(1.0 if enable is None else enable, dtype=np.float64), (self.n,))
            xx = np.broadcast_to(np.asarray(0.0 if external_torque is None else external_torque,
                                            dtype=np.float64), (self.n,))
            for j in range(self.n):
                self.inputs[j].u = uu[j]
                self.inputs[j].enable = ee[j]
                self.inputs[j].external_torque = xx[j]
        with nogil:
            step_all(self.params, &self.plan, self.states, self.inputs, self.n, self.dt)

    def run(self, u, enable=None, external_torque=None, record=True):
        """Advance T steps with per-step inputs of shape (T, n) (or (T,) broadcast over actuators).

        Returns a dict of (T, n) arrays, row k holding the state *before* step k (`theta`, `omega`,
        `temperature`) and what step k produced (`theta_meas`, `torque`, `friction_torque`,
        `current`, `voltage`, `fault_flags`). With record=False nothing is kept (benchmarks); with
        record="state" only `theta` and `omega` (rollouts scored on the joint state).
        """
        if record not in (True, False, "state"):
            raise ValueError(f"record must be True, False or 'state', got {record!r}")
        cdef Py_ssize_t T = np.shape(u)[0]
        cdef const double[:, :] uu = _per_step(u, T, self.n, 0.0)
        cdef const double[:, :] ee = _per_step(enable, T, self.n, 1.0)
        cdef const double[:, :] xx = _per_step(external_torque, T, self.n, 0.0)
        cdef Py_ssize_t rec_state = 1 if record else 0
        cdef Py_ssize_t rec = 1 if record is True else 0
        out = {name: np.empty((T if (rec or (rec_state and name in ("theta", "omega"))) else 0, self.n))
               for name in OUTPUTS}
        cdef double[:, ::1] o_th = out["theta"], o_w = out["omega"], o_thm = out["theta_meas"]
        cdef double[:, ::1] o_tq = out["torque"], o_tf = out["friction_torque"], o_i = out["current"]
        cdef double[:, ::1] o_v = out["voltage"], o_T = out["temperature"], o_f = out["fault_flags"]
        cdef Py_ssize_t k, j, j0
        cdef int m, path = math_path(self.n)
        cdef double* mech
        cdef double lanes_buf[LANE_DOUBLES]
        cdef Block* b = lanes(lanes_buf)
        cdef const double* P
        with nogil:
            # A block of actuators at a time through all T steps (they are independent: the same
            # results as whole-rig steps), on its lanes: its records to the lanes once, back once, its
            # plan and lanes in L1 throughout instead of a rig larger than L2 streamed from L3 every step.
            j0 = 0
            while j0 < self.n:
                m = <int>min(BLOCK, self.n - j0)
                P = plan_block(&self.plan, j0)
                mech = plan_mech(&self.plan, self.n) + MECH_STATE * j0 if <int>P[PL_BLOCK_KINDS * BLOCK] & USES_MECH_X else NULL
                lanes_load(b, &self.states[j0], m, mech)
                for k in range(T):
                    for j in range(m):
                        b.cmd[j] = uu[k, j0 + j]
                        b.enable[j] = ee[k, j0 + j]
                        b.ext[j] = xx[k, j0 + j]
                        hand_load(b, &self.inputs[j0 + j].hand, j, self.dt)
                        if rec_state:
                            o_th[k, j0 + j] = b.theta[j]
                            o_w[k, j0 + j] = b.omega[j]
                    hil_step(b, P, &self.params[j0], &self.states[j0], m, padded(m), self.dt, path)
                    if not rec:
                        continue
                    for j in range(m):
                        o_thm[k, j0 + j] = b.theta_meas[j]
                        o_tq[k, j0 + j] = b.torque[j]
                        o_tf[k, j0 + j] = b.friction[j]
                        o_i[k, j0 + j] = b.i_out[j]
                        o_v[k, j0 + j] = b.v_out[j]
                        o_T[k, j0 + j] = b.temperature[j]
                        o_f[k, j0 + j] = b.flags[j]
                lanes_store(b, &self.states[j0], m, mech)
                if T > 0:
                    for j in range(m):   # the last step's inputs, as step() leaves them
                        self.inputs[j0 + j].u = b.cmd[j]
                        self.inputs[j0 + j].enable = b.enable[j]
                        self.inputs[j0 + j].external_torque = b.ext[j]
                j0 += m
        return out
