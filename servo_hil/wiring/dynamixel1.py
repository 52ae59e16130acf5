"""Build a rig's Dynamixel Protocol 1.0 bus: one simulated servo per `[[actuators]]` entry on it, the port, the
server. A bus is one protocol, as on real hardware: AX-12A, MX-64 and MX-106 with their 1.0 firmware."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from drivers.emulated.protocol1.dynamixel import Dynamixel1Bus
from drivers.emulated.protocol1.server import Protocol1Server
from drivers.hosts.protocol1_mirror import Dynamixel1Wire, Protocol1Mirror
from firmware_models.dynamixel.control_table import Access
from firmware_models.dynamixel.protocol1.servo import Dynamixel1Servo
from firmware_models.dynamixel.protocol1.table import Protocol1Model, baud_value, load_model, model_names
from hil.params.config_file import ConfigError
from servo_hil.wiring.serial_servos import SerialServos

if TYPE_CHECKING:
    from servo_hil.rig import BusConfig
    from servo_hil.wiring.live import RigParts, RunningRig

_SET_BY_THE_RIG = {"ID": "id = ... (checked unique on the bus)", "Baud Rate": "the bus's baud = ..."}


def open_dynamixel1_bus(cfg: BusConfig, live: RunningRig, port: str | None = None,
                        parts: RigParts | None = None) -> Protocol1Server | Protocol1Mirror:
    """The servos of bus `cfg` on a new pty at `port` (or cfg.port / cfg.device); not started yet."""
    bus = SerialServos(cfg, live)
    for j, a, where in bus.actuators():
        if a.catalog not in model_names():
            raise ConfigError(f"{where}: a dynamixel1 bus needs catalog = one of {', '.join(model_names())} "
                              f"(the models with a Protocol 1.0 control table), got {a.catalog!r}")
        model = load_model(a.catalog)
        value = baud_value(model, cfg.baud)
        if value is None:
            raise ConfigError(f"buses ({cfg.name}): baud {cfg.baud} is not a speed the {model.spec.title} can take "
                              f"(its Baud Rate gives 2000000/(value+1) bit/s, within 3 %: e.g. 1000000, 57600)")
        registers = {"ID": a.id, "Baud Rate": value}
        for name, v in a.registers.items():
            registers[name] = _power_up_value(model, where, name, v)
        bus.restore(a.joint, registers, model.spec.model_number,
                    {it.name for it in model.spec.items if it.address < model.eeprom_end and it.access is Access.RW})
        bus.add(j, Dynamixel1Servo(model, live.joint(j), registers))
    bus.check_not_empty()
    mirror = functools.partial(Protocol1Mirror, wire=Dynamixel1Wire())
    return bus.serve(Dynamixel1Bus(bus.servos, bus.faults), port, Protocol1Server, mirror, "Dynamixel 1.0, ",
                     Dynamixel1Servo.power_cycle)


def _power_up_value(model: Protocol1Model, where: str, name: str, value: int) -> int:
    """`value` for register `name` at power-up, if a Write of it would be accepted (read-only or out of range: the
    servo's Range Error)."""
    key = f"{where}: registers.{name}"
    if name in _SET_BY_THE_RIG:
        raise ConfigError(f"{key}: set by {_SET_BY_THE_RIG[name]}, not in registers")
    try:
        item = model.spec.item(name)
    except KeyError:
        raise ConfigError(f"{where}: registers: {model.name} has no item {name!r}") from None
    if item.access != Access.RW:
        raise ConfigError(f"{key}: a read-only item")
    if not item.min <= value <= item.max:
        raise ConfigError(f"{key}: {value} is outside {item.min}..{item.max}")
    return value
