"""A robot rig on a Dynamixel bus: the paper's 2R arm (MX-106 shoulder ID 1, MX-64 elbow ID 2) driving a MuJoCo
model, served by `servo-hil run` and driven by dynamixel-sdk 4.1.0 unchanged, its joint state and its bodies'
poses on ZeroMQ (docs/robots.md). Lock-step, so the physics each read sees is exact."""

from __future__ import annotations

import math
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

from tests.drivers.dynamixel.conftest import A, DxlRig, open_dxl
from tests.servo_hil.daemon import free_port

ARM_2R = Path(__file__).resolve().parents[3] / "config" / "robots" / "arm_2r.xml"
COUNTS_PER_RAD = 4096 / (2 * math.pi)    # e-manual MX-64(2.0) §Present Position(132): 0.088° per count
CENTRE = 2048                            # its value at the joint's 0 rad (180°, the middle of one turn)


def robot_rig(directory: Path, name: str = "arm", lockstep: bool = True, model: str = "m4", bus_extra: str = ""
              ) -> DxlRig:
    pub, cmd = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    path = directory / f"{name}.toml"
    path.write_text(f"""name = "{name}"
[loop]
rate_hz = 1000
mlockall = false
lockstep = {str(lockstep).lower()}
[zmq]
pub = "{pub}"
command = "{cmd}"
[mqtt]
enabled = false
[robot]
mjcf = "{ARM_2R}"
pose_every = 10
[[buses]]
name = "dxl"
protocol = "dynamixel"
port = "{directory / "unused-link"}"
fast = true
{bus_extra}[[actuators]]
joint = "shoulder"
catalog = "mx106"
model = "{model}"
bus = "dxl"
id = 1
[[actuators]]
joint = "elbow"
catalog = "mx64"
model = "{model}"
bus = "dxl"
id = 2
""")
    return DxlRig(path, str(directory / f"tty-{name}"), cmd, pub, lockstep, True, 1000.0)


def test_the_sdk_moves_the_arm_and_zmq_shows_its_poses(launcher, tmp_path: Path) -> None:
    rig = robot_rig(tmp_path)
    daemon = launcher.start(rig)
    assert daemon.ids == (1, 2)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"arm/")
    sub.connect(rig.pub)
    time.sleep(0.3)   # the subscription reaches the publisher
    try:
        with open_dxl(rig.port) as dxl:
            start = {i: dxl.read(i, A.PRESENT_POSITION, signed=True) for i in (1, 2)}
            for i in (1, 2):
                dxl.write(i, A.TORQUE_ENABLE, 1)
            dxl.write(1, A.GOAL_POSITION, start[1])
            dxl.write(2, A.GOAL_POSITION, start[2] + 600)   # the elbow swings ≈ 0.92 rad
            daemon.step(1500)
            end = {i: dxl.read(i, A.PRESENT_POSITION, signed=True) for i in (1, 2)}
        # the elbow reached most of the way (the servo's low P gain leaves an error against gravity)
        assert end[2] - start[2] > 300, (start, end)
        msgs: dict[bytes, list[dict]] = {}
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and not any(p["tick"] == 1500 for p in msgs.get(b"arm/poses", [])):
            if sub.poll(200):
                topic, payload, _stamp = sub.recv_multipart()
                msgs.setdefault(topic, []).append(msgpack.unpackb(payload))
    finally:
        sub.close(0)
        ctx.term()
    elbow = msgs[b"arm/elbow"]
    assert abs(elbow[-1]["position"] - elbow[0]["position"] - (end[2] - start[2]) / COUNTS_PER_RAD) < 3 / COUNTS_PER_RAD
    # the elbow's swing shakes the shoulder that holds still: the joints are one multibody system
    shoulder = np.array([m["position"] for m in msgs[b"arm/shoulder"]])
    assert np.ptp(shoulder) > 1e-4
    poses = msgs[b"arm/poses"]
    # the latest copy each time the publisher looks: a lock-step burst of 1500 ticks ends on its last tick
    ticks = [p["tick"] for p in poses]
    assert ticks[-1] == 1500 and all(t % 10 == 0 for t in ticks) and ticks == sorted(set(ticks))
    assert [p["seq"] for p in poses] == list(range(len(poses)))
    last = poses[-1]
    assert last["bodies"][:3] == ["world", "upper_arm", "forearm"]
    xyz = np.array(last["position"]).reshape(-1, 3)
    quat = np.array(last["quaternion"]).reshape(-1, 4)
    np.testing.assert_allclose(np.linalg.norm(quat, axis=1), 1.0, rtol=1e-9)
    assert abs(np.linalg.norm(xyz[2] - xyz[1]) - 0.2) < 1e-9     # the elbow is 0.2 m from the shoulder


DESKTOP = Path(__file__).resolve().parents[3] / "config" / "rigs" / "desktop_arm.toml"


def desktop_rig(directory: Path) -> DxlRig:
    """config/rigs/desktop_arm.toml on free ZeroMQ ports, lock-step, its pty in `directory`."""
    pub, cmd = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    text = DESKTOP.read_text()
    text = text.replace('mjcf = "../robots/', f'mjcf = "{DESKTOP.parent.parent}/robots/')
    text = text.replace("rate_hz = 1000\n", f'rate_hz = 1000\nmlockall = false\nlockstep = true\n'
                                             f'[zmq]\npub = "{pub}"\ncommand = "{cmd}"\n[mqtt]\nenabled = false\n')
    text = text.replace('baud = 1000000\n', 'baud = 1000000\nfast = true\n')
    path = directory / "desktop.toml"
    path.write_text(text)
    return DxlRig(path, str(directory / "tty-desktop"), cmd, pub, True, True, 1000.0)


