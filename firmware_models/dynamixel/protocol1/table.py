"""Protocol 1.0 control tables, the model spec: one `config/dynamixel/protocol1/<name>.toml` per model.

The Protocol 2.0 specs (`model_spec.py`) take addresses from dynamixel-sdk's maps, which cover 2.0 only; a 1.0
file gives addresses and sizes itself. The result is the same `ModelSpec`, so the one table engine
(`control_table.ControlTable`, its C write checks) holds a 1.0 servo's bytes and checks its writes too.
Differences the engine is told about here: no Operating Mode, no indirect items, and no EEPROM lock by
Torque Enable (Protocol 1.0 servos lock EEPROM with their Lock item instead: `servo.py`).
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pydantic import Field

from firmware_models import model_files
from firmware_models.dynamixel.model_spec import Access, Item, ItemFields, ModelSpec
from firmware_models.model_files import check_overlaps, item_range
from hil.params import catalog
from hil.params.config_file import ConfigError, Strict

__all__ = ["BAUD_TOLERANCE", "Protocol1Model", "baud_value", "load_model", "model_names"]

BAUD_TOLERANCE = 0.03   # e-manual §Baud Rate note: an error under 3 % does not affect UART communication

# instruction codes of Protocol 1.0 (e-manual Protocol 1.0 §Instruction, §Bulk Read)
_KNOWN_INSTRUCTIONS = frozenset({0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x83, 0x92})


class _ItemCfg(ItemFields):
    address: int = Field(ge=0, le=255)
    size: Literal[1, 2]


class _Baud(Strict):
    divisor_min: int = Field(ge=0, le=254)
    divisor_max: int = Field(ge=0, le=254)
    extra: dict[int, int] = Field(default_factory=dict)


class Firmware(Strict):
    """`[firmware]`: unit conversions and gain scalings of the servo's firmware (every value cites its source)."""

    source: str = Field(min_length=3)
    sources: dict[str, str] = Field(default_factory=dict)
    position_unit_deg: float = Field(gt=0, description="Goal/Present Position unit [deg]")
    position_center: int = Field(ge=0, description="position register value at 0 rad")
    speed_unit_rpm: float = Field(gt=0, description="Moving/Present Speed unit [rpm]")
    control_period_s: float = Field(0.001, gt=0, description="position loop period [s] (MX)")
    p_duty_per_rad: float | None = Field(None, gt=0, description="duty per (P Gain unit · rad) (MX)")
    wheel_kvp: float = Field(0.0, ge=0, description="wheel-mode velocity P [duty·s/rad] (MX)")
    wheel_kvi: float = Field(0.0, ge=0, description="wheel-mode velocity I [duty/rad] (MX)")
    overload_stall_fraction: float = Field(gt=0, le=2, description="overload above this × stall current [1]")
    overload_time_s: float = Field(gt=0, description="… held this long [s]")


class _ModelFile(Strict):
    title: str = Field(min_length=1)
    model_number: int = Field(ge=0, le=0xFFFF)
    firmware_version: int = Field(ge=0, le=0xFF)
    eeprom_end: int = Field(ge=1, le=255)
    instructions: list[int] = Field(min_length=1)
    baud: _Baud
    firmware: Firmware
    items: dict[str, _ItemCfg]


class Protocol1Model:
    """A Protocol 1.0 model: the engine's `ModelSpec` (`spec`) plus what the 1.0 firmware needs besides."""

    def __init__(self, spec: ModelSpec, eeprom_end: int, firmware: Firmware):
        self.spec = spec
        self.eeprom_end = eeprom_end
        self.firmware = firmware

    @property
    def name(self) -> str:
        return self.spec.name

    def baud_bps(self, value: int) -> int:
        """Line speed [bit/s] of Baud Rate register `value` (KeyError if the model has no such value)."""
        return self.spec.baud_rates[value]


