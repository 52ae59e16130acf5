"""`servo-hil bench dynamixel`: round trips of unchanged dynamixel-sdk code against our servos, as JSON.

12 XM430-W350 on one bus of a `servo-hil run` subprocess, timed paced and fast at 1 and 4 Mbit/s against the
wire-time bound and an echo peer. Method: docs/benchmarks.md; figures and targets: docs/performance.md.
"""

from __future__ import annotations

import struct
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from bench.host import (
    DaemonProcess,
    PeerFrame,
    PeerProcess,
    cpu_ns,
    cpu_split,
    disturbance_notes,
    free_port,
    latency_stats,
    loadavg,
    machine,
    probe,
    serve_echo_peer,
)
from drivers.emulated.dynamixel.protocol import BROADCAST_ID, HEADER, Instruction, encode_instruction, encode_status
from drivers.wire.ports import wire_time_s
from servo_hil.daemon.telemetry import StealMeter

SERVOS = 12
IDS = tuple(range(1, SERVOS + 1))
MODEL = "xm430_w350"
PRESENT_POSITION = 132
GOAL_POSITION = 116
DATA_LEN = 4
BAUDS = (1_000_000, 4_000_000)
RETURN_DELAYS = (0, 250)        # Return Delay Time register values [2 µs]: tuned, and the default
PEER_POSITION = 2048            # what the echo peer's servos all report
TARGET_RATIO = 0.10             # paced: p50 within 10 % of the bound ...
TARGET_SLACK_US = 50.0          # ... or within 50 µs of it
TARGET_CYCLES_PER_S = 2000.0    # fast: Sync Read + Sync Write cycles per second
IDLE_S = 0.5                    # server background CPU is measured over this before the client starts


def _sdk_version() -> str | None:
    try:
        return version("dynamixel-sdk")
    except PackageNotFoundError:
        return None


