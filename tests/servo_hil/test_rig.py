"""One rig schema (servo_hil/rig.py): a rig spelled with one `[actuator]` is the rig of one `[[actuators]]` entry, and
each loader (`simulate`'s, the daemon's) reads both spellings. Expected kernels are the ones the other spelling
builds, and the daemon is a real `servo-hil run` subprocess."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from hil.params.config_file import ConfigError
from servo_hil.daemon.zmq_io import request
from servo_hil.rig import SINGLE_JOINT, load_offline_rig, load_rig, load_robot_rig, read_rig
from tests.daemon_process import SERVO_HIL

ROOT = Path(__file__).resolve().parents[2]

OFFLINE = """\
[actuator]
catalog = "mx64"
model = "m6"
[load]
mass = 0.5
length = 0.1
[initial]
theta = 0.3
[sim]
dt = 0.002
integrator = "bam"
"""

# the same actuator spelled as a daemon rig of one [[actuators]] entry
DAEMON = """\
[sim]
dt = 0.002
integrator = "bam"
[[actuators]]
joint = "pendulum"
catalog = "mx64"
model = "m6"
load = { mass = 0.5, length = 0.1 }
initial = { theta = 0.3 }
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("rig", sorted((ROOT / "config/rigs").glob("*.toml")), ids=lambda p: p.name)
def test_the_committed_rigs_load(rig):
    r = read_rig(rig)
    assert r.actuators and all(a.joint for a in r.actuators)
    if r.robot is not None:   # its actuators turn the hinges of its MJCF
        _, specs, robot = load_robot_rig(rig)
        assert robot.joints == [a.joint for a in r.actuators] == [robot.model.joint(j).name for j in robot.joints]
        return
    _, specs, kernel = load_rig(rig)
    assert len(specs) == kernel.n == len(r.actuators)


def test_an_offline_rig_is_a_rig_of_one_actuator_without_buses(tmp_path):
    rig = read_rig(write(tmp_path, "offline.toml", OFFLINE))
    assert [a.joint for a in rig.actuators] == [SINGLE_JOINT] and rig.buses == []
    a = rig.actuators[0]
    assert (a.catalog, a.model, a.load.mass, a.load.length, a.initial.theta) == ("mx64", "m6", 0.5, 0.1, 0.3)
    assert (rig.offline.dt, rig.offline.integrator) == (0.002, "bam")
    # the daemon runs it at its loop's step, simulate at [sim]'s
    _, _, daemon_kernel = load_rig(tmp_path / "offline.toml")
    _, offline_kernel, _ = load_offline_rig(tmp_path / "offline.toml")
    assert (daemon_kernel.dt, offline_kernel.dt) == (0.001, 0.002)


def test_both_spellings_simulate_bit_identically(tmp_path):
    _, k1, spec1 = load_offline_rig(write(tmp_path, "offline.toml", OFFLINE))
    _, k2, spec2 = load_offline_rig(write(tmp_path, "daemon.toml", DAEMON))
    assert spec1 == spec2
    np.testing.assert_equal(k1.get_params(0), k2.get_params(0))       # NaN (no supply override) equals NaN
    u = 0.4 * np.sin(np.arange(300) * 0.002 * 3.0)
    r1, r2 = k1.run(u), k2.run(u)
    for key in ("theta", "omega", "torque", "current"):
        np.testing.assert_array_equal(r1[key], r2[key])
    assert r1["theta"][0, 0] == pytest.approx(0.3, abs=0.01)


def test_without_sim_the_offline_step_is_the_loops(tmp_path):
    text = DAEMON.replace('[sim]\ndt = 0.002\nintegrator = "bam"\n', "[loop]\nrate_hz = 500\nsubsteps = 4\n")
    _, kernel, _ = load_offline_rig(write(tmp_path, "rig.toml", text))
    assert kernel.dt == pytest.approx(1.0 / 2000.0)


