"""Host-side measurement helpers shared by the benchmarks: machine facts, latency statistics, CPU split.

Every benchmark reports the machine it ran on, percentiles from 1 µs histograms (as the loop telemetry),
and where the CPU went during a phase (this client, the server process, everything else), so that a
figure measured on a loaded or stolen CPU says so.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import platform
import select
import socket
import subprocess
import sys
import threading
import time
import tty
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np

from servo_hil.daemon.telemetry import percentile_us

STEAL_LIMIT = 0.02            # hypervisor steal above which a benchmark's timings are called disturbed
OTHER_LOAD_LIMIT = 0.25       # cores used by other processes during a phase before the JSON warns


def disturbance_notes(max_steal: float, max_other: float, competing: str) -> dict:
    """The JSON's steal and other-load fields: the worst of each over the phases, and a note when either
    passed its limit (`competing`: who was competing for the CPU, for the note)."""
    return {
        "steal_max_fraction": max_steal,
        "steal_note": (f"steal reached {100 * max_steal:.2f} % (≥ 2 %): timings are disturbed by the hypervisor"
                       if max_steal >= STEAL_LIMIT else None),
        "other_load_max_cores": max_other,
        "other_load_note": (f"other processes used up to {max_other:.2f} of {os.cpu_count()} cores during a phase: "
                            f"{competing} were competing for CPU, timings are pessimistic"
                            if max_other >= OTHER_LOAD_LIMIT else None),
    }


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen, timeout_s: float) -> int | None:
    """SIGTERM `proc` if it still runs, wait up to `timeout_s` [s] for it to end, else SIGKILL and reap it.
    Its exit status, or None when it had to be killed."""
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def machine() -> dict:
    """CPU count and model, kernel, Python."""
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu_model": model, "kernel": platform.release(),
            "python": platform.python_version()}


def loadavg() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return None


def latency_stats(samples_ns: list[int]) -> dict:
    """p50/p99 (1 µs bins), mean and max [µs] of durations [ns]."""
    if not samples_ns:
        return {"p50_us": None, "p99_us": None, "mean_us": None, "max_us": None}
    a = np.asarray(samples_ns, dtype=np.int64)
    hist = np.bincount(a // 1000)   # 1 µs bins, as the loop telemetry
    return {"p50_us": percentile_us(hist, 0.50), "p99_us": percentile_us(hist, 0.99),
            "mean_us": float(a.mean()) / 1e3, "max_us": float(a.max()) / 1e3}


def cpu_ns(pid: int) -> int:
    """CPU time [ns] of every thread of process `pid` (schedstat: ns resolution, unlike /proc/pid/stat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):   # a thread that just ended
            total += int((task / "schedstat").read_text().split()[0])
    return total


