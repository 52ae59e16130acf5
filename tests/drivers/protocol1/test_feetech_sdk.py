"""Unchanged Feetech clients against a running daemon's pty: feetech-servo-sdk 1.0.0 (`scservo_sdk`, as its ping,
read/write and sync read/write examples use it) and rustypot's `Sts3215PyController`; the wire time of a reply;
and the rig errors a user gets as one line.

Expected values: Feetech STS memory table and LeRobot's tables.py (addresses, model number 777, sign bits);
the wire time of N bytes at B bit/s is 10·N/B (8N1)."""

from __future__ import annotations

import statistics
import subprocess
import time

import pytest
import rustypot
import scservo_sdk as scs
import serial

from drivers.emulated.protocol1.frame import encode_instruction
from tests.daemon_process import SERVO_HIL, assert_one_cli_line
from tests.drivers.protocol1.conftest import write_sts_rig

PRESENT_POSITION, GOAL_POSITION, TORQUE_ENABLE, MODEL_NUMBER, RETURN_DELAY = 56, 42, 40, 3, 7


@pytest.fixture(scope="module")
def sts(module_launcher):
    rig = write_sts_rig(module_launcher.dir, "sts_sdk", ids=(1, 2, 3), registers={3: "Return_Delay_Time = 100"})
    return module_launcher.start(rig)


def sdk(path: str, baud: int = 1_000_000):
    port = scs.PortHandler(path)
    assert port.openPort() and port.setBaudRate(baud)
    return port, scs.PacketHandler(0)      # 0: STS byte order (scs.SCS_SETEND), as sms_sts.py uses it


def test_ping_read_write_with_scservo_sdk(sts):
    port, ph = sdk(sts.rig.port)
    try:
        for sid in (1, 2, 3):
            model, comm, error = ph.ping(port, sid)
            assert (model, comm, error) == (777, scs.COMM_SUCCESS, 0)
        assert ph.ping(port, 9)[1] == scs.COMM_RX_TIMEOUT
        assert ph.read2ByteTxRx(port, 1, PRESENT_POSITION) == (2048, scs.COMM_SUCCESS, 0)
        assert ph.read1ByteTxRx(port, 3, RETURN_DELAY) == (100, scs.COMM_SUCCESS, 0)
        assert ph.write1ByteTxRx(port, 1, TORQUE_ENABLE, 1) == (scs.COMM_SUCCESS, 0)
        assert ph.write2ByteTxRx(port, 1, GOAL_POSITION, 2048 + 300) == (scs.COMM_SUCCESS, 0)
        time.sleep(1.0)
        pos, comm, error = ph.read2ByteTxRx(port, 1, PRESENT_POSITION)
        assert comm == scs.COMM_SUCCESS and abs(pos - 2348) <= 15
    finally:
        port.closePort()


def test_group_sync_write_and_read_as_the_sdk_examples_do(sts):
    port, ph = sdk(sts.rig.port)
    try:
        writer = scs.GroupSyncWrite(port, ph, GOAL_POSITION, 2)
        for sid, goal in ((2, 1848), (3, 2248)):
            assert writer.addParam(sid, [scs.SCS_LOBYTE(goal), scs.SCS_HIBYTE(goal)])
        for sid in (2, 3):
            ph.write1ByteTxRx(port, sid, TORQUE_ENABLE, 1)
        assert writer.txPacket() == scs.COMM_SUCCESS
        time.sleep(1.0)
        reader = scs.GroupSyncRead(port, ph, PRESENT_POSITION, 2)
        for sid in (1, 2, 3):
            assert reader.addParam(sid)
        assert reader.txRxPacket() == scs.COMM_SUCCESS
        got = {sid: reader.getData(sid, PRESENT_POSITION, 2) for sid in (1, 2, 3)}
        assert abs(got[2] - 1848) <= 15 and abs(got[3] - 2248) <= 15
    finally:
        port.closePort()


def test_rustypot_sts3215_controller(sts):
    c = rustypot.Sts3215PyController(sts.rig.port, 1_000_000, 0.5)
    assert c.ping(2) and not c.ping(8)
    assert c.read_model_number(2) == [777]
    assert c.broadcast_scan() == {1: 777, 2: 777, 3: 777}
    c.write_torque_enable(2, True)
    c.write_goal_position(2, -0.4)                       # rad, rustypot's unit: (raw − 2048)·2π/4096
    time.sleep(1.0)
    assert c.sync_read_present_position([2])[0] == pytest.approx(-0.4, abs=0.03)


def _round_trips(path: str, baud: int, n: int = 40) -> list[float]:
    """Wall time [s] from the write of a PING of ID 1 to the last byte of its 6-byte reply, `n` times."""
    out = []
    with serial.Serial(path, baud, timeout=0.5) as line:
        ping = encode_instruction(1, 0x01)
        for _ in range(n):
            line.reset_input_buffer()
            t0 = time.perf_counter()
            line.write(ping)
            reply = line.read(6)
            out.append(time.perf_counter() - t0)
            assert len(reply) == 6 and reply[:3] == b"\xff\xff\x01"
            time.sleep(0.002)
    return out


