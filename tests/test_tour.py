"""The README's tour, run verbatim: its shell and Python blocks, read from README.md, in a folder that holds
what a fresh clone holds (`.venv`, `config`), against real daemons on the ports the tour names.

Step 1's `make run` is `servo-hil run config/rigs/default.toml` once installed; the `make` line itself is
what `.ci/run` proves. Step 9's hardware variant needs a real servo; its demo runs.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _steps() -> dict[int, list[tuple[str, str]]]:
    """Tour step number → its fenced blocks, (language, code), in order."""
    tour = README[README.index("## Five-minute tour"):]
    tour = tour[: tour.index("\n## ", 10)] if "\n## " in tour[10:] else tour
    steps: dict[int, list[tuple[str, str]]] = {}
    parts = re.split(r"^\*\*(\d+)\. ", tour, flags=re.M)
    for number, text in zip(parts[1::2], parts[2::2], strict=True):
        steps[int(number)] = re.findall(r"^```(sh|python)\n(.*?)^```", text, flags=re.M | re.S)
    return steps


STEPS = _steps()


@pytest.fixture()
def clone(tmp_path) -> Path:
    """A folder laid out as the repository's root (the tour's commands are relative to it)."""
    (tmp_path / "config").symlink_to(REPO / "config")
    (tmp_path / ".venv").symlink_to(sys.prefix)   # the venv the tests run in, as `make` made it
    return tmp_path


def _sh(code: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout, env=os.environ | {"COLUMNS": "100"})
    assert r.returncode == 0, f"tour block failed:\n{code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    return r


def _py(code: str, cwd: Path, timeout: float = 60) -> str:
    r = subprocess.run([str(cwd / ".venv" / "bin" / "python"), "-c", code], cwd=cwd, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, f"tour snippet failed:\n{code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    return r.stdout


@contextlib.contextmanager
def _daemon(command: str, cwd: Path, ready: str):
    """A daemon started by a tour line, until its banner shows `ready`; Ctrl-C (SIGINT) stops it, exit 0."""
    argv = command.split("#")[0].split()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        seen.append(line)
        if ready in line:
            break
        assert time.monotonic() < deadline, "".join(seen)
    else:
        pytest.fail(f"{command}: ended before it was ready:\n{''.join(seen)}")
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0, "".join(seen) + rest


def test_the_tour_has_its_steps():
    assert sorted(STEPS) == list(range(1, 10))
    assert [lang for lang, _ in STEPS[5]] == ["sh", "sh"] and STEPS[6][1][0] == "python"


def test_steps_1_to_3_default_rig(clone):
    (lang, code), = STEPS[1]
    assert lang == "sh" and code.startswith("make run")
    with _daemon(".venv/bin/servo-hil run config/rigs/default.toml", clone, "joint state: ZeroMQ PUB"):
        status = _sh(".venv/bin/servo-hil status", clone)
        assert "mx64" in status.stdout and "erob" in status.stdout
        (lang, code), = STEPS[3]
        assert "{'ok': True}" in _py(code, clone)


@pytest.mark.skipif(shutil.which("mosquitto_pub") is None, reason="mosquitto-clients not installed")
def test_step_4_fault_over_mqtt(clone):
    (_, code), = STEPS[4]
    publish = [line for line in code.replace("\\\n", " ").splitlines() if line.startswith("mosquitto_pub")]
    # the broker is up once the daemon's MQTT client is connected, after the ZeroMQ banner
    with _daemon(".venv/bin/servo-hil run config/rigs/default.toml", clone, "MQTT connected"):
        sub = subprocess.Popen(["mosquitto_sub", "-t", "servo-hil/default/events", "-W", "30"],
                               stdout=subprocess.PIPE, text=True)
        events: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [events.put(line) for line in sub.stdout], daemon=True).start()
        deadline, raised = time.monotonic() + 30, None
        while raised is None:   # the subscriber may subscribe after a publish: clear and inject again
            subprocess.run(["bash", "-c", publish[0]], cwd=clone, capture_output=True, timeout=10)
            with contextlib.suppress(queue.Empty):
                while raised is None:   # fault_injected comes first, then the loop's fault_raised
                    event = events.get(timeout=0.5)
                    raised = event if '"fault_raised"' in event else None
            if raised is None:
                subprocess.run(["bash", "-c", publish[1]], cwd=clone, capture_output=True, timeout=10)
            assert time.monotonic() < deadline and sub.poll() is None, "no fault_raised event within 30 s"
        sub.terminate()
        assert "open_circuit" in raised and '"mx64"' in raised, raised
        _sh(publish[1], clone)


def test_step_5_offline_tools(clone):
    for lang, code in STEPS[5]:
        assert lang == "sh"
        _sh(code, clone, timeout=600)
    for produced in ("tour/erob.png", "tour/out.csv"):
        assert (clone / produced).stat().st_size > 0, produced
    assert len((clone / "tour" / "out.csv").read_text().splitlines()) == 2001


def test_step_6_dynamixel_sdk(clone):
    (_, run), (_, script) = STEPS[6]
    with _daemon(run.splitlines()[0], clone, "dynamixel bus 'dxl'"):
        out = _py(script, clone)
    ping, positions = out.splitlines()
    assert ping == "(1020, 0, 0)", out
    one, two, three, four = ast.literal_eval(positions)
    assert one == two == four == 2048 and 3030 < three <= 3072, out   # only ID 3 moved, to +90° less sag


def test_steps_7_and_8_erob(clone):
    (_, run), (_, export), (_, script) = STEPS[7]
    (_, record), (_, offline) = STEPS[8]
    with _daemon(run.splitlines()[0], clone, "etherban bus 'ethercat'"):
        _sh(export, clone)
        out = _py(script, clone, timeout=120).split()
        assert out[0] == "0x5a65726f" and abs(int(out[-1]) - 52_429) < 1000, out
        _sh(record, clone, timeout=300)
    assert (clone / "tour" / "rep-erob" / "report.json").stat().st_size > 0
    _sh(offline, clone, timeout=300)   # replay and identify of the recorded logs, the daemon stopped
    published, fitted = (json.loads((clone / "tour" / name).read_text())["mae"] for name in ("r.json", "r-fit.json"))
    assert fitted < 0.5 * published, (fitted, published)   # the fit to the servo's own logs beats bam's set
    assert json.loads((clone / "tour" / "fit" / "params.json").read_text())["model"] == "m1"


def test_step_9_mirror_demo(clone):
    (_, code), = STEPS[9]
    (clone / "examples").symlink_to(REPO / "examples")
    _sh(code, clone, timeout=300)
    assert (clone / "tour" / "mirror-demo" / "report" / "report.json").stat().st_size > 0