def _host_jiffies() -> tuple[int, int]:
    """(non-idle, total) jiffies over all CPUs, from /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0, 0
    return sum(f) - f[3] - f[4], sum(f)


def probe(pid: int):
    """A function returning (wall ns, server CPU ns, client CPU ns, host jiffies) for `cpu_split`."""
    def probe() -> tuple[int, int, int, tuple[int, int]]:
        return time.perf_counter_ns(), cpu_ns(pid), time.process_time_ns(), _host_jiffies()
    return probe


def cpu_split(p0, p1, ops: int, server_idle_cores: float) -> dict:
    """Where the CPU went during a phase: cores used by this client, the server, and everything else."""
    wall = (p1[0] - p0[0]) / 1e9
    if wall <= 0 or ops <= 0:
        return {}
    server = (p1[1] - p0[1]) / 1e9 / wall
    client = (p1[2] - p0[2]) / 1e9 / wall
    busy_j, total_j = p1[3][0] - p0[3][0], p1[3][1] - p0[3][1]
    host = (os.cpu_count() or 1) * busy_j / total_j if total_j > 0 else None
    return {"client_cores": client, "server_cores": server,
            "server_cpu_us_per_op": max(server - server_idle_cores, 0.0) * wall / ops * 1e6,
            "host_busy_cores": host,
            "other_cores": None if host is None else max(host - client - server, 0.0)}


def peer_pty(conn) -> Iterator[tuple[int, bytes]]:
    """A peer's pty: sends the slave's path on `conn`, then yields (master fd, bytes read) as the client writes, for
    ever (blocking reads on the master)."""
    master, slave = os.openpty()
    tty.setraw(slave)     # keep our slave fd open: a client closes and reopens it (no holder: the master reads EIO)
    conn.send(os.ttyname(slave))
    conn.close()
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            time.sleep(0.001)   # no client holds the slave right now
            continue
        yield master, data


class PeerFrame(NamedTuple):
    """How an echo peer cuts packets from its input: `header` starts one; LEN is `len_size` bytes (little-endian)
    at `len_offset` from the header; a packet is `prefix` + LEN bytes."""

    header: bytes
    prefix: int
    len_offset: int
    len_size: int


def serve_echo_peer(conn, replies: dict[bytes, bytes], frame: PeerFrame) -> None:
    """Benchmark harness, not an emulator: serve a pty, answer known requests at once with canned replies.

    Runs in its own process. Sends the slave's path on `conn`, then loops: blocking read on the master, cut out each
    complete packet (`frame`), write the canned reply for its exact bytes. Packets without a reply (a Sync Write)
    and unknown ones are ignored. Ends on SIGTERM.
    """
    header, prefix, at, size = frame
    buf = b""
    for master, data in peer_pty(conn):
        buf += data
        while True:
            i = buf.find(header)
            if i < 0:
                buf = buf[-(len(header) - 1):]
                break
            if len(buf) < i + prefix:
                buf = buf[i:]
                break
            total = prefix + int.from_bytes(buf[i + at:i + at + size], "little")
            if len(buf) < i + total:
                buf = buf[i:]
                break
            packet, buf = buf[i:i + total], buf[i + total:]
            reply = replies.get(packet)
            if reply is not None:
                os.write(master, reply)


START_S = 30.0   # [s] a daemon or peer that is not ready by then has failed


class PeerProcess:
    """`target(conn, arg)` in a separate (spawned) process; `address` is what it sent on `conn` once ready
    (a pty path, an endpoint). The peers are benchmark harnesses: the floor a client reaches on this host."""

    def __init__(self, target, arg, name: str):
        self.target, self.arg, self.name = target, arg, name

    def __enter__(self) -> PeerProcess:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=self.target, args=(child, self.arg), daemon=True, name=self.name)
        self.proc.start()
        child.close()
        if not parent.poll(START_S):
            self.__exit__()
            raise RuntimeError(f"{self.name} did not start")
        self.address = parent.recv()
        parent.close()
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


class DaemonProcess:
    """`servo-hil run RIG ARGS --no-mqtt` as a subprocess, ready once it has printed a line starting with
    each of `ready` (its bus banners); SIGTERM on exit. Its stderr goes to `errfile`."""

    def __init__(self, rig: Path, args: list[str], ready: tuple[str, ...], errfile: Path):
        self.rig, self.args, self.ready, self.errfile = rig, args, ready, errfile

    def _stderr_tail(self) -> str:
        try:
            return self.errfile.read_text()[-2000:]
        except OSError:
            return ""

    def __enter__(self):
        self.err = self.errfile.open("w")
        self.proc = subprocess.Popen(self._argv(), stdout=subprocess.PIPE, stderr=self.err, text=True)
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _argv(self) -> list[str]:
        """The daemon's command line: `servo-hil run RIG ARGS` without MQTT."""
        return [sys.executable, "-m", "servo_hil.cli.main", "run", str(self.rig), *self.args, "--no-mqtt",
                "--log-level", "WARNING"]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_S
        out, missing = self.proc.stdout, set(self.ready)
        while missing:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"daemon printed no {sorted(missing)} line within {START_S:.0f} s: "
                                   f"{self._stderr_tail()}")
            if select.select([out], [], [], min(left, 0.5))[0]:
                line = out.readline()
                if not line:
                    self.proc.wait(5)
                    raise RuntimeError(f"daemon exited ({self.proc.returncode}): {self._stderr_tail()}")
                missing = {m for m in missing if not line.startswith(m)}
            elif self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited ({self.proc.returncode}): {self._stderr_tail()}")
        # keep stdout drained so the daemon never blocks on a full pipe
        threading.Thread(target=lambda: out.read(), daemon=True).start()

    def __exit__(self, *exc) -> None:
        stop_process(self.proc, 5)
        self.err.close()
