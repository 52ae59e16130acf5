"""Fixtures: free loopback ports, a real MQTT broker, rig files and the daemon as a subprocess.

* `mqtt_broker` (session): `mosquitto -p PORT` when the binary exists (CI installs Debian's
  mosquitto), else an amqtt `Broker` in its own thread and event loop. SERVO_HIL_TEST_BROKER=amqtt
  (or =mosquitto) forces one of them.
* `make_rig(...)`: writes a daemon rig TOML into tmp_path with ZeroMQ endpoints on free ports.
* `start_daemon(rig)`: `servo-hil run RIG` as a subprocess, ready once the REP socket answers
  `status`. At teardown every daemon still running gets SIGTERM and must exit 0 within 2 s
  (otherwise it is killed with SIGKILL and the test fails).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import pytest
import zmq

from bench.host import stop_process
from tests.daemon_process import SERVO_HIL, STOP_TIMEOUT_S, ProcessControl, daemon_env, hang_report

from . import MqttClient, Stream, free_port, ok, wait_port

# Actuators of the test rigs ([[actuators]] bodies). `arm`: inline MuJoCo dcmotor with the dcmotor
# position law (goal in gear·rad = 50 × output rad) lifting a pendulum; `mx`: catalog Dynamixel MX-64
# with bam's m6 friction, thermal model and 80 °C temperature limit (goal in output rad); `erob`:
# catalog eRob80:100 (current-controlled PD law).
ACTUATORS = {
    "arm": """joint = "arm"
resistance = 2.0
kt = 0.05
armature = 1e-5
gear = 50
damping = [1e-4]
input = "position"
controller = [20, 0, 0.5]
load = { inertia = 0.001, mass = 0.3, length = 0.1 }
""",
    "mx": """joint = "mx"
catalog = "mx64"
model = "m6"
load = { mass = 0.5, length = 0.1 }
""",
    "erob": """joint = "erob"
catalog = "erob80_100"
model = "m6"
load = { mass = 2.0, length = 0.105, arm_mass = 1.0 }
""",
}
ARM_GEAR = 50.0


@dataclass
class RigFile:
    path: Path
    name: str
    pub: str
    cmd: str
    mqtt_port: int | None
    joints: list[str]


@dataclass
class Broker:
    kind: str
    port: int
    stop: object = None


@dataclass
class DaemonProcess(ProcessControl):
    rig: RigFile
    proc: subprocess.Popen
    err_path: Path
    strict: bool = True
    sigterm_rc: list[int | None] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- broker
_AMQTT_MAIN = """
import asyncio, sys
from amqtt.broker import Broker

async def main(port):
    broker = Broker({"listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{port}"}},
                     "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}}})
    await broker.start()
    await asyncio.Event().wait()

