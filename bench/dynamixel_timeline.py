"""Where a paced Dynamixel round trip's time goes: a timeline of server and client stamps, as JSON.

`servo-hil bench dynamixel-timeline [--baud B] [--rdt R] [--n N]`: the daemon's bus steps and the SDK's port
calls stamped on one CLOCK_MONOTONIC; a diagnostic, not a judged benchmark (docs/benchmarks.md).
"""

from __future__ import annotations

import atexit
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.dynamixel import (
    DATA_LEN,
    GOAL_POSITION,
    IDS,
    PRESENT_POSITION,
    cycle_bound,
    read_bound,
    rig_text,
    u32,
)
from bench.host import DaemonProcess, free_port, loadavg
from servo_hil.daemon.telemetry import StealMeter

SYNC_READ, SYNC_WRITE = 0x82, 0x83
SLACK_NS = 2_000_000       # server stamps up to this long after a transaction's end still belong to it


# ---------------------------------------------------------------------------------------- the daemon side
def serve_stamped(out: str, rig: str, port: str) -> None:
    """In the daemon's process: wrap the bus's steps to stamp them, run the daemon of `rig` with its bus at
    `port` (no MQTT), write the stamps to `out` (JSON) at exit."""
    from drivers.emulated.dynamixel.bus import DynamixelBus
    from drivers.emulated.dynamixel.protocol import Parser
    from drivers.wire.ports import PacedWriter, PtyPort
    from servo_hil.wiring import dynamixel as attach

    ns, stamps = time.monotonic_ns, []
    read, write, feed, write_at = PtyPort.read, PtyPort.write, Parser.feed, PacedWriter.write_at

    def stamped_read(self, *a):
        t = ns()
        data = read(self, *a)
        if data:
            stamps.append(("read", t, ns(), len(data)))
        return data

    def stamped_write(self, data):
        t = ns()
        write(self, data)
        stamps.append(("write", t, ns(), len(data)))

    def stamped_feed(self, *a):
        packets = feed(self, *a)
        stamps.append(("parsed", ns(), len(packets)))
        return packets

    class StampedBus(DynamixelBus):   # the bus is a C class: its method is wrapped in a subclass attach builds
        def handle(self, packet, baud):
            t = ns()
            replies = super().handle(packet, baud)
            stamps.append(("exec", t, ns(), getattr(packet, "instruction", -1), len(replies)))
            return replies

    def stamped_write_at(self, data, start, baud):
        stamps.append(("due", ns(), round(start * 1e9), len(data), baud or 0))
        return write_at(self, data, start, baud)

    PtyPort.read, PtyPort.write, Parser.feed = stamped_read, stamped_write, stamped_feed
    attach.DynamixelBus, PacedWriter.write_at = StampedBus, stamped_write_at
    atexit.register(lambda: Path(out).write_text(json.dumps(stamps)))
    from servo_hil.daemon.service import serve

    serve(Path(rig), False, [port], "WARNING")


class _StampedDaemon(DaemonProcess):
    """`bench dynamixel`'s paced daemon, run through `serve_stamped`."""

    def __init__(self, tmp: Path, baud: int, return_delay: int):
        self.rig = tmp / "rig.toml"
        self.rig.write_text(rig_text(baud, False, return_delay, f"tcp://127.0.0.1:{free_port()}",
                                      f"tcp://127.0.0.1:{free_port()}"))
        self.path, self.stamps = str(tmp / "tty"), tmp / "stamps.json"
        super().__init__(self.rig, ["--port", self.path], ("servo-hil: dynamixel bus",), tmp / "daemon.log")

    def _argv(self) -> list[str]:
        """`servo-hil run …` through `serve_stamped` in the daemon's process."""
        return [sys.executable, "-m", "bench.dynamixel_timeline", "--serve", str(self.stamps), str(self.rig), self.path]


