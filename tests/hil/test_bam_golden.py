"""Rollouts of bam's own simulator (tests/data/bam_rollouts/, how they were made: tests/data/README.md)
reproduced through the catalog to 1e-9 rad.

Every setup × trajectory × friction model m1–m6: the catalog actuator with bam's identified set,
the firmware law fed the setup's gain and supply, on bam's pendulum with the bam integrator.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from hil.kernel import Kernel
from hil.params import catalog
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "bam_rollouts" / "bam_reference_rollouts.json"
CATALOG_NAME = {"mx64": "mx64", "mx106": "mx106", "erob80_100": "erob80_100", "erob80_50": "erob80_50"}


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())


def cases():
    for setup in ("mx64", "mx64_kp32", "mx106", "erob80_100", "erob80_50"):
        for model in ("m1", "m2", "m3", "m4", "m5", "m6"):
            yield setup, model


@pytest.mark.parametrize(("setup", "model"), list(cases()))
def test_golden_rollouts(golden, setup, model):
    s = golden["setups"][setup]
    cfg = s["setup"]
    actuator = setup.split("_kp")[0]
    fw = {"kp": cfg["kp"]} | ({"supply_v": cfg["vin"]} if "vin" in cfg else {"damping": cfg["damping"]})
    spec = catalog.entry(CATALOG_NAME[actuator]).actuator(model, fw).bam_only()
    load = LoadConfig(mass=cfg["mass"], arm_mass=cfg["arm_mass"], length=cfg["length"])
    worst = 0.0
    for name, traj in s["trajectories"].items():
        k = Kernel(1, s["dt"])
        k.set_params(0, kernel_params(spec, load, EncoderConfig(), FaultConfig(), "bam"))
        out = k.run(np.array(traj["goal_position"]), np.array(traj["torque_enable"], dtype=float))
        ref = traj["models"][model]
        err_q = np.max(np.abs(out["theta"][:, 0] - ref["q"]))
        err_dq = np.max(np.abs(out["omega"][:, 0] - ref["dq"]))
        assert np.ptp(ref["q"]) > 0.1, f"{name}: the reference trajectory should move"
        assert err_q < 1e-9, f"{setup} {name} {model}: |q - q_bam| = {err_q:.3g} rad"
        assert err_dq < 1e-7, f"{setup} {name} {model}: |dq - dq_bam| = {err_dq:.3g} rad/s"
        worst = max(worst, err_q)
    assert worst < 1e-9


def test_golden_fails_with_a_wrong_model(golden):
    """The comparison above can fail: m1's parameters do not reproduce m6's rollout."""
    s = golden["setups"]["mx64"]
    spec = catalog.entry("mx64").actuator("m1", {"kp": 8, "supply_v": 15.0}).bam_only()
    traj = s["trajectories"]["sin_sin"]
    k = Kernel(1, s["dt"])
    load = LoadConfig(mass=s["setup"]["mass"], length=s["setup"]["length"])
    k.set_params(0, kernel_params(spec, load, EncoderConfig(), FaultConfig(), "bam"))
    out = k.run(np.array(traj["goal_position"]), np.array(traj["torque_enable"], dtype=float))
    assert np.max(np.abs(out["theta"][:, 0] - traj["models"]["m6"]["q"])) > 1e-3
