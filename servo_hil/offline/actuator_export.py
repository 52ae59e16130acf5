"""A catalog actuator for another simulator: MuJoCo's `<dcmotor>` (MJCF), Isaac Lab's DCMotor or an EDS.

Each target comes with the list of what it cannot represent. The mappings and their sources (MuJoCo DC motor
model Tables 9 and 19, Isaac Lab `DCMotorCfg`, CiA 306): docs/commands.md, `servo-hil actuator export`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from hil.params import catalog
from hil.params.actuator import ActuatorSpec
from hil.params.config_file import ConfigError
from hil.params.firmware import DcmotorLaw, DynamixelPwmLaw, ErobPdLaw, StsPwmLaw

# the daemon's default loop, 1 kHz (servo_hil.rig LoopConfig, SimConfig): the step the catalog's laws run at
DEFAULT_TIMESTEP_S = 0.001
# what MuJoCo's `<dcmotor>` and Isaac Lab's DCMotor both leave out, by the kernel parameter that turns it on
_BEYOND_BOTH = (
    ("friction_stribeck", "Stribeck friction (friction paper §III-A): Kcs, θ̇s, α"),
    ("load_friction_base", "load-dependent friction (friction paper §III-B/C/D): Kl, Kls, Km, Ke, Kms, Kes"),
    ("budget_quadratic", "quadratic load-dependent friction (friction paper §III-E): Kmq, Keq"),
    ("friction_tempcoef", "temperature-dependent friction α_f"),
    ("iron_loss", "iron loss K_fe·ω² in the heat balance (MuJoCo DC motor model §1.3.2)"),
    ("flux_tempcoef", "magnet flux derating kt(T) (MuJoCo DC motor model §1.3.4)"),
    ("thermal_r2", "the two-node thermal model (housing node R_th2, C2)"),
    ("peak_current", "the peak current and its i²t budget (MuJoCo DC motor model §1.1)"),
    ("current_limiter", "the servo's current limiter (the limits bound the current, not only the torque)"),
    ("derate_i_rated", "thermal current derating (MuJoCo DC motor model §1.3.5)"),
    ("encoder_counts", "the encoder's resolution (the law sees the quantized position)"),
    ("temp_limit", "the overheating shutdown above the temperature limit"),
    ("backlash", "gear backlash, the dead band between motor side and output (MuJoCo DC motor model §1.2)"),
    ("stiction_rise", "static friction rising with the time at rest (Armstrong-Hélouvry 1994)"),
)
_LOAD_FRICTION = ("load_friction_base", "load_friction_stribeck", "load_friction_motor", "load_friction_external",
                  "load_friction_motor_stribeck", "load_friction_external_stribeck")
# Isaac Lab's DCMotor is stateless (MuJoCo DC motor model §2.1): no electrical, thermal or bristle state
_BEYOND_ISAACLAB = (
    ("te", "the inductance (electrical time constant, di/dt limit)"),
    ("thermal_r", "the thermal model (winding heating, R(T))"),
    ("cog_amplitude", "cogging torque"),
    ("lugre_s0", "LuGre bristle friction"),
    ("damping_b2", "quadratic and cubic drag B2, B3"),
)


@dataclass(frozen=True)
class Exported:
    """One target's file text and what the target cannot represent (one line each)."""

    text: str
    lost: list[str]


def _g(x: float) -> str:
    """A float that reads back to the same double (MuJoCo parses it exactly)."""
    return repr(float(x))


def _on(p: dict, key: str) -> bool:
    if key == "load_friction_base":
        return any(p[k] for k in _LOAD_FRICTION)
    if key == "damping_b2":
        return bool(p["damping_b2"] or p["damping_b3"])
    return bool(p[key])