@pytest.mark.parametrize("baud", [1_000_000, 115_200])
def test_replies_are_paced_at_the_baud_rate_after_the_return_delay(module_launcher, baud):
    rig = write_sts_rig(module_launcher.dir, f"sts_wire_{baud}", ids=(1,), baud=baud)
    d = module_launcher.start(rig)
    try:
        times = _round_trips(rig.port, baud)
    finally:
        d.terminate()
    wire = 12 * 10 / baud + 500e-6     # 6-byte ping + 6-byte reply at 8N1, Return_Delay_Time 250 × 2 µs
    median = statistics.median(times)
    print(f"ping round trip at {baud} bit/s: median {median * 1e3:.3f} ms, min {min(times) * 1e3:.3f} ms, "
          f"wire + return delay {wire * 1e3:.3f} ms")
    assert min(times) >= wire * 0.97          # never faster than the wire (3 %: clock granularity)
    assert median < wire + 3e-3               # and not far behind it


def test_eeprom_written_with_lock_0_survives_a_restart_through_the_state_file(module_launcher, tmp_path):
    state = tmp_path / "sts.eeprom.toml"
    rig = write_sts_rig(module_launcher.dir, "sts_eeprom", ids=(1,), fast=True, eeprom=state)
    for p_written, lock in ((20, 1), (16, 0)):
        d = module_launcher.start(rig)
        port, ph = sdk(rig.port)
        try:
            assert ph.write1ByteTxRx(port, 1, 55, lock) == (scs.COMM_SUCCESS, 0)        # Lock
            assert ph.write1ByteTxRx(port, 1, 21, p_written) == (scs.COMM_SUCCESS, 0)   # P_Coefficient
        finally:
            port.closePort()
        assert d.terminate() == 0
    d = module_launcher.start(rig)
    port, ph = sdk(rig.port)
    try:
        assert ph.read1ByteTxRx(port, 1, 21) == (16, scs.COMM_SUCCESS, 0)   # 20 (locked) was not kept, 16 was
    finally:
        port.closePort()
        d.terminate()


def test_two_servos_on_one_id_is_one_line(tmp_path):
    rig = write_sts_rig(tmp_path, "dup", ids=(4, 4))
    res = subprocess.run([*SERVO_HIL, "run", str(rig.path)], capture_output=True, text=True, timeout=60)
    assert_one_cli_line(res, "id 4", "twice")


def test_a_baud_the_servo_lacks_is_one_line(tmp_path):
    rig = write_sts_rig(tmp_path, "baud", ids=(1,), baud=9_600)
    res = subprocess.run([*SERVO_HIL, "run", str(rig.path)], capture_output=True, text=True, timeout=60)
    assert_one_cli_line(res, "baud 9600", "Baud_Rate")


def test_lock_step_the_shaft_moves_only_with_the_daemons_steps(module_launcher):
    rig = write_sts_rig(module_launcher.dir, "sts_lockstep", ids=(1,), fast=True, lockstep=True)
    d = module_launcher.start(rig)
    port, ph = sdk(rig.port)
    try:
        assert ph.write1ByteTxRx(port, 1, TORQUE_ENABLE, 1) == (scs.COMM_SUCCESS, 0)
        assert ph.write2ByteTxRx(port, 1, GOAL_POSITION, 2048 + 500) == (scs.COMM_SUCCESS, 0)
        d.ok("step", n=1)
        start = ph.read2ByteTxRx(port, 1, PRESENT_POSITION)[0]
        time.sleep(0.3)                                     # wall time alone moves nothing
        assert ph.read2ByteTxRx(port, 1, PRESENT_POSITION)[0] == start
        seen = [start]
        for _ in range(5):
            d.ok("step", n=100)
            seen.append(ph.read2ByteTxRx(port, 1, PRESENT_POSITION)[0])
        assert seen[0] < seen[1] < seen[2] and max(seen) > start + 300   # then it may overshoot and settle
        d.ok("step", n=1500)
        assert abs(ph.read2ByteTxRx(port, 1, PRESENT_POSITION)[0] - 2548) <= 15
    finally:
        port.closePort()
        d.terminate()


def test_garbage_on_the_pty_never_stops_the_bus(sts):
    """Random bytes and damaged frames through the pty (bounded: 10⁴ inputs); the servos answer afterwards and the
    daemon's log has no traceback (the launcher checks it at teardown)."""
    import random

    rng = random.Random(3)
    with serial.Serial(sts.rig.port, 1_000_000, timeout=0) as line:
        for k in range(10_000):
            if k % 3:
                data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12)))
            else:
                params = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 6)))
                data = bytearray(encode_instruction(rng.choice([1, 2, 3, 0xFE]), rng.choice([1, 2, 0x06, 0x7F, 0x82]),
                                                    params))
                data[rng.randrange(len(data))] ^= 0x10
            line.write(bytes(data))
            if k % 500 == 0:
                line.reset_input_buffer()
        time.sleep(0.3)
        line.reset_input_buffer()
    assert sts.alive
    port, ph = sdk(sts.rig.port)
    try:
        assert ph.ping(port, 1)[:2] == (777, scs.COMM_SUCCESS)
    finally:
        port.closePort()
