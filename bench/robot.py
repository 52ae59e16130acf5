"""`servo-hil bench robot`: a robot rig's physics steps per second offline, against bam's MuJoCo coupling, as JSON.

A whole window of `engine.run` in one nogil call, against bam's `MujocoController.update()` + `mj_step` from
Python on the same MJCF. Method: docs/benchmarks.md; figures: docs/robots.md, Benchmark.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path

import mujoco
import numpy as np

from bench.host import machine
from hil.params import catalog
from servo_hil.rig import load_robot_rig

PEER = Path(__file__).with_name("peers") / "bam_mujoco.py"
# bam's published sets (Rhoban/bam 1b5a1ce, bam/params/), read from ../shared/reference/ beside the repository
DATA = Path(__file__).resolve().parents[2] / "shared" / "reference" / "bam_params"
PEER_SET = ("mx64", "m4")   # bam's set every peer controller uses: update()'s cost does not depend on its values


def goals(initial: np.ndarray, n_steps: int, dt: float) -> np.ndarray:
    """(T, n) goals [rad]: each joint swings ±0.4 rad about its initial angle, at its own pace."""
    t = np.arange(n_steps)[:, None] * dt
    f = 0.3 + 0.15 * np.arange(len(initial))[None, :]
    return initial[None, :] + 0.4 * np.sin(2 * np.pi * f * t)


def peer(mjcf: Path, joints: list[str], g: np.ndarray, repeats: int) -> dict:
    from bench.kernel import bam_python

    py, why = bam_python()
    if py is None:
        return {"skipped": why}
    probe = subprocess.run([str(py), "-c", "import mujoco; print(mujoco.__version__)"], capture_output=True,
                           text=True, check=False)
    if probe.stdout.strip() != mujoco.__version__:
        return {"skipped": f"bench/.venv-bam has no MuJoCo {mujoco.__version__} (pip install it there)"}
    params = DATA / PEER_SET[0] / f"{PEER_SET[1]}.json"
    if not params.is_file():
        return {"skipped": f"needs ../shared/reference/bam_params ({params.name} of bam's {PEER_SET[0]})"}
    fw = catalog.entry(PEER_SET[0]).firmware
    job = {"mjcf": str(mjcf), "repeats": repeats, "goals": g.tolist(),
           "joints": [{"name": j, "params": str(params), "kp": fw["kp"],
                       "vin": fw["supply_v"], "error_gain": fw["error_gain"], "max_pwm": fw["max_duty"]}
                      for j in joints]}
    r = subprocess.run([str(py), str(PEER)], input=json.dumps(job), capture_output=True, text=True, timeout=1800,
                       check=False)
    if r.returncode != 0:
        return {"skipped": f"peer failed: {r.stderr.strip()[-400:]}"}
    out = {k: v for k, v in json.loads(r.stdout).items() if k not in ("q", "dq")}   # the timing, not the trajectory
    out["params"] = f"bam {PEER_SET[0]} {PEER_SET[1]} for every joint"
    return out


def run(rig: Path, seconds: float = 2.0, repeats: int = 3, with_peer: bool = True) -> dict:
    """The benchmark's JSON document."""
    cfg, _, robot = load_robot_rig(rig)
    engine = robot.engine
    tick = 1.0 / cfg.loop.rate_hz
    n_ticks = max(int(seconds / tick), 1)
    g = goals(np.array([a.initial.theta for a in cfg.actuators]), n_ticks, tick)
    engine.run(g[: min(n_ticks, 200)])  # warm-up: caches, the contact set
    rates, shares = [], []
    for _ in range(repeats):
        s0, m0 = engine.step_ns, engine.mj_step_ns
        t0 = time.perf_counter()
        engine.run(g)
        wall = time.perf_counter() - t0
        rates.append(n_ticks * robot.substeps / wall)
        shares.append((engine.mj_step_ns - m0) / max(engine.step_ns - s0, 1))
    steps = statistics.median(rates)
    doc = {
        "rig": str(rig), "joints": robot.joints, "timestep_s": robot.timestep, "substeps": robot.substeps,
        "rate_hz": cfg.loop.rate_hz, "contacts_at_end": int(robot.data.ncon), "window_s": n_ticks * tick,
        "repeats": repeats, "physics_steps_per_s": steps, "us_per_physics_step": 1e6 / steps,
        "tick_share_of_period": cfg.loop.rate_hz * robot.substeps / steps,
        "mj_step_share": statistics.median(shares), "samples_steps_per_s": rates,
        "mujoco": mujoco.__version__, "machine": machine(),
        "realtime_loop": f"servo-hil bench loop --rig {rig} (docs/robots.md)",
    }
    if with_peer:
        p = peer(robot.mjcf, robot.joints, g, repeats)
        doc["peer_bam_mujoco_controller"] = p
        if "steps_per_s" in p:
            doc["speedup_vs_peer"] = steps / p["steps_per_s"]
    return doc
