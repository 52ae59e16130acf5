"""Wiring of buses to a running rig: `open_buses` builds the server of each of a rig's `[[buses]]` entries, and
makes what several of them share once, to hand it to each (the eRob drive set of its CANopen and Etherban buses)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from servo_hil.wiring.live import RigParts

if TYPE_CHECKING:
    from drivers.wire.server import BusServer
    from servo_hil.rig import BusConfig
    from servo_hil.wiring.live import RunningRig

# a rig's `protocol` (drivers.emulated.PROTOCOLS) → the module and function that open such a bus, as python-can's
# BACKENDS table names its interfaces: imported only for the protocols a rig uses
OPENERS: dict[str, tuple[str, str]] = {
    "dynamixel": ("servo_hil.wiring.dynamixel", "open_dynamixel_bus"),
    "dynamixel1": ("servo_hil.wiring.dynamixel1", "open_dynamixel1_bus"),
    "feetech": ("servo_hil.wiring.feetech", "open_feetech_bus"),
    "canopen": ("servo_hil.wiring.erob", "open_canopen_bus"),
    "etherban": ("servo_hil.wiring.erob", "open_etherban"),
}
EROB_PROTOCOLS = ("canopen", "etherban")   # the buses that reach the rig's eRob drive set


def open_buses(live: RunningRig, ports: Mapping[str, str] | None = None) -> Iterator[BusServer]:
    """The server of each bus of the rig running in `live`, in the rig's order, each opened (not started) when
    the next is asked for; `ports` overrides a bus's path by its name. The eRob buses get one drive set, made here."""
    drives = None
    if any(cfg.protocol in EROB_PROTOCOLS for cfg in live.rig.buses):
        from servo_hil.wiring.erob import drive_set

        drives = drive_set(live)
    parts = RigParts(drives)
    for cfg in live.rig.buses:
        yield open_bus(cfg, live, (ports or {}).get(cfg.name), parts)


def open_bus(cfg: BusConfig, live: RunningRig, port: str | None = None, parts: RigParts | None = None) -> BusServer:
    """The server of bus `cfg` (not started); `port` overrides its path, `parts` are what it shares with the rig's
    other buses."""
    module, function = OPENERS[cfg.protocol]
    return getattr(importlib.import_module(module), function)(cfg, live, port, parts or RigParts())
