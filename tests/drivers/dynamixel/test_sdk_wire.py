"""The wire as the SDK sees it, on a paced (fast = false) free-running rig: Return Delay Time and byte times at the
baud rate the SDK set, baud mismatches, and the bus faults injected over the ZeroMQ command socket. Timing figures
(e-manual §Return Delay Time(9); dynamixel-sdk port_handler.py `setPacketTimeout`): a 4-byte Read is 14 instruction
bytes and 15 status bytes, 10 bit times each (8N1); the servo answers Return Delay Time × 2 µs (default 250 = 500
µs) after the instruction's last byte. A pty delivers instantly, so every microsecond beyond the SDK's own overhead
must come from the emulator's pacing: the round trip may never be shorter than the wire."""

from __future__ import annotations

import statistics
import time

import dynamixel_sdk as sdk
import pytest

from servo_hil.daemon.telemetry import StealMeter

from .conftest import IDS, JOINT, MODEL, A, write_dxl_rig

OK = sdk.COMM_SUCCESS
TIMEOUT = sdk.COMM_RX_TIMEOUT


@pytest.fixture(scope="module")
def daemon(module_launcher):
    return module_launcher.start(write_dxl_rig(module_launcher.dir, "sdk-wire", fast=False, lockstep=False))


@pytest.fixture(autouse=True)
def clean(daemon, dxl):
    yield
    assert daemon.alive, daemon.stderr()
    for j in JOINT.values():
        for fault in ("drop", "corrupt", "delay", "wrong_baud"):
            daemon.ok("clear_fault", actuator=j, fault=fault)
    dxl.set_baud(1_000_000)
    for i in IDS:
        assert dxl.ping(i)[:2] == (MODEL[i], OK), f"ID {i} does not answer at 1 Mbps after the test"
        assert dxl.read(i, A.RETURN_DELAY) == 250