def _common_losses(spec: ActuatorSpec, p: dict) -> list[str]:
    lost = [text for key, text in _BEYOND_BOTH if _on(p, key)]
    if p["efficiency"] != 1.0:
        lost.append(f"gearbox efficiency η = {p['efficiency']:g} (folding it into kt would also scale the back-EMF)")
    fw = spec.firmware
    if isinstance(fw, DynamixelPwmLaw) and fw.max_current > 0:
        lost.append(f"the firmware current limiter |i| ≤ {fw.max_current:g} A (bam's XL330 law)")
    if spec.friction is not None:
        lost.append("bam's integrator (its parameters were identified with it; the targets integrate their own way)")
        if spec.friction.q_offset:
            lost.append(f"bam's fitted offset q_offset = {spec.friction.q_offset:.4g} rad of its bench's pendulum "
                        "angle (a load term: turn the load's body by it)")
        if spec.friction.delay_steps:
            lost.append(f"the command delay of {spec.friction.delay_steps} log steps")
    return lost


def _law_controller(spec: ActuatorSpec, p: dict, lost: list[str]) -> dict[str, str]:
    """The v1 `<dcmotor>` controller attributes of the firmware law; adds to `lost` what they miss."""
    fw, g, R, kt = spec.firmware, p["gear"], p["resistance"], p["kt"]
    m = spec.motor
    if isinstance(fw, DynamixelPwmLaw):
        dg = fw.error_gain * fw.kp
        return {"input": "position",
                "controller": f"{_g(fw.supply_v * dg / g)} 0 0 0 0 {_g(fw.supply_v * fw.max_duty)}"}
    if isinstance(fw, StsPwmLaw):
        # bam's setpoint limiter clip(goal, q_s ± v·dt) is the controller's slew limit (in gear·rad/s)
        slew = fw.max_velocity * g if math.isfinite(fw.max_velocity) else 0.0
        return {"input": "position", "controller": f"{_g(fw.supply_v * fw.error_gain * fw.kp / g)} 0 0 {_g(slew)} 0 "
                                                   f"{_g(fw.supply_v * fw.max_duty)}"}
    if isinstance(fw, ErobPdLaw):
        d = fw.damping * math.sqrt(fw.kp)
        kd = R * d - kt * g
        if kd < 0:
            lost.append(f"the PD's damping {d:g} A·s/rad below the back-EMF's kt·g/R: kd clipped to 0")
            kd = 0.0
        if p["te"] > 0:
            lost.append("the current law's instantaneous current (the export's current follows the inductance)")
        if p["thermal_r"] > 0 and p["tempcoef"] != 0:
            lost.append("the current law's independence of R(T): the exported gains hold at the reference "
                        "temperature")
        lost.append("the order of the ±max_amps and supply clips, beyond |ω| > "
                    f"{(fw.supply_v / R + fw.max_amps) * R / (kt * g):.3g} rad/s where the two bands part")
        return {"input": "position", "controller": f"{_g(R * fw.kp / g)} 0 {_g(kd / g)} 0 0 {_g(fw.supply_v)}"}
    if isinstance(fw, DcmotorLaw):
        kp, ki, kd, slew, imax, vmax = m.controller
        if fw.supply_v > 0:
            vmax = min(vmax, fw.supply_v) if vmax > 0 else fw.supply_v
        out = {"input": m.input}
        if m.input == "voltage" and vmax > 0:
            lost.append("Vmax on the torque with input=voltage (MuJoCo 3.11 clips only the current and heating)")
        if any((kp, ki, kd, slew, imax, vmax)):
            out["controller"] = " ".join(_g(x) for x in (kp, ki, kd, slew, imax, vmax))
        if m.ctrlrange:
            out["ctrlrange"] = f"{_g(m.ctrlrange[0])} {_g(m.ctrlrange[1])}"
        return out
    raise ConfigError(f"{spec.name}: firmware law {fw.law!r} has no <dcmotor> controller counterpart "
                      "(dxl_pwm, sts_pwm, erob_pd and the dcmotor's own law export)")


