"""Wiring of buses to a running rig: `open_bus` builds the server of a rig's `[[buses]]` entry."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from drivers.wire.server import BusServer
    from servo_hil.rig import BusConfig
    from servo_hil.wiring.live import RunningRig


def open_bus(cfg: BusConfig, live: RunningRig, port: str | None = None) -> BusServer:
    """The server of bus `cfg` for the rig running in `live` (not started); `port` overrides its path."""
    if cfg.protocol == "dynamixel":
        from servo_hil.wiring.dynamixel import open_dynamixel_bus

        return open_dynamixel_bus(cfg, live, port)
    if cfg.protocol == "dynamixel1":
        from servo_hil.wiring.dynamixel1 import open_dynamixel1_bus

        return open_dynamixel1_bus(cfg, live, port)
    if cfg.protocol == "canopen":
        from servo_hil.wiring.erob import open_canopen_bus

        return open_canopen_bus(cfg, live, port)
    if cfg.protocol == "feetech":
        from servo_hil.wiring.feetech import open_feetech_bus

        return open_feetech_bus(cfg, live, port)
    if cfg.protocol == "etherban":
        from servo_hil.wiring.erob import open_etherban

        return open_etherban(cfg, live)
    raise ValueError(f"unknown bus protocol {cfg.protocol!r}")
