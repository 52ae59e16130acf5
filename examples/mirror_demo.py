"""The proxy mirror without hardware (docs/mirror.md): a second daemon plays the real servo.

    .venv/bin/python examples/mirror_demo.py --out mirror-demo

What it runs, each step a command you could type yourself:

1. `servo-hil run config/rigs/mirror_demo_real.toml`: the "real" MX-64 (bam m6) on /tmp/servo-hil-mirror-real.
2. dynamixel-sdk on that pty writes Torque Enable = 1: the real servo is on before the mirror starts.
3. `servo-hil mirror config/rigs/mirror_demo.toml --record OUT/logs`: the mirror on /tmp/servo-hil-mirror; its
   twin (bam m1) reads the real servo's Torque Enable, Operating Mode and goals as it starts.
4. `controller()`: an ordinary dynamixel-sdk script on /tmp/servo-hil-mirror: position goals and Sync Reads of
   the Present items, as it would run against a U2D2 on the real servo. It never enables torque itself.
5. The mirror stops (its MCAP file is complete), then the "real" daemon.
6. `servo-hil report OUT/logs --out OUT/report`: sim vs "real", the m1-vs-m6 gap in mrad, a plot per joint.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from pathlib import Path

from dynamixel_sdk import COMM_SUCCESS, GroupSyncRead, PacketHandler, PortHandler

ROOT = Path(__file__).resolve().parents[1]
SERVO_HIL = str(Path(sys.executable).parent / "servo-hil")
REAL_PORT, MIRROR_PORT = "/tmp/servo-hil-mirror-real", "/tmp/servo-hil-mirror"
DXL_ID = 1
# MX-64(2.0) control table (e-manual): Torque Enable, Goal Position, Present Current..Present Position
TORQUE_ENABLE, GOAL_POSITION, PRESENT_CURRENT, PRESENT_BLOCK = 64, 116, 126, 10
COUNTS_PER_RAD = 4096 / (2 * math.pi)


def controller(port_path: str, goals_rad: list[float], hold_s: float = 1.5, rate_hz: float = 50.0) -> int:
    """Position goals through dynamixel-sdk, each held `hold_s` while the Present items are read at `rate_hz`;
    the number of reads that got no answer (a controller carries on)."""
    port, ph = PortHandler(port_path), PacketHandler(2.0)
    if not port.openPort() or not port.setBaudRate(1_000_000):
        raise SystemExit(f"cannot open {port_path}")
    reads = GroupSyncRead(port, ph, PRESENT_CURRENT, PRESENT_BLOCK)
    reads.addParam(DXL_ID)
    missed = 0
    try:
        for goal in goals_rad:
            ph.write4ByteTxRx(port, DXL_ID, GOAL_POSITION, round(2048 + goal * COUNTS_PER_RAD))
            end = time.monotonic() + hold_s
            while time.monotonic() < end:
                if reads.txRxPacket() != COMM_SUCCESS:
                    missed += 1
                time.sleep(1.0 / rate_hz)
            if reads.isAvailable(DXL_ID, PRESENT_CURRENT + 6, 4):
                q = (reads.getData(DXL_ID, PRESENT_CURRENT + 6, 4) - 2048) / COUNTS_PER_RAD
                print(f"goal {goal:+.2f} rad: the real servo reports {q:+.3f} rad")
    finally:
        port.closePort()
    return missed


def enable_torque(port_path: str) -> None:
    """Torque on, straight on the "real" servo's bus (what a previous program left behind on a robot)."""
    port, ph = PortHandler(port_path), PacketHandler(2.0)
    if not port.openPort() or not port.setBaudRate(1_000_000):
        raise SystemExit(f"cannot open {port_path}")
    try:
        comm, error = ph.write1ByteTxRx(port, DXL_ID, TORQUE_ENABLE, 1)
        if comm != COMM_SUCCESS or error:
            raise SystemExit(f"torque enable on {port_path}: {ph.getTxRxResult(comm)} {ph.getRxPacketError(error)}")
    finally:
        port.closePort()


def start(*args: str) -> subprocess.Popen:
    """A servo-hil daemon, once its bus is up (its first line says where)."""
    proc = subprocess.Popen([SERVO_HIL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline()
    if proc.poll() is not None or " at " not in line:
        proc.kill()
        raise SystemExit(f"servo-hil {args[0]} did not start: {line.strip()} {proc.stderr.read().strip()}")
    print(line.strip())
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    if proc.wait(15) != 0:
        raise SystemExit(f"servo-hil exited with {proc.returncode}: {proc.stderr.read().strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("mirror-demo"), help="folder for logs/ and report/")
    parser.add_argument("--torque-on", metavar="PORT", help="only step 2: Torque Enable = 1 on PORT")
    parser.add_argument("--controller", metavar="PORT", help="only step 4: the controller on PORT")
    args = parser.parse_args()
    if args.torque_on or args.controller:
        if args.torque_on:
            enable_torque(args.torque_on)
        if args.controller:
            controller(args.controller, [0.6, -0.6, 0.0])
        return
    out = args.out.resolve()
    real = start("run", str(ROOT / "config/rigs/mirror_demo_real.toml"))
    try:
        enable_torque(REAL_PORT)
        mirror = start("mirror", str(ROOT / "config/rigs/mirror_demo.toml"), "--record", str(out / "logs"))
        try:
            missed = controller(MIRROR_PORT, [0.6, -0.6, 0.0])
        finally:
            stop(mirror)
    finally:
        stop(real)
    if missed:
        print(f"{missed} reads got no answer in the SDK's timeout (a busy host); the log has the others")
    subprocess.run([SERVO_HIL, "report", str(out / "logs"), "--out", str(out / "report")], check=True)


if __name__ == "__main__":
    main()
