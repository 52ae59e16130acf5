"""MuJoCo's `implicitfast` integrator for dcmotor actuators, against MuJoCo 3.11.0 itself.

The Euler oracle's cases (test_kernel_mujoco.py), each MJCF text compiled with integrator="implicitfast":
MuJoCo solves (M − dt·∂f/∂ω)·q̈ = f (engine_forward.c `mj_implicitSkip`), ∂f/∂ω from the damping
polynomial and the dcmotor's back-EMF, controller, current state and LuGre terms (engine_derivative.c
`mjd_actuator_vel`, `mjd_passive_vel`). The kernel must follow it to 1e-9 rad, and each case must differ
from Euler by far more, so that the comparison cannot pass with the Euler step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mujoco")

from hil.kernel import INTEGRATORS
from servo_hil.rig import load_offline_rig
from tests.hil.mujoco_oracle import DT, import_motor, kernel_params, mjcf, run_kernel, run_mujoco
from tests.hil.test_kernel_mujoco import CASES, MATTERS_MIN, Q_TOL, Case


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_trajectory_matches_mujoco_implicitfast(case: Case, tmp_path: Path):
    xml = mjcf(case.attrs, case.load, "implicitfast")
    mc = import_motor(xml, tmp_path)
    ctrl = np.asarray(case.ctrl(np.arange(case.n) * DT), dtype=np.float64)
    mj = run_mujoco(xml, ctrl, case.q0)
    ours, _ = run_kernel(kernel_params(mc, case.load, "implicitfast"), ctrl, case.q0)
    assert np.all(np.isfinite(mj.q)) and np.ptp(mj.q) > case.min_ptp
    err = np.max(np.abs(ours["theta"] - mj.q))
    assert err < Q_TOL, f"max |Δq| = {err:.3e} rad"
    assert np.max(np.abs(ours["torque"] - mj.torque)) < 1e-9
    euler = run_mujoco(mjcf(case.attrs, case.load), ctrl, case.q0)
    apart = np.max(np.abs(euler.q - mj.q))
    assert apart > MATTERS_MIN, f"implicitfast is only {apart:.2e} rad from Euler here"
    ours_euler, _ = run_kernel(kernel_params(mc, case.load, "euler"), ctrl, case.q0)
    assert np.max(np.abs(ours_euler["theta"] - ours["theta"])) > MATTERS_MIN


def test_rig_key_selects_it(tmp_path: Path):
    rig = tmp_path / "rig.toml"
    rig.write_text('[actuator]\nresistance = 2.0\nkt = 0.05\n[load]\ninertia = 1e-4\n'
                   '[sim]\nintegrator = "implicitfast"\n')
    _, kernel, _ = load_offline_rig(rig)
    assert kernel.get_params(0)["integrator"] == INTEGRATORS["implicitfast"]
    rig.write_text(rig.read_text().replace("implicitfast", "rk4"))
    with pytest.raises(ValueError, match="integrator"):
        load_offline_rig(rig)
