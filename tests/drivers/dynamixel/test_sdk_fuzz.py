"""Bus-level fuzz: random bytes and mutated valid instruction packets written straight to the pty (past the SDK's
packet builder, through its pyserial handle, so with the SDK's termios), each followed by a valid Ping through the
SDK: the bus must still answer, and the daemon must stay up (ZeroMQ `status`). Between the garbage and the Ping the
line is left idle for more than the e-manual's 1.5 ms inter-byte timeout (Protocol 2.0 §Instruction Packet), so a
partial packet the garbage started is dropped, as a servo drops it; replies the garbage provoked are drained before
the Ping. The bounded run is ~50 examples; `-m soak` runs the long one."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import IDS, MODEL, crc16, write_dxl_rig

HEADER = bytes([0xFF, 0xFF, 0xFD, 0x00])


def instruction(dxl_id: int, ins: int, params: bytes = b"") -> bytes:
    """A valid Protocol 2.0 instruction packet (no stuffing needed for the params used here)."""
    body = bytes([dxl_id]) + (len(params) + 3).to_bytes(2, "little") + bytes([ins]) + params
    pkt = HEADER + body
    return pkt + crc16(pkt).to_bytes(2, "little")


# harmless valid packets to mutate: reads and pings only (a mutation that kept a valid CRC must not be able to
# reconfigure the bus: at 1/65536 per mutation that is unlikely, but reads and pings make it harmless too)
BASES = [
    instruction(1, 0x01),
    instruction(0xFE, 0x01),
    instruction(2, 0x02, bytes([132, 0, 4, 0])),
    instruction(3, 0x02, bytes([0, 0, 64, 0])),
    instruction(0xFE, 0x82, bytes([132, 0, 4, 0, 1, 2, 3, 4])),
    instruction(0xFE, 0x8A, bytes([132, 0, 4, 0, 3, 4])),
    instruction(0xFE, 0x92, bytes([1, 132, 0, 4, 0, 4, 146, 0, 1, 0])),
    instruction(4, 0x02, bytes([0xFD, 0xFF, 0xFF, 0xFF])),            # absurd length: Access Error
]


@st.composite
def mutated(draw) -> bytes:
    pkt = bytearray(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "header"]))
        i = draw(st.integers(0, max(0, len(pkt) - 1)))
        if op == "flip" and pkt:
            pkt[i] ^= draw(st.integers(1, 255))
        elif op == "insert":
            pkt[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and len(pkt) > 1:
            del pkt[i]
        elif op == "truncate":
            del pkt[i:]
        elif op == "header":                  # a stray header that claims a long packet
            pkt[i:i] = HEADER + bytes([draw(st.integers(0, 255)), 0xFF, 0x7F])
    return bytes(pkt)


garbage = st.lists(st.one_of(st.binary(min_size=1, max_size=64), mutated()), min_size=1, max_size=6)


@pytest.fixture(scope="module")
def daemon(module_launcher):
    return module_launcher.start(write_dxl_rig(module_launcher.dir, "sdk-fuzz", fast=True, lockstep=False))


def drain(port, quiet_s: float = 0.005, limit_s: float = 0.5) -> None:
    """Read and drop what arrives until the line has been quiet for `quiet_s`."""
    end = time.monotonic() + limit_s
    last = time.monotonic()
    while time.monotonic() < end and time.monotonic() - last < quiet_s:
        if port.ser.read(4096):
            last = time.monotonic()
        else:
            time.sleep(2e-4)


def assert_alive(daemon, dxl, chunks, target: int) -> None:
    """A Ping is answered, at the latest on a second attempt. The emulator can only time the inter-byte gap
    from when its bus thread *reads* the bytes: if that thread was starved while the garbage arrived (2 cores,
    the SDK spinning), the garbage and the first Ping can look back to back and a stray header then swallows the
    Ping, as it would on a real bus without the gap; and a late reply to the garbage (a CRC Error status from the
    same ID) can arrive after the drain and be taken by the SDK as the Ping's reply. The retry comes after a
    certain gap and a second drain."""
    model, comm, _ = dxl.ping(target)
    if (model, comm) != (MODEL[target], 0):
        drain(dxl.port, quiet_s=0.02)
        model, comm, _ = dxl.ping(target)
    assert (model, comm) == (MODEL[target], 0), f"ping {target} after {[c.hex() for c in chunks]}: comm {comm}"
    assert daemon.alive, daemon.stderr()


def fuzz_once(daemon, dxl, chunks: list[bytes], target: int) -> None:
    for c in chunks:
        dxl.port.ser.write(c)
    time.sleep(0.01)                           # > 1.5 ms: a partial packet is dropped
    drain(dxl.port)
    assert_alive(daemon, dxl, chunks, target)


@settings(max_examples=50, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(chunks=garbage, target=st.sampled_from(IDS))
def test_fuzz_then_ping(daemon, dxl, chunks, target):
    fuzz_once(daemon, dxl, chunks, target)


def test_daemon_status_after_fuzz(daemon, dxl):
    status = daemon.ok("status")["status"]
    assert status["loop_alive"] is True
    for i in IDS:
        assert dxl.ping(i)[:2] == (MODEL[i], 0)


def test_garbage_interleaved_with_a_valid_packet(daemon, dxl):
    """Noise, then a valid Read in the same write: the parser resynchronises on the header and answers it."""
    pkt = instruction(2, 0x02, bytes([0, 0, 2, 0]))
    dxl.port.ser.write(bytes([0x00, 0xFF, 0x13, 0xFF, 0xFF, 0x42]) + pkt)
    got = b""
    end = time.monotonic() + 2.0   # returns as soon as the reply is in
    while len(got) < 13 and time.monotonic() < end:
        got += dxl.port.ser.read(64)
    assert got[:9] == HEADER + bytes([2, 6, 0, 0x55, 0])
    assert int.from_bytes(got[9:11], "little") == MODEL[2]
    assert int.from_bytes(got[11:13], "little") == crc16(got[:11])


@pytest.mark.soak
@settings(max_examples=3000, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(chunks=st.lists(st.one_of(st.binary(min_size=1, max_size=512), mutated()), min_size=1, max_size=20),
       target=st.sampled_from(IDS))
def test_fuzz_then_ping_soak(daemon, dxl, chunks, target):
    fuzz_once(daemon, dxl, chunks, target)
