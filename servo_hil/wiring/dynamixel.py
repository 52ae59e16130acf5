"""Build a rig's Dynamixel bus: one simulated servo per `[[actuators]]` entry on it, the port, the server."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from drivers.emulated.dynamixel.bus import DynamixelBus
from drivers.emulated.dynamixel.server import DynamixelServer
from drivers.hosts.dynamixel_mirror import MirrorServer
from firmware_models.dynamixel.control_table import Access, ModelSpec, load_model, model_names
from firmware_models.dynamixel.servo import DynamixelServo
from hil.params.config_file import ConfigError
from servo_hil.wiring.serial_servos import SerialServos

if TYPE_CHECKING:
    from servo_hil.rig import BusConfig
    from servo_hil.wiring.live import RigParts, RunningRig

log = logging.getLogger("servo-hil")


def open_dynamixel_bus(cfg: BusConfig, live: RunningRig, port: str | None = None,
                       parts: RigParts | None = None) -> DynamixelServer | MirrorServer:
    """The servos of bus `cfg` on a new pty at `port` (or cfg.port / cfg.device); not started yet."""
    bus = SerialServos(cfg, live)
    for j, a, where in bus.actuators():
        if a.catalog not in model_names():
            raise ConfigError(f"{where}: a Dynamixel bus needs catalog = one of {', '.join(model_names())} "
                              f"(the models with a control table), got {a.catalog!r}")
        spec = load_model(a.catalog)
        bauds = {bps: value for value, bps in spec.baud_rates.items()}
        if cfg.baud not in bauds:
            raise ConfigError(f"buses ({cfg.name}): baud {cfg.baud} is not a {a.catalog} Baud Rate "
                              f"(one of {', '.join(str(b) for b in sorted(bauds))})")
        registers = {"ID": a.id, "Baud Rate": bauds[cfg.baud]}
        for name, value in a.registers.items():
            registers[name] = _power_up_value(spec, a.catalog, where, name, value)
        bus.restore(a.joint, registers, spec.model_number,
                    {it.name for it in spec.items if it.eeprom and it.access is Access.RW})
        servo = DynamixelServo(spec, live.joint(j), registers)
        if problem := servo.supply_outside_limits():   # as the real servo on that supply: said once, not refused
            log.warning("%s: %s; give firmware = { supply_v = ... } or the limits in registers", where, problem)
        bus.add(j, servo)
    bus.check_not_empty()
    # normal scheduling, unlike the eRob bus threads: a pty hands each write to the controller's side in a
    # kernel worker, which a SCHED_FIFO bus thread busy on that CPU holds off (`servo-hil bench dynamixel`)
    return bus.serve(DynamixelBus(bus.servos, bus.faults), port, DynamixelServer, MirrorServer, "",
                     DynamixelServo.reboot)


_SET_BY_THE_RIG = {"ID": "id = ... (checked unique on the bus)", "Baud Rate": "the bus's baud = ..."}


def _power_up_value(spec: ModelSpec, model: str, where: str, name: str, value: int) -> int:
    """`value` for register `name` at power-up, if a Write of it would be accepted (e-manual, Protocol 2.0:
    a read-only item is an Access Error; outside its range, choices or bit mask a Data Range Error)."""
    key = f"{where}: registers.{name}"
    if name in _SET_BY_THE_RIG:
        raise ConfigError(f"{key}: set by {_SET_BY_THE_RIG[name]}, not in registers")
    try:
        item = spec.item(name)
    except KeyError:
        raise ConfigError(f"{where}: registers: {model} has no item {name!r}") from None
    if item.access != Access.RW:
        raise ConfigError(f"{key}: a read-only item")
    if not item.min <= value <= item.max:
        raise ConfigError(f"{key}: {value} is outside {item.min}..{item.max}")
    if item.choices is not None and value not in item.choices:
        raise ConfigError(f"{key}: {value} is not one of {', '.join(map(str, sorted(item.choices)))}")
    if item.mask is not None and value & ~item.mask:
        raise ConfigError(f"{key}: {value} sets bits outside the mask {item.mask:#x}")
    return value
