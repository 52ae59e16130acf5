"""Active mirror for Feetech servos (`servo-hil record --protocol feetech`): bam's excitation trajectories.

Through feetech-servo-sdk (`scservo_sdk`), in position mode with the P Coefficient under test and D, I at 0 (as
Rhoban/bam's Feetech recorder, bam/feetech/record.py, sets them); it writes bam's raw JSON logs and the processed
log (5 ms grid) that `replay`, `report` and `identify` read. The servo's model number picks its control table in
config/feetech/ (addresses, byte order, sign bits, steps per turn), so an STS and an SCS servo are read alike.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from firmware_models.feetech.control_table import ModelSpec, decode_sign, encode_sign, load_model, model_names
from hil.params.config_file import ConfigError
from servo_hil.record.excitation import DURATION_S, TRAJECTORIES, GoalPacing
from servo_hil.record.sweep import record_servo

__all__ = ["BAM_KP", "LATE_GOAL_S", "FeetechServo", "record", "record_one"]

BAM_KP = 32               # bam's recorder default --kp (bam/feetech/record.py), the STS3215's power-up P Coefficient
# as the Dynamixel recorder: a goal more than two steps of bam's 5 ms grid after the previous one is late
LATE_GOAL_S = 0.010
# one block read from Present_Position to Present_Temperature (56..63 on STS and SCS memory tables)
# a late reply's wait: scservo_sdk's own timeout (twice its 16 ms latency timer + 2 ms, port_handler.py) is over
_RESYNC_S = 0.005
_TRIES = 3                # a setting's write, before a lost reply is an error
_PRESENT = ("Present_Position", "Present_Velocity", "Present_Load", "Present_Voltage", "Present_Temperature")


def _model_for(raw: bytes) -> ModelSpec | None:
    """The model whose Model_Number (address 3, two bytes) reads `raw` in the model's own byte order."""
    for name in model_names():
        spec = load_model(name)
        if int.from_bytes(raw, spec.byte_order) == spec.model_number:
            return spec
    return None


class FeetechServo:
    """A real (or emulated) Feetech servo on `port_path`, by the item names of its control table; errors name it."""

    def __init__(self, port_path: str, baud: int, servo_id: int):
        import scservo_sdk as scs

        self.ok = scs.COMM_SUCCESS
        self.port = scs.PortHandler(port_path)
        if not self.port.openPort():
            raise ConfigError(f"{port_path}: cannot open the port")
        try:
            if not self.port.setBaudRate(baud):
                raise ConfigError(f"{port_path}: cannot set {baud} bit/s")
            self.id = servo_id
            self.ph = scs.PacketHandler(0)
            raw, comm, _err = self.ph.readTxRx(self.port, servo_id, 3, 2)   # Model_Number, either byte order
            if comm != self.ok:
                raise ConfigError(f"{port_path}: no Feetech servo with ID {servo_id} answers at {baud} bit/s "
                                  f"({self.ph.getTxRxResult(comm)})")
            spec = _model_for(bytes(raw))
            if spec is None:
                raise ConfigError(f"{port_path}: ID {servo_id} reports model bytes {bytes(raw).hex()}, which no "
                                  f"control table in config/feetech/ has ({', '.join(model_names())})")
        except ConfigError:
            self.port.closePort()
            raise
        self.spec = spec
        # scservo_sdk's byte order is a module global (SCS_SETEND): 1 for SCS (big-endian) servos
        self.ph = scs.PacketHandler(1 if spec.byte_order == "big" else 0)
        self.rad = spec.step_rad                             # [rad per step]: 2π/4096 (STS), 300°/1024 (SCS)
        self.zero = spec.zero_step                           # 0 rad, the pendulum hanging down
        self.speed_unit = spec.item("Present_Velocity").si_per_unit or self.rad   # [rad/s per register unit]
        first = spec.item(_PRESENT[0]).address
        self._block = (first, max(spec.item(n).address + spec.item(n).size for n in _PRESENT) - first)

    def has(self, name: str) -> bool:
        return self.spec.has(name)

    def write(self, name: str, value: int, lost_ok: bool = False) -> bool:
        """Write item `name`; a servo error bit, or a lost reply unless `lost_ok`, is a ConfigError. False for a
        lost reply with `lost_ok` (the write may or may not have reached the servo)."""
        it = self.spec.item(name)
        data = encode_sign(int(value), it.sign_bit).to_bytes(it.size, self.spec.byte_order)
        for _ in range(1 if lost_ok else _TRIES):   # a setting is written again after a lost reply (idempotent)
            comm, err = self.ph.writeTxRx(self.port, self.id, it.address, it.size, list(data))
            if comm == self.ok:
                break
            self._resync()
        if comm != self.ok and lost_ok:
            return False
        if comm != self.ok or err:
            raise ConfigError(f"ID {self.id}: write {name} = {value} failed: "
                              f"{self.ph.getTxRxResult(comm) if comm != self.ok else self.ph.getRxPacketError(err)}")
        return True

    def read_present(self) -> dict[str, int] | None:
        """The Present items by name (signed where the table says), or None for a lost or short reply."""
        first, length = self._block
        data, comm, _err = self.ph.readTxRx(self.port, self.id, first, length)
        if comm == self.ok and len(data) != length:
            # a late reply to the previous instruction came first: ours follows it
            self.port.setPacketTimeout(length + 6)
            data, comm, _err = self.ph.readRx(self.port, self.id, length)
        if comm != self.ok or len(data) != length:
            self._resync()
            return None
        out = {}
        for name in _PRESENT:
            it = self.spec.item(name)
            raw = int.from_bytes(bytes(data[it.address - first:it.address - first + it.size]), self.spec.byte_order)
            out[name] = decode_sign(raw, it.sign_bit)
        return out

    def _resync(self) -> None:
        """After a lost or short reply: let a late status packet arrive, then drop what came in. scservo_sdk takes
        the first packet of the right ID as the reply and never drops input (its clearPort flushes the output), so
        a reply that came after its timeout would answer the next instruction, and every one after it."""
        time.sleep(_RESYNC_S)
        self.port.ser.reset_input_buffer()

    def close(self) -> None:
        self.port.closePort()


