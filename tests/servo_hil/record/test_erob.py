"""Active mirror for eRobs: `servo-hil record --protocol etherban|canopen` drives an eRob with bam's host PD through
bam's trajectories and writes bam's logs. The "real" eRob is a servo-hil daemon (eRob80:100, bam m6, a
2 kg pendulum at 0.2 m): through Etherban the record → replay round trip must be explained by m6 far better than
by m1; through CANopen (python-canopen over python-can's slcan on the daemon's pty) a short run must drive the
drive in CST and log what it reported.

Expected values: bam's raw eRob format and host PD (bam/erob/record.py, bam/erob/etherban.py `Client.position_control`),
bam's m6 kt for the eRob80:100 (config/actuators/erob80_100.toml [models.m6], copied from bam's params), never the code
under test.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest

from servo_hil.daemon.telemetry import StealMeter
from servo_hil.offline.replay import load_log
from tests.daemon_process import SERVO_HIL, BusLauncher
from tests.drivers.erob.conftest import ACTUATORS, ROOT, CanLauncher, write_can_rig
from tests.realtime_verdict import check, disturbance
from tests.servo_hil.daemon import free_port

KT_M6 = tomllib.loads((ROOT / "config/actuators/erob80_100.toml").read_text())["models"]["m6"]["kt"]
RAW_KEYS = {"timestamp", "position", "speed", "goal_position", "torque_enable", "torque_demand", "control"}
ONE_EROB = ACTUATORS[:1]      # erob100: an eRob80:100 lifting 2 kg at 0.2 m (node 2 on CAN, device 0 on Etherban)
HEADER = {"mass": 2.0, "length": 0.2, "arm_mass": 0.0, "motor": "erob80_100", "kp": 25.0, "damping": 2.0}


class EtherbanLauncher(BusLauncher):
    banner = re.compile(r"servo-hil: etherban bus 'ethercat' at (\S+) \((.*)\)")


def _record(out: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*SERVO_HIL, "record", "--out", str(out), "--mass", "2", "--length", "0.2", "--motor",
                           "erob80_100", "--kp", "25", "--trajectory", "sin_sin", *args], capture_output=True,
                          text=True, timeout=120, env=os.environ | (env or {}))


def _raw(out: Path) -> dict:
    (raw,) = (out / "raw").glob("*.json")
    return json.loads(raw.read_text())


def _replay_mae(log: Path, model: str, tmp_path: Path) -> float:
    """`servo-hil replay LOG --actuator erob80_100 --model M`: its mean MAE [rad]."""
    out = tmp_path / f"replay-{model}.json"
    run = subprocess.run([*SERVO_HIL, "replay", str(log), "--actuator", "erob80_100", "--model", model, "--out",
                          str(out)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(out.read_text())["mae"]


def test_bad_record_options_are_one_line_errors(tmp_path):
    for args, says in ((["--protocol", "canopen", "--endpoint", "slcan:/dev/null"], "--node"),
                       (["--protocol", "canopen", "--node", "2", "--endpoint", "nosuch:x"], "--endpoint"),
                       (["--protocol", "etherban", "--motor", "other"], "--damping")):
        run = _record(tmp_path, *args)
        assert run.returncode == 2 and run.stderr.count("\n") == 1 and says in run.stderr, (args, run.stderr)
    master, silent = os.openpty()               # an SLCAN line with no node behind it
    try:
        run = _record(tmp_path, "--protocol", "canopen", "--node", "5", "--endpoint", f"slcan:{os.ttyname(silent)}",
                      env={"CAN_CONFIG": '{"sleep_after_open": 0}'})
    finally:
        os.close(master)
        os.close(silent)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "CANopen node 5" in run.stderr, run.stderr
    run = subprocess.run([*SERVO_HIL, "record", "--port", "/dev/null", "--out", str(tmp_path), "--mass", "1",
                          "--length", "0.1", "--motor", "xl330", "--kp", "2.5"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and "--kp 2.5" in run.stderr


def test_etherban_record_then_replay_round_trip(tmp_path):
    bind = f"tcp://127.0.0.1:{free_port()}"
    rig = write_can_rig(tmp_path, "realerob", actuators=ONE_EROB, etherban=bind, integrator="bam")
    launcher = EtherbanLauncher(tmp_path)
    try:
        launcher.start(rig)
        out = tmp_path / "logs"
        steal = StealMeter()
        run = _record(out, "--protocol", "etherban", "--endpoint", bind)
        stolen = steal.fraction()
        assert run.returncode == 0, run.stderr
    finally:
        launcher.finish()
    raw = _raw(out)
    assert {k: raw[k] for k in HEADER} == HEADER and raw["trajectory"] == "sin_sin"
    entries = raw["entries"]
    assert set(entries[0]) == RAW_KEYS
    stamps = [e["timestamp"] for e in entries]
    # one per 1 ms cycle over the 6 s, never a burst; a cycle the host made late is not made up (a count would
    # measure the host: CI saw 20-74 % steal bursts), so the span and the median step are judged
    assert stamps[-1] == pytest.approx(6.0, abs=0.1) and len(entries) <= 6000 + 1, (stamps[-1], len(entries))
    assert np.median(np.diff(stamps)) == pytest.approx(1e-3, abs=2e-4)
    assert max(abs(e["control"]) for e in entries) <= 12.0 + 0.01                              # bam's ±12 A clip
    (processed,) = (out / "processed").glob("*.json")
    log = load_log(processed)
    # the processed log resamples the record's own span onto the 5 ms grid (≈ 1200 entries for its ≈ 6 s)
    grid = np.arange(stamps[0], stamps[-1], 0.005)
    assert log.dt == 0.005 and log.damping == 2.0 and len(log.entries) == len(grid), (len(log.entries), len(grid))
    m6, m1 = (_replay_mae(processed, model, tmp_path) for model in ("m6", "m1"))
    late = float(np.mean(np.diff(stamps) > 1.5e-3))
    figures = (f"eRob round trip through Etherban: replay MAE m6 {1e3 * m6:.2f} mrad, m1 {1e3 * m1:.2f} mrad; "
               f"{100 * late:.1f} % of the record's 1 ms cycles late, hypervisor steal {100 * stolen:.1f} %")
    print(figures)
    # the record runs in real time: a host that steals the VM's CPUs (20–30 % seen) makes the 1 kHz loop
    # late, which both replays pay alike (m6 2.1 → 4.7 mrad, m1 9.0 → 11.4): the margin, not the ratio, holds
    # (the record's cycles wait for the emulator's replies: only steal makes the run inconclusive)
    check({"m6 explains the record within 6 mrad": m6 < 0.006, "m1 is 4 mrad worse than m6": m1 - m6 > 0.004},
          figures, disturbance(stolen))


def test_canopen_record_short_run(tmp_path):
    launcher = CanLauncher(tmp_path)
    try:
        daemon = launcher.start(write_can_rig(tmp_path, "realco", actuators=ONE_EROB, model="m6"))
        out = tmp_path / "logs"
        run = _record(out, "--protocol", "canopen", "--endpoint", f"slcan:{daemon.rig.port}", "--node", "2",
                      "--duration", "1.5", "--kt", str(KT_M6), env={"CAN_CONFIG": '{"sleep_after_open": 0}'})
        assert run.returncode == 0, run.stderr
        state = daemon.ok("state")["state"]["erob100"]
    finally:
        launcher.finish()
    raw = _raw(out)
    assert {k: raw[k] for k in HEADER} == HEADER
    entries = raw["entries"]
    assert set(entries[0]) == RAW_KEYS and len(entries) >= 150           # python-can's slcan: ≥ 1 cycle per 10 ms
    t = np.array([e["timestamp"] for e in entries])
    assert np.all(np.diff(t) > 0) and t[-1] == pytest.approx(1.5, abs=0.05)
    q = np.array([e["position"] for e in entries])
    goal = np.array([e["goal_position"] for e in entries])
    control = np.array([e["control"] for e in entries])
    # bam's PD drove the joint (amps ∝ error, the drive's present current follows them): it moved with the goal
    assert np.corrcoef(q, goal)[0, 1] > 0.7 and np.max(np.abs(q)) > 0.2
    assert np.max(np.abs(control)) <= 12.0 + 0.01
    amps = np.clip(25.0 * (goal[1:] - q[:-1]) - 2.0 * math.sqrt(25.0) * np.array([e["speed"] for e in entries])[:-1],
                   -12.0, 12.0)
    assert np.median(np.abs(control[1:] - amps)) < 0.1 * np.max(np.abs(amps))
    assert not state["enable"]                       # the recorder switched the torque off at the end (shutdown)
