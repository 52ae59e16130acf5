"""Fixtures for the CANopen integration tests: `servo-hil run RIG` as a subprocess, the real python-canopen
2.4.1 / python-can 4.6.1 on its SLCAN pty.

* `write_can_rig(dir, name)`: a rig TOML in `dir` with two eRobs on bus "can" (protocol canopen, 1 Mbit/s, the
  pty link in `dir`): `erob100` (catalog erob80_100, bam's m6, 2 kg pendulum at 0.2 m) as node 2 and `erob50`
  (erob80_50, m6, 1 kg at 0.2 m) as node 3, as config/rigs/erob_demo.toml has them, without its Etherban
  server (tested elsewhere); ZeroMQ on free loopback ports, MQTT disabled.
* `CanLauncher.start(rig)`: `servo-hil run RIG`; ready once the daemon has printed
  `servo-hil: canopen bus 'can' at PATH (...)`. At teardown every daemon still running gets SIGTERM and must
  exit 0 within 3 s (else it is killed and the test fails) and have logged no traceback.
  The daemon runs in its own process on purpose: in one process with the client, python-can's byte-by-byte
  slcan reader shares the GIL with the 1 kHz drive thread, falls behind, and SDOs time out.
* `network`: `canopen.Network()` connected with `interface="slcan", channel=<pty>, bitrate=1000000,
  sleep_after_open=0`, as a controller connects; the client nodes are `canopen.BaseNode402(id, EDS)` built
  from the vendor EDS (config/erob/ZeroErr Driver_V1.5.eds), as a user builds them.

Expected values come from notes/erob.md (§1.2 identity and ratings, §3 CiA 301/402 facts, §4 ZeroErr's demo
sequence), CiA 301 / CiA 402 and the variant files config/erob/*.toml, never from the code under test.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import canopen
import pytest
from canopen.profiles.p402 import BaseNode402

from hil.daemon.zmq_io import request

ROOT = Path(__file__).resolve().parents[3]
_BIN = Path(sys.executable).parent / "servo-hil"
SERVO_HIL = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "hil.cli.main"]
EDS = ROOT / "config" / "erob" / "ZeroErr Driver_V1.5.eds"
BITRATE = 1_000_000                   # the eRob's only CAN bit rate (notes §1.1: the EDS lists BaudRate_1000 only)

# (joint, catalog, node id, load) — config/rigs/erob_demo.toml
ACTUATORS = (
    ("erob100", "erob80_100", 2, "{ mass = 2.0, length = 0.2 }"),
    ("erob50", "erob80_50", 3, "{ mass = 1.0, length = 0.2 }"),
)
NODE_IDS = tuple(a[2] for a in ACTUATORS)
JOINT = {a[2]: a[0] for a in ACTUATORS}
VARIANT = {a[2]: a[1] for a in ACTUATORS}
COUNTS_PER_REV = 524288               # 19-bit output encoder (notes §1.2)


def variant_config(node_id: int) -> dict:
    """config/erob/<variant>.toml of the node (the per-variant values the EDS leaves open)."""
    with (ROOT / "config" / "erob" / f"{VARIANT[node_id]}.toml").open("rb") as fh:
        return tomllib.load(fh)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------- rig files
@dataclass
class CanRig:
    path: Path
    port: str          # the pty link the daemon creates
    cmd: str           # ZeroMQ command endpoint
    pub: str


def write_can_rig(directory: Path, name: str) -> CanRig:
    pub = f"tcp://127.0.0.1:{free_port()}"
    cmd = f"tcp://127.0.0.1:{free_port()}"
    port = str(directory / f"tty-{name}")
    parts = [
        f'name = "{name}"\n',
        "[loop]\nrate_hz = 1000\nmlockall = false\nfifo_priority = 0\n",
        f'[zmq]\npub = "{pub}"\ncommand = "{cmd}"\n',
        "[mqtt]\nenabled = false\n",
        f'[[buses]]\nname = "can"\nprotocol = "canopen"\nport = "{port}"\nbaud = {BITRATE}\n',
    ]
    for joint, catalog, node_id, load in ACTUATORS:
        parts.append(f'\n[[actuators]]\njoint = "{joint}"\ncatalog = "{catalog}"\nmodel = "m6"\n'
                     f'load = {load}\nbus = "can"\nid = {node_id}\n')
    path = directory / f"{name}.toml"
    path.write_text("".join(parts))
    return CanRig(path, port, cmd, pub)


# ------------------------------------------------------------------------------------- the daemon
@dataclass
class CanDaemon:
    rig: CanRig
    proc: subprocess.Popen
    out_path: Path
    err_path: Path
    banner: str = ""

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def command(self, cmd: str, timeout_s: float = 10.0, **args) -> dict:
        return request(self.rig.cmd, {"cmd": cmd, **args}, timeout_s)

    def ok(self, cmd: str, **args) -> dict:
        reply = self.command(cmd, **args)
        assert reply.get("ok") is True, f"{cmd} {args} refused: {reply}"
        return reply

    def inject(self, node_id: int, fault: str, **args) -> None:
        self.ok("inject_fault", actuator=JOINT[node_id], fault=fault, args=args)

    def clear(self, node_id: int, fault: str) -> None:
        self.ok("clear_fault", actuator=JOINT[node_id], fault=fault)

    def terminate(self, timeout: float = 3.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5.0)


_BANNER = re.compile(r"servo-hil: canopen bus 'can' at (\S+) \((.*)\)")


class CanLauncher:
    """Starts `servo-hil run RIG` daemons; `finish()` SIGTERMs them and checks exit 0, no traceback."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.started: list[CanDaemon] = []

    def start(self, rig: CanRig, timeout: float = 20.0) -> CanDaemon:
        n = len(self.started) + 1
        out_path, err_path = self.dir / f"daemon{n}.stdout", self.dir / f"daemon{n}.stderr"
        with out_path.open("w") as out, err_path.open("w") as err:
            proc = subprocess.Popen([*SERVO_HIL, "run", str(rig.path)], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, cwd=self.dir, env=os.environ | {"PYTHONUNBUFFERED": "1"})
        d = CanDaemon(rig, proc, out_path, err_path)
        self.started.append(d)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = _BANNER.search(out_path.read_text(errors="replace"))
            if m:
                assert m.group(1) == rig.port, f"the bus is at {m.group(1)}, not at the rig's port {rig.port}"
                d.banner = m.group(0)
                return d
            if not d.alive:
                pytest.fail(f"the daemon exited with {proc.returncode} during start-up:\n{d.stderr()}")
            time.sleep(0.02)
        d.kill()
        pytest.fail(f"no bus line on stdout within {timeout} s:\n{out_path.read_text()}\n{d.stderr()}")

    def finish(self) -> None:
        problems = []
        for d in self.started:
            if d.alive:
                rc = d.terminate(3.0)
                if rc is None:
                    d.kill()
                    problems.append(f"{d.rig.path.name}: still running 3 s after SIGTERM (killed)\n"
                                    f"{d.stderr()[-3000:]}")
                elif rc != 0:
                    problems.append(f"{d.rig.path.name}: exit status {rc} after SIGTERM\n{d.stderr()[-3000:]}")
            if "Traceback" in d.stderr():
                problems.append(f"{d.rig.path.name}: a traceback in the daemon's log\n{d.stderr()[-3000:]}")
        self.started.clear()
        if problems:
            pytest.fail("\n".join(problems))


