"""The eRob's CiA 402 drive: the generic `Cia402Drive` on the eRob's object dictionary, with a variant's units,
ratings and loop gains (config/erob/<variant>.toml) and the eRob's manufacturer-specific actual values."""

from __future__ import annotations

import math

from firmware_models.cia402 import Cia402Drive, DriveConfig, PositionLoop, Sensed
from firmware_models.erob.object_dictionary import ErobConfig, load_config, load_object_dictionary
from hil.joint import Joint
from hil.kernel import LAWS

__all__ = ["AUX_POSITION", "DRIVE_TEMPERATURE", "ENCODER_DIFFERENCE", "MOTOR_ENCODER", "TORQUE_SENSOR",
           "drive_config", "new_drive"]

# manufacturer-specific objects the drive keeps current (ZeroErr Driver_V1.5.eds [20A0], [2240], [2241], [22A2],
# [3B69]; config/erob/objects.toml)
AUX_POSITION = (0x20A0, 0)          # INTEGER32, the output encoder [counts]
MOTOR_ENCODER = (0x2240, 0)         # INTEGER32, the motor encoder [counts]
ENCODER_DIFFERENCE = (0x2241, 0)    # INTEGER32, motor − output encoder [counts]
DRIVE_TEMPERATURE = (0x22A2, 0)     # UNSIGNED16 [°C]
TORQUE_SENSOR = (0x3B69, 0)         # INTEGER32 [mN·m]

_I32 = (-(1 << 31), (1 << 31) - 1)


def _i32(x: float) -> int:
    return min(max(round(x), _I32[0]), _I32[1])


def drive_config(config: ErobConfig) -> DriveConfig:
    """The generic drive's view of variant `config`: its units, DC-link band and position loop (the kernel's
    `erob_pd` law, bam's eRob current law) and the eRob's own actual-value objects."""
    motor_counts_per_rad = config.units.motor_revs_per_output_rev * config.units.motor_encoder_counts / (2 * math.pi)

    def vendor_values(values: dict[tuple[int, int], int], sensed: Sensed) -> None:
        values[AUX_POSITION] = sensed.position_counts
        values[MOTOR_ENCODER] = _i32(sensed.theta_rad * motor_counts_per_rad)
        values[ENCODER_DIFFERENCE] = 0               # rigid gear: no twist between the two encoders
        values[DRIVE_TEMPERATURE] = min(max(round(sensed.sensor_c), 0), 0xFFFF)
        values[TORQUE_SENSOR] = _i32(sensed.torque_nm * 1000.0)

    loop = config.loop
    return DriveConfig(name=config.name, counts_per_rev=config.units.encoder_counts,
                       zero_counts=config.units.zero_counts,
                       motor_revs_per_output_rev=config.units.motor_revs_per_output_rev,
                       dc_link_min_v=config.ratings.dc_link_min_v, dc_link_max_v=config.ratings.dc_link_max_v,
                       loop=PositionLoop(LAWS["erob_pd"], loop.kp, loop.damping, loop.ki),
                       vendor_values=vendor_values)


def new_drive(variant: str, node_id: int, joint: Joint) -> Cia402Drive:
    """The drive of eRob `variant` (config/erob/<variant>.toml) with its object dictionary as CANopen node
    `node_id`, on `joint`."""
    return Cia402Drive(load_object_dictionary(variant, node_id), joint, drive_config(load_config(variant)))