def round_trips(dxl, dxl_id: int, n: int) -> list[float]:
    """Wall time [s] of n read4ByteTxRx (Present Position) exchanges, each checked."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        _, comm, err = dxl.ph.read4ByteTxRx(dxl.port, dxl_id, A.PRESENT_POSITION[0])
        out.append(time.perf_counter() - t)
        assert (comm, err) == (OK, 0), dxl.ph.getTxRxResult(comm)
    return out


def undelayed(rtts: list[float]) -> float:
    """The fastest round trip [s]: an exchange the host did not delay (load only ever adds time, and pacing
    keeps every exchange at or above the wire). On a loaded host a client that waits longer (a Return Delay
    Time, a delay fault) is more often preempted meanwhile, which moves the median of a long exchange more
    than a short one's; differences of the emulator's own delays are read here. The SDK busy-waits on one of
    the two cores, so with any other load the daemon's bus thread often waits a scheduler slice (~3 ms) before
    it replies: how late pacing is against the wire is read here too (a pacing error delays every exchange)."""
    return min(rtts)


def wire_s(baud: int, rdt_units: int = 250) -> float:
    return (14 + 15) * 10 / baud + rdt_units * 2e-6


# ------------------------------------------------------------------------------------------------ 13. timing
def test_read_round_trip_respects_the_wire(dxl):
    """Round trips with Return Delay Time 250 and 0, measured in alternating blocks so that both see the same
    host (a burst of load or steal lands on both, not on one): no exchange faster than the wire, not grossly
    slower, and RDT 250 adds its 500 µs (both read on the exchanges the host did not delay: `undelayed`)."""
    steal, t0 = StealMeter(), time.monotonic()
    samples: dict[int, list[float]] = {250: [], 0: []}
    try:
        for _ in range(10):
            for rdt, rtts in samples.items():
                dxl.write(3, A.RETURN_DELAY, rdt)
                rtts += round_trips(dxl, 3, 20)
    finally:
        dxl.write(3, A.RETURN_DELAY, 250)
    rtt = {rdt: statistics.median(rtts) for rdt, rtts in samples.items()}
    low = {rdt: undelayed(rtts) for rdt, rtts in samples.items()}
    figures = (f"read4ByteTxRx at 1 Mbps median / fastest: RDT 250 -> {rtt[250] * 1e6:.0f} / "
               f"{low[250] * 1e6:.0f} µs (wire bound {wire_s(1_000_000) * 1e6:.0f} µs); RDT 0 -> {rtt[0] * 1e6:.0f} / "
               f"{low[0] * 1e6:.0f} µs (bound {wire_s(1_000_000, 0) * 1e6:.0f} µs); hypervisor steal "
               f"{100 * steal.fraction():.1f} % over {time.monotonic() - t0:.1f} s")
    print(f"\n{figures}")
    for rdt, fastest in low.items():
        bound = wire_s(1_000_000, rdt)
        assert fastest >= 0.99 * bound, f"RDT {rdt}: faster than the wire ({bound * 1e6:.0f} µs); {figures}"
        # generous: a loaded 2-core host adds ~1 ms to the SDK's and the daemon's wake-ups
        assert fastest < bound + 2e-3, f"RDT {rdt}: more than 2 ms over the wire; {figures}"
    assert 0.35e-3 <= low[250] - low[0] <= 0.65e-3, f"Return Delay Time 250 adds 500 µs; {figures}"


def test_sdk_baud_must_match_the_servos(dxl):
    dxl.set_baud(57_600)
    for i in IDS:
        assert dxl.ping(i)[1] == TIMEOUT, f"ID {i} answered at 57600 bps while set to 1 Mbps"
    dxl.set_baud(1_000_000)
    assert dxl.ping(1)[:2] == (MODEL[1], OK)


def test_servo_baud_rate_register(dxl):
    """Baud Rate (8) = 1 (57600 bps) on every servo: they answer only at 57600, paced at 57600."""
    try:
        for i in IDS:
            dxl.try_write(i, A.BAUD_RATE, 1)           # which baud the status of this write uses is undocumented
        for i in IDS:
            assert dxl.ping(i)[1] == TIMEOUT
        dxl.set_baud(57_600)
        for i in IDS:
            assert dxl.ping(i)[:2] == (MODEL[i], OK)
            assert dxl.read(i, A.BAUD_RATE) == 1
        steal = StealMeter()
        rtts = round_trips(dxl, 2, 60)   # ~6 ms each: under load most are preempted at least once (`undelayed`)
        figures = (f"read4ByteTxRx at 57600 bps median / fastest: {statistics.median(rtts) * 1e3:.2f} / "
                   f"{undelayed(rtts) * 1e3:.2f} ms (wire bound {wire_s(57_600) * 1e3:.2f} ms); hypervisor steal "
                   f"{100 * steal.fraction():.1f} %")
        print(f"\n{figures}")
        assert wire_s(57_600) * 0.99 <= undelayed(rtts) < wire_s(57_600) + 2e-3, figures   # generous: a loaded host
    finally:
        dxl.set_baud(57_600)
        for i in IDS:
            dxl.try_write(i, A.BAUD_RATE, 3)
        dxl.set_baud(1_000_000)
    for i in IDS:
        assert dxl.ping(i)[:2] == (MODEL[i], OK)


# ------------------------------------------------------------------------------------------------ 12. bus faults
def test_wrong_baud_fault_silences_one_servo(daemon, dxl):
    daemon.ok("inject_fault", actuator="xm430", fault="wrong_baud", args={})
    assert "wrong_baud" in daemon.ok("state", actuator="xm430")["state"]["xm430"]["faults"]
    assert dxl.ping(3)[1] == TIMEOUT
    assert dxl.try_read(3, A.PRESENT_POSITION)[1] == TIMEOUT
    for i in (1, 2, 4):
        assert dxl.ping(i)[:2] == (MODEL[i], OK)
    sr = sdk.GroupSyncRead(dxl.port, dxl.ph, *A.PRESENT_POSITION)
    for i in IDS:
        sr.addParam(i)
    assert sr.txRxPacket() == TIMEOUT, "a sync read over a silent servo fails (the SDK reads each ID in turn)"
    daemon.ok("clear_fault", actuator="xm430", fault="wrong_baud")
    assert dxl.ping(3)[:2] == (MODEL[3], OK)
    assert sr.txRxPacket() == OK


def test_corrupt_fault(daemon, dxl):
    daemon.ok("inject_fault", actuator="mx106", fault="corrupt", args={"probability": 1.0})
    results = [dxl.try_read(2, A.PRESENT_POSITION)[1] for _ in range(12)]
    assert OK not in results, results
    assert set(results) <= {sdk.COMM_RX_CORRUPT, TIMEOUT}, results
    assert sdk.COMM_RX_CORRUPT in results, "a flipped byte mostly lands in the body: Incorrect status packet"
    assert dxl.ping(1)[:2] == (MODEL[1], OK), "the other servos answer cleanly"
    daemon.ok("clear_fault", actuator="mx106", fault="corrupt")
    assert dxl.try_read(2, A.PRESENT_POSITION)[1:] == (OK, 0)


def test_drop_fault(daemon, dxl):
    daemon.ok("inject_fault", actuator="xl330", fault="drop", args={"probability": 1.0})
    assert dxl.ping(4)[1] == TIMEOUT
    daemon.ok("clear_fault", actuator="xl330", fault="drop")
    assert dxl.ping(4)[:2] == (MODEL[4], OK)


def test_reset_clears_bus_faults_on_the_bus(daemon, dxl):
    """`reset` clears injected faults where they act: the bus thread's replies, not only the status."""
    daemon.ok("inject_fault", actuator="xl330", fault="drop", args={"probability": 1.0})
    assert dxl.ping(4)[1] == TIMEOUT
    daemon.ok("reset")
    assert "drop" not in daemon.ok("status")["status"]["actuators"]["xl330"]["faults"]
    assert dxl.ping(4)[:2] == (MODEL[4], OK)


def test_delay_fault_adds_its_time(daemon, dxl):
    steal = StealMeter()
    base = round_trips(dxl, 2, 15)
    daemon.ok("inject_fault", actuator="mx64", fault="delay", args={"seconds": 0.01})
    # the faulted servo and another one read in turns: a load that slows every exchange cancels out
    pairs = [(round_trips(dxl, 1, 1)[0], round_trips(dxl, 2, 1)[0]) for _ in range(30)]
    delayed, other = [a for a, _ in pairs], [b for _, b in pairs]
    figures = (f"read median / fastest: {statistics.median(other) * 1e3:.2f} / {undelayed(other) * 1e3:.2f} ms "
               f"({statistics.median(base) * 1e3:.2f} / {undelayed(base) * 1e3:.2f} ms before), with a 10 ms delay "
               f"fault {statistics.median(delayed) * 1e3:.2f} / {undelayed(delayed) * 1e3:.2f} ms; hypervisor steal "
               f"{100 * steal.fraction():.1f} %")
    print(f"\n{figures}")
    # never sooner than the wire plus the fault's 10 ms (a loaded host only adds, to the other servo's reads too)
    assert undelayed(delayed) >= 0.99 * (wire_s(1_000_000) + 0.01), figures
    assert undelayed(delayed) - undelayed(other) < 0.013, figures
    assert undelayed(other) < undelayed(base) + 2e-3, f"only the faulted servo is late; {figures}"   # generous
