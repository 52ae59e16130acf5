"""`servo-hil bench loop`: the daemon's timing under load, measured from outside, as JSON.

Loop lateness and overruns from the daemon's own histogram, and the ZeroMQ latency from each tick's deadline
to a C subscriber, against a transport peer. Method: docs/benchmarks.md; figures and targets: docs/performance.md.
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np
import tomli_w
import zmq

from bench import zmq_receiver
from bench.host import STEAL_LIMIT, PeerProcess, cpu_ns, free_port, stop_process
from hil.loop.rt import realtime_thread
from servo_hil.daemon.telemetry import StealMeter, percentile_us
from servo_hil.daemon.zmq_io import loaded_libzmq, request
from servo_hil.rig import read_rig

zmq_receiver.bind_libzmq(loaded_libzmq())

_SPIN_S = 100e-6            # the peer sleeps to this much before each deadline, then spins
# SCHED_FIFO priorities when the host allows them: the measuring subscriber (below every daemon thread, as
# cyclictest's measuring thread is real-time: the figure is then the stream's, not this process's
# scheduling), and the peer's publisher (as the daemon's publisher, the rig's default loop priority − 1)
SUBSCRIBER_PRIORITY = 10
PEER_PRIORITY = 49


@contextlib.contextmanager
def _realtime(priority: int):
    """The calling thread (and the threads it starts, e.g. ZeroMQ's I/O thread) at SCHED_FIFO `priority`
    when allowed, back to SCHED_OTHER after; yields whether FIFO was granted."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def _rig_text(rate: float, actuators: int, publish_every: int, pub: str, cmd: str, mqtt_port: int,
              rig: Path | None = None) -> str:
    """The daemon's rig: N MX-64 m6 pendulums, or the actuators and the robot of `rig` without its buses (files
    made absolute; the poses topic off, so that the judged stream is the joints')."""
    doc = {"name": "bench", "loop": {"rate_hz": rate},
           "zmq": {"pub": pub, "command": cmd, "publish_every": publish_every},
           "mqtt": {"embedded_port": mqtt_port}}
    if rig is None:
        doc["actuators"] = [{"joint": f"j{i}", "catalog": "mx64", "model": "m6",
                             "load": {"mass": 0.5, "length": 0.1}} for i in range(actuators)]
        return tomli_w.dumps(doc)
    parsed = read_rig(rig)
    files = ("params", "mjcf")
    doc["actuators"] = [{k: str((rig.parent / v).resolve()) if k in files else v
                         for k, v in a.model_dump(exclude_unset=True, exclude={"bus", "id", "registers"}).items()}
                        for a in parsed.actuators]
    if parsed.robot is not None:
        doc["robot"] = {"mjcf": str((rig.parent / parsed.robot.mjcf).resolve()), "pose_every": 1_000_000}
    return tomli_w.dumps(doc)


def _drain(sub: zmq.Socket, into: list) -> None:
    """Receive everything queued, stamping each message with its receive time (the Python subscriber)."""
    recv, clock, noblock = sub.recv, time.time, zmq.NOBLOCK
    while True:
        try:
            topic = recv(noblock)
        except zmq.Again:
            return
        # the other frames of a multipart message are already here; recv() is cheaper than recv_multipart()
        payload, ts = recv(), recv()
        into.append((clock(), topic, payload, ts))


def run(rate: float = 1000.0, seconds: float = 10.0, actuators: int = 32, publish_every: int = 1,
        warmup: float = 1.0, rig_path: Path | None = None) -> dict:
    """The benchmark's JSON; `rig_path`: the actuators (and robot) of that rig instead of N pendulums."""
    pub, cmd = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    if rig_path is not None:
        actuators = len(read_rig(rig_path).actuators)
    with tempfile.TemporaryDirectory() as tmp:
        rig = Path(tmp) / "bench.toml"
        rig.write_text(_rig_text(rate, actuators, publish_every, pub, cmd, free_port(), rig_path))
        proc = subprocess.Popen([sys.executable, "-m", "servo_hil.cli.main", "run", str(rig), "--log-level", "WARNING"],
                                stderr=subprocess.PIPE, text=True)
        print(f"bench loop: the daemon, {actuators} actuators at {rate:g} Hz, for {seconds:g} s", file=sys.stderr,
              flush=True)
        try:
            out = _measure(proc, pub, cmd, rate, seconds, actuators, publish_every, warmup)
        finally:
            stop_process(proc, 5)
    if rig_path is not None:
        out["config"]["rig"] = str(rig_path)
        if read_rig(rig_path).robot is not None:   # the same model offline: mj_step's share, bam's peer
            from bench.robot import run as robot_bench

            print("bench loop: the robot offline and bam's MujocoController on it", file=sys.stderr, flush=True)
            out["robot"] = robot_bench(rig_path, seconds=min(seconds, 2.0), repeats=3)
            out["robot"].pop("machine", None)
    print(f"bench loop: the ZeroMQ peer, the same stream, for {seconds:g} s", file=sys.stderr, flush=True)
    out["zmq_peer"] = _measure_peer(rate / publish_every, actuators, out["zmq"]["payload_bytes"], seconds, warmup)
    if out["zmq"]["latency_p99_us"] and out["zmq_peer"]["latency_p99_us"]:
        out["zmq"]["p99_over_peer_p99"] = out["zmq"]["latency_p99_us"] / out["zmq_peer"]["latency_p99_us"]
    return out


