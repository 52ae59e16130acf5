"""`servo-hil bench feetech`: scservo_sdk's GroupSyncRead of 6 STS3215 against our paced bus, as JSON.

Six STS3215 (LeRobot's SO-101 arm) on one bus of a `servo-hil run` subprocess at 1 Mbit/s, Return_Delay_Time 0 (as
LeRobot's configure_motors sets it), replies paced at the wire's rate. The client is unchanged feetech-servo-sdk
reading Present_Position + Present_Speed (addresses 56..59) of the six, back to back. Each round trip is judged
against the wire time plus the same-run floor: an echo peer that answers the same request with canned replies at
once (the SDK's and the pty's own cost). Method: docs/benchmarks.md; figures: docs/performance.md.
"""

from __future__ import annotations

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
from drivers.emulated.protocol1.frame import BROADCAST_ID, HEADER, Instruction, encode_instruction, encode_status
from drivers.wire.ports import wire_time_s
from servo_hil.daemon.telemetry import StealMeter

IDS = (1, 2, 3, 4, 5, 6)
MODEL = "sts3215"
BAUD = 1_000_000
PRESENT_POSITION = 56          # Present_Position (2 bytes) then Present_Speed (2 bytes): STS memory table
DATA_LEN = 4
PEER_DATA = (2048).to_bytes(2, "little") + b"\x00\x00"    # what the echo peer's servos all report
TARGET_RATIO = 0.10            # p50 within 10 % of (wire time + echo-peer floor)
IDLE_S = 0.5                   # server background CPU is measured over this before the client starts


def _log(msg: str) -> None:
    print(f"bench feetech: {msg}", file=sys.stderr, flush=True)


def sync_read_request(ids: tuple[int, ...] = IDS) -> bytes:
    """The SYNC READ (0x82) scservo_sdk's GroupSyncRead sends: address, length, the IDs (Feetech SCS protocol)."""
    return encode_instruction(BROADCAST_ID, Instruction.SYNC_READ, bytes((PRESENT_POSITION, DATA_LEN)) + bytes(ids))


def sync_read_wire_us(baud: int = BAUD, return_delay_s: float = 0.0, ids: tuple[int, ...] = IDS) -> dict:
    """Wire time of the request and the replies in ID order, each after its Return Delay [µs], with byte counts."""
    request = sync_read_request(ids)
    replies = [len(encode_status(i, 0, PEER_DATA)) for i in ids]
    t = wire_time_s(len(request), baud) + sum(return_delay_s + wire_time_s(n, baud) for n in replies)
    return {"wire_us": t * 1e6, "request_bytes": len(request), "status_bytes": sum(replies)}


def echo_peer(conn, replies: dict[bytes, bytes]) -> None:
    """Benchmark harness, not an emulator: `bench.host.serve_echo_peer` on the FF FF frame (LEN at offset 3 counts
    what follows it)."""
    serve_echo_peer(conn, replies, PeerFrame(HEADER, 4, 3, 1))


def _peer_replies() -> dict[bytes, bytes]:
    return {sync_read_request(): b"".join(encode_status(i, 0, PEER_DATA) for i in IDS)}


def rig_text(pub: str, cmd: str, fast: bool = False) -> str:
    """The benchmark rig (6 × STS3215 on bus "sts", Return_Delay_Time 0, paced unless `fast`) as TOML."""
    joints = "".join(f'\n[[actuators]]\njoint = "j{i}"\ncatalog = "{MODEL}"\nload = {{ mass = 0.1, length = 0.1 }}\n'
                     f'bus = "sts"\nid = {i}\nregisters = {{ Return_Delay_Time = 0 }}\n' for i in IDS)
    return (f'name = "bench_feetech"\n[zmq]\npub = "{pub}"\ncommand = "{cmd}"\n[mqtt]\nenabled = false\n'
            f'[[buses]]\nname = "sts"\nprotocol = "feetech"\nbaud = {BAUD}\nfast = {str(fast).lower()}\n{joints}')


