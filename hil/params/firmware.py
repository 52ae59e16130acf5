"""Firmware control laws the kernel runs, as configuration.

`u` means something different for each law (see hil/kernel/core.pxd): goal position [rad] for
`dxl_pwm`, `sts_pwm` and `erob_pd`, current [A] for `current`, output torque [N·m] for `torque`. The dcmotor
controller layer (`input` = voltage / position / velocity) is configured with the motor's own
MuJoCo attributes instead (`input`, `controller`, `ctrlrange`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, TypeAdapter, ValidationError

from hil.kernel import LAWS, STS_MODES
from hil.params.config_file import ConfigError, Strict, describe


class DynamixelPwmLaw(Strict):
    """bam's Dynamixel voltage law: duty = error_gain·kp·(goal − q) (bam/dynamixel/actuator.py `MXActuator`;
    friction paper §IV-B)."""

    law: Literal["dxl_pwm"] = "dxl_pwm"
    kp: NonNegativeFloat = Field(description="raw Position P Gain register value")
    error_gain: PositiveFloat = Field(description="duty per (P unit · rad)")
    max_duty: float = Field(1.0, gt=0.0, le=1.0, description="PWM limit as a duty fraction")
    max_current: NonNegativeFloat = Field(0.0, description="firmware current limiter [A]; 0 = none")
    supply_v: PositiveFloat = Field(description="supply voltage vin [V]")

    def kernel_params(self) -> dict[str, float]:
        # duty per rad [1/rad], bam's product error_gain·kp (its order: the duty bam computes, bit for bit)
        return dict(law=LAWS["dxl_pwm"], duty_gain=self.error_gain * self.kp,
                    max_duty=self.max_duty, max_current=self.max_current, supply_v=self.supply_v)


class StsPwmLaw(Strict):
    """bam's Feetech STS3215 law (bam/feetech/actuator.py `STS3215Actuator.compute_control`): the goal reaches
    the loop through a setpoint limited to max_velocity, duty = (setpoint − q)·kp·error_gain, ±max_duty,
    volts = supply_v·duty."""

    law: Literal["sts_pwm"] = "sts_pwm"
    kp: NonNegativeFloat = Field(description="raw P Coefficient (21) register value")
    error_gain: PositiveFloat = Field(description="duty per (P unit · rad)")
    max_duty: float = Field(1.0, gt=0.0, le=1.0, description="duty at full output (bam max_pwm)")
    max_velocity: float = Field(ge=0.0, allow_inf_nan=True, description="setpoint speed limit [rad/s]; 0 holds it, "
                                "inf = none")
    supply_v: PositiveFloat = Field(description="supply voltage vin [V]")

    def kernel_params(self) -> dict[str, float]:
        # kp and error_gain apart: the kernel multiplies them in bam's order, (q_s − q)·kp·error_gain
        return dict(law=LAWS["sts_pwm"], sts_p=self.kp, sts_error_gain=self.error_gain, max_duty=self.max_duty,
                    sts_speed=self.max_velocity, supply_v=self.supply_v)


class StsLaw(Strict):
    """The Feetech STS firmware's own loop (hil/kernel/feetech.pxi `sts_firmware`) in SI, as
    firmware_models/feetech/law.py converts its registers: Operating Mode (33), the position PID (21–23),
    the speed loop (37, 39), Goal Speed and Acceleration as the setpoint's limits, the dead zones (26, 27)."""

    law: Literal["sts"] = "sts"
    mode: Literal["position", "wheel", "pwm", "step"] = "position"
    kp: NonNegativeFloat = Field(description="raw P Coefficient (21) register value")
    error_gain: PositiveFloat = Field(description="duty per (P unit · rad)")
    ki: NonNegativeFloat = Field(0.0, description="position I [duty/(rad·s)]")
    kd: NonNegativeFloat = Field(0.0, description="position D [duty·s/rad]")
    kvp: NonNegativeFloat = Field(0.0, description="wheel-mode velocity P [duty·s/rad]")
    kvi: NonNegativeFloat = Field(0.0, description="wheel-mode velocity I [duty/rad]")
    max_velocity: float = Field(float("inf"), ge=0.0, allow_inf_nan=True,
                                description="setpoint speed limit [rad/s]; 0 holds it, inf = none")
    max_acceleration: NonNegativeFloat = Field(0.0, description="setpoint acceleration limit [rad/s²]; 0 = none")
    dead_band_pos: NonNegativeFloat = Field(0.0, description="no drive for a position error in [0, this] [rad]")
    dead_band_neg: NonNegativeFloat = Field(0.0, description="no drive for a position error in [−this, 0] [rad]")
    max_duty: float = Field(1.0, gt=0.0, le=1.0, description="duty clamp (Torque Limit × full output)")
    supply_v: PositiveFloat = Field(description="supply voltage vin [V]")

    def kernel_params(self) -> dict[str, float]:
        return dict(law=LAWS["sts"], sts_mode=STS_MODES[self.mode], sts_p=self.kp, sts_error_gain=self.error_gain,
                    sts_ki=self.ki, sts_kd=self.kd, sts_kvp=self.kvp, sts_kvi=self.kvi, sts_speed=self.max_velocity,
                    sts_acc=self.max_acceleration, sts_dead_pos=self.dead_band_pos, sts_dead_neg=self.dead_band_neg,
                    max_duty=self.max_duty, supply_v=self.supply_v)