def mjcf(spec: ActuatorSpec, name: str, title: str = "", timestep: float = DEFAULT_TIMESTEP_S) -> Exported:
    """`spec` as a one-hinge MJCF model: a default class `name` with the `<dcmotor>` and the joint's damping,
    frictionloss and armature, a placeholder link (replace it with the load) and the actuator, stepped at
    `timestep` [s]."""
    p = spec.kernel_params()
    lost = _common_losses(spec, p)
    # MuJoCo's motorconst = our kt (MuJoCo takes one value as both Kt and Ke)
    motor: dict[str, str] = {"resistance": _g(p["resistance"]), "motorconst": _g(p["kt"])}
    if p["gear"] != 1.0:
        motor["gear"] = _g(p["gear"])
    if p["te"] > 0:
        motor["inductance"] = f"0 {_g(p['te'])}"        # L = 0: the time constant as given
    tau_max = p["tau_max"]
    if isinstance(spec.firmware, ErobPdLaw):
        # the law's ±max_amps: with a quasi-static current the torque clamp kt·max_amps (MuJoCo DC motor model §2.1)
        amps = p["kt"] * spec.firmware.max_amps
        tau_max = min(tau_max, amps) if tau_max > 0 else amps
        lost.append("heating while the current limit binds (MuJoCo heats with the unclamped current)")
    if tau_max > 0 or p["didt_max"] > 0:
        motor["saturation"] = f"{_g(tau_max)} 0 {_g(p['didt_max'])}"
    if p["thermal_r"] > 0:
        motor["thermal"] = " ".join(_g(p[k]) for k in ("thermal_r", "thermal_c")) + " 0 " + \
            " ".join(_g(p[k]) for k in ("tempcoef", "reftemp", "ambient"))
    if p["cog_amplitude"]:
        motor["cogging"] = " ".join(_g(p[k]) for k in ("cog_amplitude", "cog_poles", "cog_phase"))
    if p["lugre_s0"] > 0:
        motor["lugre"] = " ".join(_g(p[k]) for k in ("lugre_s0", "lugre_s1", "lugre_tc", "lugre_ts", "lugre_ws"))
    if p["damping_b1"] or p["damping_b2"] or p["damping_b3"]:
        motor["damping"] = " ".join(_g(p[k]) for k in ("damping_b1", "damping_b2", "damping_b3"))
    motor.update(_law_controller(spec, p, lost))
    g2 = p["gear"] * p["gear"]
    joint = {"armature": _g(p["armature"] * g2)}
    if p["budget"]:
        # bam/mujoco.py: the budget's viscous term as joint damping, its Coulomb level as frictionloss (a soft
        # constraint where bam clips a stopping torque, friction paper §II-B)
        joint["damping"] = _g(p["friction_viscous"])
        joint["frictionloss"] = _g(p["friction_base"])
        lost.append("the friction budget's clipped stopping torque: frictionloss is MuJoCo's soft constraint")

    def attrs(d: dict[str, str]) -> str:
        return " ".join(f"{k}={quoteattr(v)}" for k, v in d.items())

    text = f"""<mujoco model={quoteattr(name)}>
  <!-- {title or name}: servo-hil actuator export. Quantities SI at the motor (the joint's at the output);
       ctrl is the goal position [rad] times the gear ratio. Integrate with Euler at this timestep [s] to match
       servo-hil's kernel (MuJoCo's default is 0.002 s). -->
  <option integrator="Euler" timestep={quoteattr(_g(timestep))}/>
  <compiler angle="radian"/>
  <default>
    <default class={quoteattr(name)}>
      <joint {attrs(joint)}/>
      <dcmotor {attrs(motor)}/>
    </default>
  </default>
  <worldbody>
    <body name={quoteattr(name + "_link")}>
      <joint name={quoteattr(name)} class={quoteattr(name)} type="hinge" axis="0 1 0"/>
      <inertial pos="0 0 0" mass="0.1" diaginertia="1e-05 1e-05 1e-05"/>
    </body>
  </worldbody>
  <actuator>
    <dcmotor name={quoteattr(name)} joint={quoteattr(name)} class={quoteattr(name)}/>
  </actuator>
</mujoco>
"""
    return Exported(text, lost)