class _Daemon(DaemonProcess):
    """`servo-hil run RIG --port PATH` on the benchmark rig, ready once its bus line is printed."""

    def __init__(self, tmp: Path, fast: bool):
        tag = "fast" if fast else "paced"
        rig = tmp / f"rig_{tag}.toml"
        rig.write_text(rig_text(f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}", fast))
        self.path = str(tmp / f"tty_{tag}")
        super().__init__(rig, ["--port", self.path], ("servo-hil: feetech bus",), tmp / f"daemon_{tag}.log")


def _client(path: str, cycles: int, warmup: int, probe) -> dict:
    """Time scservo_sdk's GroupSyncRead.txRxPacket() on `path`, back to back; failures counted, not timed."""
    import scservo_sdk as scs

    port = scs.PortHandler(path)
    if not port.openPort() or not port.setBaudRate(BAUD):
        raise RuntimeError(f"scservo_sdk could not open {path} at {BAUD} bit/s")
    try:
        reader = scs.GroupSyncRead(port, scs.PacketHandler(0), PRESENT_POSITION, DATA_LEN)
        for i in IDS:
            reader.addParam(i)
        clock, samples, failures = time.perf_counter_ns, [], {}
        for _ in range(warmup):
            reader.txRxPacket()
        probes = [probe()]
        for _ in range(cycles):
            t0 = clock()
            result = reader.txRxPacket()
            t1 = clock()
            if result == scs.COMM_SUCCESS:
                samples.append(t1 - t0)
            else:
                failures[result] = failures.get(result, 0) + 1
        probes.append(probe())
        present = {i: reader.getData(i, PRESENT_POSITION, 2) for i in IDS}
        return {"ns": samples, "failures": {str(k): v for k, v in failures.items()}, "probes": probes,
                "present": present}
    finally:
        port.closePort()


def _measure(server: str, path: str, cycles: int, warmup: int, pid: int, return_delay_s: float) -> dict:
    c0, t0 = cpu_ns(pid), time.perf_counter_ns()
    time.sleep(IDLE_S)                             # the server's own background CPU (loop, housekeeping)
    idle_cores = (cpu_ns(pid) - c0) / (time.perf_counter_ns() - t0)
    steal, wall0 = StealMeter(), time.monotonic()
    raw = _client(path, cycles, warmup, probe(pid))
    row = {"server": server, "samples": len(raw["ns"]), "failures": raw["failures"], **latency_stats(raw["ns"]),
           **sync_read_wire_us(BAUD, return_delay_s), "present": raw["present"],
           "cpu": cpu_split(*raw["probes"], cycles, idle_cores), "server_idle_cores": idle_cores,
           "steal_fraction": steal.fraction(), "seconds": time.monotonic() - wall0}
    row["sync_reads_per_s"] = 1e6 / row["mean_us"] if row["mean_us"] else None
    return row


def run(cycles: int = 1000, warmup: int = 50, quick: bool = False) -> dict:
    """The echo peer, our paced bus and our fast bus in one run; the target; the JSON document as a dict."""
    if quick:
        cycles, warmup = min(cycles, 100), min(warmup, 10)
    t_start, load_start = time.monotonic(), loadavg()
    with tempfile.TemporaryDirectory(prefix="servo-hil-bench-feetech-") as tmpdir:
        tmp = Path(tmpdir)
        _log("echo peer (scservo_sdk + pty floor)")
        with PeerProcess(echo_peer, _peer_replies(), "servo-hil-bench-feetech-peer") as peer:
            floor = _measure("echo_peer", peer.address, cycles, warmup, peer.proc.pid, 0.0)
        _log("servo-hil, paced")
        with _Daemon(tmp, fast=False) as d:
            paced = _measure("servo-hil paced", d.path, cycles, warmup, d.proc.pid, 0.0)
        _log("servo-hil, fast (no pacing: the server's own cost)")
        with _Daemon(tmp, fast=True) as d:
            fast = _measure("servo-hil fast", d.path, cycles, warmup, d.proc.pid, 0.0)
    target = None
    if paced["p50_us"] is not None and floor["p50_us"] is not None:
        bound = paced["wire_us"] + floor["p50_us"]
        target = {"wire_plus_floor_us": bound, "p50_us": paced["p50_us"], "p99_us": paced["p99_us"],
                  "ratio": paced["p50_us"] / bound, "excess_over_floor_us": paced["p50_us"] - bound,
                  "limit_ratio": 1 + TARGET_RATIO,
                  "met": paced["p50_us"] <= (1 + TARGET_RATIO) * bound and not paced["failures"]}
    runs = [floor, paced, fast]
    others = [r["cpu"].get("other_cores") or 0.0 for r in runs]
    return {
        "config": {
            "servos": len(IDS), "model": MODEL, "ids": list(IDS), "baud": BAUD, "return_delay_time": 0,
            "load": "pendulum 0.1 kg × 0.1 m", "cycles": cycles, "warmup": warmup, "quick": quick,
            "client": f"scservo_sdk GroupSyncRead({PRESENT_POSITION}, {DATA_LEN}) over {len(IDS)} IDs, "
                      "txRxPacket() back to back",
            "wire": "encoded request + replies × 10 bit / baud (8N1), Return Delay 0 before each reply",
            "echo_peer": "a separate process answering the same request with 6 canned status packets at once on a "
                         "pty: the SDK + pty floor on this host, same run",
            "target": "paced p50 ≤ 1.10 × (wire + echo-peer p50), all exchanges COMM_SUCCESS",
            "daemon": "servo-hil run RIG --port PATH --no-mqtt (loop 1000 Hz), one per configuration",
        },
        "machine": {**machine(), "feetech_servo_sdk": _sdk_version(), "loadavg_start": load_start,
                    "loadavg_end": loadavg()},
        "runs": runs,
        "target": target,
        "all_targets_met": bool(target and target["met"]),
        **disturbance_notes(max(r["steal_fraction"] for r in runs), max(others), "the SDK's busy wait and the server"),
        "elapsed_s": time.monotonic() - t_start,
    }


def _sdk_version() -> str | None:
    try:
        return version("feetech-servo-sdk")
    except PackageNotFoundError:
        return None
