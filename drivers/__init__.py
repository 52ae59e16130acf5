"""The wire: bus protocols, ports and pacing. `open_bus` builds a rig's bus from its `[[buses]]` entry."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from drivers.dynamixel.server import BusServer
    from hil.daemon.live_rig import LiveRig
    from hil.daemon.rig import BusConfig


def open_bus(cfg: BusConfig, live: LiveRig, port: str | None = None) -> BusServer:
    """The server of bus `cfg` for the rig running in `live` (not started); `port` overrides its path."""
    if cfg.protocol == "dynamixel":
        from drivers.dynamixel.attach import open_dynamixel_bus

        return open_dynamixel_bus(cfg, live, port)
    raise ValueError(f"unknown bus protocol {cfg.protocol!r}")
