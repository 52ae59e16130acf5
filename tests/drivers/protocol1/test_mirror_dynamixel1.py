"""Proxy mirror of a Dynamixel Protocol 1.0 bus: a second daemon plays the real AX-12A / MX-64 / MX-106 bus, an
unchanged dynamixel-sdk (PacketHandler 1.0) drives it through the mirror, the twins follow, both sides are logged and
`servo-hil report` reads the MCAP. Addresses: e-manual AX-12A / MX-64 Control Table (Protocol 1.0)."""

from __future__ import annotations

import math
import time

import dynamixel_sdk as sdk
import pytest

from servo_hil.daemon.zmq_io import request
from servo_hil.logs.mcap import read_side_by_side
from servo_hil.offline.report import report
from tests.daemon_process import cli_running
from tests.drivers.protocol1.dynamixel1_rig import AX, GOAL, MX64, PRESENT, TORQUE_ENABLE, SlackPortHandler, write_rig

OK = sdk.COMM_SUCCESS
MX_RAD = 2 * math.pi / 4096          # MX-64: 0.088° a step, 2048 at the middle (e-manual §Goal Position)


def _open(path: str):
    port = SlackPortHandler(path, 500.0)
    assert port.openPort() and port.setBaudRate(1_000_000)
    return port, sdk.PacketHandler(1.0)


def test_dynamixel_sdk_through_the_mirror_drives_the_real_servos_and_their_twins(tmp_path):
    real_rig, twin_rig = write_rig(tmp_path, "real"), write_rig(tmp_path, "twin")
    with cli_running(["run", str(real_rig.path), "--port", str(tmp_path / "real")], "at " + str(tmp_path / "real")):
        port, ph = _open(str(tmp_path / "real"))      # a previous program left the AX's torque on
        assert ph.write1ByteTxRx(port, AX, TORQUE_ENABLE[0], 1) == (OK, 0)
        port.closePort()
        with cli_running(["mirror", str(twin_rig.path), "--real", str(tmp_path / "real"), "--port",
                          str(tmp_path / "ctl"), "--record", str(tmp_path / "logs")], "mirroring"):
            port, ph = _open(str(tmp_path / "ctl"))
            assert ph.ping(port, MX64)[:2] == (310, OK)
            assert ph.write1ByteTxRx(port, MX64, TORQUE_ENABLE[0], 1) == (OK, 0)
            assert ph.write2ByteTxRx(port, MX64, GOAL[0], 2048 + 400) == (OK, 0)
            time.sleep(1.5)
            for _ in range(3):
                present, comm, error = ph.read2ByteTxRx(port, MX64, PRESENT[0])
                assert (comm, error) == (OK, 0)
            real_state, twin_state = (request(r.cmd, {"cmd": "state"})["state"] for r in (real_rig, twin_rig))
            port.closePort()
    goal = 400 * MX_RAD
    assert abs(present - (2048 + 400)) < 30                                          # the real servo got there
    assert real_state["mx64"]["goal"] == pytest.approx(goal, abs=2 * MX_RAD)
    assert twin_state["mx64"]["goal"] == pytest.approx(goal, abs=2 * MX_RAD)
    assert abs(twin_state["mx64"]["position"] - goal) < 0.05                         # and so did its twin
    assert twin_state["ax12a"]["enable"] and not twin_state["mx106"]["enable"]   # the AX's twin took its torque
    log = read_side_by_side(tmp_path / "logs")
    real_log, sim_log = log["/real/mx64/state"], log["/sim/mx64/state"]
    assert len(real_log) == len(sim_log) == 3
    assert [m["log_time_ns"] for m in real_log] == [m["log_time_ns"] for m in sim_log]
    assert real_log[-1]["position"] == pytest.approx((present - 2048) * MX_RAD)
    assert real_log[-1]["enable"] is True and "mode" not in real_log[-1]          # Protocol 1.0 has no mode register
    assert [e["reason"] for e in log["/bus/ax12a/events"]] == ["attach"]
    assert [m["data"] for m in log["/bus/mx64/commands"] if m["address"] == GOAL[0]] == [
        (2048 + 400).to_bytes(2, "little").hex()]
    doc = report(tmp_path / "logs", tmp_path / "report")
    assert {r["joint"] for r in doc["rows"]} == {"mx64"} and not doc["state_disagreements"]
