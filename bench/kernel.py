"""Throughput of the servo kernel with every feature on, against MuJoCo's `<dcmotor>` and bam.

Prints ONE JSON object on stdout (progress and notes on stderr); `--out FILE` also writes it to FILE.
Method, options and peers: docs/benchmarks.md; figures and targets: docs/performance.md.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

# numpy's BLAS worker threads are never used here; keep them from spinning next to the measured thread
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from hil.params.config_file import ConfigError

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
BAM_VENV = BENCH / ".venv-bam"
BAM_PEER = BENCH / "peers" / "bam_step.py"
BAM_REQUIREMENT = "better-actuator-models==1.0.2"
BAM_PYTHON_CANDIDATES = ("/root/.pyenv/versions/3.12.1/bin/python3.12", "python3.12")

DT = 1e-3
SIZES = (1, 32, 1024)

# --- the benchmark actuator --------------------------------------------------------------------
# A geared DC motor (constants on the motor side, MuJoCo dcmotor semantics) on a pendulum.
PENDULUM = {"mass": 0.5, "arm_mass": 0.1, "length": 0.15, "gravity": 9.80665}
GEAR = 200.0
MOTOR = {
    "resistance": 2.0,            # ohm
    "kt": 0.0125,                 # N·m/A (output: 2.5 N·m/A through the gear)
    "armature": 3e-7,             # kg·m² rotor, × gear² = 0.012 kg·m² at the output
    "inductance": 1e-3,           # H  -> te = L/R = 0.5 ms
    "didt_max": 2000.0,           # A/s
    "tau_max": 0.05,              # N·m motor side (10 N·m at the output)
    "thermal_r": 5.0,             # K/W
    "thermal_c": 20.0,            # J/K
    "tempcoef": 0.0039,           # 1/K (copper)
    "reftemp": 25.0,              # °C
    "ambient": 25.0,              # °C
    "cog_amplitude": 5e-4,        # N·m
    "cog_poles": 6.0,
    "cog_phase": 0.3,
    "lugre": (0.5, 2e-4, 1e-3, 1.5e-3, 10.0),   # σ0, σ1, τc, τs, ωs (motor side)
    "damping": (1e-6, 1e-8, 1e-10),             # B1, B2, B3 (motor side)
}
CONTROLLER = {"kp": 0.2, "ki": 0.5, "kd": 0.005, "slew": 400.0, "imax": 2.0, "vmax": 12.0,
              "ctrlrange": (-600.0, 600.0)}     # volt units, setpoint in gear·rad (v1 "position")
SUPPLY_V = 12.0
DERATE = {"derate_i_rated": 5.0, "derate_i_safe": 1.0, "derate_t1": 80.0, "derate_t2": 120.0}
ENCODER = {"encoder_counts": 4096.0, "encoder_noise": 2e-4}
# Open-circuit fault armed (10 % of each motor revolution open once it latches), never triggered:
# no temporal trigger, and the behavioural trigger needs |i| > 50 A for 10 ms (i stays < 7 A).
FAULT = {"oc_fraction": 0.1, "oc_time": math.inf, "oc_current": 50.0, "oc_duration": 0.01}
# bam MX-64 m6 (Rhoban/bam 1b5a1ce, bam/params/mx64/m6.json), friction budget M6 at the output.
BAM_MX64_M6 = {
    "friction_base": 6.217919698787649e-07,
    "friction_stribeck": 0.12269525980968875,
    "load_friction_motor": 0.3114720375111298,
    "load_friction_external": 2.0462014258729542e-08,
    "load_friction_motor_stribeck": 0.18774381222411038,
    "load_friction_external_stribeck": 0.014065853481003015,
    "load_friction_motor_quad": 0.006908512882777861,
    "load_friction_external_quad": 0.009999980627672081,
    "dtheta_stribeck": 2.575277366960116,
    "alpha": 0.8409018066017007,
    "friction_viscous": 0.02533701181690149,
}
GOAL_AMPLITUDE = 0.8      # rad at the output
GOAL_FREQ = 0.5           # Hz

FEATURES = ("position controller kp/ki/kd + slew + Imax + Vmax + ctrlrange + supply clip",
            "inductance + di/dt limit", "thermal + current derating", "torque saturation", "cogging",
            "LuGre", "damping polynomial B1..B3", "gear 200", "pendulum load (mass + arm)",
            "bam M6 friction budget (MX-64 m6)", "encoder quantization 4096 cpr + noise",
            "open-circuit fault armed, behavioural trigger (never fires)")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def summarize(rates: list[float], cpu_shares: list[float] | None = None) -> dict:
    """median / min / max over the samples (with 5-9 samples a p99 would just be the max).

    `cpu_share` = thread CPU time / wall time of a sample: below ~0.97 the thread was descheduled
    (another process on the pinned core), so that sample under-reports.
    """
    med = statistics.median(rates)
    out = {"median": med, "min": min(rates), "max": max(rates), "mean": statistics.fmean(rates),
           "spread": (max(rates) - min(rates)) / med, "n_samples": len(rates), "samples": rates}
    if cpu_shares:
        out["cpu_share_min"] = min(cpu_shares)
    return out


class Timer:
    """Wall time of a block, plus the thread's CPU time over the same block."""

    def __enter__(self):
        self.c0, self.t0 = time.thread_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self.cpu_share = (time.thread_time() - self.c0) / self.wall if self.wall > 0 else 1.0
        return False


