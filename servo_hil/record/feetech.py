"""Active mirror for Feetech servos (`servo-hil record --protocol feetech`): bam's excitation trajectories.

Through feetech-servo-sdk (`scservo_sdk`), in position mode with the P Coefficient under test and D, I at 0 (as
Rhoban/bam's Feetech recorder, bam/feetech/record.py, sets them); it writes bam's raw JSON logs and the processed
log (5 ms grid) that `replay`, `report` and `identify` read. The servo's model number picks its control table in
config/feetech/ (addresses, byte order, sign bits, steps per turn), so an STS and an SCS servo are read alike.
"""

from __future__ import annotations

from pathlib import Path

from firmware_models.feetech.control_table import ModelSpec, decode_sign, encode_sign, load_model, model_names
from hil.params.config_file import ConfigError
from servo_hil.record.excitation import DURATION_S
from servo_hil.record.sweep import TRIES, drop_late_reply, record_servo

__all__ = ["BAM_KP", "FeetechClient", "record"]

BAM_KP = 32               # bam's recorder default --kp (bam/feetech/record.py), the STS3215's power-up P Coefficient
# one block read from Present_Position to Present_Temperature (56..63 on STS and SCS memory tables)
_PRESENT = ("Present_Position", "Present_Velocity", "Present_Load", "Present_Voltage", "Present_Temperature")


def _model_for(raw: bytes) -> ModelSpec | None:
    """The model whose Model_Number (address 3, two bytes) reads `raw` in the model's own byte order."""
    for name in model_names():
        spec = load_model(name)
        if int.from_bytes(raw, spec.byte_order) == spec.model_number:
            return spec
    return None


class FeetechClient:
    """A real (or emulated) Feetech servo on `port_path` through scservo_sdk, by the item names of its control
    table, as a recording run drives it (`RecordedServo`); errors name it."""

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
        for _ in range(1 if lost_ok else TRIES):   # a setting is written again after a lost reply (idempotent)
            comm, err = self.ph.writeTxRx(self.port, self.id, it.address, it.size, list(data))
            if comm == self.ok:
                break
            drop_late_reply(self.port.ser)
        if comm != self.ok and lost_ok:
            return False
        if comm != self.ok or err:
            raise ConfigError(f"ID {self.id}: write {name} = {value} failed: "
                              f"{self.ph.getTxRxResult(comm) if comm != self.ok else self.ph.getRxPacketError(err)}")
        return True

    def read_sample(self) -> dict | None:
        """bam's log entry fields from the Present items (signed where the table says), or None for a lost or short
        reply."""
        first, length = self._block
        data, comm, _err = self.ph.readTxRx(self.port, self.id, first, length)
        if comm == self.ok and len(data) != length:
            # a late reply to the previous instruction came first: ours follows it
            self.port.setPacketTimeout(length + 6)
            data, comm, _err = self.ph.readRx(self.port, self.id, length)
        if comm != self.ok or len(data) != length:
            drop_late_reply(self.port.ser)
            return None
        v = {}
        for name in _PRESENT:
            it = self.spec.item(name)
            raw = int.from_bytes(bytes(data[it.address - first:it.address - first + it.size]), self.spec.byte_order)
            v[name] = decode_sign(raw, it.sign_bit)
        return {"position": (v["Present_Position"] - self.zero) * self.rad,
                "speed": v["Present_Velocity"] * self.speed_unit,       # [step/s] → rad/s
                "load": v["Present_Load"] / 1000.0,                      # 0.1 % of full duty → duty (bam's record: 0)
                "input_volts": v["Present_Voltage"] / 10.0,
                "temp": v["Present_Temperature"]}

    def prepare(self, kp: int, start_rad: float) -> None:
        """Position mode, P = `kp`, D = I = 0, full speed, as bam/feetech/record.py sets them."""
        self.write("Torque_Enable", 0)
        settings = {"Operating_Mode": 0, "P_Coefficient": kp, "D_Coefficient": 0, "I_Coefficient": 0,
                    "Goal_Velocity": 0, "Acceleration": 0}
        for name, value in settings.items():
            if self.has(name):          # SCS tables have no Operating_Mode
                self.write(name, value)
        self.write("Goal_Position", self.zero + round(start_rad / self.rad))
        self.write("Torque_Enable", 1)

    def set_torque(self, on: bool) -> None:
        self.write("Torque_Enable", int(on))

    def write_goal(self, goal_rad: float) -> bool:
        return self.write("Goal_Position", self.zero + round(goal_rad / self.rad), lost_ok=True)

    def close(self) -> None:
        self.port.closePort()


def record(port: str, servo_id: int, baud: int, trajectories: list[str], gains: list[int], header: dict,
           out: Path, duration: float = DURATION_S) -> list[Path]:
    """Every trajectory at every gain; writes <out>/raw/*.json and <out>/processed/*.json (sweep.record_servo)."""
    return record_servo(lambda: FeetechClient(port, baud, servo_id), trajectories, gains, header, out, duration)
