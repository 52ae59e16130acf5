"""Who ticks the eRob drives, and when (the drive scheduler, a CAN bus, an Etherban server), in-process on an offline
kernel. The CAN bus's adapter thread takes the ticks from the drives' own thread: one tick per SYNC, right after the
SYNC's TPDOs were sampled, and one per period (1 ms) without SYNCs; the drives' thread ticks again once the bus
stops. The Etherban server ticks them once per answered request. A drive's control period is simulation time whoever
ticks it: a kernel that only moves when stepped (a lock-step rig) advances the drive exactly by the steps taken."""

from __future__ import annotations

import bisect
import itertools
import statistics
import threading
import time

import pytest

from drivers.emulated.canopen.bus import CanopenBus
from drivers.emulated.etherban.server import EtherbanServer
from drivers.schedulers.cia402_drives import Cia402Drives, TickClock
from drivers.wire.faults import BusFaults
from drivers.wire.ports import PtyPort
from firmware_models.erob.drive import new_drive
from hil.joint import KernelJoint
from hil.kernel import Kernel
from hil.params import catalog
from servo_hil.daemon.telemetry import StealMeter
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params
from tests.drivers.erob.test_etherban import Master
from tests.drivers.slcan.test_slcan import RawHost, wait_for
from tests.realtime_verdict import check, disturbance

PERIOD = 1e-3
NODE = 2


def test_tick_clock_period_sync_and_stall():
    c = TickClock(PERIOD, now=10.0)
    assert c.due(10.0) is None                               # the first tick at once
    c.ticked(10.0)
    assert c.due(10.0005) == pytest.approx(10.001)
    for k in range(1, 5):                                    # absolute deadlines: no drift from late ticks
        c.ticked(10.0 + k * PERIOD + 2e-4)
        assert c.due(10.0 + k * PERIOD + 3e-4) == pytest.approx(10.0 + (k + 1) * PERIOD)
    # a SYNC tick: the next periodic one half a period after the SYNC's next expected one
    assert c.sync_may_tick(10.0052) and not c.sync_may_tick(10.0045)
    c.ticked(10.0052, synced=True)
    assert c.due(10.0062) == pytest.approx(10.0067)
    assert not c.sync_may_tick(10.0052 + 0.4 * PERIOD)      # SYNCs faster than the position loop
    # a stall of 10 periods: one tick at once, then the period again (no burst)
    c.ticked(10.0172)
    c.ticked(10.0172)
    assert c.due(10.0172) == pytest.approx(10.0182)
    for _ in range(5):                                       # ticks by hand do not run the schedule ahead
        c.ticked(10.0175)
    assert c.due(10.0175) == pytest.approx(10.0185)


@pytest.fixture
def drives():
    """One eRob80:100 drive (node 2) on a one-actuator offline kernel: time moves only when the test steps it."""
    kernel = Kernel(1, PERIOD)
    kernel.set_params(0, kernel_params(catalog.entry("erob80_100").actuator("m6"), LoadConfig(), EncoderConfig(),
                                       FaultConfig(), "euler"))
    d = Cia402Drives(PERIOD)
    d.drive(0, "erob80_100", lambda: new_drive("erob80_100", NODE, KernelJoint(kernel)))
    d.kernel = kernel
    yield d
    d.release()


@pytest.fixture
def bus(drives, tmp_path):
    # real-time as the daemon asks it (where allowed): the phase checks below are about our scheduling of ticks
    b = CanopenBus(drives, [(drives.drives[0], NODE, BusFaults())], PtyPort(tmp_path / "ttyCAN"), fifo_priority=10)
    yield b
    b.stop()
    assert b.error is None, b.error


def own_thread() -> bool:
    return any(t.name == "servo-hil-cia402" for t in threading.enumerate())


def assert_ticks_at_1khz(drives: Cia402Drives, seconds: float = 0.5, every_s: float = 0.02) -> None:
    """The drives tick at their 1 kHz: the median rate over `every_s` windows within 50 % (a host that steals
    the CPU for a few windows moves the median of 25 windows little) and never faster than 1 kHz overall
    (a tick per period, never a burst, even after a stall)."""
    steal = StealMeter()
    samples = [(time.monotonic(), drives.ticks)]
    while samples[-1][0] - samples[0][0] < seconds:
        time.sleep(every_s)
        samples.append((time.monotonic(), drives.ticks))
    rates = [(n1 - n0) / (t1 - t0) for (t0, n0), (t1, n1) in itertools.pairwise(samples)]
    (t0, n0), (t1, n1) = samples[0], samples[-1]
    figures = (f"median {statistics.median(rates):.0f} ticks/s over {len(rates)} windows of {every_s * 1e3:.0f} ms, "
               f"{n1 - n0} ticks in {t1 - t0:.3f} s; hypervisor steal {100 * steal.fraction():.1f} %")
    assert 500 < statistics.median(rates) <= 1050, figures
    assert n1 - n0 <= 1.05 * (t1 - t0) / PERIOD + 2, figures


def test_the_bus_takes_the_ticks_and_gives_them_back(drives, bus):
    drives.start()                                           # an Etherban server's share: our thread ticks
    wait_for(own_thread)
    bus.start()
    assert not own_thread() and bus.adapter.is_alive()       # one thread for frames and ticks
    assert_ticks_at_1khz(drives)                             # 1 kHz without SYNC, never a burst
    other = object()
    assert not drives.take_ticks(other)                      # one ticker at a time
    bus.stop()
    wait_for(own_thread)                                     # the Etherban user still needs the ticks
    assert_ticks_at_1khz(drives)
    drives.release()
    wait_for(lambda: not own_thread())
    assert drives.take_ticks(other)
    drives.give_back_ticks(other)


