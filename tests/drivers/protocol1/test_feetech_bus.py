"""The Feetech bus offline: who answers, in which order and when, and what malformed input gets, with STS3215
firmware models on offline kernels. Frames are built by hand from the Feetech SCS protocol (Protocol 1.0's frame)
and decoded with the frame parser; expected orders and offsets from the bus rules in docs/feetech.md."""

from __future__ import annotations

import random

import pytest

from drivers.emulated.protocol1.bus import Protocol1Bus
from drivers.emulated.protocol1.feetech import FEETECH
from drivers.emulated.protocol1.frame import BROADCAST_ID, CorruptPacket, Packet, Parser, encode_instruction
from drivers.wire.faults import BusFaults
from drivers.wire.ports import wire_time_s
from tests.drivers.protocol1.fuzz_input import random_input
from tests.firmware_models.feetech.servo_kit import sts_servo

BAUD = 1_000_000
PING, READ, WRITE, REG_WRITE, ACTION, SYNC_READ, SYNC_WRITE = 0x01, 0x02, 0x03, 0x04, 0x05, 0x82, 0x83


def bus_of(*ids: int, delays_us: dict[int, int] | None = None) -> Protocol1Bus:
    servos = []
    for i in ids:
        s = sts_servo({"ID": i, "Return_Delay_Time": (delays_us or {}).get(i, 0) // 2})
        servos.append(s)
    return Protocol1Bus(FEETECH, servos)


def send(bus: Protocol1Bus, pid: int, ins: int, params: bytes = b"", baud: int | None = BAUD):
    wire = encode_instruction(pid, ins, params)
    packets = Parser().feed(wire, 0.0)
    assert len(packets) == 1
    return bus.handle(packets[0], baud)


def replies(txs) -> list[tuple[int, int, bytes]]:
    """(ID, error, params) of each status packet, in order."""
    out = []
    for tx in txs:
        (p,) = Parser().feed(tx.data, 0.0)
        out.append((p.id, p.instruction, p.params))
    return out


def test_broadcast_ping_answered_by_every_servo_in_id_order_without_overlap():
    bus = bus_of(5, 2, 9, delays_us={5: 100})
    txs = send(bus, BROADCAST_ID, PING)
    assert [r[0] for r in replies(txs)] == [2, 5, 9]
    six = wire_time_s(6, BAUD)
    ends = []
    for tx in txs:
        sid = replies([tx])[0][0]
        delay = 100e-6 if sid == 5 else 0.0
        assert tx.offset_s == pytest.approx(delay + sid * six)
        ends.append(tx.offset_s + six)
    starts = [tx.offset_s for tx in txs]
    assert all(starts[k + 1] >= ends[k] for k in range(len(txs) - 1))


def test_sync_read_answers_in_the_requests_order_each_after_the_one_before():
    bus = bus_of(1, 2, 3, delays_us={2: 40})
    txs = send(bus, BROADCAST_ID, SYNC_READ, bytes([56, 2, 3, 1, 2]))
    got = replies(txs)
    assert [r[0] for r in got] == [3, 1, 2]
    assert all(len(r[2]) == 2 for r in got)
    byte = wire_time_s(1, BAUD)
    assert txs[0].offset_s == 0.0
    assert txs[1].offset_s == pytest.approx(8 * byte)
    assert txs[2].offset_s == pytest.approx(16 * byte + 40e-6)


def test_sync_write_is_executed_and_never_answered():
    bus = bus_of(1, 2)
    assert send(bus, BROADCAST_ID, SYNC_WRITE, bytes([48, 2, 1, 0x2C, 0x01, 2, 0x64, 0x00])) == []
    assert [int.from_bytes(s.table.read(48, 2), "little") for s in bus.servos] == [300, 100]


def test_status_return_level_0_answers_only_ping_and_read():
    bus = bus_of(1)
    send(bus, 1, WRITE, bytes([8, 0]))           # Response_Status_Level = 0
    assert send(bus, 1, WRITE, bytes([41, 10])) == []
    assert replies(send(bus, 1, READ, bytes([41, 1]))) == [(1, 0, bytes([10]))]
    assert len(send(bus, 1, PING)) == 1


def test_reg_write_and_broadcast_action():
    bus = bus_of(1, 2)
    send(bus, 1, REG_WRITE, bytes([41, 50]))
    send(bus, 2, REG_WRITE, bytes([41, 60]))
    assert [s.table.get("Acceleration") for s in bus.servos] == [0, 0]
    assert send(bus, BROADCAST_ID, ACTION) == []
    assert [s.table.get("Acceleration") for s in bus.servos] == [50, 60]


def test_reset_restores_factory_values_but_keeps_id_and_baud():
    bus = bus_of(3)
    send(bus, 3, WRITE, bytes([55, 0]))          # Lock = 0: the next write is saved
    send(bus, 3, WRITE, bytes([21, 10]))         # P_Coefficient
    assert replies(send(bus, 3, 0x06)) == [(3, 0, b"")]
    assert replies(send(bus, 3, READ, bytes([21, 1]))) == [(3, 0, bytes([32]))]


def test_sync_read_skips_an_absent_id():
    bus = bus_of(1, 2)
    assert [r[0] for r in replies(send(bus, BROADCAST_ID, SYNC_READ, bytes([56, 2, 2, 7, 1])))] == [2, 1]


def test_a_servo_at_another_baud_rate_does_not_hear():
    bus = bus_of(1)
    assert send(bus, 1, PING, baud=115_200) == []
    assert len(send(bus, 1, PING, baud=BAUD)) == 1


def test_bad_checksum_unknown_instruction_and_bad_lengths_are_not_answered():
    bus = bus_of(1)
    wire = bytearray(encode_instruction(1, READ, bytes([56, 2])))
    wire[-1] ^= 0x01
    (bad,) = Parser().feed(bytes(wire), 0.0)
    assert isinstance(bad, CorruptPacket)
    assert bus.handle(bad, BAUD) == []
    assert send(bus, 1, 0x7F, b"\x00") == []             # no such instruction
    assert send(bus, 1, READ, bytes([56])) == []         # READ without its length
    assert send(bus, 1, WRITE, bytes([41])) == []        # WRITE without data
    assert send(bus, BROADCAST_ID, SYNC_WRITE, bytes([42, 2, 1, 0])) == []   # a servo's data cut short
    assert send(bus, 1, READ, bytes([250, 10])) == []    # past the table
    assert bus.errors_isolated == 0                      # each answered as the servo does: no failure
    assert len(send(bus, 1, PING)) == 1                  # and the bus serves on


def test_injected_faults_apply_to_the_replies():
    s = sts_servo({"ID": 1, "Return_Delay_Time": 0})
    faults = BusFaults(drop=1.0)
    bus = Protocol1Bus(FEETECH, [s], [faults])
    assert send(bus, 1, PING) == []
    faults.clear("drop")
    faults.delay_s = 0.002
    (tx,) = send(bus, 1, PING)
    assert tx.offset_s == pytest.approx(0.002)


def fuzz(n: int, seed: int) -> None:
    """`n` random inputs: well-framed packets with random IDs, instructions and parameters, and raw byte noise;
    the bus must never raise out of handle() and must still answer a ping after them."""
    rng = random.Random(seed)
    bus = bus_of(1, 2)
    parser = Parser()
    instructions = [PING, READ, WRITE, REG_WRITE, ACTION, 0x06, SYNC_READ, SYNC_WRITE, 0x92, 0x00, 0xFF]
    addresses = [5, 6, 8, 31, 33, 40, 42, 46, 48, 55, 56, 85, 250]   # STS memory table items, and past its end
    for t, data in random_input(rng, n, instructions, addresses, max_params=12, aim=0.5):
        for packet in parser.feed(data, t):
            for tx in bus.handle(packet, None):
                assert tx.data[:2] == b"\xff\xff"
    for s in bus.servos:      # an ID or baud the fuzz changed: back to a servo that answers at 1 Mbps on ID 1, 2
        s.table.set("Baud_Rate", 0)
        s._cache()
    live = [s.id for s in bus.servos]
    assert bus.errors_isolated == 0, "an input raised inside the firmware"
    assert any(isinstance(p, Packet) for p in Parser().feed(encode_instruction(live[0], PING), 0.0))
    assert replies(send(bus, live[0], PING))[0][0] == live[0]


def test_fuzz_bounded():
    fuzz(10_000, seed=1)


@pytest.mark.soak
def test_fuzz_soak():
    fuzz(1_000_000, seed=2)
