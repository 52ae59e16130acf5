"""`servo-hil bench lost-replies`: do the emulated arms answer LeRobot in time while the machine is loaded?

The so101 (Feetech) and koch (Dynamixel) arms' daemons run as for `servo-hil bench lerobot`; LeRobot's own bus classes
(FeetechMotorsBus, DynamixelMotorsBus, in LeRobot's venv: this file run by its Python as the peer) Sync Read the six
servos' Present_Position at `hz` with no retry, as get_observation does, while busy processes load every core and a
poller asks each daemon for its state as a viewer does. Reported as JSON: replies lost (LeRobot's ConnectionError),
the client's round trip p50/p99/max against the Sync Read's wire time, and from the bus threads' trace
($SERVO_HIL_WIRE_TRACE) where the time went: request written by the client → bus thread awake with it → reply's
first byte written (docs/protocols/wire.md, "Replies under load"; docs/performance.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ARMS = {"so101": "feetech", "koch": "dynamixel"}
# LeRobot's models for the rigs' servos (so_follower.py, koch_follower.py, lerobot 0.4.4)
MODELS = {"so101": ["sts3215"] * 6, "koch": ["xl430-w250"] * 2 + ["xl330-m288"] * 4}


# ---------------------------------------------------------------------------------------------- the LeRobot side
def peer(family: str, port: str, seconds: float, hz: float, start_at: float) -> None:
    """In LeRobot's venv: connect LeRobot's bus for `family` on `port` (its handshake pings every servo),
    configure it as the robot's `configure` does (Return Delay Time 0), then from `start_at` (time.monotonic() [s])
    Sync Read Present_Position at `hz` for `seconds`. One JSON line: per read (start [s, monotonic], round trip
    [s], ok, its request written [s after start]) and the first errors."""
    from lerobot.motors import Motor, MotorNormMode

    if family == "so101":
        from lerobot.motors.feetech import FeetechMotorsBus as Bus
    else:
        from lerobot.motors.dynamixel import DynamixelMotorsBus as Bus
    motors = {f"m{i}": Motor(i, model, MotorNormMode.RANGE_M100_100) for i, model in enumerate(MODELS[family], 1)}
    bus = Bus(port=port, motors=motors)
    for attempt in range(3):   # setting up is not what is measured: a lost reply there is tried again
        try:
            if not bus.is_connected:
                bus.connect()
            bus.configure_motors()
            break
        except ConnectionError as e:
            print(f"setup attempt {attempt + 1}: {e}", file=sys.stderr)
    else:
        raise ConnectionError(f"LeRobot's {family} bus could not be set up in 3 attempts")
    # when the request's last byte left the client: the SDK's own writePort, stamped (the bus thread's wake is
    # measured from it, the client's delays before it are its own)
    written = [0.0]
    write = bus.port_handler.writePort

    def stamped(packet):
        n = write(packet)
        written[0] = time.monotonic()
        return n

    bus.port_handler.writePort = stamped
    print(json.dumps({"ready": True}), flush=True)
    while time.monotonic() < start_at:
        time.sleep(0.01)
    period = 1.0 / hz
    rows, errors = [], []
    t_start = time.monotonic()
    k = 0
    while time.monotonic() - t_start < seconds:
        t0 = time.monotonic()
        try:
            bus.sync_read("Present_Position", normalize=False)
            ok = True
        except ConnectionError as e:    # LeRobot's no-retry read: the reply was later than the SDK's timeout
            ok = False
            if len(errors) < 5:
                errors.append(str(e).splitlines()[0][:200])
        rows.append((t0, time.monotonic() - t0, ok, written[0] - t0))
        k += 1
        pause = t_start + k * period - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    bus.disconnect(disable_torque=False)
    print(json.dumps({"rows": rows, "errors": errors}), flush=True)


# ---------------------------------------------------------------------------------------------- the bench side
BUSY = "import time\nt = time.monotonic() + {s}\nwhile time.monotonic() < t:\n    pass\n"


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))] if s else float("nan")


def _summary_us(values_s: list[float]) -> dict:
    us = [v * 1e6 for v in values_s]
    return {"p50": round(_pct(us, 0.5), 1), "p99": round(_pct(us, 0.99), 1), "max": round(max(us), 1) if us else None}


def _match(rows: list, trace: list[dict]) -> list[tuple]:
    """Each client read with the bus thread's answer to its Sync Read (the first one the thread woke with after
    the read started, within 0.5 s: a thread at SCHED_FIFO may wake before the client stamps its own write):
    (request written [s, monotonic], round trip [s] from the read's start, ok, trace row or None)."""
    sync = sorted((r for r in trace if r["instruction"] == 0x82), key=lambda r: r["received"])
    out, j = [], 0
    for t0, rtt, ok, w in rows:
        while j < len(sync) and sync[j]["received"] < t0:
            j += 1
        hit = sync[j] if j < len(sync) and sync[j]["received"] <= t0 + 0.5 else None
        out.append((t0 + w, rtt, ok, hit))
    return out


def analyse(family: str, result: dict, trace: list[dict], wire_us: float) -> dict:
    """The figures of one arm: lost replies, the client's round trip, and the bus thread's part of it."""
    rows = result["rows"]
    ok_rtt = [rtt for _, rtt, ok, _ in rows if ok]
    matched = _match(rows, trace)
    # the bus thread's view: request written → thread awake with it and holding the GIL (`received` is stamped
    # after poll() returns; below 0 where it woke before the client's stamp after its write) → handled → its
    # reply's first byte written (the wait for its due time included)
    wake = [h["received"] - t0 for t0, _, _, h in matched if h]
    answer = [h["first_write"] - h["received"] for _, _, _, h in matched if h]
    handle = [h["handled"] - h["received"] for _, _, _, h in matched if h]
    # a late wake split: the thread runnable but not running (the kernel's run delay), and the rest: woken late
    # (the pty's hand-over of the request) or waiting for the GIL (then with many CPU slices, `wake_slices`);
    # `busy`: the thread was still at work when the request came
    woke = [(h["received"] - max(t0, h["polled"]), h["run_delay_ns"] * 1e-9) for t0, _, _, h in matched if h]
    busy = [max(0.0, h["polled"] - t0) for t0, _, _, h in matched if h]
    slices = [h["wake_slices"] for _, _, _, h in matched if h]
    late = [h["first_write"] - h["due"] for _, _, _, h in matched if h]
    lost_rows = [(t0, rtt, h) for t0, rtt, ok, h in matched if not ok]
    return {
        "protocol": ARMS[family],
        "reads": len(rows), "lost": len(rows) - len(ok_rtt),
        # a read shorter than the wire time took an earlier request's late reply: the SDKs' clearPort() only
        # drains output (pyserial flush()), so a reply that came after the timeout is read by the next request
        "stale_reads": sum(1 for rtt in ok_rtt if rtt * 1e6 < wire_us),
        "client_start_to_request_written_us": _summary_us([w for *_, w in rows]),
        "round_trip_us": _summary_us(ok_rtt), "wire_us": round(wire_us, 1),
        "round_trip_p50_to_wire": round(_pct(ok_rtt, 0.5) * 1e6 / wire_us, 2) if ok_rtt else None,
        "round_trip_p99_to_wire": round(_pct(ok_rtt, 0.99) * 1e6 / wire_us, 2) if ok_rtt else None,
        "server": {"replies_traced": len(trace), "matched": sum(1 for *_, h in matched if h),
                   "request_written_to_awake_us": _summary_us(wake), "awake_to_handled_us": _summary_us(handle),
                   "awake_to_first_byte_us": _summary_us(answer), "first_byte_after_due_us": _summary_us(late),
                   "wake_run_delay_us": _summary_us([q for _, q in woke]),
                   "wake_not_run_delay_us": _summary_us([w - q for w, q in woke]),
                   "busy_when_written_us": _summary_us(busy),
                   "wake_slices": {"p50": _pct(slices, 0.5), "p99": _pct(slices, 0.99), "max": max(slices, default=0)}},
        # per lost read: how long the client waited, and when after its request the bus thread woke and answered
        "lost_reads": [{"client_ms": round(rtt * 1e3, 2),
                        "awake_after_ms": round((h["received"] - t0) * 1e3, 3) if h else None,
                        "first_byte_after_ms": round((h["first_write"] - t0) * 1e3, 3) if h else None,
                        "poll_entered_after_ms": round((h["polled"] - t0) * 1e3, 3) if h else None,
                        "run_delay_ms": round(h["run_delay_ns"] * 1e-6, 3) if h else None,
                        "wake_slices": h["wake_slices"] if h else None}
                       for t0, rtt, h in lost_rows[:10]],
        "errors": result["errors"],
    }


def _poll(arm, hz: float, stop: threading.Event) -> None:
    """A viewer's `state` requests to the daemon (what bench/lerobot.py's Sampler does)."""
    while not stop.wait(1.0 / hz):
        with contextlib.suppress(Exception):   # a daemon too busy to answer a viewer is not what is counted here
            arm.command("state", timeout_s=2.0)


# `--compare`'s "before": the daemon as it ran before its bus threads asked for SCHED_FIFO (the wiring's
# fifo_priority, LoopConfig.io_priority), everything else the same
BEFORE = """import sys
import drivers.emulated.dynamixel.server as d
import drivers.wire.server as w
init = w.ServerThread.__init__
w.ServerThread.__init__ = lambda self, name, fifo_priority=0, target=None: init(
    self, name, 0 if isinstance(self, d.DynamixelServer) else fifo_priority, target)
from servo_hil.cli.main import app
sys.argv[0] = "servo-hil"
app()
"""


def _phase(python: Path, variant: str, work: Path, families: tuple[str, ...], seconds: float, hz: float, load: int,
           poll_hz: float) -> dict:
    """One measurement: `variant` ("after": the daemon as it is, "before": BEFORE) of each family's daemon."""
    from bench.lerobot import start_arm, sync_read_wire_us
    from servo_hil.daemon.telemetry import StealMeter

    work.mkdir()
    arms, peers, busy, out = {}, {}, [], {}
    stop = threading.Event()
    argv = [sys.executable, "-c", BEFORE] if variant == "before" else None
    try:
        for fam in families:
            (work / fam / "trace").mkdir(parents=True)
            os.environ["SERVO_HIL_WIRE_TRACE"] = str(work / fam / "trace")
            try:
                arms[fam] = start_arm(fam, work / fam, servo_hil=argv)
            finally:
                os.environ.pop("SERVO_HIL_WIRE_TRACE", None)
        start_at = time.monotonic() + 8.0 + 0.5 * len(families)   # LeRobot's import and connect
        for fam in families:
            with (work / f"peer-{fam}.stderr").open("w") as err:
                peers[fam] = subprocess.Popen(
                    [str(python), __file__, "peer", fam, arms[fam].port, str(seconds), str(hz), str(start_at)],
                    stdout=subprocess.PIPE, stderr=err, text=True, env=os.environ | {"HF_HUB_OFFLINE": "1"})
        for fam, p in peers.items():
            if not p.stdout.readline():
                raise RuntimeError(f"{fam}: LeRobot's bus did not connect: "
                                   f"{(work / f'peer-{fam}.stderr').read_text()[-2000:]}")
        if poll_hz > 0:
            for a in arms.values():
                threading.Thread(target=_poll, args=(a, poll_hz, stop), daemon=True).start()
        # bounded: each busy process ends by itself at the phase's end
        busy = [subprocess.Popen([sys.executable, "-c", BUSY.format(s=start_at - time.monotonic() + seconds)])
                for _ in range(load)]
        while time.monotonic() < start_at:
            time.sleep(0.01)
        steal, load0 = StealMeter(), os.getloadavg()
        results = {}
        for fam, p in peers.items():
            lines = p.stdout.read().strip().splitlines()
            p.wait(30)
            if p.returncode != 0 or not lines:
                raise RuntimeError(f"{fam}: LeRobot's peer exited {p.returncode}: "
                                   f"{(work / f'peer-{fam}.stderr').read_text()[-2000:]}")
            results[fam] = json.loads(lines[-1])
        out["host"] = {"steal_fraction": round(steal.fraction(), 4),
                       "load_average_1min": [round(load0[0], 2), round(os.getloadavg()[0], 2)]}
        stop.set()
        status = {fam: a.ok("status")["status"] for fam, a in arms.items()}
    finally:
        stop.set()
        for b in busy:
            b.kill()
            b.wait()
        for p in peers.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        for a in arms.values():
            a.stop()   # the bus threads write their traces as they end
    for fam in families:
        trace = [json.loads(ln) for f in (work / fam / "trace").glob("*.jsonl") for ln in f.read_text().splitlines()]
        out[fam] = analyse(fam, results[fam], trace, sync_read_wire_us(ARMS[fam]))
        out[fam]["bus_wire"] = status[fam]["bus_wire"]
        out[fam]["loop_rt_mode"] = status[fam]["rt_mode"]   # the bus threads ask for FIFO where the loop does
    return out


def run(seconds: float = 20.0, hz: float = 100.0, load: int | None = None, poll_hz: float = 20.0,
        families: tuple[str, ...] = ("so101", "koch"), compare: bool = False) -> dict:
    """Both arms' daemons, LeRobot's Sync Read on each at `hz` for `seconds` under `load` busy processes (default:
    two per core) and `poll_hz` state requests per daemon; with `compare`, first the same for the daemon as it ran
    before (BEFORE). JSON-ready figures."""
    import tempfile

    from bench.lerobot import VENV_HINT, lerobot_python

    python = lerobot_python()
    if python is None:
        return {"skipped": VENV_HINT}
    load = 2 * (os.cpu_count() or 1) if load is None else load
    out: dict = {"config": {"seconds": seconds, "hz": hz, "busy_processes": load, "poll_hz": poll_hz,
                            "cores": os.cpu_count(), "families": list(families)}}
    with tempfile.TemporaryDirectory(prefix="servo-hil-lost-") as tmp:
        for variant in ("before", "after") if compare else ("after",):
            out[variant] = _phase(python, variant, Path(tmp) / variant, families, seconds, hz, load, poll_hz)
    return out


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "peer":
        # run as a script, bench/ is first on the path, where bench/lerobot.py would shadow the lerobot package
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
        peer(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]))
    else:
        print(json.dumps(run(float(sys.argv[1]) if len(sys.argv) > 1 else 20.0, compare=True), indent=1))
