"""The real dynamixel-sdk 4.1.0 against `servo-hil run` over a real pty: ping, read/write, errors, group reads and
writes, Reg Write / Action. One lock-step daemon (fast bus: no return delay, no pacing) for the module: the physics
moves only when a test steps it, so every value read is deterministic. After each test the rig is `reset` (every
servo powers up again: RAM to defaults, EEPROM kept) and every EEPROM byte must equal what it was at the start of
the module: a test that changes EEPROM undoes it. Expected values: the ROBOTIS e-manual, cited by section (e-manual
Protocol 2.0 page, control-table items)."""

from __future__ import annotations

import time

import dynamixel_sdk as sdk
import pytest

from .conftest import (
    ACCESS,
    ALERT,
    DATA_LENGTH,
    DATA_LIMIT,
    DATA_RANGE,
    IDS,
    INSTRUCTION_ERROR,
    MODEL,
    MX_IDS,
    X_IDS,
    A,
    crc16,
    describe,
    firmware_version,
    read_raw,
    to_bytes,
    write_dxl_rig,
)

OK = sdk.COMM_SUCCESS
TIMEOUT = sdk.COMM_RX_TIMEOUT


@pytest.fixture(scope="module")
def daemon(module_launcher):
    return module_launcher.start(write_dxl_rig(module_launcher.dir, "sdk-bus", fast=True, lockstep=True))


@pytest.fixture(scope="module")
def eeprom0(dxl):
    """Every servo's EEPROM (0..63) at the start of the module."""
    out = {}
    for i in IDS:
        data, comm, err = dxl.try_read(i, 0, 64)
        assert comm == OK and err == 0, describe(dxl.ph, comm, err)
        out[i] = bytes(data)
    return out


@pytest.fixture(autouse=True)
def clean(daemon, dxl, eeprom0):
    yield
    assert daemon.alive, daemon.stderr()
    daemon.ok("reset")
    daemon.step(1)
    for i in IDS:
        data, comm, err = dxl.try_read(i, 0, 64)
        assert comm == OK and err == 0, f"ID {i} after the test: {describe(dxl.ph, comm, err)}"
        assert bytes(data) == eeprom0[i], f"ID {i}: the test left EEPROM changed"


# ------------------------------------------------------------------------------------------------ 1. ping
@pytest.mark.parametrize("dxl_id", IDS)
def test_ping_reports_model_number(dxl, dxl_id):
    model, comm, err = dxl.ping(dxl_id)
    assert (comm, err) == (OK, 0), describe(dxl.ph, comm, err)
    assert model == MODEL[dxl_id]
    assert dxl.read(dxl_id, A.MODEL_NUMBER) == MODEL[dxl_id]


def test_ping_reply_carries_firmware_version(dxl):
    """Ping's 3 parameters: Model Number L, H, Firmware Version (Protocol 2.0 §Ping); the SDK's ping() drops
    the last one."""
    for i in IDS:
        rx, comm = dxl.raw_exchange(i, 0x01, rx_bytes=14)
        assert comm == OK, dxl.ph.getTxRxResult(comm)
        assert rx[4] == i and rx[7] == 0x55 and rx[8] == 0
        assert rx[5] | rx[6] << 8 == 7, "a ping status has 3 parameters (length 7)"
        assert rx[9] | rx[10] << 8 == MODEL[i]
        assert rx[11] == firmware_version(i)
        assert dxl.read(i, A.FIRMWARE_VERSION) == firmware_version(i)


@pytest.mark.parametrize("absent", [0, 5, 100, 252])
def test_ping_absent_id_times_out(dxl, absent):
    _, comm, _ = dxl.ping(absent)
    assert comm == TIMEOUT


def test_broadcast_ping_finds_all_four(dxl):
    found, comm = dxl.ph.broadcastPing(dxl.port)
    assert comm == OK
    assert found == {i: [MODEL[i], firmware_version(i)] for i in IDS}


