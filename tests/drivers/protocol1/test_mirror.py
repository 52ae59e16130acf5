"""Proxy mirror of a Feetech bus: bytes pass unchanged both ways, the twin executes the controller's instructions and
takes the real servo's state.

The "real" bus is a pty whose far end this test plays (byte-exact checks), or a second servo-hil daemon in place of
hardware (end to end with an unchanged scservo_sdk). Addresses: Feetech STS memory table (Operating_Mode 33,
Torque_Enable 40, Goal_Position 42, Present_Position 56).
"""

from __future__ import annotations

import contextlib
import math
import select
import subprocess
import time

import pytest
import scservo_sdk as scs
import serial

from drivers.emulated.protocol1.bus import Protocol1Bus
from drivers.emulated.protocol1.feetech import FEETECH
from drivers.emulated.protocol1.frame import Instruction, Parser, encode_instruction, encode_status
from drivers.hosts.protocol1_mirror import Protocol1Mirror
from drivers.wire.ports import PtyPort, SerialDevicePort
from firmware_models.feetech.control_table import load_model
from firmware_models.feetech.servo import FeetechServo
from hil.joint import KernelJoint
from hil.kernel import Kernel
from hil.params.catalog import entry
from servo_hil.daemon.zmq_io import request
from servo_hil.logs.mcap import SideBySideRecorder, read_side_by_side
from servo_hil.offline.report import report
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params
from tests.daemon_process import SERVO_HIL, assert_one_cli_line, cli_running
from tests.drivers.protocol1.conftest import ScsSlackPort, write_sts_rig
from tests.drivers.pty_io import read_exactly
from tests.firmware_models.feetech.servo_kit import sts_servo

MODE, TORQUE, GOAL, PRESENT = 33, 40, 42, 56
STEP_RAD = 2 * math.pi / 4096


def _answer(real_end: PtyPort, real, timeout: float = 2.0):
    """Play the real servo for one instruction: read it off the wire; answer a READ from `real`'s table (Feetech SCS
    protocol §READ: a status packet with the data), apply and acknowledge a WRITE; the instruction, or None."""
    parser, end = Parser(), time.monotonic() + timeout
    while time.monotonic() < end:
        if select.select([real_end.fileno()], [], [], 0.05)[0]:
            for packet in parser.feed(real_end.read(), time.monotonic()):
                if real is not None and packet.instruction == Instruction.READ:
                    address, length = packet.params
                    real_end.write(encode_status(packet.id, 0, real.table.read(address, length)))
                elif real is not None and packet.instruction == Instruction.WRITE:
                    real.write(packet.params[0], packet.params[1:])
                    real_end.write(encode_status(packet.id, 0))
                return packet
    return None


def _mirror(tmp_path, real=None, record=None):
    twin = sts_servo({"ID": 3})
    real_end = PtyPort(tmp_path / "real")               # we play the real servo on its master side
    server = Protocol1Mirror(Protocol1Bus(FEETECH, [twin]), PtyPort(tmp_path / "ctl"),
                             SerialDevicePort(str(tmp_path / "real"), 1_000_000), {3: "wrist"}, record=record)
    server.start()
    while not server.attached.is_set() and server.is_alive():    # the read of the twin's state at start
        _answer(real_end, real, timeout=0.2)
    client = serial.Serial(str(tmp_path / "ctl"), 1_000_000, timeout=0)
    return client, real_end, twin, server


@contextlib.contextmanager
def mirror_of(tmp_path, real=None, record=None):
    client, real_end, twin, server = _mirror(tmp_path, real, record)
    try:
        yield client, real_end, twin, server
    finally:
        client.close()
        server.stop()
        real_end.close()


def test_bytes_pass_unchanged_both_ways_and_the_twin_executes(tmp_path):
    with mirror_of(tmp_path) as (client, real_end, twin, server):
        goal = encode_instruction(3, Instruction.WRITE, bytes((GOAL,)) + (3000).to_bytes(2, "little"))
        client.write(goal)
        assert read_exactly(real_end.fileno(), len(goal)) == goal          # forwarded as sent
        # whatever the real bus answers reaches the controller as it came, garbage and error bits included
        reply = b"\x00\xfe" + encode_status(3, 0x20) + b"\xff\xff"
        real_end.write(reply)
        assert read_exactly(client.fileno(), len(reply)) == reply
        assert twin.table.get("Goal_Position") == 3000                      # the twin executed the write
        assert server.forwarded == {"to_real": len(goal), "to_controller": len(reply)}
        client.baudrate = 115_200                     # the real line follows the controller's speed
        ping = encode_instruction(3, Instruction.PING)
        client.write(ping)
        assert read_exactly(real_end.fileno(), len(ping)) == ping
        assert real_end.baud() == 115_200


