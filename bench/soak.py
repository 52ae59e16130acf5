"""Soak of the Dynamixel bus under a 1 kHz control loop of unchanged dynamixel-sdk code, as JSON.

`servo-hil bench soak --seconds S` (`make soak`: an hour) runs the Sync Read + Sync Write loop against the
daemon and then against the echo peer. Method: docs/benchmarks.md; figures and targets: docs/performance.md.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.dynamixel import (
    DATA_LEN,
    GOAL_POSITION,
    IDS,
    MODEL,
    PRESENT_POSITION,
    SERVOS,
    _Daemon,
    _peer_replies,
    echo_peer,
    u32,
)
from bench.host import PeerProcess, disturbance_notes, latency_stats, loadavg, machine
from servo_hil.daemon.telemetry import StealMeter
from servo_hil.daemon.zmq_io import request

PERIOD_S = 1e-3        # the control loop's period [s]
WARMUP_S = 1.0         # cycles before the counted run (the SDK's and the server's first packets) [s]
BAUD = 4_000_000       # 12 Sync Read replies fit in 1 ms at 4 Mbit/s with Return Delay Time 0, not at 1 Mbit/s
RETURN_DELAY = 0       # Return Delay Time register [2 µs]


def rss_kb(pid: int) -> int | None:
    """VmRSS of process `pid` [kB], None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def control_loop(path: str, baud: int, seconds: float, server_pid: int) -> dict:
    """The 1 kHz Sync Read + Sync Write loop on `path` for `seconds` (after WARMUP_S); its figures."""
    from dynamixel_sdk import COMM_SUCCESS, GroupSyncRead, GroupSyncWrite, PacketHandler, PortHandler

    port = PortHandler(path)
    if not port.openPort() or not port.setBaudRate(baud):
        raise RuntimeError(f"cannot open {path} at {baud} bit/s")
    try:
        ph = PacketHandler(2.0)
        gsr = GroupSyncRead(port, ph, PRESENT_POSITION, DATA_LEN)
        gsw = GroupSyncWrite(port, ph, GOAL_POSITION, DATA_LEN)
        for i in IDS:
            gsr.addParam(i)
            gsw.addParam(i, list(u32(2048)))
        failures: dict[str, int] = {}
        late_ns: list[int] = []
        cycles = overruns = missed = 0
        clock = time.perf_counter_ns
        period_ns = int(PERIOD_S * 1e9)
        rss_start = None
        steal = None
        start = clock()
        counted_from = start + int(WARMUP_S * 1e9)
        end = counted_from + int(seconds * 1e9)
        k = 0
        while True:
            due = start + k * period_ns
            if due >= end:
                break
            counted = due >= counted_from
            now = clock()
            if now < due:
                if due - now > 300_000:
                    time.sleep((due - now - 200_000) / 1e9)
                while clock() < due:
                    pass
                now = clock()
            if counted and rss_start is None:
                rss_start, steal = rss_kb(server_pid), StealMeter()
            r = gsr.txRxPacket()
            if r == COMM_SUCCESS:
                for i in IDS:
                    v = gsr.getData(i, PRESENT_POSITION, DATA_LEN)
                    gsw.changeParam(i, list(u32(v)))
            w = gsw.txPacket()
            done = clock()
            k += 1
            if done > due + period_ns:   # overrun: the slots already past are skipped, the next starts at once
                skip = (done - due) // period_ns - 1
                k += skip
                if counted:
                    overruns += 1
                    missed += skip
            if not counted:
                continue
            cycles += 1
            late_ns.append(now - due)
            for what, result in (("sync read", r), ("sync write", w)):
                if result != COMM_SUCCESS:
                    key = f"{what}: {ph.getTxRxResult(result)}"
                    failures[key] = failures.get(key, 0) + 1
        return {"cycles": cycles, "failures": sum(failures.values()), "failures_by_class": failures,
                "overruns": overruns, "missed_slots": missed, "lateness": latency_stats(late_ns),
                "rss_start_kb": rss_start, "rss_end_kb": rss_kb(server_pid),
                "steal_fraction": steal.fraction() if steal else 0.0, "seconds": seconds}
    finally:
        port.closePort()


def server_view(command: str) -> dict | None:
    """The daemon's own counters of the bus (its `status`): what its bus thread saw on the wire (partial packets
    dropped at the inter-byte gap, CRC errors, replies late by over 1 ms and the latest, replies dropped), packets
    isolated, and its loop's overruns; None if it does not answer. Where a lost cycle was lost, when ours."""
    try:
        st = request(command, {"cmd": "status"}, timeout_s=5.0)["status"]
    except TimeoutError:
        return None
    return {"wire": st["bus_wire"].get("dxl"), "errors_isolated": st["bus_errors_isolated"].get("dxl"),
            "loop_overruns": st.get("overruns")}


def run(seconds: float = 3600.0, baud: int = BAUD) -> dict:
    t0, load_start = time.monotonic(), loadavg()
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="servo-hil-soak-") as tmpdir:
        with _Daemon(Path(tmpdir), baud, False, RETURN_DELAY) as d:
            runs["servo_hil"] = control_loop(d.path, baud, seconds, d.proc.pid)
            runs["servo_hil"]["server_exit_code"] = d.proc.poll()    # None: still running, as it must be
            runs["servo_hil"]["server"] = server_view(d.command)
        with PeerProcess(echo_peer, _peer_replies(), "servo-hil-soak-echo-peer") as peer:
            runs["echo_peer"] = control_loop(peer.address, baud, seconds, peer.proc.pid)
    ours, floor = runs["servo_hil"], runs["echo_peer"]
    rss_growth = (ours["rss_end_kb"] - ours["rss_start_kb"]
                  if ours["rss_end_kb"] is not None and ours["rss_start_kb"] is not None else None)
    targets = {
        "no_failures": ours["failures"] == 0,
        "no_more_failures_than_echo_peer": ours["failures"] <= floor["failures"],
        "server_alive": ours["server_exit_code"] is None,
        "rss_growth_below_5MB": rss_growth is not None and rss_growth < 5 * 1024,
    }
    max_steal = max(ours["steal_fraction"], floor["steal_fraction"])
    return {
        "config": {"servos": SERVOS, "model": MODEL, "baud": baud, "return_delay_register": RETURN_DELAY,
                   "period_s": PERIOD_S, "seconds_per_server": seconds, "warmup_s": WARMUP_S,
                   "cycle": f"GroupSyncRead({PRESENT_POSITION}, {DATA_LEN}) over {SERVOS} IDs txRxPacket() + "
                            f"GroupSyncWrite({GOAL_POSITION}, {DATA_LEN}) goal = present txPacket(), every 1 ms",
                   "overrun": "a cycle that ends after the next slot began: the next cycle starts at once, in the "
                              "slot it falls in, and the slots already past are counted as missed_slots",
                   "lateness": "a cycle's start behind its due time"},
        "machine": {**machine(), "loadavg_start": load_start, "loadavg_end": loadavg()},
        "runs": runs,
        "rss_growth_kb": rss_growth,
        "targets": targets,
        "all_targets_met": all(targets.values()),
        **disturbance_notes(max_steal, 0.0, "the SDK's busy wait and the server"),
        "elapsed_s": time.monotonic() - t0,
    }