def _log(msg: str) -> None:
    print(f"bench dynamixel: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------- wire bound
def u32(v: int) -> bytes:
    """A 4-byte register value, little-endian (negative values as two's complement)."""
    return struct.pack("<I", v & 0xFFFFFFFF)


def _read_packets(dxl_id: int, value: int) -> tuple[bytes, bytes]:
    """(instruction, status) of a 4-byte read of Present Position that returns `value`."""
    return (encode_instruction(dxl_id, Instruction.READ, struct.pack("<HH", PRESENT_POSITION, DATA_LEN)),
            encode_status(dxl_id, 0, u32(value)))


def _sync_read_request(ids: tuple[int, ...]) -> bytes:
    return encode_instruction(BROADCAST_ID, Instruction.SYNC_READ,
                              struct.pack("<HH", PRESENT_POSITION, DATA_LEN) + bytes(ids))


def _sync_write(goals: dict[int, int]) -> bytes:
    params = struct.pack("<HH", GOAL_POSITION, DATA_LEN) + b"".join(bytes((i,)) + u32(v) for i, v in goals.items())
    return encode_instruction(BROADCAST_ID, Instruction.SYNC_WRITE, params)


def read_bound(baud: int, return_delay_s: float, value: int) -> dict:
    """Wire-time bound of one 4-byte read of ID 1 that returns `value` [µs], with the byte counts."""
    ins, st = _read_packets(1, value)
    t = wire_time_s(len(ins), baud) + return_delay_s + wire_time_s(len(st), baud)
    return {"bound_us": t * 1e6, "instruction_bytes": len(ins), "status_bytes": len(st)}


def sync_read_bound(baud: int, return_delay_s: float, values: dict[int, int]) -> dict:
    """Wire-time bound of the Sync Read request + the replies, in ID order [µs]."""
    sr = _sync_read_request(tuple(values))
    replies = [len(encode_status(i, 0, u32(v))) for i, v in values.items()]
    t = wire_time_s(len(sr), baud) + sum(return_delay_s + wire_time_s(n, baud) for n in replies)
    return {"bound_us": t * 1e6, "sync_read_request_bytes": len(sr), "status_bytes": sum(replies)}


def cycle_bound(baud: int, return_delay_s: float, values: dict[int, int]) -> dict:
    """Wire-time bound of Sync Write (goal = `values`) + Sync Read request + the replies, in ID order [µs]."""
    sw, sr = _sync_write(values), _sync_read_request(tuple(values))
    replies = [len(encode_status(i, 0, u32(v))) for i, v in values.items()]
    t = (wire_time_s(len(sw), baud) + wire_time_s(len(sr), baud)
         + sum(return_delay_s + wire_time_s(n, baud) for n in replies))
    return {"bound_us": t * 1e6, "sync_write_bytes": len(sw), "sync_read_request_bytes": len(sr),
            "status_bytes": sum(replies)}


# ---------------------------------------------------------------------------------------- echo peer
def _peer_replies() -> dict[bytes, bytes]:
    """Request bytes -> canned status bytes: the read of ID 1 and the Sync Read of IDs 1..12."""
    ins, st = _read_packets(1, PEER_POSITION)
    sync = b"".join(encode_status(i, 0, u32(PEER_POSITION)) for i in IDS)
    return {ins: st, _sync_read_request(IDS): sync}


def echo_peer(conn, replies: dict[bytes, bytes]) -> None:
    """Benchmark harness, not an emulator: `bench.host.serve_echo_peer` on Protocol 2.0 packets (header FF FF FD 00,
    a 2-byte LEN at offset 5 counting what follows it)."""
    serve_echo_peer(conn, replies, PeerFrame(HEADER, 7, 5, 2))


# ---------------------------------------------------------------------------------------- daemon
def rig_text(baud: int, fast: bool, return_delay: int, pub: str, cmd: str) -> str:
    """The benchmark rig (12 × XM430 on bus "dxl" at `baud`, paced unless `fast`) as TOML."""
    joints = "".join(f'\n[[actuators]]\njoint = "j{i}"\ncatalog = "{MODEL}"\n'
                     f'load = {{ mass = 0.3, length = 0.1 }}\nbus = "dxl"\nid = {i}\n'
                     f'registers = {{ "Return Delay Time" = {return_delay} }}\n' for i in IDS)
    return (f'name = "bench_dynamixel"\n[zmq]\npub = "{pub}"\ncommand = "{cmd}"\n[mqtt]\nenabled = false\n'
            f'[[buses]]\nname = "dxl"\nprotocol = "dynamixel"\nbaud = {baud}\nfast = {str(fast).lower()}\n'
            f'{joints}')


class _Daemon(DaemonProcess):
    """`servo-hil run RIG --port PATH` on a generated rig, ready once its bus line is printed."""

    def __init__(self, tmp: Path, baud: int, fast: bool, return_delay: int):
        tag = f"{baud}_{'fast' if fast else 'paced'}_{return_delay}"
        rig = tmp / f"rig_{tag}.toml"
        self.command = f"tcp://127.0.0.1:{free_port()}"    # the daemon's ZeroMQ command socket
        rig.write_text(rig_text(baud, fast, return_delay, f"tcp://127.0.0.1:{free_port()}", self.command))
        self.path = str(tmp / f"tty_{tag}")
        super().__init__(rig, ["--port", self.path], ("servo-hil: dynamixel bus",), tmp / f"daemon_{tag}.log")


# ---------------------------------------------------------------------------------------- client
def _client(path: str, baud: int, reads: int, cycles: int, warmup: int, probe) -> dict:
    """Time the SDK's read and Sync Read + Sync Write cycle on `path` at `baud`.

    `probe()` is called before and after each timed phase (warm-ups excluded) and its snapshots are returned.
    """
    from dynamixel_sdk import COMM_SUCCESS, GroupSyncRead, GroupSyncWrite, PacketHandler, PortHandler

    port = PortHandler(path)
    if not port.openPort():
        raise RuntimeError(f"PortHandler({path!r}).openPort() failed")
    try:
        if not port.setBaudRate(baud):
            raise RuntimeError(f"setBaudRate({baud}) failed")
        ph = PacketHandler(2.0)
        clock = time.perf_counter_ns
        codes: dict[str, int] = {}

        def fail(what: str, result: int) -> None:
            key = f"{what}: {ph.getTxRxResult(result)}"
            codes[key] = codes.get(key, 0) + 1

        # (a) 4-byte read of ID 1
        for _ in range(warmup):
            ph.read4ByteTxRx(port, 1, PRESENT_POSITION)
        read_ns, read_fail, read_err, value = [], 0, 0, None
        read_probe = [probe()]
        for _ in range(reads):
            t0 = clock()
            v, result, error = ph.read4ByteTxRx(port, 1, PRESENT_POSITION)
            t1 = clock()
            if result != COMM_SUCCESS:
                read_fail += 1
                fail("read4", result)
                continue
            if error:
                read_err += 1
            value = v
            read_ns.append(t1 - t0)
        read_probe.append(probe())

        # (b) Sync Read of the 12, then Sync Write of goal = present
        gsr = GroupSyncRead(port, ph, PRESENT_POSITION, DATA_LEN)
        gsw = GroupSyncWrite(port, ph, GOAL_POSITION, DATA_LEN)
        for i in IDS:
            gsr.addParam(i)
        present: dict[int, int] | None = None
        for _ in range(20):    # goals must be real positions before the first write
            if gsr.txRxPacket() == COMM_SUCCESS:
                present = {i: gsr.getData(i, PRESENT_POSITION, DATA_LEN) for i in IDS}
                break
        if present is None:
            raise RuntimeError("no Sync Read succeeded: cannot start the cycle")
        for i, v in present.items():
            gsw.addParam(i, list(u32(v)))
        cyc_ns, sr_ns, sw_ns, sr_fail, sw_fail = [], [], [], 0, 0
        cycle_probe: list = []
        for k in range(warmup + cycles):
            if k == warmup:
                cycle_probe.append(probe())
            t0 = clock()
            r = gsr.txRxPacket()
            t1 = clock()
            if r == COMM_SUCCESS:
                for i in IDS:
                    v = gsr.getData(i, PRESENT_POSITION, DATA_LEN)
                    present[i] = v
                    gsw.changeParam(i, [v & 0xFF, (v >> 8) & 0xFF, (v >> 16) & 0xFF, (v >> 24) & 0xFF])
            t2 = clock()
            w = gsw.txPacket()
            t3 = clock()
            if k < warmup:
                continue
            if r != COMM_SUCCESS:
                sr_fail += 1
                fail("sync read", r)
            if w != COMM_SUCCESS:
                sw_fail += 1
                fail("sync write", w)
            if r == COMM_SUCCESS and w == COMM_SUCCESS:
                cyc_ns.append(t3 - t0)
                sr_ns.append(t1 - t0)
                sw_ns.append(t3 - t2)
        cycle_probe.append(probe())

        # (c) Sync Read alone, back to back
        for _ in range(warmup):
            gsr.txRxPacket()
        sro_ns, sro_fail, sro_value = [], 0, dict(present)
        sro_probe = [probe()]
        for _ in range(cycles):
            t0 = clock()
            r = gsr.txRxPacket()
            t1 = clock()
            if r == COMM_SUCCESS:
                sro_ns.append(t1 - t0)
            else:
                sro_fail += 1
                fail("sync read alone", r)
        if sro_ns:
            sro_value = {i: gsr.getData(i, PRESENT_POSITION, DATA_LEN) for i in IDS}
        sro_probe.append(probe())
        return {"read_ns": read_ns, "read_failures": read_fail, "read_error_status": read_err,
                "read_value": value, "cycle_ns": cyc_ns, "sync_read_ns": sr_ns, "sync_write_ns": sw_ns,
                "sync_read_failures": sr_fail, "sync_write_failures": sw_fail, "present": present,
                "failure_results": codes, "read_probe": read_probe, "cycle_probe": cycle_probe,
                "sync_read_only_ns": sro_ns, "sync_read_only_failures": sro_fail, "sync_read_only_present": sro_value,
                "sync_read_only_probe": sro_probe}
    finally:
        port.closePort()


def _judge_paced(st: dict) -> bool:
    if st["p50_us"] is None:
        return False
    slack = max(TARGET_RATIO * st["bound_us"], TARGET_SLACK_US)
    return st["p50_us"] - st["bound_us"] <= slack


def _read4_floor(paced: dict, peer: dict) -> dict:
    """Whether any server could meet a paced read4's target on this machine: the echo peer's read4 p50 (no server
    time, no wire time: the SDK's and the pty's own share of a round trip, in the same run) is a lower bound of
    p50 − bound for any server that answers no earlier than the wire allows, so a target whose slack is below it
    cannot be met. (The cycle has no such floor: there the client's own time overlaps the paced wire time.)"""
    floor = peer["p50_us"]
    if floor is None:
        return {"client_floor_us": None, "attainable": None}
    slack = max(TARGET_RATIO * paced["bound_us"], TARGET_SLACK_US)
    return {"client_floor_us": floor, "target_slack_us": slack, "attainable": floor <= slack}


def _measure(server: str, path: str, baud: int, fast: bool, return_delay: int, reads: int, cycles: int,
             warmup: int, pid: int) -> dict:
    """One configuration: raw samples -> the result row."""
    rd_s = 0.0 if fast else return_delay * 2e-6   # fast mode drops the delays
    c0, t0 = cpu_ns(pid), time.perf_counter_ns()
    time.sleep(IDLE_S)                             # the server's own background CPU (loop, housekeeping)
    idle_cores = (cpu_ns(pid) - c0) / (time.perf_counter_ns() - t0)
    steal = StealMeter()
    wall0 = time.monotonic()
    raw = _client(path, baud, reads, cycles, warmup, probe(pid))
    wall = time.monotonic() - wall0
    steal_fraction = steal.fraction()

    read = {"samples": len(raw["read_ns"]), "failures": raw["read_failures"],
            "error_status": raw["read_error_status"], **latency_stats(raw["read_ns"]),
            **read_bound(baud, rd_s, raw["read_value"] if raw["read_value"] is not None else 0)}
    cycle = {"samples": len(raw["cycle_ns"]), "sync_read_failures": raw["sync_read_failures"],
             "sync_write_failures": raw["sync_write_failures"], **latency_stats(raw["cycle_ns"]),
             **cycle_bound(baud, rd_s, raw["present"])}
    cycle["cycles_per_s"] = 1e6 / cycle["mean_us"] if cycle["mean_us"] else None
    cycle["sync_read_txrx_p50_us"] = latency_stats(raw["sync_read_ns"])["p50_us"]
    cycle["sync_write_tx_p50_us"] = latency_stats(raw["sync_write_ns"])["p50_us"]
    sync_read = {"samples": len(raw["sync_read_only_ns"]), "failures": raw["sync_read_only_failures"],
                 **latency_stats(raw["sync_read_only_ns"]),
                 **sync_read_bound(baud, rd_s, raw["sync_read_only_present"])}
    sync_read["cycles_per_s"] = 1e6 / sync_read["mean_us"] if sync_read["mean_us"] else None
    for st in (read, cycle, sync_read):
        if st["p50_us"] is not None:
            st["p50_over_bound"] = st["p50_us"] / st["bound_us"]
            st["p50_minus_bound_us"] = st["p50_us"] - st["bound_us"]
    read["cpu"] = cpu_split(*raw["read_probe"], reads, idle_cores)
    cycle["cpu"] = cpu_split(*raw["cycle_probe"], cycles, idle_cores)
    sync_read["cpu"] = cpu_split(*raw["sync_read_only_probe"], cycles, idle_cores)
    return {"server": server, "baud": baud, "pacing": not fast,
            "return_delay_register": None if fast else return_delay, "return_delay_us": rd_s * 1e6,
            "read4": read, "cycle": cycle, "sync_read": sync_read, "failure_results": raw["failure_results"],
            "server_idle_cores": idle_cores, "steal_fraction": steal_fraction, "seconds": wall}


def _key(baud: int) -> str:
    return f"{baud // 1_000_000}Mbps"


def run(reads: int = 500, cycles: int = 300, warmup: int | None = None, quick: bool = False,
        bauds: tuple[int, ...] = BAUDS, return_delays: tuple[int, ...] = RETURN_DELAYS) -> dict:
    """Every configuration, the peer floor, and the targets; the JSON document as a dict."""
    if quick:
        reads, cycles = min(reads, 100), min(cycles, 50)
    if warmup is None:
        warmup = 10 if quick else 50
    t_start, load_start = time.monotonic(), loadavg()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="servo-hil-bench-dxl-") as tmpdir:
        tmp = Path(tmpdir)
        for baud in bauds:
            _log(f"{_key(baud)}: echo peer (SDK floor)")
            with PeerProcess(echo_peer, _peer_replies(), "servo-hil-bench-echo-peer") as peer:
                path = peer.address
                runs.append(_measure("echo_peer", path, baud, True, 0, reads, cycles, warmup, peer.proc.pid))
            configs = [(True, 0)] + [(False, rd) for rd in return_delays]
            for fast, rd in configs:
                _log(f"{_key(baud)}: servo-hil {'fast' if fast else f'paced, Return Delay Time {rd}'}")
                with _Daemon(tmp, baud, fast, rd) as d:
                    runs.append(_measure("servo-hil", d.path, baud, fast, rd, reads, cycles, warmup, d.proc.pid))

    targets: dict[str, bool] = {}
    peers = {r["baud"]: r for r in runs if r["server"] == "echo_peer"}
    for r in runs:
        if r["server"] != "servo-hil":
            continue
        k = _key(r["baud"])
        p = peers.get(r["baud"])
        if p:   # what our server adds to the SDK + pty floor measured in the same run
            for what in ("read4", "cycle", "sync_read"):
                ours, floor = r[what]["p50_us"], p[what]["p50_us"]
                if ours is not None and floor is not None:
                    r[what]["p50_minus_echo_peer_p50_us"] = ours - floor
                    if r["pacing"]:
                        r[what]["excess_over_floor_us"] = ours - r[what]["bound_us"] - floor
        if r["pacing"]:
            name = f"paced_{k}_rdt{r['return_delay_register']}"
            for what in ("read4", "cycle"):
                ok = _judge_paced(r[what]) and r[what]["samples"] > 0
                r[what]["within_target"] = ok
                targets[f"{name}_{what}_p50_within_10pct_or_50us_of_bound"] = ok
            if p:
                r["read4"].update(_read4_floor(r["read4"], p["read4"]))
        else:
            for what, key in (("cycle", f"fast_{k}_cycle_ge_2000_per_s"),
                              ("sync_read", f"fast_{k}_sync_read_ge_2000_per_s")):
                rate = r[what]["cycles_per_s"]
                ok = rate is not None and rate >= TARGET_CYCLES_PER_S
                r[what]["meets_target"] = ok
                targets[key] = ok
            if p:
                r["vs_echo_peer"] = {
                    f"{what}_{s}_ratio": (r[what][f"{s}_us"] / p[what][f"{s}_us"]
                                          if r[what][f"{s}_us"] and p[what][f"{s}_us"] else None)
                    for what in ("read4", "cycle", "sync_read") for s in ("p50", "mean")}
        failures = (r["read4"]["failures"] + r["cycle"]["sync_read_failures"] + r["cycle"]["sync_write_failures"]
                    + r["sync_read"]["failures"])
        targets[f"{'paced' if r['pacing'] else 'fast'}_{k}"
                f"{'_rdt' + str(r['return_delay_register']) if r['pacing'] else ''}_all_comm_success"] = failures == 0
    max_steal = max((r["steal_fraction"] for r in runs), default=0.0)
    others = [r[w]["cpu"].get("other_cores") or 0.0 for r in runs for w in ("read4", "cycle", "sync_read")]
    max_other = max(others, default=0.0)
    return {
        "config": {
            "servos": SERVOS, "model": MODEL, "ids": list(IDS), "load": "pendulum 0.3 kg × 0.1 m",
            "reads": reads, "cycles": cycles, "warmup": warmup, "quick": quick,
            "read4": f"read4ByteTxRx(port, 1, {PRESENT_POSITION})",
            "cycle": f"GroupSyncRead({PRESENT_POSITION}, {DATA_LEN}) over {SERVOS} IDs txRxPacket() + getData/"
                     f"changeParam + GroupSyncWrite({GOAL_POSITION}, {DATA_LEN}) goal = present txPacket(), "
                     "back to back",
            "sync_read": f"GroupSyncRead({PRESENT_POSITION}, {DATA_LEN}) over {SERVOS} IDs txRxPacket() alone, "
                         "back to back",
            "bound": "encoded packet bytes (stuffing counted) × 10 bit / baud, + Return Delay Time before each "
                     "reply; cycle = sync write + sync read request + Σ (return delay + status); sync_read = sync "
                     "read request + Σ (return delay + status)",
            "targets": "paced: p50 ≤ bound + max(10 % of bound, 50 µs); fast: cycles/s = 1/mean ≥ 2000, for the "
                       "Sync Read + Sync Write cycle and for the Sync Read alone",
            "excess_over_floor_us": "paced servo-hil rows: p50 − bound − echo-peer p50 (same run, same baud)",
            "client_floor_us": "paced read4: the echo peer's read4 p50 (same run, same baud), a lower bound of "
                               "p50 − bound for any server; attainable: whether it is within the target's slack "
                               "(target_slack_us = max(10 % of the bound, 50 µs))",
            "echo_peer": "separate process answering canned correct status packets at once on a pty: "
                         "the SDK + pty floor on this machine",
            "daemon": "servo-hil run RIG --port PATH --no-mqtt (loop 1000 Hz), one per configuration",
            "failures": "exchanges whose result is not COMM_SUCCESS are counted (failure_results) and not timed",
            "cpu": "per phase, cores used by this client (SDK busy wait), the server process (all threads) and "
                   "everything else on the host; server_cpu_us_per_op excludes its idle background "
                   "(server_idle_cores, measured for 0.5 s before the client starts)",
        },
        "machine": {**machine(), "dynamixel_sdk": _sdk_version(), "loadavg_start": load_start,
                    "loadavg_end": loadavg()},
        "runs": runs,
        "targets": targets,
        "all_targets_met": all(targets.values()),
        **disturbance_notes(max_steal, max_other, "the SDK's busy wait and the server"),
        "elapsed_s": time.monotonic() - t_start,
    }

