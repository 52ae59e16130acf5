"""What a CiA 402 drive model takes from one product's firmware model besides its object dictionary: the
product's name, its position units, DC-link band and position loop, and the manufacturer-specific objects
that follow the actual values. The product's own package fills a `DriveConfig` and hands it to `Cia402Drive`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple


class Sensed(NamedTuple):
    """The actual values of one control period, in SI and drive units, as a product's own objects need them."""

    theta_rad: float        # output shaft position, as the encoder reads it [rad]
    position_counts: int    # 0x6064 [counts]
    torque_nm: float        # output torque [N·m]
    sensor_c: float         # the drive's temperature sensor [°C]


@dataclass(frozen=True)
class PositionLoop:
    """The drive's position loop as the kernel runs it: a PD current law i = kp·e − damping·√kp·ω, ±max_amps
    (the kernel law `law`, a code of hil.kernel.LAWS); the integral term ki runs in the drive at tick rate."""

    law: int
    kp: float               # [A/rad]
    damping: float          # D = damping·√kp [A·s/rad]
    ki: float               # [A/(rad·s)]


@dataclass(frozen=True)
class DriveConfig:
    """One product's CiA 402 drive. `vendor_values(values, sensed)` writes the product's own actual-value objects
    into the object store after every sampling of the actual values (None: the product has none)."""

    name: str
    counts_per_rev: int                     # 0x6064 counts per output revolution
    zero_counts: int                        # 0x6064 at θ = 0 rad
    motor_revs_per_output_rev: float        # 0x6080 (max motor speed) is in motor rpm
    dc_link_min_v: float                    # below: under-voltage fault 0x3220 [V]
    dc_link_max_v: float                    # above: over-voltage fault 0x3210 [V]
    loop: PositionLoop
    vendor_values: Callable[[dict[tuple[int, int], int], Sensed], None] | None = None
