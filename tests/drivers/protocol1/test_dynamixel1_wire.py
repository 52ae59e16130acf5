"""Wire timing of the Protocol 1.0 bus (`fast = false`) through dynamixel-sdk 4.1.0: a reply starts Return Delay Time
(2 µs units, e-manual §Return Delay Time) after the instruction and its bytes take their wire time at the baud the
controller set. Medians only (DESIGN.md, Timing): a 2-core host's tails come from elsewhere."""

from __future__ import annotations

import statistics
import time

import dynamixel_sdk as sdk
import pytest

from servo_hil.daemon.telemetry import StealMeter
from tests.drivers.protocol1.dynamixel1_rig import AX, PRESENT, RETURN_DELAY, Dxl1Launcher, SlackPortHandler, write_rig
from tests.realtime_verdict import check, disturbance


@pytest.fixture(scope="module")
def bus(tmp_path_factory):
    launcher = Dxl1Launcher(tmp_path_factory.mktemp("dxl1wire"))
    d = launcher.start(write_rig(launcher.dir, "dxl1_wire", fast=False))
    port = SlackPortHandler(d.rig.port)
    assert port.openPort() and port.setBaudRate(1_000_000)
    yield port, sdk.PacketHandler(1.0)
    port.closePort()
    launcher.finish()


def read_s(port, ph) -> float | None:
    """Seconds one Present Position read takes, or None if it failed."""
    t = time.perf_counter()
    _, comm, _ = ph.read2ByteTxRx(port, AX, PRESENT[0])
    return time.perf_counter() - t if comm == sdk.COMM_SUCCESS else None


def median_read_s(port, ph, n: int = 150) -> float:
    times = [t for t in (read_s(port, ph) for _ in range(n)) if t is not None]
    assert len(times) >= 0.95 * n
    return statistics.median(times)


def test_return_delay_time_delays_the_reply(bus):
    # reads with Return Delay 250 and 0 interleaved, so that the host's load drifts alike over both; a run on a
    # disturbed host (steal, or this test's own 0.5 ms sleeps waking late) is inconclusive, never a pass
    port, ph = bus
    gaps, late = [], 0
    steal = StealMeter()
    for _ in range(150):
        t = time.perf_counter()
        time.sleep(0.5e-3)
        late += time.perf_counter() - t > 2.5e-3
        assert ph.write1ByteTxRx(port, AX, RETURN_DELAY[0], 250) == (sdk.COMM_SUCCESS, 0)
        slow = read_s(port, ph)
        assert ph.write1ByteTxRx(port, AX, RETURN_DELAY[0], 0) == (sdk.COMM_SUCCESS, 0)
        quick = read_s(port, ph)
        if slow is not None and quick is not None:
            gaps.append(slow - quick)
    gap = statistics.median(gaps)
    check({"150 pairs of reads answered": len(gaps) >= 140,
           # the server starts a reply no sooner than the delay after the instruction's end: its own wake-up and
           # processing time (0.2–0.3 ms on a loaded 2-core host) shorten the gap or add to it
           "the median gap is Return Delay 250 × 2 µs, -0.35/+0.5 ms": 0.15e-3 <= gap <= 1.0e-3},
          f"median gap {gap * 1e3:.3f} ms over {len(gaps)} pairs",
          disturbance(steal.fraction(), late / 150))


def test_replies_take_their_wire_time_at_57600(bus):
    port, ph = bus
    # Baud Rate 34: 2 000 000 / 35 = 57 143 bit/s, 0.794 % from 57 600 (e-manual §Baud Rate)
    assert ph.write1ByteTxRx(port, AX, 4, 34) == (sdk.COMM_SUCCESS, 0)
    assert port.setBaudRate(57_600)
    try:
        # READ of 2 bytes: an 8-byte instruction and an 8-byte status packet, 10 bits a byte
        assert median_read_s(port, ph, 60) >= 16 * 10 / 57_600
    finally:
        assert ph.write1ByteTxRx(port, AX, 4, 1) == (sdk.COMM_SUCCESS, 0)
        assert port.setBaudRate(1_000_000)
