"""Factory Reset through the real SDK (e-manual Protocol 2.0 §Factory Reset, instruction 0x06): each test on a
daemon of its own, because IDs and baud rates change."""

from __future__ import annotations

import dynamixel_sdk as sdk

from .conftest import IDS, MODEL, A, describe, open_dxl, write_dxl_rig

OK = sdk.COMM_SUCCESS
TIMEOUT = sdk.COMM_RX_TIMEOUT


def test_factory_reset_options(launcher):
    """0x02: all but ID and Baud Rate; 0x01: all but ID; 0xFF: everything (ID 1, 57600 bps) (§Factory Reset)."""
    d = launcher.start(write_dxl_rig(launcher.dir, "sdk-factory", fast=True, lockstep=True))
    with open_dxl(d.rig.port) as x:
        # 0x02 on the XM430 (ID 3), moved to ID 7 with a changed Return Delay Time first
        x.write(3, A.RETURN_DELAY, 10)
        x.try_write(3, A.ID, 7)                 # which ID answers this write is undocumented
        assert x.ping(7)[:2] == (MODEL[3], OK)
        x.write(7, A.LED, 1)
        comm, err = x.ph.factoryReset(x.port, 7, 0x02)
        assert (comm, err) == (OK, 0), describe(x.ph, comm, err)
        assert x.ping(7)[:2] == (MODEL[3], OK), "0x02 keeps the ID and the baud rate"
        assert x.read(7, A.RETURN_DELAY) == 250
        assert x.read(7, A.BAUD_RATE) == 3
        assert x.read(7, A.LED) == 0, "the servo reboots after a reset"
        # 0x01: keeps the ID; the Baud Rate goes back to its default 1 = 57600 bps
        x.write(7, A.RETURN_DELAY, 20)
        comm, err = x.ph.factoryReset(x.port, 7, 0x01)
        assert (comm, err) == (OK, 0), describe(x.ph, comm, err)
        assert x.ping(7)[1] == TIMEOUT, "now at 57600 bps: silent at 1 Mbps"
        assert x.ping(1)[:2] == (MODEL[1], OK), "the others are untouched"
        x.set_baud(57_600)
        assert x.ping(7)[:2] == (MODEL[3], OK)
        assert x.read(7, A.BAUD_RATE) == 1
        assert x.read(7, A.RETURN_DELAY) == 250
        assert x.ping(1)[1] == TIMEOUT, "the MX-64 is still at 1 Mbps"
        # 0xFF: everything, the ID too (the MX-64 leaves ID 1 first, so that only one servo has it)
        x.set_baud(1_000_000)
        x.try_write(1, A.ID, 11)
        assert x.ping(11)[:2] == (MODEL[1], OK)
        x.set_baud(57_600)
        comm, err = x.ph.factoryReset(x.port, 7, 0xFF)
        assert (comm, err) == (OK, 0), describe(x.ph, comm, err)
        assert x.ping(7)[1] == TIMEOUT
        assert x.ping(1)[:2] == (MODEL[3], OK), "ID 1 at 57600 bps: the reset XM430"
        assert x.read(1, A.RETURN_DELAY) == 250
        x.set_baud(1_000_000)
        assert x.ping(1)[1] == TIMEOUT
        assert x.ping(11)[:2] == (MODEL[1], OK)


def test_same_id_at_another_baud(launcher):
    """A factory-reset servo (ID 1, 57600 bps) on a 1 Mbps bus that already has an ID 1: each answers at its own
    baud (e-manual §Baud Rate(8): only the servos at the SDK's baud hear a packet), so the bus keeps both servos of
    one ID."""
    d = launcher.start(write_dxl_rig(launcher.dir, "sdk-factory-dup", fast=True, lockstep=True))
    with open_dxl(d.rig.port) as x:
        comm, err = x.ph.factoryReset(x.port, 3, 0xFF)          # the XM430 becomes ID 1 at 57600 bps
        assert (comm, err) == (OK, 0), describe(x.ph, comm, err)
        assert x.ping(1)[:2] == (MODEL[1], OK), "the MX-64 (ID 1, 1 Mbps)"
        x.set_baud(57_600)
        assert x.ping(1)[:2] == (MODEL[3], OK), "the reset XM430 (ID 1, 57600 bps)"


def test_broadcast_factory_reset_all_is_refused(launcher):
    """FW42+ on MX(2.0) and X refuse a broadcast Factory Reset with 0xFF (§Factory Reset): nothing changes."""
    d = launcher.start(write_dxl_rig(launcher.dir, "sdk-factory-bc", fast=True, lockstep=True))
    with open_dxl(d.rig.port) as x:
        for i in IDS:
            x.write(i, A.RETURN_DELAY, 42)
        comm, _ = x.ph.factoryReset(x.port, sdk.BROADCAST_ID, 0xFF)
        assert comm == OK                              # broadcast: the SDK reads nothing
        for i in IDS:
            assert x.ping(i)[:2] == (MODEL[i], OK)
            assert x.read(i, A.RETURN_DELAY) == 42
        # 0x02 by broadcast is allowed: every servo resets but keeps ID and baud
        comm, _ = x.ph.factoryReset(x.port, sdk.BROADCAST_ID, 0x02)
        assert comm == OK
        for i in IDS:
            assert x.ping(i)[:2] == (MODEL[i], OK)
            assert x.read(i, A.RETURN_DELAY) == 250
