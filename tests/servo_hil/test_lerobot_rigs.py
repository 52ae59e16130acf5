"""LeRobot's arms served by `servo-hil run` in lock-step and driven by the vendors' own clients, unchanged:
config/rigs/koch.toml (Koch v1.1 follower: XL430-W250 at IDs 1–2, XL330-M288 at 3–6) with dynamixel-sdk 4.1.0,
config/rigs/so101.toml (SO-101 follower: six STS3215) with feetech-servo-sdk 1.0.0 (`scservo_sdk`). Each client does
what LeRobot's follower does at connect (its `configure`), reads all six servos with GroupSyncRead, and holds a pose
against gravity with torque on; config/rigs/koch_leader.toml (six XL330-M077) is read while the `hand` command moves
it (docs/robots.md, "LeRobot's arms").

Expected values: model numbers from the e-manual control tables (XL430-W250 1060, XL330-M288 1200, XL330-M077
1190) and LeRobot's feetech tables (STS3215 777); register addresses from the same tables; angles from the rigs'
`initial` and the MJCFs' keyframes; 4096 counts per turn with 2048 at 0 rad (e-manual §Present Position(132))."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import get_args

import dynamixel_sdk as sdk
import mujoco
import pytest
import scservo_sdk as scs

from hil.params import catalog
from servo_hil.rig import BusConfig
from tests.drivers.dynamixel.conftest import A, DxlDaemon, DxlLauncher, DxlRig, open_dxl
from tests.servo_hil.daemon import free_port

CONFIG = Path(__file__).resolve().parents[2] / "config"
JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")   # LeRobot's names
COUNTS_PER_RAD = 4096 / (2 * math.pi)
CENTRE = 2048
XL430_PRESENT_LOAD = (126, 2)      # e-manual XL430-W250 §Control Table: Present Load(126), 0.1 % [-1000, 1000]


def lockstep_copy(name: str, directory: Path) -> tuple[Path, str, str]:
    """config/rigs/<name>.toml in `directory`: lock-step, free ZeroMQ ports, MQTT off, fast bus, absolute MJCF path;
    (the copy, its pty path, its command endpoint)."""
    src = CONFIG / "rigs" / f"{name}.toml"
    pub, cmd = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    text = src.read_text().replace('mjcf = "../robots/', f'mjcf = "{CONFIG}/robots/')
    text = re.sub(r"\n\[(zmq|mqtt)\]\n(?:[^\[\n][^\n]*\n)*", "\n", text)   # a leader's own ports go too
    text = text.replace("rate_hz = 1000", f'rate_hz = 1000\nmlockall = false\nlockstep = true\n'
                                          f'[zmq]\npub = "{pub}"\ncommand = "{cmd}"\n[mqtt]\nenabled = false\n', 1)
    text = text.replace("baud = 1000000\n", "baud = 1000000\nfast = true\n")
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path, str(directory / f"tty-{name}"), cmd


def initial_angles(name: str) -> list[float]:
    """θ at power-up of each joint [rad], in LeRobot's order, from the rig file (0 where it gives none)."""
    with (CONFIG / "rigs" / f"{name}.toml").open("rb") as fh:
        rig = tomllib.load(fh)
    by_joint = {a["joint"]: a.get("initial", {}).get("theta", 0.0) for a in rig["actuators"]}
    assert tuple(by_joint) == JOINTS
    return [by_joint[j] for j in JOINTS]


def keyframe(model: str, key: str) -> list[float]:
    m = mujoco.MjModel.from_xml_path(str(CONFIG / "robots" / f"{model}.xml"))
    return [float(m.key(key).qpos[m.joint(j).qposadr[0]]) for j in JOINTS]


def counts(theta: float) -> int:
    return CENTRE + round(theta * COUNTS_PER_RAD)


# ------------------------------------------------------------------------------------------------ Koch (Dynamixel)
class KochLauncher(DxlLauncher):
    banner = re.compile(r"servo-hil: dynamixel bus 'follower' at (\S+) \(IDs ([0-9, ]+?), (\d+) bit/s")


@pytest.fixture
def koch(tmp_path) -> DxlDaemon:
    launcher = KochLauncher(tmp_path)
    path, port, cmd = lockstep_copy("koch", tmp_path)
    yield launcher.start(DxlRig(path, port, cmd, "", True, True, 1000.0))
    launcher.finish()


