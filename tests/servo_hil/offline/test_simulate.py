"""`servo-hil simulate`: the CSV contract, every actuator source, and agreement with the kernel."""

import csv
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from hil.kernel import Kernel
from hil.params import catalog
from servo_hil.cli.main import app
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

RIG_INLINE = """
[actuator]
resistance = 2.0
kt = 0.05
armature = 1e-5
gear = 50
input = "position"
controller = [20, 0, 0.5]
thermal = [10, 2, 0, 0.0039, 25, 30]
[load]
inertia = 0.001
mass = 0.3
length = 0.1
[sim]
dt = 0.001
"""


def write_input(path, n, dt, u, extra=None):
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        cols = ["t", "u", *(extra or {})]
        w.writerow(cols)
        for k in range(n):
            w.writerow([repr(k * dt), repr(float(u[k]))] + [repr(float(v[k])) for v in (extra or {}).values()])


def read_output(path):
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    return rows


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_contract_inline_dcmotor(tmp_path):
    (tmp_path / "rig.toml").write_text(RIG_INLINE)
    n, dt = 1500, 0.001
    u = np.where(np.arange(n) > 100, 25.0, 0.0)  # position setpoint in gear·rad
    write_input(tmp_path / "in.csv", n, dt, u)
    res = invoke("simulate", tmp_path / "rig.toml", "--input", tmp_path / "in.csv", "--out", tmp_path / "out.csv")
    assert res.exit_code == 0, res.output
    rows = read_output(tmp_path / "out.csv")
    assert len(rows) == n
    for col in ("t", "u", "theta", "omega", "torque", "current", "temperature"):
        assert col in rows[0]
    assert float(rows[0]["theta"]) == 0.0 and float(rows[0]["temperature"]) == 30.0  # state before step 0 (Ta)
    assert [float(r["t"]) for r in rows[:3]] == [0.0, 0.001, 0.002]
    # row k is the state before step k: theta[k+1] - theta[k] = dt * omega[k+1] (semi-implicit Euler)
    th = np.array([float(r["theta"]) for r in rows])
    om = np.array([float(r["omega"]) for r in rows])
    np.testing.assert_allclose(np.diff(th), dt * om[1:], rtol=0, atol=1e-15)
    assert abs(th[-1] - 0.5) < 0.01  # settles at u/gear = 0.5 rad
    temp = np.array([float(r["temperature"]) for r in rows])
    assert temp[-1] > 30.0  # copper losses heat the winding

    # identical to driving the kernel directly with the same parameters
    from servo_hil.rig import load_offline_rig

    _, kernel, _ = load_offline_rig(tmp_path / "rig.toml")
    out = kernel.run(u)
    np.testing.assert_array_equal(out["theta"][:, 0], th)


def test_catalog_rig_with_model_and_empty_fields(tmp_path):
    (tmp_path / "rig.toml").write_text("""
[actuator]
catalog = "mx64"
model = "m6"
firmware = { kp = 8, supply_v = 15.0 }
[load]
mass = 0.567
length = 0.105
[sim]
dt = 0.005
integrator = "bam"
""")
    n = 400
    u = 0.5 * np.sin(np.arange(n) * 0.005 * 2.0)
    write_input(tmp_path / "in.csv", n, 0.005, u, {"enable": np.ones(n)})
    res = invoke("simulate", tmp_path / "rig.toml", "--input", tmp_path / "in.csv", "--out", tmp_path / "out.csv")
    assert res.exit_code == 0, res.output
    rows = read_output(tmp_path / "out.csv")
    assert all(r["temperature"] == "" for r in rows) or all(r["temperature"] != "" for r in rows)
    th = np.array([float(r["theta"]) for r in rows])
    # the same through the library path, bam's law with kp 8 at 15 V
    spec = catalog.entry("mx64").actuator("m6", {"kp": 8, "supply_v": 15.0})
    k = Kernel(1, 0.005)
    k.set_params(0, kernel_params(spec, LoadConfig(mass=0.567, length=0.105), EncoderConfig(), FaultConfig(), "bam"))
    ref = k.run(u)["theta"][:, 0]
    np.testing.assert_array_equal(th, ref)
    assert np.ptp(th) > 0.3  # it follows the sine


def test_integrator_override_changes_result(tmp_path):
    (tmp_path / "rig.toml").write_text(RIG_INLINE)
    n = 300
    write_input(tmp_path / "in.csv", n, 0.001, np.full(n, 25.0))
    outs = {}
    for integ in ("euler", "bam"):
        res = invoke("simulate", tmp_path / "rig.toml", "--input", tmp_path / "in.csv", "--out",
                     tmp_path / f"{integ}.csv", "--integrator", integ)
        assert res.exit_code == 0, res.output
        outs[integ] = np.array([float(r["theta"]) for r in read_output(tmp_path / f"{integ}.csv")])
    assert np.max(np.abs(outs["euler"] - outs["bam"])) > 1e-6


def test_mjcf_rig(tmp_path):
    (tmp_path / "motor.xml").write_text("""<mujoco><worldbody><body><joint name="j"/></body></worldbody>
<actuator><dcmotor name="m" joint="j" resistance="2" motorconst="0.05" gear="10" armature="1e-5"/></actuator>
</mujoco>""")
    (tmp_path / "rig.toml").write_text('[actuator]\nmjcf = "motor.xml"\nname = "m"\n[load]\ninertia = 0.01\n')
    n = 200
    write_input(tmp_path / "in.csv", n, 0.001, np.full(n, 6.0), {"external_torque": np.full(n, -0.1)})
    res = invoke("simulate", tmp_path / "rig.toml", "--input", tmp_path / "in.csv", "--out", tmp_path / "out.csv")
    assert res.exit_code == 0, res.output
    rows = read_output(tmp_path / "out.csv")
    # step 0 from rest: torque = g·K·V/R = 10·0.05·6/2 = 1.5 N·m, current V/R = 3 A
    assert math.isclose(float(rows[0]["torque"]), 1.5, rel_tol=1e-12)
    assert math.isclose(float(rows[0]["current"]), 3.0, rel_tol=1e-12)
    assert float(rows[0]["external_torque"]) == -0.1


@pytest.mark.parametrize("law", ["torque"])
def test_torque_law_has_no_current(tmp_path, law):
    (tmp_path / "rig.toml").write_text(f"""
[actuator]
resistance = 1.0
kt = 0.1
firmware = {{ law = "{law}" }}
[load]
inertia = 0.5
""")
    write_input(tmp_path / "in.csv", 10, 0.001, np.full(10, 2.0))
    res = invoke("simulate", tmp_path / "rig.toml", "--input", tmp_path / "in.csv", "--out", tmp_path / "out.csv")
    assert res.exit_code == 0, res.output
    rows = read_output(tmp_path / "out.csv")
    assert rows[0]["current"] == "" and float(rows[0]["torque"]) == 2.0
    assert math.isclose(float(rows[1]["omega"]), 2.0 / 0.5 * 0.001, rel_tol=1e-12)
