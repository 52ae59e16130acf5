"""What a proxy mirror writes beside the traffic it forwards: a side-by-side log of the real device's state and its
simulated twin's, read at the same instant, and the commands seen on the wire.

The application supplies the log (an MCAP file, `servo_hil.logs.mcap.SideBySideRecorder`); drivers only need this
interface.
"""

from __future__ import annotations

from typing import Literal, Protocol

Side = Literal["real", "sim"]


class SideBySideLog(Protocol):
    """A sink for one mirrored bus's joint states and commands; times are epoch ns."""

    def state(self, side: Side, joint: str, t_ns: int, message: dict) -> None:
        """One state of `joint` on `side` (SI fields: position [rad], velocity [rad/s], …; enable and mode
        as the device reports them)."""
        ...

    def command(self, joint: str, t_ns: int, message: dict) -> None:
        """One command the controller sent to `joint`."""
        ...

    def event(self, joint: str, t_ns: int, message: dict) -> None:
        """One event of the mirror itself about `joint` (the twin took the real device's state, …)."""
        ...

    def close(self) -> None:
        """Finish the log (the mirror stops)."""
        ...


def record_pair(log: SideBySideLog, joint: str, t_ns: int, real: dict, sim: dict) -> bool:
    """Both sides of one reply at `t_ns` [epoch ns]; False (nothing logged) without a real position: a
    state needs at least the position, the other items are those the controller happened to read."""
    if real.get("position") is None:
        return False
    log.state("real", joint, t_ns, real)
    log.state("sim", joint, t_ns, sim)
    return True