# ---------------------------------------------------------------------------------------- the client side
def _client(path: str, baud: int, n: int, warmup: int = 50) -> tuple[list, list]:
    """(read4 transactions, cycle transactions): (call start, call end, client stamps) each, monotonic ns."""
    from dynamixel_sdk import COMM_SUCCESS, GroupSyncRead, GroupSyncWrite, PacketHandler, PortHandler

    ns, stamps = time.monotonic_ns, []
    port = PortHandler(path)
    if not port.openPort() or not port.setBaudRate(baud):
        raise RuntimeError(f"cannot open {path!r} at {baud} bit/s")
    write_port, read_port = port.writePort, port.readPort

    def stamped_write(packet):
        t = ns()
        r = write_port(packet)
        stamps.append(("w", t, ns(), len(packet)))
        return r

    def stamped_read(length):
        data = read_port(length)
        if data:
            stamps.append(("r", ns(), len(data)))
        return data

    port.writePort, port.readPort = stamped_write, stamped_read
    ph = PacketHandler(2.0)
    reads, cycles = [], []
    try:
        for k in range(warmup + n):
            stamps.clear()
            t0 = ns()
            _, result, _ = ph.read4ByteTxRx(port, 1, PRESENT_POSITION)
            t1 = ns()
            if result == COMM_SUCCESS and k >= warmup:
                reads.append((t0, t1, list(stamps)))
        gsr = GroupSyncRead(port, ph, PRESENT_POSITION, DATA_LEN)
        gsw = GroupSyncWrite(port, ph, GOAL_POSITION, DATA_LEN)
        for i in IDS:
            gsr.addParam(i)
        if gsr.txRxPacket() != COMM_SUCCESS:
            raise RuntimeError("no Sync Read succeeded: cannot start the cycle")
        for i in IDS:
            gsw.addParam(i, list(u32(gsr.getData(i, PRESENT_POSITION, DATA_LEN))))
        for k in range(warmup + n):
            stamps.clear()
            t0 = ns()
            r = gsr.txRxPacket()
            t1 = ns()
            if r == COMM_SUCCESS:
                for i in IDS:
                    gsw.changeParam(i, list(u32(gsr.getData(i, PRESENT_POSITION, DATA_LEN))))
            w = gsw.txPacket()
            t3 = ns()
            if r == COMM_SUCCESS and w == COMM_SUCCESS and k >= warmup:
                cycles.append((t0, t3, [*stamps, ("sync_read_returned", t1)]))
    finally:
        port.closePort()
    return reads, cycles


# ---------------------------------------------------------------------------------------- the timeline
def _reply_stamps(server: list, after_ns: int, before_ns: int) -> dict:
    """The server's handling of the request whose write started at `after_ns`: the wake, the execution of
    the instruction that was answered, the reply's due times and its writes (those before `before_ns`, when
    the client had read it all)."""
    due = next(e for e in server if e[0] == "due" and e[1] >= after_ns)
    ex = [e for e in server if e[0] == "exec" and after_ns <= e[2] <= due[1]][-1]
    wake = [e for e in server if e[0] == "read" and after_ns <= e[1] <= ex[1]][-1]
    parsed = next(e for e in server if e[0] == "parsed" and e[1] >= wake[2])
    writes = [e for e in server if e[0] == "write" and due[1] <= e[1] < before_ns]
    byte_ns = 10e9 / due[4]
    return {"server_woke (read called)": wake[1], "server_read_returned": wake[2], "server_parsed": parsed[1],
            "server_execute_start": ex[1], "server_execute_end": ex[2], "server_paced_write_called": due[1],
            "reply_first_byte_start_due": due[2], "reply_last_byte_due": due[2] + due[3] * byte_ns,
            "server_first_write_returned": writes[0][2], "server_last_write_returned": writes[-1][2],
            "server_writes": len(writes)}


def _medians(rows: list[dict]) -> dict:
    return {k: round(statistics.median(r[k] for r in rows), 1) for k in rows[0]}


