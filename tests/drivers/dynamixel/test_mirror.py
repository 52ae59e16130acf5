"""Proxy mirror: bytes pass unchanged both ways, the twin executes the controller's instructions.

The "real" bus is a pty whose far end this test plays (byte-exact checks), or a second servo-hil
daemon (end to end with dynamixel-sdk) in place of hardware.
"""

from __future__ import annotations

import math
import select
import time

import pytest
import serial

from drivers.emulated.dynamixel.bus import DynamixelBus
from drivers.emulated.dynamixel.protocol import (
    Instruction,
    Packet,
    Parser,
    decode_read,
    encode_instruction,
    encode_status,
)
from drivers.hosts.dynamixel_mirror import MirrorServer
from drivers.wire.ports import PtyPort, SerialDevicePort
from firmware_models.dynamixel.control_table import load_model
from firmware_models.dynamixel.servo import DynamixelServo
from hil.joint import KernelJoint
from hil.kernel import Kernel
from hil.params.catalog import entry
from servo_hil.daemon.zmq_io import request
from servo_hil.logs.mcap import SideBySideRecorder, read_side_by_side
from servo_hil.offline.report import report
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params
from tests.daemon_process import start_cli, stop_cli
from tests.drivers.pty_io import read_exactly

from .conftest import DEFAULT_SLACK_MS, SlackPortHandler, mx64_pendulum_rig


def _servo(registers: dict | None = None) -> tuple[DynamixelServo, KernelJoint]:
    """An XM430 (ID 3) on an offline kernel."""
    kernel = Kernel(1, 1e-3)
    spec = entry("xm430_w350").actuator()
    kernel.set_params(0, kernel_params(spec, LoadConfig(mass=0.3, length=0.1), EncoderConfig(), FaultConfig(),
                                       "euler"))
    joint = KernelJoint(kernel)
    return DynamixelServo(load_model("xm430_w350"), joint, {"ID": 3, "Baud Rate": 3} | (registers or {})), joint


def _answer(real_end: PtyPort, real: DynamixelServo | None, timeout: float = 2.0) -> Packet | None:
    """Play the real servo for one instruction: read it off the wire; a Read is answered from `real`'s control
    table (e-manual Protocol 2.0: a status packet with the data), a Write acknowledged and applied."""
    parser, end = Parser(), time.monotonic() + timeout
    while time.monotonic() < end:
        if select.select([real_end.fileno()], [], [], 0.05)[0]:
            for packet in parser.feed(real_end.read(), time.monotonic()):
                if real is None:
                    return packet
                if packet.instruction == Instruction.READ:
                    address, length = decode_read(packet.params)
                    real_end.write(encode_status(packet.id, 0, real.table.read(address, length)))
                return packet
    return None


def _mirror(tmp_path, real: DynamixelServo | None = None, record=None):
    twin, joint = _servo()
    real_end = PtyPort(tmp_path / "real")               # we play the real servo on its master side
    server = MirrorServer(DynamixelBus([twin]), PtyPort(tmp_path / "ctl"),
                          SerialDevicePort(str(tmp_path / "real"), 1_000_000), {3: "elbow"}, record=record)
    server.start()
    while not server.attached.is_set():                # the reads of the twin's state at start
        _answer(real_end, real, timeout=0.2)
    client = serial.Serial(str(tmp_path / "ctl"), 1_000_000, timeout=0)
    return client, real_end, twin, joint, server


@pytest.fixture
def mirror(tmp_path):
    """A mirror whose real bus is a pty this test answers on (silent at start); its twin is an XM430 (ID 3)."""
    client, real_end, twin, joint, server = _mirror(tmp_path)
    yield client, real_end, twin, joint, server
    client.close()
    server.stop()
    real_end.close()