def sync_read(dxl, ids, item: tuple[int, int]) -> dict[int, int]:
    """One GroupSyncRead of `item` from every servo in `ids`, values signed."""
    reader = sdk.GroupSyncRead(dxl.port, dxl.ph, *item)
    for i in ids:
        assert reader.addParam(i)
    comm = reader.txRxPacket()
    assert comm == sdk.COMM_SUCCESS, dxl.ph.getTxRxResult(comm)
    out = {}
    for i in ids:
        assert reader.isAvailable(i, *item)
        raw = reader.getData(i, *item)
        out[i] = raw - (1 << 8 * item[1]) if raw >= 1 << (8 * item[1] - 1) else raw
    return out


def sync_read_positions(dxl, ids) -> dict[int, int]:
    return sync_read(dxl, ids, A.PRESENT_POSITION)


def sync_write_goals(dxl, goals: dict[int, int]) -> None:
    """GroupSyncWrite of Goal Position, then a read of the last servo's: a Sync Write has no reply, and in lock-step
    the next `step` must not overtake it (the bus answers in order, so the read's reply follows the write)."""
    writer = sdk.GroupSyncWrite(dxl.port, dxl.ph, *A.GOAL_POSITION)
    for i, g in goals.items():
        assert writer.addParam(i, list((g & 0xFFFFFFFF).to_bytes(4, "little")))
    assert writer.txPacket() == sdk.COMM_SUCCESS
    last = max(goals)
    assert dxl.read(last, A.GOAL_POSITION, signed=True) == goals[last]


def test_koch_follower_answers_as_lerobot_expects_and_holds_a_pose(koch) -> None:
    ids = tuple(range(1, 7))
    assert koch.ids == ids
    with open_dxl(koch.rig.port) as dxl:
        models = {i: dxl.ping(i) for i in ids}
        assert {i: (m, c, e) for i, (m, c, e) in models.items()} == \
            {i: (1060 if i <= 2 else 1200, sdk.COMM_SUCCESS, 0) for i in ids}
        assert sync_read(dxl, ids, A.MODEL_NUMBER) == {i: 1060 if i <= 2 else 1200 for i in ids}
        # LeRobot koch_follower.configure(): extended position for the joints, current-based position for the
        # gripper, the elbow's own gains (huggingface/lerobot src/lerobot/robots/koch_follower/koch_follower.py)
        for i in ids[:-1]:
            dxl.write(i, A.OPERATING_MODE, 4)
        dxl.write(6, A.OPERATING_MODE, 5)
        dxl.write(3, A.POSITION_P, 1500)
        dxl.write(3, A.POSITION_I, 0)
        dxl.write(3, A.POSITION_D, 600)
        rest = sync_read_positions(dxl, ids)
        assert rest == {i: counts(t) for i, t in zip(ids, initial_angles("koch"), strict=True)}
        # torque on, then to the pose over the table in 2 s of goals at 30 Hz, as a leader arm streams them (a
        # jump there would drag the folded gripper across the table); gravity pulls the arm forward and down
        hover = {i: counts(t) for i, t in zip(ids, keyframe("koch", "hover"), strict=True)}
        for i in ids:
            dxl.write(i, A.TORQUE_ENABLE, 1)
        for k in range(1, 61):
            sync_write_goals(dxl, {i: round(rest[i] + (hover[i] - rest[i]) * k / 60) for i in ids})
            koch.step(33)
        koch.step(3000)
        hovered = sync_read_positions(dxl, ids)
        load = dxl.read(2, XL430_PRESENT_LOAD, signed=True)
        koch.step(2000)
        held = sync_read_positions(dxl, ids)
        dxl.write(2, A.TORQUE_ENABLE, 0)     # let go of the shoulder: the arm falls onto the table
        koch.step(1000)
        fallen = sync_read_positions(dxl, ids)
    errors = {i: hovered[i] - hover[i] for i in ids}
    # within 0.1 rad of the goal (a proportional loop against gravity leaves a gap: 0.05 rad at the shoulder here),
    # and 2 s later within 5 counts of there (it holds), while a shoulder without torque drops by more than
    # 0.2 rad in 1 s (gravity is real)
    assert all(abs(e) < 0.1 * COUNTS_PER_RAD for e in errors.values()), errors
    assert all(abs(held[i] - hovered[i]) <= 5 for i in ids), (hovered, held)
    assert fallen[2] - held[2] > 0.2 * COUNTS_PER_RAD, (held, fallen)
    # the XL430 carrying the arm reports a load (0.1 % of its maximum torque), as its e-manual describes
    assert 50 <= abs(load) <= 1000, load


