"""The eRob's CANopen object dictionary: ZeroErr's EDS plus the values it leaves open.

`load_object_dictionary(variant, node_id)` imports the vendor EDS ("ZeroErr Driver_V1.5.eds", kept in
`config/erob/`) with python-canopen's importer, then fills in what the EDS does not give:

- objects the EDS lists without a DefaultValue (ZeroErr Driver_V1.5.eds): canopen's `LocalNode` would answer
  an upload of these with abort 0x060A0023. Configurable ones (rated current 0x6075, rated torque 0x6076,
  windows, slopes, …) come from `config/erob/<variant>.toml`, every number with its source there; the
  live ones (actual values, demands, targets, controlword, error code, …) start at 0 and the CiA 402 drive
  (`firmware_models/erob/cia402/`) overwrites them at every tick;
- the identity 0x1018:1..3 from the same file (the EDS carries them too; a variant may differ);
- CiA 402 objects the CANopen EDS lacks but that the drive model uses (the first ones are used over EtherCAT:
  ESI "ZeroErr Driver_V3.2.0.xml", eRob_pysoem_demo `pysoem_cst.py`): 0x605A quick stop option code,
  0x6063 position actual internal value, 0x6066 following error time out, 0x6072 max torque, 0x608F position
  encoder resolution. Accepting them is our choice; ZeroErr publishes no behaviour of its CANopen firmware
  for them.

`default_values(od)` flattens a dictionary into the plain `{(index, subindex): int}` store the drive keeps.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import canopen
from canopen.objectdictionary import (
    INTEGER16,
    INTEGER32,
    UNSIGNED8,
    UNSIGNED16,
    UNSIGNED32,
    ObjectDictionary,
    ODArray,
    ODRecord,
    ODVariable,
)
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
    """Objects the EDS leaves without a DefaultValue (data types as the EDS declares them)."""

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
    """Gains of the drive's position loop as the kernel's erob_pd law runs it (cia402.py)."""

    kp: float = Field(gt=0, description="[A/rad]")
    damping: float = Field(ge=0, description="D = damping·√kp [A·s/rad]")
    ki: float = Field(ge=0, description="[A/(rad·s)]")


class ErobConfig(Strict):
    """`config/erob/<variant>.toml`."""

    name: str
    title: str
    catalog: str = Field(description="the actuator catalog entry (config/actuators/) the kernel simulates")
    eds: str = Field(description="EDS file name, relative to config/erob/")
    identity: Identity
    units: Units
    ratings: Ratings
    defaults: Defaults
    loop: Loop

    @property
    def eds_path(self) -> Path:
        return erob_dir() / self.eds


# (section, key) → the object it seeds
CONFIG_OBJECTS: dict[tuple[str, str], tuple[int, int]] = {
    ("identity", "vendor_id"): (0x1018, 1),
    ("identity", "product_code"): (0x1018, 2),
    ("identity", "revision_number"): (0x1018, 3),
    ("units", "encoder_counts"): (0x608F, 1),
    ("ratings", "rated_current_ma"): (0x6075, 0),
    ("ratings", "rated_torque_mnm"): (0x6076, 0),
    ("ratings", "max_torque_permille"): (0x6072, 0),
    ("ratings", "max_profile_velocity"): (0x607F, 0),
    ("ratings", "max_motor_speed_rpm"): (0x6080, 0),
    ("defaults", "following_error_window"): (0x6065, 0),
    ("defaults", "following_error_time_ms"): (0x6066, 0),
    ("defaults", "position_window_time_ms"): (0x6068, 0),
    ("defaults", "velocity_window_time_ms"): (0x606E, 0),
    ("defaults", "velocity_threshold"): (0x606F, 0),
    ("defaults", "torque_slope"): (0x6087, 0),
    ("defaults", "interpolation_time_units"): (0x60C2, 1),
    ("defaults", "interpolation_time_index"): (0x60C2, 2),
    ("defaults", "velocity_error_window"): (0x3B60, 0),
    ("defaults", "quick_stop_option"): (0x605A, 0),
    ("defaults", "save_all_parameters"): (0x1010, 1),
}

# Objects whose value is live: a command that starts at zero, or a value the drive computes at every tick.
LIVE_OBJECTS: tuple[int, ...] = (
    0x20A0, 0x2205, 0x2240, 0x2241, 0x22A2, 0x3B69,                  # manufacturer: positions, analog, temperature
    0x603F, 0x6040, 0x6041,                                          # error code, controlword, statusword
    0x6063, 0x6064, 0x606B, 0x606C, 0x6071, 0x6074, 0x6077, 0x6078,  # actual values, demands, target torque
    0x6079, 0x60B0, 0x60B1, 0x60B2, 0x60F4, 0x60FD,                  # DC link, offsets, following error, inputs
)

# CiA 402 objects the CANopen EDS lacks: (index, subindex, name, data type, access, PDO-mappable).
# Sub-indices > 0 make a record (sub 0 = highest sub-index, const).
EXTRA_OBJECTS: tuple[tuple[int, int, str, int, str, bool], ...] = (
    (0x605A, 0, "Quick stop option code", INTEGER16, "rw", False),
    (0x6063, 0, "Position actual internal value", INTEGER32, "ro", True),
    (0x6066, 0, "Following error time out", UNSIGNED16, "rw", True),
    (0x6072, 0, "Max torque", UNSIGNED16, "rw", True),
    (0x608F, 1, "Encoder increments", UNSIGNED32, "ro", False),
    (0x608F, 2, "Motor revolutions", UNSIGNED32, "ro", False),
)
_EXTRA_RECORDS = {0x608F: "Position encoder resolution"}
ENCODER_MOTOR_REVOLUTIONS = 1   # 0x608F:2: the 19-bit encoder sits on the output shaft (eRob user manual, third-hand)


def erob_dir() -> Path:
    return config_dir() / "erob"


def variants() -> list[str]:
    """Variant names (config/erob/*.toml), sorted."""
    return sorted(p.stem for p in erob_dir().glob("*.toml"))


@cache
def load_config(variant: str) -> ErobConfig:
    """`config/erob/<variant>.toml`, validated; errors name the file and the key."""
    path = erob_dir() / f"{variant}.toml"
    if not path.exists():
        raise ConfigError(f"unknown eRob variant {variant!r}; config/erob has: {', '.join(variants()) or 'none'}")
    config = validate(ErobConfig, read_toml(path), str(path))
    if not config.eds_path.is_file():
        raise ConfigError(f"{path}: eds: no such file {config.eds_path}")
    return config


def _add_extra_objects(od: ObjectDictionary) -> None:
    for index, subindex, name, data_type, access, pdo in EXTRA_OBJECTS:
        var = ODVariable(name, index, subindex)
        var.data_type, var.access_type, var.pdo_mappable, var.default = data_type, access, pdo, 0
        if subindex == 0:
            if index not in od:
                od.add_object(var)
            continue
        if index not in od:
            record = ODRecord(_EXTRA_RECORDS[index], index)
            count = ODVariable("Highest sub-index supported", index, 0)
            count.data_type, count.access_type = UNSIGNED8, "const"
            record.add_member(count)
            od.add_object(record)
        record = od[index]
        if subindex not in record:
            record.add_member(var)
        record[0].default = max(s for s in record.subindices if s > 0)


def _variables(od: ObjectDictionary):
    for obj in od.values():
        if obj.index < 0x1000:      # DummyUsage data types
            continue
        if isinstance(obj, ODVariable):
            yield obj
        else:
            assert isinstance(obj, (ODRecord, ODArray))
            yield from obj.values()


def load_object_dictionary(variant: str, node_id: int) -> ObjectDictionary:
    """ZeroErr's EDS for node `node_id` (1..127) with every object given a value, for `variant`."""
    if not 1 <= node_id <= 127:
        raise ValueError(f"node_id must be 1..127, got {node_id}")
    config = load_config(variant)
    od = canopen.import_od(str(config.eds_path), node_id)
    od.node_id = node_id
    _add_extra_objects(od)
    for (section, key), (index, subindex) in CONFIG_OBJECTS.items():
        var = od[index] if isinstance(od[index], ODVariable) else od[index][subindex]
        var.default = getattr(getattr(config, section), key)
    od[0x608F][2].default = ENCODER_MOTOR_REVOLUTIONS
    for index in LIVE_OBJECTS:
        var = od[index]
        if var.default is None:
            var.default = 0
    missing = [f"0x{v.index:04X}:{v.subindex}" for v in _variables(od) if v.default is None]
    if missing:
        raise ConfigError(f"{config.eds_path}: objects without a value: {', '.join(missing)}")
    return od


def default_values(od: ObjectDictionary) -> dict[tuple[int, int], int]:
    """{(index, subindex): default} of every object of `od` (the drive's plain object store)."""
    return {(v.index, v.subindex): int(v.default) for v in _variables(od)}