asyncio.run(main(int(sys.argv[1])))
"""


def _start_mosquitto(port: int, log: Path, kind: str = "mosquitto") -> Broker:
    """A broker subprocess: `mosquitto -p PORT`, or amqtt in a Python subprocess (kind="amqtt")."""
    fh = log.open("w")
    argv = ([shutil.which("mosquitto"), "-p", str(port)] if kind == "mosquitto"
            else [sys.executable, "-c", _AMQTT_MAIN, str(port)])
    proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT)
    wait_port(port, 10.0, alive=lambda: proc.poll() is None)
    if kind == "amqtt":  # its port opens before it can serve: a client connecting then is reset
        MqttClient(port, []).close()

    def stop() -> None:
        stop_process(proc, 3.0)
        fh.close()

    return Broker(kind, port, stop)


def _start_amqtt(port: int) -> Broker:
    from amqtt.broker import Broker as AmqttBroker

    state: dict = {}
    started = threading.Event()

    async def main() -> None:
        state["loop"] = asyncio.get_running_loop()
        state["stop"] = asyncio.Event()
        broker = AmqttBroker({
            "listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{port}"}},
            "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
        })
        try:
            await broker.start()
        finally:
            started.set()
        await state["stop"].wait()
        await broker.shutdown()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            state["error"] = exc
            started.set()

    thread = threading.Thread(target=run, name="test-amqtt-broker", daemon=True)
    thread.start()
    started.wait(10.0)
    if "error" in state:
        raise state["error"]
    wait_port(port, 10.0, alive=thread.is_alive)

    def stop() -> None:
        if thread.is_alive():
            state["loop"].call_soon_threadsafe(state["stop"].set)
            thread.join(5.0)

    return Broker("amqtt", port, stop)


def start_broker(port: int, log_dir: Path, in_process: bool = True, kind: str = "") -> Broker:
    """mosquitto when installed (or SERVO_HIL_TEST_BROKER=mosquitto), else amqtt: in-process, or in a
    subprocess when `in_process` is false (outage tests: stopping it must close every connection);
    `kind` ("mosquitto", "amqtt") overrides both."""
    choice = kind or os.environ.get("SERVO_HIL_TEST_BROKER", "")
    log = log_dir / f"broker-{port}-{time.monotonic_ns()}.log"
    if choice == "mosquitto" or (choice != "amqtt" and shutil.which("mosquitto")):
        return _start_mosquitto(port, log)
    return _start_amqtt(port) if in_process else _start_mosquitto(port, log, kind="amqtt")


@pytest.fixture(scope="session")
def mqtt_broker(tmp_path_factory) -> Broker:
    """A real MQTT broker on a free loopback port for the whole session."""
    broker = start_broker(free_port(), tmp_path_factory.mktemp("broker"))
    yield broker
    broker.stop()


@pytest.fixture
def private_broker(tmp_path):
    """private_broker(port) starts a broker subprocess of this test only (stop() it for an outage)."""
    running: list[Broker] = []

    def start(port: int) -> Broker:
        b = start_broker(port, tmp_path, in_process=False)
        running.append(b)
        return b

    yield start
    for b in running:
        b.stop()


# ---------------------------------------------------------------------------------------------- rigs
def _rig_name(node_name: str) -> str:
    return (re.sub(r"[^A-Za-z0-9_.-]+", "-", node_name).strip("-") or "rig")[:48]


def write_rig(path: Path, name: str, joints=("arm", "mx"), mqtt_port: int | None = None, lockstep: bool = False,
              status_period_s: float = 1.0, loop_extra: str = "", extra: str = "",
              actuator_extra: dict[str, str] | None = None, pub_port: int | None = None,
              cmd_port: int | None = None) -> RigFile:
    """A daemon rig TOML at `path`: ZeroMQ on free loopback ports, MQTT on `mqtt_port` (None: disabled)."""
    pub = f"tcp://127.0.0.1:{pub_port or free_port()}"
    cmd = f"tcp://127.0.0.1:{cmd_port or free_port()}"
    mqtt = (f'url = "mqtt://127.0.0.1:{mqtt_port}"\nstatus_period_s = {status_period_s}\n' if mqtt_port
            else "enabled = false\n")
    parts = [f'name = "{name}"\n', f"[loop]\nrate_hz = 1000\nmlockall = false\nlockstep = {str(lockstep).lower()}\n"
             f"{loop_extra}\n", f'[zmq]\npub = "{pub}"\ncommand = "{cmd}"\n', f"[mqtt]\n{mqtt}", extra]
    for j in joints:
        parts.append("\n[[actuators]]\n" + ACTUATORS[j] + (actuator_extra or {}).get(j, ""))
    path.write_text("".join(parts))
    return RigFile(path, name, pub, cmd, mqtt_port, list(joints))


@pytest.fixture
def make_rig(tmp_path, request):
    """make_rig(joints=("arm", "mx"), mqtt_port=None, lockstep=False, ...) → RigFile in tmp_path."""
    count = 0

    def make(name: str | None = None, **kw) -> RigFile:
        nonlocal count
        count += 1
        return write_rig(tmp_path / f"rig{count}.toml", name or f"{_rig_name(request.node.name)}-{count}", **kw)

    return make


def wait_ready(d: DaemonProcess, timeout: float = 20.0) -> None:
    """Until the daemon answers `status` on its command socket (or fail with its stderr).

    One REQ socket that reconnects every 10 ms: the request is delivered as soon as the daemon binds.
    """
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RECONNECT_IVL, 10)
    try:
        sock.connect(d.rig.cmd)
        sock.send(msgpack.packb({"cmd": "status"}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sock.poll(50):
                reply = msgpack.unpackb(sock.recv(), raw=False)
                if reply.get("ok"):
                    return
                pytest.fail(f"`status` refused during start-up: {reply}")
            if not d.alive:
                pytest.fail(f"the daemon exited with {d.proc.returncode} during start-up:\n{d.stderr()}")
    finally:
        sock.close()
    d.kill()
    pytest.fail(f"the daemon did not answer `status` within {timeout} s:\n{d.stderr()}")


class Launcher:
    """Starts daemons as subprocesses; `finish()` SIGTERMs those still running and checks exit 0 (within
    `STOP_TIMEOUT_S`)."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.started: list[DaemonProcess] = []

    def start(self, rig: RigFile, *args: str, strict: bool = True, no_mqtt_flag: bool = True) -> DaemonProcess:
        err_path = self.dir / f"daemon{len(self.started) + 1}.stderr"
        if rig.mqtt_port is None and no_mqtt_flag and "--mqtt" not in args:
            # explicit, so a regression of `[mqtt] enabled = false` fails one test, not every one
            args = ("--no-mqtt", *args)
        with err_path.open("w") as err:
            proc = subprocess.Popen([*SERVO_HIL, "run", str(rig.path), *args], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err, cwd=self.dir,
                                    env=daemon_env())
        d = DaemonProcess(rig, proc, err_path, strict)
        self.started.append(d)
        wait_ready(d)
        return d

    def finish(self) -> None:
        problems = []
        for d in self.started:
            if not d.alive:
                continue
            rc = d.terminate()
            if rc is None:
                hang_report(d.proc)
                if d.strict:
                    problems.append(f"{d.rig.name}: still running {STOP_TIMEOUT_S:g} s after SIGTERM (aborted)\n"
                                    f"{d.stderr()[-6000:]}")
            elif rc != 0 and d.strict:
                problems.append(f"{d.rig.name}: exit status {rc} after SIGTERM\n{d.stderr()[-3000:]}")
        if problems:
            pytest.fail("\n".join(problems))


