"""Peer benchmark: bam's reference simulator `Simulator.step` (Rhoban/bam, `better-actuator-models`).

Runs inside bench/.venv-bam, started by the kernel benchmark; times `step` and `control_and_step` on the
MX-64 m6 Pendulum and prints one JSON object on stdout (docs/benchmarks.md, Kernel).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import sys
import time


def stats(rates: list[float]) -> dict:
    return {
        "median": statistics.median(rates),
        "min": min(rates),
        "max": max(rates),
        "mean": statistics.fmean(rates),
        "spread": (max(rates) - min(rates)) / statistics.median(rates),
        "samples": rates,
        "n_samples": len(rates),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds per sample (at least)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--mass", type=float, default=0.5)
    ap.add_argument("--arm-mass", type=float, default=0.1)
    ap.add_argument("--length", type=float, default=0.15)
    ap.add_argument("--kp", type=float, default=32.0, help="MX 'P Gain' register value")
    ap.add_argument("--vin", type=float, default=15.0)
    args = ap.parse_args()

    if hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    import numpy as np
    from bam.model import load_model
    from bam.simulate import Simulator

    try:
        from importlib.metadata import version
        bam_version = version("better-actuator-models")
    except Exception:  # pragma: no cover - metadata is informational only
        bam_version = None

    model = load_model(motor_name="mx64", model="m6")
    sim = Simulator(model)
    log = {"mass": args.mass, "arm_mass": args.arm_mass, "length": args.length,
           "kp": args.kp, "vin": args.vin, "dt": args.dt}
    model.actuator.load_log(log)   # builds the Pendulum testbench, sets kp and vin
    act = model.actuator
    dt = args.dt

    def goal(k: int) -> float:
        return 0.8 * math.sin(2.0 * math.pi * 0.5 * k * dt)

    def run_step(T: int) -> tuple[float, float]:
        # volts from the firmware law along a closed-loop run of the goal trajectory (untimed),
        # then replayed open loop from the same initial state
        sim.reset(0.0, 0.0)
        volts = []
        for k in range(T):
            volts.append(float(act.compute_control(goal(k), sim.q, sim.dq, dt)))
            sim.step(volts[-1], True, dt)
        sim.reset(0.0, 0.0)
        step = sim.step
        c0, t0 = time.thread_time(), time.perf_counter()
        for v in volts:
            step(v, True, dt)
        return time.perf_counter() - t0, time.thread_time() - c0

    def run_closed(T: int) -> tuple[float, float]:
        sim.reset(0.0, 0.0)
        goals = [goal(k) for k in range(T)]
        step = sim.step
        control = act.compute_control
        c0, t0 = time.thread_time(), time.perf_counter()
        for g in goals:
            step(control(g, sim.q, sim.dq, dt), True, dt)
        return time.perf_counter() - t0, time.thread_time() - c0

    out: dict = {
        "available": True,
        "bam_version": bam_version,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "model": "mx64 m6 (bundled params), Pendulum testbench",
        "testbench": {"mass": args.mass, "arm_mass": args.arm_mass, "length": args.length},
        "kp": args.kp, "vin": args.vin, "dt": dt,
        "unit": "actuator-steps/s (one actuator, one Simulator.step per Python call)",
    }
    for name, fn in (("step", run_step), ("control_and_step", run_closed)):
        T = 200
        while True:  # calibrate: grow T until one run takes >= min_time
            el = fn(T)[0]
            if el >= args.min_time:
                break
            T = int(T * min(10.0, max(1.5, 1.1 * args.min_time / max(el, 1e-6))))
        rates, shares = [], []
        for _ in range(args.repeats):
            wall, cpu = fn(T)
            rates.append(T / wall)
            shares.append(cpu / wall)
        s = stats(rates)
        s["cpu_share_min"] = min(shares)
        s["steps_per_sample"] = T
        s["us_per_call_median"] = 1e6 / s["median"]
        s["final_state"] = {"q": float(sim.q), "dq": float(sim.dq)}
        ok = math.isfinite(float(sim.q)) and math.isfinite(float(sim.dq))
        s["finite"] = ok
        out[name] = s
        print(f"[bam] {name}: {s['median']:.4g} steps/s ({s['us_per_call_median']:.2f} us/call)",
              file=sys.stderr)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
