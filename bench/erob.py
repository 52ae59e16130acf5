"""`servo-hil bench erob`: the two ways a controller drives our eRobs, timed at 1 kHz, as JSON.

Two eRobs of a `servo-hil run` subprocess, driven over CANopen (SLCAN on a pty) and over Etherban, against the
CANopen cycle's wire-time floor and echo peers. Method: docs/benchmarks.md; figures and targets:
docs/performance.md.
"""

from __future__ import annotations

import math
import os
import select
import struct
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from bench.host import (
    DaemonProcess,
    PeerProcess,
    cpu_ns,
    cpu_split,
    disturbance_notes,
    free_port,
    latency_stats,
    loadavg,
    machine,
    peer_pty,
    probe,
)
from drivers.emulated.slcan.adapter import CanFrame, encode_frame, frame_bits
from servo_hil.daemon.telemetry import StealMeter, percentile_us

BITRATE = 1_000_000
PERIOD_S = 1e-3
NODES = (2, 3)                                  # CAN node IDs; Etherban devices 0, 1 are the same drives
RIG_ACTUATORS = (("erob100", "erob80_100", 2.0, 0.2, 2), ("erob50", "erob80_50", 1.0, 0.2, 3))
SYNC_ID = 0x080
TPDO1, RPDO1 = 0x180, 0x200
CONTROLWORD_ENABLE = 0x0F
CSP = 8
KP = (10.0, 10.0)                               # bam's Client.position_control gains, per device
DAMPING = (2.0, 1.0)                            # eRob80:100, eRob80:50 (bam/actuators.py ErobActuator damping)
MAX_AMPS = 12.0
ETHERBAN_STEP_RAD = 0.1                         # the fixed PD target: the first position + this
PEER_POSITION = 0                               # what the SLCAN peer's TPDOs carry
PEER_STATUSWORD = 0x1237                        # Operation enabled, CSP "follows the command"
IDLE_S = 0.5                                    # server background CPU, measured before each phase
DRAIN_S = 1.0                                   # late TPDOs are still read (and timed) this long after the loop
SDO_TIMEOUT_S = 1.0
WRITE_TIMEOUT_S = 2.0


def _log(msg: str) -> None:
    print(f"bench erob: {msg}", file=sys.stderr, flush=True)


