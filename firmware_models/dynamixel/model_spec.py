"""Dynamixel Protocol 2.0 control tables, the model spec: per-model data, loaded from files.

Addresses, sizes and names come from dynamixel-sdk's own address maps, read at run time; the model's TOML
adds access, defaults, ranges, units and the rest, each with its source. Values are in register units, each
item with its SI per count (docs/dynamixel.md, The model spec).
"""

from __future__ import annotations

import enum
import importlib.resources
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import Field

from firmware_models import model_files
from firmware_models.model_files import check_overlaps, item_range
from firmware_models.model_files import span as _span
from hil.params import catalog
from hil.params.config_file import ConfigError, Strict

__all__ = [
    "EEPROM_END",
    "Access",
    "IndirectBlock",
    "Item",
    "ModelSpec",
    "load_model",
    "model_names",
    "sdk_map",
]

EEPROM_END = 64  # addresses below are EEPROM (e-manual §Control Table of EEPROM Area)


class Access(enum.StrEnum):
    """Access of a control-table item."""

    R = "R"
    RW = "RW"


@dataclass(frozen=True, slots=True)
class Item:
    """One control-table item.

    `min`/`max` is the range a write must respect (Data Range Error outside it); `limit` names the item
    whose value bounds a write (Data Limit Error): symmetric ±value, or `limit_low`..`limit` when
    `limit_low` is set, applied only in `limit_modes` when that is set. `choices` and `mask` restrict the
    accepted values further (Data Range Error). `time_based_max` replaces `max`, and switches the limit
    off, while Drive Mode bit 2 (time-based profile) is set.
    """

    name: str
    address: int
    size: int
    access: Access
    eeprom: bool
    default: int
    min: int
    max: int
    signed: bool
    unit: str = ""
    si_per_unit: float | None = None
    limit: str | None = None
    limit_low: str | None = None
    limit_modes: frozenset[int] | None = None
    choices: frozenset[int] | None = None
    mask: int | None = None
    time_based_max: int | None = None

    def decode(self, raw: bytes | bytearray) -> int:
        """Register value of this item's bytes (little-endian, two's complement when signed)."""
        return int.from_bytes(raw, "little", signed=self.signed)

    def encode(self, value: int) -> bytes:
        """This item's bytes for `value` (masked to the item's width)."""
        return (value & ((1 << (8 * self.size)) - 1)).to_bytes(self.size, "little")

    def to_si(self, value: int) -> float | None:
        """`value` (register units) in SI, or None if the item has no SI unit."""
        return None if self.si_per_unit is None else value * self.si_per_unit


@dataclass(frozen=True, slots=True)
class IndirectBlock:
    """Indirect Address `first`..`first+count-1` at `address` (2 bytes each) and their data at `data`."""

    first: int
    count: int
    address: int
    data: int