def sample(fn, T: int, repeats: int, per_call: int) -> dict:
    """`repeats` samples of fn(T) -> Timer; rates in units/s with `per_call` units per step."""
    rates, shares = [], []
    for _ in range(repeats):
        t = fn(T)
        rates.append(per_call * T / t.wall)
        shares.append(t.cpu_share)
    out = summarize(rates, shares)
    out["steps_per_sample"] = T
    return out


def goal(T: int, k0: int = 0) -> np.ndarray:
    """Output-angle goal [rad] for steps k0 .. k0+T-1."""
    t = (np.arange(T) + k0) * DT
    return GOAL_AMPLITUDE * np.sin(2.0 * np.pi * GOAL_FREQ * t)


# --- kernel ------------------------------------------------------------------------------------

def kernel_params(seed: int = 1, *, mujoco_subset: bool = False, without: str | None = None) -> dict:
    """The full-feature parameter dict; `mujoco_subset` drops what MuJoCo's dcmotor lacks;
    `without` switches one feature off (for --ablate)."""
    from hil.kernel import LAWS, default_params

    p = default_params()
    s0, s1, tc, ts, ws = MOTOR["lugre"]
    b1, b2, b3 = MOTOR["damping"]
    p.update({
        "law": LAWS["position"], "integrator": 0,
        "resistance": MOTOR["resistance"], "kt": MOTOR["kt"], "gear": GEAR,
        "armature": MOTOR["armature"], "te": MOTOR["inductance"] / MOTOR["resistance"],
        "didt_max": MOTOR["didt_max"], "tau_max": MOTOR["tau_max"],
        "thermal_r": MOTOR["thermal_r"], "thermal_c": MOTOR["thermal_c"], "tempcoef": MOTOR["tempcoef"],
        "reftemp": MOTOR["reftemp"], "ambient": MOTOR["ambient"],
        "cog_amplitude": MOTOR["cog_amplitude"], "cog_poles": MOTOR["cog_poles"],
        "cog_phase": MOTOR["cog_phase"],
        "damping_b1": b1, "damping_b2": b2, "damping_b3": b3,
        "lugre_s0": s0, "lugre_s1": s1, "lugre_tc": tc, "lugre_ts": ts, "lugre_ws": ws,
        "kp": CONTROLLER["kp"], "ki": CONTROLLER["ki"], "kd": CONTROLLER["kd"],
        "slew": CONTROLLER["slew"], "imax": CONTROLLER["imax"], "vmax": CONTROLLER["vmax"],
        "ctrl_limited": 1, "ctrl_lo": CONTROLLER["ctrlrange"][0], "ctrl_hi": CONTROLLER["ctrlrange"][1],
        **PENDULUM,
        "seed": seed,
    })
    if not mujoco_subset:
        p.update({"supply_v": SUPPLY_V, **DERATE, **ENCODER, **FAULT, **BAM_MX64_M6,
                  "budget": 1, "budget_quadratic": 1})
    if without is not None:
        p.update(ABLATIONS[without])
    return p