def test_one_tick_per_sync_and_none_on_top(drives, bus):
    bus.start()
    syncs: list[float] = []
    ticks: list[float] = []
    on_frame = bus.adapter.on_frame

    def seen(frame, t):
        on_frame(frame, t)
        if frame.id == 0x080:
            syncs.append(t)

    bus.adapter.on_frame = seen
    drives.tick_hooks.append(ticks.append)
    host = RawHost(bus.path)
    try:
        assert host.cmd(b"S8") == b"\r" and host.cmd(b"O") == b"\r"
        for _ in range(400):                                 # SYNC every 1 ms or a little more (never a burst)
            time.sleep(PERIOD)
            host.ser.write(b"t0800\r")
        wait_for(lambda: len(syncs) == 400)
        time.sleep(0.01)
    finally:
        host.close()
    # a SYNC ticks the drives once its 55 µs on the wire are over and its TPDOs are sampled, unless
    # the last tick is less than half a period old (a gap longer than 1.5 periods gets a tick of its own,
    # this host's sleeps may overshoot); between two SYNCs less than 1.4 periods apart nothing else ticks,
    # so the drives keep their 1 kHz: no tick of the period on top of the SYNC's
    due_ticks = [s for s in syncs if s - max((t for t in ticks if t < s), default=-1.0) >= 0.5 * PERIOD]
    prompt = [any(s <= t < s + 0.5 * PERIOD for t in ticks) for s in due_ticks]
    assert len(due_ticks) >= 40 and sum(prompt) >= 0.9 * len(due_ticks)
    close = [(a, b) for a, b in itertools.pairwise(syncs) if b - a < 1.4 * PERIOD]
    assert len(close) >= 40 and sum(sum(a <= t < b for t in ticks) <= 1 for a, b in close) >= 0.95 * len(close)
    window = [t for t in ticks if syncs[0] <= t < syncs[-1]]
    assert len(window) <= 1.1 * (syncs[-1] - syncs[0]) / PERIOD + 2


def test_simulation_time_sets_the_control_period_whoever_ticks(drives, bus):
    """A lock-step rig: the kernel moves only when stepped; the drive's profile follows the steps taken,
    however many ticks the bus thread runs between them (dt = 0 while time stands still)."""
    bus.start()
    drive = drives.drives[0]
    wait_for(lambda: drive.statusword & 0x6F == 0x40)        # Switch on disabled after the first tick
    with drives.lock:
        for index, value in ((0x6060, 3), (0x6083, 100_000), (0x607F, 262_144), (0x60FF, 200_000)):
            assert drive.write(index, 0, value) is None      # PV, 100 000 counts/s², toward 200 000 counts/s
        for cw in (0x06, 0x07, 0x0F):
            drive.write(0x6040, 0, cw)
        assert drive.statusword & 0x6F == 0x27
    n = drives.ticks
    wait_for(lambda: drives.ticks >= n + 20)                 # 20 ticks, time standing still
    assert drive.read(0x606B) == 0
    for _ in range(50):                                      # 50 steps of 1 ms, each followed by ticks
        with drives.lock:
            drives.kernel.step([drive.joint.u], [drive.joint.enable], [0.0])
            after = drives.ticks + 2
        wait_for(lambda after=after: drives.ticks >= after)  # a count, not a sleep: a loaded host delays ticks
    assert drive.read(0x606B) == pytest.approx(100_000 * 0.050, abs=100_000 * PERIOD)


def test_an_etherban_request_ticks_the_drives_once_answered(drives):
    """The Etherban server's requests are the master's cycles: each answered request ticks the drives in the
    server's thread, and the drives' own 1 kHz ticks pause meanwhile (no tick on top).

    A request's tick is the one the server's thread runs after sending its answer and before it reads the next
    request: between the request's send and the next one's. The drives' thread ticks instead where the master
    came late (a gap over 1.5 periods, which leaves the next request's tick less than half a period after
    that one: refused), so the share of requests ticked is judged with the master's late cycles and the
    hypervisor steal (tests/realtime_verdict.py)."""
    server = EtherbanServer(drives, [drives.drives[0]], "tcp://127.0.0.1:0", fifo_priority=10)
    ticks: list[tuple[float, int]] = []
    drives.tick_hooks.append(lambda now: ticks.append((now, threading.get_ident())))
    server.start()
    master = Master(server.path)
    steal = StealMeter()
    try:
        sent, answered = [], []
        due = time.monotonic()
        for _ in range(300):
            due += PERIOD
            time.sleep(max(0.0, due - time.monotonic()))
            sent.append(time.monotonic())
            master.exchange()
            answered.append(time.monotonic())
        time.sleep(0.01)
    finally:
        master.close()
        server.stop()
    stolen = steal.fraction()
    assert server.error is None
    in_window = [t for t, _ in ticks if answered[0] <= t < answered[-1]]
    assert len(in_window) <= 1.1 * (answered[-1] - answered[0]) / PERIOD + 2       # ~one per request, not two
    served = sorted(t for t, who in ticks if who == server.ident)   # none at all is judged below, with the figures
    ends = [*sent[1:], answered[-1] + 0.01]
    ticked = sum(bisect.bisect_left(served, e) > bisect.bisect_left(served, s) for s, e in zip(sent, ends, strict=True))
    late = sum(b - a > 1.5 * PERIOD for a, b in itertools.pairwise(sent)) / (len(sent) - 1)
    figures = (f"{ticked} of {len(sent)} requests ticked in the server's thread, {len(in_window)} ticks in all; "
               f"{100 * late:.1f} % of the master's requests late; hypervisor steal {100 * stolen:.1f} %")
    print(f"\netherban ticks: {figures}")
    check({"≥ 75 % of the requests ticked the drives in the server's thread": ticked >= 0.75 * len(sent)},
          figures, disturbance(stolen, late))
