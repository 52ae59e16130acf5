"""Wiring of buses to a running rig: `open_buses` builds the server of each of a rig's `[[buses]]` entries, and
makes what several of them share once, to hand it to each (the eRob drive set of its CANopen and Etherban buses)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from drivers.schedulers.cia402_drives import Cia402Drives
    from drivers.wire.server import BusServer
    from servo_hil.rig import BusConfig
    from servo_hil.wiring.live import RunningRig

EROB_PROTOCOLS = ("canopen", "etherban")   # the buses that reach the rig's eRob drive set


def open_buses(live: RunningRig, ports: Mapping[str, str] | None = None) -> Iterator[BusServer]:
    """The server of each bus of the rig running in `live`, in the rig's order, each opened (not started) when
    the next is asked for; `ports` overrides a bus's path by its name. The eRob buses get one drive set, made here."""
    drives = None
    if any(cfg.protocol in EROB_PROTOCOLS for cfg in live.rig.buses):
        from servo_hil.wiring.erob import drive_set

        drives = drive_set(live)
    for cfg in live.rig.buses:
        yield _open_bus(cfg, live, (ports or {}).get(cfg.name), drives)


def _open_bus(cfg: BusConfig, live: RunningRig, port: str | None, drives: Cia402Drives | None) -> BusServer:
    """The server of bus `cfg` (not started); `port` overrides its path, `drives` is the rig's eRob drive set."""
    if cfg.protocol == "dynamixel":
        from servo_hil.wiring.dynamixel import open_dynamixel_bus

        return open_dynamixel_bus(cfg, live, port)
    if cfg.protocol == "dynamixel1":
        from servo_hil.wiring.dynamixel1 import open_dynamixel1_bus

        return open_dynamixel1_bus(cfg, live, port)
    if cfg.protocol == "canopen":
        from servo_hil.wiring.erob import open_canopen_bus

        return open_canopen_bus(cfg, live, drives, port)
    if cfg.protocol == "feetech":
        from servo_hil.wiring.feetech import open_feetech_bus

        return open_feetech_bus(cfg, live, port)
    if cfg.protocol == "etherban":
        from servo_hil.wiring.erob import open_etherban

        return open_etherban(cfg, live, drives)
    raise ValueError(f"unknown bus protocol {cfg.protocol!r}")
