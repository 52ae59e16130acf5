"""What a bus needs of the rig running behind it, declared here so servo_hil/wiring never imports the daemon: the
daemon's
`LiveRig` provides it and hands itself to `open_bus`."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from drivers.wire.faults import BusFaults
    from hil.joint import Joint
    from servo_hil.rig import Rig


class RunningRig(Protocol):
    """A rig whose kernel runs: its config, per-actuator bus faults, and the hooks a bus plugs into."""

    rig: Rig
    index: dict[str, int]                       # joint name → actuator index
    bus_faults: list[BusFaults]                 # per actuator, what a bus injects into its answers
    reset_hooks: list[Callable[[], None]]       # run after `reset` (bus firmware power-cycles)

    def shared(self, key: str, create: Callable[[], Any]) -> Any:
        """The resource `key` several buses share, made by `create()` on first use."""

    def atomic(self) -> AbstractContextManager:
        """Commands pushed inside reach the loop at one tick (one bus packet's writes)."""

    def joint(self, j: int) -> Joint:
        """Actuator j as a firmware model drives it."""
