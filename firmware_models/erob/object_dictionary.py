"""The eRob's CANopen object dictionary as python-canopen's `ObjectDictionary`, built from the project's own
description of the drive (config/erob/objects.toml) and a variant's values (config/erob/<variant>.toml); the
files and their sources are described in docs/protocols/canopen.md."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Literal

from canopen.objectdictionary import ObjectDictionary, ODArray, ODRecord, ODVariable, datatypes
from pydantic import Field, model_validator

from hil.params.catalog import Sourced, config_dir
from hil.params.config_file import ConfigError, Strict, read_toml, validate

U8, U16, U32 = 0xFF, 0xFFFF, 0xFFFF_FFFF
I8, I16, I32 = 0x7F, 0x7FFF, 0x7FFF_FFFF


class _Section(Sourced):
    """A table of numbers with a `source` and per-key `sources` that must name keys of the table."""

    @model_validator(mode="after")
    def _sources_name_keys(self):
        unknown = sorted(set(self.sources) - set(type(self).model_fields) - {"source", "sources"})
        if unknown:
            raise ValueError(f"sources names unknown keys: {', '.join(unknown)}")
        return self


class Identity(_Section):
    """0x1018 identity object."""

    vendor_id: int = Field(ge=0, le=U32)
    product_code: int = Field(ge=0, le=U32)
    revision_number: int = Field(ge=0, le=U32)


class Units(_Section):
    """Encoder and gear: how SI maps to the drive's counts."""

    encoder_counts: int = Field(gt=0, le=I32, description="output-encoder counts per output revolution")
    zero_counts: int = Field(ge=-I32 - 1, le=I32, description="0x6064 at θ = 0 rad")
    gear_ratio: float = Field(gt=0, description="nameplate reduction")
    motor_revs_per_output_rev: float = Field(gt=0, description="motor revolutions per output revolution")
    motor_encoder_counts: int = Field(gt=0, le=I32, description="0x2240 counts per motor revolution")


class Ratings(_Section):
    """Rated values and limits."""

    rated_current_ma: int = Field(gt=0, le=U32)          # 0x6075
    rated_torque_mnm: int = Field(gt=0, le=U32)          # 0x6076
    max_torque_permille: int = Field(ge=0, le=U16)       # 0x6072
    max_profile_velocity: int = Field(ge=100, le=U32)    # 0x607F (EDS LowLimit 100)
    max_motor_speed_rpm: int = Field(ge=10, le=U32)      # 0x6080 (EDS LowLimit 10)
    dc_link_min_v: float = Field(ge=0)
    dc_link_max_v: float = Field(gt=0)

    @model_validator(mode="after")
    def _band(self):
        if not self.dc_link_min_v < self.dc_link_max_v:
            raise ValueError("dc_link_min_v must be below dc_link_max_v")
        return self


class Defaults(_Section):
    """Objects ZeroErr's EDS leaves without a DefaultValue, and two it does not list (0x605A, 0x6066)."""

    following_error_window: int = Field(ge=0, le=I32)     # 0x6065 I32 in the EDS
    following_error_time_ms: int = Field(ge=0, le=U16)    # 0x6066 U16 (added)
    position_window_time_ms: int = Field(ge=0, le=I16)    # 0x6068 I16 in the EDS
    velocity_window_time_ms: int = Field(ge=0, le=I16)    # 0x606E I16 in the EDS
    velocity_threshold: int = Field(ge=0, le=U16)         # 0x606F U16
    torque_slope: int = Field(ge=0, le=U32)               # 0x6087 U32
    interpolation_time_units: int = Field(ge=0, le=U8)    # 0x60C2:1 U8
    interpolation_time_index: int = Field(ge=-128, le=I8)  # 0x60C2:2 I8
    velocity_error_window: int = Field(ge=0, le=U32)      # 0x3B60 U32
    quick_stop_option: int = Field(ge=-32768, le=I16)     # 0x605A I16 (added)
    save_all_parameters: int = Field(ge=0, le=U32)        # 0x1010:1 U32


class Loop(_Section):
    """Gains of the drive's position loop as the kernel's erob_pd law runs it."""

    kp: float = Field(gt=0, description="[A/rad]")
    damping: float = Field(ge=0, description="D = damping·√kp [A·s/rad]")
    ki: float = Field(ge=0, description="[A/(rad·s)]")


class ErobConfig(Strict):
    """`config/erob/<variant>.toml`."""

    name: str
    title: str
    catalog: str = Field(description="the actuator catalog entry (config/actuators/) the kernel simulates")
    identity: Identity
    units: Units
    ratings: Ratings
    defaults: Defaults
    loop: Loop


DESCRIPTION = "objects.toml"   # config/erob/: the drive's objects; every other .toml there is a variant

