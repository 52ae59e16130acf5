"""The `plug` command, through the vendors' own clients: a servo whose cable is pulled neither hears nor answers
(its neighbours do), goes limp with its supply, and powers up with RAM at its defaults and EEPROM kept when the
cable is plugged back in — as `lerobot-setup-motors` needs to find servos one at a time."""

from __future__ import annotations

import dynamixel_sdk as sdk
import pytest
import scservo_sdk as scs

from tests.drivers.dynamixel.conftest import MODEL, A, DxlLauncher, open_dxl, write_dxl_rig
from tests.drivers.protocol1.conftest import StsLauncher, write_sts_rig

TORQUE_ENABLE, GOAL_POSITION, PRESENT_POSITION, ID = 40, 42, 56, 5   # STS memory table


def test_a_pulled_dynamixel_cable(launcher):
    d = launcher.start(write_dxl_rig(launcher.dir, "plug-dxl", fast=True, lockstep=True))
    with open_dxl(d.rig.port) as x:
        x.write(3, A.RETURN_DELAY, 10)                     # EEPROM
        x.write(3, A.TORQUE_ENABLE, 1)                     # RAM
        assert d.ok("plug", actuator="xm430", connected=False) == {"ok": True, "connected": False}
        assert x.ping(3)[1] == sdk.COMM_RX_TIMEOUT
        assert x.ping(1)[:2] == (MODEL[1], sdk.COMM_SUCCESS)
        x.try_write(3, A.LED, 1)                           # unheard
        state = d.ok("state", actuator="xm430")["state"]["xm430"]
        assert "unplugged" in state["faults"] and not state["enable"]
        assert d.ok("plug", actuator="xm430", connected=True)["connected"] is True
        assert x.ping(3)[:2] == (MODEL[3], sdk.COMM_SUCCESS)
        assert x.read(3, A.TORQUE_ENABLE) == 0 and x.read(3, A.LED) == 0     # powered up: RAM defaults
        assert x.read(3, A.RETURN_DELAY) == 10                               # EEPROM kept
        assert "unplugged" not in d.ok("state", actuator="xm430")["state"]["xm430"]["faults"]
    refused = d.command("plug", actuator="xm430", connected="yes")
    assert refused["ok"] is False and "connected must be true or false" in refused["error"]


def test_one_feetech_servo_at_a_time(sts_launcher):
    """As `lerobot-setup-motors` asks: every servo but one unplugged, a broadcast ping finds that one alone, it gets
    its new ID; plugged back in, both answer at their own IDs. A pulled cable also takes the supply: limp."""
    d = sts_launcher.start(write_sts_rig(sts_launcher.dir, "plug-sts", ids=(1, 2), fast=True, lockstep=True))
    port = scs.PortHandler(d.rig.port)
    assert port.openPort() and port.setBaudRate(1_000_000)
    ph = scs.PacketHandler(0)                                # STS byte order, as sms_sts.py uses it
    try:
        d.ok("plug", actuator="j1", connected=False)
        assert ph.ping(port, 2)[1] != scs.COMM_SUCCESS            # no reply: scservo_sdk says timeout or corrupt
        assert ph.ping(port, 1)[:2] == (777, scs.COMM_SUCCESS)
        ph.write1ByteTxRx(port, 1, ID, 7)                    # which ID the reply to an ID change bears: unasserted
        d.ok("plug", actuator="j1", connected=True)
        for sid in (7, 2):
            assert ph.ping(port, sid)[:2] == (777, scs.COMM_SUCCESS)
        assert ph.write1ByteTxRx(port, 2, TORQUE_ENABLE, 1) == (scs.COMM_SUCCESS, 0)
        d.ok("step", n=10)
        assert d.ok("state", actuator="j1")["state"]["j1"]["enable"]
        d.ok("plug", actuator="j1", connected=False)
        assert not d.ok("state", actuator="j1")["state"]["j1"]["enable"]
    finally:
        port.closePort()


@pytest.fixture
def launcher(tmp_path):
    launcher = DxlLauncher(tmp_path)
    yield launcher
    launcher.finish()


@pytest.fixture
def sts_launcher(tmp_path):
    launcher = StsLauncher(tmp_path)
    yield launcher
    launcher.finish()
