"""eRob joints of a robot rig (config/rigs/erob_arm.toml: eRob80:100 shoulder, eRob80:50 elbow on the hinges of
config/robots/erob_arm_2r.xml) driven over Etherban, by python-canopen 2.4.1 on its SLCAN pty, and mirrored onto a
second daemon playing the real arm; the bodies' poses on ZeroMQ follow the arm's kinematics from both joints'
angles. Expected values: the MJCF's geometry, bam's Etherban client (Rhoban/bam bam/erob/etherban.py) and CiA 402-2
(profile position mode), not the code under test."""

from __future__ import annotations

import math
import time
import tomllib
from pathlib import Path

import canopen
import msgpack
import numpy as np
import pytest
import tomli_w
import zmq
from canopen.profiles.p402 import BaseNode402

from drivers.emulated.etherban import etherban_pb2 as pb
from servo_hil.logs.mcap import read_side_by_side
from tests.servo_hil.daemon import free_port

from .conftest import COUNTS_PER_REV, CanRig, connect, patient
from .test_canopen import enable_by_sdo, reset_nodes, statusword
from .test_etherban import Master
from .test_mirror_etherban import _start, _stop

ROOT = Path(__file__).resolve().parents[3]
ERB_ARM = ROOT / "config" / "rigs" / "erob_arm.toml"
UPPER_ARM_M = 0.3          # shoulder to elbow (config/robots/erob_arm_2r.xml)
SHOULDER_Z_M = 0.6


def erob_arm(directory: Path, name: str, *, can: bool = True, bus_extra: dict | None = None) -> CanRig:
    """config/rigs/erob_arm.toml on free ZeroMQ ports and a free Etherban endpoint (`bus_extra` added to its
    server), its CAN pty in `directory` (or no CAN bus), MQTT off, no memory lock or FIFO; `port` is the CAN pty,
    or the Etherban endpoint without CAN."""
    rig = tomllib.loads(ERB_ARM.read_text())
    rig["name"] = name
    rig["robot"]["mjcf"] = str((ERB_ARM.parent / rig["robot"]["mjcf"]).resolve())
    rig["loop"] |= {"mlockall": False, "fifo_priority": 0}
    rig["zmq"] = {"pub": f"tcp://127.0.0.1:{free_port()}", "command": f"tcp://127.0.0.1:{free_port()}"}
    rig["mqtt"] = {"enabled": False}
    port, bind = str(directory / f"tty-{name}"), f"tcp://127.0.0.1:{free_port()}"
    for bus in rig["buses"]:
        if bus["protocol"] == "canopen":
            bus["port"] = port
        else:
            bus |= {"bind": bind} | (bus_extra or {})
    if not can:
        rig["buses"] = [b for b in rig["buses"] if b["protocol"] != "canopen"]
        for a in rig["actuators"]:
            del a["bus"], a["id"]
    path = directory / f"{name}.toml"
    path.write_text(tomli_w.dumps(rig))
    return CanRig(path, port if can else bind, rig["zmq"]["command"], rig["zmq"]["pub"])


def etherban_of(rig: CanRig) -> str:
    return next(b["bind"] for b in tomllib.loads(rig.path.read_text())["buses"] if b["protocol"] == "etherban")


@pytest.fixture(scope="module")
def arm(module_launcher):
    """The module's daemon of config/rigs/erob_arm.toml (both buses)."""
    return module_launcher.start(erob_arm(module_launcher.dir, "erob_arm"))


def angle_about_x(wxyz) -> float:
    """The rotation angle [rad] of a quaternion (w, x, y, z) about +x, the hinges' axis."""
    return 2.0 * math.atan2(wxyz[1], wxyz[0])


def check_kinematics(rig: CanRig, state: dict) -> None:
    """The bodies' latest poses on ZeroMQ against the arm at rest in `state` (the `state` command's map): the upper
    arm turned by the shoulder angle, the forearm by the sum of both, the elbow's pivot on a circle of the upper
    arm's length about the shoulder."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"erob_arm/poses")
    sub.connect(rig.pub)
    try:
        poses = None
        deadline = time.monotonic() + 5.0
        while poses is None and time.monotonic() < deadline:
            if sub.poll(200):
                poses = msgpack.unpackb(sub.recv_multipart()[1])
    finally:
        sub.close(0)
        ctx.term()
    assert poses is not None, "no poses message within 5 s"
    bodies = poses["bodies"]
    xyz, wxyz = np.reshape(poses["position"], (-1, 3)), np.reshape(poses["quaternion"], (-1, 4))
    shoulder, elbow = state["shoulder"]["position"], state["elbow"]["position"]
    upper, fore = bodies.index("upper_arm"), bodies.index("forearm")
    assert angle_about_x(wxyz[upper]) == pytest.approx(shoulder, abs=0.01)
    assert angle_about_x(wxyz[fore]) == pytest.approx(shoulder + elbow, abs=0.01)
    expected = [0.0, UPPER_ARM_M * math.sin(shoulder), SHOULDER_Z_M - UPPER_ARM_M * math.cos(shoulder)]
    np.testing.assert_allclose(xyz[fore], expected, atol=0.003)


def test_an_etherban_client_lifts_the_arm(arm):
    """bam's protocol: device 0 (the shoulder) ramps to 0.5 rad in CSP, device 1 (the elbow) holds 0 rad; the
    shoulder lifts the whole arm, the elbow's drive holds its forearm against the gravity that now acts on it."""
    master = Master(etherban_of(arm.rig))
    try:
        first = master.exchange()
        assert [s.device for s in first.statuses] == [0, 1] and not first.has_fault
        t0 = time.monotonic()
        log = master.run(2.0, lambda _resp: [(0, pb.POSITION, 0.5 * min(1.0, (time.monotonic() - t0) / 1.0)),
                                             (1, pb.POSITION, 0.0)])
        last = master.exchange((0, pb.POSITION, 0.5), (1, pb.POSITION, 0.0))
    finally:
        master.close()
    assert not any(r.has_fault for _, r in log)
    assert last.statuses[0].present_position == pytest.approx(0.5, abs=0.01)   # the drive's own loop
    assert abs(last.statuses[1].present_position) < 0.02
    time.sleep(0.3)
    state = arm.ok("state")["state"]
    assert state["shoulder"]["position"] == pytest.approx(last.statuses[0].present_position, abs=0.005)
    assert abs(state["elbow"]["torque"]) > 0.3, "the elbow carries no load: the forearm is not on the arm"
    check_kinematics(arm.rig, state)


