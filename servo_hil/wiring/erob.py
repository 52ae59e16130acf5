"""Build a rig's eRob access: the CANopen bus (SLCAN pty) and the Etherban server, on the rig's one drive set
(`drive_set`, made by `servo_hil.wiring.open_buses` and handed to each of them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from firmware_models.erob.object_dictionary import load_config, variants
from hil.params.config_file import ConfigError

if TYPE_CHECKING:
    from drivers.emulated.canopen.bus import CanopenBus
    from drivers.emulated.etherban.server import EtherbanServer
    from drivers.hosts.etherban_mirror import EtherbanMirror
    from drivers.schedulers.cia402_drives import Cia402Drives
    from firmware_models.cia402 import Cia402Drive
    from servo_hil.rig import BusConfig
    from servo_hil.wiring.live import RigParts, RunningRig

_ETHERCAT_NODE_ID = 1   # an Etherban-only drive has no CAN node: its dictionary is built as node 1


def drive_set(live: RunningRig) -> Cia402Drives:
    """A new, empty eRob drive set for the rig running in `live`, ticked at 1 kHz (the eRob's CiA 402 cycle); a
    `reset` of the rig powers its drives up again. A rig has one: its CANopen buses and Etherban servers share it."""
    from drivers.schedulers.cia402_drives import Cia402Drives

    drives = Cia402Drives(period_s=1e-3, fifo_priority=live.rig.loop.io_priority)
    live.reset_hooks.append(drives.power_cycle)
    return drives


def _variant(catalog: str, where: str) -> str:
    for name in variants():
        if load_config(name).catalog == catalog:
            return name
    names = ", ".join(load_config(v).catalog for v in variants())
    raise ConfigError(f"{where}: an eRob needs catalog = one of {names} (the models with a CiA 402 "
                      f"drive in config/erob/), got {catalog!r}")


def _drive(drives: Cia402Drives, live: RunningRig, j: int, node_id: int) -> Cia402Drive:
    from firmware_models.erob.drive import new_drive

    a = live.rig.actuators[j]
    variant = _variant(a.catalog, f"actuators[{j}] ({a.joint})")
    return drives.drive(j, variant, lambda: new_drive(variant, node_id, live.joint(j)))


def _can_node_id(live: RunningRig, j: int) -> int:
    """The CAN node ID of actuator j if it sits on a canopen bus, else the EtherCAT-only default."""
    a = live.rig.actuators[j]
    buses = {b.name: b for b in live.rig.buses}
    if a.bus is not None and buses[a.bus].protocol == "canopen":
        return a.id
    return _ETHERCAT_NODE_ID


def open_canopen_bus(cfg: BusConfig, live: RunningRig, port: str | None, parts: RigParts) -> CanopenBus:
    """The eRob nodes of bus `cfg`, drives of `drives`, behind an SLCAN adapter on a pty at `port` (or cfg.port /
    cfg.device); with cfg.real, the same adapter in front of the real bus, the nodes being the real ones' twins."""
    from drivers.emulated.canopen.bus import CanopenBus
    from drivers.emulated.slcan.adapter import BITRATES
    from drivers.wire.ports import PtyPort, SerialDevicePort

    drives = parts.drives
    if cfg.baud not in BITRATES.values():
        raise ConfigError(f"buses ({cfg.name}): baud {cfg.baud} is not a CAN bit rate an SLCAN adapter "
                          f"sets (one of {', '.join(str(b) for b in BITRATES.values())})")
    nodes = []
    for j, a in enumerate(live.rig.actuators):
        if a.bus != cfg.name:
            continue
        if not 1 <= a.id <= 127:
            raise ConfigError(f"actuators[{j}] ({a.joint}): id {a.id}: a CANopen node ID is 1..127")
        if a.registers:
            raise ConfigError(f"actuators[{j}] ({a.joint}): registers = ... is for Dynamixel servos; an eRob "
                              "takes its objects from config/erob/ and SDO writes")
        nodes.append((_drive(drives, live, j, a.id), a.id, live.bus_faults[j]))
    if not nodes:
        raise ConfigError(f"buses ({cfg.name}): no actuator has bus = {cfg.name!r}")
    path = port or cfg.port
    if cfg.real:
        return _mirror(cfg, live, drives, nodes, PtyPort(path))
    device = SerialDevicePort(cfg.device, 115200) if cfg.device and not port else PtyPort(path)
    return CanopenBus(drives, nodes, device, bitrate=cfg.baud, name=cfg.name,
                      fifo_priority=live.rig.loop.io_priority)


def _mirror(cfg: BusConfig, live: RunningRig, drives: Cia402Drives, nodes: list, controller) -> CanopenBus:
    """The bus as a proxy mirror: the controller's frames go to the python-can bus cfg.real, and drive `nodes`."""
    from drivers.hosts.can_interface import can_bus_kwargs, open_can_bus
    from drivers.hosts.canopen_mirror import CanMirror
    from servo_hil.wiring.mirror import open_recorder, real_label

    try:
        real = open_can_bus(can_bus_kwargs(cfg.real, cfg.baud))
    except (OSError, ValueError) as exc:
        controller.close()
        raise ConfigError(f"buses ({cfg.name}): real = {real_label(cfg)}: {exc}") from None
    joints = {a.id: a.joint for a in live.rig.actuators if a.bus == cfg.name}
    return CanMirror(drives, nodes, controller, real, real_label(cfg), joints, open_recorder(cfg, live),
                     bitrate=cfg.baud, name=cfg.name)


def open_etherban(cfg: BusConfig, live: RunningRig, port: str | None,
                  parts: RigParts) -> EtherbanServer | EtherbanMirror:
    """The Etherban server of `cfg`: devices 0, 1, … are the drives (of `drives`) of `cfg.joints` in that order; with
    cfg.real, a proxy mirror of the real Etherban server there, the drives being the real ones' twins."""
    from drivers.emulated.etherban.server import EtherbanServer

    drives = parts.drives
    devices = []
    for joint in cfg.joints:
        j = live.index[joint]
        devices.append(_drive(drives, live, j, _can_node_id(live, j)))
    if cfg.real:
        from drivers.hosts.etherban_mirror import EtherbanMirror
        from servo_hil.wiring.mirror import open_recorder

        return EtherbanMirror(drives, devices, cfg.bind, cfg.real, cfg.joints, open_recorder(cfg, live),
                              name=cfg.name, fifo_priority=live.rig.loop.io_priority)
    return EtherbanServer(drives, devices, cfg.bind, name=cfg.name, fifo_priority=live.rig.loop.io_priority)