# --ablate: parameter changes that switch one feature off
ABLATIONS: dict[str, dict] = {
    "encoder_noise": {"encoder_noise": 0.0},
    "encoder_quantization": {"encoder_counts": 0.0},
    "budget_m6": {"budget": 0, "budget_quadratic": 0},
    "budget_stribeck_pow": {"dtheta_stribeck": 0.0},
    "lugre": {"lugre_s0": 0.0},
    "cogging": {"cog_amplitude": 0.0},
    "thermal": {"thermal_r": 0.0},
    "derating": {"derate_i_rated": 0.0},
    "inductance": {"te": 0.0, "didt_max": 0.0},
    "damping_poly": {"damping_b1": 0.0, "damping_b2": 0.0, "damping_b3": 0.0},
    "fault_armed": {"oc_fraction": 0.0},
    "controller_i_slew": {"ki": 0.0, "slew": 0.0, "imax": 0.0},
}


def make_kernel(n: int, **kw):
    from hil.kernel import Kernel

    k = Kernel(n, DT)
    for j in range(n):
        k.set_params(j, kernel_params(seed=j + 1, **kw))
    return k


def calibrate(fn, min_time: float, start: int) -> int:
    """Smallest T (grown geometrically from `start`) for which fn(T) takes >= min_time."""
    T = start
    while True:
        el = fn(T).wall
        if el >= min_time:
            return T
        T = int(T * min(10.0, max(1.3, 1.15 * min_time / max(el, 1e-7))))


def kernel_runner(k):
    """fn(T) -> Timer: one `k.run(u[T], record=False)` call along the goal trajectory."""
    cache: dict[int, np.ndarray] = {}

    def one(T: int) -> Timer:
        u = cache.get(T)
        if u is None:
            cache.clear()
            u = cache[T] = GEAR * goal(T)
        with Timer() as t:
            k.run(u, record=False)
        return t

    return one


