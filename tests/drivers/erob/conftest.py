"""Fixtures for the CANopen integration tests: `servo-hil run RIG` as a subprocess and the real python-canopen 2.4.1 /
python-can 4.6.1 on its SLCAN pty. Expected values come from ZeroErr's EDS V1.5 ([DeviceInfo], object defaults),
CiA 301 / CiA 402-2, ZeroErr's eRobControl_PP.py demo sequence (ZeroErrControl/eRob_CANopen_Python) and the variant
files config/erob/*.toml, never from the code under test."""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import canopen
import pytest
from canopen.profiles.p402 import BaseNode402

from tests.daemon_process import SERVO_HIL, BusDaemon, BusLauncher
from tests.servo_hil.daemon import free_port

ROOT = Path(__file__).resolve().parents[3]
BITRATE = 1_000_000                   # the eRob's only CAN bit rate (ZeroErr's EDS lists BaudRate_1000 only)

# (joint, catalog, node id, load) — config/rigs/erob_demo.toml
ACTUATORS = (
    ("erob100", "erob80_100", 2, "{ mass = 2.0, length = 0.2 }"),
    ("erob50", "erob80_50", 3, "{ mass = 1.0, length = 0.2 }"),
)
NODE_IDS = tuple(a[2] for a in ACTUATORS)
JOINT = {a[2]: a[0] for a in ACTUATORS}
VARIANT = {a[2]: a[1] for a in ACTUATORS}
COUNTS_PER_REV = 524288               # 19-bit output encoder (ZeroErr's demos: encoder_resolution)


def variant_config(node_id: int) -> dict:
    """config/erob/<variant>.toml of the node (the per-variant values ZeroErr's EDS leaves open)."""
    with (ROOT / "config" / "erob" / f"{VARIANT[node_id]}.toml").open("rb") as fh:
        return tomllib.load(fh)


# ------------------------------------------------------------------------------------- rig files
@dataclass
class CanRig:
    path: Path
    port: str          # the pty link the daemon creates
    cmd: str           # ZeroMQ command endpoint
    pub: str


def write_can_rig(directory: Path, name: str, *, actuators=ACTUATORS, model: str = "m6", actuator_extra: str = "",
                  bus_extra: str = "", etherban: str | None = None, integrator: str = "euler") -> CanRig:
    """A rig TOML in `directory` with two eRobs on bus "can" (protocol canopen, 1 Mbit/s, the pty link in
    `directory`): `erob100` (catalog erob80_100, bam's m6, 2 kg pendulum at 0.2 m) as node 2 and `erob50`
    (erob80_50, m6, 1 kg at 0.2 m) as node 3, as config/rigs/erob_demo.toml has them, without its Etherban server;
    ZeroMQ on free loopback ports, MQTT disabled. `model`, `actuator_extra` (TOML lines added to every actuator),
    `bus_extra` (lines added to the bus, e.g. a mirror's real = ...) and `integrator` vary it. With `etherban` (an
    endpoint to bind) the bus is an Etherban server "ethercat" driving the actuators as devices 0, 1, … instead,
    and `port` is that endpoint (what its banner prints)."""
    pub = f"tcp://127.0.0.1:{free_port()}"
    cmd = f"tcp://127.0.0.1:{free_port()}"
    port = etherban or str(directory / f"tty-{name}")
    parts = [
        f'name = "{name}"\n',
        f'[loop]\nrate_hz = 1000\nmlockall = false\nfifo_priority = 0\nintegrator = "{integrator}"\n',
        f'[zmq]\npub = "{pub}"\ncommand = "{cmd}"\n',
        "[mqtt]\nenabled = false\n",
    ]
    if etherban:
        joints = ", ".join(f'"{a[0]}"' for a in actuators)
        parts.append(f'[[buses]]\nname = "ethercat"\nprotocol = "etherban"\nbind = "{etherban}"\n'
                     f"joints = [{joints}]\n{bus_extra}")
    else:
        parts.append(f'[[buses]]\nname = "can"\nprotocol = "canopen"\nport = "{port}"\nbaud = {BITRATE}\n{bus_extra}')
    for joint, catalog, node_id, load in actuators:
        on_bus = "" if etherban else f'bus = "can"\nid = {node_id}\n'
        parts.append(f'\n[[actuators]]\njoint = "{joint}"\ncatalog = "{catalog}"\nmodel = "{model}"\n'
                     f'load = {load}\n{on_bus}{actuator_extra}')
    path = directory / f"{name}.toml"
    path.write_text("".join(parts))
    return CanRig(path, port, cmd, pub)