@pytest.fixture(scope="module")
def module_launcher(tmp_path_factory):
    launcher = CanLauncher(tmp_path_factory.mktemp("can"))
    yield launcher
    launcher.finish()


@pytest.fixture(scope="module")
def daemon(module_launcher) -> CanDaemon:
    """One daemon for the test module (tests put the nodes back with an NMT reset as they need)."""
    return module_launcher.start(write_can_rig(module_launcher.dir, "canopen"))


# ------------------------------------------------------------------------------------- the client side
def connect(network: canopen.Network, path: str, bitrate: int = BITRATE) -> canopen.Network:
    """What a controller does: python-can's slcan on the adapter, no 2 s wait after open."""
    network.connect(interface="slcan", channel=path, bitrate=bitrate, sleep_after_open=0)
    return network


@pytest.fixture(scope="module")
def network(daemon):
    net = connect(canopen.Network(), daemon.rig.port)
    yield net
    net.sync.stop()
    with contextlib.suppress(Exception):
        net.disconnect()


@pytest.fixture(scope="module")
def nodes(network) -> dict[int, BaseNode402]:
    """The two eRobs as python-canopen sees them: BaseNode402 from the vendor EDS."""
    out = {}
    for node_id in NODE_IDS:
        node = BaseNode402(node_id, str(EDS))
        network.add_node(node)
        out[node_id] = node
    return out


class FrameLog:
    """Every frame on the given COB-IDs the network receives: (can_id, data, timestamp [time.time()])."""

    def __init__(self, network: canopen.Network, *can_ids: int):
        self.network = network
        self.can_ids = can_ids
        self.frames: list[tuple[int, bytes, float]] = []
        self.lock = threading.Lock()
        for cid in can_ids:
            network.subscribe(cid, self._on)

    def _on(self, can_id: int, data, timestamp: float) -> None:
        with self.lock:
            self.frames.append((can_id, bytes(data), timestamp))

    def snapshot(self, can_id: int | None = None) -> list[tuple[int, bytes, float]]:
        with self.lock:
            return [f for f in self.frames if can_id is None or f[0] == can_id]

    def clear(self) -> None:
        with self.lock:
            self.frames.clear()

    def wait_for(self, can_id: int, n: int = 1, timeout: float = 1.0) -> list[tuple[int, bytes, float]]:
        """Waits until `n` frames with `can_id` were logged (or the timeout); returns them."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = self.snapshot(can_id)
            if len(got) >= n:
                return got
            time.sleep(0.002)
        return self.snapshot(can_id)

    def close(self) -> None:
        for cid in self.can_ids:
            with contextlib.suppress(ValueError, KeyError):
                self.network.unsubscribe(cid, self._on)


@pytest.fixture
def frames(network):
    """A `FrameLog` factory; the logs unsubscribe at teardown."""
    logs: list[FrameLog] = []

    def make(*can_ids: int) -> FrameLog:
        log = FrameLog(network, *can_ids)
        logs.append(log)
        return log

    yield make
    for log in logs:
        log.close()
