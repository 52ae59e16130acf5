"""`servo-hil run` as a subprocess, for the integration tests: start it, wait for its bus banner, talk to
its command socket, and stop it with the checks every daemon must pass (SIGTERM → exit 0 within `STOP_TIMEOUT_S`, no
traceback in its log). The bus conftests (tests/drivers/*/conftest.py) subclass `BusDaemon` and
`BusLauncher`; tests/servo_hil/daemon/conftest.py uses `ProcessControl` for its own daemon records.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from servo_hil.daemon.zmq_io import request

_BIN = Path(sys.executable).parent / "servo-hil"
SERVO_HIL = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "servo_hil.cli.main"]

# How long a SIGTERMed daemon may take to exit before the teardown calls it hung [s]. Idle, the daemon stops
# in well under a second; on a loaded 2-core host it took 2-7 s while its state publisher spun after the loop's
# stop (fixed; test_lifecycle.py pins it), and a starved host can still delay it, so the teardown only catches
# a daemon that does not stop. How fast it stops is the subject of its own
# tests (tests/servo_hil/daemon/test_lifecycle.py, test_mqtt.py), not of every teardown.
STOP_TIMEOUT_S = 15.0
# SIGTERM or SIGINT → exit, in the tests of a prompt stop [s]: ~0.3 s idle, ~2 s on a 2-core host behind 8 busy
# processes. The stops they pin took 4.7 s (start()'s former wait for the broker) and up to 10 s (a broker connect
# attempt's timeout); below the daemon's own stop watchdog (STOP_WATCHDOG_S, 8 s, which would make it exit 1) and
# compose's SIGKILL (stop_grace_period 10 s).
PROMPT_STOP_S = 4.0


def assert_one_cli_line(res: subprocess.CompletedProcess, *needles: str) -> str:
    """A CLI misuse: exit 2 and one `servo-hil: error: ` line on stderr naming every one of `needles`; that line."""
    assert res.returncode == 2, f"exit {res.returncode}\nstderr: {res.stderr}"
    lines = res.stderr.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{res.stderr}"
    assert lines[0].startswith("servo-hil: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def rss_kb(pid: int) -> int:
    """Resident set size of process `pid` [KiB] (/proc/PID/status VmRSS); fails the test if there is none."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


RSS_GROWTH_LIMIT_KB = 5 * 1024      # a fuzzed daemon's RSS growth allowed (the loop's rings are mapped at start)


class ProcessControl:
    """Liveness, log and stop of a daemon record that has `proc` (Popen) and `err_path` (its stderr file)."""

    proc: subprocess.Popen
    err_path: Path

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM; the exit status, or None if the daemon is still running after `timeout` s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5.0)