def test_bytes_pass_unchanged_both_ways_and_the_twin_executes(mirror):
    client, real_end, twin, joint, server = mirror
    goal = encode_instruction(3, 0x03, (116).to_bytes(2, "little") + (3000).to_bytes(4, "little"))
    client.write(goal)
    assert read_exactly(real_end.fileno(), len(goal)) == goal          # forwarded as sent
    # whatever the real bus answers reaches the controller as it came, garbage included
    reply = b"\x00\xfe" + encode_status(3, 0x80) + b"\xff\xff"
    real_end.write(reply)
    assert read_exactly(client.fileno(), len(reply)) == reply
    # … and the twin executed the write: its register and its kernel goal follow
    assert twin.table.get("Goal Position") == 3000
    assert joint.u == pytest.approx((3000 - 2048) * 2 * 3.141592653589793 / 4096)
    assert server.forwarded == {"to_real": len(goal), "to_controller": len(reply)}


def test_the_real_line_follows_the_controllers_baud(mirror, tmp_path):
    client, real_end, _, _, _ = mirror
    client.baudrate = 57_600
    ping = encode_instruction(3, 0x01)
    client.write(ping)
    assert read_exactly(real_end.fileno(), len(ping)) == ping
    assert real_end.baud() == 57_600


def test_the_twin_takes_the_real_servos_state_at_start(tmp_path):
    # the real servo was left on by another program: extended position mode, torque on, a goal of +500 counts
    real, _ = _servo({"Operating Mode": 4})
    real.table.set("Torque Enable", 1)
    real.table.set("Profile Velocity", 100)
    real.table.set("Goal Position", 2548)
    record = SideBySideRecorder(tmp_path / "logs")
    client, real_end, twin, joint, server = _mirror(tmp_path, real, record)
    try:
        # before the controller's first packet the twin holds the real servo's state, as its registers say
        assert twin.table.get("Operating Mode") == 4 and twin.table.get("Torque Enable") == 1
        assert twin.table.get("Goal Position") == 2548 and twin.table.get("Profile Velocity") == 100
        assert joint.u == pytest.approx(500 * 2 * math.pi / 4096)     # and so does its kernel goal
        assert server.real_state[3] == {"Operating Mode": 4, "Torque Enable": 1}
    finally:
        client.close()
        server.stop()
        real_end.close()
    events = read_side_by_side(tmp_path / "logs")["/bus/elbow/events"]
    assert [(e["reason"], e["real"], e["sim_before"]) for e in events] == [
        ("attach", {"mode": 4, "enable": 1}, {"mode": 3, "enable": 0})]


def test_a_divergence_resyncs_the_twin_and_the_report_flags_it(tmp_path):
    real, _ = _servo()
    real.table.set("Torque Enable", 1)
    record = SideBySideRecorder(tmp_path / "logs")
    client, real_end, twin, _, server = _mirror(tmp_path, real, record)
    read = encode_instruction(3, Instruction.READ, (64).to_bytes(2, "little") + (72).to_bytes(2, "little"))
    try:
        assert twin.table.get("Torque Enable") == 1
        real.table.set("Torque Enable", 0)           # the real servo switched its torque off by itself
        for k in range(4):                            # the controller polls Torque Enable .. Present Position
            client.write(read)
            assert _answer(real_end, real) is not None
            assert len(read_exactly(client.fileno(), 11 + 72)) == 11 + 72
            end = time.monotonic() + 2.0
            while k == 0 and server.syncs < 2 and time.monotonic() < end:
                time.sleep(0.01)
        assert twin.table.get("Torque Enable") == 0 and server.syncs == 2     # attach, then the divergence
    finally:
        client.close()
        server.stop()
        real_end.close()
    log = read_side_by_side(tmp_path / "logs")
    assert [m["enable"] for m in log["/real/elbow/state"]] == [False] * 4
    assert [m["enable"] for m in log["/sim/elbow/state"]] == [True, False, False, False]
    assert [m["mode"] for m in log["/sim/elbow/state"]] == [3] * 4
    assert [e["reason"] for e in log["/bus/elbow/events"]] == ["attach", "divergence"]
    doc = report(tmp_path / "logs", tmp_path / "report")
    [span] = doc["state_disagreements"]
    assert (span["what"], span["real"], span["sim"], span["start_s"]) == ("enable", 0.0, 1.0, 0.0)
    assert span["end_s"] > 0 and len(doc["warnings"]) == 1 and "enable" in doc["warnings"][0]
    assert "disagree on enable or mode" in (tmp_path / "report" / "report.md").read_text()


