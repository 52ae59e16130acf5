"""`servo-hil bench kernel --quick --no-bam`: the JSON it prints has the documented structure and sane values.

No timing target is asserted (a shared 2-CPU host decides those). What is asserted is what the numbers
rest on: the MuJoCo peer is the same physics (to round-off), every run left the actuators finite, the
rates are positive and ordered within their own summaries, the targets are computed from the ratios
printed next to them, and the contention probe alternated as many pairs as it reports. The hypervisor
steal is printed (pytest -s) and named in every failure message.
"""

from __future__ import annotations

import json
import subprocess

from tests.daemon_process import SERVO_HIL


def _summary_ok(s: dict, n: int) -> bool:
    return 0 < s["min"] <= s["median"] <= s["max"] and s["n_samples"] == n == len(s["samples"])


def test_bench_kernel_quick():
    proc = subprocess.run([*SERVO_HIL, "bench", "kernel", "--quick", "--no-bam"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    steal = doc["machine"]["steal_fraction"]["all_cpus"]
    note = (f"steal {100 * steal:.2f} %, N=1024 {doc['ratios']['kernel_n1024_msteps_per_s']:.2f} M/s, "
            f"probe correlation {doc['contention_probe']['correlation']}")
    print(f"\nservo-hil bench kernel --quick: {note}")

    assert doc["config"]["quick"] is True and doc["config"]["repeats"] == 5, note
    assert doc["mujoco_equivalence"]["max_abs_dtheta_rad"] <= 1e-9, note
    for n in ("1", "32", "1024"):
        r = doc["kernel"][n]
        assert _summary_ok(r, 5) and r["health"]["finite"] and not r["health"]["open_circuit_fired"], (n, note)
        assert all(r["health"]["exercised"].values()), (n, r["health"]["exercised"], note)
    assert doc["bam_step"] == {"available": False, "reason": "--no-bam"}, note

    rt, tg = doc["ratios"], doc["targets"]
    assert rt["kernel_n1024_msteps_per_s"] == doc["kernel"]["1024"]["median"] / 1e6, note
    assert rt["kernel_n1_vs_mj_step"] == doc["kernel"]["1"]["median"] / doc["mujoco_mj_step"]["median"], note
    assert tg["n1024_ge_20M"] == (rt["kernel_n1024_msteps_per_s"] >= 20.0), note
    assert tg["ge_10x_mj_step"] == (rt["kernel_n1_vs_mj_step"] >= 10.0) and tg["ge_100x_bam"] is None, note

    probe = doc["contention_probe"]
    assert probe["pairs"] == 4 and _summary_ok(probe["kernel"], 4) and _summary_ok(probe["mj_step"], 4), note
    assert -1.0 <= probe["correlation"] <= 1.0, note
    ratios = [k / p for k, p in zip(probe["kernel"]["samples"], probe["mj_step"]["samples"], strict=True)]
    assert probe["kernel_over_mj_step"]["samples"] == ratios, note
    fast = probe["kernel_when_probe_fast"]
    assert 1 <= fast["pairs"] <= 4 and probe["kernel"]["min"] <= fast["median"] <= probe["kernel"]["max"], note
    assert 0.0 <= steal <= 1.0, note