def baud_value(model: Protocol1Model, bps: int) -> int | None:
    """The Baud Rate register value whose speed is within 3 % of `bps` (the closest), or None: the servo cannot
    talk at `bps` (e-manual §Baud Rate: 57 600 bit/s is value 34, 57 142 bit/s, 0.794 % off)."""
    best = min(model.spec.baud_rates.items(), key=lambda kv: abs(kv[1] - bps))
    return best[0] if abs(best[1] - bps) <= BAUD_TOLERANCE * bps else None


def _build(name: str, cfg: _ModelFile, where: str) -> Protocol1Model:
    def bad(key: str, msg: str) -> ConfigError:
        return ConfigError(f"{where}: {key}: {msg}")

    items: list[Item] = []
    for iname, c in cfg.items.items():
        key = f"items.{iname}"
        lo, hi = item_range(where, key, c.size, c.signed, c.min, c.max)
        default = c.default
        if iname == "Model Number":
            default = cfg.model_number
        elif iname == "Firmware Version":
            default = cfg.firmware_version
        if c.access is Access.RW and not lo <= default <= hi:
            raise bad(f"{key}.default", f"{default} outside {lo}..{hi}")
        # eeprom=False: Protocol 1.0 has no EEPROM lock by Torque Enable, which the engine applies to EEPROM items
        items.append(Item(name=iname, address=c.address, size=c.size, access=c.access, eeprom=False,
                          default=default, min=lo, max=hi, signed=c.signed, unit=c.unit, si_per_unit=c.si))
    items.sort(key=lambda it: it.address)
    check_overlaps(where, "items", items)
    names = {it.name for it in items}
    for required in ("Model Number", "Firmware Version", "ID", "Baud Rate", "Return Delay Time", "CW Angle Limit",
                     "CCW Angle Limit", "Status Return Level", "Shutdown", "Torque Enable", "Goal Position",
                     "Moving Speed", "Torque Limit", "Max Torque", "Lock", "Registered"):
        if required not in names:
            raise bad("items", f"the model needs a {required!r} item")
    for code in cfg.instructions:
        if code not in _KNOWN_INSTRUCTIONS:
            raise bad("instructions", f"{code:#04x} is not a Protocol 1.0 instruction")
    if cfg.baud.divisor_min > cfg.baud.divisor_max:
        raise bad("baud.divisor_min", f"{cfg.baud.divisor_min} > divisor_max {cfg.baud.divisor_max}")
    # e-manual §Baud Rate: bps = 2 000 000 / (value + 1)
    bauds = {v: round(2_000_000 / (v + 1)) for v in range(cfg.baud.divisor_min, cfg.baud.divisor_max + 1)}
    bauds.update(cfg.baud.extra)
    spec = ModelSpec(
        name=name, title=cfg.title, model_number=cfg.model_number, firmware_version=cfg.firmware_version,
        sdk_model="", items=tuple(items), instructions=frozenset(cfg.instructions), operating_modes=frozenset(),
        drive_mode_mask=0, baud_rates=MappingProxyType(dict(sorted(bauds.items()))), indirect=(),
        indirect_target=(0, 0), watchdog_guarded=(), mode_reset=(), mode_reset_to_limit=MappingProxyType({}),
        mode_overrides=MappingProxyType({}), source=where,
    )
    return Protocol1Model(spec, cfg.eeprom_end, cfg.firmware)


def _models_dir() -> Path:
    return catalog.config_dir() / "dynamixel" / "protocol1"


def model_names() -> list[str]:
    """Names of the models in `config/dynamixel/protocol1/` (honours $SERVO_HIL_CONFIG), sorted."""
    return model_files.model_names(_models_dir())


def load_model(name: str) -> Protocol1Model:
    """The Protocol 1.0 model `name` ("ax12a", "mx64", "mx106"): a bad file raises ConfigError naming the file
    and the key. Cached per file path and modification time."""
    return model_files.load_model_file(_models_dir(), name, "Protocol 1.0 Dynamixel", _ModelFile, _build)
