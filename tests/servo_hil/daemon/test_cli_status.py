"""`servo-hil status` against a running daemon, and against nothing."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import time

import pytest

from tests.daemon_process import SERVO_HIL

from . import free_port, ok
from .test_lifecycle import run_cli


def test_status_table(shared_daemon):
    daemon = shared_daemon
    ok(daemon.rig.cmd, "inject_fault", actuator="mx", fault="wrong_baud")
    res = run_cli("status", "--command", daemon.rig.cmd)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert repr(daemon.rig.name) in out, out
    assert "SCHED_" in out and "1000 Hz" in out
    for joint in ("arm", "mx"):
        assert joint in out
    assert "dxl_pwm" in out and "position" in out and "wrong_baud" in out
    assert "lateness p50" in out and "hypervisor steal" in out


def test_status_json(shared_daemon):
    daemon = shared_daemon
    res = run_cli("status", "--command", daemon.rig.cmd, "--json")
    assert res.returncode == 0, res.stderr
    st = json.loads(res.stdout)
    assert st["rig"] == daemon.rig.name and st["pid"] == daemon.proc.pid
    assert st["rate_hz"] == 1000.0 and st["tick"] > 0 and set(st["actuators"]) == {"arm", "mx"}


def test_status_check_healthy(shared_daemon):
    daemon = shared_daemon
    res = run_cli("status", "--command", daemon.rig.cmd, "--check")
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert res.stdout.strip() == "healthy"


def test_status_without_daemon():
    """`status --check` and plain `status` (run concurrently) with nothing listening: exit 1, one line."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    # each gives up after its 0.5 s --timeout; the deadline only catches one that waits on (a socket lingering at
    # exit): the two start-ups alone take ~1 s idle and over 10 s on a busy 2-core host
    deadline = time.monotonic() + 30.0
    procs = {mode: subprocess.Popen([*SERVO_HIL, "status", "--command", endpoint, "--timeout", "0.5", *extra],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for mode, extra in (("check", ["--check"]), ("table", []))}
    try:
        for mode, proc in procs.items():
            try:
                out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"`status` ({mode}) still running 30 s after its start with --timeout 0.5 (hang)")
            assert proc.returncode == 1, (mode, out, err)
            lines = err.splitlines()
            assert len(lines) == 1 and lines[0].startswith("servo-hil: error:") and endpoint in lines[0], (mode, err)
            assert "Traceback" not in err
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_status_check_after_the_daemon_stopped(daemon):
    assert daemon.terminate() == 0
    assert run_cli("status", "--command", daemon.rig.cmd, "--check", "--timeout", "0.5").returncode == 1


def test_status_check_lockstep_before_the_first_step(make_rig, start_daemon):
    """Regression: a lock-step daemon not stepped yet (tick 0) used to be reported unhealthy."""
    rig = make_rig(joints=("arm",), lockstep=True)
    start_daemon(rig)
    res = run_cli("status", "--command", rig.cmd, "--check", "--timeout", "1")
    assert res.returncode == 0, (res.stdout, res.stderr)


def test_status_shows_a_latched_shutdown_as_torque_off(shared_daemon):
    """An overheat latch cuts the torque whatever Torque Enable says: the table must not say `on`."""
    daemon = shared_daemon
    ok(daemon.rig.cmd, "set_enable", actuator="mx", value=True)
    ok(daemon.rig.cmd, "inject_fault", actuator="mx", fault="overheat")
    try:
        deadline = time.monotonic() + 5
        while True:
            res = run_cli("status", "--command", daemon.rig.cmd)
            row = next(line for line in res.stdout.splitlines() if "mx" in line and "│" in line)
            if "overheat" in row or time.monotonic() > deadline:
                break
        assert "off (overheat)" in res.stdout, res.stdout
    finally:
        ok(daemon.rig.cmd, "clear_fault", actuator="mx", fault="overheat")


def test_status_watch_refreshes_until_interrupted(shared_daemon):
    """`status --watch 0.2` redraws its tables with the daemon's new figures until Ctrl-C, then exits 0."""
    daemon = shared_daemon
    # as on a terminal, where each refresh is drawn at once (to a pipe rich writes only the last one, at exit)
    env = os.environ | {"TTY_COMPATIBLE": "1", "TERM": "xterm", "COLUMNS": "160", "LINES": "60"}
    proc = subprocess.Popen([*SERVO_HIL, "status", "--command", daemon.rig.cmd, "--watch", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        # the first drawing and two refreshes before Ctrl-C; start-up alone takes ~1 s idle, several on a busy host
        out = b""
        deadline = time.monotonic() + 30.0
        while out.count(b"lateness p50") < 3:
            assert proc.poll() is None, (proc.returncode, out, proc.stderr.read())
            assert time.monotonic() < deadline, f"fewer than 3 drawings 30 s after the start:\n{out!r}"
            if select.select([proc.stdout], [], [], 0.5)[0]:
                out += os.read(proc.stdout.fileno(), 1 << 16)
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert b"Traceback" not in err, err
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", (out + rest).decode())
    assert "lateness p50" in text and "arm" in text
    # redrawn with new figures, not only reprinted: the simulated time advances from one drawing to the next
    times = re.findall(r"simulated time\W+([0-9.]+) s", text)
    assert len(set(times)) >= 3, times
