"""What every bus of serial servos (Dynamixel 2.0 and 1.0, Feetech) does the same way when a rig opens it: one
servo per `[[actuators]]` entry on the bus, their EEPROM state file, and the bus served on its port or mirrored."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from firmware_models.eeprom import EepromFile, EepromFileError, SavedServo
from hil.params.config_file import ConfigError
from servo_hil.wiring.live import power_up_on_reset_and_plug
from servo_hil.wiring.mirror import open_serial_mirror

if TYPE_CHECKING:
    from drivers.wire.faults import BusFaults
    from servo_hil.rig import BusConfig, RigActuator
    from servo_hil.wiring.live import RunningRig


class SerialServos:
    """The servos of one serial bus as they are built: `add` each, then `serve` the bus made of them."""

    def __init__(self, cfg: BusConfig, live: RunningRig):
        self.cfg, self.live = cfg, live
        self.servos: list[Any] = []
        self.faults: list[BusFaults] = []
        self.joints: list[str] = []
        self._store = EepromFile(cfg.eeprom, live.rig.name, cfg.name) if cfg.eeprom else None
        try:
            self._saved = self._store.load() if self._store else {}
        except EepromFileError as exc:
            raise ConfigError(str(exc)) from None

    def actuators(self) -> Iterator[tuple[int, RigActuator, str]]:
        """(index, entry, where it stands in the rig file) of each actuator on this bus."""
        for j, a in enumerate(self.live.rig.actuators):
            if a.bus == self.cfg.name:
                yield j, a, f"actuators[{j}] ({a.joint})"

    def restore(self, joint: str, registers: dict[str, int], model_number: int, kept: set[str]) -> None:
        """Put the EEPROM items the state file kept for `joint` over its power-up `registers` (the servo's flash,
        as a client last wrote it); `kept` are the model's writable EEPROM items."""
        saved = self._saved.get(joint)
        if saved is None:
            return
        try:
            self._store.check_servo(joint, saved, model_number, kept)
        except EepromFileError as exc:
            raise ConfigError(str(exc)) from None
        registers.update(saved.items)

    def add(self, j: int, servo: Any) -> None:
        self.servos.append(servo)
        self.faults.append(self.live.bus_faults[j])
        self.joints.append(self.live.rig.actuators[j].joint)

    def serve(self, bus: Any, port: str | None, server_class: type, mirror_class: Callable, role: str,
              power_up: Callable[[Any], object]) -> Any:
        """Bus `bus` of the added servos: its server on a new pty at `port` (or cfg.port / cfg.device), not
        started; with cfg.real a proxy mirror of the real bus there, the servos being the real ones' twins."""
        cfg, live = self.cfg, self.live
        if self._store is not None:
            store, joints, servos = self._store, self.joints, self.servos

            def save(_changed: Any) -> None:    # in the bus thread, after the instruction that changed it
                store.save({joint: SavedServo(s.spec.model_number, s.eeprom_items())
                            for joint, s in zip(joints, servos, strict=True)})

            for s in servos:
                s.on_eeprom_change = save
        from drivers.wire.ports import PtyPort, SerialDevicePort

        if cfg.real:
            return open_serial_mirror(cfg, live, mirror_class, bus, self.joints, PtyPort(port or cfg.port))
        device = SerialDevicePort(cfg.device, cfg.baud) if cfg.device and not port else PtyPort(port or cfg.port)
        # SCHED_FIFO one below the loop: a reply must not wait behind other processes' time slices past the client's
        # packet timeout (docs/protocols/wire.md, "Replies under load")
        server = server_class(bus, device, fast=cfg.fast, name=cfg.name, batch=live.atomic,
                              fifo_priority=live.rig.loop.io_priority)
        server.role = f"{role}{cfg.baud} bit/s{', fast' if cfg.fast else ''}"
        power_up_on_reset_and_plug(live, server.lock, {live.index[n]: s for n, s in zip(self.joints, self.servos,
                                                                                         strict=True)}, power_up)
        return server

    def check_not_empty(self) -> None:
        if not self.servos:
            raise ConfigError(f"buses ({self.cfg.name}): no actuator has bus = {self.cfg.name!r}")
