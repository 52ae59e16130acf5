"""The Etherban server (drivers/emulated/etherban/server.py) against a running rig, with real REQ sockets and protobuf.
The module's daemon is `servo-hil run RIG` (a subprocess, shared by the tests in file order): an eRob80:100 (device
0, joint "big") and an eRob80:50 (device 1, joint "small"), each lifting a 1 kg pendulum at 0.2 m with bam's m6
friction. Lifecycle tests (stop, port in use) and the fault-reset timing run a server in-process on drives over an
offline kernel. Expected values come from the protocol as bam's client uses it (Rhoban/bam bam/erob/etherban.py,
etherban.proto) and from the drive's data (config/erob/, config/actuators/), not from the code under test."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest
import zmq

from bench.host import stop_process
from drivers.emulated.etherban import etherban_pb2 as pb
from drivers.emulated.etherban.server import EtherbanServer
from drivers.schedulers.cia402_drives import Cia402Drives
from firmware_models.erob.drive import new_drive
from hil.joint import KernelJoint
from servo_hil.daemon.zmq_io import request
from servo_hil.rig import load_rig
from tests.daemon_process import SERVO_HIL
from tests.servo_hil.daemon import free_port, rig_head

ROOT = Path(__file__).resolve().parents[3]
BAM = ROOT / "bench/.venv-bam/lib/python3.12/site-packages/bam"   # gitignored: only on a bench PC

# The ‰ resolution of a TORQUE order (0x6071, ‰ of 0x6076 = 31 N·m, through kt) and of present_current
# (0x6078, ‰ of 0x6075 = 5.5 A) for the eRob80:100 (config/erob/erob80_100.toml [ratings], bam m6 kt).
_KT_100 = tomllib.loads((ROOT / "config/actuators/erob80_100.toml").read_text())["models"]["m6"]["kt"]
AMPS_TOL = 0.5 * (31.0 / 1000 / _KT_100 + 5.5 / 1000) + 1e-4
COUNT = 2 * np.pi / 524288          # one output-encoder count [rad]


def write_rig(directory: Path, bind: str) -> Path:
    path = directory / "etherban.toml"
    path.write_text(rig_head("etherban") + f"""[loop]
rate_hz = 1000
mlockall = false
fifo_priority = 0
[[buses]]
name = "ethercat"
protocol = "etherban"
bind = "{bind}"
joints = ["big", "small"]
[[actuators]]
joint = "big"
catalog = "erob80_100"
model = "m6"
load = {{ mass = 1.0, length = 0.2 }}
[[actuators]]
joint = "small"
catalog = "erob80_50"
model = "m6"
load = {{ mass = 1.0, length = 0.2 }}
""")
    return path


class Master:
    """A REQ socket speaking Etherban, as bam's client does (one Request, one Response)."""

    def __init__(self, endpoint: str):
        self.sock = zmq.Context.instance().socket(zmq.REQ)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, 2000)
        self.sock.connect(endpoint)

    def raw(self, *frames: bytes) -> bytes:
        self.sock.send_multipart(list(frames))
        return self.sock.recv()

    def exchange(self, *orders: tuple[int, int, float]) -> pb.Response:
        req = pb.Request()
        for device, mode, target in orders:
            req.orders.add(device=device, operation_mode=mode, target=target)
        resp = pb.Response()
        resp.ParseFromString(self.raw(req.SerializeToString()))
        return resp

    def run(self, seconds: float, orders_of) -> list[tuple[list, pb.Response]]:
        """`orders_of(last response)` → orders, one exchange per 1 ms (paced); [(orders, response)]."""
        out, resp = [], self.exchange()
        due = t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            orders = orders_of(resp)
            resp = self.exchange(*orders)
            out.append((orders, resp))
            due += 1e-3
            time.sleep(max(0.0, due - time.monotonic()))
        return out

    def until(self, predicate, orders=(), timeout_s: float = 1.0) -> pb.Response:
        deadline = time.monotonic() + timeout_s
        while True:
            resp = self.exchange(*orders)
            if predicate(resp) or time.monotonic() > deadline:
                return resp
            time.sleep(1e-3)

    def close(self) -> None:
        self.sock.close(0)


