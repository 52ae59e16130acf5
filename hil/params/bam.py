"""bam's identified actuator parameter sets (Rhoban/bam `params/<actuator>/mN.json`).

Key names are bam's own, so a bam JSON file loads unchanged. Meanings and the friction budget
they feed: bam/model.py `Model.compute_frictions` (friction paper §II-B, §III); `kt` [N·m/A], `R` [ohm]
and `armature` [kg·m²] are at the output shaft (bam models no gear).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, model_validator

from hil.params.config_file import ConfigError, Strict, validate

BAM_DEFAULT_R_OHM = 2.0  # bam.actuator.DCMotorActuator default, used when a file has no "R" (eRob80:100)

FRICTION_KEYS = (
    "friction_base", "friction_viscous", "friction_stribeck", "dtheta_stribeck", "alpha",
    "load_friction_base", "load_friction_stribeck", "load_friction_motor", "load_friction_external",
    "load_friction_motor_stribeck", "load_friction_external_stribeck", "load_friction_motor_quad",
    "load_friction_external_quad", "q_offset",
)


class BamParams(Strict):
    """One bam parameter file: motor constants plus the friction model mN's coefficients."""

    model: Literal["m1", "m2", "m3", "m4", "m5", "m6"]
    actuator: str | None = None
    kt: PositiveFloat = Field(description="torque constant at the output [N·m/A]")
    R: PositiveFloat = Field(BAM_DEFAULT_R_OHM, description="resistance [ohm]; bam's default 2.0")
    armature: NonNegativeFloat = Field(description="reflected rotor inertia at the output [kg·m²]")
    friction_base: NonNegativeFloat = 0.0
    friction_viscous: NonNegativeFloat = 0.0
    friction_stribeck: NonNegativeFloat = 0.0
    dtheta_stribeck: NonNegativeFloat = 0.0
    alpha: NonNegativeFloat = 0.0
    load_friction_base: NonNegativeFloat = 0.0
    load_friction_stribeck: NonNegativeFloat = 0.0
    load_friction_motor: NonNegativeFloat = 0.0
    load_friction_external: NonNegativeFloat = 0.0
    load_friction_motor_stribeck: NonNegativeFloat = 0.0
    load_friction_external_stribeck: NonNegativeFloat = 0.0
    load_friction_motor_quad: NonNegativeFloat = 0.0
    load_friction_external_quad: NonNegativeFloat = 0.0
    q_offset: float = 0.0
    delay_steps: NonNegativeInt = Field(0, description="not bam's (bam ignores it): the goal reaches the law "
                                        "this many log steps late in offline replays [steps]")
    # Not bam's either: what `servo-hil identify` fits beyond bam, so that a replay of the file is the fit's rollout
    friction_tempcoef: float = Field(0.0, description="α_f [1/K]: the budget × (1 + α_f·(T − T0)), T the winding "
                                                      "temperature of the thermal model below")
    stiction_rise: NonNegativeFloat = Field(0.0, description="rising static friction Fs∞ − Fs0 [N·m]; 0 = none")
    stiction_time: NonNegativeFloat = Field(0.0, description="its time constant γ [s]")
    thermal_r: NonNegativeFloat = Field(0.0, description="the winding's thermal model in the rollouts, from each log's "
                                                         "first logged temperature: R_T [K/W]; 0 = none, as bam")
    thermal_c: NonNegativeFloat = Field(0.0, description="winding heat capacity [J/K]")
    thermal_r2: NonNegativeFloat = Field(0.0, description="housing→ambient R_th2 [K/W]; 0 = one node")
    thermal_c2: NonNegativeFloat = Field(0.0, description="housing heat capacity [J/K]")

    @model_validator(mode="after")
    def _pairs(self) -> BamParams:
        for a, b in (("stiction_rise", "stiction_time"), ("thermal_r", "thermal_c"), ("thermal_r2", "thermal_c2")):
            if (getattr(self, a) > 0) != (getattr(self, b) > 0):
                raise ValueError(f"{a} and {b}: give both (> 0) or neither")
        if self.thermal_r2 > 0 and not self.thermal_r > 0:
            raise ValueError("thermal_r2 needs thermal_r (the winding→housing R_th1)")
        return self

    def friction_params(self) -> dict[str, float]:
        """Kernel parameters of the friction budget (quadratic term only for M6, as bam does)."""
        out: dict[str, float] = {k: getattr(self, k) for k in FRICTION_KEYS}
        out["budget"] = 1
        out["budget_quadratic"] = int(self.model == "m6")
        return out


def load_bam_params(path: str | Path) -> BamParams:
    """Read a bam parameter JSON file (errors name the file and key)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from None
    return validate(BamParams, data, str(path))