# ------------------------------------------------------------------------------------------------ 2. read / write
@pytest.mark.parametrize("dxl_id", IDS)
def test_write_read_every_size(dxl, dxl_id):
    cases = [(A.LED, 1), (A.LED, 0), (A.RETURN_DELAY, 17), (A.POSITION_P, 1234), (A.PROFILE_VELOCITY, 12345),
             (A.PROFILE_ACCELERATION, 321)]
    before = dxl.read(dxl_id, A.RETURN_DELAY)
    try:
        for item, value in cases:
            dxl.write(dxl_id, item, value)
            assert dxl.read(dxl_id, item) == value, item
    finally:
        dxl.write(dxl_id, A.RETURN_DELAY, before)


@pytest.mark.parametrize("dxl_id", IDS)
def test_homing_offset_negative_shifts_present_position(dxl, dxl_id):
    """Homing Offset is signed 4 bytes; Present Position = actual position + Homing Offset
    (e-manual §Homing Offset(20))."""
    p0 = dxl.read(dxl_id, A.PRESENT_POSITION, signed=True)
    try:
        dxl.write(dxl_id, A.HOMING_OFFSET, -1000)
        assert dxl.read(dxl_id, A.HOMING_OFFSET, signed=True) == -1000
        assert dxl.read(dxl_id, A.HOMING_OFFSET) == (1 << 32) - 1000   # on the wire: two's complement
        assert dxl.read(dxl_id, A.PRESENT_POSITION, signed=True) == p0 - 1000
    finally:
        dxl.write(dxl_id, A.HOMING_OFFSET, 0)
    assert dxl.read(dxl_id, A.PRESENT_POSITION, signed=True) == p0


@pytest.mark.parametrize("dxl_id", IDS)
def test_negative_goal_current_and_velocity(dxl, dxl_id):
    try:
        dxl.write(dxl_id, A.OPERATING_MODE, 0)                    # current mode
        dxl.write(dxl_id, A.GOAL_CURRENT, -100)
        assert dxl.read(dxl_id, A.GOAL_CURRENT, signed=True) == -100
        assert dxl.read(dxl_id, A.GOAL_CURRENT) == 0x10000 - 100
        dxl.write(dxl_id, A.OPERATING_MODE, 1)                    # velocity mode
        dxl.write(dxl_id, A.GOAL_VELOCITY, -50)
        assert dxl.read(dxl_id, A.GOAL_VELOCITY, signed=True) == -50
    finally:
        dxl.write(dxl_id, A.OPERATING_MODE, 3)


@pytest.mark.parametrize("dxl_id", IDS)
def test_read_spanning_several_items(dxl, dxl_id):
    """100..119: Goal PWM, Goal Current, Goal Velocity, Profile Acceleration, Profile Velocity, Goal Position."""
    values = [(A.GOAL_PWM, -300), (A.GOAL_CURRENT, -200), (A.GOAL_VELOCITY, -40), (A.PROFILE_ACCELERATION, 77),
              (A.PROFILE_VELOCITY, 88), (A.GOAL_POSITION, 1500)]
    for item, v in values:
        dxl.write(dxl_id, item, v)
    data, comm, err = dxl.try_read(dxl_id, 100, 20)
    assert (comm, err) == (OK, 0), describe(dxl.ph, comm, err)
    assert len(data) == 20
    raw = bytes(data)
    for (addr, size), v in values:
        assert int.from_bytes(raw[addr - 100:addr - 100 + size], "little", signed=True) == v, addr
    # and one across Torque Enable .. Hardware Error Status (64..70): 0, LED 0, reserved, SRL 2, 0, 0
    data, comm, err = dxl.try_read(dxl_id, 64, 7)
    assert (comm, err) == (OK, 0)
    assert [data[0], data[1], data[4], data[5], data[6]] == [0, 0, 2, 0, 0]


@pytest.mark.parametrize("dxl_id", IDS)
def test_read_outside_the_table_is_access_error_without_data(dxl, dxl_id):
    """e-manual Protocol 2.0 §Status Packet: Access Error with no parameters. The SDK's read1/2ByteTxRx then hand the
    CRC back as data: check `error`."""
    _, comm, err = dxl.try_read(dxl_id, 700, 4)
    assert comm == OK
    assert err == ACCESS
    rx, comm = dxl.raw_exchange(dxl_id, 0x02, [700 & 0xFF, 700 >> 8, 4, 0])
    assert comm == OK
    assert rx[8] == ACCESS
    assert rx[5] | rx[6] << 8 == 4, "Length 4 = instruction + error + CRC: no data parameters"
    assert len(rx) == 11


