"""Bad input on a Dynamixel Protocol 1.0 bus offline (AX-12A, MX-64, MX-106 firmware on offline kernels): random
well-framed packets aimed at the control tables, bit flips and byte noise never raise inside the firmware, every
answer is a status packet whose error byte uses only Protocol 1.0's bits (e-manual Protocol 1.0 §Status Packet:
bit 7 is always 0), and the bus still answers afterwards. 10⁴ inputs in CI, 10⁶ in the soak."""

from __future__ import annotations

import random

import pytest

from drivers.emulated.protocol1.dynamixel import Dynamixel1Bus
from drivers.emulated.protocol1.frame import Parser, checksum, encode_instruction
from firmware_models.dynamixel.protocol1.servo import Dynamixel1Servo
from firmware_models.dynamixel.protocol1.table import load_model
from hil.joint import KernelJoint
from hil.kernel import Kernel
from hil.params.catalog import entry
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params
from tests.drivers.protocol1.fuzz_input import random_input

INSTRUCTIONS = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x08, 0x82, 0x83, 0x92, 0x00, 0xFF]
ADDRESSES = [0, 3, 4, 5, 6, 8, 11, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 44, 47, 48, 50, 68, 70, 71,
             73, 74, 200]


def bus_of() -> Dynamixel1Bus:
    servos = []
    for dxl_id, catalog in ((1, "ax12a"), (2, "mx64"), (3, "mx106")):
        kernel = Kernel(1, 1e-3)
        kernel.set_params(0, kernel_params(entry(catalog).actuator(), LoadConfig(), EncoderConfig(), FaultConfig(),
                                           "euler"))
        servos.append(Dynamixel1Servo(load_model(catalog), KernelJoint(kernel), {"ID": dxl_id}))
    return Dynamixel1Bus(servos)


def fuzz(n: int, seed: int) -> None:
    rng = random.Random(seed)
    bus = bus_of()
    parser = Parser()
    t = 0.0
    for t, data in random_input(rng, n, INSTRUCTIONS, ADDRESSES, max_params=10, aim=0.6):
        for packet in parser.feed(data, t):
            for tx in bus.handle(packet, None):
                body = tx.data[2:-1]
                assert tx.data[:2] == b"\xff\xff" and tx.data[-1] == checksum(body)
                assert body[2] & 0x80 == 0, f"error byte {body[2]:#04x}"
        if rng.random() < 0.01:
            for s in bus.servos:
                s.housekeeping()
    assert bus.errors_isolated == 0, "an input raised inside the firmware"
    replies = 0
    for dxl_id, s in enumerate(bus.servos, 1):   # whatever ID, Baud Rate, Lock or Status Return Level the fuzz
        s.table.data[:] = s._factory             # left: factory values, the rig's ID, a power-up
        s.table.set("ID", dxl_id)
        s.power_cycle()
    for dxl_id in (1, 2, 3):
        t += 0.01
        txs = bus.handle(parser.feed(encode_instruction(dxl_id, 0x01), t)[0], None)
        replies += [tx.data[2] for tx in txs] == [dxl_id]
    assert replies == 3


def test_fuzz_bounded():
    fuzz(10_000, seed=1)


@pytest.mark.soak
def test_fuzz_soak():
    fuzz(1_000_000, seed=2)