class Rig:
    def __init__(self, proc: subprocess.Popen, path: str, summary: str, command: str, err: Path):
        self.proc, self.path, self.summary, self.command, self.err = proc, path, summary, command, err

    def ok(self, cmd: str, **args) -> dict:
        reply = request(self.command, {"cmd": cmd, **args}, 5.0)
        assert reply.get("ok") is True, f"{cmd} {args}: {reply}"
        return reply


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    directory = tmp_path_factory.mktemp("etherban")
    path = write_rig(directory, f"tcp://127.0.0.1:{free_port()}")
    command = tomllib.loads(path.read_text())["zmq"]["command"]
    out, err = directory / "stdout", directory / "stderr"
    with out.open("w") as fo, err.open("w") as fe:
        proc = subprocess.Popen([*SERVO_HIL, "run", str(path)], stdout=fo, stderr=fe, cwd=ROOT)
    try:
        deadline = time.monotonic() + 20.0
        banner = None
        while banner is None and time.monotonic() < deadline and proc.poll() is None:
            banner = re.search(r"servo-hil: etherban bus 'ethercat' at (\S+) \((.*)\)", out.read_text())
            time.sleep(0.05)
        assert banner, f"no etherban banner; stderr:\n{err.read_text()}"
        yield Rig(proc, banner.group(1), banner.group(2), command, err)
    finally:
        rc = stop_process(proc, 3.0)
    assert rc == 0, f"daemon exit {rc}; stderr:\n{err.read_text()}"
    assert "Traceback" not in err.read_text(), err.read_text()


@pytest.fixture
def master(rig):
    m = Master(rig.path)
    yield m
    m.close()


# ------------------------------------------------------------------------------------- protocol
def test_statuses_unknown_device_and_malformed_requests(rig, master, caplog):
    assert rig.summary == "devices 0: erob80_100, 1: erob80_50"
    resp = master.exchange()
    assert [s.device for s in resp.statuses] == [0, 1]
    assert not resp.has_fault
    for s in resp.statuses:
        assert abs(s.present_position) < 0.05 and abs(s.present_velocity) < 0.05   # hanging at rest
    # an unknown device is ignored, the known one in the same request is served
    q1 = resp.statuses[1].present_position
    resp = master.exchange((7, pb.POSITION, 1.0), (-1, pb.TORQUE, 3.0), (1, pb.POSITION, q1))
    assert [s.device for s in resp.statuses] == [0, 1]
    assert resp.statuses[1].target_position == pytest.approx(q1, abs=COUNT)
    # bytes that are not a Request, and a two-frame message: an empty Response, then service goes on
    for frames in ([b"\x0a\xff\xff"], [b"\xff" * 7], [b"\x0a\x02\x08"], [b"a", b"b"]):
        empty = pb.Response()
        empty.ParseFromString(master.raw(*frames))
        assert len(empty.statuses) == 0 and not empty.has_fault
        assert [s.device for s in master.exchange().statuses] == [0, 1]


def test_torque_mode_bam_pd(master):
    """bam's host PD (Client.position_control) on the eRob80:100: amps = kp·e + damping·√kp·ė, ±12 A."""
    kp, damping = 25.0, 2.0
    start = master.exchange().statuses[0].present_position
    target = start + 0.5

    def pd(resp):
        s = resp.statuses[0]
        amps = kp * (target - s.present_position) + damping * np.sqrt(kp) * (0.0 - s.present_velocity)
        return [(0, pb.TORQUE, float(np.clip(amps, -12.0, 12.0)))]

    log = master.run(2.0, pd)
    assert len(log) > 1000                                       # about 1 kHz (generous)
    assert not any(r.has_fault for _, r in log)
    final = log[-1][1].statuses[0]
    # converged up to the static error friction leaves a PD (m6 Stribeck ≈ 5 N·m / (kp·kt) ≈ 0.02 rad)
    assert abs(final.present_position - target) < 0.06
    assert abs(final.present_velocity) < 0.2
    # each response reports the order of the request before it (the drive applies it at its next tick)
    amps = np.array([o[0][2] for o, _ in log])
    demand = np.array([r.statuses[0].torque_demand for _, r in log])
    current = np.array([r.statuses[0].present_current for _, r in log])
    assert np.mean(np.abs(demand[1:] - amps[:-1]) <= AMPS_TOL) > 0.8
    assert np.mean(np.abs(current[1:] - amps[:-1]) <= AMPS_TOL) > 0.8
    assert np.max(np.abs(amps)) == 12.0                          # the step saturated the host clamp

    # a steady order: present current and torque demand equal it within the ‰ resolution
    log = master.run(0.15, lambda r: [(0, pb.TORQUE, 0.3)])
    for _, r in log[-50:]:
        assert r.statuses[0].present_current == pytest.approx(0.3, abs=AMPS_TOL)
        assert r.statuses[0].torque_demand == pytest.approx(0.3, abs=0.5 * 31.0 / 1000 / _KT_100 + 1e-4)