def test_python_canopen_moves_the_shoulder_in_profile_position(arm, eds):
    """ZeroErr's PP flow by SDO (eRobControl_PP.py, ZeroErrControl/eRob_CANopen_Python) on node 2, the shoulder: a
    set-point of −0.4 rad from where the arm is; the actual position 0x6064 reaches it and is the hinge's angle."""
    network = connect(canopen.Network(), arm.rig.port)
    try:
        node = patient(BaseNode402(2, eds[2]))
        network.add_node(node)
        reset_nodes(network, ids=(2, 3))
        sdo = node.sdo
        node.nmt.state = "OPERATIONAL"
        start = enable_by_sdo(node, 1)                        # 0x6060 = 1: profile position mode
        counts = round(-0.4 * COUNTS_PER_REV / (2 * math.pi))
        sdo[0x6081].raw = 60_000                              # profile velocity [counts/s] ≈ 0.72 rad/s
        sdo[0x6083].raw = sdo[0x6084].raw = 200_000           # acceleration, deceleration [counts/s²]
        sdo[0x607A].raw = start + counts
        sdo[0x6040].raw = 0x1F                                # new set-point (bit 4 rising edge)
        sdo[0x6040].raw = 0x0F
        deadline = time.monotonic() + 6.0
        while abs(sdo[0x6064].raw - (start + counts)) > 0.01 * COUNTS_PER_REV / (2 * math.pi):
            assert time.monotonic() < deadline, f"0x6064 = {sdo[0x6064].raw}, target {start + counts}"
            time.sleep(0.05)
        actual = sdo[0x6064].raw
        state = arm.ok("state")["state"]
        sdo[0x6040].raw = 0x06                                # shutdown: the drive lets go
        assert statusword(node) & 0x6F == 0x21                # ready to switch on (CiA 402-2 FSA)
        reset_nodes(network, ids=(2, 3))
    finally:
        network.disconnect()
    assert state["shoulder"]["position"] == pytest.approx(actual * 2 * math.pi / COUNTS_PER_REV, abs=0.005)


def test_etherban_mirror_of_a_robot_arm(tmp_path):
    """`servo-hil mirror`: the client's requests go to the real server (a second daemon of the same arm, bam m6) and
    its replies come back unchanged, while the twin arm (bam m1) follows the same orders; both sides are logged."""
    (tmp_path / "real").mkdir()
    (tmp_path / "twin").mkdir()
    real_rig = erob_arm(tmp_path / "real", "erob_arm", can=False)
    logs = tmp_path / "logs"
    twin_rig = erob_arm(tmp_path / "twin", "erob_arm", can=False,
                        bus_extra={"real": etherban_of(real_rig), "record": str(logs)})
    twin_rig.path.write_text(twin_rig.path.read_text().replace('model = "m6"', 'model = "m1"'))
    real, _ = _start(["run", str(real_rig.path)], tmp_path / "real")
    try:
        mirror, banner = _start(["mirror", str(twin_rig.path)], tmp_path / "twin")
        try:
            assert etherban_of(real_rig) in banner.group(2)
            master = Master(banner.group(1))
            try:
                t0 = time.monotonic()
                got = master.run(1.5, lambda _resp: [(0, pb.POSITION, 0.4 * min(1.0, (time.monotonic() - t0))),
                                                     (1, pb.POSITION, 0.3)])
                last = master.exchange((0, pb.POSITION, 0.4), (1, pb.POSITION, 0.3))
            finally:
                master.close()
            time.sleep(0.3)
            from servo_hil.daemon.zmq_io import request

            real_state = request(real_rig.cmd, {"cmd": "state"}, 5.0)["state"]
            twin_state = request(twin_rig.cmd, {"cmd": "state"}, 5.0)["state"]
        finally:
            _stop(mirror, tmp_path / "twin")
    finally:
        _stop(real, tmp_path / "real")
    assert [s.device for s in last.statuses] == [0, 1] and not last.has_fault
    # the client saw the real arm; the twin arm went to the same pose
    assert last.statuses[0].present_position == pytest.approx(real_state["shoulder"]["position"], abs=0.01)
    for joint, goal in (("shoulder", 0.4), ("elbow", 0.3)):
        assert real_state[joint]["position"] == pytest.approx(goal, abs=0.02)
        assert twin_state[joint]["position"] == pytest.approx(goal, abs=0.02)
    log = read_side_by_side(logs)
    client = [resp.statuses[0].present_position for _, resp in got] + [last.statuses[0].present_position]
    real_log, sim_log = log["/real/shoulder/state"], log["/sim/shoulder/state"]
    assert len(real_log) == len(sim_log) == len(client) + 1             # + the first exchange of run()
    assert [m["position"] for m in real_log[-len(client):]] == client
    assert "/real/elbow/state" in log and "/sim/elbow/state" in log
