"""LeRobot's side of bench/lerobot.py and tests/lerobot: run by a LeRobot venv's Python (`make lerobot`: lerobot
0.4.4, Python 3.11; `make lerobot-next`: the newest, 0.6.1 when written, Python 3.12), the same code for both.

It builds LeRobot's own arm classes, unchanged, on an emulated arm's pty and reports what they saw as JSON lines
that start with `@@ `. Whatever LeRobot prompts for with `input()` (its calibrate flow) is answered on stdin by the
test, which moves the arm with the daemon's `hand` command before it presses ENTER.

    python lerobot_arm.py session ARM PORT CALIBRATION_DIR [OFFSETS_JSON]
    python lerobot_arm.py teleop FAMILY LEADER_PORT FOLLOWER_PORT CALIBRATION_DIR SECONDS HZ

ARM is one of koch_follower, koch_leader, so101_follower, so101_leader; FAMILY koch or so101.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROBOTS = {
    "koch_follower": ("lerobot.robots.koch_follower", "KochFollower", "KochFollowerConfig"),
    "so101_follower": ("lerobot.robots.so_follower", "SO101Follower", "SO101FollowerConfig"),
    "koch_leader": ("lerobot.teleoperators.koch_leader", "KochLeader", "KochLeaderConfig"),
    "so101_leader": ("lerobot.teleoperators.so_leader", "SO101Leader", "SO101LeaderConfig"),
}
# Registers read back after `configure` to show what LeRobot wrote (names as LeRobot's control tables spell them).
CONFIGURED = {
    "koch": ("Operating_Mode", "Return_Delay_Time", "Position_P_Gain", "Position_D_Gain", "Torque_Enable"),
    "so101": ("Operating_Mode", "Return_Delay_Time", "P_Coefficient", "D_Coefficient", "Maximum_Acceleration",
              "Torque_Enable"),
}


def report(kind: str, **data) -> None:
    print("@@ " + json.dumps({"kind": kind, **data}, default=str), flush=True)


def make(arm: str, port: str, calibration_root: str):
    """LeRobot's class for `arm` on `port` with id "servo_hil", its calibration file where LeRobot's own CLI keeps
    it, under $HF_LEROBOT_CALIBRATION (robots/<class name>/servo_hil.json, teleoperators/…), set to
    `calibration_root` before lerobot is imported."""
    import importlib
    import os

    os.environ["HF_LEROBOT_CALIBRATION"] = str(Path(calibration_root))
    module, cls, cfg = ROBOTS[arm]
    mod = importlib.import_module(module)
    return getattr(mod, cls)(getattr(mod, cfg)(port=port, id="servo_hil"))


def calibration_dict(cal) -> dict:
    return {m: {"id": c.id, "drive_mode": c.drive_mode, "homing_offset": c.homing_offset,
                "range_min": c.range_min, "range_max": c.range_max} for m, c in cal.items()}


def bus_identity(bus) -> dict:
    """Model numbers and firmware versions as LeRobot's bus reads them (its connect checked them already)."""
    models = {m: int(bus.read("Model_Number", m, normalize=False)) for m in bus.motors}
    if hasattr(bus, "_read_firmware_version"):
        firmware = {str(k): v for k, v in bus._read_firmware_version(bus.ids).items()}
    else:
        firmware = {m: int(bus.read("Firmware_Version", m, normalize=False)) for m in bus.motors}
    return {"models": models, "firmware": firmware}


