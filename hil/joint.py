"""One actuator of a running simulation, as a firmware model sees it.

A firmware model reaches the simulation only through a `Joint`: the daemon's `LiveJoint` drives an actuator of
the real-time loop, `KernelJoint` an offline `Kernel` that the caller steps. A Joint of the running loop is also
a `GoalPort`, through which a firmware model's C fast path reads the loop and queues goals without Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from hil.kernel import Kernel

if TYPE_CHECKING:
    from hil.loop.rt import RealtimeLoop


def encoder_reading(state: Mapping) -> float:
    """What a servo's position register holds [rad]: the firmware's last encoder sample (`theta_meas`, the one
    its law used in the step just taken); before the first step, the shaft itself (hil/kernel/core.pxd
    `encoder_reading`, for the C paths)."""
    return state["theta_meas"] if state["k"] > 0 else state["theta"]


class Joint(Protocol):
    """An actuator of the kernel: SI state out, parameters / goal / torque enable in."""

    def read_state(self) -> Mapping:
        """The kernel `State` fields of this actuator (SI; see hil/kernel/core.pxd), one tick's worth, as a
        read-only mapping: a dict, or the running loop's StateView (an implementation may hand out the same
        object until the state changes)."""
        ...

    def params(self) -> dict:
        """The kernel parameters in force (faults injected at run time included)."""
        ...

    def command(self, params: dict | None = None, goal: float | None = None, enable: bool | None = None,
                clear_latches: bool = False) -> None:
        """Change parameters (only the keys given), the goal u and/or torque enable; the loop applies
        everything given in one call at the same tick. `clear_latches` releases the fault latches."""
        ...

    def time_s(self) -> float:
        """Simulation time k·dt [s]."""
        ...

    def sync(self) -> None:
        """Return once the commands given so far are in force (read_state reflects them)."""
        ...


@runtime_checkable
class GoalPort(Protocol):
    """Actuator `j` of a running `RealtimeLoop`, as a firmware model's fast path reaches it
    (a Dynamixel servo's `JointLink`): it reads the loop's seqlock'd snapshot and, on the
    thread `batch_thread`, stages goals on the loop's command ring itself; any other goal, or one that finds
    the ring full, goes through `queue_goal`."""

    @property
    def loop(self) -> RealtimeLoop:
        """The running loop this actuator belongs to."""
        ...

    @property
    def j(self) -> int:
        """The actuator's index in the loop."""
        ...

    @property
    def period_s(self) -> float:
        """The loop's tick period [s]: simulation time = tick × period_s."""
        ...

    @property
    def batch_thread(self) -> int | None:
        """The thread (`threading.get_ident()`) inside a batch of commands, which holds the lock on the loop's
        command ring and may stage commands on it without a Python call; None outside a batch."""
        ...

    def queue_goal(self, u: float) -> None:
        """Queue goal `u` for the loop (serialised with every other command; waits while the ring is full)."""
        ...


class KernelJoint:
    """Actuator j of an offline `Kernel`: commands take effect at the caller's next `step()`."""

    def __init__(self, kernel: Kernel, j: int = 0):
        self.kernel = kernel
        self.j = j
        self.u = 0.0
        self.enable = 1.0

    def read_state(self) -> dict:
        return self.kernel.get_state(self.j)

    def params(self) -> dict:
        return self.kernel.get_params(self.j)

    def command(self, params: dict | None = None, goal: float | None = None, enable: bool | None = None,
                clear_latches: bool = False) -> None:
        if params:
            self.kernel.set_params(self.j, self.kernel.get_params(self.j) | params)
        if goal is not None:
            self.u = goal
        if enable is not None:
            self.enable = 1.0 if enable else 0.0
        if clear_latches:
            self.kernel.set_state(self.j, clear_latches=True)

    def time_s(self) -> float:
        return self.kernel.time   # the kernel steps all its actuators together

    def sync(self) -> None:
        """Commands take effect at once here (parameters and latches); goal/enable at the next step."""

    def step(self, n: int = 1, external_torque: float = 0.0) -> None:
        """Advance the kernel n steps with this joint's goal and enable (other actuators: u = 0)."""
        u = [0.0] * self.kernel.n
        en = [1.0] * self.kernel.n
        ext = [0.0] * self.kernel.n
        u[self.j], en[self.j], ext[self.j] = self.u, self.enable, external_torque
        for _ in range(n):
            self.kernel.step(u, en, ext)