# ------------------------------------------------------------------------------------------------ 3. errors
@pytest.mark.parametrize("dxl_id", IDS)
def test_eeprom_locked_while_torque_on(dxl, dxl_id):
    dxl.write(dxl_id, A.TORQUE_ENABLE, 1)
    try:
        for item, value in ((A.ID, 10), (A.OPERATING_MODE, 1), (A.RETURN_DELAY, 3)):
            comm, err = dxl.try_write(dxl_id, item, value)
            assert (comm, err) == (OK, ACCESS), f"{item} with torque on: {describe(dxl.ph, comm, err)}"
        assert dxl.read(dxl_id, A.OPERATING_MODE) == 3
        assert dxl.read(dxl_id, A.ID) == dxl_id
    finally:
        dxl.write(dxl_id, A.TORQUE_ENABLE, 0)
    dxl.write(dxl_id, A.OPERATING_MODE, 1)
    assert dxl.read(dxl_id, A.OPERATING_MODE) == 1
    dxl.write(dxl_id, A.OPERATING_MODE, 3)


def test_id_change_with_torque_off(dxl):
    # which ID the status of the ID write itself comes from (old or new) is not documented (e-manual
    # §ID(7) is silent), so only its effect is checked; the SDK discards a reply from another ID
    dxl.try_write(3, A.ID, 10)
    try:
        assert dxl.ping(3)[1] == TIMEOUT
        model, comm, err = dxl.ping(10)
        assert (model, comm, err) == (MODEL[3], OK, 0)
    finally:
        dxl.try_write(10, A.ID, 3)
    assert dxl.ping(3)[:2] == (MODEL[3], OK)
    assert dxl.ping(10)[1] == TIMEOUT


@pytest.mark.parametrize("dxl_id", IDS)
def test_range_limit_length_and_access_errors(dxl, dxl_id):
    assert dxl.try_write(dxl_id, A.OPERATING_MODE, 2) == (OK, DATA_RANGE)        # no mode 2 (§Operating Mode(11))
    assert dxl.try_write(dxl_id, A.OPERATING_MODE, 17) == (OK, DATA_RANGE)
    assert dxl.read(dxl_id, A.OPERATING_MODE) == 3
    # mode 3: Goal Position within Min..Max Position Limit (0..4095 by default), else Data Limit Error
    # (§Goal Position(116))
    g0 = dxl.read(dxl_id, A.GOAL_POSITION, signed=True)
    assert dxl.try_write(dxl_id, A.GOAL_POSITION, 4096) == (OK, DATA_LIMIT)
    assert dxl.try_write(dxl_id, A.GOAL_POSITION, -1) == (OK, DATA_LIMIT)
    assert dxl.read(dxl_id, A.GOAL_POSITION, signed=True) == g0
    try:
        dxl.write(dxl_id, A.MAX_POSITION, 3000)
        dxl.write(dxl_id, A.MIN_POSITION, 1000)
        assert dxl.try_write(dxl_id, A.GOAL_POSITION, 3001) == (OK, DATA_LIMIT)
        assert dxl.try_write(dxl_id, A.GOAL_POSITION, 999) == (OK, DATA_LIMIT)
        dxl.write(dxl_id, A.GOAL_POSITION, 3000)
        dxl.write(dxl_id, A.GOAL_POSITION, 1000)
    finally:
        dxl.write(dxl_id, A.MAX_POSITION, 4095)
        dxl.write(dxl_id, A.MIN_POSITION, 0)
    # Goal PWM above PWM Limit, Goal Current above Current Limit: Data Limit Error (§Goal PWM(100), §Goal Current(102))
    try:
        dxl.write(dxl_id, A.PWM_LIMIT, 500)
        assert dxl.try_write(dxl_id, A.GOAL_PWM, 600) == (OK, DATA_LIMIT)
        assert dxl.try_write(dxl_id, A.GOAL_PWM, -501) == (OK, DATA_LIMIT)
        dxl.write(dxl_id, A.GOAL_PWM, -500)
        dxl.write(dxl_id, A.CURRENT_LIMIT, 300)
        assert dxl.try_write(dxl_id, A.GOAL_CURRENT, 301) == (OK, DATA_LIMIT)
        dxl.write(dxl_id, A.GOAL_CURRENT, 300)
    finally:
        dxl.write(dxl_id, A.PWM_LIMIT, 885)
        dxl.write(dxl_id, A.CURRENT_LIMIT, dxl_default_current_limit(dxl_id))
    # 2 bytes into a 4-byte item: Data Length Error; read-only items: Access Error (§Status Packet)
    assert dxl.try_write(dxl_id, A.GOAL_POSITION, 2048, size=2) == (OK, DATA_LENGTH)
    assert dxl.try_write(dxl_id, A.PRESENT_POSITION, 5) == (OK, ACCESS)
    assert dxl.try_write(dxl_id, A.MODEL_NUMBER, 5) == (OK, ACCESS)
    assert dxl.try_write(dxl_id, A.HW_ERROR, 0) == (OK, ACCESS)
    assert dxl.read(dxl_id, A.MODEL_NUMBER) == MODEL[dxl_id]


