"""The rules of the `set_param` command: which kernel parameters a running rig lets a command change, within which
range, under which firmware laws (config/daemon/set_param.toml, documented in docs/commands.md), and which values
would not act as asked because another parameter must be set first."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from hil.kernel import LAWS
from hil.params.catalog import config_dir
from hil.params.config_file import Strict, read_toml, validate
from hil.robot.rig import OFF_ON_A_HINGE, PENDULUM_KEYS
from servo_hil.daemon.arguments import CommandError, number, shown
from servo_hil.daemon.live_rig import LAW_NAMES

if TYPE_CHECKING:
    from servo_hil.daemon.live_rig import LiveRig


class Settable(Strict):
    """One entry of config/daemon/set_param.toml: a kernel parameter `set_param` may change."""

    unit: str
    range: tuple[float, float] = Field(description="[min, max], inclusive, in `unit`")
    doc: str
    laws: tuple[str, ...] | None = Field(None, description="the firmware laws that read it (None: every law)")

    @model_validator(mode="after")
    def _ordered(self) -> Settable:
        if not self.range[0] <= self.range[1]:
            raise ValueError(f"range: min {self.range[0]} > max {self.range[1]}")
        if unknown := [law for law in self.laws or () if law not in LAWS]:
            raise ValueError(f"laws: unknown law {unknown[0]!r} (laws: {', '.join(LAWS)})")
        return self


@cache
def settable_params(path: Path | None = None) -> dict[str, Settable]:
    """The parameters `set_param` accepts, by name (config/daemon/set_param.toml), read once."""
    path = path or config_dir() / "daemon" / "set_param.toml"
    return {name: validate(Settable, entry, f"{path}: {name}") for name, entry in read_toml(path).items()}


# A term that needs another parameter to act (the kernel ignores it alone, params.def): key → (that parameter, why)
_NEEDS = {"backlash": ("armature", "the motor side crosses the band with its own inertia"),
          "stiction_rise": ("stiction_time", "the rise needs its time constant"),
          "peak_current": ("peak_time", "the peak lasts as long as its i²t budget"),
          "thermal_r2": ("thermal_c2", "the housing node needs its heat capacity"),
          "thermal_r": ("thermal_c", None)}   # thermal_c has a positive minimum: only its "stay > 0" rule
_NEEDED_BY = {need: key for key, (need, _) in _NEEDS.items()}


def coupling_problem(p: dict, key: str, value: float, robot: bool) -> str | None:
    """Why `set_param key value` cannot take effect as asked on an actuator of parameters `p`, or None."""
    if robot and key in OFF_ON_A_HINGE and value > 0:
        return f"{key}: a robot rig's hinge is the output, which has neither backlash nor rising static friction"
    if key in _NEEDED_BY and value <= 0 and p[_NEEDED_BY[key]] > 0:
        return f"{key} must stay > 0 while {_NEEDED_BY[key]} > 0 (set {_NEEDED_BY[key]} to 0 first)"
    need, why = _NEEDS.get(key, (None, None))
    if why and value > 0 and not p[need] > 0:
        return f"{key} > 0 needs {need} > 0 first ({why})"
    if key == "thermal_r2" and value > 0 and not p["thermal_r"] > 0:
        return "thermal_r2 > 0 needs the thermal model (thermal_r > 0: the winding-to-housing R_th1)"
    if key == "peak_current" and value > 0:   # the kernel then limits the current (plan.pxi, LIMIT_CURRENT)
        if not (p["tau_max"] > 0 and p["kt"] > 0):
            return "peak_current: this actuator has no continuous current limit to rise above (saturation)"
        i_cont = p["tau_max"] / p["kt"]
        if not value > i_cont:
            return f"peak_current {value:g} A must exceed the continuous limit {i_cont:g} A (tau_max / kt)"
    return None


def checked_change(live: LiveRig, j: int, cmd: dict) -> tuple[str, float]:
    """The (parameter, value) a `set_param` command `cmd` asks of actuator j of `live`, once every rule holds;
    CommandError naming the rule otherwise."""
    table = settable_params()
    key = cmd.get("name")
    if not isinstance(key, str) or key not in table:
        raise CommandError(f"set_param: unknown parameter {shown(key)} (settable: {', '.join(table)})")
    if live.robot is not None and key in PENDULUM_KEYS:
        raise CommandError(f"set_param: {key} belongs to a pendulum load; a robot rig's load is its MJCF "
                           f"({live.robot.mjcf.name})")
    entry = table[key]
    # the law running, or the actuator's own one (set_mode may switch back to it)
    law = LAW_NAMES[live.params[j]["law"]]
    if entry.laws is not None and not {law, LAW_NAMES[live.configured[j]["law"]]} & set(entry.laws):
        raise CommandError(f"set_param: {key} is not used by {live.names[j]}'s firmware law {law!r} "
                           f"(only by {', '.join(entry.laws)})")
    value = number(cmd, "value", *entry.range, where=f"set_param {key} [{entry.unit}]")
    if problem := coupling_problem(live.params[j], key, value, live.robot is not None):
        raise CommandError(f"set_param: {problem}")
    return key, value
