"""What every proxy mirror of a rig shares, whatever its protocol (`servo-hil mirror`): the label of the real bus,
the side-by-side MCAP log of a mirrored bus, and the opening of a serial one (Dynamixel, Feetech)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from hil.params.config_file import ConfigError

if TYPE_CHECKING:
    from drivers.hosts.serial_mirror import SerialMirror
    from servo_hil.logs.mcap import SideBySideRecorder
    from servo_hil.rig import BusConfig
    from servo_hil.wiring.live import RunningRig


def real_label(cfg: BusConfig) -> str:
    """The mirrored real bus as one line (a device path, a python-can spec or its table as JSON)."""
    return cfg.real if isinstance(cfg.real, str) else json.dumps(cfg.real, sort_keys=True)


def open_recorder(cfg: BusConfig, live: RunningRig) -> SideBySideRecorder | None:
    """The MCAP recorder of mirrored bus `cfg` (files `<rig>-<bus>-….mcap` in cfg.record), or None."""
    if not cfg.record:
        return None
    from servo_hil.logs.mcap import SideBySideRecorder

    # each twin's model by joint, so that a report names the twin as the rig does (m1, a params file, …)
    twins = {a.joint: a.model or (a.params and Path(a.params).name) or a.catalog or a.name or "sim"
             for a in live.rig.actuators if a.bus == cfg.name or (cfg.joints and a.joint in cfg.joints)}
    return SideBySideRecorder(cfg.record, prefix=f"{live.rig.name}-{cfg.name}", rotate_s=cfg.record_segment_s,
                              metadata={"rig": live.rig.name, "bus": cfg.name, "real": real_label(cfg),
                                        "twins": json.dumps(twins, sort_keys=True)})


def open_serial_mirror(cfg: BusConfig, live: RunningRig, mirror: type[SerialMirror], twin, joints: list[str],
                       controller) -> SerialMirror:
    """Bus `cfg` as a proxy mirror of class `mirror`: the controller's packets on pty `controller` go to the real
    serial bus at cfg.real and drive the `twin` bus, whose servos are `joints` in order."""
    from drivers.wire.ports import SerialDevicePort

    try:
        real = SerialDevicePort(cfg.real, cfg.baud)
    except OSError as exc:
        controller.close()
        raise ConfigError(f"buses ({cfg.name}): real = {cfg.real!r}: {exc}") from None
    ids = {s.id: joint for s, joint in zip(twin.servos, joints, strict=True)}
    server = mirror(twin, controller, real, ids, record=open_recorder(cfg, live), batch=live.atomic, name=cfg.name)
    server.role = f"mirroring {cfg.real}"
    return server