def dxl_default_current_limit(dxl_id: int) -> int:
    """Current Limit (38) defaults: MX-64 1941, MX-106 2047, XM430-W350 1193; XL330-M288 1750 (e-manual control
    tables)."""
    return {1: 1941, 2: 2047, 3: 1193, 4: 1750}[dxl_id]


def test_goal_beyond_default_limit_is_data_limit_error(dxl):
    """e-manual control tables: the range of Goal PWM / Current / Velocity is ±PWM / Current / Velocity Limit, so a goal
    beyond the limit is a Data Limit Error even when the limit sits at its maximum (§Goal PWM(100)), not a Data Range
    Error."""
    assert dxl.try_write(1, A.GOAL_PWM, 886) == (OK, DATA_LIMIT)          # PWM Limit 885
    assert dxl.try_write(1, A.GOAL_CURRENT, 1942) == (OK, DATA_LIMIT)     # Current Limit 1941
    assert dxl.try_write(1, A.GOAL_VELOCITY, 1024) == (OK, DATA_LIMIT)    # Velocity Limit 435


@pytest.mark.parametrize("dxl_id", IDS)
def test_goal_velocity_above_velocity_limit(dxl, dxl_id):
    limit = dxl.read(dxl_id, A.VELOCITY_LIMIT)
    dxl.write(dxl_id, A.OPERATING_MODE, 1)
    try:
        assert dxl.try_write(dxl_id, A.GOAL_VELOCITY, limit + 1) == (OK, DATA_LIMIT)
        assert dxl.try_write(dxl_id, A.GOAL_VELOCITY, -limit - 1) == (OK, DATA_LIMIT)
        dxl.write(dxl_id, A.GOAL_VELOCITY, -limit)
    finally:
        dxl.write(dxl_id, A.OPERATING_MODE, 3)


# ------------------------------------------------------------------------------------------------ 4. group read/write
def test_sync_write_then_sync_read_all_four(dxl):
    goals = {i: 1000 + 300 * i for i in IDS}
    sw = sdk.GroupSyncWrite(dxl.port, dxl.ph, *A.GOAL_POSITION)
    for i, g in goals.items():
        assert sw.addParam(i, to_bytes(g, 4))
    assert sw.txPacket() == OK
    sr = sdk.GroupSyncRead(dxl.port, dxl.ph, *A.GOAL_POSITION)
    for i in IDS:
        assert sr.addParam(i)
    assert sr.txRxPacket() == OK
    for i in IDS:
        assert sr.isAvailable(i, *A.GOAL_POSITION)
        assert sr.getData(i, *A.GOAL_POSITION) == goals[i]
        assert dxl.read(i, A.GOAL_POSITION) == goals[i]
    pos = sdk.GroupSyncRead(dxl.port, dxl.ph, *A.PRESENT_POSITION)
    for i in reversed(IDS):                      # the SDK's GroupSyncRead.rxPacket needs parameter order
        pos.addParam(i)
    assert pos.txRxPacket() == OK
    for i in IDS:
        assert pos.getData(i, *A.PRESENT_POSITION) == dxl.read(i, A.PRESENT_POSITION)


