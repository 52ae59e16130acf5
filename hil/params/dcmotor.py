"""DC motor parameters with MuJoCo's `<dcmotor>` attribute names and value order, resolved to SI constants.

`resolve()` turns any parameterization of the public models (MuJoCo DC motor model §3 Table 19; Simscape DC Motor
block reference, Parameters > Electrical Torque) into `MotorConstants`. The attributes, and where our `kt` departs
from MuJoCo's `motorconst`: docs/configuration.md, Offline rig.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal

from annotated_types import Len
from pydantic import Field, NonNegativeFloat, PositiveFloat, model_validator

from hil.params.config_file import Strict

RPM = 2.0 * math.pi / 60.0  # rad/s per rpm


def _pad(values: list[float] | None, n: int) -> list[float]:
    """MuJoCo reads a short value list with the missing trailing values as 0."""
    values = list(values or [])
    return values + [0.0] * (n - len(values))


class DCMotor(Strict):
    """`<dcmotor>` attributes (MuJoCo XML reference, `<actuator><dcmotor>`) plus the parameterizations MuJoCo lacks.

    Constants are motor-side: the output angle θ becomes g·θ at the motor.
    """

    resistance: PositiveFloat | None = Field(None, description="R [ohm] at reftemp")
    kt: PositiveFloat | None = Field(
        None, description="torque constant kt [N·m/A] = back-EMF constant [V·s/rad] (MuJoCo's motorconst)")
    nominal: Annotated[list[NonNegativeFloat], Len(1, 3)] | None = Field(
        None, description="voltage [V], stall torque [N·m], no-load speed [rad/s]")
    inductance: Annotated[list[NonNegativeFloat], Len(1, 2)] | None = Field(
        None, description="L [H], electrical time constant t_e [s] (L wins)")
    thermal: Annotated[list[float], Len(1, 6)] | None = Field(
        None, description="R_T [K/W], C [J/K], τ_T [s], α [1/K], T0 [°C], Ta [°C]")
    saturation: Annotated[list[NonNegativeFloat], Len(1, 3)] | None = Field(
        None, description="τmax [N·m], imax [A], di/dt max [A/s]")
    cogging: Annotated[list[float], Len(1, 3)] | None = Field(
        None, description="amplitude [N·m], periodicity Np, phase [rad]")
    lugre: Annotated[list[NonNegativeFloat], Len(1, 5)] | None = Field(
        None, description="σ0 [N·m/rad], σ1 [N·m·s/rad], τc [N·m], τs [N·m], ωs [rad/s]")
    damping: Annotated[list[NonNegativeFloat], Len(1, 3)] | None = Field(
        None, description="B1 [N·m·s/rad], B2 [N·m·s²/rad²], B3 [N·m·s³/rad³]")
    armature: NonNegativeFloat = Field(0.0, description="rotor inertia [kg·m²], reflected ×gear²")
    gear: PositiveFloat = Field(1.0, description="gear ratio g (output → motor)")
    input: Literal["voltage", "position", "velocity"] = "voltage"
    controller: Annotated[list[NonNegativeFloat], Len(1, 6)] | None = Field(
        None, description="kp, ki, kd [V per unit], slew [u/s], Imax, Vmax [V]")
    ctrlrange: Annotated[list[float], Len(2, 2)] | None = None
    # -- beyond MuJoCo
    efficiency: float = Field(1.0, gt=0.0, le=1.0, description="gearbox efficiency η (K_eff = ηK)")
    derating: Annotated[list[float], Len(4, 4)] | None = Field(
        None, description="thermal current derating: i_rated [A], i_safe [A], T1 [°C], T2 [°C]")
    rated: Annotated[list[PositiveFloat], Len(4, 4)] | None = Field(
        None, description="by rated load and speed: voltage [V], rated power [W], rated speed [rad/s], "
                          "no-load speed [rad/s]")
    no_load_current: Annotated[list[PositiveFloat], Len(2, 2)] | None = Field(
        None, description="rotor damping from no-load current: i0 [A] measured at voltage [V]")
    kt_mnm_per_a: PositiveFloat | None = Field(None, description="datasheet torque constant [mN·m/A]")
    kv_rpm_per_v: PositiveFloat | None = Field(None, description="datasheet speed constant [rpm/V]")
    peak: Annotated[list[NonNegativeFloat], Len(2, 2)] | None = Field(
        None, description="peak current [A] above saturation's continuous imax, for how long [s] (i²t budget)")
    thermal2: Annotated[list[PositiveFloat], Len(2, 2)] | None = Field(
        None, description="R_th2 housing→ambient [K/W], housing C [J/K]; thermal's R_T is then R_th1")
    friction_tempcoef: float = Field(
        0.0, description="α_f [1/K]: the friction budget × (1 + α_f·(T − T0)), T the winding temperature")
    iron_loss: NonNegativeFloat = Field(0.0, description="K_fe [W·s²/rad²]: iron loss K_fe·ω² heats the winding")
    flux_tempcoef: float = Field(0.0, le=0.0, description="α_m [1/K] of kt(T) = kt0(1 + α_m(T − T0)), magnets weaken")
    current_limiter: bool = Field(
        False, description="saturation and derating limit the current (a servo's limiter), not only the "
                           "torque (MuJoCo's clamp)")
    backlash: NonNegativeFloat = Field(
        0.0, description="gear backlash [rad, output side]: the dead band the motor side crosses on a reversal "
                         "before it drives the output; needs armature (the motor side's inertia)")
    dwell_stiction: Annotated[list[PositiveFloat], Len(2, 2)] | None = Field(
        None, description="rising static friction: Fs∞ − Fs0 [N·m] at the output, γ [s]; after t held still the "
                          "breakaway friction grows by (Fs∞ − Fs0)·t/(t + γ)")

    @model_validator(mode="after")
    def _consistent(self) -> DCMotor:
        if self.kt is not None and (self.kt_mnm_per_a or self.kv_rpm_per_v):
            raise ValueError("give kt or kt_mnm_per_a/kv_rpm_per_v, not both")
        ways = [n for n in ("nominal", "rated") if getattr(self, n) is not None]
        if len(ways) > 1:
            raise ValueError("give nominal or rated, not both")
        if self.no_load_current and self.damping:
            raise ValueError("give damping or no_load_current, not both")
        if self.thermal is not None:
            t = _pad(self.thermal, 6)
            if sum(v > 0 for v in t[:3]) < 2:
                raise ValueError("thermal needs two of R_T, C, τ_T")
            if min(t[:3]) < 0:
                raise ValueError("thermal: R_T, C and τ_T must be non-negative")
        if self.derating is not None:
            ir, isafe, t1, t2 = self.derating
            if not (0 < isafe <= ir and t1 < t2):
                raise ValueError("derating needs 0 < i_safe <= i_rated and T1 < T2")
        if self.thermal2 is not None and self.thermal is None:
            raise ValueError("thermal2 needs thermal (its R_T is the winding→housing R_th1)")
        if self.peak is not None:
            ipk, tpk = self.peak
            cont = _pad(self.saturation, 3)[1]
            if cont <= 0:
                raise ValueError("peak needs saturation's continuous current imax > 0")
            if ipk <= cont or tpk <= 0:
                raise ValueError("peak: the peak current must exceed saturation's imax and its time be > 0 s")
        if self.backlash > 0 and self.armature <= 0:
            raise ValueError("backlash needs armature > 0: the motor side crosses the band with its own inertia")
        if self.ctrlrange is not None and self.ctrlrange[0] >= self.ctrlrange[1]:
            raise ValueError("ctrlrange needs lower < upper")
        return self

    def resolve(self) -> MotorConstants:
        """SI constants the kernel uses; raises ValueError when R or kt cannot be determined."""
        b = _pad(self.damping, 3)
        kt_sheet = ke_sheet = 0.0
        if self.kt_mnm_per_a:
            kt_sheet = self.kt_mnm_per_a / 1000.0
        if self.kv_rpm_per_v:
            ke_sheet = 1.0 / (self.kv_rpm_per_v * RPM)  # Table 19: K_v = 1/K_e
        # Table 19: one constant k_t = √(K_t·K_e) when the datasheet gives both
        kt = self.kt or (math.sqrt(kt_sheet * ke_sheet) if kt_sheet > 0 and ke_sheet > 0 else max(kt_sheet, ke_sheet))
        R = self.resistance or 0.0
        joint = False  # `rated` and `no_load_current` solved together for kt, R and B
        if self.nominal is not None:
            V, tau0, w0 = _pad(self.nominal, 3)
            if self.no_load_current is not None and kt == 0:
                # Simscape "by no-load current" with stall + no-load speed: c = kt/R = τ0/V is known
                # and the no-load point at V_m gives kt = c·V·V_m / (V·i0 + c·ω0·V_m).
                i0, vm = self.no_load_current
                c = tau0 / V
                kt = c * V * vm / (V * i0 + c * w0 * vm)
            elif kt == 0 and w0 > 0:
                kt = V / w0
                if b[0] > 0:  # MuJoCo's damping correction of kt
                    if R > 0:
                        # no-load balance (kt/R)(V − kt·ω0) = B·ω0, i.e. kt²·ω0 − kt·V + R·B·ω0 = 0
                        # (as MuJoCo 3.11 compiles it)
                        disc = V * V - 4.0 * w0 * R * b[0] * w0
                        if disc < 0:
                            raise ValueError("nominal: damping too large for this resistance")
                        kt = (V + math.sqrt(disc)) / (2.0 * w0)
                    else:
                        kt = V / w0 - V * b[0] / tau0
            if R == 0 and tau0 > 0 and kt > 0:
                R = kt * V / tau0
        if self.rated is not None:
            V, p_rated, w_r, w0 = self.rated
            tau_r = p_rated / w_r
            if w_r >= w0:
                raise ValueError("rated: rated speed must be below the no-load speed")
            # τ(ω) = c(V − kt·ω) − B·ω through (ω0, 0) and (ω_r, τ_r): c·kt + B = τ_r/(ω0 − ω_r) = s and
            # c·V = s·ω0, whatever B is.
            s = tau_r / (w0 - w_r)
            c = s * w0 / V
            joint = self.no_load_current is not None and kt == 0 and R == 0
            if joint:
                # Simscape's k_t·i_noload = λ·ω_noload solved with the line: at V_m the no-load speed is
                # ω_nl = c·V_m/s = ω0·V_m/V, so B = kt·i0/ω_nl and c·kt + kt·i0/ω_nl = s.
                i0, vm = self.no_load_current
                w_nl = w0 * vm / V
                kt = s / (c + i0 / w_nl)
                R = kt / c
                b[0] = kt * i0 / w_nl
            c_kt = s - b[0]
            if kt == 0:
                kt = c_kt / c
            if R == 0:
                R = kt / c
        if R <= 0:
            raise ValueError("resistance: R must be positive (give resistance, nominal or rated)")
        if kt <= 0:
            raise ValueError("kt: the torque constant must be positive (give kt, nominal or rated)")
        if self.no_load_current is not None and self.nominal is None and not joint:
            i0, vm = self.no_load_current
            w_nl = (vm - i0 * R) / kt
            if w_nl <= 0:
                raise ValueError("no_load_current: i0·R exceeds the voltage")
            b[0] = kt * i0 / w_nl  # Simscape: kt·i_noload = λ·ω_noload
        elif self.no_load_current is not None and self.nominal is not None:
            V, tau0, w0 = _pad(self.nominal, 3)
            b[0] = (tau0 / V) * (V - kt * w0) / w0
        L, te = _pad(self.inductance, 2)
        if L > 0:
            te = L / R
        tau_max, imax, didt = _pad(self.saturation, 3)
        rt, cth, taut, alpha, t0, ta = _pad(self.thermal, 6)
        if self.thermal is not None:
            # MuJoCo 3.11 keeps R_T and C when both are given and then ignores τ_T.
            if rt == 0:
                rt = taut / cth
            elif cth == 0:
                cth = taut / rt
        kp, ki, kd, slew, imax_i, vmax = _pad(self.controller, 6)
        return MotorConstants(
            resistance=R, kt=kt, gear=self.gear, armature=self.armature,
            efficiency=self.efficiency, te=te, didt_max=didt, tau_max=tau_max, imax=imax,
            iron_loss=self.iron_loss, flux_tempcoef=self.flux_tempcoef, friction_tempcoef=self.friction_tempcoef,
            thermal2=tuple(self.thermal2) if self.thermal2 else (0.0, 0.0),
            current_limiter=self.current_limiter, peak=tuple(self.peak) if self.peak else (0.0, 0.0),
            backlash=self.backlash, dwell_stiction=tuple(self.dwell_stiction) if self.dwell_stiction else (0.0, 0.0),
            thermal_r=rt, thermal_c=cth, tempcoef=alpha, reftemp=t0, ambient=ta,
            derating=tuple(self.derating) if self.derating else None,
            damping=(b[0], b[1], b[2]), cogging=tuple(_pad(self.cogging, 3)),
            lugre=tuple(_pad(self.lugre, 5)),
            input=self.input, controller=(kp, ki, kd, slew, imax_i, vmax),
            ctrlrange=tuple(self.ctrlrange) if self.ctrlrange else None,
        )


@dataclass(frozen=True)
class MotorConstants:
    """Resolved motor constants, SI, motor side (see core.pxd for each one's role)."""

    resistance: float
    kt: float  # torque constant = back-EMF constant [N·m/A] = [V·s/rad]
    gear: float = 1.0
    armature: float = 0.0
    efficiency: float = 1.0
    te: float = 0.0
    didt_max: float = 0.0
    tau_max: float = 0.0  # given electrical torque limit [N·m]; 0 = from imax (or none)
    imax: float = 0.0  # current limit [A]; the torque limit is then kt·imax
    iron_loss: float = 0.0  # K_fe [W·s²/rad²]
    friction_tempcoef: float = 0.0  # α_f [1/K] of the friction budget
    thermal2: tuple[float, float] = (0.0, 0.0)  # R_th2 [K/W], housing C [J/K]; 0 = one node
    flux_tempcoef: float = 0.0  # α_m [1/K]
    current_limiter: bool = False  # the limits bound the current, not only the torque
    peak: tuple[float, float] = (0.0, 0.0)  # peak current [A] and its time [s]; 0 = none
    backlash: float = 0.0  # gear backlash [rad, output side]; 0 = none
    dwell_stiction: tuple[float, float] = (0.0, 0.0)  # rising static friction Fs∞ − Fs0 [N·m], γ [s]; 0 = none
    thermal_r: float = 0.0
    thermal_c: float = 0.0
    tempcoef: float = 0.0
    reftemp: float = 0.0
    ambient: float = 0.0
    derating: tuple[float, float, float, float] | None = None
    damping: tuple[float, float, float] = (0.0, 0.0, 0.0)
    cogging: tuple[float, float, float] = (0.0, 0.0, 0.0)
    lugre: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)
    input: str = "voltage"
    controller: tuple[float, float, float, float, float, float] = (0.0,) * 6
    ctrlrange: tuple[float, float] | None = None

    @property
    def torque_limit(self) -> float:
        """Electrical torque clamp, motor side [N·m]: τmax as given, else kt·imax (MuJoCo), 0 = none."""
        return self.tau_max or self.kt * self.imax

    def kernel_params(self) -> dict[str, float]:
        """The motor part of the kernel's parameter dict."""
        out = dict(
            resistance=self.resistance, kt=self.kt, gear=self.gear,
            armature=self.armature, efficiency=self.efficiency, te=self.te, didt_max=self.didt_max,
            tau_max=self.torque_limit, current_limiter=int(self.current_limiter),
            peak_current=self.peak[0], peak_time=self.peak[1], iron_loss=self.iron_loss,
            backlash=self.backlash, stiction_rise=self.dwell_stiction[0], stiction_time=self.dwell_stiction[1],
            flux_tempcoef=self.flux_tempcoef, friction_tempcoef=self.friction_tempcoef,
            thermal_r2=self.thermal2[0], thermal_c2=self.thermal2[1],
            thermal_r=self.thermal_r, thermal_c=self.thermal_c,
            tempcoef=self.tempcoef, reftemp=self.reftemp, ambient=self.ambient,
            damping_b1=self.damping[0], damping_b2=self.damping[1], damping_b3=self.damping[2],
            cog_amplitude=self.cogging[0], cog_poles=self.cogging[1], cog_phase=self.cogging[2],
            lugre_s0=self.lugre[0], lugre_s1=self.lugre[1], lugre_tc=self.lugre[2],
            lugre_ts=self.lugre[3], lugre_ws=self.lugre[4],
        )
        if self.derating:
            out.update(derate_i_rated=self.derating[0], derate_i_safe=self.derating[1],
                       derate_t1=self.derating[2], derate_t2=self.derating[3])
        return out

    def controller_params(self) -> dict[str, float]:
        """The dcmotor controller layer (v1 semantics) as kernel parameters."""
        from hil.kernel import LAWS

        kp, ki, kd, slew, imax, vmax = self.controller
        out = dict(law=LAWS[self.input], kp=kp, ki=ki, kd=kd, slew=slew, imax=imax, vmax=vmax)
        if self.ctrlrange:
            out.update(ctrl_limited=1, ctrl_lo=self.ctrlrange[0], ctrl_hi=self.ctrlrange[1])
        return out

    def derived(self, voltage: float, inertia: float | None = None) -> dict[str, float]:
        """Datasheet quantities of the MuJoCo DC motor model §3 Table 19 at `voltage`, at the output shaft.

        Stall torque kt·v/R, no-load speed v·kt/(kt² + R·B), torque-speed gradient −R/kt², mechanical
        time constant t_m = R·J/kt² (J = armature, or `inertia` at the output), t_e, nominal torque
        kt·imax, stall current v/R.
        """
        g, kt, R = self.gear, self.kt, self.resistance
        B = self.damping[0]
        J = inertia if inertia is not None else self.armature * g * g
        keff = self.efficiency * kt
        return {
            "stall_torque_nm": g * keff * voltage / R,
            "stall_current_a": voltage / R,
            # the kernel applies η to the electrical torque, drag acts after it: η·kt(V − kt·ω)/R = B·ω
            "no_load_speed_rad_s": voltage * keff / (keff * kt + R * B) / g,
            "gradient_rad_s_per_nm": -R / (kt * kt) / (g * g),
            "mechanical_time_constant_s": R * J / (g * g * kt * kt) if J > 0 else float("nan"),
            "electrical_time_constant_s": self.te,
            "nominal_torque_nm": g * self.torque_limit * self.efficiency if self.torque_limit else float("nan"),
            "kt_nm_per_a": kt,
            "resistance_ohm": R,
        }
