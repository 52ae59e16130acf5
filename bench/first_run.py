"""`servo-hil bench first-run`: a fresh clone to a running daemon, timed, as JSON.

The clone's `make run` until the daemon's ready banner, against `pip install` of the same runtime dependencies
in the same run; `--no-cache` disables pip's cache for both (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from bench.host import free_port, loadavg, machine, stop_process
from servo_hil.daemon.telemetry import StealMeter

REPO = Path(__file__).resolve().parents[1]
READY = re.compile(r"joint state: ZeroMQ PUB")   # the daemon's banner, printed once the loop runs


def _rig(tmp: Path) -> Path:
    """config/rigs/default.toml with free ZeroMQ ports and a free embedded broker port."""
    text = (REPO / "config" / "rigs" / "default.toml").read_text()
    text = text.replace("tcp://127.0.0.1:9872", f"tcp://127.0.0.1:{free_port()}")
    text = text.replace("tcp://127.0.0.1:9873", f"tcp://127.0.0.1:{free_port()}")
    text = text.replace("embedded_port = 1883", f"embedded_port = {free_port()}")
    path = tmp / "rig.toml"
    path.write_text(text)
    return path


def _env(no_cache: bool) -> dict:
    env = dict(os.environ)
    if no_cache:
        env["PIP_NO_CACHE_DIR"] = "1"
    return env


def _make_run(tmp: Path, no_cache: bool, timeout_s: float) -> dict:
    """Seconds from `git clone` to the daemon's banner, with the time each make step started."""
    clone = tmp / "clone"
    t0 = time.monotonic()
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    proc = subprocess.Popen(["make", "-C", str(clone), "run", f"RIG={_rig(tmp)}", "PY=" + sys.executable],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(no_cache))
    marks, ready_s, lines = {}, None, []
    try:
        for line in proc.stdout:
            lines.append(line.rstrip())
            now = time.monotonic() - t0
            if line.startswith("make: ") and line.strip() not in marks:
                marks[line.strip()] = round(now, 1)
            if READY.search(line):
                ready_s = now
                break
            if now > timeout_s:
                break
    finally:
        stop_process(proc, 10)
    return {"seconds_to_ready": ready_s, "steps_started_s": marks,
            "tail": None if ready_s is not None else lines[-15:]}


def _pip_peer(tmp: Path, no_cache: bool) -> float:
    """Seconds to make a venv and pip-install the runtime dependencies of pyproject.toml (no build)."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    venv = tmp / "peer-venv"
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--upgrade", "pip"], check=True, env=_env(no_cache))
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *deps], check=True, env=_env(no_cache))
    return time.monotonic() - t0


def run(no_cache: bool = False, timeout_s: float = 900.0) -> dict:
    """Both measurements, the ratio, the host's load and steal."""
    steal = StealMeter()
    load0 = loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        print("bench first-run: git clone + make run, until the daemon is up", file=sys.stderr, flush=True)
        first = _make_run(Path(tmp), no_cache, timeout_s)
    with tempfile.TemporaryDirectory() as tmp:
        print("bench first-run: the peer, pip install of the runtime dependencies", file=sys.stderr, flush=True)
        peer_s = _pip_peer(Path(tmp), no_cache)
    ready = first["seconds_to_ready"]
    return {
        "benchmark": "first_run", "machine": machine(), "pip_cache": not no_cache,
        "make_run": first, "peer_pip_install_s": round(peer_s, 1),
        "ratio_make_run_over_peer": None if ready is None else round(ready / peer_s, 2),
        "target": {"seconds_to_ready_max": 180, "met": ready is not None and ready <= 180},
        "loadavg_start": load0, "loadavg_end": loadavg(), "steal_fraction": steal.fraction(),
    }