def test_bulk_write_then_bulk_read_different_items(dxl):
    writes = {1: (A.LED, 1), 2: (A.POSITION_P, 900), 3: (A.PROFILE_VELOCITY, 300), 4: (A.GOAL_POSITION, 1500)}
    bw = sdk.GroupBulkWrite(dxl.port, dxl.ph)
    for i, ((addr, size), v) in writes.items():
        assert bw.addParam(i, addr, size, to_bytes(v, size))
    assert bw.txPacket() == OK
    br = sdk.GroupBulkRead(dxl.port, dxl.ph)
    for i, ((addr, size), _) in writes.items():
        assert br.addParam(i, addr, size)
    assert br.txRxPacket() == OK
    for i, ((addr, size), v) in writes.items():
        assert br.getData(i, addr, size) == v
        assert dxl.read(i, (addr, size)) == v
    # a bulk read of several items of different lengths, compared with plain reads
    items = {4: (100, 20), 3: A.PRESENT_POSITION, 2: A.HW_ERROR, 1: (0, 7)}
    br = sdk.GroupBulkRead(dxl.port, dxl.ph)
    for i, (addr, size) in items.items():
        br.addParam(i, addr, size)
    assert br.txRxPacket() == OK
    for i, (addr, size) in items.items():
        data, comm, err = dxl.try_read(i, addr, size)
        assert (comm, err) == (OK, 0)
        assert bytes(br.data_dict[i][0]) == bytes(data)


def test_fast_sync_read_x_series(dxl):
    for i in X_IDS:
        dxl.write(i, A.GOAL_POSITION, 1000 + 111 * i)
    for item in (A.PRESENT_POSITION, A.GOAL_POSITION):
        fr = sdk.GroupSyncRead(dxl.port, dxl.ph, *item)
        for i in X_IDS:
            fr.addParam(i)
        assert fr.fastSyncRead() == OK
        for i in X_IDS:
            assert fr.isAvailable(i, *item)
            assert fr.getData(i, *item) == dxl.read(i, item)
    assert fr.getData(3, *A.GOAL_POSITION) == 1333


def test_fast_bulk_read_x_series(dxl):
    # ID 4 first: the SDK's `fastBulkReadRx` looks each ID up in the flat parameter list, so no address or length
    # byte before an ID's own entry may equal that ID (here: 4, 132, 0, 4, 0 holds no 3)
    dxl.write(3, A.GOAL_POSITION, 3210)
    fb = sdk.GroupBulkRead(dxl.port, dxl.ph)
    fb.addParam(4, *A.PRESENT_POSITION)
    fb.addParam(3, *A.GOAL_POSITION)
    assert fb.fastBulkRead() == OK
    assert fb.getData(4, *A.PRESENT_POSITION) == dxl.read(4, A.PRESENT_POSITION)
    assert fb.getData(3, *A.GOAL_POSITION) == 3210


def test_fast_bulk_read_reply_is_valid_where_the_sdk_fails(dxl):
    """The SDK's `fastBulkReadRx` `param.index(id)` defect on our bus: IDs [3 (132, len 4), 4 (0, len 2)]. The SDK finds
    ID 4 at the length byte of ID 3's entry, reads length 0 and reports COMM_RX_CORRUPT; the bytes on the wire are a
    correct Fast Bulk Read reply (checked here with our own decoder, e-manual Protocol 2.0 §Fast Bulk Read)."""
    fb = sdk.GroupBulkRead(dxl.port, dxl.ph)
    fb.addParam(3, *A.PRESENT_POSITION)
    fb.addParam(4, *A.MODEL_NUMBER)
    assert fb.fastBulkRead() == sdk.COMM_RX_CORRUPT            # the SDK's defect, not the bus's
    params = [3, 132, 0, 4, 0, 4, 0, 0, 2, 0]
    assert dxl.ph.bulkReadTx(dxl.port, params, len(params), True) == OK
    reply = read_raw(dxl.port, 8 + (1 + 1 + 4 + 2) + (1 + 1 + 2 + 2))
    assert reply[:8] == bytes([0xFF, 0xFF, 0xFD, 0x00, 0xFE, 15, 0, 0x55])   # LEN = 1 + (4+4) + (2+4)
    seg1, seg2 = reply[8:16], reply[16:22]
    assert seg1[:2] == bytes([0, 3]) and seg2[:2] == bytes([0, 4])
    assert int.from_bytes(seg1[2:6], "little") == dxl.read(3, A.PRESENT_POSITION)
    assert int.from_bytes(seg2[2:4], "little") == MODEL[4]
    assert int.from_bytes(seg1[6:8], "little") == crc16(reply[:14])             # running CRC (§Fast Sync Read)
    assert int.from_bytes(seg2[4:6], "little") == crc16(reply[:20])


