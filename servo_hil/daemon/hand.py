"""The `hand` command's arguments: a person's hand on a joint, as the kernel's Hand record.

Values a command leaves out come from config/daemon/hand.toml.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from pydantic import Field

from hil.kernel import hand_record
from hil.params.catalog import config_dir
from hil.params.config_file import Strict, read_toml, validate
from servo_hil.daemon.arguments import CommandError, number, only, shown

HAND_ARGS = ("actuator", "target", "path", "speed", "stiffness", "damping", "max_torque", "release")
MAX_WAYPOINTS = 8      # the kernel's HAND_PATH
RELEASE = hand_record(0.0, 0.0, 0.0, 0.0, 0.0)


class HandFeel(Strict):
    """The hand's defaults: how the hand feels when a command does not say."""

    speed: float = Field(ge=0, le=100, description="[rad/s] of the setpoint along the path")
    stiffness: float = Field(gt=0, le=1e4, description="[N·m/rad]")
    damping: float = Field(ge=0, le=1e3, description="[N·m·s/rad]")
    max_torque: float = Field(gt=0, le=1e4, description="[N·m]")


@cache
def default_feel(path: Path | None = None) -> HandFeel:
    """The hand's defaults, validated (errors name the file and the key)."""
    path = path or config_dir() / "daemon" / "hand.toml"
    return validate(HandFeel, read_toml(path), str(path))


def hand_from_command(cmd: dict[str, Any], feel: HandFeel) -> dict:
    """The Hand record a `hand` command asks for: `target` [rad] or `path` [rad, …], with `speed`, `stiffness`,
    `damping`, `max_torque` (defaults: `feel`), or `release: true`. Raises CommandError naming the argument."""
    only(cmd, HAND_ARGS, where="hand")
    if cmd.get("release") is not None:
        if cmd["release"] is not True or set(cmd) - {"cmd", "id", "actuator", "release"}:
            raise CommandError("hand: release takes true and no other argument but actuator")
        return RELEASE
    if ("target" in cmd) == ("path" in cmd):
        raise CommandError("hand: give one of target (rad) or path (a list of rad), or release: true")
    if "target" in cmd:
        path = [number(cmd, "target", -1e4, 1e4, where="hand")]
    else:
        if not isinstance(cmd["path"], list) or not 1 <= len(cmd["path"]) <= MAX_WAYPOINTS:
            raise CommandError(f"hand: path must be a list of 1 to {MAX_WAYPOINTS} angles (rad), "
                               f"got {shown(cmd['path'])}")
        path = [number({"path": x}, "path", -1e4, 1e4, where="hand") for x in cmd["path"]]
    return hand_record(path, number(cmd, "speed", 0.0, 100.0, feel.speed, "hand"),
                       number(cmd, "stiffness", 1e-6, 1e4, feel.stiffness, "hand"),
                       number(cmd, "damping", 0.0, 1e3, feel.damping, "hand"),
                       number(cmd, "max_torque", 1e-6, 1e4, feel.max_torque, "hand"))


def hand_shown(hand: dict) -> dict | None:
    """A Hand record as the `state` command shows it: None without a hand, else its path and feel."""
    if hand["stiffness"] <= 0.0:
        return None
    feel = {k: hand[k] for k in ("speed", "stiffness", "damping", "max_torque")}
    return {"path": hand["path"][:hand["count"]]} | feel
