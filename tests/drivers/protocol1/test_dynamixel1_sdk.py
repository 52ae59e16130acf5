"""Dynamixel Protocol 1.0 servos through unchanged dynamixel-sdk 4.1.0 (`PacketHandler(1.0)`) on the pty of a running
daemon: ping, read and write, GroupSyncWrite, Bulk Read on the MX, the error byte, Status Return Level, and bad
input answered as the servo does. Expected values: ROBOTIS e-manual (dynamixel1_rig.py), never the code under test."""

from __future__ import annotations

import time

import dynamixel_sdk as sdk
import pytest
import serial

from drivers.emulated.protocol1.frame import encode_instruction
from tests.drivers import read_serial
from tests.drivers.protocol1.dynamixel1_rig import (
    AX,
    CHECKSUM,
    GOAL,
    ID,
    INSTRUCTION,
    LED,
    MODEL,
    MODEL_NUMBER,
    MX64,
    MX106,
    PRESENT,
    RANGE,
    STATUS_RETURN_LEVEL,
    TORQUE_ENABLE,
    Dxl1Launcher,
    SlackPortHandler,
    write_rig,
)

BAUD = 1_000_000


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    launcher = Dxl1Launcher(tmp_path_factory.mktemp("dxl1"))
    d = launcher.start(write_rig(launcher.dir, "dxl1_sdk"))
    yield d
    launcher.finish()


@pytest.fixture
def fresh(tmp_path):
    """A daemon of its own, for tests that change what the others read (IDs, Status Return Level)."""
    launcher = Dxl1Launcher(tmp_path)
    yield launcher.start(write_rig(tmp_path, "dxl1_fresh"))
    launcher.finish()


class Bus:
    """The SDK's PortHandler at 1 Mbps and Protocol 1.0 PacketHandler on the daemon's pty."""

    def __init__(self, path: str):
        self.port = SlackPortHandler(path)
        assert self.port.openPort() and self.port.setBaudRate(BAUD)
        self.ph = sdk.PacketHandler(1.0)

    def close(self) -> None:
        self.port.closePort()

    def read(self, dxl_id: int, item: tuple[int, int]) -> tuple[int, int]:
        """(value, status error) of a 1- or 2-byte read that must get an answer."""
        fn = self.ph.read1ByteTxRx if item[1] == 1 else self.ph.read2ByteTxRx
        value, comm, error = fn(self.port, dxl_id, item[0])
        assert comm == sdk.COMM_SUCCESS, self.ph.getTxRxResult(comm)
        return value, error

    def write(self, dxl_id: int, item: tuple[int, int], value: int) -> int:
        """The status error of a 1- or 2-byte write that must get an answer."""
        fn = self.ph.write1ByteTxRx if item[1] == 1 else self.ph.write2ByteTxRx
        comm, error = fn(self.port, dxl_id, item[0], value)
        assert comm == sdk.COMM_SUCCESS, self.ph.getTxRxResult(comm)
        return error


@pytest.fixture
def bus(daemon):
    b = Bus(daemon.rig.port)
    yield b
    b.close()


