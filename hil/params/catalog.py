"""The actuator catalog: `config/actuators/<name>.toml`, one file per servo model.

Each file holds nameplate figures (`[datasheet]`), the motor in `<dcmotor>` terms (`[motor]`),
the firmware law (`[firmware]`), and bam's identified sets (`[models.m1]` … `[models.m6]`, bam's
own key names). Every section carries a `source`; `sources` names the source of single keys
where they differ.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveFloat, field_validator

from hil.params.actuator import ActuatorSpec
from hil.params.bam import BamParams
from hil.params.config_file import ConfigError, Strict, read_toml, validate
from hil.params.dcmotor import DCMotor
from hil.params.firmware import FirmwareLaw, parse_firmware


def config_dir() -> Path:
    """`config/` of the checkout, or $SERVO_HIL_CONFIG."""
    env = os.environ.get("SERVO_HIL_CONFIG")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "config"


class Sourced(Strict):
    source: str = Field(min_length=3, description="where these numbers come from")
    sources: dict[str, str] = Field(default_factory=dict, description="per-key sources, where different")


class Datasheet(Sourced):
    """Nameplate figures, kept for cross-checks (`servo-hil actuator show`)."""

    voltage_v: PositiveFloat | None = None
    stall_torque_nm: PositiveFloat | None = None
    stall_current_a: PositiveFloat | None = None
    no_load_speed_rpm: PositiveFloat | None = None
    rated_torque_nm: PositiveFloat | None = None
    rated_current_a: PositiveFloat | None = None
    peak_torque_nm: PositiveFloat | None = None
    max_speed_rpm: PositiveFloat | None = None
    gear_ratio: PositiveFloat | None = None
    encoder_counts: PositiveFloat | None = None
    rotor_inertia_kgm2: PositiveFloat | None = None
    temp_limit_c: float | None = None   # the firmware's temperature limit [°C]: the kernel's temp_limit
    mass_kg: PositiveFloat | None = None


class CatalogMotor(DCMotor, Sourced):
    """`<dcmotor>` attributes plus their sources."""


class CatalogModel(BamParams):
    source: str = Field(min_length=3)


class CatalogEntry(Strict):
    name: str
    title: str
    family: Literal["dynamixel", "feetech", "erob", "generic"]
    model_number: int | None = None
    datasheet: Datasheet
    motor: CatalogMotor
    firmware: dict[str, Any]
    models: dict[Literal["m1", "m2", "m3", "m4", "m5", "m6"], CatalogModel] = Field(default_factory=dict)

    @field_validator("firmware")
    @classmethod
    def _firmware(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("source"), str):
            raise ValueError("firmware.source is required")
        parse_firmware({k: v for k, v in value.items() if k not in ("source", "sources")})
        return value

    def firmware_law(self, overrides: dict[str, Any] | None = None, where: str = "firmware") -> FirmwareLaw:
        """The firmware law with `overrides` (e.g. {"kp": 8, "supply_v": 15}) applied."""
        data = {k: v for k, v in self.firmware.items() if k not in ("source", "sources")}
        data.update(overrides or {})
        return parse_firmware(data, where)

    def actuator(self, model: str | None = None, firmware: dict[str, Any] | None = None,
                 motor: dict[str, Any] | None = None) -> ActuatorSpec:
        """This catalog entry as an ActuatorSpec, optionally with bam's identified set `model`; `motor` holds
        `<dcmotor>` attributes that replace or add to the entry's (a rig's `peak = [...]` on a catalog servo)."""
        merged = {k: v for k, v in self.motor.model_dump(exclude_none=True).items()
                  if k not in ("source", "sources")}
        merged.update(motor or {})
        described = validate(DCMotor, merged, f"catalog {self.name}")
        try:
            constants = described.resolve()
        except ValueError as exc:
            raise ConfigError(f"{self.name}: {exc}") from None
        spec = ActuatorSpec(
            name=self.name,
            motor=constants,
            firmware=self.firmware_law(firmware),
            encoder_counts=self.datasheet.encoder_counts or 0.0,
            temp_limit_c=self.datasheet.temp_limit_c or 0.0,
        )
        if model is not None:
            if model not in self.models:
                known = ", ".join(sorted(self.models)) or "none"
                raise ConfigError(f"{self.name}: no identified model {model!r} (known: {known})")
            spec = spec.with_bam(BamParams.model_validate(self.models[model].model_dump(exclude={"source"})))
        return spec


def names() -> list[str]:
    """Catalog entry names, sorted."""
    return sorted(p.stem for p in (config_dir() / "actuators").glob("*.toml"))


@cache
def entry(name: str) -> CatalogEntry:
    """Load `config/actuators/<name>.toml`; unknown names list the known ones."""
    path = config_dir() / "actuators" / f"{name}.toml"
    if not path.exists():
        raise ConfigError(f"unknown actuator {name!r}; the catalog has: {', '.join(names())}")
    return validate(CatalogEntry, read_toml(path), str(path))