def session(arm: str, port: str, calibration_dir: str, offsets_json: str | None = None) -> None:
    """connect (calibrating through LeRobot's own prompts when the servos and the file disagree), what configure
    wrote, one observation, for a follower an action (the observation plus `offsets_json`, {"joint.pos": offset}
    in LeRobot's normalized units) until reached, disconnect."""
    device = make(arm, port, calibration_dir)
    bus = device.bus
    t0 = time.monotonic()
    device.connect(calibrate=True)
    report("connected", seconds=time.monotonic() - t0, calibration_file=str(device.calibration_fpath),
           is_calibrated=device.is_calibrated, **bus_identity(bus))
    report("calibration", file=calibration_dict(device.calibration), servos=calibration_dict(bus.read_calibration()))
    family = arm.split("_")[0]
    report("configured", registers={r: bus.sync_read(r, normalize=False) for r in CONFIGURED[family]})
    if arm.endswith("follower"):
        observation = device.get_observation()
        report("observation", value=observation)
        if offsets_json:
            offsets = json.loads(offsets_json)
            sent = device.send_action({k: v + offsets.get(k, 0.0) for k, v in observation.items()})
            deadline = time.monotonic() + 5.0
            trace, lost = [], 0
            while time.monotonic() < deadline:
                try:
                    obs = device.get_observation()
                except ConnectionError:
                    lost += 1       # a reply later than the SDK's timeout (LeRobot reads with no retry)
                    continue
                trace.append(obs)
                if all(abs(obs[k] - v) < 2.0 for k, v in sent.items() if k != "gripper.pos"):
                    break
                time.sleep(0.02)
            report("action", sent=sent, reached=trace[-1], seconds=5.0 - (deadline - time.monotonic()), lost=lost)
    else:
        report("observation", value=device.get_action())
    device.disconnect()
    report("disconnected")


def teleop(family: str, leader_port: str, follower_port: str, calibration_dir: str, seconds: float, hz: float):
    """LeRobot's teleoperation loop (lerobot_teleoperate.teleop_loop's order: observation, leader action, send,
    sleep to the period) at `hz` for `seconds`, with each step's times [s] and the leader's action and the
    follower's observation in LeRobot's normalized units."""
    leader = make(f"{family}_leader", leader_port, calibration_dir)
    follower = make(f"{family}_follower", follower_port, calibration_dir)
    # after make(): in lerobot 0.6.1 lerobot/utils/__init__.py imports constants.py, which reads $HF_LEROBOT_CALIBRATION
    from lerobot.utils.robot_utils import precise_sleep
    leader.connect(calibrate=False)
    follower.connect(calibrate=False)
    report("connected", leader_calibrated=leader.is_calibrated, follower_calibrated=follower.is_calibrated)
    period = 1.0 / hz
    rows, lost = [], []
    t_start = time.perf_counter()
    k = 0
    while True:
        t_due = t_start + k * period
        t0 = time.perf_counter()
        if t0 - t_start >= seconds:
            break
        try:
            obs = follower.get_observation()
            t1 = time.perf_counter()
            action = leader.get_action()
            t2 = time.perf_counter()
            follower.send_action(action)
            t3 = time.perf_counter()
            rows.append({"t": t0 - t_start, "late": t0 - t_due, "observe": t1 - t0, "leader_read": t2 - t1,
                         "send": t3 - t2, "obs": obs, "action": action})
        except ConnectionError as e:
            # LeRobot reads with no retry: one reply later than the SDK's packet timeout ends lerobot-teleoperate.
            # Counted here instead, and the loop goes on with the next period.
            lost.append({"t": t0 - t_start, "error": str(e)})
        k += 1
        precise_sleep(max(0.0, t_start + k * period - time.perf_counter()))
    disconnect_errors = []
    for device in (leader, follower):
        try:
            device.disconnect()
        except (RuntimeError, ConnectionError) as e:
            # e.g. a servo that shut down (Overload Error) answers the torque-off write with its Alert bit
            disconnect_errors.append(f"{device}: {e}")
    steps = [r["observe"] + r["leader_read"] + r["send"] for r in rows]
    report("teleop", hz=hz, seconds=seconds, steps=len(rows), step_median=statistics.median(steps), rows=rows,
           lost=lost, disconnect_errors=disconnect_errors)


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] == "session":
        session(*argv[1:5])
    elif len(argv) == 7 and argv[0] == "teleop":
        teleop(argv[1], argv[2], argv[3], argv[4], float(argv[5]), float(argv[6]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