def wait_for(check, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# ------------------------------------------------------------------------------------------ identity
def test_ping_reports_each_model(bus):
    for dxl_id, number in MODEL_NUMBER.items():
        model, comm, error = bus.ph.ping(bus.port, dxl_id)   # the 1.0 SDK pings, then reads Model Number
        assert (model, comm, error) == (number, sdk.COMM_SUCCESS, 0)
    assert bus.ph.ping(bus.port, 9)[1] == sdk.COMM_RX_TIMEOUT


def test_ping_status_packet_bytes_as_the_e_manual_prints_them(daemon):
    # Protocol 1.0 §Ping example: FF FF 01 02 01 FB → FF FF 01 02 00 FC
    with serial.Serial(daemon.rig.port, BAUD, timeout=0) as ser:
        ser.write(bytes.fromhex("FFFF010201FB"))
        assert read_serial(ser, 6, 1.0) == bytes.fromhex("FFFF010200FC")


# ------------------------------------------------------------------------------------------ read / write
def test_write_goal_and_the_servos_move(bus):
    assert bus.write(AX, TORQUE_ENABLE, 1) == 0
    assert bus.write(AX, GOAL, 700) == 0
    assert bus.read(AX, GOAL) == (700, 0)
    wait_for(lambda: abs(bus.read(AX, PRESENT)[0] - 700) <= 4)
    assert bus.write(MX64, GOAL, 2048 + 400) == 0          # the goal write turns the torque on
    assert bus.read(MX64, TORQUE_ENABLE) == (1, 0)
    wait_for(lambda: abs(bus.read(MX64, PRESENT)[0] - 2448) <= 8)


def test_refused_writes_carry_the_range_bit(bus):
    assert bus.write(AX, PRESENT, 5) == RANGE               # a read-only item
    assert bus.write(MX106, ID, 254) == RANGE               # ID 0..253
    assert bus.ph.getRxPacketError(RANGE) == "[RxPacketError] Out of range error!"
    assert bus.read(MX106, ID) == (MX106, 0)


def test_goal_outside_the_angle_limits_answers_angle_limit_error(bus):
    assert bus.write(AX, (6, 2), 300) == 0                  # CW Angle Limit
    try:
        assert bus.write(AX, GOAL, 100) == 0x02
        wait_for(lambda: abs(bus.read(AX, PRESENT)[0] - 300) <= 4)
    finally:
        bus.write(AX, (6, 2), 0)


# ------------------------------------------------------------------------------------------ group instructions
def test_group_sync_write_moves_every_servo(bus):
    sw = sdk.GroupSyncWrite(bus.port, bus.ph, GOAL[0], GOAL[1])
    goals = {AX: 400, MX64: 1800, MX106: 2300}
    for dxl_id, goal in goals.items():
        assert sw.addParam(dxl_id, list(goal.to_bytes(2, "little")))
    assert sw.txPacket() == sdk.COMM_SUCCESS
    for dxl_id, goal in goals.items():
        assert bus.read(dxl_id, GOAL) == (goal, 0)


def bulk_read(bus: Bus, wanted: dict[int, tuple[int, int]]) -> tuple[int, sdk.GroupBulkRead]:
    """GroupBulkRead of `wanted` {id: (address, length)}. dynamixel-sdk 4.1.0's GroupBulkRead.txPacket passes
    Protocol1PacketHandler.bulkReadTx an argument too many (a TypeError, test below): the group's own parameters go
    through bulkReadTx directly, then the group's rxPacket reads the replies."""
    br = sdk.GroupBulkRead(bus.port, bus.ph)
    for dxl_id, (address, length) in wanted.items():
        assert br.addParam(dxl_id, address, length)
    br.makeParam()
    assert bus.ph.bulkReadTx(bus.port, br.param, 3 * len(wanted)) == sdk.COMM_SUCCESS
    return br.rxPacket(), br


def test_bulk_read_on_the_mx_servos(bus):
    result, br = bulk_read(bus, {MX64: MODEL, MX106: GOAL})
    assert result == sdk.COMM_SUCCESS
    assert br.getData(MX64, *MODEL) == 310
    assert br.getData(MX106, *GOAL) == bus.read(MX106, GOAL)[0]


def test_the_ax_has_no_bulk_read(bus):
    # Bulk Read is an MX instruction (Protocol 1.0 §Bulk Read): an AX listed in it stays silent
    result, br = bulk_read(bus, {MX64: MODEL, AX: MODEL})
    assert result == sdk.COMM_RX_TIMEOUT
    assert br.isAvailable(MX64, *MODEL) is False


def test_sdk_group_bulk_read_protocol_1_defect(bus):
    # why bulk_read() above calls bulkReadTx itself; if a newer SDK fixes this, drop the workaround
    br = sdk.GroupBulkRead(bus.port, bus.ph)
    br.addParam(MX64, *MODEL)
    with pytest.raises(TypeError, match="bulkReadTx"):
        br.txRxPacket()


# ------------------------------------------------------------------------------------------ bad input
def test_bad_checksum_is_answered_with_the_checksum_bit(daemon):
    # Protocol 1.0 §Status Packet bit 4: "the checksum of the transmitted instruction packet is incorrect"
    with serial.Serial(daemon.rig.port, BAUD, timeout=0) as ser:
        packet = bytearray(encode_instruction(AX, 0x02, bytes([0x2B, 1])))
        packet[-1] ^= 0x55
        ser.write(bytes(packet))
        reply = read_serial(ser, 6, 1.0)
    assert reply[:3] == b"\xff\xff\x01" and reply[4] & CHECKSUM


@pytest.mark.parametrize(("target", "instruction"), [(AX, 0x08), (MX64, 0x82), (AX, 0x92)])
def test_instructions_a_model_lacks_get_the_instruction_bit(daemon, target, instruction):
    # Reboot (0x08) is Protocol 2.0 only, Sync Read (0x82) is not in Protocol 1.0, Bulk Read (0x92) is MX only
    with serial.Serial(daemon.rig.port, BAUD, timeout=0) as ser:
        ser.write(encode_instruction(target, instruction, b""))
        reply = read_serial(ser, 6, 1.0)
    assert len(reply) == 6 and reply[2] == target and reply[4] & INSTRUCTION


def test_sync_read_to_broadcast_gets_no_answer(daemon):
    with serial.Serial(daemon.rig.port, BAUD, timeout=0) as ser:
        ser.write(encode_instruction(0xFE, 0x82, bytes([36, 2, AX, MX64])))
        assert read_serial(ser, 1, 0.2) == b""
        ser.write(encode_instruction(AX, 0x01))               # the bus still answers afterwards
        assert len(read_serial(ser, 6, 1.0)) == 6


def test_garbage_then_a_good_packet(daemon):
    with serial.Serial(daemon.rig.port, BAUD, timeout=0) as ser:
        ser.write(bytes(range(256)) * 4 + b"\xff\xff\xff" + encode_instruction(MX106, 0x01))
        reply = read_serial(ser, 6, 1.0)
    assert reply[2] == MX106


# ------------------------------------------------------------------------------------------ state changes
def test_status_return_level_zero_answers_ping_only(fresh):
    b = Bus(fresh.rig.port)
    try:
        assert b.ph.write1ByteTxOnly(b.port, AX, STATUS_RETURN_LEVEL[0], 0) == sdk.COMM_SUCCESS
        time.sleep(0.05)
        assert b.ph.write1ByteTxRx(b.port, AX, LED[0], 1)[0] == sdk.COMM_RX_TIMEOUT
        assert b.ph.read1ByteTxRx(b.port, AX, LED[0])[1] == sdk.COMM_RX_TIMEOUT
        # Ping is always answered (§Ping); the 1.0 SDK's ping also reads Model Number, which level 0 leaves silent
        assert b.ph.ping(b.port, AX)[1] == sdk.COMM_RX_TIMEOUT
        packet, comm, error = b.ph.txRxPacket(b.port, [0xFF, 0xFF, AX, 2, 0x01, 0])   # the SDK fills the checksum
        assert (comm, error, bytes(packet)) == (sdk.COMM_SUCCESS, 0, bytes.fromhex("FFFF010200FC"))
        assert b.ph.write1ByteTxOnly(b.port, AX, STATUS_RETURN_LEVEL[0], 1) == sdk.COMM_SUCCESS
        time.sleep(0.05)
        assert b.read(AX, LED) == (1, 0)                              # level 1: reads answered
    finally:
        b.close()


def test_factory_reset_restores_id_1_and_57600_bps(fresh):
    # Protocol 1.0 §Factory Reset: the whole table to factory values; MX-64 ID 1, Baud Rate 34 (57 600 bit/s)
    b = Bus(fresh.rig.port)
    try:
        assert b.write(MX64, (6, 2), 100) == 0
        assert b.ph.factoryReset(b.port, MX64) == (sdk.COMM_SUCCESS, 0)   # answered from ID 2
        time.sleep(0.1)
        assert b.ph.ping(b.port, MX64)[1] == sdk.COMM_RX_TIMEOUT
        assert b.port.setBaudRate(57_600)
        assert b.ph.ping(b.port, 1)[0] == 310           # at 57 600 bit/s only the reset MX-64 hears ID 1
        assert b.read(1, (6, 2)) == (0, 0)
        assert b.port.setBaudRate(BAUD)
        assert b.ph.ping(b.port, 1)[0] == 12            # the AX-12A, still at 1 Mbps
    finally:
        b.close()


def test_eeprom_survives_a_restart_with_a_state_file(tmp_path):
    # the bus's `eeprom` state file keeps what a client wrote to EEPROM (docs/configuration.md); RAM starts afresh
    launcher = Dxl1Launcher(tmp_path)
    rig = write_rig(tmp_path, "dxl1_eeprom", eeprom=tmp_path / "eeprom.toml")
    try:
        d = launcher.start(rig)
        b = Bus(d.rig.port)
        assert b.write(AX, (6, 2), 200) == 0                       # CW Angle Limit: EEPROM
        assert b.write(AX, (25, 1), 1) == 0                        # LED: RAM
        b.close()
        assert d.terminate() == 0
        d = launcher.start(rig)
        b = Bus(d.rig.port)
        assert b.read(AX, (6, 2)) == (200, 0)
        assert b.read(AX, (25, 1)) == (0, 0)
        b.close()
    finally:
        launcher.finish()
