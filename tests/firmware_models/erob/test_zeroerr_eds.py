"""The project's description of the eRob (config/erob/objects.toml) against ZeroErr's own EDS: the same drive.
ZeroErr's "ZeroErr Driver_V1.5.eds" (as published in ZeroErrControl/eRob_CANopen_Python) is read from
`../shared/reference/erob/` beside the repository, imported by python-canopen. Every object in both has the same
index / sub-index, object kind, data type, access, PDO mapping and range, and the same power-up value wherever
ZeroErr gives one; the objects the project adds beyond ZeroErr's EDS are exactly those listed below with their
reason. The EDS `servo-hil actuator export` writes is compared the same way."""

from __future__ import annotations

from pathlib import Path

import canopen
import pytest
from canopen.objectdictionary import ODArray, ODRecord, ODVariable

from firmware_models.erob import object_dictionary as eod
from servo_hil.offline.actuator_export import canopen_eds

ROOT = Path(__file__).resolve().parents[3]
ZEROERR_EDS = ROOT.parent / "shared" / "reference" / "erob" / "ZeroErr Driver_V1.5.eds"
pytestmark = pytest.mark.skipif(not ZEROERR_EDS.is_file(),
                                reason="ZeroErr's EDS is not at ../shared/reference/erob/ (reference data absent)")

# objects the emulated drive answers beyond ZeroErr's CANopen EDS, and why (CiA 402-2 defines each)
ADDED = {
    0x605A: "quick stop option code: the quick stop reaction reads it",
    0x6063: "position actual internal value: used over EtherCAT by ZeroErr's pysoem demo",
    0x6066: "following error time out: the following-error check needs it with 0x6065",
    0x6072: "max torque: the torque clamp of every mode",
    0x608F: "position encoder resolution: the 524 288 counts per revolution ZeroErr's demos hard-code",
}
# a name the project corrects: ZeroErr's EDS names 0x1603 like 0x1602
RENAMED = {0x1603: ("Receive PDO 3 Mapping", "Receive PDO 4 Mapping")}
VARIANTS = ("erob80_100", "erob80_50")


def _kind(obj) -> str:
    return "record" if isinstance(obj, ODRecord) else "array" if isinstance(obj, ODArray) else "var"


def _variables(obj) -> list[ODVariable]:
    return [obj] if isinstance(obj, ODVariable) else list(obj.values())


def _facts(var: ODVariable) -> tuple:
    return var.data_type, var.access_type, var.pdo_mappable, var.min, var.max


def _same_drive(ours: canopen.ObjectDictionary, zeroerr: canopen.ObjectDictionary) -> None:
    """Every object of `zeroerr` is in `ours` with the same facts; `ours` adds exactly ADDED."""
    assert sorted(set(ours) - set(zeroerr)) == sorted(ADDED)
    assert set(zeroerr) - set(ours) == set()
    for index in zeroerr:
        theirs, mine = zeroerr[index], ours[index]
        assert _kind(mine) == _kind(theirs), hex(index)
        assert mine.name == RENAMED.get(index, (theirs.name, theirs.name))[1 if index in RENAMED else 0], hex(index)
        assert [v.subindex for v in _variables(mine)] == [v.subindex for v in _variables(theirs)], hex(index)
        for a, b in zip(_variables(mine), _variables(theirs), strict=True):
            where = f"0x{index:04X}:{a.subindex}"
            assert _facts(a) == _facts(b), where
            if index >= 0x1000:
                assert a.name == b.name or index in RENAMED, where
                if b.default is not None:
                    assert a.default == b.default, where


@pytest.mark.parametrize("node_id", [2, 127])
@pytest.mark.parametrize("variant", VARIANTS)
def test_description_and_zeroerr_eds_describe_the_same_drive(variant, node_id):
    zeroerr = canopen.import_od(str(ZEROERR_EDS), node_id)
    ours = eod.load_object_dictionary(variant, node_id)
    _same_drive(ours, zeroerr)
    info, theirs = ours.device_information, zeroerr.device_information
    for key in ("vendor_name", "vendor_number", "product_name", "product_number", "revision_number",
                "allowed_baudrates", "nr_of_RXPDO", "nr_of_TXPDO", "simple_boot_up_slave", "LSS_supported"):
        assert getattr(info, key) == getattr(theirs, key), key


def test_the_description_states_a_value_only_where_zeroerr_gives_one():
    """Where ZeroErr's EDS has a DefaultValue the description carries the same (`default`, node-relative where
    ZeroErr's is); where it has none, the value is the variant file's (cited there) or live, never a number typed in
    here; added objects say why."""
    node_id = 5
    zeroerr = canopen.import_od(str(ZEROERR_EDS), node_id)
    description = eod.load_description()
    for index, entry in description.objects.items():
        if index in ADDED:
            assert entry.added, hex(index)
            continue
        assert entry.added is None, hex(index)
        for sub in entry.subs if isinstance(entry, eod.Compound) else [entry]:
            var = zeroerr[index][sub.sub] if isinstance(entry, eod.Compound) else zeroerr[index]
            where = f"0x{index:04X}:{var.subindex}"
            if sub.variant is not None:
                continue            # a per-variant value (the identity, which ZeroErr also gives, among them)
            if var.default is None:
                assert sub.live, where
            else:
                assert sub.default + (node_id if sub.plus_node_id else 0) == var.default, where


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_exported_eds_and_zeroerr_eds_describe_the_same_drive(variant, tmp_path):
    path = tmp_path / f"{variant}.eds"
    canopen_eds(eod.load_config(variant).catalog, path)
    for node_id in (3, 126):
        _same_drive(canopen.import_od(str(path), node_id), canopen.import_od(str(ZEROERR_EDS), node_id))
