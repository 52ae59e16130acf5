"""Build a rig's Dynamixel Protocol 1.0 bus: one simulated servo per `[[actuators]]` entry on it, the port, the
server. A bus is one protocol, as on real hardware: AX-12A, MX-64 and MX-106 with their 1.0 firmware."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from drivers.emulated.protocol1.dynamixel import Dynamixel1Bus
from drivers.emulated.protocol1.server import Protocol1Server
from drivers.hosts.protocol1_mirror import Dynamixel1Wire, Protocol1Mirror
from drivers.wire.ports import PtyPort, SerialDevicePort
from firmware_models.dynamixel.control_table import Access
from firmware_models.dynamixel.protocol1.servo import Dynamixel1Servo
from firmware_models.dynamixel.protocol1.table import Protocol1Model, baud_value, load_model, model_names
from firmware_models.eeprom import EepromFile, EepromFileError, SavedServo
from hil.params.config_file import ConfigError
from servo_hil.wiring.live import power_up_on_reset_and_plug
from servo_hil.wiring.mirror import open_serial_mirror

if TYPE_CHECKING:
    from servo_hil.rig import BusConfig
    from servo_hil.wiring.live import RigParts, RunningRig

_SET_BY_THE_RIG = {"ID": "id = ... (checked unique on the bus)", "Baud Rate": "the bus's baud = ..."}


def open_dynamixel1_bus(cfg: BusConfig, live: RunningRig, port: str | None = None,
                        parts: RigParts | None = None) -> Protocol1Server | Protocol1Mirror:
    """The servos of bus `cfg` on a new pty at `port` (or cfg.port / cfg.device); not started yet."""
    servos, faults, joints = [], [], []
    store = EepromFile(cfg.eeprom, live.rig.name, cfg.name) if cfg.eeprom else None
    try:
        saved = store.load() if store else {}
    except EepromFileError as exc:
        raise ConfigError(str(exc)) from None
    for j, a in enumerate(live.rig.actuators):
        if a.bus != cfg.name:
            continue
        where = f"actuators[{j}] ({a.joint})"
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
        if store is not None and a.joint in saved:      # the servo's EEPROM, as a client last wrote it
            kept = {it.name for it in model.spec.items if it.address < model.eeprom_end and it.access is Access.RW}
            try:
                store.check_servo(a.joint, saved[a.joint], model.spec.model_number, kept)
            except EepromFileError as exc:
                raise ConfigError(str(exc)) from None
            registers.update(saved[a.joint].items)
        servos.append(Dynamixel1Servo(model, live.joint(j), registers))
        faults.append(live.bus_faults[j])
        joints.append(a.joint)
    if not servos:
        raise ConfigError(f"buses ({cfg.name}): no actuator has bus = {cfg.name!r}")
    if store is not None:
        def save(_changed: Dynamixel1Servo) -> None:   # in the bus thread, after the instruction that changed it
            store.save({joint: SavedServo(s.spec.model_number, s.eeprom_items())
                        for joint, s in zip(joints, servos, strict=True)})

        for s in servos:
            s.on_eeprom_change = save
    bus = Dynamixel1Bus(servos, faults)
    if cfg.real:     # a proxy mirror of the real bus there, the servos being the real ones' twins
        mirror = functools.partial(Protocol1Mirror, wire=Dynamixel1Wire())
        return open_serial_mirror(cfg, live, mirror, bus, joints, PtyPort(port or cfg.port))
    device = SerialDevicePort(cfg.device, cfg.baud) if cfg.device and not port else PtyPort(port or cfg.port)
    server = Protocol1Server(bus, device, fast=cfg.fast, name=cfg.name, batch=live.atomic)
    server.role = f"Dynamixel 1.0, {cfg.baud} bit/s{', fast' if cfg.fast else ''}"
    power_up_on_reset_and_plug(live, server.lock, {live.index[n]: s for n, s in zip(joints, servos, strict=True)},
                               Dynamixel1Servo.power_cycle)
    return server


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