@dataclass(frozen=True, eq=False)
class ModelSpec:
    """Everything the engine knows about one model, built from the SDK map and the model's TOML."""

    name: str                           # catalog name, e.g. "mx64"
    title: str                          # e.g. "MX-64(2.0)"
    model_number: int
    firmware_version: int
    sdk_model: str                      # SDK map file the addresses came from
    items: tuple[Item, ...]             # in address order
    instructions: frozenset[int]        # instruction codes the model executes
    operating_modes: frozenset[int]
    drive_mode_mask: int                # Drive Mode bits valid for this model
    baud_rates: MappingProxyType[int, int]   # Baud Rate register value -> bit/s
    indirect: tuple[IndirectBlock, ...]
    indirect_target: tuple[int, int]    # Indirect Address range (inclusive)
    watchdog_guarded: tuple[str, ...]   # items a tripped Bus Watchdog makes read-only
    mode_reset: tuple[str, ...]         # items a mode switch resets to their (per-mode) default
    mode_reset_to_limit: MappingProxyType[str, str]   # items a mode switch sets to a limit item's value
    mode_overrides: MappingProxyType[int, MappingProxyType[str, int]]  # per-mode defaults over item defaults
    source: str                         # path of the TOML file
    size: int = field(init=False)       # table length: last address + its size
    _by_name: dict[str, Item] = field(init=False, repr=False)
    _at: tuple[Item | None, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        size = max(it.address + it.size for it in self.items)
        at: list[Item | None] = [None] * size
        for it in self.items:
            for a in range(it.address, it.address + it.size):
                at[a] = it
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "_by_name", {it.name: it for it in self.items})
        object.__setattr__(self, "_at", tuple(at))

    def item(self, name: str) -> Item:
        """The item called `name`; KeyError names the model if there is none."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"{self.title} has no control-table item {name!r}") from None

    def has(self, name: str) -> bool:
        """Whether the model has an item called `name`."""
        return name in self._by_name

    def item_at(self, address: int) -> Item | None:
        """The item covering `address` (its first or a later byte), or None for a gap or outside the table."""
        return self._at[address] if 0 <= address < self.size else None


def sdk_map(file: str) -> list[tuple[int, int, str]]:
    """Rows `(address, size, name)` of the `[control table]` section of an SDK `.model` file, as listed."""
    text = importlib.resources.files("dynamixel_easy_sdk").joinpath("control_table", file).read_text()
    rows: list[tuple[int, int, str]] = []
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("["):
            section = line
            continue
        if section != "[control table]" or line.startswith("Address"):
            continue
        addr, size, name = line.split("\t", 2)
        rows.append((int(addr), int(size), name.strip()))
    return rows


def _sdk_model_files() -> dict[int, str]:
    """`dynamixel.model`: model number -> map file."""
    text = importlib.resources.files("dynamixel_easy_sdk").joinpath("control_table", "dynamixel.model").read_text()
    out: dict[int, str] = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            out[int(parts[0])] = parts[1]
    return out


class ItemFields(Strict):
    """The keys of an item's entry that Protocol 2.0 and 1.0 model files share (config/dynamixel/*.toml)."""

    access: Access
    default: int = 0
    min: int | None = None
    max: int | None = None
    signed: bool = False
    unit: str = ""
    si: float | None = None


class _ItemCfg(ItemFields):
    limit: str | None = None
    limit_low: str | None = None
    limit_modes: list[int] | None = None
    choices: list[int] | None = None
    mask: int | None = Field(default=None, ge=0)
    time_based_max: int | None = None


class _ExtraItem(Strict):
    address: int = Field(ge=0, le=0xFFFF)
    size: Literal[1, 2, 4]


class _Block(Strict):
    first: int = Field(ge=1)
    count: int = Field(ge=1, le=255)
    address: int = Field(ge=EEPROM_END)
    data: int = Field(ge=EEPROM_END)


class _Indirect(Strict):
    target_min: int = Field(ge=EEPROM_END)
    target_max: int = Field(le=0xFFFF)
    blocks: list[_Block] = Field(min_length=1)


class _ModelFile(Strict):
    title: str = Field(min_length=1)
    model_number: int = Field(ge=0, le=0xFFFF)
    firmware_version: int = Field(ge=0, le=0xFF)
    sdk_model: str = Field(pattern=r"^[a-z0-9_]+\.model$")
    rename: dict[str, str] = Field(default_factory=dict)
    instructions: list[int] = Field(min_length=1)
    operating_modes: list[int] = Field(min_length=1)
    drive_mode_mask: int = Field(ge=0, le=0xFF)
    baud_rates: dict[int, int] = Field(min_length=1)
    watchdog_guarded: list[str] = Field(default_factory=list)
    mode_reset: list[str] = Field(default_factory=list)
    mode_reset_to_limit: dict[str, str] = Field(default_factory=dict)
    indirect: _Indirect
    extra_items: dict[str, _ExtraItem] = Field(default_factory=dict)
    items: dict[str, _ItemCfg]
    mode_defaults: dict[int, dict[str, int]] = Field(default_factory=dict)
    # gain scalings and unpublished thresholds: validated by `firmware_constants`
    firmware: dict[str, Any] = Field(default_factory=dict)


_INDIRECT_ROW = re.compile(r"^Indirect (Address|Data) (\d+|Write|Read)$")
_KNOWN_INSTRUCTIONS = frozenset({0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x08, 0x10, 0x20,
                                 0x82, 0x83, 0x8A, 0x92, 0x93, 0x9A})


