"""A real CAN bus named the way python-can names one (`INTERFACE:CHANNEL[@BITRATE]` or a table of `can.Bus`
keyword arguments): the real bus of a CANopen mirror or of `servo-hil record` (docs/protocols/canopen.md)."""

from __future__ import annotations

from typing import Any

import can
from can.interfaces import VALID_INTERFACES

from drivers.emulated.slcan.adapter import CanFrame

__all__ = ["can_bus_kwargs", "open_can_bus", "to_frame", "to_message"]


def can_bus_kwargs(spec: str | dict[str, Any], default_bitrate: int | None = None) -> dict[str, Any]:
    """The `can.Bus` keyword arguments of `spec` (see the module docstring); ValueError saying what is wrong."""
    if isinstance(spec, str):
        interface, sep, rest = spec.partition(":")
        if not sep or not interface or not rest:
            raise ValueError(f"{spec!r}: expected INTERFACE:CHANNEL[@BITRATE], e.g. slcan:/dev/ttyACM0@1000000")
        channel, at, rate = rest.rpartition("@") if "@" in rest else (rest, "", "")
        kwargs: dict[str, Any] = {"interface": interface, "channel": channel}
        if at:
            if not rate.isdigit() or int(rate) <= 0:
                raise ValueError(f"{spec!r}: bitrate {rate!r} is not a positive integer [bit/s]")
            kwargs["bitrate"] = int(rate)
    elif isinstance(spec, dict):
        kwargs = dict(spec)
        if not isinstance(kwargs.get("interface"), str):
            raise ValueError("a table needs interface = \"<python-can interface>\" (and usually channel = ...)")
    else:
        raise ValueError(f"expected a string INTERFACE:CHANNEL[@BITRATE] or a table, got {type(spec).__name__}")
    if kwargs["interface"] not in VALID_INTERFACES:
        raise ValueError(f"unknown python-can interface {kwargs['interface']!r} "
                         f"(one of {', '.join(sorted(VALID_INTERFACES))})")
    if default_bitrate is not None:
        kwargs.setdefault("bitrate", default_bitrate)
    return kwargs


def open_can_bus(kwargs: dict[str, Any]) -> can.BusABC:
    """`can.Bus(**kwargs)`; any failure (no such device, driver missing) becomes an OSError naming the bus."""
    try:
        return can.Bus(**kwargs)
    except (can.CanError, ImportError, OSError, ValueError, TypeError) as exc:
        raise OSError(f"cannot open CAN bus {kwargs}: {exc}") from None


def to_message(frame: CanFrame) -> can.Message:
    return can.Message(arbitration_id=frame.id, data=frame.data, is_extended_id=frame.extended,
                       is_remote_frame=frame.remote, dlc=frame.length)


def to_frame(msg: can.Message) -> CanFrame | None:
    """The classic CAN frame of a received message; None for what SLCAN cannot carry (error and FD frames)."""
    if msg.is_error_frame or msg.is_fd:
        return None
    if msg.is_remote_frame:
        return CanFrame(msg.arbitration_id, b"", extended=msg.is_extended_id, remote=True, dlc=msg.dlc)
    return CanFrame(msg.arbitration_id, bytes(msg.data), extended=msg.is_extended_id)
