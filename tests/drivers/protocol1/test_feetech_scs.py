"""A Feetech SCS0009 (SCS series: big-endian words, 1024 potentiometer steps over 300°) on a running daemon's pty,
driven by feetech-servo-sdk 1.0.0's SCS packet handler (`PacketHandler(1)`, the SCS byte order, as its scscl
examples and LeRobot's MODEL_PROTOCOL 1 use it).

Expected values: LeRobot's tables.py (model number 1284, addresses), Feetech's SCSCL memory table (END = 1, high byte
first; angle limits 20..1003), 300°/1024 per step; never the code under test."""

from __future__ import annotations

import math
import time

import pytest
import scservo_sdk as scs

from tests.drivers.protocol1.conftest import ScsSlackPort, write_sts_rig

MODEL_NUMBER, MIN_LIMIT, MAX_LIMIT, TORQUE_ENABLE, GOAL_POSITION, LOCK, PRESENT_POSITION = 3, 9, 11, 40, 42, 48, 56
P_COEFFICIENT = 21
STEP_RAD = math.radians(300.0) / 1024


@pytest.fixture(scope="module")
def scs_daemon(module_launcher):
    rig = write_sts_rig(module_launcher.dir, "scs_sdk", ids=(1, 2))
    rig.path.write_text(rig.path.read_text().replace('catalog = "sts3215"\nmodel = "m1"\n', 'catalog = "scs0009"\n'))
    return module_launcher.start(rig)


@pytest.fixture
def sdk(scs_daemon):
    port = ScsSlackPort(scs_daemon.rig.port)
    assert port.openPort() and port.setBaudRate(1_000_000)
    try:
        yield port, scs.PacketHandler(1)          # 1: SCS byte order (scs.SCS_SETEND)
    finally:
        port.closePort()
        scs.PacketHandler(0)                      # the SDK's byte order is a module global: back to STS


def test_ping_reads_the_model_number_high_byte_first(sdk):
    port, ph = sdk
    assert ph.ping(port, 1) == (1284, scs.COMM_SUCCESS, 0)
    raw, comm, _ = ph.readTxRx(port, 2, MODEL_NUMBER, 2)
    assert comm == scs.COMM_SUCCESS and bytes(raw) == bytes([0x05, 0x04])     # 1284 = 0x0504, big-endian
    assert ph.read2ByteTxRx(port, 1, MIN_LIMIT)[:2] == (20, scs.COMM_SUCCESS)
    assert ph.read2ByteTxRx(port, 1, MAX_LIMIT)[:2] == (1003, scs.COMM_SUCCESS)
    assert ph.read2ByteTxRx(port, 1, PRESENT_POSITION)[:2] == (512, scs.COMM_SUCCESS)   # hanging: mid-range


def test_a_goal_moves_the_servo_by_300_degrees_over_1024_steps(sdk, scs_daemon):
    port, ph = sdk
    assert ph.write1ByteTxRx(port, 1, TORQUE_ENABLE, 1) == (scs.COMM_SUCCESS, 0)
    assert ph.write2ByteTxRx(port, 1, GOAL_POSITION, 512 + 100) == (scs.COMM_SUCCESS, 0)
    raw, comm, _ = ph.readTxRx(port, 1, GOAL_POSITION, 2)
    assert comm == scs.COMM_SUCCESS and bytes(raw) == (612).to_bytes(2, "big")
    time.sleep(1.5)
    pos, comm, _ = ph.read2ByteTxRx(port, 1, PRESENT_POSITION)
    # P 15 holds the 0.1 kg pendulum at 0.1 m, 29° from hanging, with a sag: 0.048 N·m of gravity against
    # 0.226 N·m × 15 × 0.166 per rad is 0.085 rad, 17 steps (and the dead zone of 2)
    assert comm == scs.COMM_SUCCESS and 612 - 25 <= pos <= 612 - 10, pos
    theta = scs_daemon.ok("state", actuator="j0")["state"]["j0"]["position"]
    assert theta == pytest.approx((pos - 512) * STEP_RAD, abs=1.5 * STEP_RAD)   # 0.293° a step, not 0.352°
    assert ph.write2ByteTxRx(port, 1, GOAL_POSITION, 1020) == (scs.COMM_SUCCESS, 0)   # past Max_Position_Limit
    time.sleep(2.0)
    pos, comm, _ = ph.read2ByteTxRx(port, 1, PRESENT_POSITION)
    # held at the 1003 limit, less the sag of P 15 under the pendulum at 144° from hanging: 0.058 N·m of gravity
    # against 0.226 N·m × 15 × 0.166 per rad is 0.10 rad, 20 steps
    assert comm == scs.COMM_SUCCESS and 1003 - 30 <= pos <= 1003, pos
    assert ph.write1ByteTxRx(port, 1, TORQUE_ENABLE, 0) == (scs.COMM_SUCCESS, 0)


def test_lock_at_48_decides_what_a_reset_keeps(sdk, scs_daemon):
    port, ph = sdk
    assert ph.write1ByteTxRx(port, 2, P_COEFFICIENT, 25) == (scs.COMM_SUCCESS, 0)      # Lock 1: in effect only
    assert ph.read1ByteTxRx(port, 2, P_COEFFICIENT)[0] == 25
    scs_daemon.ok("reset")                                                             # a power cycle
    assert ph.read1ByteTxRx(port, 2, P_COEFFICIENT)[0] == 15
    assert ph.write1ByteTxRx(port, 2, LOCK, 0) == (scs.COMM_SUCCESS, 0)
    assert ph.write1ByteTxRx(port, 2, P_COEFFICIENT, 25) == (scs.COMM_SUCCESS, 0)      # Lock 0: saved
    scs_daemon.ok("reset")
    assert ph.read1ByteTxRx(port, 2, P_COEFFICIENT)[0] == 25