def _build(name: str, cfg: _ModelFile, where: str) -> ModelSpec:
    def bad(key: str, msg: str) -> ConfigError:
        return ConfigError(f"{where}: {key}: {msg}")

    known_files = _sdk_model_files()
    listed = known_files.get(cfg.model_number)
    if listed is None:
        raise bad("model_number", f"{cfg.model_number} is not in the SDK's dynamixel.model")
    # the SDK map named by dynamixel.model, or a firmware-specific variant of it (e.g. xl330_m288_fw52.model)
    if cfg.sdk_model != listed and not re.fullmatch(re.escape(listed[:-6]) + r"_fw\d+\.model", cfg.sdk_model):
        raise bad("sdk_model", f"{cfg.sdk_model!r} does not belong to model {cfg.model_number} "
                               f"(dynamixel.model lists {listed!r})")
    try:
        rows = sdk_map(cfg.sdk_model)
    except FileNotFoundError:
        raise bad("sdk_model", f"no SDK map {cfg.sdk_model!r}") from None

    # SDK rows: keep the items, check the indirect blocks against the slot-1 rows, drop the aliases
    blocks = sorted(cfg.indirect.blocks, key=lambda b: b.first)
    first = {b.first: b for b in blocks}
    placed: dict[str, tuple[int, int]] = {}
    for addr, size, row in rows:
        m = _INDIRECT_ROW.match(row)
        if m:
            kind, idx = m.groups()
            if idx.isdigit():
                blk = first.get(int(idx))
                want = None if blk is None else (blk.address if kind == "Address" else blk.data)
                if want != addr:
                    raise bad("indirect.blocks", f"the SDK map puts {row!r} at {addr}, the blocks at {want}")
            continue
        row = cfg.rename.get(row, row)
        if row in placed:
            raise bad("rename", f"two SDK items are called {row!r}")
        placed[row] = (addr, size)
    for old in cfg.rename:
        if old not in {r for _, _, r in rows}:
            raise bad(f"rename.{old}", "no such item in the SDK map")
    for xname, x in cfg.extra_items.items():
        if xname in placed:
            raise bad(f"extra_items.{xname}", "the SDK map already has this item")
        placed[xname] = (x.address, x.size)

    for iname in cfg.items:
        if iname not in placed:
            raise bad(f"items.{iname}", f"unknown item (not in {cfg.sdk_model} nor in extra_items)")

    items: list[Item] = []
    for iname, (addr, size) in placed.items():
        c = cfg.items.get(iname)
        if c is None:
            raise bad(f"items.{iname}", f"required key is missing (item at address {addr}, size {size})")
        key = f"items.{iname}"
        lo_rep, hi_rep = _span(size, c.signed)
        default = c.default
        choices = None if c.choices is None else frozenset(c.choices)
        mask = c.mask
        if iname == "Model Number":
            default = cfg.model_number
        elif iname == "Firmware Version":
            default = cfg.firmware_version
        elif iname == "Baud Rate":
            choices = frozenset(cfg.baud_rates)
        elif iname == "Operating Mode":
            choices = frozenset(cfg.operating_modes)
        elif iname == "Drive Mode":
            mask = cfg.drive_mode_mask
        lo, hi = item_range(where, key, size, c.signed, c.min, c.max)
        if c.time_based_max is not None and not lo <= c.time_based_max <= hi_rep:
            raise bad(f"{key}.time_based_max", f"{c.time_based_max} does not fit the item")
        if not lo_rep <= default <= hi_rep or (c.access is Access.RW and not lo <= default <= hi):
            raise bad(f"{key}.default", f"{default} outside {lo}..{hi}")
        if choices is not None and c.access is Access.RW and default not in choices:
            raise bad(f"{key}.default", f"{default} is not one of {sorted(choices)}")
        if mask is not None and default & ~mask:
            raise bad(f"{key}.default", f"{default} has bits outside mask {mask:#x}")
        for lkey in ("limit", "limit_low"):
            ref = getattr(c, lkey)
            if ref is not None and ref not in placed:
                raise bad(f"{key}.{lkey}", f"unknown item {ref!r}")
        if c.limit_low is not None and c.limit is None:
            raise bad(f"{key}.limit_low", "needs limit as well")
        items.append(Item(
            name=iname, address=addr, size=size, access=c.access, eeprom=addr < EEPROM_END, default=default,
            min=lo, max=hi, signed=c.signed, unit=c.unit, si_per_unit=c.si, limit=c.limit, limit_low=c.limit_low,
            limit_modes=None if c.limit_modes is None else frozenset(c.limit_modes), choices=choices, mask=mask,
            time_based_max=c.time_based_max,
        ))

    # indirect slots, expanded by rule (e-manual §Indirect Address, Indirect Data): Indirect Address n holds a
    # target address, default its data
    tmin, tmax = cfg.indirect.target_min, cfg.indirect.target_max
    if tmin > tmax:
        raise bad("indirect.target_min", f"{tmin} > target_max {tmax}")
    for b in blocks:
        for k in range(b.count):
            n = b.first + k
            items.append(Item(f"Indirect Address {n}", b.address + 2 * k, 2, Access.RW, False, b.data + k,
                              tmin, tmax, False))
            items.append(Item(f"Indirect Data {n}", b.data + k, 1, Access.RW, False, 0, 0, 255, False))
    items.sort(key=lambda it: it.address)
    check_overlaps(where, "extra_items", items)
    names = {it.name for it in items}

    for lkey, seq in (("watchdog_guarded", cfg.watchdog_guarded), ("mode_reset", cfg.mode_reset)):
        for n in seq:
            if n not in names:
                raise bad(lkey, f"unknown item {n!r}")
    for tgt, lim in cfg.mode_reset_to_limit.items():
        if tgt not in names or lim not in names:
            raise bad(f"mode_reset_to_limit.{tgt}", f"unknown item {tgt if tgt not in names else lim!r}")
    for mode, vals in cfg.mode_defaults.items():
        if mode not in cfg.operating_modes:
            raise bad(f"mode_defaults.{mode}", "not one of operating_modes")
        for n in vals:
            if n not in names:
                raise bad(f"mode_defaults.{mode}.{n}", "unknown item")
    for code in cfg.instructions:
        if code not in _KNOWN_INSTRUCTIONS:
            raise bad("instructions", f"{code:#04x} is not a Protocol 2.0 instruction")
    for required in ("Torque Enable", "Operating Mode", "Drive Mode", "ID", "Baud Rate"):
        if required not in names:
            raise bad("items", f"the model needs a {required!r} item")

    return ModelSpec(
        name=name, title=cfg.title, model_number=cfg.model_number, firmware_version=cfg.firmware_version,
        sdk_model=cfg.sdk_model, items=tuple(items), instructions=frozenset(cfg.instructions),
        operating_modes=frozenset(cfg.operating_modes), drive_mode_mask=cfg.drive_mode_mask,
        baud_rates=MappingProxyType(dict(sorted(cfg.baud_rates.items()))),
        indirect=tuple(IndirectBlock(b.first, b.count, b.address, b.data) for b in blocks),
        indirect_target=(tmin, tmax), watchdog_guarded=tuple(cfg.watchdog_guarded),
        mode_reset=tuple(cfg.mode_reset), mode_reset_to_limit=MappingProxyType(dict(cfg.mode_reset_to_limit)),
        mode_overrides=MappingProxyType({m: MappingProxyType(dict(v)) for m, v in cfg.mode_defaults.items()}),
        source=where,
    )


def _models_dir() -> Path:
    return catalog.config_dir() / "dynamixel"


def model_names() -> list[str]:
    """Names of the models in `config/dynamixel/` (honours $SERVO_HIL_CONFIG), sorted."""
    return model_files.model_names(_models_dir())


def load_model(name: str) -> ModelSpec:
    """The model `name` ("mx64", "mx106", "xm430_w350", "xh540_w270", "xl330_m288", ...).

    Reads `config/dynamixel/<name>.toml` and the SDK map it names; a bad file raises ConfigError naming
    the file and the key. Results are cached per file path and modification time.
    """
    return model_files.load_model_file(_models_dir(), name, "Dynamixel", _ModelFile, _build)