# ------------------------------------------------------------------------------------- the daemon
class CanDaemon(BusDaemon):
    def inject(self, node_id: int, fault: str, **args) -> None:
        self.ok("inject_fault", actuator=JOINT[node_id], fault=fault, args=args)

    def clear(self, node_id: int, fault: str) -> None:
        self.ok("clear_fault", actuator=JOINT[node_id], fault=fault)


class CanLauncher(BusLauncher):
    """Starts `servo-hil run RIG` daemons, ready once one has printed `servo-hil: canopen bus 'can' at PATH (...)`;
    `finish()` SIGTERMs them and checks exit 0 within 3 s (else kills it and fails), no traceback. The daemon runs
    in its own process on purpose: in one process with the client, python-can's byte-by-byte slcan reader shares
    the GIL with the 1 kHz drive thread, falls behind, and SDOs time out."""

    banner = re.compile(r"servo-hil: canopen bus 'can' at (\S+) \((.*)\)")
    daemon_type = CanDaemon


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
    """`canopen.Network()` on the daemon's pty, connected as a controller connects (`connect`)."""
    net = connect(canopen.Network(), daemon.rig.port)
    yield net
    net.sync.stop()
    with contextlib.suppress(Exception):
        net.disconnect()


# canopen's waits for a reply (SDO 0.3 s; BaseNode402: a TPDO 0.2 s, a state 0.4 s) as a patient controller sets
# them, so that the daemon or python-can's reader thread, starved of CPU for a few hundred ms on a loaded
# 2-core host, is not taken for a missing reply; a test that expects no reply sets its own (sdo_timeout)
PATIENCE_S = 3.0


def patient(node: BaseNode402) -> BaseNode402:
    node.sdo.RESPONSE_TIMEOUT = PATIENCE_S
    for name in ("TIMEOUT_CHECK_TPDO", "TIMEOUT_SWITCH_STATE_SINGLE", "TIMEOUT_SWITCH_STATE_FINAL",
                 "TIMEOUT_SWITCH_OP_MODE", "TIMEOUT_RESET_FAULT"):
        setattr(node, name, PATIENCE_S)
    return node


def export_eds(directory: Path) -> dict[int, str]:
    """`servo-hil actuator export <variant> --eds DIR/<variant>.eds` for each variant, as a user writes the EDS of
    a drive; node ID → its file."""
    for variant in sorted(set(VARIANT.values())):
        path = directory / f"{variant}.eds"
        r = subprocess.run([*SERVO_HIL, "actuator", "export", variant, "--eds", str(path)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.startswith("CANopen EDS → ") and path.is_file(), r.stdout + r.stderr
    return {node_id: str(directory / f"{VARIANT[node_id]}.eds") for node_id in NODE_IDS}


@pytest.fixture(scope="session")
def eds(tmp_path_factory) -> dict[int, str]:
    """The EDS of each node (node ID → file) as `servo-hil actuator export` writes it."""
    return export_eds(tmp_path_factory.mktemp("eds"))


@pytest.fixture(scope="module")
def nodes(network, eds) -> dict[int, BaseNode402]:
    """The two eRobs as python-canopen sees them: BaseNode402 from the EDS the project writes."""
    out = {}
    for node_id in NODE_IDS:
        node = BaseNode402(node_id, eds[node_id])
        patient(node)
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

    def wait_quiet(self, quiet_s: float = 0.1, timeout: float = 10.0) -> int:
        """Waits until no frame was logged for `quiet_s` (the bus went quiet and the reader caught up with it),
        or the timeout; the frames logged."""
        end = time.monotonic() + timeout
        n, since = len(self.snapshot()), time.monotonic()
        while time.monotonic() < end and time.monotonic() - since < quiet_s:
            time.sleep(0.01)
            if (m := len(self.snapshot())) != n:
                n, since = m, time.monotonic()
        return n

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