def daemon_env() -> dict[str, str]:
    """A daemon's environment in the tests, read when it starts (a test may have set SERVO_HIL_CONFIG): Python's
    faulthandler on, so that a daemon that does not stop prints every thread's stack (SIGABRT, `hang_report`)."""
    return os.environ | {"PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}


def hang_report(proc: subprocess.Popen) -> None:
    """Abort a process that did not stop: with `daemon_env`'s faulthandler it writes each thread's stack to its
    stderr first; wait until it is gone."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGABRT)
        try:
            proc.wait(5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_cli(args: list[str], expect: str) -> subprocess.Popen:
    """`servo-hil ARGS` with piped output, returned once its first stdout line holds `expect`."""
    proc = subprocess.Popen([*SERVO_HIL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=daemon_env())
    line = proc.stdout.readline()
    assert expect in line, (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc


@contextlib.contextmanager
def cli_running(args: list[str], expect: str) -> Iterator[subprocess.Popen]:
    """`start_cli(args, expect)` for the block, then `stop_cli`."""
    proc = start_cli(args, expect)
    try:
        yield proc
    finally:
        stop_cli(proc)


def stop_cli(proc: subprocess.Popen, timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM a process of `start_cli`; it must exit 0 within `timeout` [s] (else its threads' stacks are shown)."""
    proc.terminate()
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        hang_report(proc)
        pytest.fail(f"still running {timeout:g} s after SIGTERM:\n{proc.stderr.read()[-6000:]}")
    assert rc == 0, proc.stderr.read()


@dataclass
class BusDaemon(ProcessControl):
    """A daemon serving a bus; `rig` has `path`, `port` (the pty link) and `cmd` (ZeroMQ command endpoint)."""

    rig: object
    proc: subprocess.Popen
    out_path: Path
    err_path: Path
    banner: str = ""

    def command(self, cmd: str, timeout_s: float = 10.0, **args) -> dict:
        """One ZeroMQ command; the reply (ok or not)."""
        return request(self.rig.cmd, {"cmd": cmd, **args}, timeout_s)

    def ok(self, cmd: str, **args) -> dict:
        reply = self.command(cmd, **args)
        assert reply.get("ok") is True, f"{cmd} {args} refused: {reply}"
        return reply


class BusLauncher:
    """Starts daemons and, at `finish()`, SIGTERMs them and checks exit 0 and a clean log.

    Subclasses set `banner` (the start-up line; group 1 is the bus path), `daemon_type`, and may extend
    `argv`, `ready` (what the banner tells) and `after_exit` (checks on a daemon that exited cleanly).
    `check_exited`: also check the log of a daemon that had already ended before `finish()`."""

    banner: re.Pattern
    daemon_type: type[BusDaemon] = BusDaemon
    check_exited = True

    def __init__(self, directory: Path):
        self.dir = directory
        self.started: list[BusDaemon] = []

    def argv(self, rig) -> list[str]:
        return [*SERVO_HIL, "run", str(rig.path)]

    def ready(self, daemon: BusDaemon, match: re.Match) -> None:
        """What the start-up banner says, kept on the daemon record."""

    def after_exit(self, daemon: BusDaemon) -> str | None:
        """A problem found once the daemon exited 0 after SIGTERM, or None."""
        return None

    def start(self, rig, timeout: float = 20.0) -> BusDaemon:
        n = len(self.started) + 1
        out_path, err_path = self.dir / f"daemon{n}.stdout", self.dir / f"daemon{n}.stderr"
        with out_path.open("w") as out, err_path.open("w") as err:
            proc = subprocess.Popen(self.argv(rig), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    cwd=self.dir, env=daemon_env())
        d = self.daemon_type(rig, proc, out_path, err_path)
        self.started.append(d)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.banner.search(out_path.read_text(errors="replace"))
            if m:
                assert m.group(1) == rig.port, f"the bus is at {m.group(1)}, not at the rig's port {rig.port}"
                d.banner = m.group(0)
                self.ready(d, m)
                return d
            if not d.alive:
                pytest.fail(f"the daemon exited with {proc.returncode} during start-up:\n{d.stderr()}")
            time.sleep(0.02)
        d.kill()
        pytest.fail(f"no bus line on stdout within {timeout} s:\n{out_path.read_text()}\n{d.stderr()}")

    def finish(self) -> None:
        problems = []
        for d in self.started:
            if not d.alive and not self.check_exited:
                continue
            if d.alive:
                rc = d.terminate()
                if rc is None:
                    hang_report(d.proc)
                    problems.append(f"{d.rig.path.name}: still running {STOP_TIMEOUT_S:g} s after SIGTERM (aborted)\n"
                                    f"{d.stderr()[-6000:]}")
                elif rc != 0:
                    problems.append(f"{d.rig.path.name}: exit status {rc} after SIGTERM\n{d.stderr()[-3000:]}")
                elif problem := self.after_exit(d):
                    problems.append(problem)
            if "Traceback" in d.stderr():
                problems.append(f"{d.rig.path.name}: a traceback in the daemon's log\n{d.stderr()[-3000:]}")
        self.started.clear()
        if problems:
            pytest.fail("\n".join(problems))


def simulate_goal(directory: Path, rig_text: str, u: float, rows: int, dt: float = 0.001) -> list[dict[str, float]]:
    """`servo-hil simulate` of the offline rig `rig_text` (written to `directory`) with goal `u` [rad] and the torque
    on from step 0, `rows` steps of `dt` [s]; OUT.csv's rows (row k: the state before step k, what step k made)."""
    (directory / "rig.toml").write_text(rig_text)
    with (directory / "in.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t", "u", "enable"])
        w.writerows([repr(k * dt), repr(u), "1"] for k in range(rows))
    res = subprocess.run([*SERVO_HIL, "simulate", str(directory / "rig.toml"), "--input", str(directory / "in.csv"),
                          "--out", str(directory / "out.csv")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    with (directory / "out.csv").open() as fh:
        return [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(fh)]