def _versions() -> dict:
    out = {}
    for pkg in ("python-can", "canopen", "pyzmq", "protobuf"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


# ---------------------------------------------------------------------------------------- frames
def _rpdo_data(target: int) -> bytes:
    return struct.pack("<Hi", CONTROLWORD_ENABLE, target)


def _tpdo_data(statusword: int, position: int) -> bytes:
    return struct.pack("<Hi", statusword, position)


def wire_floor() -> dict:
    """Wire time of one cycle's frames at BITRATE [µs]: 2 RPDOs, the SYNC, 2 TPDOs (frame_bits each)."""
    rpdo = [frame_bits(CanFrame(RPDO1 + n, _rpdo_data(0))) for n in NODES]
    sync = frame_bits(CanFrame(SYNC_ID))
    tpdo = [frame_bits(CanFrame(TPDO1 + n, _tpdo_data(0, 0))) for n in NODES]
    bits = sum(rpdo) + sync + sum(tpdo)
    return {"bits": bits, "floor_us": bits / BITRATE * 1e6, "rpdo_bits": rpdo[0], "sync_bits": sync,
            "tpdo_bits": tpdo[0], "without_rpdos_us": (sync + sum(tpdo)) / BITRATE * 1e6,
            "bitrate": BITRATE}


# ---------------------------------------------------------------------------------------- peers
def slcan_peer(conn, tpdo_lines: bytes) -> None:
    """Benchmark harness, not an emulator: an SLCAN adapter on a pty that answers at once.

    Runs in its own process. Sends the slave's path on `conn`, then loops: blocking read on the
    master, split lines at CR; a frame line gets `z` (`Z` for 29-bit), a SYNC line (`t0800`) is then
    followed by the canned TPDO lines; any other command gets CR. No wire pacing. Ends on SIGTERM.
    """
    buf = b""
    for master, data in peer_pty(conn):
        buf += data
        out = b""
        while True:
            i = buf.find(b"\r")
            if i < 0:
                break
            line, buf = buf[:i].replace(b"\n", b""), buf[i + 1:]
            kind = line[:1]
            if kind in (b"t", b"r"):
                out += b"z\r"
                if line == b"t0800":
                    out += tpdo_lines
            elif kind in (b"T", b"R"):
                out += b"Z\r"
            else:
                out += b"\r"
        if out:
            os.write(master, out)


def zmq_peer(conn, reply: bytes) -> None:
    """Benchmark harness, not an emulator: a pyzmq REP socket on a free loopback port that answers every
    request with the canned `reply` at once. Sends its endpoint on `conn`; ends on SIGTERM."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.REP)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    conn.send(f"tcp://127.0.0.1:{port}")
    conn.close()
    while True:
        sock.recv()
        sock.send(reply)


def _peer_tpdo_lines() -> bytes:
    return b"".join(encode_frame(CanFrame(TPDO1 + n, _tpdo_data(PEER_STATUSWORD, PEER_POSITION))) for n in NODES)


def _peer_response() -> bytes:
    from drivers.emulated.etherban import etherban_pb2 as pb

    r = pb.Response()
    for i in range(len(NODES)):
        s = r.statuses.add()
        s.device = i
        s.present_position = s.target_position = 0.0
        s.present_velocity = s.velocity_demand = s.torque_demand = s.present_current = 0.0
    r.has_fault = False
    return r.SerializeToString()


# ---------------------------------------------------------------------------------------- daemon
def _rig_text(can_path: str, etherban: str, pub: str, cmd: str) -> str:
    actuators = "".join(f'\n[[actuators]]\njoint = "{joint}"\ncatalog = "{cat}"\nmodel = "m6"\n'
                        f'load = {{ mass = {mass}, length = {length} }}\nbus = "can"\nid = {nid}\n'
                        for joint, cat, mass, length, nid in RIG_ACTUATORS)
    joints = ", ".join(f'"{a[0]}"' for a in RIG_ACTUATORS)
    return (f'name = "bench_erob"\n[loop]\nrate_hz = 1000\nintegrator = "euler"\n'
            f'[zmq]\npub = "{pub}"\ncommand = "{cmd}"\n[mqtt]\nenabled = false\n'
            f'[[buses]]\nname = "can"\nprotocol = "canopen"\nport = "{can_path}"\nbaud = {BITRATE}\n'
            f'[[buses]]\nname = "ethercat"\nprotocol = "etherban"\nbind = "{etherban}"\njoints = [{joints}]\n'
            f'{actuators}')


class _Daemon(DaemonProcess):
    """`servo-hil run RIG` on a generated rig, ready once both bus lines are printed."""

    def __init__(self, tmp: Path):
        self.path = str(tmp / "ttyCAN")
        self.etherban = f"tcp://127.0.0.1:{free_port()}"
        self.command = f"tcp://127.0.0.1:{free_port()}"
        rig = tmp / "rig_erob.toml"
        rig.write_text(_rig_text(self.path, self.etherban, f"tcp://127.0.0.1:{free_port()}", self.command))
        super().__init__(rig, [], ("servo-hil: canopen bus", "servo-hil: etherban bus"), tmp / "daemon.log")

    def status(self) -> dict | None:
        """The daemon's loop telemetry (a subset of `servo-hil status --json`), or None if it does not answer."""
        from servo_hil.daemon.zmq_io import request

        try:
            st = request(self.command, {"cmd": "status"}, 2.0).get("status", {})
        except TimeoutError:
            return None
        keys = ("rate_hz", "rt_mode", "tick", "lateness_p50_us", "lateness_p99_us", "lateness_max_us", "overruns",
                "overrun_fraction", "cpu_percent", "steal_fraction")
        return {k: st.get(k) for k in keys}


# ---------------------------------------------------------------------------------------- CANopen client
class _Pacer:
    """The cycles of a client loop on absolute deadlines `period` ns apart: iterating sleeps until each
    deadline and yields (cycle k, its deadline [ns, perf_counter]). A client a whole period or more behind
    skips the deadlines it missed (counted in `skipped` from the end of the warm-up; no burst to catch
    up), as the drives' own tick does. `probes` holds the CPU probe at the end of the warm-up and, once
    the loop is done, at its end; `deadlines` every cycle's deadline."""

    def __init__(self, total: int, warmup: int, probe, period: int):
        self.total, self.warmup, self.probe, self.period = total, warmup, probe, period
        self.deadlines = np.zeros(total, dtype=np.int64)
        self.skipped = 0
        self.probes: list = []

    def __iter__(self):
        period = self.period
        due = time.perf_counter_ns() + 2 * period
        for k in range(self.total):
            if k == self.warmup:
                self.probes.append(self.probe())
                self.skipped = 0
            late = time.perf_counter_ns() - due
            if late > period:
                n = late // period
                due += n * period
                self.skipped += n
            self.deadlines[k] = due
            left = due - time.perf_counter_ns()
            if left > 0:
                time.sleep(left / 1e9)
            yield k, due
            due += period
        self.probes.append(self.probe())


def _configure_nodes(bus) -> dict[int, int]:
    """SDO set-up of every node (PDO maps, CSP, Operation enabled), NMT start; the held positions [counts]."""
    import canopen

    network = canopen.Network(bus)
    network.connect()                       # a Notifier on our bus: the SDO clients need it
    holds: dict[int, int] = {}
    try:
        nodes = {}
        for nid in NODES:
            node = canopen.RemoteNode(nid, canopen.ObjectDictionary())
            node.sdo.RESPONSE_TIMEOUT = SDO_TIMEOUT_S
            network.add_node(node)
            nodes[nid] = node
        network.nmt.send_command(0x80)      # everyone PRE-OPERATIONAL (PDOs off) while we configure
        for nid, node in nodes.items():
            sdo = node.sdo

            def w(index: int, sub: int, fmt: str, value: int, sdo=sdo) -> None:
                sdo.download(index, sub, struct.pack("<" + fmt, value))

            def r(index: int, sub: int, fmt: str, sdo=sdo) -> int:
                return struct.unpack("<" + fmt, sdo.upload(index, sub))[0]

            for comm, mapping, cob, ttype, entries in (
                    (0x1800, 0x1A00, TPDO1 + nid, 1, (0x60410010, 0x60640020)),
                    (0x1400, 0x1600, RPDO1 + nid, 255, (0x60400010, 0x607A0020))):
                w(comm, 1, "I", 0x8000_0000 | cob)          # invalidate
                w(comm, 2, "B", ttype)
                w(mapping, 0, "B", 0)
                for k, e in enumerate(entries, 1):
                    w(mapping, k, "I", e)
                w(mapping, 0, "B", len(entries))
                w(comm, 1, "I", cob)                         # valid again
            for n in (1, 2, 3):                              # the other PDOs off: nothing else on the wire
                for comm in (0x1400 + n, 0x1800 + n):
                    cob = r(comm, 1, "I")
                    if not cob & 0x8000_0000:
                        w(comm, 1, "I", cob | 0x8000_0000)
            w(0x1006, 0, "I", int(PERIOD_S * 1e6))           # the SYNC period [µs] (CSP interpolation)
            if r(0x6041, 0, "H") & 0x08:                     # fault: reset it
                w(0x6040, 0, "H", 0x00)
                w(0x6040, 0, "H", 0x80)
            w(0x6060, 0, "b", CSP)
            holds[nid] = r(0x6064, 0, "i")
            w(0x607A, 0, "i", holds[nid])
            for cw in (0x06, 0x07, 0x0F):
                w(0x6040, 0, "H", cw)
            sw = r(0x6041, 0, "H")
            if sw & 0x6F != 0x27:
                raise RuntimeError(f"node {nid}: not in Operation enabled after 0x06, 0x07, 0x0F "
                                   f"(statusword 0x{sw:04X})")
            if r(0x6061, 0, "b") != CSP:
                raise RuntimeError(f"node {nid}: mode display is not CSP")
        network.nmt.send_command(0x01)      # all OPERATIONAL
    finally:
        if network.notifier is not None:
            network.notifier.stop(5.0)      # the loop reads the bus itself
    return holds


class _RawIo:
    """The lean client: the three frames in one write of precomputed SLCAN lines on the bus's own serial
    port, and every read in bulk (one os.read per wake-up), lines cut at CR; `z` acks skipped."""

    def __init__(self, bus, holds: dict[int, int]):
        self.fd = bus.serialPortOrig.fileno()
        self.out = b"".join(encode_frame(CanFrame(RPDO1 + n, _rpdo_data(holds[n]))) for n in NODES) + \
            encode_frame(CanFrame(SYNC_ID))
        self.slot = {f"{TPDO1 + n:03X}".encode(): i for i, n in enumerate(NODES)}
        self.buf = b""
        self.refused = 0                                   # BEL replies: a line the adapter refused
        while select.select([self.fd], [], [], 0.02)[0]:   # whatever the set-up left (acks)
            os.read(self.fd, 65536)

    def send_cycle(self, clock) -> tuple[int, int, int]:
        """(before the first RPDO, before the SYNC, after the SYNC) write times [ns]."""
        t0 = clock()
        view = memoryview(self.out)
        while view:
            try:
                view = view[os.write(self.fd, view):]
            except BlockingIOError:     # the adapter stopped reading: its transmit queue is full (as a USB NAK)
                if not select.select([], [self.fd], [], WRITE_TIMEOUT_S)[1]:
                    raise RuntimeError(f"SLCAN write blocked for {WRITE_TIMEOUT_S} s") from None
        return t0, t0, clock()

    def read(self, clock) -> list[tuple[int, bytes, int]]:
        """(slot or -1, data, time) of every complete frame line read now (call when readable)."""
        data = os.read(self.fd, 65536)
        t = clock()
        if b"\x07" in data:                                # BEL ends no line: count and drop it
            self.refused += data.count(b"\x07")
            data = data.replace(b"\x07", b"")
        *lines, self.buf = (self.buf + data).split(b"\r")
        out = []
        for line in lines:
            if line[:1] == b"t":
                out.append((self.slot.get(line[1:4], -1), line[5:], t))
            elif line[:1] in (b"T", b"r", b"R"):
                out.append((-1, b"", t))
        return out

    @staticmethod
    def decode(data: bytes) -> bytes:
        return bytes.fromhex(data.decode("ascii"))


class _PythonCanIo:
    """python-can as a controller uses it: `send()` per frame, `recv()` per frame (its slcan reader takes
    the pty byte by byte); recv(0) only after a select() so that no wait overshoots a deadline."""

    def __init__(self, bus, holds: dict[int, int]):
        import can

        self.bus = bus
        self.fd = bus.serialPortOrig.fileno()
        self.rpdos = [can.Message(arbitration_id=RPDO1 + n, data=_rpdo_data(holds[n]), is_extended_id=False)
                      for n in NODES]
        self.sync = can.Message(arbitration_id=SYNC_ID, data=b"", is_extended_id=False)
        self.slot = {TPDO1 + n: i for i, n in enumerate(NODES)}
        self.refused = None                                # python-can's reader skips BEL lines unseen
        while bus.recv(0.02) is not None:
            pass

    def send_cycle(self, clock) -> tuple[int, int, int]:
        t0 = clock()
        for m in self.rpdos:
            self.bus.send(m)
        t1 = clock()
        self.bus.send(self.sync)
        return t0, t1, clock()

    def read(self, clock) -> list[tuple[int, bytes, int]]:
        out = []
        while True:
            msg = self.bus.recv(0)      # the bytes already there, up to the first complete line
            if msg is not None:
                out.append((self.slot.get(msg.arbitration_id, -1), bytes(msg.data), clock()))
            if not select.select([self.fd], [], [], 0)[0]:
                return out

    @staticmethod
    def decode(data: bytes) -> bytes:
        return data


CLIENTS = {"lean": _RawIo, "python_can": _PythonCanIo}


def _can_client(path: str, cycles: int, warmup: int, configure: bool, client: str, probe) -> dict:
    """The 1 kHz RPDO + SYNC → TPDO loop on `path`; raw per-cycle timestamps and counters."""
    import can

    bus = can.Bus(interface="slcan", channel=path, bitrate=BITRATE, sleep_after_open=0)
    try:
        holds = _configure_nodes(bus) if configure else {n: PEER_POSITION for n in NODES}
        io = CLIENTS[client](bus, holds)
        fd = io.fd
        total = warmup + cycles
        t_sync = np.zeros(total, dtype=np.int64)
        t_first = np.zeros(total, dtype=np.int64)        # before the first RPDO write
        t_sent = np.zeros(total, dtype=np.int64)         # after the SYNC write returned
        t_tpdo = np.full((len(NODES), total), -1, dtype=np.int64)
        count = [0] * len(NODES)
        other = 0
        statuswords: set[int] = set()
        positions: list[list[int]] = [[] for _ in NODES]
        clock = time.perf_counter_ns

        def take(until_ns: int, want: int) -> None:
            """Read frames until every node sent `want` TPDOs, or until `until_ns`."""
            nonlocal other
            while min(count) < want:
                left = max(until_ns - clock(), 0)    # past the deadline: still take what is there
                if not select.select([fd], [], [], left / 1e9)[0]:
                    return
                for i, data, t in io.read(clock):
                    if i < 0:
                        other += 1
                        continue
                    k = count[i]
                    if k < total:
                        t_tpdo[i, k] = t
                        if k % 64 == 0:
                            payload = io.decode(data)
                            if len(payload) == 6:
                                sw, pos = struct.unpack("<Hi", payload)
                                statuswords.add(sw)
                                positions[i].append(pos)
                    count[i] += 1

        period = int(PERIOD_S * 1e9)
        pacer = _Pacer(total, warmup, probe, period)
        for k, due in pacer:
            t_first[k], t_sync[k], t_sent[k] = io.send_cycle(clock)
            take(due + period, k + 1)
        deadlines, skipped, probes = pacer.deadlines, pacer.skipped, pacer.probes
        take(clock() + int(DRAIN_S * 1e9), total)
        return {"deadlines": deadlines, "period": period, "skipped": skipped, "t_first": t_first, "t_sync": t_sync,
                "t_sent": t_sent, "t_tpdo": t_tpdo, "count": count, "other": other, "refused": io.refused,
                "probes": probes, "holds": holds, "statuswords": sorted(statuswords), "positions": positions}
    finally:
        bus.shutdown()


def _can_result(raw: dict, warmup: int, idle_cores: float) -> dict:
    s = slice(warmup, None)
    period, deadlines = raw["period"], raw["deadlines"][s]
    t_sync, t_first, t_sent = raw["t_sync"][s], raw["t_first"][s], raw["t_sent"][s]
    t_tpdo = raw["t_tpdo"][:, s]
    n = len(t_sync)
    got = (t_tpdo >= 0).all(axis=0)
    done = np.where(got, t_tpdo.max(axis=0), -1)
    missed = ~got | (done > deadlines + period)
    rt = (done - t_sync)[got]
    first = (t_tpdo.min(axis=0) - t_sync)[got]
    cycle = (done - t_first)[got]
    send = t_sent - t_first
    lateness = t_first - deadlines
    wall = (t_first[-1] - t_first[0]) / 1e9 if n > 1 else 0.0
    out = {
        "cycles": n,
        "misses": int(missed.sum()),
        "deadlines_skipped": raw["skipped"],
        "miss_fraction": float(missed.mean()) if n else None,
        "pairs_never_received": int((~got).sum()),
        "round_trips_over_period": int((rt > period).sum()),   # late whatever the client's own send lateness
        "achieved_rate_hz": (n - 1) / wall if wall > 0 else None,
        "round_trip": _stats_p95(rt.tolist()),
        "first_tpdo": _stats_p95(first.tolist()),
        "cycle_from_first_rpdo": _stats_p95(cycle.tolist()),
        "send": _stats_p95(send.tolist()),
        "send_lateness": _stats_p95(np.maximum(lateness, 0).tolist()),
        "tpdos_received": raw["count"],
        "other_frames": raw["other"],
        "lines_refused_by_adapter": raw["refused"],
        "statuswords_seen": [f"0x{w:04X}" for w in raw["statuswords"]],
        "held_position_counts": {str(k): v for k, v in raw["holds"].items()},
        "position_drift_counts": [int(max(p) - min(p)) if p else None for p in raw["positions"]],
    }
    out["cpu"] = cpu_split(*raw["probes"], n, idle_cores)
    return out


def _stats_p95(samples_ns: list[int]) -> dict:
    """`bench dynamixel`'s percentiles (1 µs histogram) plus p95."""
    st = latency_stats(samples_ns)
    p95 = percentile_us(np.bincount(np.asarray(samples_ns, dtype=np.int64) // 1000), 0.95) if samples_ns else None
    return {"samples": len(samples_ns), "p50_us": st["p50_us"], "p95_us": p95, "p99_us": st["p99_us"],
            "mean_us": st["mean_us"], "max_us": st["max_us"]}


# ---------------------------------------------------------------------------------------- Etherban client
def _etherban_client(endpoint: str, cycles: int, warmup: int, probe) -> dict:
    """bam's Client loop, lean: 1 kHz on absolute deadlines, TORQUE orders from the host PD."""
    import zmq

    from drivers.emulated.etherban import etherban_pb2 as pb

    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 2000)
    sock.connect(endpoint)
    clock = time.perf_counter_ns
    try:
        def exchange(req: bytes) -> tuple[int, int, object]:
            t0 = clock()
            sock.send(req)
            try:
                reply = sock.recv()
            except zmq.Again:
                raise RuntimeError(f"etherban {endpoint}: no reply within 2 s") from None
            t1 = clock()
            resp = pb.Response()
            resp.ParseFromString(reply)
            return t0, t1, resp

        _, _, resp = exchange(pb.Request().SerializeToString())   # no orders: the statuses only
        devices = len(NODES)
        q = [0.0] * devices
        dq = [0.0] * devices
        for st in resp.statuses:
            if 0 <= st.device < devices:
                q[st.device], dq[st.device] = st.present_position, st.present_velocity
        target = [x + ETHERBAN_STEP_RAD for x in q]
        total = warmup + cycles
        t_send = np.zeros(total, dtype=np.int64)
        t_recv = np.zeros(total, dtype=np.int64)
        faults = 0
        amps_max = 0.0
        period = int(PERIOD_S * 1e9)
        pacer = _Pacer(total, warmup, probe, period)
        for k, _due in pacer:
            req = pb.Request()
            for i in range(devices):
                amps = KP[i] * (target[i] - q[i]) + DAMPING[i] * math.sqrt(KP[i]) * (0.0 - dq[i])
                amps = max(-MAX_AMPS, min(MAX_AMPS, amps))
                amps_max = max(amps_max, abs(amps))
                o = req.orders.add()
                o.device, o.operation_mode, o.target = i, pb.TORQUE, amps
            t_send[k], t_recv[k], resp = exchange(req.SerializeToString())
            for st in resp.statuses:
                if 0 <= st.device < devices:
                    q[st.device], dq[st.device] = st.present_position, st.present_velocity
            faults += bool(resp.has_fault)
        deadlines, skipped, probes = pacer.deadlines, pacer.skipped, pacer.probes
        return {"deadlines": deadlines, "period": period, "skipped": skipped, "t_send": t_send, "t_recv": t_recv,
                "probes": probes, "faults": faults, "target": target, "final": q, "amps_max": amps_max}
    finally:
        sock.close(0)
        ctx.term()


def _etherban_result(raw: dict, warmup: int, idle_cores: float) -> dict:
    s = slice(warmup, None)
    t_send, t_recv = raw["t_send"][s], raw["t_recv"][s]
    n = len(t_send)
    deadlines = raw["deadlines"][s]
    overrun = t_recv > deadlines + raw["period"]
    lateness = t_send - deadlines
    wall = (t_send[-1] - t_send[0]) / 1e9 if n > 1 else 0.0
    return {
        "cycles": n,
        "overruns": int(overrun.sum()),
        "deadlines_skipped": raw["skipped"],
        "achieved_rate_hz": (n - 1) / wall if wall > 0 else None,
        "request_response": _stats_p95((t_recv - t_send).tolist()),
        "send_lateness": _stats_p95(np.maximum(lateness, 0).tolist()),
        "responses_with_fault": raw["faults"],
        "target_rad": raw["target"],
        "final_position_rad": raw["final"],
        "final_error_rad": [t - q for t, q in zip(raw["target"], raw["final"], strict=True)],
        "max_abs_amps_ordered": raw["amps_max"],
        "cpu": cpu_split(*raw["probes"], n, idle_cores),
    }


# ---------------------------------------------------------------------------------------- runs
def _idle_cores(pid: int) -> float:
    c0, t0 = cpu_ns(pid), time.perf_counter_ns()
    time.sleep(IDLE_S)
    return (cpu_ns(pid) - c0) / (time.perf_counter_ns() - t0)


def _phase(kind: str, server: str, address: str, pid: int, cycles: int, warmup: int, client: str = "lean") -> dict:
    idle = _idle_cores(pid)
    steal = StealMeter()
    wall0 = time.monotonic()
    if kind == "canopen":
        raw = _can_client(address, cycles, warmup, server == "servo-hil", client, probe(pid))
        res = _can_result(raw, warmup, idle)
    else:
        raw = _etherban_client(address, cycles, warmup, probe(pid))
        res = _etherban_result(raw, warmup, idle)
    return {"server": server, **res, "server_idle_cores": idle, "steal_fraction": steal.fraction(),
            "seconds": time.monotonic() - wall0}


def _ratios(emu: dict, peer: dict, what: str) -> dict:
    return {f"{what}_{s}_ratio": (emu[what][f"{s}_us"] / peer[what][f"{s}_us"]
                                  if emu[what][f"{s}_us"] and peer[what][f"{s}_us"] else None)
            for s in ("p50", "p99", "mean")}


def _compare_can(emu: dict, peer: dict, floor: dict) -> None:
    """Add the emulator's excess over the wire floor and over the peer (the client's own share)."""
    rt, prt = emu["round_trip"], peer["round_trip"]
    ok = rt["p50_us"] is not None and prt["p50_us"] is not None
    emu["round_trip_p50_minus_wire_floor_us"] = rt["p50_us"] - floor["floor_us"] if rt["p50_us"] else None
    emu["vs_echo_peer"] = {**_ratios(emu, peer, "round_trip"),
                           "round_trip_p50_minus_peer_p50_us": rt["p50_us"] - prt["p50_us"] if ok else None,
                           "round_trip_p50_minus_peer_p50_minus_wire_floor_us":
                               rt["p50_us"] - prt["p50_us"] - floor["floor_us"] if ok else None}


def run(cycles: int = 5000, warmup: int | None = None, quick: bool = False) -> dict:
    """Peers, then the daemon (CANopen with both clients, then Etherban); the JSON document as a dict."""
    if quick:
        cycles = min(cycles, 300)
    if warmup is None:
        warmup = 50 if quick else 200
    t_start, load_start = time.monotonic(), loadavg()
    can: dict[str, dict] = {c: {} for c in CLIENTS}
    with PeerProcess(slcan_peer, _peer_tpdo_lines(), "servo-hil-bench-slcan-peer") as p:
        for c in CLIENTS:
            _log(f"SLCAN echo peer, {c} client (client floor)")
            can[c]["echo_peer"] = _phase("canopen", "echo_peer", p.address, p.proc.pid, cycles, warmup, c)
    _log("ZeroMQ REP peer (client floor)")
    with PeerProcess(zmq_peer, _peer_response(), "servo-hil-bench-zmq-peer") as p:
        eb_peer = _phase("etherban", "echo_peer", p.address, p.proc.pid, cycles, warmup)
    with tempfile.TemporaryDirectory(prefix="servo-hil-bench-erob-") as tmpdir, _Daemon(Path(tmpdir)) as d:
        for c in CLIENTS:
            _log(f"servo-hil: CANopen over SLCAN, {c} client")
            can[c]["servo_hil"] = _phase("canopen", "servo-hil", d.path, d.proc.pid, cycles, warmup, c)
            can[c]["servo_hil"]["daemon_status"] = d.status()
        _log("servo-hil: Etherban")
        eb_emu = _phase("etherban", "servo-hil", d.etherban, d.proc.pid, cycles, warmup)
        eb_emu["daemon_status"] = d.status()

    floor = wire_floor()
    for c in CLIENTS:
        _compare_can(can[c]["servo_hil"], can[c]["echo_peer"], floor)
    eb_emu["vs_echo_peer"] = _ratios(eb_emu, eb_peer, "request_response")
    lean = can["lean"]["servo_hil"]
    rt, rr = lean["round_trip"], eb_emu["request_response"]
    targets = {
        "canopen_no_miss_at_1khz": lean["misses"] == 0 and lean["cycles"] > 0,
        "canopen_round_trip_p50_p99_reported": rt["p50_us"] is not None and rt["p99_us"] is not None,
        "etherban_request_response_p50_p99_reported": rr["p50_us"] is not None and rr["p99_us"] is not None,
    }
    phases = [*(can[c][s] for c in CLIENTS for s in ("echo_peer", "servo_hil")), eb_peer, eb_emu]
    max_steal = max(p["steal_fraction"] for p in phases)
    max_other = max((p["cpu"].get("other_cores") or 0.0) for p in phases)
    return {
        "config": {
            "nodes": {str(a[4]): a[1] for a in RIG_ACTUATORS},
            "etherban_devices": {str(i): a[1] for i, a in enumerate(RIG_ACTUATORS)},
            "loads": {a[0]: f"pendulum {a[2]} kg × {a[3]} m" for a in RIG_ACTUATORS},
            "rate_hz": 1 / PERIOD_S, "cycles": cycles, "warmup": warmup, "quick": quick,
            "canopen": "python-can slcan (bitrate 1 Mbit/s, sleep_after_open 0) on the daemon's pty; SDO set-up: "
                       "TPDO1 = 6041+6064 type 1, RPDO1 = 6040+607A type 255, other PDOs off, 0x1006 = 1000 µs, "
                       "CSP, Operation enabled holding the actual position, NMT start; per cycle on absolute "
                       "deadlines: RPDO 0x202, 0x203 (0x0F, hold), SYNC 0x080, then frames until both TPDOs; "
                       "a client a whole period behind skips the missed deadlines (deadlines_skipped)",
            "clients": "lean: the three frames in one write of precomputed SLCAN lines on the bus's serial port, "
                       "bulk reads (judged against the targets); python_can: bus.send() / bus.recv() per frame "
                       "(its slcan reader reads one byte per call)",
            "round_trip": "SYNC written → second TPDO read (the RPDOs are on the wire ahead of the SYNC)",
            "miss": "a cycle's TPDO pair not read before the next cycle's deadline",
            "etherban": f"pyzmq REQ, drivers.emulated.etherban.etherban_pb2; TORQUE orders from bam's PD toward the "
                        "first "
                        f"position + {ETHERBAN_STEP_RAD} rad, kp {KP}, damping {DAMPING}, ±{MAX_AMPS} A; "
                        "request/response = send → reply read; overrun = reply after the next deadline",
            "wire_floor": "frame_bits (worst-case stuffing + 3-bit interframe space) of 2 RPDOs + SYNC + 2 TPDOs "
                          "at 1 Mbit/s",
            "echo_peer": "canopen: a separate process answering SLCAN frames on a pty at once (z per frame, the "
                         "two canned TPDO lines after a SYNC, no pacing); etherban: a pyzmq REP process "
                         "answering a canned two-device Response; the client + transport floor on this machine",
            "daemon": "servo-hil run RIG --no-mqtt (loop 1000 Hz), one for both protocols",
            "cpu": "per phase, cores used by this client, the server process (all threads) and everything else "
                   "on the host; server_cpu_us_per_op excludes its idle background (server_idle_cores, "
                   f"measured for {IDLE_S} s before the phase)",
            "targets": "canopen (lean client): 0 misses at 1 kHz; p50/p99 reported (canopen round trip, "
                       "etherban request/response)",
        },
        "machine": {**machine(), **_versions(),
                    "loadavg_start": load_start, "loadavg_end": loadavg()},
        "canopen": {"wire_floor": floor, **{f"{c}_client": can[c] for c in CLIENTS}},
        "etherban": {"servo_hil": eb_emu, "echo_peer": eb_peer},
        "targets": targets,
        "all_targets_met": all(targets.values()),
        **disturbance_notes(max_steal, max_other, "client and server"),
        "elapsed_s": time.monotonic() - t_start,
    }

