"""What a bus needs of the rig running behind it, declared here so servo_hil/wiring never imports the daemon: the
daemon's `LiveRig` provides it and hands itself to `open_buses`. What several buses share (the eRob drive set) is
not in it: `open_buses` makes that once and hands it to the buses that use it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
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

    def atomic(self) -> AbstractContextManager:
        """Commands pushed inside reach the loop at one tick (one bus packet's writes)."""

    def joint(self, j: int) -> Joint:
        """Actuator j as a firmware model drives it."""
