"""The CiA 301 node of one eRob offline: frames in, frames out, on a drive over a stepped kernel.

Deterministic companions of the live python-canopen tests (test_canopen.py): the time services run
on synthetic clocks here, so inhibit times, event timers and heartbeat periods are checked exactly.
Expected frames come from CiA 301 (COB-IDs, SDO command specifiers, abort codes, NMT states) and from
ZeroErr's EDS defaults (ZeroErr Driver_V1.5.eds), not from the code under test.
"""

from __future__ import annotations

import itertools
import struct

import pytest

from drivers.emulated.canopen.node import CanopenNode, NmtState
from drivers.emulated.slcan.adapter import CanFrame
from firmware_models.erob.drive import new_drive
from hil.joint import KernelJoint
from hil.kernel import Kernel
from hil.params import catalog
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

NODE = 2
SDO_RX, SDO_TX = 0x600 + NODE, 0x580 + NODE
DT = 1e-3


class Bench:
    """Node 2 (eRob80:100) on a one-actuator kernel; `out` collects the frames it sends."""

    def __init__(self):
        spec = catalog.entry("erob80_100").actuator("m6")
        kernel = Kernel(1, DT)
        kernel.set_params(0, kernel_params(spec, LoadConfig(), EncoderConfig(), FaultConfig(), "euler"))
        self.joint = KernelJoint(kernel)
        self.drive = new_drive("erob80_100", NODE, self.joint)
        self.out: list[CanFrame] = []
        self.node = CanopenNode(self.drive, NODE, self.out.append)
        self.t = 100.0
        self.node.boot(self.t)

    def frame(self, cid: int, data: bytes = b"", remote: bool = False) -> list[CanFrame]:
        self.out.clear()
        self.node.handle(CanFrame(cid, data, remote=remote), self.t)
        return list(self.out)

    def tick(self, n: int = 1) -> list[CanFrame]:
        """n control periods: drive tick, kernel step, node time services."""
        self.out.clear()
        for _ in range(n):
            self.drive.tick()
            self.joint.step()
            self.t += DT
            self.node.poll(self.t)
        return list(self.out)

    def nmt(self, cs: int, node: int = NODE) -> list[CanFrame]:
        return self.frame(0, bytes([cs, node]))

    def download(self, index: int, sub: int, value: int, size: int) -> bytes:
        cmd = 0x23 | (4 - size) << 2
        reply = [f for f in self.frame(SDO_RX, struct.pack("<BHBI", cmd, index, sub, value)) if f.id == SDO_TX]
        assert len(reply) == 1
        return reply[0].data

    def ok(self, index: int, sub: int, value: int, size: int) -> None:
        assert self.download(index, sub, value, size)[0] == 0x60

    def abort(self, index: int, sub: int, value: int, size: int) -> int:
        data = self.download(index, sub, value, size)
        assert data[0] == 0x80
        return struct.unpack_from("<I", data, 4)[0]

    def upload(self, index: int, sub: int = 0) -> int:
        reply = [f for f in self.frame(SDO_RX, struct.pack("<BHB4x", 0x40, index, sub)) if f.id == SDO_TX]
        assert len(reply) == 1 and reply[0].data[0] & 0xE3 == 0x43, reply
        n = 4 - (reply[0].data[0] >> 2 & 3)
        return int.from_bytes(reply[0].data[4:4 + n], "little")

    def remap_tpdo1(self, entries: list[int], ttype: int, inhibit: int = 0, timer: int = 0) -> None:
        self.ok(0x1800, 1, 0x8000_0182, 4)
        self.ok(0x1A00, 0, 0, 1)
        for k, e in enumerate(entries, 1):
            self.ok(0x1A00, k, e, 4)
        self.ok(0x1A00, 0, len(entries), 1)
        self.ok(0x1800, 2, ttype, 1)
        self.ok(0x1800, 3, inhibit, 2)
        self.ok(0x1800, 5, timer, 2)
        self.ok(0x1800, 1, 0x182, 4)


@pytest.fixture
def b() -> Bench:
    return Bench()


def test_boot_up_and_nmt_states(b: Bench):
    assert b.node.state == NmtState.PRE_OPERATIONAL
    out = b.nmt(0x81)                                   # reset node
    assert [(f.id, f.data) for f in out] == [(0x702, b"\x00")]
    assert b.nmt(0x01, node=3) == [] and b.node.state == NmtState.PRE_OPERATIONAL   # another node's
    b.nmt(0x01, node=0)                                  # all nodes
    assert b.node.state == NmtState.OPERATIONAL
    b.frame(0, b"\x02")                                  # DLC 1: ignored
    assert b.node.state == NmtState.OPERATIONAL
    b.nmt(0x02)
    assert b.node.state == NmtState.STOPPED
    assert b.frame(SDO_RX, struct.pack("<BHB4x", 0x40, 0x1000, 0)) == []   # no SDO while stopped
    b.nmt(0x80)
    assert b.upload(0x1000) == 0x00420192


def test_heartbeat_period_and_reset_communication(b: Bench):
    b.ok(0x1017, 0, 20, 2)                               # 20 ms
    beats = [f for f in b.tick(100) if f.id == 0x702]
    assert len(beats) in (4, 5) and {f.data for f in beats} == {b"\x7f"}
    b.nmt(0x01)
    assert {f.data for f in b.tick(40) if f.id == 0x702} == {b"\x05"}
    b.nmt(0x82)                                          # reset communication: 0x1017 back to 0
    assert b.upload(0x1017) == 0
    assert [f for f in b.tick(50) if f.id == 0x702] == []


