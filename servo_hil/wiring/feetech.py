"""Build a rig's Feetech bus: one simulated STS servo per `[[actuators]]` entry on it, the port, the server."""

from __future__ import annotations

from typing import TYPE_CHECKING

from drivers.emulated.protocol1.bus import Protocol1Bus
from drivers.emulated.protocol1.feetech import FEETECH
from drivers.emulated.protocol1.server import Protocol1Server
from drivers.hosts.protocol1_mirror import Protocol1Mirror
from firmware_models.feetech.control_table import ModelSpec, load_model, model_names
from firmware_models.feetech.servo import FeetechServo
from hil.params import catalog
from hil.params.config_file import ConfigError
from servo_hil.wiring.serial_servos import SerialServos

if TYPE_CHECKING:
    from servo_hil.rig import BusConfig
    from servo_hil.wiring.live import RigParts, RunningRig

__all__ = ["feetech_model", "open_feetech_bus"]

_SET_BY_THE_RIG = {"ID": "id = ... (checked unique on the bus)", "Baud_Rate": "the bus's baud = ..."}


def feetech_model(name: str, where: str) -> ModelSpec:
    """The control table of catalog entry `name`: config/feetech/<name>.toml, else the table whose model number
    the catalog entry reports (the 12 V STS3215 reports the 7.4 V one's, 777)."""
    if name in model_names():
        return load_model(name)
    number = catalog.entry(name).model_number if name in catalog.names() else None
    for candidate in model_names():
        if number is not None and load_model(candidate).model_number == number:
            return load_model(candidate)
    raise ConfigError(f"{where}: a feetech bus needs a catalog servo with a Feetech control table "
                      f"(one of {', '.join(model_names())}), got {name!r}")


def open_feetech_bus(cfg: BusConfig, live: RunningRig, port: str | None = None,
                     parts: RigParts | None = None) -> Protocol1Server | Protocol1Mirror:
    """The servos of bus `cfg` on a new pty at `port` (or cfg.port / cfg.device); not started yet. With cfg.real,
    a proxy mirror of the real bus there, the servos being the real ones' twins."""
    bus = SerialServos(cfg, live)
    for j, a, where in bus.actuators():
        spec = feetech_model(a.catalog or "", where)
        codes = {bps: code for code, bps in spec.baud_rates.items()}
        if cfg.baud not in codes:
            raise ConfigError(f"buses ({cfg.name}): baud {cfg.baud} is not a {spec.title} Baud_Rate "
                              f"(one of {', '.join(str(b) for b in sorted(codes))})")
        registers = {"ID": a.id if a.id is not None else 1, "Baud_Rate": codes[cfg.baud]}
        for name, value in a.registers.items():
            registers[name] = _power_up_value(spec, where, name, value)
        bus.restore(a.joint, registers, spec.model_number,
                    {it.name for it in spec.items if it.area in ("eeprom", "factory") and it.access == "RW"})
        bus.add(j, FeetechServo(spec, live.joint(j), registers))
    bus.check_not_empty()
    return bus.serve(Protocol1Bus(FEETECH, bus.servos, bus.faults), port, Protocol1Server, Protocol1Mirror, "",
                     FeetechServo.reboot)


def _power_up_value(spec: ModelSpec, where: str, name: str, value: int) -> int:
    """`value` for register `name` at power-up, if it is a writable item and within the memory table's range."""
    key = f"{where}: registers.{name}"
    if name in _SET_BY_THE_RIG:
        raise ConfigError(f"{key}: set by {_SET_BY_THE_RIG[name]}, not in registers")
    if not spec.has(name):
        raise ConfigError(f"{where}: registers: {spec.title} has no item {name!r}")
    item = spec.item(name)
    if item.access != "RW":
        raise ConfigError(f"{key}: a read-only item")
    if not item.min <= value <= item.max:
        raise ConfigError(f"{key}: {value} is outside {item.min}..{item.max}")
    return value
