"""Bus faults on a Feetech bus, injected over the daemon's ZeroMQ command socket as on a Dynamixel bus (drop,
corrupt, delay, wrong_baud), seen by an unchanged scservo_sdk; and the ZeroMQ state stream carrying the Feetech
joints. A 2-byte read of Present_Position (56) is an 8-byte instruction and an 8-byte status packet, 10 bit times a
byte (8N1); the rig's Return_Delay_Time is 0 (Feetech STS memory table, address 7)."""

from __future__ import annotations

import re
import statistics
import time

import pytest
import scservo_sdk as scs

from servo_hil.daemon.telemetry import StealMeter
from tests.drivers.protocol1.conftest import ScsSlackPort, write_sts_rig
from tests.servo_hil.daemon import Stream

PRESENT_POSITION, GOAL_POSITION, TORQUE_ENABLE = 56, 42, 40
IDS = (1, 2, 3)
JOINT = {1: "j0", 2: "j1", 3: "j2"}
OK, TIMEOUT, CORRUPT = scs.COMM_SUCCESS, scs.COMM_RX_TIMEOUT, scs.COMM_RX_CORRUPT
READ_WIRE_S = (8 + 8) * 10 / 1_000_000


@pytest.fixture(scope="module")
def sts(module_launcher):
    rig = write_sts_rig(module_launcher.dir, "sts_faults", ids=IDS, registers={i: "Return_Delay_Time = 0" for i in IDS})
    return module_launcher.start(rig)


@pytest.fixture
def sdk(sts):
    port = ScsSlackPort(sts.rig.port)
    assert port.openPort() and port.setBaudRate(1_000_000)
    yield port, scs.PacketHandler(0)
    port.closePort()
    assert sts.alive, sts.stderr()
    for joint in JOINT.values():
        for fault in ("drop", "corrupt", "delay", "wrong_baud"):
            sts.ok("clear_fault", actuator=joint, fault=fault)


def _read(sdk, sid: int) -> int:
    port, ph = sdk
    return ph.read2ByteTxRx(port, sid, PRESENT_POSITION)[1]


def _round_trips(sdk, sid: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        assert _read(sdk, sid) == OK
        out.append(time.perf_counter() - t)
    return out


def test_wrong_baud_silences_one_servo_until_cleared(sts, sdk):
    port, ph = sdk
    sts.ok("inject_fault", actuator="j1", fault="wrong_baud", args={})
    assert "wrong_baud" in sts.ok("state", actuator="j1")["state"]["j1"]["faults"]
    assert ph.ping(port, 2)[1] == TIMEOUT and _read(sdk, 2) == TIMEOUT
    assert [ph.ping(port, i)[:2] for i in (1, 3)] == [(777, OK)] * 2
    reader = scs.GroupSyncRead(port, ph, PRESENT_POSITION, 2)
    for i in IDS:
        assert reader.addParam(i)
    assert reader.txRxPacket() != OK, "a sync read over a silent servo fails"
    sts.ok("clear_fault", actuator="j1", fault="wrong_baud")
    assert ph.ping(port, 2)[:2] == (777, OK) and reader.txRxPacket() == OK


def test_corrupt_replies_fail_the_sdks_checks(sts, sdk):
    sts.ok("inject_fault", actuator="j0", fault="corrupt", args={"probability": 1.0})
    results = [_read(sdk, 1) for _ in range(12)]
    assert OK not in results and set(results) <= {CORRUPT, TIMEOUT}, results
    assert CORRUPT in results, "a flipped byte mostly lands in the body: the checksum fails"
    assert _read(sdk, 2) == OK, "the other servos answer cleanly"
    sts.ok("clear_fault", actuator="j0", fault="corrupt")
    assert _read(sdk, 1) == OK


def test_drop_leaves_the_sdk_without_a_reply(sts, sdk):
    sts.ok("inject_fault", actuator="j2", fault="drop", args={"probability": 1.0})
    assert _read(sdk, 3) == TIMEOUT and _read(sdk, 1) == OK
    sts.ok("clear_fault", actuator="j2", fault="drop")
    assert _read(sdk, 3) == OK


def test_delay_adds_its_time_to_one_servo(sts, sdk):
    steal = StealMeter()
    sts.ok("inject_fault", actuator="j0", fault="delay", args={"seconds": 0.01})
    # the delayed servo and another one read in turns: a load that slows every exchange slows both
    pairs = [(_round_trips(sdk, 1, 1)[0], _round_trips(sdk, 2, 1)[0]) for _ in range(20)]
    delayed, other = [a for a, _ in pairs], [b for _, b in pairs]
    figures = (f"read2ByteTxRx median / fastest: delayed {statistics.median(delayed) * 1e3:.2f} / "
               f"{min(delayed) * 1e3:.2f} ms, other {statistics.median(other) * 1e3:.2f} / {min(other) * 1e3:.2f} ms;"
               f" hypervisor steal {100 * steal.fraction():.1f} %")
    print(f"\n{figures}")
    assert min(delayed) >= 0.99 * (READ_WIRE_S + 0.01), figures      # never sooner than wire + the fault's 10 ms
    assert min(delayed) - min(other) < 0.013, figures                 # generous: a loaded 2-core host
    assert min(other) < READ_WIRE_S + 3e-3, f"only the faulted servo is late; {figures}"


def test_the_state_stream_carries_the_feetech_joints(sts, sdk):
    port, ph = sdk
    pub = re.search(r'pub = "([^"]+)"', sts.rig.path.read_text()).group(1)
    with Stream(pub, "sts_faults/") as stream:
        first = {stream.first().joint for _ in range(30)}
        assert first == set(JOINT.values())
        start = stream.latest("j2")["position"]
        assert ph.write1ByteTxRx(port, 3, TORQUE_ENABLE, 1) == (OK, 0)
        assert ph.write2ByteTxRx(port, 3, GOAL_POSITION, 2048 + 500) == (OK, 0)
        goal = 500 * 2 * 3.141592653589793 / 4096
        moved = stream.wait_for("j2", lambda p: abs(p["position"] - goal) < 0.03, 5.0, "j2 at its goal")
        assert abs(start) < 0.01 and moved["goal"] == pytest.approx(goal, abs=1e-3)
        assert abs(stream.latest("j1")["position"]) < 0.01                # the others hold still