class ErobPdLaw(Strict):
    """bam's eRob host PD in amps: i = kp·e − damping·√kp·ω, ±max_amps, supply band (bam/erob/actuator.py
    `ErobActuator.compute_control`, `compute_torque`)."""

    law: Literal["erob_pd"] = "erob_pd"
    kp: NonNegativeFloat = Field(description="[A/rad]")
    damping: NonNegativeFloat = Field(description="D factor: derivative gain damping·√kp [A·s/rad]")
    max_amps: PositiveFloat = 12.0
    supply_v: PositiveFloat = Field(48.0, description="bus voltage of the feasibility band [V]")

    def kernel_params(self) -> dict[str, float]:
        return dict(law=LAWS["erob_pd"], pd_kp=self.kp, pd_damping=self.damping,
                    max_amps=self.max_amps, supply_v=self.supply_v)


class CurrentLaw(Strict):
    """u is the armature current [A]; with a supply voltage it is limited to what the bus can drive."""

    law: Literal["current"] = "current"
    supply_v: NonNegativeFloat = Field(0.0, description="[V]; 0 = ideal current source")

    def kernel_params(self) -> dict[str, float]:
        return dict(law=LAWS["current"], supply_v=self.supply_v)


class TorqueLaw(Strict):
    """u is the output torque [N·m] of an ideal torque source."""

    law: Literal["torque"] = "torque"

    def kernel_params(self) -> dict[str, float]:
        return dict(law=LAWS["torque"])


class DcmotorLaw(Strict):
    """The motor's own `<dcmotor>` controller layer (`input`, `controller`, `ctrlrange`)."""

    law: Literal["dcmotor"] = "dcmotor"
    supply_v: NonNegativeFloat = Field(0.0, description="[V]; 0 = ideal voltage source")

    def kernel_params(self) -> dict[str, float]:
        return dict(supply_v=self.supply_v)


FirmwareLaw = Annotated[DynamixelPwmLaw | StsPwmLaw | StsLaw | ErobPdLaw | CurrentLaw | TorqueLaw | DcmotorLaw,
                        Field(discriminator="law")]

_ADAPTER: TypeAdapter[FirmwareLaw] = TypeAdapter(FirmwareLaw)


def parse_firmware(data: dict, where: str = "firmware") -> FirmwareLaw:
    """Validate a firmware table (`law = …` plus that law's keys); errors name the key."""
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise ConfigError(describe(exc, where)) from None
