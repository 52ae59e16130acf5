"""Feetech STS/SCS control tables: the model data (`ModelSpec`, read from config/feetech/<model>.toml) and one
servo's bytes (`ControlTable`).

Values are sign-magnitude where the model says so (bit 15 of positions and speeds, bit 10 of the load, bit 11 of
the homing offset: LeRobot `STS_SMS_SERIES_ENCODINGS_TABLE`), and multi-byte items are little-endian on STS and
big-endian on SCS (address 2, END; feetech-servo-sdk `SCS_SETEND`). The table checks only what a Feetech servo
can report: its status byte has no access, range or length bit, so a write to a read-only byte or outside a range is
not refused here; the firmware (servo.py) decides what a value does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from firmware_models import model_files
from hil.params import catalog
from hil.params.config_file import ConfigError, Strict

__all__ = ["ControlTable", "Item", "ModelSpec", "decode_sign", "encode_sign", "load_model", "model_names"]


def encode_sign(value: int, bit: int | None) -> int:
    """`value` as the register holds it: sign-magnitude with the sign at `bit` (None: two's complement is not used
    on Feetech, a plain unsigned value)."""
    if bit is None:
        return value
    magnitude = min(abs(value), (1 << bit) - 1)
    return magnitude | (1 << bit) if value < 0 else magnitude


def decode_sign(raw: int, bit: int | None) -> int:
    """The signed value of register contents `raw` with its sign at `bit` (None: unsigned)."""
    if bit is None:
        return raw
    magnitude = raw & ((1 << bit) - 1)
    return -magnitude if raw & (1 << bit) else magnitude


@dataclass(frozen=True)
class Item:
    """One control-table item: where it is, who may write it, its range, power-up value and unit."""

    name: str
    address: int
    size: int
    access: str                 # "R" or "RW"
    area: str                   # "eeprom", "ram" or "factory"
    default: int
    min: int
    max: int
    sign_bit: int | None
    unit: str | None
    si_per_unit: float | None   # SI per register unit (rad, rad/s, A, V, °C, s, fraction)
    src: str


@dataclass(frozen=True)
class ModelSpec:
    """One model's control table and bus facts."""

    name: str
    title: str
    model_number: int
    byte_order: Literal["little", "big"]
    resolution: int
    baud_rates: dict[int, int]          # Baud_Rate value → bit/s
    operating_modes: tuple[int, ...]
    items: tuple[Item, ...]
    size: int                           # bytes of the table (one past the last item)
    range_deg: float = 360.0            # the angle `resolution` steps span (a potentiometer SCS servo: 300°)

    @property
    def step_rad(self) -> float:
        """One position step [rad]."""
        return math.radians(self.range_deg) / self.resolution

    @property
    def turn_steps(self) -> float:
        """Position steps per turn (4096 on an STS3215; 1228.8 on a 300° SCS servo of 1024 steps)."""
        return self.resolution * 360.0 / self.range_deg

    @property
    def zero_step(self) -> int:
        """The step of 0 rad: the middle of the range."""
        return self.resolution // 2

    def item(self, name: str) -> Item:
        for it in self.items:
            if it.name == name:
                return it
        raise KeyError(name)

    def has(self, name: str) -> bool:
        return any(it.name == name for it in self.items)


class _ItemCfg(Strict):
    name: str
    address: int
    size: Literal[1, 2]
    access: Literal["R", "RW"]
    area: Literal["eeprom", "ram", "factory"]
    default: int
    min: int | None = None
    max: int | None = None
    sign_bit: int | None = None
    unit: str | None = None
    src: str


class _ModelFile(Strict):
    title: str
    model_number: int
    firmware_version: list[int]
    byte_order: Literal["little", "big"]
    resolution: int
    range_deg: float = Field(360.0, gt=0.0, le=360.0)
    baud_rates: dict[int, int]
    operating_modes: list[int]
    units: dict[str, float]
    items: list[_ItemCfg]


