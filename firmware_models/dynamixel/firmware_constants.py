"""Per-model firmware constants: gain scalings and the thresholds ROBOTIS does not publish.

Read from the `[firmware]` table of the model's control-table file. The e-manual's register scalings
(K_PP = P/128 …) become SI gains of the kernel's Dynamixel law, in duty per rad and per rad/s, unless a model
was measured otherwise (bam's MX and XL330 gains): docs/dynamixel.md, Gain scalings.
"""

from __future__ import annotations

import math
from functools import cache

from pydantic import Field, PositiveFloat

from firmware_models.dynamixel.present import PULSES_PER_REV, PWM_FULL, VELOCITY_UNIT
from hil.params.catalog import config_dir
from hil.params.config_file import ConfigError, Strict, read_toml, validate

# the register units are the Present items' (present.pyx)
_PULSE_PER_RAD = PULSES_PER_REV / (2.0 * math.pi)
_PER_VELOCITY_UNIT = 1.0 / VELOCITY_UNIT


class FirmwareConstants(Strict):
    """`[firmware]` of a control-table file; every value cites its source in the TOML."""

    source: str = Field(description="where the constants come from")
    sources: dict[str, str] = Field(default_factory=dict)
    control_period_s: PositiveFloat = Field(description="position/velocity loop period [s]")
    position_p_divisor: PositiveFloat = 128.0
    position_p_duty_per_rad: PositiveFloat | None = Field(
        None, description="measured duty per (Position P Gain unit · rad); replaces the divisor")
    current_limiter: bool = Field(False, description="Current Limit also caps the current in voltage modes")
    in_position_window_pulses: float = Field(ge=0, description="Moving Status bit 0 window [pulses]")
    following_error_window_pulses: float = Field(gt=0, description="Moving Status bit 3 threshold [pulses]")
    overload_stall_fraction: float = Field(gt=0, le=2, description="overload above this × stall current [1]")
    overload_time_s: PositiveFloat = Field(description="… held this long [s]")

    def position_p(self, p: int) -> float:
        if self.position_p_duty_per_rad is not None:
            return p * self.position_p_duty_per_rad
        return p / self.position_p_divisor * _PULSE_PER_RAD / PWM_FULL

    def position_i(self, i: int) -> float:
        return i / 65536.0 * _PULSE_PER_RAD / PWM_FULL / self.control_period_s

    def position_d(self, d: int) -> float:
        return d / 16.0 * _PULSE_PER_RAD / PWM_FULL * self.control_period_s

    def feedforward_1st(self, ff: int) -> float:
        return ff / 4.0 * _PULSE_PER_RAD / PWM_FULL * self.control_period_s

    def feedforward_2nd(self, ff: int) -> float:
        return ff / 4.0 * _PULSE_PER_RAD / PWM_FULL * self.control_period_s ** 2

    def velocity_p(self, vp: int) -> float:
        return vp / 128.0 * _PER_VELOCITY_UNIT / PWM_FULL

    def velocity_i(self, vi: int) -> float:
        return vi / 65536.0 * _PER_VELOCITY_UNIT / PWM_FULL / self.control_period_s


@cache
def load_firmware_constants(model: str) -> FirmwareConstants:
    """The `[firmware]` table of config/dynamixel/<model>.toml."""
    path = config_dir() / "dynamixel" / f"{model}.toml"
    data = read_toml(path)
    if "firmware" not in data:
        raise ConfigError(f"{path}: missing [firmware] table (gain scalings and thresholds)")
    return validate(FirmwareConstants, data["firmware"], f"{path}: firmware")
