"""Active mirror (`servo-hil record`): a Dynamixel servo driven through bam's excitation trajectories.

Through dynamixel-sdk, in Position mode with the P gain under test; it writes bam's raw JSON logs (the format
of Rhoban/bam's Dynamixel recorder and its XL330 logs) and the processed log (5 ms grid) that `replay`,
`report` and bam's fitting read. Settings and samples: docs/configuration.md, Record identification logs.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from hil.params.config_file import ConfigError
from servo_hil.record.excitation import DURATION_S, TRAJECTORIES, GoalPacing
from servo_hil.record.sweep import record_servo

# Protocol 2.0 control table (MX(2.0), X series, XL330: the same addresses; e-manual §Control Table of RAM Area)
_TORQUE_ENABLE, _OPERATING_MODE, _P_GAIN, _I_GAIN, _D_GAIN, _GOAL = 64, 11, 84, 82, 80, 116
_BLOCK, _BLOCK_LEN = 124, 23          # Present PWM (124) … Present Temperature (146)
_PULSE_RAD = 2.0 * math.pi / 4096
_ZERO = 2048                          # 0 rad, the pendulum hanging down
_VELOCITY_UNIT = 0.229 * 2.0 * math.pi / 60.0
# a goal written more than two steps of bam's 5 ms processing grid after the previous one is late (bam's own
# recordings: cycles of 3.5–5.3 ms, none above 7.1 ms)
LATE_GOAL_S = 0.010


def _signed(raw: bytes) -> int:
    return int.from_bytes(raw, "little", signed=True)


class _Servo:
    """The few register accesses a recording needs, with errors that name the servo."""

    def __init__(self, port_path: str, baud: int, dxl_id: int):
        from dynamixel_sdk import COMM_SUCCESS, PacketHandler, PortHandler

        self.ok = COMM_SUCCESS
        self.port = PortHandler(port_path)
        if not self.port.openPort() or not self.port.setBaudRate(baud):
            raise ConfigError(f"{port_path}: cannot open at {baud} bit/s")
        self.ph = PacketHandler(2.0)
        self.id = dxl_id
        model, comm, _err = self.ph.ping(self.port, dxl_id)
        if comm != COMM_SUCCESS:
            raise ConfigError(f"{port_path}: no Dynamixel with ID {dxl_id} answers "
                              f"({self.ph.getTxRxResult(comm)})")
        self.model = model

    def write(self, address: int, size: int, value: int) -> None:
        data = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        comm, err = self.ph.writeTxRx(self.port, self.id, address, size, list(data))
        if comm != self.ok or err & 0x7F:
            raise ConfigError(f"ID {self.id}: write {value} at {address} failed: "
                              f"{self.ph.getTxRxResult(comm) if comm != self.ok else self.ph.getRxPacketError(err)}")

    def read_block(self) -> bytes | None:
        data, comm, err = self.ph.readTxRx(self.port, self.id, _BLOCK, _BLOCK_LEN)
        return bytes(data) if comm == self.ok and not err & 0x7F and len(data) == _BLOCK_LEN else None

    def close(self) -> None:
        self.port.closePort()


def record_one(servo: _Servo, trajectory: str, kp: int, header: dict, duration: float = DURATION_S,
               runs: list[GoalPacing] | None = None) -> dict:
    """One run: move to the start, follow `trajectory` for `duration` s (bam: 6), return bam's raw log (its header
    with GoalPacing's counts of late goal updates; the run's GoalPacing is appended to `runs`)."""
    traj = TRAJECTORIES[trajectory]
    servo.write(_TORQUE_ENABLE, 1, 0)
    servo.write(_OPERATING_MODE, 1, 3)
    for address, value in ((_P_GAIN, kp), (_I_GAIN, 0), (_D_GAIN, 0)):
        servo.write(address, 2, value)
    start, _ = traj(0.0)
    servo.write(_TORQUE_ENABLE, 1, 1)
    servo.write(_GOAL, 4, _ZERO + round(start / _PULSE_RAD))
    time.sleep(1.0)                      # settle at the start, as bam's recorder does
    entries, enabled, pacing = [], True, GoalPacing(LATE_GOAL_S)
    t0 = time.monotonic()
    while (t := time.monotonic() - t0) < duration:
        goal, enable = traj(t)
        if enable != enabled:
            servo.write(_TORQUE_ENABLE, 1, int(enable))
            enabled = enable
        if enable:
            servo.write(_GOAL, 4, _ZERO + round(goal / _PULSE_RAD))
            pacing.update(time.monotonic())
        else:
            pacing.pause()
        before = time.monotonic()
        block = servo.read_block()
        after = time.monotonic()
        if block is None:
            continue                     # a lost reply: bam's loop skips the sample too
        entries.append({
            "timestamp": (before + after) / 2 - t0,        # midpoint of the read, as bam/dynamixel/record.py
            "position": (_signed(block[8:12]) - _ZERO) * _PULSE_RAD,
            "speed": _signed(block[4:8]) * _VELOCITY_UNIT,
            "load": _signed(block[0:2]) / 885.0,          # Present PWM as a duty
            "input_volts": int.from_bytes(block[20:22], "little") / 10.0,
            "temp": block[22],
            "goal_position": goal,
            "torque_enable": enable,
        })
    servo.write(_TORQUE_ENABLE, 1, 0)
    vin = float(np.median([e["input_volts"] for e in entries])) if entries else 0.0
    if runs is not None:
        runs.append(pacing)
    return {**header, "kp": kp, "vin": header.get("vin") or vin, "trajectory": trajectory, **pacing.header(),
            "entries": entries}


def record(port: str, dxl_id: int, baud: int, trajectories: list[str], gains: list[int], header: dict,
           out: Path, duration: float = DURATION_S) -> list[Path]:
    """Every trajectory at every gain; writes <out>/raw/*.json and <out>/processed/*.json (sweep.record_servo)."""
    return record_servo(lambda: _Servo(port, baud, dxl_id), record_one, trajectories, gains, header, out, duration)
