"""An actuator ready for the kernel: motor constants + firmware law + friction description."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hil.kernel import default_params
from hil.params.bam import BamParams
from hil.params.dcmotor import MotorConstants
from hil.params.firmware import DcmotorLaw, FirmwareLaw


@dataclass(frozen=True)
class ActuatorSpec:
    """Everything the kernel needs to simulate one actuator, independent of its load."""

    name: str
    motor: MotorConstants
    firmware: FirmwareLaw
    friction: BamParams | None = None
    encoder_counts: float = 0.0
    temp_limit_c: float = 0.0  # overheating shutdown above this winding temperature [°C]; 0 = none

    def with_bam(self, bam: BamParams) -> ActuatorSpec:
        """The same actuator with bam's identified constants and friction budget.

        bam models the servo at its output shaft with a quasi-static motor: kt, R, armature,
        gear 1, and its friction budget replaces every other friction description (damping, LuGre). What
        the set holds beyond bam (`BamParams`: friction temperature coefficient, rising static friction,
        thermal constants) replaces the motor's where given.
        """
        extra = _beyond_bam(bam)
        if "friction_tempcoef" in bam.model_fields_set:
            extra["friction_tempcoef"] = bam.friction_tempcoef
        motor = replace(self.motor, kt=bam.kt, resistance=bam.R, armature=bam.armature, gear=1.0,
                        efficiency=1.0, damping=(0.0, 0.0, 0.0), lugre=(0.0,) * 5, **extra)
        return replace(self, motor=motor, friction=bam)

    def bam_only(self) -> ActuatorSpec:
        """Exactly bam's simulator: no inductance, thermal state, saturation, cogging or quantization.

        `replay` uses this so that its MAE is comparable with bam's own `bam.mae`. A bam set of `servo-hil
        identify` that fitted beyond bam keeps what it fitted with: the rising static friction, and with its
        `thermal_r` the winding's thermal model (R(T), the friction temperature coefficient).
        """
        m, f = self.motor, self.friction
        extra = _beyond_bam(f) if f is not None else {}
        if "thermal_r" in extra:   # the thermal model: R(T) and the friction's coefficient need it
            extra |= {"tempcoef": m.tempcoef, "reftemp": m.reftemp, "friction_tempcoef": f.friction_tempcoef}
        motor = MotorConstants(resistance=m.resistance, kt=m.kt, gear=m.gear,
                               armature=m.armature, efficiency=m.efficiency, damping=m.damping,
                               lugre=m.lugre, input=m.input, controller=m.controller, ctrlrange=m.ctrlrange, **extra)
        return replace(self, motor=motor, encoder_counts=0.0, temp_limit_c=0.0)

    def kernel_params(self) -> dict:
        """The kernel parameter dict (load, integrator and faults are added by the rig)."""
        p = default_params()
        p.update(self.motor.kernel_params())
        if isinstance(self.firmware, DcmotorLaw):
            p.update(self.motor.controller_params())
        p.update(self.firmware.kernel_params())
        if self.friction is not None:
            p.update(self.friction.friction_params())
        p["encoder_counts"] = self.encoder_counts
        if self.motor.thermal_r > 0:
            p["temp_limit"] = self.temp_limit_c
        return p


def _beyond_bam(bam: BamParams) -> dict:
    """The MotorConstants fields of what a set of `servo-hil identify` holds beyond bam (`BamParams`): the rising
    static friction and the thermal model, where the set has them."""
    out: dict = {}
    if bam.stiction_rise > 0:
        out["dwell_stiction"] = (bam.stiction_rise, bam.stiction_time)
    if bam.thermal_r > 0:
        out |= {"thermal_r": bam.thermal_r, "thermal_c": bam.thermal_c, "thermal2": (bam.thermal_r2, bam.thermal_c2)}
    return out