def test_position_and_velocity_modes(master):
    """Device 1 (eRob80:50): a CSP ramp of 0.4 rad, CSV at 0.5 rad/s, back to CSP without a jump."""
    s = master.exchange().statuses[1]
    start, goal = s.present_position, s.present_position + 0.4
    t0 = time.monotonic()

    def ramp(_resp):
        x = min((time.monotonic() - t0) / 0.5, 1.0)
        return [(1, pb.POSITION, start + (goal - start) * x)]

    log = master.run(0.8, ramp)
    s = log[-1][1].statuses[1]
    assert not log[-1][1].has_fault
    assert s.target_position == pytest.approx(goal, abs=COUNT)
    assert s.present_position == pytest.approx(goal, abs=0.005)   # the drive's own loop, with integral
    assert abs(s.present_velocity) < 0.05

    log = master.run(0.6, lambda r: [(1, pb.VELOCITY, 0.5)])
    s = log[-1][1].statuses[1]
    assert s.velocity_demand == pytest.approx(0.5, abs=COUNT)
    speeds = [r.statuses[1].present_velocity for _, r in log[-200:]]
    assert np.mean(speeds) == pytest.approx(0.5, rel=0.1)
    moved = log[-1][1].statuses[1].present_position - log[0][1].statuses[1].present_position
    assert moved == pytest.approx(0.5 * 0.6, rel=0.25)

    # back to POSITION at where it is now: the drive stops there (0x607A = actual before the switch)
    hold = master.exchange().statuses[1].present_position
    log = master.run(0.4, lambda r: [(1, pb.POSITION, hold)])
    positions = np.array([r.statuses[1].present_position for _, r in log])
    assert np.max(np.abs(positions - hold)) < 0.05                 # stops within a few ms at 0.5 rad/s
    assert positions[-1] == pytest.approx(hold, abs=0.005)


# ------------------------------------------------------------------------------------- faults
def test_fault_reported_then_reset_once_the_condition_is_gone(rig, master):
    hold = master.exchange().statuses[0].present_position
    orders = [(0, pb.POSITION, hold)]
    assert not master.until(lambda r: False, orders, 0.05).has_fault
    rig.ok("inject_fault", actuator="big", fault="supply_sag", args={"voltage_v": 20.0})   # below 44 V
    resp = master.until(lambda r: r.has_fault, orders)
    assert resp.has_fault
    # the condition persists: every reset is refused, the fault stays reported, the torque stays off
    log = master.run(0.1, lambda r: orders)
    assert all(r.has_fault for _, r in log)
    assert log[-1][1].statuses[0].present_current == 0.0
    rig.ok("clear_fault", actuator="big", fault="supply_sag")
    resp = master.until(lambda r: not r.has_fault, orders, 0.5)
    assert not resp.has_fault
    # re-enabled in its last mode: a new order is obeyed (TORQUE: the current is commanded again)
    log = master.run(0.1, lambda r: [(0, pb.TORQUE, 0.3)])
    assert not any(r.has_fault for _, r in log)
    assert log[-1][1].statuses[0].present_current == pytest.approx(0.3, abs=AMPS_TOL)


def test_power_cycle_re_enables_the_drive_in_its_last_mode(rig, master):
    """After the daemon's `reset` (every drive powers up again) a device that had an order is enabled
    again, without a new order, in its last mode: in CSP it holds the shaft against an external torque."""
    master.exchange((1, pb.POSITION, master.exchange().statuses[1].present_position))
    rig.ok("reset")
    hold = master.until(lambda r: False, (), 0.05).statuses[1].present_position    # no orders from here
    try:
        # 8 N·m: more than the eRob80:50's friction (m6: about 3.6 N·m) and the pendulum (≤ 2 N·m) can hold
        rig.ok("set_external_torque", actuator="small", value=8.0)
        log = master.run(0.3, lambda r: [])
    finally:
        rig.ok("set_external_torque", actuator="small", value=0.0)
    assert not any(r.has_fault for _, r in log)
    assert abs(log[-1][1].statuses[1].present_position - hold) < 0.03
    assert log[-1][1].statuses[1].target_position == pytest.approx(hold, abs=0.01)


