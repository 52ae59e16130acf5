"""What a bus needs of the rig running behind it, declared here so servo_hil/wiring never imports the daemon: the
daemon's `LiveRig` provides it and hands itself to `open_buses`. What several buses share (`RigParts`) is not in it:
`open_buses` makes that once and hands it to every bus."""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from drivers.schedulers.cia402_drives import Cia402Drives
    from drivers.wire.faults import BusFaults
    from hil.joint import Joint
    from servo_hil.rig import Rig


class RunningRig(Protocol):
    """A rig whose kernel runs: its config, its actuators as firmware models drive them, per-actuator bus faults,
    one-tick batches of a packet's writes, and the hooks a bus plugs into."""

    rig: Rig
    index: dict[str, int]                       # joint name → actuator index
    bus_faults: list[BusFaults]                 # per actuator, what a bus injects into its answers
    reset_hooks: list[Callable[[], None]]       # run after `reset` (bus firmware power-cycles)
    power_up_hooks: dict[int, Callable[[], None]]   # actuator j's firmware powers up: its cable plugged back in

    def atomic(self) -> AbstractContextManager:
        """Commands pushed inside reach the loop at one tick (one bus packet's writes)."""

    def joint(self, j: int) -> Joint:
        """Actuator j as a firmware model drives it."""


@dataclass(frozen=True)
class RigParts:
    """What several buses of one rig share, made once by `open_buses` and handed to every opener."""

    drives: Cia402Drives | None = None   # the eRob drive set of its CANopen buses and Etherban servers


def power_up_on_reset_and_plug(live: RunningRig, lock: AbstractContextManager, servos: dict[int, Any],
                               power_up: Callable[[Any], object]) -> None:
    """Register how a bus's servos (by actuator index) power up again, each under the bus's `lock` and keeping
    its EEPROM: all of them at a rig `reset`, and one when its cable is plugged back in (the `plug` command: a
    serial servo's cable carries its supply)."""
    def one(servo: Any) -> None:
        with lock:
            power_up(servo)

    def every() -> None:
        for servo in servos.values():
            one(servo)

    live.reset_hooks.append(every)
    for j, servo in servos.items():
        live.power_up_hooks[j] = functools.partial(one, servo)