def _peer(conn, arg) -> None:
    """The transport peer (a spawned process): a PUB on a free port sending `n` messages per tick at
    `rate` Hz, framed as the daemon's: [topic, `size` bytes, the tick's deadline as epoch seconds]."""
    rate, n, size = arg
    realtime_thread(PEER_PRIORITY)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, 200_000)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    topics = [f"peer/j{j}".encode() for j in range(n)]
    payload = bytes(size)
    epoch_minus_monotonic = time.time() - time.monotonic()
    conn.send(f"tcp://127.0.0.1:{port}")
    conn.close()
    period, k, t0 = 1.0 / rate, 0, time.monotonic() + 0.1
    send, more = sock.send, zmq.SNDMORE
    while True:
        deadline = t0 + k * period
        rest = deadline - time.monotonic() - _SPIN_S
        if rest > 0:
            time.sleep(rest)
        while time.monotonic() < deadline:
            pass
        stamp = b"%.9f" % (deadline + epoch_minus_monotonic)
        for topic in topics:
            send(topic, more)
            send(payload, more)
            send(stamp)
        k += 1


def _subscribe(pub: str, seconds: float, warmup: float, capacity: int, on_start=None, native: bool = True) -> dict:
    """Connect a SUB to `pub`, let the subscription settle for `warmup` s, call `on_start()`, then receive
    for `seconds`, with the C receiver at SUBSCRIBER_PRIORITY (`native`) or from Python at normal priority:
    a dict of numpy arrays, one row per message (`received` epoch s, `stamp` the timestamp frame [s],
    `topic`, `head` the payload's first bytes), `window_s`, `malformed` (`zmq_receiver`)
    and `fifo` (whether the receiver ran SCHED_FIFO)."""
    with _realtime(SUBSCRIBER_PRIORITY) if native else contextlib.nullcontext(False) as fifo:
        rx = _receive(pub, seconds, warmup, capacity, on_start, native)
    return rx | {"fifo": fifo}


def _receive(pub: str, seconds: float, warmup: float, capacity: int, on_start, native: bool) -> dict:
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 1_000_000)
    sub.setsockopt(zmq.RCVTIMEO, 50)        # lets the C receiver see the window's end
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(pub)
    end_warm = time.monotonic() + warmup
    while time.monotonic() < end_warm:  # slow joiner: let the subscription settle, keep the queue empty
        if sub.poll(10):
            _drain(sub, [])
    _drain(sub, [])
    if on_start is not None:
        on_start()
    try:
        if native:
            return zmq_receiver.receive(sub.underlying, seconds, capacity)
        frames: list = []
        wall0 = time.monotonic()
        end = wall0 + seconds
        # the window keeps ~10⁵ tuples alive: the collector's full passes over them would stall this
        # subscriber for tens of ms and show as the publisher's latency
        gc.disable()
        try:
            while time.monotonic() < end:
                if sub.poll(50):
                    _drain(sub, frames)
        finally:
            gc.enable()
        return {"received": np.array([f[0] for f in frames]), "stamp": np.array([float(f[3]) for f in frames]),
                "topic": np.array([f[1] for f in frames], dtype=object),
                "head": np.array([f[2][:32] for f in frames], dtype=object),
                "payload_len": np.array([len(f[2]) for f in frames]),
                "window_s": time.monotonic() - wall0, "malformed": 0}
    finally:
        sub.close()
        ctx.term()


def _latency_us(rx: dict) -> dict:
    lat = (rx["received"] - rx["stamp"]) * 1e6
    return {"latency_p50_us": float(np.percentile(lat, 50)) if len(lat) else None,
            "latency_p99_us": float(np.percentile(lat, 99)) if len(lat) else None}


def _seq_gaps(rx: dict) -> int:
    """Messages missing from each topic's `seq` series (the first key of the daemon's payload map)."""
    last_seq: dict[bytes, int] = {}
    gaps = 0
    for topic, head in zip(rx["topic"], rx["head"], strict=True):
        unpacker = msgpack.Unpacker()
        unpacker.feed(bytes(head))
        unpacker.read_map_header()
        if unpacker.unpack() != "seq":
            raise ValueError(f"payload of {topic!r} does not start with seq")
        seq = unpacker.unpack()
        if topic in last_seq and seq != last_seq[topic] + 1:
            gaps += seq - last_seq[topic] - 1
        last_seq[topic] = seq
    return gaps