def test_the_twin_takes_the_real_servos_state_at_start(tmp_path):
    # the real servo was left on by another program: torque on, a goal of +500 steps, a slower acceleration
    real = sts_servo({"ID": 3})
    real.write(TORQUE, b"\x01")
    real.write(41, bytes((20,)))
    real.write(GOAL, (2548).to_bytes(2, "little"))
    record = SideBySideRecorder(tmp_path / "logs")
    with mirror_of(tmp_path, real, record) as (_, _, twin, server):
        assert twin.table.get("Torque_Enable") == 1 and twin.table.get("Goal_Position") == 2548
        assert twin.table.get("Acceleration") == 20
        assert twin.joint.u == pytest.approx(500 * STEP_RAD, abs=2 * STEP_RAD)   # and so does its kernel goal
        assert server.real_state[3] == {"Operating_Mode": 0, "Torque_Enable": 1}
    events = read_side_by_side(tmp_path / "logs")["/bus/wrist/events"]
    assert [(e["reason"], e["real"], e["sim_before"]) for e in events] == [
        ("attach", {"mode": 0, "enable": 1}, {"mode": 0, "enable": 0})]


def test_a_divergence_resyncs_the_twin_and_the_report_flags_it(tmp_path):
    real = sts_servo({"ID": 3})
    real.write(TORQUE, b"\x01")
    record = SideBySideRecorder(tmp_path / "logs")
    read = encode_instruction(3, Instruction.READ, bytes((TORQUE, PRESENT + 2 - TORQUE)))   # Torque_Enable..position
    with mirror_of(tmp_path, real, record) as (client, real_end, twin, server):
        assert twin.table.get("Torque_Enable") == 1
        real.write(TORQUE, b"\x00")                   # the real servo's torque went off (an unloading protection)
        for k in range(4):
            client.write(read)
            assert _answer(real_end, real) is not None
            assert len(read_exactly(client.fileno(), 6 + 18)) == 6 + 18
            end = time.monotonic() + 2.0
            while k == 0 and server.syncs < 2 and time.monotonic() < end:
                time.sleep(0.01)
        assert twin.table.get("Torque_Enable") == 0 and server.syncs == 2     # attach, then the divergence
    log = read_side_by_side(tmp_path / "logs")
    assert [m["enable"] for m in log["/real/wrist/state"]] == [False] * 4
    assert [m["enable"] for m in log["/sim/wrist/state"]] == [True, False, False, False]
    assert [e["reason"] for e in log["/bus/wrist/events"]] == ["attach", "divergence"]
    doc = report(tmp_path / "logs", tmp_path / "report")
    [span] = doc["state_disagreements"]
    assert (span["what"], span["real"], span["sim"]) == ("enable", 0.0, 1.0)


def test_a_sync_write_of_torque_makes_the_real_state_unknown(tmp_path):
    """No status packet answers a SYNC WRITE (Feetech SCS protocol §SYNC WRITE): the real servo's Torque_Enable is
    unknown from then on, until a reply reports it; Operating_Mode, not written, stays known."""
    real = sts_servo({"ID": 3})
    real.write(TORQUE, b"\x01")
    with mirror_of(tmp_path, real) as (client, real_end, twin, server):
        assert server.real_state[3] == {"Operating_Mode": 0, "Torque_Enable": 1}
        client.write(encode_instruction(0xFE, Instruction.SYNC_WRITE, bytes((TORQUE, 1, 3, 0))))
        assert _answer(real_end, None) is not None
        end = time.monotonic() + 2.0
        while "Torque_Enable" in server.real_state[3] and time.monotonic() < end:
            time.sleep(0.01)
        assert server.real_state[3] == {"Operating_Mode": 0} and twin.table.get("Torque_Enable") == 0