@pytest.mark.parametrize(("text", "needles"), [
    (OFFLINE + '[[actuators]]\njoint = "b"\ncatalog = "mx64"\n', ("actuator", "not both")),
    (DAEMON + '[[actuators]]\njoint = "b"\ncatalog = "mx64"\n', ("simulate runs one actuator", "has 2")),
    (OFFLINE.replace("mass = 0.5", "mass = nan"), ("load.mass", "finite")),
    (DAEMON.replace("mass = 0.5", "mass = inf"), ("actuators.0.load.mass", "finite")),
])
def test_a_bad_rig_is_one_error_naming_the_key(tmp_path, text, needles):
    path = write(tmp_path, "rig.toml", text)
    with pytest.raises(ConfigError) as exc:
        load_offline_rig(path)
    message = str(exc.value)
    assert "\n" not in message and str(path) in message
    for needle in needles:
        assert needle in message, message


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_servo_hil_run_serves_an_offline_rig(tmp_path):
    """`servo-hil run` on a rig spelled for `simulate` (plus its sockets): one actuator named "actuator"."""
    command = f"tcp://127.0.0.1:{_free_port()}"
    path = write(tmp_path, "offline.toml", OFFLINE + f"""[loop]
mlockall = false
fifo_priority = 0
[zmq]
pub = "tcp://127.0.0.1:{_free_port()}"
command = "{command}"
[mqtt]
enabled = false
""")
    err = tmp_path / "stderr"
    with err.open("w") as fe:
        proc = subprocess.Popen([*SERVO_HIL, "run", str(path)], stdout=subprocess.DEVNULL, stderr=fe, cwd=ROOT)
    try:
        deadline = time.monotonic() + 20.0
        while "commands: ZeroMQ REP" not in err.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, err.read_text()
            time.sleep(0.05)
        reply = request(command, {"cmd": "state"}, 5.0)
        assert reply.get("ok") is True, reply
        assert list(reply["state"]) == [SINGLE_JOINT]
        assert abs(reply["state"][SINGLE_JOINT]["position"]) <= 0.3 + 1e-9    # released at 0.3 rad: swings within it
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(15.0)
    assert rc == 0, err.read_text()
    assert "Traceback" not in err.read_text()


CATALOG_PLUS = """name = "t"
[[actuators]]
joint = "j"
catalog = "mx64"
model = "m6"
load = { mass = 0.5, length = 0.1 }
"""


def test_a_catalog_actuator_takes_the_rigs_motor_attributes(tmp_path):
    """`peak`, `thermal2`, `saturation` beside `catalog =` complete the entry's motor (checked with it), as
    inline attributes would; the catalog's own keys stay."""
    _, _, plain = load_rig(write(tmp_path, "plain.toml", CATALOG_PLUS))
    _, _, kernel = load_rig(write(tmp_path, "plus.toml", CATALOG_PLUS + (
        "peak = [3.0, 0.5]\nthermal2 = [2.0, 40.0]\nsaturation = [0, 1.5, 0]\n")))
    base, p = plain.get_params(0), kernel.get_params(0)
    assert base["peak_current"] == 0.0 and base["thermal_r2"] == 0.0
    assert p["peak_current"] == 3.0 and p["peak_time"] == 0.5
    assert p["thermal_r2"] == 2.0 and p["thermal_c2"] == 40.0
    assert p["resistance"] == base["resistance"] and p["gear"] == base["gear"]      # the entry's own motor


@pytest.mark.parametrize("extra, needle", [
    ("peak = [1.0, 0.5]\nsaturation = [0, 1.5, 0]\n",
     "actuators[0] (j): catalog mx64: peak: the peak current must exceed saturation's imax"),
    ("resistance = 2.0\n", "exactly one of catalog, mjcf or inline <dcmotor> attributes (found catalog, inline"),
])
def test_a_catalog_actuators_bad_attributes_are_one_line(tmp_path, extra, needle):
    out = subprocess.run([*SERVO_HIL, "run", str(write(tmp_path, "rig.toml", CATALOG_PLUS + extra))],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and needle in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