def _capacity(rate: float, actuators: int, seconds: float) -> int:
    return int(rate * actuators * (seconds + 1) * 1.2) + 1000


def _measure_peer(rate: float, actuators: int, payload_bytes: int, seconds: float, warmup: float) -> dict:
    with PeerProcess(_peer, (rate, actuators, payload_bytes), "zmq-peer") as peer:
        rx = _subscribe(peer.address, seconds, warmup, _capacity(rate, actuators, seconds))
    return {"received": len(rx["received"]), "expected_approx": round(rx["window_s"] * rate * actuators),
            "payload_bytes": payload_bytes, **_latency_us(rx),
            "subscriber_fifo": rx["fifo"],
            "what": "a process sending as many messages per tick from Python (SCHED_FIFO when allowed, as the "
                    "daemon's publisher), no simulation behind them"}


def _measure(proc, pub, cmd, rate, seconds, actuators, publish_every, warmup) -> dict:
    deadline = time.monotonic() + 20
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited: {proc.stderr.read()}")
        try:
            request(cmd, {"cmd": "status"}, 0.5)
            break
        except TimeoutError:
            if time.monotonic() > deadline:
                raise
    start: dict = {}

    def on_start() -> None:
        start.update(timing=request(cmd, {"cmd": "timing"})["timing"], steal=StealMeter(), cpu=cpu_ns(proc.pid))

    capacity = _capacity(rate / publish_every, actuators, seconds)
    rx = _subscribe(pub, seconds, warmup, capacity, on_start)
    wall = rx["window_s"]
    t0, steal, cpu0 = start["timing"], start["steal"], start["cpu"]
    gaps = _seq_gaps(rx)   # decoded after the window so that the subscriber keeps up
    received = len(rx["received"])
    cpu = (cpu_ns(proc.pid) - cpu0) * 1e-9
    t1 = request(cmd, {"cmd": "timing"})["timing"]
    steal_fraction = steal.fraction()
    hist = np.zeros(max(t1["histogram_us"], default=0) + 1, dtype=np.int64)  # window = end − start counts
    for b, c in t1["histogram_us"].items():
        hist[int(b)] = c - t0["histogram_us"].get(b, 0)
    wakeups = t1["wakeups"] - t0["wakeups"]
    overruns = t1["overruns"] - t0["overruns"]
    pct = {name: percentile_us(hist, q) for name, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999))}
    expected = wall * rate / publish_every * actuators
    out = {
        "config": {"rate_hz": rate, "seconds": seconds, "actuators": actuators, "publish_every": publish_every,
                   "rt_mode": t1["rt_mode"], "mqtt": "embedded amqtt broker + daemon client"},
        "loop": {"wakeups": wakeups, "lateness_p50_us": pct["p50"], "lateness_p99_us": pct["p99"],
                 "lateness_p999_us": pct["p999"], "overruns": overruns,
                 "overrun_fraction": overruns / max(wakeups, 1),
                 "skipped_periods": t1["skipped_periods"] - t0["skipped_periods"],
                 "work_us_per_tick": (t1["work_ns"] - t0["work_ns"]) / max(t1["tick"] - t0["tick"], 1) / 1e3},
        "steal_fraction": steal_fraction,
        "daemon_cpu_percent": 100.0 * cpu / wall,
        "zmq": {"received": received, "expected_approx": round(expected), "drops_seq_gaps": gaps,
                "sample_ring_drops": t1["sample_drops"] - t0["sample_drops"],
                "malformed": rx["malformed"], **_latency_us(rx),
                "latency_measure": "receive time in a C subscriber − tick deadline (the message's timestamp frame)",
                "subscriber_fifo": rx["fifo"],
                "payload_bytes": int(np.median(rx["payload_len"])) if received else 0},
    }
    judged = steal_fraction < STEAL_LIMIT
    if rate <= 1000:
        targets = {"lateness_p50_le_20us": pct["p50"] is not None and pct["p50"] <= 20,
                   "lateness_p99_le_100us": pct["p99"] is not None and pct["p99"] <= 100,
                   "overruns_lt_0.1pct": out["loop"]["overrun_fraction"] < 0.001,
                   "zmq_p99_le_500us": received > 0 and out["zmq"]["latency_p99_us"] <= 500,
                   "zmq_zero_drops": gaps == 0 and out["zmq"]["sample_ring_drops"] == 0}
    else:
        targets = {"lateness_p99_le_100us": pct["p99"] is not None and pct["p99"] <= 100}
    rx = _subscribe(pub, seconds, 0.5, capacity, native=False)
    out["zmq_python_subscriber"] = {"received": len(rx["received"]), **_latency_us(rx),
                                    "what": "the same stream received by Python (pyzmq recv() per frame) at "
                                            "normal priority, as a Python script sees it; not judged"}
    out["targets"] = targets if judged else {"inconclusive": f"steal {100 * steal_fraction:.2f} % >= 2 %"}
    return out

