"""The EDS a python-canopen user loads for the simulated eRobs: `servo-hil actuator export <variant> --eds OUT.eds`.
The file is read back by python-canopen's own importer and must give the drive's object dictionary for any node ID;
then the README's CANopen flow (tour step 7: BaseNode402, setup_402_state_machine, op_mode, state, a
profiled-position move) runs on a daemon with it, and with ZeroErr's own EDS from `../shared/reference/erob/` where
that is present. Expected values: the README's step 7 (target 52 429 counts, identity "Zero"), canopen 2.4.1's
BaseNode402 warnings (profiles/p402.py), config/erob/*.toml."""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path

import canopen
import pytest
from canopen.objectdictionary import ODVariable

from firmware_models.erob.object_dictionary import load_object_dictionary
from tests.daemon_process import SERVO_HIL, assert_one_cli_line

from .conftest import NODE_IDS, ROOT, VARIANT, connect, patient, write_can_rig

ZEROERR_EDS = ROOT.parent / "shared" / "reference" / "erob" / "ZeroErr Driver_V1.5.eds"
TARGET = 52_429          # README step 7: +36° at 524 288 counts/rev


def _flat(od: canopen.ObjectDictionary) -> dict[tuple[int, int], tuple]:
    out = {}
    for obj in od.values():
        for var in [obj] if isinstance(obj, ODVariable) else obj.values():
            out[(var.index, var.subindex)] = (type(obj).__name__, var.name, var.data_type, var.access_type,
                                              var.pdo_mappable, var.default, var.min, var.max)
    return out


@pytest.mark.parametrize("node_id", [1, 2, 3, 127])
def test_the_exported_eds_reads_back_as_the_drives_dictionary(eds, node_id):
    """One file per variant serves every node ID: the COB-IDs are written relative to the node ($NODEID)."""
    for exported in set(eds.values()):
        variant = next(VARIANT[n] for n in NODE_IDS if eds[n] == exported)
        text = Path(exported).read_text()
        assert "DefaultValue=$NODEID+0x180" in text and "DefaultValue=$NODEID+0x600" in text
        theirs = canopen.import_od(exported, node_id)
        assert _flat(theirs) == _flat(load_object_dictionary(variant, node_id))
        assert theirs[0x1800][1].default == 0x180 + node_id
        assert theirs.device_information.allowed_baudrates == {1_000_000}


def test_export_of_an_actuator_that_is_not_a_canopen_drive_is_one_line(tmp_path):
    res = subprocess.run([*SERVO_HIL, "actuator", "export", "mx64", "--eds", str(tmp_path / "mx64.eds")],
                         capture_output=True, text=True, timeout=120)
    assert_one_cli_line(res, "--eds", "mx64 is not a CANopen drive", "erob80_100", "erob80_50")
    assert not (tmp_path / "mx64.eds").exists()


P402_WARNINGS = [
    "Operation Mode not configured in node 2's PDOs. Using SDOs can cause slow performance.",
    "Operation Mode Display not configured in node 2's PDOs. Using SDOs can cause slow performance.",
    "The object 0x6061 is not a configured TPDO, fallback to SDO",
]


def _readme_flow(port: str, eds_file: str) -> tuple[str, int]:
    """README step 7's snippet on a fresh daemon, with canopen's waits made patient for a loaded host and the fixed
    2 s wait turned into a wait for the position: (identity, final position)."""
    net = canopen.Network()
    connect(net, port)
    try:
        node = patient(canopen.BaseNode402(2, eds_file))
        net.add_node(node)
        identity = hex(node.sdo[0x1018][1].raw)
        node.nmt.state = "PRE-OPERATIONAL"
        node.setup_402_state_machine()
        node.nmt.state = "OPERATIONAL"
        node.op_mode = "PROFILED POSITION"
        node.state = "OPERATION ENABLED"
        node.sdo[0x6081].raw = 52_429
        node.sdo[0x6083].raw = node.sdo[0x6084].raw = 524_288
        node.sdo[0x607A].raw = TARGET
        node.controlword = 0x1F
        end = time.monotonic() + 10.0
        while abs((position := node.sdo[0x6064].raw) - TARGET) > 1000 and time.monotonic() < end:
            time.sleep(0.1)
        node.state = "SWITCH ON DISABLED"
        return identity, position
    finally:
        net.disconnect()


@pytest.mark.parametrize("which", ["exported", "zeroerr"])
def test_the_readme_canopen_flow(module_launcher, eds, which, caplog):
    """BaseNode402 finds what it needs in the EDS (TPDO1's statusword, the modes, the objects of a PP move) and
    moves node 2 to the target; python-canopen warns exactly three times that the mode objects are not in a PDO."""
    if which == "zeroerr" and not ZEROERR_EDS.is_file():
        pytest.skip("ZeroErr's EDS is not at ../shared/reference/erob/ (reference data absent)")
    eds_file = eds[2] if which == "exported" else str(ZEROERR_EDS)
    daemon = module_launcher.start(write_can_rig(module_launcher.dir, f"readme-{which}"))
    with caplog.at_level(logging.WARNING, logger="canopen"):
        identity, position = _readme_flow(daemon.rig.port, eds_file)
    assert daemon.terminate() == 0
    assert identity == "0x5a65726f"
    assert abs(position - TARGET) < 1000, position
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("canopen") and r.levelno == logging.WARNING]
    assert warnings == P402_WARNINGS