class KochLeaderLauncher(DxlLauncher):
    banner = re.compile(r"servo-hil: dynamixel bus 'leader' at (\S+) \(IDs ([0-9, ]+?), (\d+) bit/s")


@pytest.fixture
def koch_leader(tmp_path) -> DxlDaemon:
    launcher = KochLeaderLauncher(tmp_path)
    path, port, cmd = lockstep_copy("koch_leader", tmp_path)
    yield launcher.start(DxlRig(path, port, cmd, "", True, True, 1000.0))
    launcher.finish()


def test_koch_leader_is_read_while_a_hand_moves_it(koch_leader) -> None:
    """LeRobot's koch_leader: joints torque-off, the gripper a spring trigger in current-based position
    (huggingface/lerobot src/lerobot/teleoperators/koch_leader/koch_leader.py configure); a `hand` command moves
    the arm as the operator does (docs/commands.md)."""
    ids = tuple(range(1, 7))
    with open_dxl(koch_leader.rig.port) as dxl:
        assert {i: dxl.ping(i) for i in ids} == {i: (1190, sdk.COMM_SUCCESS, 0) for i in ids}
        for i in ids[:-1]:
            dxl.write(i, A.OPERATING_MODE, 4)
        dxl.write(3, A.DRIVE_MODE, 1)           # LeRobot inverts the leader's elbow
        dxl.write(6, A.OPERATING_MODE, 5)
        rest = initial_angles("koch_leader")
        rest[2] = -rest[2]                      # reverse mode reads the elbow mirrored (e-manual §Drive Mode(10))
        assert sync_read_positions(dxl, ids) == {i: counts(t) for i, t in zip(ids, rest, strict=True)}
        dxl.write(6, A.TORQUE_ENABLE, 1)
        trigger = dxl.read(6, A.PRESENT_POSITION, signed=True)
        dxl.write(6, A.GOAL_POSITION, trigger)
        koch_leader.ok("hand", actuator="shoulder_pan", target=0.5, speed=1.0)
        koch_leader.step(1500)
        panned = sync_read_positions(dxl, ids)[1]
        koch_leader.ok("hand", actuator="gripper", target=-0.5, speed=0.0)   # a finger squeezes the trigger
        koch_leader.step(600)
        squeezed = dxl.read(6, A.PRESENT_POSITION, signed=True)
        koch_leader.ok("hand", actuator="gripper", release=True)
        koch_leader.step(1500)
        released = dxl.read(6, A.PRESENT_POSITION, signed=True)
    # the torque-off pan follows the hand; the trigger's 0.215 N·m servo yields to the finger, then springs back
    assert abs(panned - counts(0.5)) < 0.02 * COUNTS_PER_RAD, panned
    assert abs(squeezed - counts(-0.5)) < 0.1 * COUNTS_PER_RAD, squeezed
    assert abs(released - trigger) < 0.02 * COUNTS_PER_RAD, (trigger, released)


# ------------------------------------------------------------------------------------------------ SO-101 (Feetech)
# STS3215 memory table addresses (LeRobot src/lerobot/motors/feetech/tables.py, STS_SMS_SERIES_CONTROL_TABLE)
RETURN_DELAY, P_COEF, D_COEF, I_COEF, OPERATING_MODE = 7, 21, 22, 23, 33
TORQUE_ENABLE, ACCELERATION, GOAL_POSITION, LOCK, PRESENT_POSITION, MAX_ACCELERATION = 40, 41, 42, 55, 56, 85


def feetech_missing() -> str | None:
    """Why the SO-101 rig cannot run here, or None."""
    if "feetech" not in get_args(BusConfig.model_fields["protocol"].annotation):
        return "the rig schema has no feetech bus yet"
    if "sts3215" not in catalog.names():
        return "the catalog has no sts3215 entry yet"
    return None


class SlackScsPort(scs.PortHandler):
    """scservo_sdk's PortHandler with 500 ms added to each packet timeout (its own is ≈ 34 ms at 1 Mbps), as
    tests/drivers/dynamixel's SlackPortHandler does for dynamixel-sdk: a daemon starved of the CPU for a moment
    on a busy 2-core host is not a missing reply."""

    def setPacketTimeout(self, packet_length):
        super().setPacketTimeout(packet_length)
        self.packet_timeout += 500.0


