"""Import a `<dcmotor>` actuator from an MJCF file into a `DCMotor` (MuJoCo 3.7–3.11 attributes).

Default classes are honoured the way MuJoCo applies them: the top-level `<default>` first, then
each nested class down to the element's `class`, then the element's own attributes. MuJoCo's
`motorconst` is our `kt`: its pair [Kt, Ke] becomes the one constant √(Kt·Ke) MuJoCo itself uses.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

from hil.params.config_file import ConfigError, validate
from hil.params.dcmotor import DCMotor

_LISTS = ("nominal", "inductance", "thermal", "saturation", "cogging", "lugre", "damping",
          "controller", "ctrlrange")
_SCALARS = ("resistance", "armature")


def _kt(motorconst: list[float]) -> float:
    """MuJoCo's motorconst [Kt, Ke] as one constant [N·m/A]: √(Kt·Ke) when both are given, else the one given
    (MuJoCo DC motor model §3 Table 19; a missing trailing value reads as 0, as MuJoCo reads it)."""
    kt, ke = [*motorconst, 0.0, 0.0][:2]
    return math.sqrt(kt * ke) if kt > 0 and ke > 0 else max(kt, ke)


def _class_chain(root: ET.Element, cls: str | None) -> list[dict[str, str]]:
    """dcmotor default attributes from the outermost default down to class `cls`."""
    top = root.find("default")
    if top is None:
        return []
    chains: dict[str, list[ET.Element]] = {}

    def walk(node: ET.Element, path: list[ET.Element]) -> None:
        path = [*path, node]
        chains[node.get("class", "main")] = path
        for child in node.findall("default"):
            walk(child, path)

    walk(top, [])
    if cls is not None and cls not in chains:
        raise ConfigError(f"mjcf: default class {cls!r} is not defined")
    out = []
    for node in chains[cls or "main"]:
        d = node.find("dcmotor")
        if d is not None:
            out.append(dict(d.attrib))
    return out


def load_dcmotor(path: str | Path, name: str | None = None) -> DCMotor:
    """The `<dcmotor>` called `name` (or the only one) in the MJCF file at `path`."""
    path = Path(path)
    try:
        root = ET.parse(path).getroot()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except ET.ParseError as exc:
        raise ConfigError(f"{path}: not valid XML: {exc}") from None
    motors = root.findall("./actuator/dcmotor")
    if name is not None:
        motors = [m for m in motors if m.get("name") == name]
    if len(motors) != 1:
        what = f"named {name!r}" if name else ("(give name = ... to choose one)" if motors else "")
        raise ConfigError(f"{path}: found {len(motors)} <dcmotor> elements {what}".rstrip())
    el = motors[0]
    attrs: dict[str, str] = {}
    for layer in _class_chain(root, el.get("class")):
        attrs.update(layer)
    attrs.update(el.attrib)
    data: dict[str, object] = {}
    try:
        for key in _LISTS:
            if key in attrs:
                data[key] = [float(v) for v in attrs[key].split()]
        mc = [float(v) for v in attrs.get("motorconst", "").split()]
        if any(v < 0 for v in mc) or len(mc) > 2:
            raise ConfigError(f"{path}: <dcmotor>: motorconst needs one or two non-negative values (Kt, Ke)")
        if _kt(mc) > 0:   # 0: MuJoCo derives it from `nominal`
            data["kt"] = _kt(mc)
        for key in _SCALARS:
            if key in attrs:
                data[key] = float(attrs[key])
        if "gear" in attrs:
            data["gear"] = float(attrs["gear"].split()[0])
    except ValueError as exc:
        raise ConfigError(f"{path}: <dcmotor>: {exc}") from None
    if "input" in attrs:
        data["input"] = attrs["input"]
    if attrs.get("ctrllimited") == "false":
        data.pop("ctrlrange", None)
    return validate(DCMotor, data, f"{path}: <dcmotor>")


def pendulum_inertial(mass: float, length: float, arm_mass: float = 0.0) -> tuple[float, float, float]:
    """A point mass `mass` [kg] at `length` [m] below the pivot on a uniform rod of `arm_mass` [kg]:
    (total mass [kg], centre of mass below the pivot [m], inertia about the centre of mass [kg·m²]),
    by the parallel-axis theorem from the inertia about the pivot m·l² + m_a·l²/3."""
    total = mass + arm_mass
    com = (mass * length + arm_mass * length / 2.0) / total
    inertia = mass * length * length + arm_mass * length * length / 3.0 - total * com * com
    return total, com, inertia


def pendulum_mjcf(mass: float, com: float, inertia: float, timestep: float, gravity: float, *,
                  axis: str = "0 1 0", actuator: str = "", model: str = "pendulum", body: str = "arm",
                  integrator: str = "Euler") -> str:
    """A one-hinge pendulum as MJCF, integrated with `integrator` (MuJoCo's `<option integrator>`: Euler,
    implicitfast, …) at `timestep` [s]: joint `hinge` about `axis`
    on a body of `mass` [kg] whose centre of mass sits `com` [m] below the pivot, with diagonal inertia
    `inertia` [kg·m²] about it, under `gravity` [m/s²] along −z; `actuator` is the `<actuator>` body
    (e.g. a `<dcmotor joint="hinge" .../>`), none when empty."""
    actuators = f"\n  <actuator>\n    {actuator}\n  </actuator>" if actuator else ""
    return f"""<mujoco model="{model}">
  <compiler inertiafromgeom="false"/>
  <option timestep="{timestep!r}" integrator="{integrator}" gravity="0 0 {-gravity!r}"/>
  <worldbody>
    <body name="{body}">
      <joint name="hinge" type="hinge" axis="{axis}"/>
      <inertial pos="0 0 {-com!r}" mass="{mass!r}" diaginertia="{inertia!r} {inertia!r} {inertia!r}"/>
    </body>
  </worldbody>{actuators}
</mujoco>
"""