@pytest.fixture
def start_daemon(tmp_path):
    """start_daemon(rig, *args, strict=True, no_mqtt_flag=True) → a ready DaemonProcess.

    At teardown: SIGTERM ⇒ exit 0 within 2 s (strict daemons), else SIGKILL and the test fails.
    """
    launcher = Launcher(tmp_path)
    yield launcher.start
    launcher.finish()


@pytest.fixture
def daemon(make_rig, start_daemon) -> DaemonProcess:
    """The default two-actuator rig (arm, mx) running without MQTT."""
    return start_daemon(make_rig())


@pytest.fixture(scope="module")
def module_launcher(tmp_path_factory):
    launcher = Launcher(tmp_path_factory.mktemp("daemons"))
    yield launcher
    launcher.finish()


@pytest.fixture(scope="module")
def shared_daemon(module_launcher, request) -> DaemonProcess:
    """One (arm, mx) daemon without MQTT for a whole module: for tests that leave no state behind."""
    name = _rig_name(request.module.__name__.rsplit(".", 1)[-1]) + "-shared"
    return module_launcher.start(write_rig(module_launcher.dir / "shared.toml", name))


@pytest.fixture(scope="module")
def shared_mqtt_daemon(module_launcher, mqtt_broker, request) -> DaemonProcess:
    """One (arm, mx) daemon with MQTT (status every 0.5 s) for a whole module."""
    name = _rig_name(request.module.__name__.rsplit(".", 1)[-1]) + "-shared-mqtt"
    return module_launcher.start(write_rig(module_launcher.dir / "shared-mqtt.toml", name,
                                           mqtt_port=mqtt_broker.port, status_period_s=0.5))


@pytest.fixture
def stream(daemon: DaemonProcess):
    """Resume and `reset` the module's `daemon` (a module shares one by overriding `daemon` with
    `shared_daemon`), then a subscriber that has seen every joint back at rest at its initial state
    (θ = ω = goal = 0, no fault, enabled, no external torque)."""
    d = daemon
    ok(d.rig.cmd, "resume")
    ok(d.rig.cmd, "reset")
    with Stream(d.rig.pub) as stream:
        stream.first()
        for joint in d.rig.joints:
            stream.wait_for(joint, lambda p: p["position"] == 0.0 and p["velocity"] == 0.0 and p["goal"] == 0.0
                            and p["fault_flags"] == 0 and p["enable"] == 1.0 and p["external_torque"] == 0.0,
                            2.0, "the initial state after reset")
        yield stream
