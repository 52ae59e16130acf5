"""Bad input to `servo-hil simulate` and `servo-hil run` ends in one line naming the problem, exit status 2,
no output file.

Every case writes its files in tmp_path and runs the CLI in-process (typer's CliRunner keeps stderr
apart from stdout) or, for the daemon and the regressions of non-finite numbers, as a subprocess. A
pre-existing OUT.csv must survive a failed run untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hil.params import ConfigError, load_bam_params, load_dcmotor
from servo_hil.cli.main import app
from tests.daemon_process import assert_one_cli_line

GOOD_RIG = """\
[actuator]
resistance = 2.0
kt = 0.5
armature = 0.0001

[load]
inertia = 0.01

[sim]
dt = 0.001
"""

GOOD_IN = "t,u\n0.0,1.0\n0.001,1.0\n0.002,1.0\n"
SENTINEL = "previous results\n"


def simulate(tmp_path: Path, rig: str = GOOD_RIG, inputs: str = GOOD_IN, extra: tuple[str, ...] = ()):
    """Run `servo-hil simulate`; returns (exit code, stderr, stdout, OUT text or None)."""
    rig_path, in_path, out_path = tmp_path / "rig.toml", tmp_path / "in.csv", tmp_path / "out.csv"
    rig_path.write_text(rig)
    in_path.write_text(inputs)
    out_path.write_text(SENTINEL)
    res = CliRunner().invoke(app, ["simulate", str(rig_path), "--input", str(in_path), "--out", str(out_path),
                                   *extra])
    return res.exit_code, res.stderr, res.stdout, out_path.read_text()


def assert_one_line_error(tmp_path: Path, *needles: str, **kw) -> str:
    code, err, out, written = simulate(tmp_path, **kw)
    assert code == 2, (code, err, out)
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), f"expected one line on stderr, got {err!r}"
    line = lines[0]
    assert line.startswith("servo-hil: error: "), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    assert "Traceback" not in err
    assert written == SENTINEL, "OUT.csv was clobbered by a failed run"
    return line


def test_good_rig_runs(tmp_path):
    """The baseline every error case is derived from does succeed and overwrites OUT.csv."""
    code, err, _, written = simulate(tmp_path)
    assert code == 0 and err == ""
    assert written.startswith("t,u,")
    assert len(written.splitlines()) == 4


# -- rig TOML --------------------------------------------------------------------------------------------

def test_unknown_key(tmp_path):
    line = assert_one_line_error(tmp_path, "load.intertia", "unknown key",
                                 rig=GOOD_RIG.replace("inertia = 0.01", "intertia = 1"))
    assert "rig.toml" in line


@pytest.mark.parametrize(("section", "key"), [("sim", "dtt"), ("encoder", "count_per_rev"),
                                              ("faults", "open_circuit"), ("initial", "theta0"),
                                              ("actuator", "resistence")])
def test_unknown_key_other_sections(tmp_path, section, key):
    rig = GOOD_RIG.replace(f"[{section}]\n", f"[{section}]\n{key} = 1\n") if f"[{section}]" in GOOD_RIG \
        else GOOD_RIG + f"\n[{section}]\n{key} = 1\n"
    assert_one_line_error(tmp_path, f"{section}.{key}", "unknown key", rig=rig)


def test_unknown_section(tmp_path):
    assert_one_line_error(tmp_path, "motor", "unknown key", rig=GOOD_RIG + "\n[motor]\nresistance = 1\n")


def test_missing_motor_constant(tmp_path):
    assert_one_line_error(tmp_path, "kt", rig="[actuator]\nresistance = 2.0\n")


def test_missing_actuator_section(tmp_path):
    assert_one_line_error(tmp_path, "actuator", "required key is missing", rig="[load]\ninertia = 0.01\n")


def test_negative_resistance(tmp_path):
    assert_one_line_error(tmp_path, "actuator.resistance", "greater than 0",
                          rig=GOOD_RIG.replace("resistance = 2.0", "resistance = -2.0"))


@pytest.mark.parametrize(("old", "new", "key"), [
    ("inertia = 0.01", "inertia = -0.01", "load.inertia"),
    ("dt = 0.001", "dt = 0", "sim.dt"),
    ("dt = 0.001", 'dt = "fast"', "sim.dt"),
    ("armature = 0.0001", "armature = 0.0001\ngear = -3", "actuator.gear"),
    ("armature = 0.0001", "armature = 0.0001\nefficiency = 1.5", "actuator.efficiency"),
    ("armature = 0.0001", "armature = 0.0001\nthermal = [2.0, 1.0]\nthermal2 = [0.0, 10.0]", "actuator.thermal2"),
    ("armature = 0.0001", "armature = 0.0001\nthermal2 = [3.0, 10.0]", "thermal2 needs thermal"),
    ("armature = 0.0001", "armature = 0.0001\nflux_tempcoef = 0.01", "actuator.flux_tempcoef"),
    ("armature = 0.0001", "armature = 0.0001\niron_loss = -1.0", "actuator.iron_loss"),
    ("armature = 0.0001", "armature = 0.0001\nsaturation = [0.0, 2.0]\npeak = [1.0, 0.1]", "peak: the peak current"),
    ("armature = 0.0001", "armature = 0.0001\npeak = [4.0, 0.1]", "peak needs saturation"),
    ("armature = 0.0001", "armature = 0.0001\ncurrent_limiter = 3", "actuator.current_limiter"),
    ("armature = 0.0001", "armature = 0.0001\nbacklash = -0.001", "actuator.backlash"),
    ("armature = 0.0001", "backlash = 0.001", "backlash needs armature"),
    ("armature = 0.0001", "armature = 0.0001\ndwell_stiction = [0.3, 0.0]", "actuator.dwell_stiction"),
    ("dt = 0.001", 'dt = 0.001\nintegrator = "rk4"', "sim.integrator"),
])
def test_bad_values_name_the_key(tmp_path, old, new, key):
    assert_one_line_error(tmp_path, key, rig=GOOD_RIG.replace(old, new))


def test_bad_fault_fraction(tmp_path):
    assert_one_line_error(tmp_path, "faults.open_circuit_fraction",
                          rig=GOOD_RIG + "\n[faults]\nopen_circuit_fraction = 1.5\n")


def test_unknown_catalog_name_lists_known(tmp_path):
    line = assert_one_line_error(tmp_path, "'nosuch'", rig='[actuator]\ncatalog = "nosuch"\n')
    # the known names are listed (mx64 is in the committed catalog)
    assert "mx64" in line and "unknown actuator" in line


def test_bad_model(tmp_path):
    assert_one_line_error(tmp_path, "actuator.model", "'m1'",
                          rig='[actuator]\ncatalog = "mx64"\nmodel = "m9"\n')


def test_model_without_catalog(tmp_path):
    assert_one_line_error(tmp_path, "catalog", rig=GOOD_RIG.replace("[actuator]", '[actuator]\nmodel = "m1"'))


def test_two_actuator_sources(tmp_path):
    assert_one_line_error(tmp_path, "exactly one of catalog, mjcf or inline",
                          rig=GOOD_RIG.replace("[actuator]", '[actuator]\ncatalog = "mx64"'))


def test_bad_firmware_law(tmp_path):
    assert_one_line_error(tmp_path, "actuator.firmware", "supply_v",
                          rig=GOOD_RIG.replace("armature = 0.0001", 'armature = 0.0001\n'
                                               'firmware = { law = "dxl_pwm", kp = 32, error_gain = 0.1 }'))


def test_toml_syntax_error_names_file(tmp_path):
    line = assert_one_line_error(tmp_path, "rig.toml", rig="[actuator\nresistance = 2.0\n")
    assert "line 1" in line


def test_missing_rig_file(tmp_path):
    in_path, out_path = tmp_path / "in.csv", tmp_path / "out.csv"
    in_path.write_text(GOOD_IN)
    res = CliRunner().invoke(app, ["simulate", str(tmp_path / "nope.toml"), "--input", str(in_path),
                                   "--out", str(out_path)])
    assert res.exit_code == 2
    assert res.stderr.startswith("servo-hil: error: ") and "nope.toml" in res.stderr
    assert len(res.stderr.splitlines()) == 1
    assert not out_path.exists()


def test_mjcf_without_dcmotor_through_rig(tmp_path):
    (tmp_path / "m.xml").write_text("<mujoco><actuator><motor joint='j'/></actuator></mujoco>")
    assert_one_line_error(tmp_path, "m.xml", "0 <dcmotor>", rig='[actuator]\nmjcf = "m.xml"\n')


# -- IN.csv --------------------------------------------------------------------------------------------

def test_input_missing_column_u(tmp_path):
    assert_one_line_error(tmp_path, "in.csv", "'u'", inputs="t,x\n0.0,1.0\n")


def test_input_not_a_number_names_row_and_column(tmp_path):
    line = assert_one_line_error(tmp_path, "in.csv:3", "'u'", "abc",
                                 inputs="t,u\n0.0,1.0\n0.001,abc\n0.002,1.0\n")
    assert "not a number" in line


def test_input_empty_cell(tmp_path):
    assert_one_line_error(tmp_path, "in.csv:2", "'enable'",
                          inputs="t,u,enable\n0.0,1.0,\n")


def test_input_t_not_k_dt_names_row(tmp_path):
    line = assert_one_line_error(tmp_path, "in.csv:4", inputs="t,u\n0.0,1\n0.001,1\n0.003,1\n")
    assert "step 2" in line and "0.002" in line


def test_input_t_message_shows_plain_number(tmp_path):
    line = assert_one_line_error(tmp_path, "in.csv:4", inputs="t,u\n0.0,1\n0.001,1\n0.003,1\n")
    assert "t = 0.003 " in line and "np.float64" not in line


def test_input_unknown_column(tmp_path):
    assert_one_line_error(tmp_path, "'torque'", inputs="t,u,torque\n0.0,1.0,2.0\n")


def test_input_no_rows(tmp_path):
    assert_one_line_error(tmp_path, "in.csv", "no rows", inputs="t,u\n")


def test_input_header_with_spaces(tmp_path):
    code, err, _, written = simulate(tmp_path, inputs="t, u\n0.0, 1.0\n0.001, 1.0\n")
    assert code == 0, err
    assert len(written.splitlines()) == 3


def test_missing_input_file(tmp_path):
    rig_path, out_path = tmp_path / "rig.toml", tmp_path / "out.csv"
    rig_path.write_text(GOOD_RIG)
    res = CliRunner().invoke(app, ["simulate", str(rig_path), "--input", str(tmp_path / "nope.csv"),
                                   "--out", str(out_path)])
    assert res.exit_code == 2
    assert res.stderr.startswith("servo-hil: error: ") and "nope.csv" in res.stderr
    assert len(res.stderr.splitlines()) == 1
    assert not out_path.exists()


# -- command line ----------------------------------------------------------------------------------------

def test_good_integrator_override(tmp_path):
    code, err, _, written = simulate(tmp_path, extra=("--integrator", "bam"))
    assert code == 0, err
    assert written.startswith("t,u,")


def test_bad_integrator(tmp_path):
    assert_one_line_error(tmp_path, "integrator", "foo", extra=("--integrator", "foo"))


def test_bad_integrator_exit_code_and_no_output(tmp_path):
    """A bad --integrator: exit 2, OUT.csv untouched, the key and the known values are named."""
    code, err, _, written = simulate(tmp_path, extra=("--integrator", "foo"))
    assert code == 2
    assert "integrator" in err and "foo" in err and "euler" in err
    assert written == SENTINEL


def test_out_in_missing_directory(tmp_path):
    """A missing folder of OUT.csv is created (`--out tour/step.csv`); a path through a file is one line."""
    (tmp_path / "rig.toml").write_text(GOOD_RIG)
    (tmp_path / "in.csv").write_text(GOOD_IN)
    (tmp_path / "afile").write_text("x")

    def run(out):
        return subprocess.run([sys.executable, "-m", "servo_hil.cli.main", "simulate",
                               str(tmp_path / "rig.toml"), "--input", str(tmp_path / "in.csv"), "--out", str(out)],
                              capture_output=True, text=True, timeout=60)

    res = run(tmp_path / "nodir" / "out.csv")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "nodir" / "out.csv").read_text().startswith("t,u,")
    res = run(tmp_path / "afile" / "out.csv")
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith("servo-hil: error: ")
    assert "afile" in res.stderr


def test_real_entry_point_one_line(tmp_path):
    """The installed console script prints the same single line (no rich/traceback decoration)."""
    exe = Path(sys.executable).with_name("servo-hil")
    if not exe.exists():
        pytest.skip("servo-hil console script not installed next to the interpreter")
    (tmp_path / "rig.toml").write_text(GOOD_RIG.replace("inertia = 0.01", "intertia = 1"))
    (tmp_path / "in.csv").write_text(GOOD_IN)
    res = subprocess.run([str(exe), "simulate", str(tmp_path / "rig.toml"), "--input", str(tmp_path / "in.csv"),
                          "--out", str(tmp_path / "out.csv")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.splitlines() == [f"servo-hil: error: {tmp_path / 'rig.toml'}: load.intertia: unknown key"]
    assert not (tmp_path / "out.csv").exists()


# -- library loaders --------------------------------------------------------------------------------------

def test_bam_params_missing_kt(tmp_path):
    path = tmp_path / "m1.json"
    path.write_text(json.dumps({"model": "m1", "R": 2.0, "armature": 0.01, "friction_base": 0.1}))
    with pytest.raises(ConfigError) as exc:
        load_bam_params(path)
    msg = str(exc.value)
    assert "kt" in msg and "m1.json" in msg and "missing" in msg
    assert "\n" not in msg


def test_bam_params_unknown_key_and_bad_json(tmp_path):
    path = tmp_path / "m1.json"
    path.write_text(json.dumps({"model": "m1", "kt": 1.0, "armature": 0.01, "frction_base": 0.1}))
    with pytest.raises(ConfigError, match="frction_base: unknown key"):
        load_bam_params(path)
    path.write_text("{not json")
    with pytest.raises(ConfigError, match=r"m1\.json: not JSON"):
        load_bam_params(path)


@pytest.mark.parametrize("xml", ["<mujoco><actuator><motor joint='j'/></actuator></mujoco>",
                                 "<mujoco><worldbody/></mujoco>"])
def test_mjcf_without_dcmotor(tmp_path, xml):
    path = tmp_path / "model.xml"
    path.write_text(xml)
    with pytest.raises(ConfigError) as exc:
        load_dcmotor(path)
    msg = str(exc.value)
    assert "model.xml" in msg and "0 <dcmotor>" in msg


def test_mjcf_named_dcmotor_absent(tmp_path):
    path = tmp_path / "model.xml"
    path.write_text("<mujoco><actuator><dcmotor name='a' joint='j' resistance='1' motorconst='0.1'/>"
                    "</actuator></mujoco>")
    with pytest.raises(ConfigError, match="named 'b'"):
        load_dcmotor(path, "b")
    assert load_dcmotor(path, "a").resistance == 1.0


def test_mjcf_bad_number(tmp_path):
    path = tmp_path / "model.xml"
    path.write_text("<mujoco><actuator><dcmotor joint='j' resistance='1' motorconst='0.1 x'/></actuator></mujoco>")
    with pytest.raises(ConfigError, match=r"model\.xml"):
        load_dcmotor(path)


@pytest.mark.parametrize("motorconst", ["-0.1", "0.1 0.2 0.3"])
def test_mjcf_bad_motorconst(tmp_path, motorconst):
    """MuJoCo's motorconst becomes kt at the import: a negative value or a third one is refused by name."""
    path = tmp_path / "model.xml"
    path.write_text(f"<mujoco><actuator><dcmotor joint='j' resistance='1' motorconst='{motorconst}'/>"
                    "</actuator></mujoco>")
    with pytest.raises(ConfigError, match=r"model\.xml: <dcmotor>: motorconst needs one or two non-negative"):
        load_dcmotor(path)