# CiA 301 basic data types the description may name (the EDS's DataType numbers)
DATA_TYPES: dict[str, int] = {name: getattr(datatypes, name) for name in (
    "BOOLEAN", "INTEGER8", "INTEGER16", "INTEGER32", "UNSIGNED8", "UNSIGNED16", "UNSIGNED32")}
_BITS = {"BOOLEAN": 1, "INTEGER8": 8, "INTEGER16": 16, "INTEGER32": 32, "UNSIGNED8": 8, "UNSIGNED16": 16,
         "UNSIGNED32": 32}
_SECTIONS = ("identity", "units", "ratings", "defaults")    # the variant file's tables an object may take a value from


def _type_range(type_name: str) -> tuple[int, int]:
    bits = _BITS[type_name]
    if type_name.startswith("INTEGER"):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _variant_keys() -> set[str]:
    return {f"{s}.{k}" for s in _SECTIONS for k, f in ErobConfig.model_fields[s].annotation.model_fields.items()
            if f.annotation is int}


class Variable(Strict):
    """One variable of the description: a top-level object or a sub-index of a record or array."""

    name: str = Field(min_length=1)
    type: Literal["BOOLEAN", "INTEGER8", "INTEGER16", "INTEGER32", "UNSIGNED8", "UNSIGNED16", "UNSIGNED32"]
    access: Literal["ro", "wo", "rw", "rwr", "rww", "const"]
    pdo: bool = Field(default=False, description="PDO-mappable")
    default: int | None = Field(default=None, description="power-up value")
    plus_node_id: bool = Field(default=False, description="the power-up value is default + the node ID")
    variant: str | None = Field(default=None, description="`section.key` of config/erob/<variant>.toml")
    live: bool = Field(default=False, description="0 at power-up; the drive writes it, or the master does")
    min: int | None = None
    max: int | None = None

    @model_validator(mode="after")
    def _one_value(self):
        given = [k for k, on in (("default", self.default is not None), ("variant", self.variant is not None),
                                 ("live", self.live)) if on]
        if len(given) != 1:
            raise ValueError(f"give exactly one of default, variant, live (got {', '.join(given) or 'none'})")
        if self.plus_node_id and self.default is None:
            raise ValueError("plus_node_id needs a default")
        if self.variant is not None and self.variant not in _variant_keys():
            raise ValueError(f"variant {self.variant!r} is not an integer key of the variant files "
                             f"({', '.join(_SECTIONS)})")
        lo, hi = _type_range(self.type)
        for key in ("default", "min", "max"):
            value = getattr(self, key)
            if value is not None and not lo <= value + (127 if key == "default" and self.plus_node_id else 0) <= hi:
                raise ValueError(f"{key} {value} is outside {self.type} ({lo}..{hi})")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self


class SubIndex(Variable):
    sub: int = Field(ge=0, le=255)
    source: str | None = Field(default=None, min_length=3, description="where it differs from its object's")


class Compound(Strict):
    """A record or array and its sub-indices (sub 0 first)."""

    name: str = Field(min_length=1)
    object: Literal["record", "array"]
    source: str = Field(min_length=3)
    added: str | None = Field(default=None, min_length=3, description="why the drive answers an object ZeroErr's "
                                                                       "EDS does not list")
    subs: list[SubIndex] = Field(min_length=2)

    @model_validator(mode="after")
    def _subs(self):
        numbers = [s.sub for s in self.subs]
        if numbers[0] != 0 or sorted(set(numbers)) != numbers:
            raise ValueError(f"subs must start at sub 0 and rise without repeats, got {numbers}")
        if self.subs[0].type != "UNSIGNED8":
            raise ValueError("sub 0 (the number of entries) must be UNSIGNED8")
        return self


class TopVariable(Variable):
    source: str = Field(min_length=3)
    added: str | None = Field(default=None, min_length=3, description="why the drive answers an object ZeroErr's "
                                                                      "EDS does not list")


class Device(Sourced):
    """The EDS's [DeviceInfo] and [DummyUsage] facts."""

    vendor_name: str = Field(min_length=1)
    product_name: str = Field(min_length=1)
    baud_rates_kbit: list[Literal[10, 20, 50, 125, 250, 500, 800, 1000]] = Field(min_length=1)
    rx_pdos: int = Field(ge=0, le=512)
    tx_pdos: int = Field(ge=0, le=512)
    simple_boot_up_slave: bool
    granularity: int = Field(ge=0, le=64)
    dummy_types: list[int] = Field(description="data types (0x0001..0x0007) usable as RPDO dummy entries")

    @model_validator(mode="after")
    def _dummies(self):
        if not all(1 <= t <= 7 for t in self.dummy_types):
            raise ValueError("dummy_types are CiA 301 data type numbers 1..7")
        return self


class Description(Strict):
    """`config/erob/objects.toml` once each object's table is validated."""

    device: Device
    objects: dict[int, TopVariable | Compound]


def erob_dir() -> Path:
    return config_dir() / "erob"