def test_huge_finite_targets_saturate_at_the_objects_range(rig, master):
    """POSITION 1e305 rad, VELOCITY −1e308 rad/s and TORQUE 1e308 A are finite, so the server converts them:
    each lands at the end of its object's range (0x607A, 0x60FF INTEGER32; 0x6071 INTEGER16), the drive
    limits the demand (0x6080, 0x6072) and the daemon keeps serving."""
    units = tomllib.loads((ROOT / "config/erob/erob80_50.toml").read_text())["units"]
    int32_max_rad = ((1 << 31) - 1 - units["zero_counts"]) * 2 * np.pi / units["encoder_counts"]
    for mode, target in ((pb.POSITION, 1e305), (pb.VELOCITY, -1e308), (pb.TORQUE, 1e308)):
        hold = master.exchange().statuses[1].present_position
        resp = master.exchange((1, mode, target))
        assert [s.device for s in resp.statuses] == [0, 1], (mode, target)
        if mode == pb.POSITION:
            assert resp.statuses[1].target_position == pytest.approx(int32_max_rad, rel=1e-9)
        # back to holding the shaft where it was (a fault the huge target caused is reset by the server)
        resp = master.until(lambda r: not r.has_fault, [(1, pb.POSITION, hold)], 2.0)
        assert not resp.has_fault
    assert rig.proc.poll() is None
    rig.ok("status")