def test_a_sync_write_of_torque_makes_the_real_state_unknown(tmp_path):
    """No status packet answers a Sync Write (e-manual Protocol 2.0 §Sync Write): the real servo's Torque Enable is
    unknown from then on, not assumed, until a reply reports it; Operating Mode, not written, stays known."""
    real, _ = _servo()
    real.table.set("Torque Enable", 1)
    client, real_end, twin, _, server = _mirror(tmp_path, real)
    try:
        assert server.real_state[3] == {"Operating Mode": 3, "Torque Enable": 1}
        sync = encode_instruction(0xFE, Instruction.SYNC_WRITE, (64).to_bytes(2, "little") + (1).to_bytes(2, "little")
                                  + bytes([3, 0]))
        client.write(sync)
        assert _answer(real_end, None) is not None
        end = time.monotonic() + 2.0
        while "Torque Enable" in server.real_state[3] and time.monotonic() < end:
            time.sleep(0.01)
        assert server.real_state[3] == {"Operating Mode": 3} and twin.table.get("Torque Enable") == 0
    finally:
        client.close()
        server.stop()
        real_end.close()


def test_sdk_through_the_mirror_drives_the_real_servo_and_its_twin(tmp_path):
    from dynamixel_sdk import GroupSyncRead, PacketHandler

    real_rig, real_cmd = mx64_pendulum_rig(tmp_path, "real", "m6")        # the "real" servo: bam m6
    twin_rig, twin_cmd = mx64_pendulum_rig(tmp_path, "twin", "m1")        # its twin: bam m1
    real = start_cli(["run", str(real_rig), "--port", str(tmp_path / "real")], "at " + str(tmp_path / "real"))
    try:
        mirror = start_cli(["mirror", str(twin_rig), "--real", str(tmp_path / "real"), "--port", str(tmp_path / "ctl"),
                         "--record", str(tmp_path / "logs")], "mirroring")
        try:
            # two daemons and the SDK on 2 cores: a stall past the SDK's 34 ms timeout is the host's, not a lost reply
            port = SlackPortHandler(str(tmp_path / "ctl"), DEFAULT_SLACK_MS)
            assert port.openPort() and port.setBaudRate(1_000_000)
            ph = PacketHandler(2.0)
            assert ph.ping(port, 1)[:2] == (311, 0)
            assert ph.write1ByteTxRx(port, 1, 64, 1) == (0, 0)
            assert ph.write4ByteTxRx(port, 1, 116, 2048 + 600) == (0, 0)
            time.sleep(1.5)
            g = GroupSyncRead(port, ph, 132, 4)
            g.addParam(1)
            assert g.txRxPacket() == 0
            present = g.getData(1, 132, 4)
            real_state = request(real_cmd, {"cmd": "state"})["state"]["mx64"]
            twin_state = request(twin_cmd, {"cmd": "state"})["state"]["mx64"]
            goal = 600 * 2 * 3.141592653589793 / 4096
            assert real_state["goal"] == pytest.approx(goal) and twin_state["goal"] == pytest.approx(goal)
            assert abs(present - (2048 + 600)) < 30                          # the real servo got there
            assert abs(twin_state["position"] - goal) < 0.05                 # and so did its twin
            port.closePort()
        finally:
            stop_cli(mirror)
    finally:
        stop_cli(real)
    # both sides logged at the same instants: the real reply and the twin's registers read with it
    log = read_side_by_side(tmp_path / "logs")
    real_log, sim_log = log["/real/mx64/state"], log["/sim/mx64/state"]
    assert len(real_log) == len(sim_log) >= 1
    assert [m["log_time_ns"] for m in real_log] == [m["log_time_ns"] for m in sim_log]
    assert real_log[-1]["position"] == pytest.approx((present - 2048) * 2 * 3.141592653589793 / 4096)
    assert abs(sim_log[-1]["position"] - twin_state["position"]) < 0.01
    writes = [m for m in log["/bus/mx64/commands"] if m["address"] == 116]
    assert writes and writes[-1]["data"] == (2048 + 600).to_bytes(4, "little").hex()