def isaaclab(spec: ActuatorSpec) -> tuple[dict[str, float | None], list[str]]:
    """`spec` as Isaac Lab `DCMotorCfg` keyword arguments (at the output shaft) and what they cannot represent."""
    p = spec.kernel_params()
    lost = _common_losses(spec, p)
    lost += [text for key, text in _BEYOND_ISAACLAB if _on(p, key)]
    fw, g, R, kt, eta = spec.firmware, p["gear"], p["resistance"], p["kt"], p["efficiency"]
    kt_out = eta * g * kt                 # output torque per ampere
    back_emf = kt_out * kt * g / R        # output torque per rad/s of the quasi-static back-EMF
    limit = g * eta * p["tau_max"] if p["tau_max"] > 0 else None
    if isinstance(fw, DynamixelPwmLaw | StsPwmLaw):
        v_full = fw.supply_v * fw.max_duty
        stiffness = kt_out * fw.supply_v * fw.error_gain * fw.kp / R
        damping = back_emf
        if isinstance(fw, StsPwmLaw):
            lost.append("the setpoint's speed limit (Isaac Lab's DCMotor takes the goal at once)")
    elif isinstance(fw, ErobPdLaw):
        v_full = fw.supply_v
        stiffness = kt_out * fw.kp
        damping = kt_out * fw.damping * math.sqrt(fw.kp)
        amps = kt_out * fw.max_amps
        limit = min(limit, amps) if limit is not None else amps
        lost.append("the supply band's forced braking above the no-load speed (Isaac Lab clips ω to where the "
                    "envelope meets effort_limit)")
    elif isinstance(fw, DcmotorLaw):
        kp, ki, kd, _, _, vmax = spec.motor.controller
        if fw.supply_v > 0:
            vmax = min(vmax, fw.supply_v) if vmax > 0 else fw.supply_v
        if vmax <= 0:
            raise ConfigError(f"{spec.name}: a <dcmotor> law without Vmax or supply voltage has no stall torque "
                              "for saturation_effort")
        v_full = vmax
        if spec.motor.input == "position":
            stiffness = kt_out * kp * g / R
            damping = kt_out * (kd + kt) * g / R
        else:
            lost.append(f"the <dcmotor> {spec.motor.input} input (Isaac Lab's DCMotor is a position PD): "
                        "stiffness 0, damping the back-EMF")
            stiffness, damping = 0.0, back_emf
        if ki > 0:
            lost.append("the controller's integral term ki")
        if spec.motor.controller[3] > 0:
            lost.append("the controller's slew limit")
    else:
        raise ConfigError(f"{spec.name}: firmware law {fw.law!r} has no Isaac Lab DCMotor counterpart "
                          "(dxl_pwm, sts_pwm, erob_pd and the dcmotor's own law export)")
    if limit is None:
        lost.append("no torque limit: effort_limit is left to the asset (null)")
    cfg: dict[str, float | None] = {
        "saturation_effort": kt_out * v_full / R,       # stall torque at full command (Table 9: τ0)
        "velocity_limit": v_full / (kt * g),            # no-load speed without friction (Table 9: ω0)
        "effort_limit": limit,                          # Table 9: τmax
        "stiffness": stiffness,
        "damping": damping,
        "armature": p["armature"] * g * g,
    }
    viscous = p["damping_b1"] * g * g + (p["friction_viscous"] if p["budget"] else 0.0)
    if p["budget"]:
        cfg["friction"] = p["friction_base"]
        lost.append("the friction budget's clipped stopping torque: friction is PhysX's joint friction")
    if viscous:
        cfg["viscous_friction"] = viscous               # ActuatorBaseCfg.viscous_friction (Isaac Lab 2.3+)
    return cfg, lost


