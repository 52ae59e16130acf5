"""Kernel results of this tree against another build of the kernel, output by output, in one process.

Prints ONE JSON object on stdout: per stress rig and vector-math path, bit for bit or the largest difference
(docs/benchmarks.md).

    .venv/bin/python bench/kernel_bits.py --base ../main
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from kernel_ab import load_core, spelled_for  # noqa: E402

from tests.hil.test_kernel_plan import DT, GAIN, MOTOR, SENSING, VARIANTS  # noqa: E402

DXL = {"law": 7, "resistance": 2.0, "kt": 0.5, "dxl_kpp": 8.0, "dxl_kpi": 2.0, "dxl_kpd": 0.05,
       "dxl_kff1": 0.1, "dxl_kff2": 0.01, "dxl_kvp": 0.3, "dxl_kvi": 1.0, "dxl_prof_vel": 3.0,
       "dxl_prof_acc": 20.0, "dxl_goal_current": 1.0, "max_current": 1.5}
# Operating Mode register values: current, velocity, position, extended position, current-based position, PWM
DXL_MODES = (0, 1, 3, 4, 5, 16)


def actuators() -> list[tuple[dict, float]]:
    """(parameter overrides, goal amplitude) of every rig member: each law/feature variant with each
    sensing/fault variant, then the Dynamixel firmware's modes with two sensing variants."""
    out = []
    for v in VARIANTS:
        for s in SENSING:
            law = s.get("law", v.get("law", 1))
            out.append((v | s, GAIN[law]))
    for mode in DXL_MODES:
        for s in (SENSING[0], SENSING[4]):
            extra = {"dxl_time_profile": 1, "dxl_prof_vel": 0.4, "dxl_prof_acc": 0.1} if mode == 4 else {}
            out.append((s | DXL | extra | {"dxl_mode": mode}, 1.0 if mode in (0, 16) else 2.0))   # a register value
    return out


def inputs(amplitudes: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(steps) * DT
    u = np.sin(2 * np.pi * 0.7 * t)[:, None] * amplitudes[None, :]
    u[100:110, ::3] = np.nan
    enable = np.ones_like(u)
    enable[300:350, ::2] = 0.0
    return u, enable


def make(core, members: list[tuple[dict, float]], seeds: list[int]):
    k = core.Kernel(len(members), DT)
    for j, ((over, _), seed) in enumerate(zip(members, seeds, strict=True)):
        p = core.default_params()
        p.update(MOTOR | over, seed=seed)
        k.set_params(j, spelled_for(core, p))
        k.set_state(j, temperature=45.0)
    return k


def outputs(core, members, seeds, stepped: bool, steps: int) -> dict[str, np.ndarray]:
    k = make(core, members, seeds)
    u, enable = inputs(np.array([a for _, a in members]), steps)
    if stepped:
        out = {"theta": np.empty_like(u)}
        for i in range(steps):
            out["theta"][i] = [k.get_state(j)["theta"] for j in range(len(members))]
            k.step(u[i], enable[i], 0.2)
    else:
        out = k.run(u, enable=enable, external_torque=0.2)
    for key in k.get_state(0):
        out["state." + key] = np.array([float(k.get_state(j)[key]) for j in range(len(members))])
    return out


def difference(a: dict, b: dict) -> dict:
    """Bit-equality of every output, and the largest absolute difference of each one that differs."""
    worst = {}
    for name in a:
        x, y = np.asarray(a[name], dtype=np.float64), np.asarray(b[name], dtype=np.float64)
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if not same.all():
            with np.errstate(invalid="ignore"):
                d = np.abs(x - y)[~same]
            worst[name] = float(np.nanmax(d)) if np.isfinite(d).any() else float("inf")
    return {"bit_equal": not worst, "max_abs_difference": worst}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="checkout whose built kernel is the reference")
    ap.add_argument("--steps", type=int, default=3000)
    args = ap.parse_args(argv)
    cores = {"base": load_core(args.base.resolve()), "this": load_core(HERE.parent)}
    members = actuators()
    n = len(members)
    order = list(np.random.default_rng(7).permutation(n))     # every kind next to every other
    mixed = [members[j] for j in order]
    rigs = {f"mixed_{n}": (mixed, list(range(1, n + 1)), False),
            "mixed_37_stepped": (mixed[:37], list(range(1, 38)), True),
            **{f"lone_{j}": ([mixed[j]], [j + 1], False) for j in range(n)},
            **{f"uniform_{j}": ([mixed[j]] * 9, list(range(j + 1, j + 10)), False) for j in range(0, n, 3)}}
    res = {"base": str(args.base.resolve()), "steps": args.steps, "actuators": n, "paths": {}}
    for path in cores["this"].SIMD_PATHS:
        try:
            for core in cores.values():
                core._simd(path)
        except ValueError:
            continue
        res["paths"][path] = {name: difference(*(outputs(core, *rig, args.steps) for core in cores.values()))
                              for name, rig in rigs.items()}
    k = make(cores["this"], mixed, list(range(1, n + 1)))     # what the rig exercises (this build)
    ran = k.run(inputs(np.array([a for _, a in mixed]), args.steps)[0], external_torque=0.2)
    res["fault_bits_seen"] = int(np.bitwise_or.reduce(ran["fault_flags"].astype(np.int64), axis=None))
    res["actuators_that_moved"] = int((np.ptp(ran["theta"], axis=0) > 1e-3).sum())
    everything = [r for p in res["paths"].values() for r in p.values()]
    res["all_bit_equal"] = all(r["bit_equal"] for r in everything)
    res["rigs_bit_equal"] = f"{sum(r['bit_equal'] for r in everything)} of {len(everything)}"
    res["max_abs_difference"] = {}     # per output, over every rig and path
    for r in everything:
        for name, d in r["max_abs_difference"].items():
            res["max_abs_difference"][name] = max(d, res["max_abs_difference"].get(name, 0.0))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