class So101Launcher(DxlLauncher):
    banner = re.compile(r"servo-hil: feetech bus 'follower' at (\S+) \(IDs ([0-9, ]+?), (\d+) bit/s")


@pytest.fixture
def so101(tmp_path) -> DxlDaemon:
    if reason := feetech_missing():
        pytest.skip(reason)
    launcher = So101Launcher(tmp_path)
    path, port, cmd = lockstep_copy("so101", tmp_path)
    yield launcher.start(DxlRig(path, port, cmd, "", True, True, 1000.0))
    launcher.finish()


def test_so101_follower_answers_as_lerobot_expects_and_holds_its_calibration_pose(so101) -> None:
    ids = tuple(range(1, 7))
    assert so101.ids == ids
    port = SlackScsPort(so101.rig.port)
    assert port.openPort() and port.setBaudRate(1_000_000)
    ph = scs.PacketHandler(0)             # 0: the STS byte order, as sms_sts.py uses it

    def write(sid: int, address: int, value: int, size: int = 1) -> None:
        fn = ph.write1ByteTxRx if size == 1 else ph.write2ByteTxRx
        assert fn(port, sid, address, value) == (scs.COMM_SUCCESS, 0), (sid, address, value)

    def positions() -> dict[int, int]:
        reader = scs.GroupSyncRead(port, ph, PRESENT_POSITION, 2)
        for sid in ids:
            assert reader.addParam(sid)
        assert reader.txRxPacket() == scs.COMM_SUCCESS
        return {sid: reader.getData(sid, PRESENT_POSITION, 2) for sid in ids}

    def goals(values: dict[int, int]) -> None:   # then a read, so that the next `step` cannot overtake it
        writer = scs.GroupSyncWrite(port, ph, GOAL_POSITION, 2)
        for sid, g in values.items():
            assert writer.addParam(sid, [scs.SCS_LOBYTE(g), scs.SCS_HIBYTE(g)])
        assert writer.txPacket() == scs.COMM_SUCCESS
        assert ph.read2ByteTxRx(port, 6, GOAL_POSITION) == (values[6], scs.COMM_SUCCESS, 0)

    try:
        assert {sid: ph.ping(port, sid) for sid in ids} == {sid: (777, scs.COMM_SUCCESS, 0) for sid in ids}
        # LeRobot so_follower.configure() with torque and the EEPROM lock off (FeetechMotorsBus.configure_motors;
        # P 16, I 0, D 32 from SOFollowerConfig)
        for sid in ids:
            write(sid, TORQUE_ENABLE, 0)
            write(sid, LOCK, 0)
            write(sid, RETURN_DELAY, 0)
            write(sid, MAX_ACCELERATION, 254)
            write(sid, ACCELERATION, 254)
            write(sid, OPERATING_MODE, 0)
            write(sid, P_COEF, 16)
            write(sid, I_COEF, 0)
            write(sid, D_COEF, 32)
        rest = positions()
        assert rest == {sid: counts(t) for sid, t in zip(ids, initial_angles("so101"), strict=True)}
        middle = {sid: counts(t) for sid, t in zip(ids, keyframe("so101", "middle"), strict=True)}
        for sid in ids:
            write(sid, TORQUE_ENABLE, 1)
            write(sid, LOCK, 1)
        for k in range(1, 61):             # 2 s of goals at 30 Hz, as a leader arm streams them
            goals({sid: round(rest[sid] + (middle[sid] - rest[sid]) * k / 60) for sid in ids})
            so101.step(33)
        so101.step(3000)
        reached = positions()
        so101.step(2000)
        held = positions()
        write(2, TORQUE_ENABLE, 0)         # let go of the shoulder: the arm falls forward onto the table
        so101.step(1000)
        fallen = positions()
    finally:
        port.closePort()
    errors = {sid: reached[sid] - middle[sid] for sid in ids}
    # the upright L of the calibration pose, forearm level (0.54 N·m of gravity on shoulder_lift, 0.45 N·m on
    # elbow_flex): reached within 0.1 rad, held within 5 counts for 2 s, and a shoulder let go falls
    assert all(abs(e) < 0.1 * COUNTS_PER_RAD for e in errors.values()), errors
    assert all(abs(held[sid] - reached[sid]) <= 5 for sid in ids), (reached, held)
    assert abs(fallen[2] - held[2]) > 0.2 * COUNTS_PER_RAD, (held, fallen)