def timeline(reads: list, cycles: list, server: list) -> dict:
    """Median stamps [µs] relative to the start of the client's request write, per transaction kind."""
    server = sorted(server, key=lambda e: e[1])
    out: dict = {}
    rows = []
    for t0, t1, client in reads:
        try:
            w0 = next(e for e in client if e[0] == "w")
            got = [e for e in client if e[0] == "r"]
            stamps = {"client_call": t0, "client_write_returned": w0[2], **_reply_stamps(server, w0[1], t1),
                      "client_first_bytes_read": got[0][1], "client_last_bytes_read": got[-1][1],
                      "client_call_returned": t1}
        except (StopIteration, IndexError):   # a stamp is missing (e.g. the SDK took a late earlier reply)
            continue
        rows.append({k: (v - w0[1]) / 1e3 if k != "server_writes" else v for k, v in stamps.items()})
    out["read4"] = _medians(rows) if rows else {}
    n_reads, rows = len(rows), []
    for t0, t3, client in cycles:
        try:
            writes = [e for e in client if e[0] == "w"]
            sr, sw = writes[0], writes[-1]
            got = [e for e in client if e[0] == "r" and e[1] < sw[1]]
            t1 = next(e[1] for e in client if e[0] == "sync_read_returned")
            stamps = {"client_call": t0, "client_sync_read_write_returned": sr[2],
                      **_reply_stamps(server, sr[1], sw[1]),
                      "client_last_bytes_read": got[-1][1], "client_sync_read_returned": t1,
                      "client_sync_write_write_start": sw[1], "client_sync_write_returned": sw[2]}
            window = [e for e in server if sw[1] <= e[1] <= t3 + SLACK_NS]
            stamps["server_sync_write_woke"] = next(e[1] for e in window if e[0] == "read")
            stamps["server_sync_write_executed"] = next(e[2] for e in window if e[0] == "exec" and e[3] == SYNC_WRITE)
        except (StopIteration, IndexError):
            continue
        rows.append({k: (v - sr[1]) / 1e3 if k != "server_writes" else v for k, v in stamps.items()})
    out["cycle"] = _medians(rows) if rows else {}
    out["transactions"] = {"read4": n_reads, "cycle": len(rows), "of": {"read4": len(reads), "cycle": len(cycles)}}
    return out


def run(baud: int = 1_000_000, return_delay: int = 0, n: int = 300) -> dict:
    """One paced configuration's timeline, with the bounds and the host's load and steal; a dict for JSON."""
    load0 = loadavg()
    with tempfile.TemporaryDirectory(prefix="servo-hil-dxl-timeline-") as tmpdir:
        steal = StealMeter()
        with _StampedDaemon(Path(tmpdir), baud, return_delay) as d:
            reads, cycles = _client(d.path, baud, n)
        server = json.loads(d.stamps.read_text())
        steal_fraction = steal.fraction()
    rd_s = return_delay * 2e-6
    values = dict.fromkeys(IDS, 2048)    # the bound's packet sizes do not depend on the values (no stuffing)
    return {"baud": baud, "return_delay_us": rd_s * 1e6,
            "read4_bound_us": read_bound(baud, rd_s, 2048)["bound_us"],
            "cycle_bound_us": cycle_bound(baud, rd_s, values)["bound_us"],
            "stamps_us_after_request_write_start": timeline(reads, cycles, server),
            "steal_fraction": steal_fraction, "loadavg_start": load0, "loadavg_end": loadavg()}


if __name__ == "__main__":   # the stamped daemon's own process (_StampedDaemon); users run the CLI command
    if len(sys.argv) != 5 or sys.argv[1] != "--serve":
        sys.exit("usage: servo-hil bench dynamixel-timeline [--baud B] [--rdt R] [--n N]")
    serve_stamped(*sys.argv[2:])