def test_an_sdk_script_sweeps_the_desktop_arm_and_pushes_the_box(launcher, tmp_path: Path) -> None:
    """The script a controller would run on the real arm: torque on, then Goal Positions by GroupSyncWrite
    (e-manual Protocol 2.0 §Sync Write) every 100 ms, sweeping the waist 0.9 rad at hover height; the fingers
    push the box on the table (contacts), which the poses topic shows."""
    import dynamixel_sdk as sdk

    rig = desktop_rig(tmp_path)
    daemon = launcher.start(rig)
    assert daemon.ids == (1, 2, 3, 4, 5, 6)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"desktop_arm/poses")
    sub.connect(rig.pub)
    time.sleep(0.3)
    poses = []

    def drain() -> None:
        while sub.poll(100):
            poses.append(msgpack.unpackb(sub.recv_multipart()[1]))

    try:
        with open_dxl(rig.port) as dxl:
            start = {i: dxl.read(i, A.PRESENT_POSITION, signed=True) for i in range(1, 7)}
            for i in range(1, 7):
                dxl.write(i, A.TORQUE_ENABLE, 1)
            daemon.step(10)
            drain()
            sync = sdk.GroupSyncWrite(dxl.port, dxl.ph, *A.GOAL_POSITION)
            for k in range(1, 26):
                waist = start[1] + round(min(k / 15, 1.0) * 0.9 * COUNTS_PER_RAD)
                for i in range(1, 7):
                    goal = waist if i == 1 else start[i]
                    assert sync.addParam(i, list(goal.to_bytes(4, "little", signed=True)))
                assert sync.txPacket() == sdk.COMM_SUCCESS
                sync.clearParam()
                daemon.step(100)
            end = {i: dxl.read(i, A.PRESENT_POSITION, signed=True) for i in range(1, 7)}
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and not any(p["tick"] == 2510 for p in poses):
            drain()
    finally:
        sub.close(0)
        ctx.term()
    assert abs(end[1] - start[1] - 0.9 * COUNTS_PER_RAD) < 0.05 * COUNTS_PER_RAD, (start, end)   # the waist swept
    assert all(abs(end[i] - start[i]) < 0.02 * COUNTS_PER_RAD for i in range(2, 6)), (start, end)  # the arm held
    # the box pushes back on the finger: the gripper's XL330 yields to the contact
    assert abs(end[6] - start[6]) > 0.05 * COUNTS_PER_RAD, (start, end)
    box = poses[0]["bodies"].index("object")
    first = np.array(poses[0]["position"]).reshape(-1, 3)[box]
    last = np.array(poses[-1]["position"]).reshape(-1, 3)[box]
    assert poses[-1]["tick"] == 2510
    assert np.linalg.norm(last[:2] - first[:2]) > 0.02, (first, last)      # pushed over 2 cm across the table
    assert abs(last[2] - first[2]) < 0.005                                  # and still on it


def test_the_mirror_of_a_real_arm_drives_a_twin_arm(tmp_path: Path) -> None:
    """`servo-hil mirror` on a robot rig: dynamixel-sdk's packets go to the "real" 2R arm (a second daemon, bam m6)
    and its replies come back unchanged, while the twin arm (bam m4, one MuJoCo model for both joints) takes the
    same writes; both arms reach the goals and the side-by-side log holds both sides of both joints."""
    from servo_hil.daemon.zmq_io import request
    from servo_hil.logs.mcap import read_side_by_side
    from tests.daemon_process import start_cli, stop_cli

    real_rig = robot_rig(tmp_path, "real_arm", lockstep=False, model="m6")
    logs = tmp_path / "logs"
    twin_rig = robot_rig(tmp_path, "twin_arm", lockstep=False, model="m4",
                         bus_extra=f'real = "{real_rig.port}"\nrecord = "{logs}"\n')
    real = start_cli(["run", str(real_rig.path), "--port", real_rig.port], "at " + real_rig.port)
    try:
        mirror = start_cli(["mirror", str(twin_rig.path), "--port", twin_rig.port], "mirroring")
        try:
            with open_dxl(twin_rig.port) as dxl:
                start = {i: dxl.read(i, A.PRESENT_POSITION, signed=True) for i in (1, 2)}
                for i in (1, 2):
                    dxl.write(i, A.TORQUE_ENABLE, 1)
                goal = {1: start[1] + 200, 2: start[2] + 600}   # the shoulder ≈ 0.3 rad, the elbow ≈ 0.92 rad
                for i in (1, 2):
                    dxl.write(i, A.GOAL_POSITION, goal[i])
                time.sleep(2.0)
                end = {i: dxl.read(i, A.PRESENT_POSITION, signed=True) for i in (1, 2)}
            real_state = request(real_rig.cmd, {"cmd": "state"}, 5.0)["state"]
            twin_state = request(twin_rig.cmd, {"cmd": "state"}, 5.0)["state"]
        finally:
            stop_cli(mirror)
    finally:
        stop_cli(real)
    # what the SDK read is the real arm's (Present Position 2048 at 0 rad); both arms went most of the way (a low
    # P gain against gravity)
    for i, joint in ((1, "shoulder"), (2, "elbow")):
        assert (end[i] - CENTRE) / COUNTS_PER_RAD == pytest.approx(real_state[joint]["position_measured"],
                                                                   abs=3 / COUNTS_PER_RAD)
        for state in (real_state, twin_state):
            moved = state[joint]["position"] - (start[i] - CENTRE) / COUNTS_PER_RAD
            assert moved > 0.5 * (goal[i] - start[i]) / COUNTS_PER_RAD, (joint, moved)
    log = read_side_by_side(logs)
    for side in ("real", "sim"):
        for joint in ("shoulder", "elbow"):
            assert len(log[f"/{side}/{joint}/state"]) >= 2, (side, joint)