def variants() -> list[str]:
    """Variant names (config/erob/*.toml but the description), sorted."""
    return sorted(p.stem for p in erob_dir().glob("*.toml") if p.name != DESCRIPTION)


@cache
def _description(path: Path) -> Description:
    data = read_toml(path)
    device = validate(Device, data.pop("device", {}), f"{path}: device")
    tables = data.pop("objects", {})
    if data:
        raise ConfigError(f"{path}: {sorted(data)[0]}: unknown key (the file has [device] and [objects.0xIIII])")
    if not tables:
        raise ConfigError(f"{path}: objects: no object described")
    objects: dict[int, TopVariable | Compound] = {}
    for key, table in tables.items():
        if not re.fullmatch(r"0x[0-9A-F]{4}", key) or int(key, 16) < 0x1000:
            raise ConfigError(f"{path}: objects.{key}: an object index is 0x1000..0xFFFF as 0xIIII (upper-case hex)")
        model = Compound if isinstance(table, dict) and "object" in table else TopVariable
        objects[int(key, 16)] = validate(model, table, f"{path}: objects.{key}")
    return Description(device=device, objects=objects)


def load_description() -> Description:
    """`config/erob/objects.toml`, validated; errors name the file, the object and the key."""
    return _description(erob_dir() / DESCRIPTION)


@cache
def load_config(variant: str) -> ErobConfig:
    """`config/erob/<variant>.toml`, validated; errors name the file and the key."""
    path = erob_dir() / f"{variant}.toml"
    if variant == Path(DESCRIPTION).stem or not path.exists():
        raise ConfigError(f"unknown eRob variant {variant!r}; config/erob has: {', '.join(variants()) or 'none'}")
    return validate(ErobConfig, read_toml(path), str(path))


def _variable(entry: Variable, name: str, index: int, subindex: int, node_id: int, config: ErobConfig,
              where: str) -> ODVariable:
    var = ODVariable(name, index, subindex)
    var.data_type = DATA_TYPES[entry.type]
    var.access_type = entry.access
    var.pdo_mappable = entry.pdo
    var.min, var.max = entry.min, entry.max
    if entry.variant is not None:
        section, key = entry.variant.split(".")
        value = getattr(getattr(config, section), key)
        lo, hi = _type_range(entry.type)
        if not lo <= value <= hi:
            raise ConfigError(f"{where}: {entry.variant} = {value} does not fit 0x{index:04X}:{subindex} "
                              f"{entry.type} ({lo}..{hi})")
    elif entry.live:
        value = 0
    else:
        value = entry.default + (node_id if entry.plus_node_id else 0)
    var.default = value
    # the EDS text of the value (canopen's exporter writes default_raw as it is): node-relative COB-IDs keep
    # $NODEID so that one EDS serves any node ID (CiA 306); negative values in decimal, which canopen reads back
    var.relative = entry.plus_node_id
    if entry.plus_node_id:
        var.default_raw = f"$NODEID+0x{entry.default:X}"
    else:
        var.default_raw = f"0x{value:X}" if value > 9 else str(value)
    return var


def load_object_dictionary(variant: str, node_id: int) -> ObjectDictionary:
    """The eRob `variant` as node `node_id` (1..127): every object of config/erob/objects.toml with its
    power-up value."""
    if not 1 <= node_id <= 127:
        raise ValueError(f"node_id must be 1..127, got {node_id}")
    config = load_config(variant)
    description = load_description()
    where = str(erob_dir() / f"{variant}.toml")
    od = ObjectDictionary()
    od.node_id = node_id
    info = od.device_information
    device = description.device
    info.vendor_name, info.product_name = device.vendor_name, device.product_name
    info.vendor_number = config.identity.vendor_id
    info.product_number = config.identity.product_code
    info.revision_number = config.identity.revision_number
    info.allowed_baudrates = {rate * 1000 for rate in device.baud_rates_kbit}
    info.nr_of_RXPDO, info.nr_of_TXPDO = device.rx_pdos, device.tx_pdos
    info.simple_boot_up_master, info.simple_boot_up_slave = False, device.simple_boot_up_slave
    info.granularity, info.dynamic_channels_supported = device.granularity, False
    info.group_messaging, info.LSS_supported = False, False
    for data_type in device.dummy_types:     # CiA 306: the data types an RPDO map may name as dummy entries
        dummy = ODVariable(f"Dummy{data_type:04d}", data_type, 0)
        dummy.data_type, dummy.access_type = data_type, "const"
        od.add_object(dummy)
    for index, entry in sorted(description.objects.items()):
        if isinstance(entry, Compound):
            compound = ODRecord(entry.name, index) if entry.object == "record" else ODArray(entry.name, index)
            for sub in entry.subs:
                compound.add_member(_variable(sub, sub.name, index, sub.sub, node_id, config, where))
            od.add_object(compound)
        else:
            od.add_object(_variable(entry, entry.name, index, 0, node_id, config, where))
    return od