def test_node_guarding_toggles(b: Bench):
    replies = [b.frame(0x702, remote=True)[0].data[0] for _ in range(3)]
    assert replies == [0x7F, 0xFF, 0x7F]


def test_sdo_aborts(b: Bench):
    assert b.abort(0x5555, 0, 0, 4) == 0x06020000
    assert b.abort(0x1018, 9, 0, 4) == 0x06090011
    assert b.abort(0x6041, 0, 0, 2) == 0x06010002       # statusword is read-only
    assert b.abort(0x6040, 0, 0, 4) == 0x06070010       # U16 written with 4 bytes
    assert b.abort(0x6060, 0, 2, 1) == 0x06090030       # mode 2 is not supported
    assert b.abort(0x1010, 1, 0x12345678, 4) == 0x08000020
    assert b.abort(0x1A00, 1, 0x60640020, 4) == 0x06090030   # mapping a valid TPDO
    b.ok(0x1800, 1, 0x8000_0182, 4)
    assert b.abort(0x1A00, 1, 0x60640020, 4) == 0x06090030   # sub 0 still 1
    b.ok(0x1A00, 0, 0, 1)
    b.ok(0x1A00, 1, 0x60400010, 4)                      # the controlword is readable: mappable in a TPDO
    assert b.abort(0x1A00, 2, 0x10000020, 4) == 0x06040041   # device type: not mappable
    assert b.abort(0x1A00, 3, 0x60640010, 4) == 0x06040041   # 16 bits of a 32-bit object
    for k in range(1, 4):
        b.ok(0x1A00, k, 0x60640020, 4)
    assert b.abort(0x1A00, 0, 3, 1) == 0x06040042       # 96 bits > 64
    assert b.abort(0x1800, 1, 0x182, 4) == 0x06090030   # valid with an empty mapping
    assert b.abort(0x1800, 2, 245, 1) == 0x06090030     # reserved transmission type


def test_expedited_download_without_size(b: Bench):
    reply = b.frame(SDO_RX, struct.pack("<BHBI", 0x22, 0x6060, 0, 8))   # e = 1, s = 0: 4 data bytes
    assert reply[0].data[0] == 0x60 and b.upload(0x6060) == 8


def test_sync_tpdo_and_rtr(b: Bench):
    b.remap_tpdo1([0x60410010, 0x60640020], ttype=2)
    b.nmt(0x01)
    sent = [len([f for f in b.frame(0x80) if f.id == 0x182]) for _ in range(6)]
    assert sent == [0, 1, 0, 1, 0, 1]                   # every 2nd SYNC
    (tpdo,) = [f for f in b.frame(0x182, remote=True) if f.id == 0x182]
    sw, pos = struct.unpack("<Hi", tpdo.data)
    assert sw == b.drive.statusword and pos == b.drive.read(0x6064)
    assert [f.id for f in b.frame(0x80, b"\x01")] == [0x82]   # SYNC with a counter: EMCY 0x8240
    assert b.out[0].data[:2] == b"\x40\x82"


def test_event_tpdo_inhibit_and_timer(b: Bench):
    b.remap_tpdo1([0x60410010], ttype=255, inhibit=50, timer=20)   # 5 ms inhibit, 20 ms timer
    out = b.nmt(0x01)
    assert [f.id for f in out] == [0x182]               # once on entering OPERATIONAL
    times = []
    for _ in range(100):
        if any(f.id == 0x182 for f in b.tick()):
            times.append(round(b.t - 100.0, 3))
    gaps = {round(t1 - t0, 3) for t0, t1 in itertools.pairwise(times)}
    assert gaps == {0.02}                               # nothing changes: the event timer alone
    while not any(f.id == 0x182 for f in b.tick()):     # just after a transmission …
        pass
    b.ok(0x6040, 0, 0x06, 2)                            # … the statusword changes (shutdown)
    assert b.drive.statusword & 0x6F == 0x21
    assert [f.id for f in b.out if f.id == 0x182] == []  # inhibited
    sent_after = next(k for k in range(1, 20) if any(f.id == 0x182 for f in b.tick()))
    assert sent_after in (5, 6)                         # once the 5 ms inhibit time has passed


def test_rpdo_sync_buffering_and_length(b: Bench):
    # RPDO1 default: controlword, type 255 → applied at once; type 1 → at the next SYNC
    b.tick()                                            # the drive completes its power-up
    b.nmt(0x01)
    b.frame(0x202, struct.pack("<H", 0x06))
    assert b.drive.statusword & 0x6F == 0x21
    b.ok(0x1400, 1, 0x8000_0202, 4)
    b.ok(0x1400, 2, 1, 1)
    b.ok(0x1400, 1, 0x202, 4)
    b.frame(0x202, struct.pack("<H", 0x07))
    assert b.drive.statusword & 0x6F == 0x21            # buffered
    b.frame(0x80)
    assert b.drive.statusword & 0x6F == 0x23            # applied at the SYNC
    out = b.frame(0x202, b"\x0f")                       # 1 byte for a 2-byte mapping
    assert [(f.id, f.data[:2]) for f in out] == [(0x82, b"\x10\x82")]   # EMCY 0x8210
    b.frame(0x80)
    assert b.drive.statusword & 0x6F == 0x23            # not applied


def test_save_parameters_survive_reset_node(b: Bench):
    b.ok(0x6065, 0, 12345, 4)
    b.ok(0x1010, 1, 0x65766173, 4)                      # "save"
    b.ok(0x6065, 0, 777, 4)
    b.nmt(0x81)
    assert b.upload(0x6065) == 12345