def _build(name: str, cfg: _ModelFile, where: str) -> ModelSpec:
    items = []
    used: dict[int, str] = {}
    for k, it in enumerate(cfg.items):
        key = f"{where}: items[{k}] ({it.name})"
        if it.unit is not None and it.unit not in cfg.units:
            raise ConfigError(f"{key}: unit {it.unit!r} is not in [units]")
        for a in range(it.address, it.address + it.size):
            if a in used:
                raise ConfigError(f"{key}: byte {a} is also {used[a]}")
            used[a] = it.name
        full = (1 << (8 * it.size)) - 1
        lo = it.min if it.min is not None else (-((1 << it.sign_bit) - 1) if it.sign_bit is not None else 0)
        hi = it.max if it.max is not None else ((1 << it.sign_bit) - 1 if it.sign_bit is not None else full)
        if not lo <= it.default <= hi:
            raise ConfigError(f"{key}: default {it.default} outside {lo}..{hi}")
        items.append(Item(it.name, it.address, it.size, it.access, it.area, it.default, lo, hi, it.sign_bit, it.unit,
                          cfg.units[it.unit] if it.unit else None, it.src))
    if len({it.name for it in items}) != len(items):
        raise ConfigError(f"{where}: items: a name appears twice")
    return ModelSpec(name, cfg.title, cfg.model_number, cfg.byte_order, cfg.resolution, dict(cfg.baud_rates),
                     tuple(cfg.operating_modes), tuple(items), max(used) + 1, cfg.range_deg)


def _models_dir():
    return catalog.config_dir() / "feetech"


def model_names() -> list[str]:
    """Names of the models in config/feetech/ (honours $SERVO_HIL_CONFIG), sorted."""
    return model_files.model_names(_models_dir())


def load_model(name: str) -> ModelSpec:
    """The Feetech model `name` (e.g. "sts3215") from config/feetech/<name>.toml; ConfigError naming the file and
    key if it is wrong. Cached per path and modification time."""
    return model_files.load_model_file(_models_dir(), name, "Feetech", _ModelFile, _build)


class ControlTable:
    """One servo's control table bytes (`data`) with the model's byte order and sign rules.

    `get`/`set` work in signed values (sign-magnitude decoded); `read` returns raw bytes; `write` stores raw bytes
    where an item lies and returns the names of the items whose bytes changed. Bytes that belong to no item read 0
    and ignore writes."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self._by_name = {it.name: it for it in spec.items}
        self._owner: list[Item | None] = [None] * spec.size
        for it in spec.items:
            for a in range(it.address, it.address + it.size):
                self._owner[a] = it
        self.data = bytearray(spec.size)
        self.reset()

    @property
    def size(self) -> int:
        return self.spec.size

    def reset(self) -> None:
        """Every item at its default (factory values)."""
        for it in self.spec.items:
            self.set(it.name, it.default)

    def item(self, name: str) -> Item:
        return self._by_name[name]

    def item_at(self, address: int) -> Item | None:
        return self._owner[address] if 0 <= address < self.spec.size else None

    def get(self, name: str) -> int:
        it = self._by_name[name]
        raw = int.from_bytes(self.data[it.address:it.address + it.size], self.spec.byte_order)
        return decode_sign(raw, it.sign_bit)

    def set(self, name: str, value: int) -> None:
        """Store `value` (signed) in item `name`, saturated to what the item's bytes hold."""
        it = self._by_name[name]
        raw = encode_sign(int(value), it.sign_bit)
        raw = max(0, min(raw, (1 << (8 * it.size)) - 1))
        self.data[it.address:it.address + it.size] = raw.to_bytes(it.size, self.spec.byte_order)

    def read(self, address: int, length: int) -> bytes | None:
        """`length` bytes from `address`; None if any of them lies past the table."""
        if address < 0 or length < 1 or address + length > self.spec.size:
            return None
        return bytes(self.data[address:address + length])

    def write(self, address: int, data: bytes, writable: bool = True) -> list[str]:
        """Store `data` at `address` into the bytes of RW items (`writable`: only those; else every item's), bytes
        past the table and of read-only items are left alone; the names of the items whose value changed."""
        changed = []
        for k, b in enumerate(data):
            a = address + k
            it = self.item_at(a)
            if it is None or (writable and it.access != "RW"):
                continue
            if self.data[a] != b:
                self.data[a] = b
                if it.name not in changed:
                    changed.append(it.name)
        return changed
