"""Active mirror: `servo-hil record` drives a servo through bam's trajectories and writes bam's logs;
replaying them through the servo's own model closes the loop (record → replay round trip).
The "real" servo is a servo-hil daemon (XL330, bam m6) on its own pty, in place of hardware."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from servo_hil.offline.replay import load_log, replay
from servo_hil.record.excitation import TRAJECTORIES, GoalPacing, lift_and_drop, sin_sin, up_and_down, warn_if_behind
from tests.daemon_process import SERVO_HIL, STOP_TIMEOUT_S
from tests.servo_hil.daemon import free_port, ok, rig_head


def test_trajectories_have_bams_shape():
    assert set(TRAJECTORIES) == {"sin_sin", "lift_and_drop", "up_and_down", "sin_time_square"}
    assert lift_and_drop(0.0) == (0.0, True) and lift_and_drop(2.0)[0] == pytest.approx(-math.pi / 2)
    assert lift_and_drop(1.0)[0] == pytest.approx(-math.pi / 4) and lift_and_drop(2.5) == (-math.pi / 2, False)
    assert up_and_down(3.0)[0] == pytest.approx(math.pi / 2) and up_and_down(6.0)[0] == pytest.approx(0.4 * math.pi)
    assert sin_sin(1.0)[0] == pytest.approx(math.sin(1) * math.pi / 2 + math.sin(5) * 0.5 * math.sin(2))


def _record(tmp_path, head: str, bus_extra: str, *record_args: str, during=None) -> subprocess.CompletedProcess:
    """`servo-hil record` of sin_sin at kp 400 into tmp_path/logs, from a daemon of one XL330 (bam m6) on a pty, the
    rig's head `head` and its bus's extra lines `bus_extra`; `during()` runs once the daemon is up."""
    rig = tmp_path / "xl.toml"
    rig.write_text(head + f"""[[buses]]
name = "dxl"
protocol = "dynamixel"
{bus_extra}[[actuators]]
joint = "xl330"
catalog = "xl330_m288"
model = "m6"
firmware = {{ supply_v = 5.0 }}
load = {{ mass = 0.49, length = 0.1 }}
bus = "dxl"
id = 1
""")
    port = tmp_path / "tty"
    daemon = subprocess.Popen([*SERVO_HIL, "run", str(rig), "--port", str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert "dynamixel bus" in daemon.stdout.readline()
        if during is not None:
            during()
        return subprocess.run([*SERVO_HIL, "record", "--port", str(port), "--out", str(tmp_path / "logs"), "--mass",
                               "0.49", "--length", "0.1", "--motor", "xl330", "--kp", "400", "--trajectory",
                               "sin_sin", *record_args], capture_output=True, text=True, timeout=60)
    finally:
        daemon.terminate()
        assert daemon.wait(STOP_TIMEOUT_S) == 0


def test_record_then_replay_round_trip(tmp_path):
    rec = _record(tmp_path, rig_head("realxl"), "fast = true\n")
    assert rec.returncode == 0, rec.stderr
    assert "run 1/1: sin_sin at kp 400" in rec.stderr   # progress, one line per run
    out = tmp_path / "logs"
    raw = json.loads(next((out / "raw").glob("*.json")).read_text())
    assert raw["kp"] == 400 and raw["trajectory"] == "sin_sin" and raw["vin"] == pytest.approx(5.0)
    assert len(raw["entries"]) > 1000 and {"position", "speed", "load", "input_volts", "temp", "goal_position",
                                           "torque_enable", "timestamp"} <= set(raw["entries"][0])
    processed = next((out / "processed").glob("*.json"))
    log = load_log(processed)
    assert log.dt == 0.005 and len(log.entries) == pytest.approx(1200, abs=5)
    # the recording of an m6 servo is explained by m6 far better than by m1
    m6 = replay(processed, "xl330_m288", model="m6")[0].mae
    m1 = replay(processed, "xl330_m288", model="m1")[0].mae
    assert m6 < 0.010, m6
    assert m1 > 3 * m6, (m1, m6)


def test_a_recording_that_falls_behind_says_so(tmp_path):
    """A servo whose replies come 15 ms late (the daemon's bus `delay` fault, paced at the wire's baud rate: a slow
    adapter, a loaded host) gets its goals more than 10 ms apart: every update is late, the log's header counts
    them, and `record` ends with one warning line."""
    command = f"tcp://127.0.0.1:{free_port()}"

    def delayed() -> None:
        ok(command, "inject_fault", actuator="xl330", fault="delay", args={"seconds": 0.015})

    rec = _record(tmp_path, rig_head("slowxl", command), "", "--duration", "1", during=delayed)
    out = tmp_path / "logs"
    assert rec.returncode == 0, rec.stderr
    warnings = [line for line in rec.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "1 of 1 runs fell behind" in warnings[0], rec.stderr
    raw = json.loads(next((out / "raw").glob("*.json")).read_text())
    assert raw["goal_updates"] > 10 and raw["late_goal_updates"] >= raw["goal_updates"] - 1, raw["goal_updates"]
    assert raw["longest_goal_gap_s"] > 0.030   # a write and a read, each 15 ms late
    assert load_log(next((out / "processed").glob("*.json"))).kp == 400   # replay's reader takes the extra keys


def test_lost_replies_cost_samples_not_the_run(tmp_path):
    """A servo that drops 5 % of its replies (the daemon's bus `drop` fault): dynamixel-sdk reports each as a
    timeout; the recorder writes a lost setting again, skips a lost sample, and the run completes with the losses
    counted in the log's header."""
    command = f"tcp://127.0.0.1:{free_port()}"

    def lossy() -> None:
        ok(command, "inject_fault", actuator="xl330", fault="drop", args={"probability": 0.05})

    rec = _record(tmp_path, rig_head("lossyxl", command), "fast = true\n", "--duration", "1", during=lossy)
    assert rec.returncode == 0, rec.stderr
    raw = json.loads(next((tmp_path / "logs" / "raw").glob("*.json")).read_text())
    assert raw["lost_replies"] > 0 and len(raw["entries"]) > 10, (raw["lost_replies"], len(raw["entries"]))
    # every sample is a whole Present block of this servo, none a late reply taken for another read: the 5 V
    # supply and the ambient temperature where they belong in it
    assert {(e["input_volts"], e["temp"]) for e in raw["entries"]} == {(5.0, 25)}


def test_goal_pacing_counts_late_updates_and_judges_the_run():
    on_time, late = GoalPacing(0.010), GoalPacing(0.010)
    for k in range(1000):
        on_time.update(0.005 * k)
        late.update(0.005 * k + (0.020 if k % 50 == 49 else 0.0))   # every 50th update 20 ms late: 2 %
    assert (on_time.late, on_time.behind) == (0, False)
    assert late.late == 20 and late.behind and late.header()["late_goal_updates"] == 20
    stalled = GoalPacing(0.010)
    for t in (0.0, 0.005, 0.1):   # one 95 ms stall
        stalled.update(t)
    assert stalled.behind and warn_if_behind([on_time, stalled]).count("1 of 2 runs") == 1
    paused = GoalPacing(0.010)
    paused.update(0.0)
    paused.pause()      # torque off for a second: no goals, no gap
    paused.update(1.0)
    assert (paused.late, paused.behind) == (0, False)
    assert warn_if_behind([on_time, paused]) is None
