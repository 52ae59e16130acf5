"""The console's register grid for a Feetech STS3215, against a real daemon: rows decoded as the servo stores them
(little-endian, sign-magnitude), and edits that take the servo's own WRITE path, checked through scservo_sdk on the
same bus. Expected values come from the Feetech STS memory table (config/feetech/sts3215.toml cites it) and the
Lock rule of docs/feetech.md, never from the code under test."""

from __future__ import annotations

import time

import pytest
import scservo_sdk as scs

from tests.servo_hil.console.conftest import ScsSlackPort
from tests.servo_hil.console.test_console_api import fetch
from tests.servo_hil.daemon import free_port, rig_head
from tests.servo_hil.daemon.conftest import Launcher, RigFile


@pytest.fixture(scope="module")
def sts(tmp_path_factory):
    """(grid URL of the STS3215 `sts`, scservo_sdk (port, packet handler) on its bus)."""
    tmp = tmp_path_factory.mktemp("console-feetech")
    port, head = free_port(), rig_head("console-feetech")
    path = tmp / "rig.toml"
    path.write_text(head + f"""[console]
port = {port}
[[buses]]
name = "sts"
protocol = "feetech"
port = "{tmp / 'tty'}"
baud = 1000000
[[actuators]]
joint = "sts"
catalog = "sts3215"
model = "m1"
load = {{ mass = 0.1, length = 0.1 }}
bus = "sts"
id = 4
""")
    cmd = head.split('command = "')[1].split('"')[0]
    launcher = Launcher(tmp)
    try:
        daemon = launcher.start(RigFile(path, "console-feetech", "", cmd, None, ["sts"]), strict=True)
        deadline = time.monotonic() + 10
        while not (tmp / "tty").exists() and time.monotonic() < deadline and daemon.alive:
            time.sleep(0.05)
        assert (tmp / "tty").exists(), daemon.stderr()
        client = ScsSlackPort(str(tmp / "tty"))
        assert client.openPort() and client.setBaudRate(1_000_000)
        try:
            yield f"http://127.0.0.1:{port}/api/servo/sts", (client, scs.PacketHandler(0))
        finally:
            client.closePort()
    finally:
        launcher.finish()


def _rows(url: str) -> dict[str, dict]:
    status, table = fetch(url)
    assert status == 200, table
    return {r["name"]: r for r in table["rows"]}


def _write(url: str, name: str, value) -> tuple[int, dict]:
    return fetch(url + "/write", {"name": name, "value": value})


def test_the_grid_lists_the_memory_table(sts):
    url, _ = sts
    status, table = fetch(url)
    assert status == 200 and table["kind"] == "feetech" and table["id"] == 4
    assert table["model"] == "Feetech STS3215" and table["goal_item"] == "Goal_Position"
    rows = {r["name"]: r for r in table["rows"]}
    assert rows["Model_Number"]["value"] == 777 and not rows["Model_Number"]["writable"]
    assert (rows["Goal_Position"]["address"], rows["Goal_Position"]["size"]) == (42, 2)
    assert rows["ID"]["area"] == "EEPROM" and rows["Torque_Enable"]["area"] == "RAM"
    assert rows["Present_Voltage"]["value"] == 74 and rows["Present_Voltage"]["si"] == pytest.approx(7.4)
    assert rows["Lock"]["value"] == 1                          # memory table: Lock is 1 at power-up
    overview = fetch(url.rsplit("/servo/", 1)[0] + "/overview")[1]
    assert {a["joint"]: a["table"] for a in overview["actuators"]} == {"sts": "feetech"}


def test_edits_take_the_servos_write_path(sts):
    url, (port, ph) = sts
    reply = _write(url, "Torque_Enable", 1)[1]
    assert (reply["error"], reply["alert"], reply["status_text"]) == (0, False, "")    # no Status bit set
    assert _write(url, "Goal_Position", 2348)[1]["error"] == 0      # +300 steps from the middle
    # the servo went there: within 15 steps on five reads in a row (it overshoots by some 40 steps first, and a
    # single read on the way up could pass too early)
    deadline, near = time.monotonic() + 5, 0
    while near < 5 and time.monotonic() < deadline:
        near = near + 1 if abs(_rows(url)["Present_Position"]["value"] - 2348) <= 15 else 0
        time.sleep(0.05)
    assert near == 5, _rows(url)["Present_Position"]["value"]
    goal, comm, _ = ph.read2ByteTxRx(port, 4, 42)
    assert (comm, goal) == (scs.COMM_SUCCESS, 2348)                  # the bus serves the table the console wrote
    # Goal_Velocity is sign-magnitude (bit 15): −100 is stored as 0x8064 and shown as −100
    assert _write(url, "Goal_Velocity", -100)[1]["error"] == 0
    raw, comm, _ = ph.read2ByteTxRx(port, 4, 46)
    assert (comm, raw) == (scs.COMM_SUCCESS, 0x8064) and _rows(url)["Goal_Velocity"]["value"] == -100
    _write(url, "Goal_Velocity", 0)
    # a read-only item: the servo has no error bit to refuse it, and leaves the byte alone
    assert _write(url, "Model_Number", 1)[1]["error"] == 0 and _rows(url)["Model_Number"]["value"] == 777
    assert _write(url, "Torque_Enable", 0)[1]["error"] == 0 and fetch(url)[1]["torque"] == 0


def test_lock_decides_what_a_power_cycle_keeps(sts):
    url, (port, ph) = sts
    assert _write(url, "Max_Temperature_Limit", 60)[1]["error"] == 0      # Lock = 1: in effect, not saved
    assert _rows(url)["Max_Temperature_Limit"]["value"] == 60
    assert fetch(url + "/reboot", {})[1]["error"] == 0
    assert _rows(url)["Max_Temperature_Limit"]["value"] == 70
    _write(url, "Lock", 0)
    _write(url, "Max_Temperature_Limit", 65)                              # Lock = 0: saved
    _write(url, "Lock", 1)
    fetch(url + "/reboot", {})
    limit, comm, _ = ph.read1ByteTxRx(port, 4, 13)
    assert (comm, limit) == (scs.COMM_SUCCESS, 65) and _rows(url)["Max_Temperature_Limit"]["value"] == 65
    assert fetch(url + "/factory_reset", {})[1]["error"] == 0             # RESET: factory values but the ID
    rows = _rows(url)
    assert rows["Max_Temperature_Limit"]["value"] == 70 and rows["ID"]["value"] == 4


def test_bad_edits_are_one_line_errors(sts):
    url, _ = sts
    for name, value, says in (("No_Such_Item", 1, "no item 'No_Such_Item'"),
                              ("Goal_Position", 70000, "does not fit"),
                              ("Goal_Position", 40000, "does not fit"),     # beyond the 15-bit magnitude
                              ("Max_Temperature_Limit", -1, "does not fit"),
                              ("Torque_Enable", True, "integer"),
                              ("Torque_Enable", 1.5, "integer")):
        status, reply = _write(url, name, value)
        assert status == 400 and says in reply["error"] and "\n" not in reply["error"], (name, value, reply)
    status, reply = fetch(url + "/spin", {})
    assert status == 400 and "unknown servo action 'spin'" in reply["error"]