def test_mjcf_motorconst_is_kt(tmp_path):
    """One value is kt as it is; a pair [Kt, Ke] is the one constant √(Kt·Ke) (MuJoCo DC motor model §3 Table 19)."""
    path = tmp_path / "model.xml"
    path.write_text("<mujoco><actuator><dcmotor name='a' joint='j' resistance='1' motorconst='0.04'/>"
                    "<dcmotor name='b' joint='j' resistance='1' motorconst='0.04 0.09'/></actuator></mujoco>")
    assert load_dcmotor(path, "a").kt == 0.04
    assert load_dcmotor(path, "b").kt == pytest.approx(0.06, rel=1e-15)


# -- non-finite numbers, Dynamixel registers and bus settings, through the installed CLI ---------------------

def run_cli(*args: str, env: dict | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """`servo-hil ARGS` as a subprocess (the console script, or `python -m servo_hil.cli.main` without it)."""
    exe = Path(sys.executable).with_name("servo-hil")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "servo_hil.cli.main"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize(("old", "new", "key"), [
    ("resistance = 2.0", "resistance = inf", "actuator.resistance"),
    ("kt = 0.5", "kt = nan", "actuator.kt"),
    ("inertia = 0.01", "inertia = inf", "load.inertia"),
    ("inertia = 0.01", "inertia = 0.01\ngravity = inf", "load.gravity"),
    ("dt = 0.001", "dt = nan", "sim.dt"),
    ("[sim]", "[initial]\ntheta = nan\n[sim]", "initial.theta"),
    ("[sim]", "[initial]\nomega = -inf\n[sim]", "initial.omega"),
    ("[sim]", "[faults]\nopen_circuit_time_s = inf\n[sim]", "faults.open_circuit_time_s"),
    ("[sim]", "[encoder]\nencoder_noise = nan\n[sim]", "encoder.encoder_noise"),
])
def test_simulate_refuses_nan_and_inf_naming_the_key(tmp_path, old, new, key):
    """Regression: nan and ±inf in a rig were accepted silently (an infinite resistance, a NaN start angle)."""
    assert old in GOOD_RIG
    (tmp_path / "rig.toml").write_text(GOOD_RIG.replace(old, new, 1))
    (tmp_path / "in.csv").write_text(GOOD_IN)
    res = run_cli("simulate", str(tmp_path / "rig.toml"), "--input", str(tmp_path / "in.csv"),
                  "--out", str(tmp_path / "out.csv"))
    assert_one_cli_line(res, f"rig.toml: {key}: ", "finite")
    assert not (tmp_path / "out.csv").exists()


def test_a_catalog_entry_with_inf_is_refused_naming_the_key(tmp_path):
    """The catalog schema too: `config/actuators/*.toml` with an infinite quantity names the file and key."""
    root = Path(__file__).resolve().parents[2]
    config = tmp_path / "config"
    shutil.copytree(root / "config", config)
    entry = config / "actuators" / "mx64.toml"
    text = entry.read_text()
    assert "voltage_v = 12.0" in text
    entry.write_text(text.replace("voltage_v = 12.0", "voltage_v = inf", 1))
    (tmp_path / "rig.toml").write_text('[actuator]\ncatalog = "mx64"\n')
    (tmp_path / "in.csv").write_text(GOOD_IN)
    res = run_cli("simulate", str(tmp_path / "rig.toml"), "--input", str(tmp_path / "in.csv"),
                  "--out", str(tmp_path / "out.csv"), env={**os.environ, "SERVO_HIL_CONFIG": str(config)})
    assert_one_cli_line(res, "mx64.toml", "datasheet.voltage_v", "finite")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dynamixel_rig(tmp_path: Path, second: str = "", bus: str = "") -> Path:
    """A two-servo Dynamixel rig (IDs 1 and 2) on a pty in tmp_path, no MQTT; `second` / `bus` add keys to the
    second actuator / the bus."""
    path = tmp_path / "dxl.toml"
    path.write_text(f"""name = "dxl"
[loop]
mlockall = false
fifo_priority = 0
[zmq]
pub = "tcp://127.0.0.1:{_free_port()}"
command = "tcp://127.0.0.1:{_free_port()}"
[mqtt]
enabled = false
[[buses]]
name = "dxl"
protocol = "dynamixel"
port = "{tmp_path / 'ttyDXL'}"
{bus}
[[actuators]]
joint = "a"
catalog = "mx64"
bus = "dxl"
id = 1
[[actuators]]
joint = "b"
catalog = "mx64"
bus = "dxl"
id = 2
{second}
""")
    return path


@pytest.mark.parametrize(("second", "bus", "needles"), [
    ("initial = { theta = nan }", "", ("actuators.1.initial.theta", "finite")),
    ("load = { inertia = inf }", "", ("actuators.1.load.inertia", "finite")),
    ('registers = { "Baud Rate" = 99 }', "", ("actuators[1] (b)", "registers.Baud Rate", "baud")),
    ('registers = { "ID" = 1 }', "", ("actuators[1] (b)", "registers.ID", "id = ")),
    ('registers = { "Operating Mode" = 2 }', "", ("registers.Operating Mode", "not one of")),
    ('registers = { "Present Position" = 5 }', "", ("registers.Present Position", "read-only")),
    ("", "baud = 12345", ("buses (dxl)", "baud 12345")),
])
def test_dynamixel_rig_errors_are_one_line(tmp_path, second, bus, needles):
    """Regression: on a Dynamixel bus `initial.theta = nan` and `registers = {"Baud Rate" = 99}` ended in
    tracebacks, `registers = {"ID" = 1}` on the servo with id = 2 bypassed the duplicate-ID check, and a bad bus
    setting printed `INFO stopped` before its error: each is now the one line on stderr, exit 2."""
    res = run_cli("run", str(dynamixel_rig(tmp_path, second, bus)), timeout=30.0)
    line = assert_one_cli_line(res, *needles)
    assert "dxl.toml" in line or "buses" in line or "actuators[" in line
    assert not (tmp_path / "ttyDXL").exists()


@pytest.mark.parametrize(("key", "value"), [("pub", "nonsense"), ("command", "localhost:9873"),
                                            ("pub", "tcp://127.0.0.1"), ("command", "udp://127.0.0.1:9873")])
def test_zmq_endpoint_is_checked_as_an_endpoint_first(tmp_path, key, value):
    """Regression: `pub = "nonsense"` was reported as reachable from other machines; it is not an endpoint."""
    rig = dynamixel_rig(tmp_path).read_text()
    rig = "\n".join(f'{key} = "{value}"' if line.startswith(f"{key} = ") else line for line in rig.splitlines())
    (tmp_path / "dxl.toml").write_text(rig)
    res = run_cli("run", str(tmp_path / "dxl.toml"), timeout=30.0)
    line = assert_one_cli_line(res, f"zmq.{key}", f"{value!r} is not a ZeroMQ endpoint", "tcp://HOST:PORT")
    assert "reachable" not in line
