"""What every proxy mirror shares, whatever its protocol (`servo-hil mirror`, issue 6): the side-by-side
recorder of a mirrored bus, and the rule that pairs a real reply with the twin's values read at the same
instant (one timestamp for `/real/<joint>/state` and `/sim/<joint>/state`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hil.daemon.live_rig import LiveRig
    from hil.daemon.rig import BusConfig
    from hil.recorder import SideBySideRecorder


def real_label(cfg: BusConfig) -> str:
    """The mirrored real bus as one line (a device path, a python-can spec or its table as JSON)."""
    return cfg.real if isinstance(cfg.real, str) else json.dumps(cfg.real, sort_keys=True)


def open_recorder(cfg: BusConfig, live: LiveRig) -> SideBySideRecorder | None:
    """The MCAP recorder of mirrored bus `cfg` (files `<rig>-<bus>-….mcap` in cfg.record), or None."""
    if not cfg.record:
        return None
    from hil.recorder import SideBySideRecorder

    return SideBySideRecorder(cfg.record, prefix=f"{live.rig.name}-{cfg.name}",
                              metadata={"rig": live.rig.name, "bus": cfg.name, "real": real_label(cfg)})


def record_pair(recorder: SideBySideRecorder, joint: str, t_ns: int, real: dict, sim: dict) -> bool:
    """Both sides of one reply at `t_ns` [epoch ns]; False (nothing logged) without a real position: a
    state needs at least the position, the other items are those the controller happened to read."""
    if real.get("position") is None:
        return False
    recorder.state("real", joint, t_ns, real)
    recorder.state("sim", joint, t_ns, sim)
    return True
