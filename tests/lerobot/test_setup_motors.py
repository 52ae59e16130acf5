"""`lerobot-setup-motors` on an arm whose servos come as from the box, plugged in one at a time as its prompts ask
(docs/lerobot.md, "Setting up the motors").

The arm's six servos start at ID 1, at the model's default baud rate (a seeded EEPROM state file: the factory
values, one SO-101 servo left at 500 kbit/s by an earlier project). LeRobot's own CLI, unchanged, asks for one motor
at a time, "Connect the controller board to the 'gripper' motor only and press enter.": the test pulls every other
servo's cable with the daemon's `plug` command and presses ENTER; LeRobot scans the baud rates, finds the one servo
by a broadcast ping and writes its ID and the bus's 1 Mbit/s. With every cable back in, the vendor's SDK (the
project's venv) finds each joint's servo alone at the ID LeRobot's arm class declares, at 1 Mbit/s, as the EEPROM
state file keeps it.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import tomllib
from pathlib import Path

import dynamixel_sdk as dxl
import pytest
import scservo_sdk as scs

from bench import lerobot as lr

# The IDs LeRobot's arm classes declare (so_follower.py, koch_follower.py: shoulder_pan 1 … gripper 6).
IDS = dict(zip(lr.JOINTS, range(1, 7), strict=True))
BUS_BAUD = 1_000_000     # LeRobot's DEFAULT_BAUDRATE for both buses (feetech.py, dynamixel.py)
# Per family: the EEPROM items of a servo from the box, the ID and baud items' names, the code of 1 Mbit/s, the
# model numbers. STS3215: ID 1, Baud_Rate 0 = 1 Mbit/s (config/feetech/sts3215.toml defaults, Feetech memory
# table); X series: ID 1, Baud Rate 1 = 57,600 bit/s, 3 = 1 Mbit/s (e-manual XL430-W250 / XL330 §Control Table).
FAMILIES = {
    "so101": {"box": {"ID": 1, "Baud_Rate": 0}, "box_bps": 1_000_000, "baud_item": "Baud_Rate", "mbit": 0,
              "models": dict.fromkeys(lr.JOINTS, 777)},
    "koch": {"box": {"ID": 1, "Baud Rate": 1}, "box_bps": 57_600, "baud_item": "Baud Rate", "mbit": 3,
             "models": {j: 1060 if j in ("shoulder_pan", "shoulder_lift") else 1200 for j in lr.JOINTS}},
}
# A used servo: LeRobot's scan (1 Mbit/s, then 500 kbit/s, … in STS_SMS_SERIES_BAUDRATE_TABLE) has to find it.
USED = {"so101": {"wrist_flex": {"Baud_Rate": 1}}}
# Wall-clock bound of one family's run: LeRobot's start (torch imports) and six scans. The Koch's scan starts at
# 9,600 bit/s, where the SDK's broadcast ping waits ≈ 4.5 s for 253 replies that never come (dynamixel_sdk
# broadcastPing: 14 bytes × 253 IDs at the baud, plus 3 ms per ID).
BOUND_S = {"so101": 60.0, "koch": 90.0}


class SetupMotors(lr.LeRobotPeer):
    """LeRobot's `lerobot-setup-motors` script from its venv, read and answered as LeRobotPeer reads bench/peers'."""

    def __init__(self, python: Path, args: list[str], log_dir: Path):
        self.err_path = log_dir / f"lerobot-setup-motors-{int(time.monotonic() * 1000)}.stderr"
        with self.err_path.open("w") as err:
            self.proc = subprocess.Popen([str(python.parent / "lerobot-setup-motors"), *args], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, cwd=log_dir,
                                         env=os.environ | {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
                                                           "HF_LEROBOT_HOME": str(log_dir / "hf")})
        self.window, self.partial, self.report_lines = "", "", []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()


def seed_from_the_box(family: str, rig: str, directory: Path) -> Path:
    """The rig copy's EEPROM state file as the servos leave the factory (all at ID 1), USED's servo as used."""
    f = FAMILIES[family]
    lines = ["format = 1", f'rig = "{rig}"', 'bus = "follower"']
    for j in lr.JOINTS:
        items = f["box"] | USED.get(family, {}).get(j, {})
        lines += [f"[servos.{j}]", f"model_number = {f['models'][j]}",
                  "eeprom = { " + ", ".join(f'"{k}" = {v}' for k, v in items.items()) + " }"]
    path = directory / f"{rig}-eeprom.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


class Sdk:
    """The vendor's own client on the arm's pty at `bps` [bit/s]: scservo_sdk (Feetech byte order, protocol 0) or
    dynamixel_sdk (Protocol 2.0)."""

    def __init__(self, family: str, port: str, bps: int = BUS_BAUD):
        self.mod = scs if family == "so101" else dxl
        self.port = self.mod.PortHandler(port)
        self.ph = self.mod.PacketHandler(0 if family == "so101" else 2.0)
        assert self.port.openPort() and self.port.setBaudRate(bps)

    def ping(self, sid: int) -> int | None:
        """The model number servo `sid` answers with, None when nothing answers."""
        model, comm, _ = self.ph.ping(self.port, sid)
        return model if comm == self.mod.COMM_SUCCESS else None

    def close(self) -> None:
        self.port.closePort()


def plug_only(arm: lr.Arm, joint: str | None) -> None:
    """Every servo's cable pulled but `joint`'s (None: every cable in)."""
    for j in lr.JOINTS:
        arm.ok("plug", actuator=j, connected=joint is None or j == joint)


def setup_motors(python: Path, family: str, arm: lr.Arm, directory: Path, deadline: float) -> float:
    """`lerobot-setup-motors` for the family's follower, each prompt answered after pulling every cable but the
    named servo's; the seconds it took. LeRobot reads with no retry: a reply later than the SDK's timeout on a
    loaded host ends it (as on a real bus), and then it is run again, as a person would (the servos it set up are
    found again at their new ID and baud)."""
    t0 = 0.0    # when the run that succeeds started

    def start() -> SetupMotors:
        nonlocal t0
        t0 = time.monotonic()
        return SetupMotors(python, [f"--robot.type={family}_follower", f"--robot.port={arm.port}",
                                    f"--robot.calibration_dir={directory / 'calibration'}"], directory)

    def run(peer: SetupMotors) -> float:
        for motor in reversed(lr.JOINTS):        # LeRobot asks from the gripper down (setup_motors)
            peer.expect(f"Connect the controller board to the '{motor}' motor only and press enter.",
                        deadline - time.monotonic())
            plug_only(arm, motor)
            peer.enter()
            peer.expect(f"'{motor}' motor id set to {IDS[motor]}", deadline - time.monotonic())
        peer.finish(deadline - time.monotonic())
        return time.monotonic() - t0

    return lr.again_after_lost_reply(start, run, f"{family}: lerobot-setup-motors")


@pytest.mark.parametrize("family", ["so101", "koch"])
def test_setup_motors_one_servo_at_a_time(family, lerobot_python, tmp_path):
    f = FAMILIES[family]
    deadline = time.monotonic() + BOUND_S[family]
    lr.write_rig(family, tmp_path)
    eeprom = seed_from_the_box(family, family, tmp_path)
    arm = lr.start_arm(family, tmp_path)
    try:
        plug_only(arm, "gripper")                # as from the box: the gripper's servo answers at ID 1, not 6
        sdk = Sdk(family, arm.port, f["box_bps"])
        try:
            assert (sdk.ping(1), sdk.ping(IDS["gripper"])) == (f["models"]["gripper"], None)
        finally:
            sdk.close()

        elapsed = setup_motors(lerobot_python, family, arm, tmp_path, deadline)

        plug_only(arm, None)
        sdk = Sdk(family, arm.port)
        try:
            # every cable in: six servos on six IDs, no two answering one (their replies would collide)
            assert {j: sdk.ping(IDS[j]) for j in lr.JOINTS} == f["models"]
            for j in lr.JOINTS:                  # and each joint's own servo at its ID: alone on the bus, it answers
                plug_only(arm, j)
                assert [sid for sid in IDS.values() if sdk.ping(sid) is not None] == [IDS[j]], j
        finally:
            sdk.close()
        saved = tomllib.loads(eeprom.read_text())["servos"]
        assert {j: (s["eeprom"]["ID"], s["eeprom"][f["baud_item"]]) for j, s in saved.items()} == \
            {j: (IDS[j], f["mbit"]) for j in lr.JOINTS}
        print(f"\n{family}: lerobot-setup-motors set six IDs in {elapsed:.1f} s")
    finally:
        rc = arm.stop()
    assert rc == 0, f"{arm.name}: exit {rc} after SIGTERM\n{arm.err_path.read_text()[-3000:]}"
    assert "Traceback" not in arm.err_path.read_text(errors="replace")
