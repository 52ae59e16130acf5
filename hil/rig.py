"""Rig files: an actuator, its load, its sensor, its faults and the simulation settings, as TOML.

The offline rig (`servo-hil simulate`) has one actuator:

    [actuator]   catalog = "mx64" (+ model = "m6" | params = "bam.json") | mjcf = "f.xml" (+ name)
                 | inline <dcmotor> attributes (resistance, motorconst, nominal, …);
                 optional firmware = { law = …, … } overrides the firmware law
    [load]       inertia [kg·m²] about the axis excluding the pendulum point mass; mass [kg],
                 length [m], arm_mass [kg], gravity [m/s²]
    [encoder]    counts_per_rev, noise_rad, seed
    [faults]     open_circuit_fraction, open_circuit_time_s, open_circuit_current_a,
                 open_circuit_duration_s, supply_v
    [initial]    theta [rad], omega [rad/s], temperature_c
    [sim]        dt [s], integrator = "euler" | "bam"
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, ValidationError, model_validator

from hil.kernel import INTEGRATORS, LAWS, Kernel
from hil.params import catalog
from hil.params.actuator import ActuatorSpec
from hil.params.bam import load_bam_params
from hil.params.config_file import ConfigError, Strict, describe, read_toml, validate
from hil.params.dcmotor import DCMotor
from hil.params.firmware import DcmotorLaw, parse_firmware
from hil.params.mjcf import load_dcmotor

STANDARD_GRAVITY = 9.80665  # m/s², also bam's value


class ActuatorConfig(DCMotor):
    """Where the actuator comes from: the catalog, an MJCF file, or inline `<dcmotor>` attributes."""

    catalog: str | None = None
    model: Literal["m1", "m2", "m3", "m4", "m5", "m6"] | None = None
    params: str | None = Field(None, description="bam parameter JSON file (instead of model)")
    mjcf: str | None = None
    name: str | None = Field(None, description="<dcmotor> name in the MJCF file")
    firmware: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ActuatorConfig:
        inline = any(getattr(self, k) is not None for k in ("resistance", "motorconst", "nominal", "rated",
                                                             "kt_mnm_per_a", "kv_rpm_per_v"))
        sources = [n for n, on in (("catalog", self.catalog), ("mjcf", self.mjcf), ("inline attributes", inline))
                   if on]
        if len(sources) != 1:
            raise ValueError("give exactly one of catalog, mjcf or inline <dcmotor> attributes"
                             + (f" (found {', '.join(sources)})" if sources else ""))
        if self.model and self.params:
            raise ValueError("give model or params, not both")
        if (self.model or self.params) and not self.catalog:
            raise ValueError("model / params select a bam set of a catalog actuator: add catalog = ...")
        return self

    def spec(self, base: Path) -> ActuatorSpec:
        """Resolve to an ActuatorSpec; relative file names are relative to `base`."""
        if self.catalog:
            entry = catalog.entry(self.catalog)
            spec = entry.actuator(self.model, self.firmware)
            if self.params:
                spec = spec.with_bam(load_bam_params(base / self.params))
            return spec
        if self.mjcf:
            motor = load_dcmotor(base / self.mjcf, self.name)
        else:
            fields = {k: v for k, v in self.model_dump(exclude_none=True).items() if k in DCMotor.model_fields}
            motor = DCMotor.model_validate(fields)
        try:
            constants = motor.resolve()
        except ValueError as exc:
            raise ConfigError(f"actuator: {exc}") from None
        law = DcmotorLaw()
        if self.firmware:
            law = parse_firmware(self.firmware, "actuator.firmware")
        return ActuatorSpec(name=self.name or "motor", motor=constants, firmware=law)


class LoadConfig(Strict):
    inertia: NonNegativeFloat = Field(0.0, description="[kg·m²] about the axis, pendulum mass excluded")
    mass: NonNegativeFloat = Field(0.0, description="pendulum point mass [kg]")
    length: NonNegativeFloat = Field(0.0, description="[m]")
    arm_mass: NonNegativeFloat = Field(0.0, description="uniform arm [kg]")
    gravity: NonNegativeFloat = STANDARD_GRAVITY

    def kernel_params(self) -> dict[str, float]:
        return dict(load_inertia=self.inertia, mass=self.mass, length=self.length, arm_mass=self.arm_mass,
                    gravity=self.gravity)


class EncoderConfig(Strict):
    counts_per_rev: NonNegativeFloat | None = Field(None, description="default: the catalog's encoder")
    noise_rad: NonNegativeFloat = 0.0
    seed: int = Field(1, ge=1, lt=2**64)


class FaultConfig(Strict):
    open_circuit_fraction: float = Field(0.0, ge=0.0, le=1.0)
    open_circuit_time_s: NonNegativeFloat = math.inf
    open_circuit_current_a: NonNegativeFloat = math.inf
    open_circuit_duration_s: NonNegativeFloat = 0.0
    supply_v: NonNegativeFloat | None = Field(None, description="supply override (sag) [V]")


class InitialConfig(Strict):
    theta: float = 0.0
    omega: float = 0.0
    temperature_c: float | None = None


class SimConfig(Strict):
    dt: PositiveFloat = 0.001
    integrator: Literal["euler", "bam"] = "euler"


class JointSetup(Strict):
    """What surrounds one actuator in a rig: its load, encoder, faults at start and initial state."""

    load: LoadConfig = LoadConfig()
    encoder: EncoderConfig = EncoderConfig()
    faults: FaultConfig = FaultConfig()
    initial: InitialConfig = InitialConfig()


class OfflineRig(JointSetup):
    """One actuator and its load, for `servo-hil simulate`."""

    actuator: ActuatorConfig
    sim: SimConfig = SimConfig()


def kernel_params(spec: ActuatorSpec, load: LoadConfig, encoder: EncoderConfig, faults: FaultConfig,
                  integrator: str) -> dict:
    """The full kernel parameter dict of one actuator on its load."""
    p = spec.kernel_params()
    p.update(load.kernel_params())
    p["integrator"] = INTEGRATORS[integrator]
    if encoder.counts_per_rev is not None:
        p["encoder_counts"] = encoder.counts_per_rev
    p.update(encoder_noise=encoder.noise_rad, seed=encoder.seed, oc_fraction=faults.open_circuit_fraction,
             oc_time=faults.open_circuit_time_s, oc_current=faults.open_circuit_current_a,
             oc_duration=faults.open_circuit_duration_s)
    if faults.supply_v is not None:
        p["supply_override"] = faults.supply_v
    if p["law"] == LAWS["dxl_pwm"] and not p["supply_v"] > 0:
        raise ConfigError("actuator.firmware.supply_v: must be > 0 for the dxl_pwm law")
    return p


def load_offline_rig(path: str | Path, integrator: str | None = None) -> tuple[OfflineRig, Kernel, ActuatorSpec]:
    """Read an offline rig TOML and build a one-actuator kernel in its initial state.

    `integrator` ("euler" | "bam") overrides the rig's `[sim] integrator`.
    """
    path = Path(path)
    try:
        rig = validate(OfflineRig, read_toml(path), str(path))
        spec = rig.actuator.spec(path.parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}" if not str(exc).startswith(str(path)) else str(exc)) from None
    except ValidationError as exc:
        raise ConfigError(describe(exc, str(path))) from None
    if integrator is not None:
        if integrator not in INTEGRATORS:
            raise ConfigError(f"integrator: unknown {integrator!r} (known: {', '.join(INTEGRATORS)})")
        rig = rig.model_copy(update={"sim": rig.sim.model_copy(update={"integrator": integrator})})
    kernel = Kernel(1, rig.sim.dt)
    kernel.set_params(0, kernel_params(spec, rig.load, rig.encoder, rig.faults, rig.sim.integrator))
    kernel.set_state(0, theta=rig.initial.theta, omega=rig.initial.omega,
                     temperature=rig.initial.temperature_c)
    return rig, kernel, spec