def record_one(servo: FeetechServo, trajectory: str, kp: int, header: dict, duration: float = DURATION_S,
               runs: list[GoalPacing] | None = None) -> dict:
    """One run: position mode, P = `kp`, D = I = 0, full speed; settle 1 s at the start, follow `trajectory` for
    `duration` s (bam: 6); bam's raw log with GoalPacing's counts in its header."""
    traj = TRAJECTORIES[trajectory]
    servo.write("Torque_Enable", 0)
    settings = {"Operating_Mode": 0, "P_Coefficient": kp, "D_Coefficient": 0, "I_Coefficient": 0,
                "Goal_Velocity": 0, "Acceleration": 0}
    for name, value in settings.items():
        if servo.has(name):          # SCS tables have no Operating_Mode
            servo.write(name, value)
    start, _ = traj(0.0)
    servo.write("Goal_Position", servo.zero + round(start / servo.rad))
    servo.write("Torque_Enable", 1)
    time.sleep(1.0)                      # settle at the start, as bam's recorder does
    entries, enabled, pacing, lost = [], True, GoalPacing(LATE_GOAL_S), 0
    t0 = time.monotonic()
    while (t := time.monotonic() - t0) < duration:
        goal, enable = traj(t)
        if enable != enabled:
            servo.write("Torque_Enable", int(enable))
            enabled = enable
        if enable:
            # a lost reply (a loaded host, a noisy line) costs one sample, not the run; the next goal follows
            lost += not servo.write("Goal_Position", servo.zero + round(goal / servo.rad), lost_ok=True)
            pacing.update(time.monotonic())
        else:
            pacing.pause()
        before = time.monotonic()
        present = servo.read_present()
        after = time.monotonic()
        if present is None:
            lost += 1
            continue                     # a lost reply: bam's loop skips the sample too
        entries.append({
            "timestamp": (before + after) / 2 - t0,        # midpoint of the read, as bam/feetech/record.py
            "position": (present["Present_Position"] - servo.zero) * servo.rad,
            "speed": present["Present_Velocity"] * servo.speed_unit,   # [step/s] → rad/s
            "load": present["Present_Load"] / 1000.0,          # 0.1 % of full duty → duty (bam's record: 0)
            "input_volts": present["Present_Voltage"] / 10.0,
            "temp": present["Present_Temperature"],
            "goal_position": goal,
            "torque_enable": enable,
        })
    servo.write("Torque_Enable", 0)
    vin = float(np.median([e["input_volts"] for e in entries])) if entries else 0.0
    if runs is not None:
        runs.append(pacing)
    return {**header, "kp": kp, "vin": header.get("vin") or vin, "trajectory": trajectory, **pacing.header(),
            "lost_replies": lost, "entries": entries}


def record(port: str, servo_id: int, baud: int, trajectories: list[str], gains: list[int], header: dict,
           out: Path, duration: float = DURATION_S) -> list[Path]:
    """Every trajectory at every gain; writes <out>/raw/*.json and <out>/processed/*.json (sweep.record_servo)."""
    return record_servo(lambda: FeetechServo(port, baud, servo_id), record_one, trajectories, gains, header, out,
                        duration)