@pytest.mark.parametrize("ids", [(1, 3), (3, 4, 2), (4, 1)])
def test_fast_reads_including_an_mx_time_out(dxl, ids):
    """MX(2.0) has no Fast Sync / Bulk Read (e-manual Protocol 2.0 §Fast Sync Read): the combined reply never comes."""
    fr = sdk.GroupSyncRead(dxl.port, dxl.ph, *A.PRESENT_POSITION)
    for i in ids:
        fr.addParam(i)
    assert fr.fastSyncRead() == TIMEOUT
    fb = sdk.GroupBulkRead(dxl.port, dxl.ph)
    for i in ids:
        fb.addParam(i, *A.PRESENT_POSITION)
    assert fb.fastBulkRead() == TIMEOUT
    # and the bus still works afterwards
    assert dxl.ping(ids[0])[1] == OK


def test_plain_sync_read_including_mx_works(dxl):
    sr = sdk.GroupSyncRead(dxl.port, dxl.ph, *A.PRESENT_POSITION)
    for i in (*MX_IDS, *X_IDS):
        sr.addParam(i)
    assert sr.txRxPacket() == OK


# ------------------------------------------------------------------------------------------------ 5. Reg Write / Action
def test_reg_write_then_broadcast_action(dxl):
    g0 = {i: dxl.read(i, A.GOAL_POSITION) for i in X_IDS}
    for i in X_IDS:
        comm, err = dxl.ph.regWriteTxRx(dxl.port, i, A.GOAL_POSITION[0], 4, to_bytes(1700 + i, 4))
        assert (comm, err) == (OK, 0), describe(dxl.ph, comm, err)
        assert dxl.read(i, A.REGISTERED) == 1
        assert dxl.read(i, A.GOAL_POSITION) == g0[i], "a registered write waits for Action"
    assert dxl.read(1, A.REGISTERED) == 0
    assert dxl.ph.action(dxl.port, sdk.BROADCAST_ID) == OK     # broadcast: no reply, no race with `action`
    for i in X_IDS:
        assert dxl.read(i, A.GOAL_POSITION) == 1700 + i
        assert dxl.read(i, A.REGISTERED) == 0


def test_unicast_action(dxl):
    """The status of a unicast Action, read with the raw exchange (the SDK's action() never reads it)."""
    rx, comm = dxl.raw_exchange(2, 0x05)
    assert comm == OK
    assert rx[4] == 2 and rx[8] == INSTRUCTION_ERROR, "Action with nothing registered (e-manual §Status Packet)"
    comm, err = dxl.ph.regWriteTxRx(dxl.port, 2, A.GOAL_POSITION[0], 4, to_bytes(2500, 4))
    assert (comm, err) == (OK, 0)
    rx, comm = dxl.raw_exchange(2, 0x05)
    assert comm == OK
    assert rx[8] == 0
    assert dxl.read(2, A.GOAL_POSITION) == 2500
    assert dxl.read(2, A.REGISTERED) == 0
    rx, comm = dxl.raw_exchange(2, 0x05)
    assert rx[8] == INSTRUCTION_ERROR, "Action consumed the registered write"


# ------------------------------------------------------------------------------------------------ reply rules
def test_status_return_level(dxl):
    """SRL 0: only Ping is answered; 1: Ping and Read; 2: everything (e-manual §Status Return Level(68))."""
    # whether the write that changes the level is answered under the old or the new level is undocumented:
    # the raw exchange reads its reply if there is one and is not checked
    pkt = [A.STATUS_RETURN_LEVEL[0], 0]
    dxl.raw_exchange(3, 0x03, [*pkt, 0])                           # SRL 0
    assert dxl.try_write(3, A.LED, 1) == (TIMEOUT, 0)
    assert dxl.try_read(3, A.LED)[1] == TIMEOUT
    assert dxl.ping(3)[:2] == (MODEL[3], OK), "Ping is always answered"
    dxl.raw_exchange(3, 0x03, [*pkt, 1])                           # SRL 1
    assert dxl.try_read(3, A.LED)[::2] == ([1], 0), "the unanswered write was executed"
    assert dxl.try_write(3, A.LED, 0)[0] == TIMEOUT
    assert dxl.read(3, A.LED) == 0
    dxl.raw_exchange(3, 0x03, [*pkt, 2])                           # SRL 2
    assert dxl.try_write(3, A.LED, 1) == (OK, 0)