def kernel_steps(one, n: int, min_time: float) -> int:
    """Warm a kernel_runner of n actuators up (which also moves the state off the initial rest), then the
    T steps that one sample of >= min_time takes."""
    one(max(1, 2000 // n))
    return calibrate(one, min_time, max(10, 20000 // n))


def bench_kernel_run(n: int, min_time: float, repeats: int) -> dict:
    k = make_kernel(n)
    one = kernel_runner(k)
    T = kernel_steps(one, n, min_time)
    out = sample(one, T, repeats, n)
    out.update({"unit": "actuator-steps/s", "n": n,
                "ns_per_actuator_step_median": 1e9 / out["median"],
                "health": kernel_health(k)})
    return out


def bench_ablation(n: int, min_time: float, rounds: int) -> dict:
    """Per-feature cost: the full kernel and one kernel per switched-off feature, run in
    interleaved rounds (so machine noise hits all alike); compares the best sample of each."""
    names = ["full", *ABLATIONS]
    runners = {name: kernel_runner(make_kernel(n, without=None if name == "full" else name))
               for name in names}
    for one in runners.values():
        one(max(1, 2000 // n))
    T = calibrate(runners["full"], min_time, max(10, 20000 // n))
    rates: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            rates[name].append(n * T / runners[name](T).wall)
    best = {name: max(r) for name, r in rates.items()}
    full_ns = 1e9 / best["full"]
    out = {"n": n, "steps_per_sample": T, "rounds": rounds, "statistic": "best of the rounds",
           "full_msteps_per_s": best["full"] / 1e6, "full_ns_per_actuator_step": full_ns, "without": {}}
    for name in ABLATIONS:
        out["without"][name] = {"msteps_per_s": best[name] / 1e6,
                                "ns_saved_per_actuator_step": full_ns - 1e9 / best[name],
                                "share_of_full": (full_ns - 1e9 / best[name]) / full_ns}
    return out


def kernel_health(k) -> dict:
    """Everything stayed finite, every stateful feature was exercised, and the fault never fired."""
    sts = [k.get_state(j) for j in range(k.n)]
    finite = all(math.isfinite(s["theta"]) and math.isfinite(s["omega"]) for s in sts)
    s = sts[0]
    return {
        "finite": finite,
        "open_circuit_fired": any(s["oc_active"] for s in sts),
        "max_abs_theta": max(abs(s["theta"]) for s in sts),
        "steps": s["k"],
        "exercised": {"slew": s["slew_u"] != 0, "integral": s["integral"] != 0,
                      "thermal": s["temp_rise"] > 0, "lugre": s["bristle"] != 0,
                      "inductance": s["current"] != 0, "budget": s["friction_torque"] != 0},
        "state0": {key: s[key] for key in ("theta", "omega", "current", "temp_rise", "integral",
                                           "bristle", "fault_flags")},
    }


def bench_kernel_step_call(min_time: float, repeats: int, n: int = 1) -> dict:
    """One `Kernel.step(u)` Python call per step for N = n actuators: every actuator advanced one step
    before the next step, the order of the real-time loop (`Kernel.run` takes a block of 32 through all
    its steps first)."""
    k = make_kernel(n)
    step = k.step
    pos = [0]

    def one(T: int) -> Timer:
        us = (GEAR * goal(T, pos[0])).tolist()
        pos[0] += T
        with Timer() as t:
            for v in us:
                step(v)
        return t

    one(1000)
    T = calibrate(one, min_time, max(10, 2000 // n))
    out = sample(one, T, repeats, n)
    out.update({"unit": f"actuator-steps/s ({n} per Kernel.step call)",
                "us_per_call_median": 1e6 * n / out["median"],
                "ns_per_actuator_step_median": 1e9 / out["median"], "call": "k.step(u) with a Python float"})
    return out


# --- MuJoCo ------------------------------------------------------------------------------------

def mjcf() -> str:
    """The one-hinge pendulum with a `<dcmotor>` carrying the kernel's MuJoCo-expressible features."""
    from hil.params.mjcf import pendulum_inertial, pendulum_mjcf

    mass, com, inertia = pendulum_inertial(PENDULUM["mass"], PENDULUM["length"], PENDULUM["arm_mass"])
    s0, s1, tc, ts, ws = MOTOR["lugre"]
    b1, b2, b3 = MOTOR["damping"]
    C = CONTROLLER
    dcmotor = f"""<dcmotor name="motor" joint="hinge" gear="{GEAR!r}" input="position"
             resistance="{MOTOR['resistance']!r}" motorconst="{MOTOR['kt']!r}"
             armature="{MOTOR['armature']!r}" inductance="{MOTOR['inductance']!r}"
             saturation="{MOTOR['tau_max']!r} 0 {MOTOR['didt_max']!r}"
             thermal="{MOTOR['thermal_r']!r} {MOTOR['thermal_c']!r} 0 {MOTOR['tempcoef']!r}
                      {MOTOR['reftemp']!r} {MOTOR['ambient']!r}"
             cogging="{MOTOR['cog_amplitude']!r} {MOTOR['cog_poles']!r} {MOTOR['cog_phase']!r}"
             lugre="{s0!r} {s1!r} {tc!r} {ts!r} {ws!r}" damping="{b1!r} {b2!r} {b3!r}"
             controller="{C['kp']!r} {C['ki']!r} {C['kd']!r} {C['slew']!r} {C['imax']!r} {C['vmax']!r}"
             ctrlrange="{C['ctrlrange'][0]!r} {C['ctrlrange'][1]!r}"/>"""
    return pendulum_mjcf(mass, com, inertia, DT, PENDULUM["gravity"], actuator=dcmotor,
                         model="bench_dcmotor_pendulum")


def mujoco_model():
    import mujoco

    m = mujoco.MjModel.from_xml_string(mjcf())
    return m, mujoco.MjData(m)


def mujoco_equivalence(steps: int) -> dict:
    """Kernel (MuJoCo subset of the features) vs mj_step on the same command: max |Δθ|."""
    import mujoco

    m, d = mujoco_model()
    u = GEAR * goal(steps)
    th = np.empty(steps)
    for i in range(steps):
        d.ctrl[0] = u[i]
        mujoco.mj_step(m, d)
        th[i] = d.qpos[0]
    k = make_kernel(1, mujoco_subset=True)
    out = k.run(u, record=True)
    kt = np.append(out["theta"][1:, 0], k.get_state(0)["theta"])   # θ after each step
    err = float(np.max(np.abs(kt - th)))
    return {"steps": steps, "max_abs_dtheta_rad": err, "theta_range_rad": [float(th.min()), float(th.max())],
            "na": int(m.na), "equivalent": err < 1e-9}


def mj_step_runner(m, d):
    """fn(T) -> Timer: T `mj_step` calls from a Python loop that writes `data.ctrl` each step."""
    import mujoco

    step = mujoco.mj_step
    ctrl = d.ctrl
    pos = [0]

    def one(T: int) -> Timer:
        us = (GEAR * goal(T, pos[0])).tolist()
        pos[0] += T
        with Timer() as t:
            for v in us:
                ctrl[0] = v
                step(m, d)
        return t

    return one


def mj_steps(one, min_time: float) -> int:
    """Warm an mj_step_runner up, then the T steps that one sample of >= min_time takes."""
    one(1000)
    return calibrate(one, min_time, 2000)


def bench_mj_step(min_time: float, repeats: int) -> dict:
    import mujoco

    m, d = mujoco_model()
    one = mj_step_runner(m, d)
    T = mj_steps(one, min_time)
    out = sample(one, T, repeats, 1)
    out.update({"unit": "actuator-steps/s (one mj_step per Python call, data.ctrl written each step)",
                "us_per_call_median": 1e6 / out["median"],
                "mujoco_version": mujoco.__version__, "integrator": "Euler", "na": int(m.na)})
    return out


def bench_contention(n: int, sample_s: float, pairs: int) -> dict:
    """Short kernel[n] samples alternated with short mj_step samples on the same pinned core.

    A co-tenant of the VM's physical core (an SMT sibling, a neighbour's load) slows this thread
    without showing as steal in /proc/stat. Where the two rates rise and fall together (correlation
    near 1), the host's load moved both; `kernel_when_probe_fast` is kernel[n]'s median over the pairs
    whose mj_step sample ran within 5 % of the fastest one (a diagnostic, not the target's figure).
    """
    kernel = kernel_runner(make_kernel(n))
    probe = mj_step_runner(*mujoco_model())
    tk, tp = kernel_steps(kernel, n, sample_s), mj_steps(probe, sample_s)
    k_rates, p_rates = [], []
    for _ in range(pairs):
        k_rates.append(n * tk / kernel(tk).wall)
        p_rates.append(tp / probe(tp).wall)
    fast = [k for k, p in zip(k_rates, p_rates, strict=True) if p >= 0.95 * max(p_rates)]
    return {"n": n, "pairs": pairs, "sample_s": sample_s,
            "kernel": summarize(k_rates), "mj_step": summarize(p_rates),
            "correlation": statistics.correlation(k_rates, p_rates) if pairs > 2 else None,
            "kernel_over_mj_step": summarize([k / p for k, p in zip(k_rates, p_rates, strict=True)]),
            "kernel_when_probe_fast": {"median": statistics.median(fast), "pairs": len(fast)}}


def bench_mj_rollout(min_time: float, repeats: int) -> dict:
    import mujoco

    try:
        from mujoco import rollout
    except ImportError as exc:
        return {"available": False, "reason": f"mujoco.rollout: {exc}"}
    m, d = mujoco_model()
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    x0 = np.empty(mujoco.mj_stateSize(m, spec))
    mujoco.mj_getState(m, d, x0, spec)
    res: dict = {"available": True, "unit": "actuator-steps/s (nbatch × nstep / time)",
                 "threads": "nthread=0 (calling thread only)", "mujoco_version": mujoco.__version__}
    with rollout.Rollout(nthread=0) as ro:
        for nbatch in (1, 32):
            bufs: dict[int, tuple] = {}

            def one(T: int, nbatch: int = nbatch, bufs: dict = bufs) -> Timer:
                if T not in bufs:
                    bufs.clear()
                    ctrl = np.ascontiguousarray(np.broadcast_to((GEAR * goal(T))[None, :, None], (nbatch, T, 1)))
                    st = np.empty((nbatch, T, x0.size))
                    sd = np.empty((nbatch, T, m.nsensordata))
                    bufs[T] = (np.tile(x0, (nbatch, 1)), ctrl, st, sd)
                init, ctrl, st, sd = bufs[T]
                with Timer() as t:
                    ro.rollout(m, d, init, ctrl, state=st, sensordata=sd)
                return t

            one(100)
            T = calibrate(one, min_time, max(10, 2000 // nbatch))
            s = sample(one, T, repeats, nbatch)
            s["nbatch"] = nbatch
            res[f"nbatch_{nbatch}"] = s
    res["median"] = res["nbatch_1"]["median"]
    return res


# --- bam ---------------------------------------------------------------------------------------

def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def bam_python() -> tuple[Path | None, str]:
    """bench/.venv-bam/bin/python with bam importable, creating the venv the first time."""
    py = BAM_VENV / "bin" / "python"
    probe = ["-c", "import bam.simulate, bam.model, bam.actuators"]
    if py.exists() and _run([str(py), *probe], 120).returncode == 0:
        return py, "cached"
    base = None
    for cand in BAM_PYTHON_CANDIDATES:
        path = cand if os.path.isabs(cand) else shutil.which(cand)
        if path and os.path.exists(path):
            base = path
            break
    if base is None:
        return None, "no Python 3.12 interpreter (bam requires >=3.12,<3.13)"
    log(f"[bam] creating {BAM_VENV} with {base} and installing {BAM_REQUIREMENT} (first run only)")
    try:
        r = _run([base, "-m", "venv", "--clear", str(BAM_VENV)], 300)
        if r.returncode != 0:
            return None, f"venv creation failed: {r.stderr.strip()[-500:]}"
        r = _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", BAM_REQUIREMENT], 900)
        if r.returncode != 0:
            return None, f"pip install {BAM_REQUIREMENT} failed: {r.stderr.strip()[-500:]}"
    except subprocess.TimeoutExpired as exc:
        return None, f"timed out: {exc}"
    if _run([str(py), *probe], 120).returncode != 0:
        return None, "bam not importable after install"
    return py, "created"


def bench_bam(min_time: float, repeats: int) -> dict:
    try:
        py, how = bam_python()
    except OSError as exc:
        return {"available": False, "reason": f"{type(exc).__name__}: {exc}"}
    if py is None:
        return {"available": False, "reason": how}
    cmd = [str(py), str(BAM_PEER), "--min-time", repr(min_time), "--repeats", str(repeats),
           "--dt", repr(DT), "--mass", repr(PENDULUM["mass"]), "--arm-mass", repr(PENDULUM["arm_mass"]),
           "--length", repr(PENDULUM["length"])]
    try:
        r = _run(cmd, 600)
    except subprocess.TimeoutExpired:
        return {"available": False, "reason": "peer script timed out"}
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        return {"available": False, "reason": f"peer exited {r.returncode}: {r.stderr.strip()[-500:]}"}
    try:
        peer = json.loads(r.stdout)
    except json.JSONDecodeError as exc:
        return {"available": False, "reason": f"peer printed no JSON: {exc}"}
    step = peer.pop("step")
    keys = ("median", "min", "max", "mean", "spread", "cpu_share_min", "us_per_call_median")
    out = {"available": True, "venv": how, **{k: step[k] for k in keys if k in step}}
    out.update({"step": step, **peer})
    return out


# --- machine -----------------------------------------------------------------------------------

def proc_stat() -> dict[str, list[int]]:
    """Jiffies per CPU line of /proc/stat (first 8 fields: user … steal)."""
    out = {}
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("cpu"):
                    parts = line.split()
                    out[parts[0]] = [int(x) for x in parts[1:9]]
    except OSError:
        pass
    return out


def steal_fraction(before: dict, after: dict, cpu: str) -> float | None:
    if cpu not in before or cpu not in after:
        return None
    d = [a - b for a, b in zip(after[cpu], before[cpu], strict=True)]
    total = sum(d)
    return d[7] / total if total > 0 else None


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def pin() -> list[int] | None:
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        cpus = sorted(os.sched_getaffinity(0))
        target = 0 if 0 in cpus else cpus[0]
        os.sched_setaffinity(0, {target})
        return sorted(os.sched_getaffinity(0))
    except OSError as exc:
        log(f"could not pin: {exc}")
        return None


def kernel_build() -> dict:
    import hil.kernel.core as core

    so = Path(core.__file__)
    pyx = so.parent / "core.pyx"
    info = {"module": str(so)}
    if pyx.exists():
        info["stale"] = pyx.stat().st_mtime > so.stat().st_mtime   # .pyx edited after the build
    try:
        rev = _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], 10).stdout.strip()
        dirty = _run(["git", "-C", str(ROOT), "status", "--porcelain", "hil/kernel"], 10).stdout.strip()
        info.update({"git_head": rev, "hil_kernel_dirty": bool(dirty)})
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


# --- main --------------------------------------------------------------------------------------

def clean(x):
    """JSON-safe copy: numpy scalars to Python, non-finite floats to None."""
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, (np.integer, np.bool_)):
        return x.item()
    return x


def ratio(a, b):
    return a / b if a and b else None


def run(quick: bool = False, min_time: float | None = None, repeats: int | None = None, bam: bool = True,
        ablate: bool = False, simd: str | None = None) -> dict:
    """The benchmark (`servo-hil bench kernel`), JSON-ready: `quick` short samples (a smoke test), `min_time`
    seconds per sample (0.5, quick 0.03), `repeats` samples per measurement (9, quick 5), bam's peer unless not
    `bam`, a per-feature cost breakdown at N = 1024 with `ablate`, the kernel's vector-math path forced by
    `simd` (scalar, avx2, avx512; default the best available)."""
    min_time = (0.03 if quick else 0.5) if min_time is None else min_time
    repeats = (5 if quick else 9) if repeats is None else repeats
    if repeats < 1 or min_time <= 0:
        raise ConfigError("--repeats must be >= 1 and --min-time > 0")

    import hil.kernel.core as core

    best_simd = core._simd()
    if simd:
        try:
            core._simd(simd)
        except ValueError as exc:
            raise ConfigError(f"--simd {simd}: {exc}") from None
    pinned = pin()
    t_start = time.time()
    stat0, load0 = proc_stat(), os.getloadavg()
    res: dict = {"machine": {}, "config": {}}

    log("[mujoco] equivalence check")
    try:
        import mujoco
        mj_ok, mj_reason = True, None
    except ImportError as exc:
        mj_ok, mj_reason = False, str(exc)
    if mj_ok:
        res["mujoco_equivalence"] = mujoco_equivalence(1000 if quick else 5000)
        log(f"[mujoco] kernel vs mj_step max |dθ| = {res['mujoco_equivalence']['max_abs_dtheta_rad']:.3g} rad")

    res["kernel"] = {}
    for n in SIZES:
        r = bench_kernel_run(n, min_time, repeats)
        res["kernel"][str(n)] = r
        log(f"[kernel] N={n}: {r['median'] / 1e6:.3f} M actuator-steps/s "
            f"({r['ns_per_actuator_step_median']:.1f} ns/actuator-step)")
    r = bench_kernel_step_call(min_time, repeats)
    res["kernel_step_call_n1"] = r
    log(f"[kernel] step() call N=1: {r['us_per_call_median']:.3f} us/call")
    r = bench_kernel_step_call(min_time, repeats, SIZES[-1])
    res[f"kernel_step_call_n{SIZES[-1]}"] = r
    log(f"[kernel] step() call N={SIZES[-1]} (the loop's whole-rig order): "
        f"{r['ns_per_actuator_step_median']:.1f} ns/actuator-step")

    if mj_ok:
        r = bench_mj_step(min_time, repeats)
        res["mujoco_mj_step"] = r
        log(f"[mujoco] mj_step loop: {r['median']:.4g} steps/s ({r['us_per_call_median']:.2f} us/step)")
        r = bench_mj_rollout(min_time, repeats)
        res["mujoco_rollout"] = r
        if r["available"]:
            log(f"[mujoco] rollout: nbatch 1 {r['nbatch_1']['median']:.4g}, "
                f"nbatch 32 {r['nbatch_32']['median']:.4g} actuator-steps/s")
        log(f"[probe] kernel N={SIZES[-1]} alternated with mj_step (host contention)")
        r = bench_contention(SIZES[-1], 0.05 if quick else 0.25, 4 if quick else 16)
        res["contention_probe"] = r
        log(f"[probe] correlation {r['correlation']:.2f}; kernel {r['kernel']['median'] / 1e6:.2f} M/s median, "
            f"{r['kernel_when_probe_fast']['median'] / 1e6:.2f} when mj_step ran fast")
    else:
        res["mujoco_mj_step"] = res["mujoco_rollout"] = {"available": False, "reason": mj_reason}
        res["contention_probe"] = {"available": False, "reason": mj_reason}

    if not bam:
        res["bam_step"] = {"available": False, "reason": "--no-bam"}
    else:
        res["bam_step"] = bench_bam(min_time, repeats)
        if not res["bam_step"]["available"]:
            log(f"[bam] unavailable: {res['bam_step']['reason']}")

    if ablate:
        log("[ablate] per-feature cost at N=1024 (interleaved rounds)")
        abl = bench_ablation(1024, min(min_time, 0.2), 5 if quick else 15)
        for name, r in abl["without"].items():
            log(f"[ablate] without {name:22s} {r['msteps_per_s']:.3f} M/s, "
                f"saves {r['ns_saved_per_actuator_step']:.1f} ns/actuator-step")
        res["ablation_n1024"] = abl

    stat1, load1 = proc_stat(), os.getloadavg()
    k1 = res["kernel"]["1"]["median"]
    bam = res["bam_step"].get("median") if res["bam_step"].get("available") else None
    bam_cl = (res["bam_step"].get("control_and_step", {}).get("median")
              if res["bam_step"].get("available") else None)
    mjs = res["mujoco_mj_step"].get("median")
    mjr = res["mujoco_rollout"].get("median")
    kcall = res["kernel_step_call_n1"]["median"]
    res["ratios"] = {
        "kernel_n1_vs_bam": ratio(k1, bam),
        "kernel_n1_vs_mj_step": ratio(k1, mjs),
        "kernel_n1024_msteps_per_s": res["kernel"]["1024"]["median"] / 1e6,
        "kernel_n1_vs_mj_rollout": ratio(k1, mjr),
        "kernel_n1_vs_bam_control_and_step": ratio(k1, bam_cl),
        "kernel_step_call_n1_vs_bam": ratio(kcall, bam),
        "kernel_step_call_n1_vs_mj_step": ratio(kcall, mjs),
    }
    rt = res["ratios"]
    res["targets"] = {
        "n1024_ge_20M": rt["kernel_n1024_msteps_per_s"] >= 20.0,
        "ge_100x_bam": None if rt["kernel_n1_vs_bam"] is None else rt["kernel_n1_vs_bam"] >= 100.0,
        "ge_10x_mj_step": None if rt["kernel_n1_vs_mj_step"] is None else rt["kernel_n1_vs_mj_step"] >= 10.0,
    }

    import hil

    res["machine"] = {
        "cpu_model": cpu_model(),
        "nproc": os.cpu_count(),
        "affinity": pinned,
        "pinned": pinned is not None and len(pinned) == 1,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "mujoco": mujoco.__version__ if mj_ok else None,
        "kernel_build": kernel_build(),
        "kernel_simd": {"path": core._simd(), "best_available": best_simd},
        "hil_package": str(Path(hil.__file__).parent),
        "steal_fraction": {
            "all_cpus": steal_fraction(stat0, stat1, "cpu"),
            **({f"cpu{pinned[0]}": steal_fraction(stat0, stat1, f"cpu{pinned[0]}")} if pinned else {}),
            "proc_stat_before": {k: v for k, v in stat0.items() if k == "cpu" or (pinned and k == f"cpu{pinned[0]}")},
            "proc_stat_after": {k: v for k, v in stat1.items() if k == "cpu" or (pinned and k == f"cpu{pinned[0]}")},
            "fields": "user nice system idle iowait irq softirq steal (jiffies); fraction = Δsteal/Δtotal",
        },
        "loadavg_before": list(load0),
        "loadavg_after": list(load1),
        "wall_s": time.time() - t_start,
    }
    res["config"] = {
        "dt": DT, "quick": quick, "min_time_per_sample_s": min_time, "repeats": repeats,
        "features": list(FEATURES),
        "goal": f"{GOAL_AMPLITUDE} rad sine at {GOAL_FREQ} Hz (× gear as the dcmotor setpoint)",
        "pendulum": PENDULUM, "gear": GEAR, "motor": MOTOR, "controller": CONTROLLER,
        "supply_v": SUPPLY_V, "derating": DERATE, "encoder": ENCODER,
        "fault": FAULT,
        "budget": "bam M6 with MX-64 m6 parameters",
        "kernel_measure": "Kernel.run(u[T], record=False): one call per sample, T steps",
    }
    return clean(res)
