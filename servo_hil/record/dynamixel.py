"""Active mirror (`servo-hil record`): a Dynamixel servo driven through bam's excitation trajectories.

Through dynamixel-sdk, in Position mode with the P gain under test; it writes bam's raw JSON logs (the format
of Rhoban/bam's Dynamixel recorder and its XL330 logs) and the processed log (5 ms grid) that `replay`,
`report` and bam's fitting read. Settings and samples: docs/configuration.md, Record identification logs.
"""

from __future__ import annotations

import math
from pathlib import Path

from hil.params.config_file import ConfigError
from servo_hil.record.excitation import DURATION_S
from servo_hil.record.sweep import TRIES, drop_late_reply, record_servo

# Protocol 2.0 control table (MX(2.0), X series, XL330: the same addresses; e-manual §Control Table of RAM Area)
_TORQUE_ENABLE, _OPERATING_MODE, _P_GAIN, _I_GAIN, _D_GAIN, _GOAL = 64, 11, 84, 82, 80, 116
_BLOCK, _BLOCK_LEN = 124, 23          # Present PWM (124) … Present Temperature (146)
_PULSE_RAD = 2.0 * math.pi / 4096
_ZERO = 2048                          # 0 rad, the pendulum hanging down
_VELOCITY_UNIT = 0.229 * 2.0 * math.pi / 60.0


def _signed(raw: bytes) -> int:
    return int.from_bytes(raw, "little", signed=True)


class DynamixelClient:
    """A Dynamixel servo through dynamixel-sdk (Protocol 2.0), as a recording run drives it (`RecordedServo`);
    errors name the servo."""

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
            self.port.closePort()
            raise ConfigError(f"{port_path}: no Dynamixel with ID {dxl_id} answers "
                              f"({self.ph.getTxRxResult(comm)})")
        self.model = model

    def _write(self, address: int, size: int, value: int, lost_ok: bool = False) -> bool:
        """A Write; a servo error, or a lost reply unless `lost_ok`, is a ConfigError (a setting is written again
        after a lost reply: idempotent). False for a lost reply with `lost_ok`."""
        data = list((value & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))
        for _ in range(1 if lost_ok else TRIES):
            comm, err = self.ph.writeTxRx(self.port, self.id, address, size, data)
            if comm == self.ok:
                break
            drop_late_reply(self.port.ser)
        if comm != self.ok and lost_ok:
            return False
        if comm != self.ok or err & 0x7F:
            raise ConfigError(f"ID {self.id}: write {value} at {address} failed: "
                              f"{self.ph.getTxRxResult(comm) if comm != self.ok else self.ph.getRxPacketError(err)}")
        return True

    def prepare(self, kp: int, start_rad: float) -> None:
        self._write(_TORQUE_ENABLE, 1, 0)
        self._write(_OPERATING_MODE, 1, 3)
        for address, value in ((_P_GAIN, kp), (_I_GAIN, 0), (_D_GAIN, 0)):
            self._write(address, 2, value)
        self._write(_TORQUE_ENABLE, 1, 1)
        self._write(_GOAL, 4, _ZERO + round(start_rad / _PULSE_RAD))

    def set_torque(self, on: bool) -> None:
        self._write(_TORQUE_ENABLE, 1, int(on))

    def write_goal(self, goal_rad: float) -> bool:
        return self._write(_GOAL, 4, _ZERO + round(goal_rad / _PULSE_RAD), lost_ok=True)

    def read_sample(self) -> dict | None:
        data, comm, err = self.ph.readTxRx(self.port, self.id, _BLOCK, _BLOCK_LEN)
        if comm != self.ok or err & 0x7F or len(data) != _BLOCK_LEN:
            drop_late_reply(self.port.ser)
            return None
        block = bytes(data)
        return {"position": (_signed(block[8:12]) - _ZERO) * _PULSE_RAD,
                "speed": _signed(block[4:8]) * _VELOCITY_UNIT,
                "load": _signed(block[0:2]) / 885.0,          # Present PWM as a duty
                "input_volts": int.from_bytes(block[20:22], "little") / 10.0,
                "temp": block[22]}

    def close(self) -> None:
        self.port.closePort()


def record(port: str, dxl_id: int, baud: int, trajectories: list[str], gains: list[int], header: dict,
           out: Path, duration: float = DURATION_S) -> list[Path]:
    """Every trajectory at every gain; writes <out>/raw/*.json and <out>/processed/*.json (sweep.record_servo)."""
    return record_servo(lambda: DynamixelClient(port, baud, dxl_id), trajectories, gains, header, out, duration)