def isaaclab_text(cfg: dict, lost: list[str], path: Path, title: str) -> str:
    """The file text of `cfg` for `path`: JSON for .json, YAML (with the losses as comments) for .yaml/.yml."""
    suffix = path.suffix.lower()
    if suffix == ".json":
        return json.dumps(cfg, indent=2) + "\n"
    if suffix in (".yaml", ".yml"):
        import yaml

        head = [f"# {title}: Isaac Lab DCMotorCfg keyword arguments (servo-hil actuator export)",
                "# not represented:"] + [f"#   - {line}" for line in lost]
        return "\n".join(head) + "\n" + yaml.safe_dump(cfg, sort_keys=False)
    raise ConfigError(f"--isaaclab {path}: give a .json, .yaml or .yml file name")


def _canopen_variant(name: str) -> str:
    """The eRob variant (config/erob/) of catalog actuator `name`: only the eRobs are CANopen drives."""
    from firmware_models.erob.object_dictionary import load_config, variants

    found = [v for v in variants() if load_config(v).catalog == name]
    if not found:
        drives = ", ".join(load_config(v).catalog for v in variants())
        raise ConfigError(f"--eds: {name} is not a CANopen drive (the catalog's CiA 402 drives: {drives})")
    return found[0]


def canopen_eds(name: str, out: Path) -> str:
    """Catalog actuator `name`'s CANopen object dictionary as an EDS at `out` (its folder created); returns the
    eRob variant."""
    import canopen

    from firmware_models.erob.object_dictionary import load_config, load_object_dictionary

    variant = _canopen_variant(name)
    od = load_object_dictionary(variant, 1)     # node-relative COB-IDs are written as $NODEID+…
    title = load_config(variant).title
    od.comments = f"{title}: servo-hil's object dictionary (config/erob/objects.toml, {variant}.toml)"
    # canopen's exporter takes [FileInfo] from the attribute its importer sets (objectdictionary/eds.py)
    setattr(od, "__edsFileInfo", {"FileName": out.name, "FileVersion": 1, "FileRevision": 0, "EDSVersion": "4.0",
                                  "Description": f"{title} (servo-hil)", "CreatedBy": "servo-hil"})
    out.parent.mkdir(parents=True, exist_ok=True)
    canopen.export_od(od, str(out), doc_type="eds")
    return variant


def export(name: str, model: str | None, mjcf_out: Path | None, isaaclab_out: Path | None,
           eds_out: Path | None = None, timestep: float = DEFAULT_TIMESTEP_S) -> dict[str, list[str]]:
    """Write catalog actuator `name` (with bam's identified set `model`) to the MJCF and / or Isaac Lab files,
    and / or its EDS; returns what each simulator target cannot represent, by target (the EDS loses nothing)."""
    if mjcf_out is None and isaaclab_out is None and eds_out is None:
        raise ConfigError("actuator export: give --mjcf OUT.xml, --isaaclab OUT.json|yaml and / or --eds OUT.eds")
    entry = catalog.entry(name)
    if model is not None and model not in ("m1", "m2", "m3", "m4", "m5", "m6"):
        raise ConfigError(f"--model {model!r}: one of m1 … m6")
    if mjcf_out is not None and mjcf_out.suffix.lower() != ".xml":
        raise ConfigError(f"--mjcf {mjcf_out}: give a .xml file name")
    if not (math.isfinite(timestep) and timestep > 0):
        raise ConfigError(f"--dt {timestep:g}: must be a finite step > 0 s")
    if eds_out is not None:
        _canopen_variant(name)          # before anything is written
    spec = entry.actuator(model)
    label = name + (f"_{model}" if model else "")
    title = entry.title + (f", bam {model}" if model else "")
    out: dict[str, list[str]] = {}
    if isaaclab_out is not None:
        cfg, lost = isaaclab(spec)
        text = isaaclab_text(cfg, lost, isaaclab_out, title)
        isaaclab_out.parent.mkdir(parents=True, exist_ok=True)
        isaaclab_out.write_text(text)
        out["isaaclab"] = lost
    if mjcf_out is not None:
        doc = mjcf(spec, label, title, timestep)
        mjcf_out.parent.mkdir(parents=True, exist_ok=True)
        mjcf_out.write_text(doc.text)
        out["mjcf"] = doc.lost
    if eds_out is not None:
        canopen_eds(name, eds_out)
        out["eds"] = []
    return out