def test_broadcast_write_executes_everywhere_unanswered(dxl):
    comm, _ = dxl.ph.write1ByteTxRx(dxl.port, sdk.BROADCAST_ID, A.LED[0], 1)
    assert comm == OK                                              # the SDK does not wait for a broadcast
    for i in IDS:
        assert dxl.read(i, A.LED) == 1
    assert dxl.port.ser.read(64) == b"", "nobody answered the broadcast write"


def test_secondary_id(dxl):
    """Secondary ID: RAM writes addressed to it are executed by every servo sharing it, without a reply (e-manual
    §Secondary(Shadow) ID(12))."""
    for i in X_IDS:
        dxl.write(i, A.SECONDARY_ID, 20)
    try:
        assert dxl.try_write(20, A.LED, 1)[0] == TIMEOUT
        for i in X_IDS:
            assert dxl.read(i, A.LED) == 1
        assert dxl.read(1, A.LED) == 0
        dxl.try_write(20, A.RETURN_DELAY, 7)                        # EEPROM: not through the secondary ID
        for i in X_IDS:
            assert dxl.read(i, A.RETURN_DELAY) == 250
    finally:
        for i in X_IDS:
            dxl.write(i, A.SECONDARY_ID, 255)


def test_bus_watchdog(daemon, dxl):
    """Bus Watchdog 5 (100 ms) with torque on, then no instruction for 200 ms: the servo stops, the register
    reads -1 and Goal writes get Data Range Error until 0 is written (e-manual §Bus Watchdog(98))."""
    dxl.write(3, A.BUS_WATCHDOG, 5)
    daemon.step(200)
    time.sleep(0.03)
    assert dxl.read(3, A.BUS_WATCHDOG, signed=True) == 5, "inactive while torque is off"
    dxl.write(3, A.TORQUE_ENABLE, 1)
    daemon.step(200)
    time.sleep(0.03)                 # also with a wall-clock pause after the step
    assert dxl.read(3, A.BUS_WATCHDOG, signed=True) == -1
    for item, v in ((A.GOAL_POSITION, 2048), (A.GOAL_PWM, 100), (A.GOAL_CURRENT, 10), (A.GOAL_VELOCITY, 5)):
        assert dxl.try_write(3, item, v) == (OK, DATA_RANGE), item
    dxl.write(3, A.BUS_WATCHDOG, 0)
    dxl.write(3, A.GOAL_POSITION, 2048)


def test_bus_watchdog_trips_in_simulated_time(daemon, dxl):
    """Lock-step: 110 ms of simulated silence with a 100 ms watchdog trips it, however soon (in wall time) the next
    instruction follows the `step`: the watchdog counts simulated time, so the check runs before the next
    instruction restarts it."""
    dxl.write(3, A.TORQUE_ENABLE, 1)
    for _ in range(5):
        dxl.write(3, A.BUS_WATCHDOG, 5)
        daemon.step(110)
        assert dxl.read(3, A.BUS_WATCHDOG, signed=True) == -1, "110 ms without an instruction, watchdog 100 ms"
        dxl.write(3, A.BUS_WATCHDOG, 0)


def test_unknown_instruction_is_instruction_error(dxl):
    rx, comm = dxl.raw_exchange(3, 0x7E)
    assert comm == OK
    assert rx[8] & ~ALERT == INSTRUCTION_ERROR


def test_status_counts_isolated_packets_per_bus(daemon, dxl):
    """`status` reports, per Dynamixel bus, the packets whose handling failed and were isolated: none for valid
    traffic."""
    assert dxl.ph.ping(dxl.port, IDS[0])[1] == OK
    counts = daemon.ok("status")["status"]["bus_errors_isolated"]
    assert list(counts.values()) == [0] and len(counts) == 1, counts