def test_scservo_sdk_through_the_mirror_drives_the_real_servos_and_their_twins(tmp_path):
    real_rig = write_sts_rig(tmp_path, "real", ids=(1, 2), fast=True)
    twin_rig = write_sts_rig(tmp_path, "twin", ids=(1, 2), fast=True)
    with cli_running(["run", str(real_rig.path), "--port", str(tmp_path / "real")], "at " + str(tmp_path / "real")), \
            cli_running(["mirror", str(twin_rig.path), "--real", str(tmp_path / "real"), "--port",
                         str(tmp_path / "ctl"), "--record", str(tmp_path / "logs")], "mirroring"):
        port, ph = ScsSlackPort(str(tmp_path / "ctl")), scs.PacketHandler(0)
        assert port.openPort() and port.setBaudRate(1_000_000)
        assert ph.ping(port, 2) == (777, scs.COMM_SUCCESS, 0)
        goals = {1: 2048 + 400, 2: 2048 - 300}
        writer = scs.GroupSyncWrite(port, ph, GOAL, 2)      # LeRobot's way: torque on, then a Sync Write
        for sid, goal in goals.items():
            assert ph.write1ByteTxRx(port, sid, TORQUE, 1) == (scs.COMM_SUCCESS, 0)
            assert writer.addParam(sid, [scs.SCS_LOBYTE(goal), scs.SCS_HIBYTE(goal)])
        assert writer.txPacket() == scs.COMM_SUCCESS
        time.sleep(1.5)
        reader = scs.GroupSyncRead(port, ph, PRESENT, 4)    # Present_Position + Present_Speed
        for sid in goals:
            assert reader.addParam(sid)
        for _ in range(3):
            assert reader.txRxPacket() == scs.COMM_SUCCESS
        present = {sid: reader.getData(sid, PRESENT, 2) for sid in goals}
        real_state, twin_state = (request(r.cmd, {"cmd": "state"})["state"] for r in (real_rig, twin_rig))
        port.closePort()
    for k, (sid, goal) in enumerate(goals.items()):
        joint = f"j{k}"
        assert abs(present[sid] - goal) <= 15                              # the real servo got there
        assert real_state[joint]["goal"] == pytest.approx((goal - 2048) * STEP_RAD, abs=2 * STEP_RAD)
        assert abs(twin_state[joint]["position"] - (goal - 2048) * STEP_RAD) < 0.05     # and so did its twin
    # both sides logged at the same instants: the real reply and the twin's registers read with it
    log = read_side_by_side(tmp_path / "logs")
    real_log, sim_log = log["/real/j1/state"], log["/sim/j1/state"]
    assert len(real_log) == len(sim_log) >= 3
    assert [m["log_time_ns"] for m in real_log] == [m["log_time_ns"] for m in sim_log]
    assert real_log[-1]["position"] == pytest.approx((present[2] - 2048) * STEP_RAD)
    assert abs(sim_log[-1]["position"] - twin_state["j1"]["position"]) < 0.02
    writes = [m for m in log["/bus/j1/commands"] if m["address"] == GOAL]
    assert writes and writes[-1] == {**writes[-1], "instruction": "SYNC_WRITE",
                                     "data": goals[2].to_bytes(2, "little").hex()}
    doc = report(tmp_path / "logs", tmp_path / "report")                # `servo-hil report` reads the MCAP
    assert {r["joint"] for r in doc["rows"]} == {"j0", "j1"} and not doc["state_disagreements"]


def test_a_real_bus_that_does_not_open_is_one_line_and_leaves_no_log_folder(tmp_path):
    rig = write_sts_rig(tmp_path, "twin")
    res = subprocess.run([*SERVO_HIL, "mirror", str(rig.path), "--real", str(tmp_path / "absent"), "--port",
                          str(tmp_path / "ctl"), "--record", str(tmp_path / "logs")], capture_output=True, text=True,
                         timeout=60)
    assert_one_cli_line(res, "buses (sts)", "real = ", "absent")
    assert not (tmp_path / "logs").exists()


def test_an_scs_twin_big_endian_without_operating_mode(tmp_path):
    """An SCS0009 (config/feetech/scs0009.toml: words high byte first, no Operating_Mode): the twin takes the real
    servo's torque and goal at start, and a real reply is logged in SI, decoded in its byte order."""
    spec = load_model("scs0009")
    p = kernel_params(entry("scs0009").actuator(), LoadConfig(mass=0.05, length=0.05), EncoderConfig(), FaultConfig(),
                      "bam")

    def scs_servo() -> FeetechServo:
        kernel = Kernel(1, 1e-3)
        kernel.set_params(0, p)
        return FeetechServo(spec, KernelJoint(kernel), {"ID": 3})

    real, twin = scs_servo(), scs_servo()
    real.write(TORQUE, b"\x01")
    real.write(GOAL, (612).to_bytes(2, "big"))
    record = SideBySideRecorder(tmp_path / "logs")
    real_end = PtyPort(tmp_path / "real")
    server = Protocol1Mirror(Protocol1Bus(FEETECH, [twin]), PtyPort(tmp_path / "ctl"),
                             SerialDevicePort(str(tmp_path / "real"), 1_000_000), {3: "gripper"}, record=record)
    server.start()
    try:
        while not server.attached.is_set() and server.is_alive():
            _answer(real_end, real, timeout=0.2)
        assert twin.table.get("Torque_Enable") == 1 and twin.table.get("Goal_Position") == 612
        assert server.real_state[3] == {"Torque_Enable": 1}
        client = serial.Serial(str(tmp_path / "ctl"), 1_000_000, timeout=0)
        client.write(encode_instruction(3, Instruction.READ, bytes((PRESENT, 2))))
        assert _answer(real_end, real) is not None and len(read_exactly(client.fileno(), 8)) == 8
        client.close()
    finally:
        server.stop()
        real_end.close()
    log = read_side_by_side(tmp_path / "logs")
    [state] = log["/real/gripper/state"]
    present = int.from_bytes(real.table.read(PRESENT, 2), "big")
    assert state["position"] == pytest.approx(real.decode_state(PRESENT, present.to_bytes(2, "big"))["position"])
    assert state["enable"] is True and "mode" not in state and "mode" not in log["/sim/gripper/state"][0]
