"""Kernel.run of this tree against another build of the kernel, in one process, on a shared host.

Prints ONE JSON object on stdout: per N, the thread CPU time per actuator-step of each build (docs/benchmarks.md).

    .venv/bin/python bench/kernel_ab.py --base ../main --sizes 1 32 1024
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.machinery
import importlib.util
import json
import os
import statistics
import sys
import sysconfig
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import kernel as bench  # noqa: E402  (bench/kernel.py: the actuator, goal and dt)

# this tree's extensions before load_core, bound to this tree's kernel (hil.loop.rt cimports functions an
# older --base may lack); load_core then adds each tree's kernel as a module of its own
import firmware_models.dynamixel.servo  # noqa: E402, F401


def load_core(tree: Path):
    """hil.kernel.core as built in `tree`, as a module object of its own."""
    so = tree / "hil" / "kernel" / ("core" + sysconfig.get_config_var("EXT_SUFFIX"))
    loader = importlib.machinery.ExtensionFileLoader("hil.kernel.core", str(so))
    spec = importlib.util.spec_from_file_location("hil.kernel.core", so, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def spelled_for(core, p: dict) -> dict:
    """Parameters `p`, named by this tree's kernel or by an older one, as `core`'s build names them: a
    kernel that predates the SI duty gain takes it as fw_kp with error_gain 1 (the same product), one
    whose Dynamixel modes are the Operating Mode register values takes the register value (`p` holds
    it for LAW_DXL), this tree's takes firmware_models' map of it."""
    from firmware_models.dynamixel.servo import KERNEL_MODES

    fields = core.default_params()
    p = dict(p)
    if "motorconst" in fields and "kt" in p:    # a kernel from before the torque constant was named kt
        p["motorconst"] = p.pop("kt")
    if "duty_gain" in fields and "fw_kp" in p:
        p["duty_gain"] = p.pop("error_gain") * p.pop("fw_kp")
    if "duty_gain" not in fields and "duty_gain" in p:
        p["fw_kp"], p["error_gain"] = p.pop("duty_gain"), 1.0
    if "extended_position" not in core.DXL_MODES and p.get("law") == core.LAWS["dxl"]:
        p["dxl_mode"] = KERNEL_MODES[p["dxl_mode"]]
    return fields | {k: v for k, v in p.items() if k in fields}


def compare(cores: dict, n: int, rounds: int, simd: str | None) -> dict:
    kernels = {}
    for name, core in cores.items():
        if simd:
            core._simd(simd)
        k = core.Kernel(n, bench.DT)
        for j in range(n):
            k.set_params(j, spelled_for(core, bench.kernel_params(seed=j + 1)))
        kernels[name] = k
    steps = max(10, 100_000 // n)
    u = bench.GEAR * bench.goal(3000 + steps * rounds)   # gear·rad: the position law's unit, as `bench kernel`
    for k in kernels.values():
        k.run(u[:3000], record=False)
    ns = {name: [] for name in kernels}
    for r in range(rounds):
        chunk = u[3000 + r * steps: 3000 + (r + 1) * steps]
        order = list(kernels.items())
        for name, k in order if r % 2 == 0 else order[::-1]:
            c0 = time.thread_time_ns()
            k.run(chunk, record=False)
            ns[name].append((time.thread_time_ns() - c0) / (n * steps))
    out = {name: {"median_ns": statistics.median(v), "p25_ns": statistics.quantiles(v, n=4)[0],
                  "min_ns": min(v), "samples": len(v)} for name, v in ns.items()}
    out["base_over_this_median"] = out["base"]["median_ns"] / out["this"]["median_ns"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="checkout whose built kernel is the reference")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 32, 1024])
    ap.add_argument("--rounds", type=int, default=40, help="samples per kernel and size")
    ap.add_argument("--simd", choices=("scalar", "avx2", "avx512"), help="both kernels' path (default: theirs)")
    args = ap.parse_args(argv)
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {0})   # one core, as `bench kernel`
    cores = {"base": load_core(args.base.resolve()), "this": load_core(HERE.parent)}
    load0, stat0 = os.getloadavg(), bench.proc_stat()
    res = {"base": str(args.base.resolve()), "simd": args.simd, "kernel": {}}
    for n in args.sizes:
        res["kernel"][str(n)] = compare(cores, n, args.rounds, args.simd)
    stat1 = bench.proc_stat()
    res["loadavg_before"], res["loadavg_after"] = load0, os.getloadavg()
    res["steal_fraction"] = {"all_cpus": bench.steal_fraction(stat0, stat1, "cpu"),
                             "cpu0": bench.steal_fraction(stat0, stat1, "cpu0")}
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