# ------------------------------------------------------------------------------------- bam's own client
@pytest.mark.skipif(not (BAM / "erob/etherban.py").exists(), reason="bam's client (bench/.venv-bam) not installed")
def test_bam_client_unchanged(rig, master, tmp_path, monkeypatch):
    """bam/erob/etherban.py `Client` as bam's record.py uses it: wait still, goto_safe, host PD, sync."""
    master.exchange((0, pb.POSITION, master.exchange().statuses[0].present_position))   # hold still
    package = tmp_path / "bam"
    (package / "erob").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "erob/__init__.py").write_text("")
    shutil.copy(BAM / "trajectory.py", package / "trajectory.py")          # numpy only
    shutil.copy(BAM / "erob/etherban.py", package / "erob/etherban.py")
    # bam generates etherban_pb2 from its (unpublished) .proto; ours stands in
    (package / "erob/etherban_pb2.py").write_text(
        "from drivers.emulated.etherban.etherban_pb2 import *  # noqa: F403\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "bam" or m.startswith("bam.")]:
        monkeypatch.delitem(sys.modules, name)
    from bam.erob.etherban import Client

    client = Client("127.0.0.1")
    # the Client connects to port 7332; the test daemon listens on a free port
    client.socket.disconnect("tcp://127.0.0.1:7332")
    client.socket.connect(rig.path)
    result: dict = {}

    def record():   # bam's record.py flow; in a thread: sync() and wait_stability() have no timeout
        client.run_background()
        result["devices"] = sorted(client.get_statuses())
        client.wait_stability(0)
        start = client.get_statuses()[0]["position"]
        client.goto_safe(0, start + 0.2, duration=0.5)
        result["goto"] = (start + 0.2, client.get_statuses()[0]["target_position"])
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:
            client.position_control(0, start + 0.3, 0.0, kp=25.0, damping=2.0)
            client.sync()
        result["pd"] = (start + 0.3, client.get_statuses()[0], client.orders[0].target, client.orders[0].operation_mode)
        client.set_order(0, "torque", 0.0)
        client.sync()

    before = set(threading.enumerate())
    worker = threading.Thread(target=record, daemon=True)
    try:
        worker.start()
        worker.join(15.0)
        assert not worker.is_alive(), f"bam's client stalled; got {result}"
    finally:
        client.stop()
        for thread in set(threading.enumerate()) - before:
            thread.join(2.0)
        client.socket.close(0)
        for name in [m for m in sys.modules if m == "bam" or m.startswith("bam.")]:
            del sys.modules[name]                                    # the stand-in package is test-local
    assert not set(threading.enumerate()) - before                   # bam's client thread ended
    assert result["devices"] == [0, 1]
    goal, target_position = result["goto"]
    assert target_position == pytest.approx(goal, abs=COUNT)
    goal, status, amps, mode = result["pd"]
    assert mode == pb.TORQUE
    assert abs(status["position"] - goal) < 0.06
    assert status["current"] == pytest.approx(amps, abs=0.3)          # one cycle behind the order


# ------------------------------------------------------------------------------------- lifecycle (in-process)
@pytest.fixture
def offline(tmp_path):
    """Two drives over an offline kernel (ticked by hand or by the drives' thread; time stands still)."""
    _rig, _specs, kernel = load_rig(write_rig(tmp_path, "tcp://127.0.0.1:1"))
    drives = Cia402Drives()
    devices = [drives.drive(0, "erob80_100", lambda: new_drive("erob80_100", 1, KernelJoint(kernel, 0))),
               drives.drive(1, "erob80_50", lambda: new_drive("erob80_50", 1, KernelJoint(kernel, 1)))]
    drives.tick_once()
    return drives, devices, kernel


def test_stop_frees_the_port_and_a_busy_port_fails_early(offline):
    drives, devices, _ = offline
    server = EtherbanServer(drives, devices, "tcp://127.0.0.1:0", name="ec")
    path = server.path
    assert re.fullmatch(r"tcp://127\.0\.0\.1:\d+", path) and not path.endswith(":0")
    with pytest.raises(zmq.ZMQError, match=re.escape(path)):
        EtherbanServer(drives, devices, path)
    server.start()
    master = Master(path)
    try:
        assert [s.device for s in master.exchange().statuses] == [0, 1]
        assert server.error is None and server.name == "ec"
        t0 = time.monotonic()
        server.stop()
        assert time.monotonic() - t0 < 1.0
        assert not server.is_alive()
        server.stop()                                              # idempotent
        assert not any(t.name == "servo-hil-cia402" for t in threading.enumerate())   # drives released
        again = EtherbanServer(drives, devices, path)              # the port is free
        again.stop()                                               # never started: closes the socket
        EtherbanServer(drives, devices, path).stop()
    finally:
        master.close()
        server.stop()


def test_fault_reset_only_after_a_response_reported_it(offline):
    drives, devices, kernel = offline
    server = EtherbanServer(drives, devices, "tcp://127.0.0.1:0")
    try:
        def exchange(*orders) -> pb.Response:
            req = pb.Request()
            for device, mode, target in orders:
                req.orders.add(device=device, operation_mode=mode, target=target)
            resp = pb.Response()
            resp.ParseFromString(server.handle([req.SerializeToString()]))
            return resp

        resp = exchange((1, pb.TORQUE, 0.5))
        assert devices[1].state.name == "OPERATION_ENABLED" and devices[1].mode.name == "CST"
        assert devices[0].state.name == "SWITCH_ON_DISABLED"      # no order, not enabled
        with drives.lock:
            KernelJoint(kernel, 1).command(params={"supply_override": 20.0})
            drives.tick_once()
        assert devices[1].state.name == "FAULT_REACTION_ACTIVE"
        assert exchange().has_fault                                # reported, not yet reset
        drives.tick_once()                                         # the reaction ends: Fault
        assert exchange().has_fault                                # reset refused: still 20 V
        with drives.lock:
            KernelJoint(kernel, 1).command(params={"supply_override": float("nan")})   # supply back
        resp = exchange()                                          # reset now, re-enabled in CST
        assert not resp.has_fault
        assert devices[1].state.name == "OPERATION_ENABLED" and devices[1].mode.name == "CST"
        # a fault is reported by the first response after it even when its condition is already gone ...
        with drives.lock:
            KernelJoint(kernel, 1).command(params={"supply_override": 20.0})
            drives.tick_once()
            drives.tick_once()
            KernelJoint(kernel, 1).command(params={"supply_override": float("nan")})
        assert devices[1].state.name == "FAULT"
        resp = exchange((1, pb.POSITION, 0.1))
        assert resp.has_fault and devices[1].state.name == "FAULT"
        # ... and the next request resets it. Re-enabled without an order in CSP, the drive holds where the
        # shaft is now (it was moved while in fault), not its last target 0.1 rad
        kernel.set_state(1, theta=-0.2)
        resp = exchange()
        assert not resp.has_fault
        assert devices[1].state.name == "OPERATION_ENABLED" and devices[1].mode.name == "CSP"
        assert resp.statuses[1].present_position == pytest.approx(-0.2, abs=COUNT)
        assert resp.statuses[1].target_position == pytest.approx(-0.2, abs=COUNT)
    finally:
        server.stop()
