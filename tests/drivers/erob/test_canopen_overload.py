"""A spent i²t budget and the drive temperature, against the real, unchanged python-canopen 2.4.1 / python-can 4.6.1
on the daemon's SLCAN pty. Expected values: CiA 301 §7.2.7 (EMCY: error code, error register 0x1001), CiA 301 error
code 0x2310 (continuous over-current), CiA 402-2 fault reaction option 0x605E (the EDS default 2: quick-stop ramp,
then Fault), the EDS's 0x22A2 (UNSIGNED16, °C), the budget's closed form (4² − 2²) A² × 0.2 s spent at
(4² − 2²) A² per second."""

from __future__ import annotations

import shutil
import time

import canopen
import pytest

from .conftest import ROOT, CanLauncher, connect, patient, write_can_rig
from .test_canopen import enable_by_sdo, expect_emcy, fault_reset_by_sdo, reset_nodes, state_of, wait_status

LOCKED = "{ inertia = 1000.0 }"
ACTUATORS = (("erob100", "erob80_100", 2, LOCKED), ("erob50", "erob80_50", 3, LOCKED))
I_CONT, I_PEAK, T_PEAK = 2.0, 4.0, 0.2
EMCY_OVERCURRENT = 0x2310
REG_GENERIC, REG_CURRENT = 0x01, 0x02
SW_FAULT_BIT = 0x0008


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """A daemon on a copy of config/ ($SERVO_HIL_CONFIG) in which the eRob80:100 (node 2) has a continuous current
    of 2 A with a 4 A peak for 0.2 s (MuJoCo DC motor model §1.1) and a housing thermal node (R_th2 1.0 K/W,
    C2 300 J/K, §1.3); the eRob80:50 (node 3) is the catalog's, one thermal node. Both are locked by a 1000 kg·m²
    load and power up with the winding at 60 °C."""
    config = tmp_path_factory.mktemp("config") / "config"
    shutil.copytree(ROOT / "config", config)
    path = config / "actuators" / "erob80_100.toml"
    text = path.read_text()
    old = "saturation = [0.0, 12.0]"
    assert old in text
    path.write_text(text.replace(old, f"saturation = [0.0, {I_CONT}]\npeak = [{I_PEAK}, {T_PEAK}]\n"
                                      "thermal2 = [1.0, 300.0]"))
    launcher = CanLauncher(tmp_path_factory.mktemp("can"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVO_HIL_CONFIG", str(config))
        d = launcher.start(write_can_rig(launcher.dir, "canopen-overload", actuators=ACTUATORS,
                                         actuator_extra="initial = { temperature_c = 60.0 }\n"))
    yield d
    launcher.finish()


@pytest.fixture(scope="module")
def nodes(daemon, eds):
    network = connect(canopen.Network(), daemon.rig.port)
    out = {}
    for node_id in (2, 3):
        node = patient(canopen.BaseNode402(node_id, eds[node_id]))
        network.add_node(node)
        out[node_id] = node
    yield out
    network.disconnect()


def test_drive_temperature_reads_the_housing_with_two_thermal_nodes(daemon, nodes):
    """0x22A2 by SDO: node 2 (two nodes) reads its housing, still near the 25 °C ambient it powered up at, while
    the winding is at 60 °C; node 3 (one node) reads the winding."""
    housing = nodes[2].sdo[0x22A2].raw
    winding = nodes[3].sdo[0x22A2].raw
    state = daemon.ok("state")["state"]
    assert 25 <= housing <= 27, housing
    assert abs(housing - state["erob100"]["temperature"]) <= 1, "the kernel's published (housing) temperature"
    assert 58 <= winding <= 60, winding
    assert abs(winding - state["erob50"]["temperature"]) <= 1


def test_spent_budget_sends_emcy_2310_and_faults(daemon, nodes):
    """CST at 2000 ‰ of 31 N·m (6.6 A with bam m6's K) asks more than the 4 A peak: the peak flows for 0.2 s,
    then EMCY 0x2310 with 0x1001 bits 0 and 1 (generic, current), 0x603F and the history hold 0x2310, and the
    drive reaches Fault through the 0x605E = 2 ramp; fault reset clears it with EMCY 0x0000."""
    node = nodes[2]
    network = node.network
    reset_nodes(network, ids=(2,))
    assert node.sdo[0x605E].raw == 2
    enable_by_sdo(node, 10)
    t0 = []

    def full_torque():
        t0.append(time.monotonic())
        node.sdo[0x6071].raw = 2000

    emcy = expect_emcy(node, EMCY_OVERCURRENT, full_torque)
    assert emcy.register == REG_GENERIC | REG_CURRENT
    assert emcy.timestamp - t0[0] >= T_PEAK - 0.02, "not before the budget is spent"
    sw, _ = wait_status(node, lambda sw: state_of(sw) == "FAULT")
    assert sw & SW_FAULT_BIT
    assert node.sdo[0x603F].raw == EMCY_OVERCURRENT
    assert node.sdo[0x1001].raw == REG_GENERIC | REG_CURRENT
    assert node.sdo[0x1003][1].raw & 0xFFFF == EMCY_OVERCURRENT
    assert node.sdo[0x6078].raw == 0, "Fault: torque off, no current"
    assert daemon.ok("state")["state"]["erob100"]["enable"] is False
    node.sdo[0x6071].raw = 0
    fault_reset_by_sdo(node)
