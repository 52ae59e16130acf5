"""Fuzz of the CANopen bus of a running daemon: the SLCAN line parser (raw lines past python-can: `parser_round`,
`random_bytes_round`) and the nodes' SDO servers (random requests through python-can: `SdoFuzzer`). Seeded
`random.Random` everywhere; the default runs are short, `-m soak` (make soak) runs the long ones."""

from __future__ import annotations

import random
import re
import struct
import time

import can
import canopen
import pytest
import serial

from tests.drivers import read_serial

from .conftest import BITRATE, NODE_IDS, CanLauncher, connect, write_can_rig

SEED = 0x5E20B

BEL = b"\x07"
HEX = "0123456789ABCDEF"
NOT_HEX = "GHIJKLMNOPQRSUVWXYZghijklmnopqrsuvwxyz!#$%&()*+,-./:;<=>?@[]^_`{|}~ "
# command letters a Lawicel adapter (drivers/emulated/slcan/adapter.py's table) does not know: BEL whatever follows
UNKNOWN_COMMANDS = "ABDEGHIJKMPQUWXYabcdeghijklmnopquwxy"
# std / ext ids nodes 2 and 3 do not consume (NMT 0, SYNC 0x80, PDOs 0x18x–0x50x, SDO 0x60x, 0x70x; no ext ids)
FREE_STD_IDS = (0x123, 0x05A, 0x0F1)

# CiA 301 §7.2.4.3.17, Table 22: the SDO abort codes
CIA301_ABORTS = {
    0x05030000, 0x05040000, 0x05040001, 0x05040002, 0x05040003, 0x05040004, 0x05040005, 0x06010000, 0x06010001,
    0x06010002, 0x06020000, 0x06040041, 0x06040042, 0x06040043, 0x06040047, 0x06060000, 0x06070010, 0x06070012,
    0x06070013, 0x06090011, 0x06090030, 0x06090031, 0x06090032, 0x06090036, 0x060A0023, 0x08000000, 0x08000020,
    0x08000021, 0x08000022, 0x08000023, 0x08000024,
}
ABORT_TOGGLE = 0x05030000
ABORT_COMMAND = 0x05040001

# a well-formed reply of a Lawicel adapter: OK, BEL, transmit acks, V/v/N/F answers, received frames (+ timestamp)
_REPLY = re.compile(rb"\r|\x07|z\r|Z\r|[Vv]\d{4}\r|N[0-9A-Za-z]{4}\r|F[0-9A-F]{2}\r"
                    rb"|t[0-7][0-9A-F]{2}([0-8])[0-9A-F]*\r|T[01][0-9A-F]{7}([0-8])[0-9A-F]*\r"
                    rb"|r[0-7][0-9A-F]{2}[0-8](?:[0-9A-F]{4})?\r|R[01][0-9A-F]{7}[0-8](?:[0-9A-F]{4})?\r")


# ------------------------------------------------------------------------------------- the raw line
class RawLine:
    """The pty opened with pyserial as a terminal program would: bytes in, bytes out, no python-can."""

    def __init__(self, path: str):
        self.ser = serial.Serial(path, 115200, timeout=0)

    def close(self) -> None:
        self.ser.close()

    def write(self, data: bytes) -> None:
        self.ser.write(data)
        self.ser.flush()

    def read(self, n: int, timeout: float = 1.0) -> bytes:
        return read_serial(self.ser, n, timeout, poll_s=2e-4)

    def drain(self, quiet: float = 0.03, limit: float = 1.0) -> bytes:
        out = bytearray()
        end = time.monotonic() + limit
        last = time.monotonic()
        while time.monotonic() < end and time.monotonic() - last < quiet:
            chunk = self.ser.read(4096)
            if chunk:
                out += chunk
                last = time.monotonic()
            else:
                time.sleep(5e-4)
        return bytes(out)

    def open_channel(self) -> None:
        """What python-can does on open (close, 1 Mbit/s, open), plus timestamps off."""
        self.write(b"\rC\rZ0\rS8\rO\r")
        self.drain()

    def sdo_upload_1000(self, node_id: int, timeout: float = 1.0) -> bytes:
        """A raw expedited upload of 0x1000 (device type); the node's reply line (without a timestamp)."""
        self.write(f"t{0x600 + node_id:03X}84000100000000000\r".encode())
        buf = b""
        end = time.monotonic() + timeout
        want = f"t{0x580 + node_id:03X}8".encode()
        while time.monotonic() < end:
            buf += self.read(1, 0.01)
            i = buf.find(want)
            if i >= 0 and buf.find(b"\r", i) > 0:
                return buf[i:i + 21]
        raise AssertionError(f"no SDO reply from node {node_id}; line held {buf!r}")


def check_replies(data: bytes) -> None:
    """`data` is a sequence of well-formed adapter replies; frame lines carry exactly their DLC of data."""
    pos = 0
    while pos < len(data):
        m = _REPLY.match(data, pos)
        assert m, f"malformed adapter output at {pos}: {data[pos:pos + 40]!r} (in {data[:200]!r})"
        token = m.group(0)
        dlc = m.group(1) or m.group(2)
        if dlc is not None:
            digits = len(token) - 1 - (5 if token[:1] == b"t" else 10)
            assert digits in (2 * int(dlc), 2 * int(dlc) + 4), f"frame with DLC {dlc}: {token!r}"
        pos = m.end()


# ------------------------------------------------------------------------------------- (a) line generators
def _hexs(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(HEX) for _ in range(n))


def valid_frame(rng: random.Random) -> tuple[str, bytes]:
    """A valid transmit line to an id no node listens to, and the adapter's acknowledgement."""
    kind = rng.choice("tTrR")
    ident = f"{rng.choice(FREE_STD_IDS):03X}" if kind in "tr" else f"{rng.randrange(0x20000000):08X}"
    dlc = rng.randrange(9)
    data = "" if kind in "rR" else _hexs(rng, 2 * dlc)
    return f"{kind}{ident}{dlc}{data}", (b"z\r" if kind in "tr" else b"Z\r")


def malformed_line(rng: random.Random) -> tuple[str, bytes]:
    """A line that is malformed by construction (the reason is returned for the failure message)."""
    kind = rng.choice("tT")
    width = 3 if kind == "t" else 8
    ident = f"{rng.choice(FREE_STD_IDS):03X}" if kind == "t" else f"{rng.randrange(0x20000000):08X}"
    dlc = rng.randrange(9)
    data = _hexs(rng, 2 * dlc)
    how = rng.choice(["id_char", "dlc", "odd_data", "byte_count", "data_char", "remote_data", "std_id_range",
                      "ext_id_range", "truncated", "unknown", "junk_after", "while_open", "too_long", "binary"])
    if how == "id_char":
        i = rng.randrange(width)
        ident = ident[:i] + rng.choice(NOT_HEX) + ident[i + 1:]
        line = f"{kind}{ident}{dlc}{data}"
    elif how == "dlc":
        line = f"{kind}{ident}{rng.choice('9ABCDEFabcdef:/xX ')}{data}"
    elif how == "odd_data":
        line = f"{kind}{ident}{dlc}{data}{rng.choice(HEX)}" if dlc == 0 or rng.random() < 0.5 \
            else f"{kind}{ident}{dlc}{data[:-1]}"
    elif how == "byte_count":
        line = f"{kind}{ident}{dlc}{data}{_hexs(rng, 2)}" if dlc == 0 or rng.random() < 0.5 \
            else f"{kind}{ident}{dlc}{data[:-2]}"
    elif how == "data_char":
        if dlc == 0:
            data, dlc = "00", 1
        i = rng.randrange(len(data))
        line = f"{kind}{ident}{dlc}{data[:i]}{rng.choice(NOT_HEX)}{data[i + 1:]}"
    elif how == "remote_data":
        line = f"{'r' if kind == 't' else 'R'}{ident}{max(dlc, 1)}{_hexs(rng, 2 * rng.randrange(1, 9))}"
    elif how == "std_id_range":
        line = f"t{rng.randrange(0x800, 0x1000):03X}{dlc}{data}"
    elif how == "ext_id_range":
        line = f"T{rng.randrange(0x20000000, 0x100000000):08X}{dlc}{data}"
    elif how == "truncated":
        line = f"{kind}{ident}{dlc}{data}"[:rng.randrange(1, width + 1)]
    elif how == "unknown":
        line = rng.choice(UNKNOWN_COMMANDS) + "".join(rng.choice(HEX + NOT_HEX) for _ in range(rng.randrange(12)))
    elif how == "junk_after":            # a known one-letter command followed by junk
        line = rng.choice("CVNFvZ") + "".join(rng.choice("xyQ!" + HEX) for _ in range(rng.randrange(1, 6)))
    elif how == "while_open":            # configuration commands refused while the channel is open
        line = rng.choice(["O", "L", "S8", "S6", f"S{rng.randrange(9)}", "s0014", "s011C", "Z0", "Z1"])
    elif how == "too_long":
        line = kind + _hexs(rng, rng.randrange(70, 200))
    else:                                # a first byte that is no command, then anything but CR / LF
        first = rng.choice([*range(0x00, 0x0A), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x80, 0x100)])
        rest = bytes(rng.choice([b for b in range(256) if b not in (0x0A, 0x0D)]) for _ in range(rng.randrange(20)))
        return (bytes([first]) + rest).decode("latin-1"), b"binary"
    return line, how.encode()


def parser_round(line: RawLine, rng: random.Random, n_lines: int) -> None:
    """Lines written straight to the pty with pyserial, past python-can. Lines malformed by construction (Lawicel
    CANUSB manual: `tiiildd…` / `Tiiiiiiiildd…` with an 11/29-bit id, one DLC digit 0..8 and exactly DLC data bytes,
    `riiil` / `Riiiiiiiil` without data; any other command the adapter does not know) each get exactly one BEL
    (0x07), in order, interleaved with valid frames that get `z`/`Z` CR."""
    lines, expected, why = [], b"", []
    for _ in range(n_lines):
        if rng.random() < 0.3:
            text, ack = valid_frame(rng)
            expected += ack
            why.append(("valid", text))
        else:
            text, how = malformed_line(rng)
            expected += BEL
            why.append((how.decode(), text))
        lines.append(text.encode("latin-1") + b"\r")
    payload = b"".join(lines)
    # in random pieces: the adapter must reassemble lines across reads
    pos = 0
    while pos < len(payload):
        step = rng.randrange(1, 64)
        line.write(payload[pos:pos + step])
        pos += step
    got = line.read(len(expected), 2.0)
    got += line.drain(quiet=0.02)
    if got != expected:
        replies = _split_replies(got)
        detail = [(w, r) for w, r in zip(why, replies, strict=False) if (r == BEL) != (w[0] != "valid")]
        pytest.fail(f"replies {got!r}\nexpected {expected!r}\nfirst mismatches: {detail[:5]}")


def _split_replies(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        m = _REPLY.match(data, pos)
        if not m:
            out.append(data[pos:])
            break
        out.append(m.group(0))
        pos = m.end()
    return out


def random_bytes_round(line: RawLine, rng: random.Random, n_chunks: int) -> None:
    sent = []
    for _ in range(n_chunks):
        chunk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 160)))
        sent.append(chunk)
        line.write(chunk)
    line.write(b"\r")                      # end whatever line the noise left open
    out = line.drain(quiet=0.03)
    check_replies(out)
    line.open_channel()
    node_id = rng.choice(NODE_IDS)
    reply = line.sdo_upload_1000(node_id)
    assert reply == f"t{0x580 + node_id:03X}84300100092014200".encode(), (reply, sent)   # 0x1000 = 0x00420192


@pytest.fixture
def raw(daemon):
    line = RawLine(daemon.rig.port)
    line.open_channel()
    yield line
    line.write(b"C\r")
    line.close()


def test_slcan_malformed_lines_get_bel(daemon, raw):
    rng = random.Random(SEED)
    for _ in range(12):
        parser_round(raw, rng, 25)
    assert daemon.alive
    assert raw.sdo_upload_1000(2)[:13] == b"t582843001000"


def test_slcan_random_bytes(daemon, raw):
    rng = random.Random(SEED + 1)
    for _ in range(25):
        random_bytes_round(raw, rng, rng.randrange(1, 6))
    assert daemon.alive


@pytest.mark.soak
def test_slcan_fuzz_soak(daemon, raw):
    rng = random.Random(SEED + 2)
    for k in range(1500):
        if k % 2:
            parser_round(raw, rng, rng.randrange(1, 60))
        else:
            random_bytes_round(raw, rng, rng.randrange(1, 12))
    assert daemon.alive


# ------------------------------------------------------------------------------------- (b) SDO server
NO_DOWNLOAD = {0x1014, 0x1016, 0x1029}


def _eds_entries(eds: str) -> list[tuple[int, int]]:
    od = canopen.objectdictionary.import_od(eds, 2)
    out = []
    for obj in od.values():
        if isinstance(obj, canopen.objectdictionary.ODVariable):
            out.append((obj.index, 0))
        else:
            out.extend((obj.index, v.subindex) for v in obj.values())
    return out


class SdoFuzzer:
    """Random SDO requests to the nodes through a raw python-can bus, and the oracle for their replies.

    Random 8-byte requests (all command specifiers, random index / sub-index / size bits / data, segment toggles
    right and wrong) and random DLCs to both nodes; every 8-byte request gets exactly one reply on 0x580 + id (CiA
    301 §7.2.4.3) that answers it (its multiplexer, a matching response specifier or an abort with a CiA 301 abort
    code), except the documented silences: a client abort (CiA 301: unconfirmed) and a DLC ≠ 8 (ignored, as
    CANopenNode does). Segment requests outside a segmented transfer and block uploads must be aborted with
    0x05040001 (CiA 301 §7.2.4.3; no block transfer here). Downloads to 0x1014 (EMCY COB-ID), 0x1016 (heartbeat
    consumer) and 0x1029 (error behaviour) are left out: they may legitimately move the node's EMCYs onto
    0x580 + id or stop it (no SDO at all in STOPPED)."""

    def __init__(self, bus: can.BusABC, rng: random.Random, entries: list[tuple[int, int]]):
        self.bus = bus
        self.rng = rng
        self.entries = entries
        self.transfer: dict[int, tuple[int, int, int] | None] = dict.fromkeys(NODE_IDS)   # (index, sub, toggle)
        self.stats = {"requests": 0, "silent": 0, "aborts": 0, "ok": 0, "toggle_errors": 0}
        self.kinds: dict[str, int] = {}

    def request(self, node_id: int) -> tuple[bytes, str]:
        rng = self.rng
        index, sub = rng.choice(self.entries) if rng.random() < 0.7 else (rng.randrange(0x10000), rng.randrange(256))
        if rng.random() < 0.2:
            sub = rng.randrange(256)
        data = bytes(rng.randrange(256) for _ in range(4))
        transfer = self.transfer[node_id]
        if transfer is not None and rng.random() < 0.6:
            toggle = transfer[2] if rng.random() < 0.8 else transfer[2] ^ 0x10
            cmd = toggle | rng.randrange(8) << 1 | (rng.random() < 0.4)          # n, c
            return bytes([cmd]) + bytes(rng.randrange(256) for _ in range(7)), "segment"
        kind = rng.choice(["download", "upload", "abort", "block_download", "block_upload", "stray_segment",
                           "invalid"])
        if kind == "download" and index in NO_DOWNLOAD:
            kind = "upload"
        low = rng.randrange(32)
        if kind == "download":
            cmd = 0x20 | low & 0x0F
        elif kind == "upload":
            cmd = 0x40 | low
        elif kind == "abort":
            cmd = 0x80 | low
        elif kind == "block_download":
            cmd = 0xC0 | low
        elif kind == "block_upload":
            cmd = 0xA0 | low
        elif kind == "stray_segment":     # no transfer of that direction: during a download, an upload segment
            cmd = (0x60 if transfer is not None else rng.choice([0x00, 0x60])) | low
        else:
            cmd = 0xE0 | low
        return struct.pack("<BHB", cmd, index, sub) + data, kind

    def drain(self) -> list[can.Message]:
        stale = []
        while (msg := self.bus.recv(0)) is not None:
            stale.append(msg)
        return stale

    def one(self, node_id: int) -> None:
        rng = self.rng
        stale = [m for m in self.drain() if m.arbitration_id in (0x582, 0x583)]
        assert not stale, f"SDO frames nobody asked for: {stale}"
        if rng.random() < 0.1:                                       # a DLC other than 8: ignored
            dlc = rng.randrange(8)
            req = bytes(rng.randrange(256) for _ in range(dlc))
            self.send(node_id, req)
            assert self.reply(node_id, 0.03) is None, f"answered a {dlc}-byte SDO frame {req.hex()}"
            self.stats["silent"] += 1
            return
        req, kind = self.request(node_id)
        self.send(node_id, req)
        self.stats["requests"] += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if kind == "abort":                                          # CiA 301: an abort is not confirmed
            reply = self.reply(node_id, 0.03)
            assert reply is None, f"client abort {req.hex()} answered with {reply.hex()}"
            self.transfer[node_id] = None
            self.stats["silent"] += 1
            return
        reply = self.reply(node_id, 0.5)
        assert reply is not None, f"node {node_id}: no reply to {kind} {req.hex()}"
        assert len(reply) == 8, f"reply {reply.hex()} to {req.hex()}: DLC {len(reply)}"
        self.check(node_id, kind, req, reply)

    def check(self, node_id: int, kind: str, req: bytes, reply: bytes) -> None:
        scs = reply[0] >> 5
        where = f"node {node_id}: {kind} {req.hex()} → {reply.hex()}"
        transfer = self.transfer[node_id]
        if scs == 4:
            code = struct.unpack_from("<L", reply, 4)[0]
            assert code in CIA301_ABORTS, f"{where}: abort code {code:#010x} is not a CiA 301 one"
            if kind in ("download", "upload", "block_download"):
                assert reply[1:4] == req[1:4], f"{where}: the abort names another object"
            if kind == "segment":
                assert transfer is not None
                if req[0] & 0x10 != transfer[2]:
                    assert code == ABORT_TOGGLE, f"{where}: toggle error aborted with {code:#010x}"
                    self.stats["toggle_errors"] += 1
                assert reply[1:4] == struct.pack("<HB", transfer[0], transfer[1]), f"{where}: abort names another"
            if kind in ("invalid", "stray_segment"):
                assert code == ABORT_COMMAND, f"{where}: aborted with {code:#010x}, not 0x05040001"
            self.transfer[node_id] = None
            self.stats["aborts"] += 1
            return
        self.stats["ok"] += 1
        assert kind not in ("invalid", "block_download", "stray_segment"), f"{where}: expected an abort"
        if kind == "block_upload":      # CiA 301 §7.2.4.3.11: a switch to the normal upload only if pst > 0
            assert req[0] & 0x03 == 0 and req[5] > 0, f"{where}: expected an abort (no block transfer)"
            kind = "upload"
        if kind == "download":
            assert reply[0] == 0x60 and reply[1:4] == req[1:4], where
            expedited = req[0] & 0x02
            index, sub = struct.unpack_from("<HB", req, 1)
            self.transfer[node_id] = None if expedited else (index, sub, 0)
        elif kind == "upload":
            assert scs == 2 and reply[1:4] == req[1:4], where
            assert reply[0] & 0x02, f"{where}: segmented upload, but no EDS object is longer than 4 bytes"
            assert reply[0] in (0x43, 0x47, 0x4B, 0x4F), f"{where}: not an expedited, size-indicated reply"
            self.transfer[node_id] = None
        elif kind == "segment":
            assert transfer is not None
            assert req[0] & 0x10 == transfer[2], f"{where}: a wrong toggle was accepted"
            assert reply[0] == 0x20 | transfer[2] and reply[1:] == bytes(7), where
            self.transfer[node_id] = None if req[0] & 0x01 else (transfer[0], transfer[1], transfer[2] ^ 0x10)
        else:
            pytest.fail(f"{where}: unexpected kind")

    def send(self, node_id: int, data: bytes) -> None:
        self.bus.send(can.Message(arbitration_id=0x600 + node_id, data=data, is_extended_id=False))

    def reply(self, node_id: int, timeout: float) -> bytes | None:
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            msg = self.bus.recv(left)
            if msg is not None and msg.arbitration_id == 0x580 + node_id and not msg.is_remote_frame:
                return bytes(msg.data)
            if msg is not None and msg.arbitration_id in (0x582, 0x583):
                pytest.fail(f"reply from the other node: {msg}")
        return None


def nmt_reset_all(bus: can.BusABC) -> None:
    bus.send(can.Message(arbitration_id=0, data=[0x81, 0], is_extended_id=False))
    seen: set[int] = set()
    end = time.monotonic() + 1.0
    while seen != set(NODE_IDS) and time.monotonic() < end:
        msg = bus.recv(0.05)
        if msg is not None and msg.arbitration_id - 0x700 in NODE_IDS and bytes(msg.data) == b"\x00":
            seen.add(msg.arbitration_id - 0x700)
    assert seen == set(NODE_IDS), f"boot-ups after NMT reset: {seen}"
    time.sleep(0.01)


def sdo_fuzz(daemon, eds: str, seed: int, n: int) -> dict:
    bus = can.Bus(interface="slcan", channel=daemon.rig.port, bitrate=BITRATE, sleep_after_open=0)
    try:
        nmt_reset_all(bus)
        fuzzer = SdoFuzzer(bus, random.Random(seed), _eds_entries(eds))
        for k in range(n):
            fuzzer.one(fuzzer.rng.choice(NODE_IDS))
            if k % 200 == 199:                                        # put back what random writes changed
                nmt_reset_all(bus)
                fuzzer.transfer = dict.fromkeys(NODE_IDS)
        time.sleep(0.05)
        assert not [m for m in fuzzer.drain() if m.arbitration_id in (0x582, 0x583)]
        nmt_reset_all(bus)
    finally:
        bus.shutdown()
    assert daemon.alive
    return fuzzer.stats | fuzzer.kinds


def test_sdo_server_fuzz(daemon, eds):
    stats = sdo_fuzz(daemon, eds[2], SEED + 3, 400)
    print(f"SDO fuzz: {stats}")
    assert stats["aborts"] > 50 and stats["ok"] > 50 and stats["silent"] > 20
    assert stats["segment"] > 10 and stats["toggle_errors"] > 0


@pytest.mark.soak
def test_sdo_server_fuzz_soak(daemon, eds):
    stats = sdo_fuzz(daemon, eds[2], SEED + 4, 10000)
    print(f"SDO fuzz: {stats}")


def test_nodes_serve_after_the_fuzz(daemon, eds):
    """A controller that connects now finds both nodes working, and the daemon has logged no traceback."""
    network = connect(canopen.Network(), daemon.rig.port)
    try:
        for node_id in NODE_IDS:
            node = canopen.RemoteNode(node_id, eds[node_id])
            network.add_node(node)
            assert node.sdo[0x1000].raw == 0x00420192
            assert node.sdo[0x1018][1].raw == 0x5A65726F
    finally:
        network.disconnect()
    assert daemon.alive
    assert "Traceback" not in daemon.stderr()


# ------------------------------------------------------------------------------------- SDO edge cases
@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A daemon of its own for the SDO edge cases (a fresh SDO server; a traceback they cause is reported by the
    test, not by the shared daemon's teardown)."""
    launcher = CanLauncher(tmp_path_factory.mktemp("can-scratch"))
    d = launcher.start(write_can_rig(launcher.dir, "scratch"))
    bus = can.Bus(interface="slcan", channel=d.rig.port, bitrate=BITRATE, sleep_after_open=0)
    yield d, bus
    bus.shutdown()
    rc = d.terminate()
    if rc is None:
        d.kill()
    assert rc == 0, f"scratch daemon: exit status {rc}\n{d.stderr()[-3000:]}"


def _exchange(bus: can.BusABC, node_id: int, req: bytes, timeout: float = 0.5) -> bytes | None:
    bus.send(can.Message(arbitration_id=0x600 + node_id, data=req, is_extended_id=False))
    end = time.monotonic() + timeout
    while (left := end - time.monotonic()) > 0:
        msg = bus.recv(left)
        if msg is not None and msg.arbitration_id == 0x580 + node_id:
            return bytes(msg.data)
    return None


def test_sdo_segment_request_without_a_transfer_is_aborted(scratch):
    """A segment request (upload 0x60, download 0x00) with no segmented transfer in progress: abort 0x05040001
    (CiA 301 §7.2.4.3, as CANopenNode answers), no traceback. (canopen's own SdoServer dereferenced its empty
    buffer there: general error 0x08000000 and a logged TypeError / AttributeError.)"""
    d, bus = scratch
    before = d.stderr().count("Traceback")
    for req in (bytes([0x60]) + bytes(7), bytes([0x00]) + bytes(7)):
        reply = _exchange(bus, 2, req)
        assert reply is not None and reply[0] == 0x80, f"{req.hex()} → {reply}"
        assert struct.unpack_from("<L", reply, 4)[0] == ABORT_COMMAND, f"{req.hex()} → {reply.hex()}"
    time.sleep(0.05)
    assert d.stderr().count("Traceback") == before, d.stderr()[-2000:]


def test_sdo_upload_segment_during_a_download_is_aborted(scratch):
    """An upload-segment request during a segmented download: abort 0x05040001 (canopen's SdoServer, with one
    buffer and toggle for both directions, answered it as a last upload segment 0x0F with no data)."""
    _, bus = scratch
    assert _exchange(bus, 2, bytes([0x21, 0x81, 0x60, 0x00, 4, 0, 0, 0])) == bytes([0x60, 0x81, 0x60, 0, 0, 0, 0, 0])
    reply = _exchange(bus, 2, bytes([0x60]) + bytes(7))
    assert reply is not None and reply[0] == 0x80, f"upload segment during a download → {reply and reply.hex()}"
    assert struct.unpack_from("<L", reply, 4)[0] == ABORT_COMMAND


def test_sdo_block_upload_is_aborted(scratch):
    """A block upload initiate (0xA4, blksize 127, pst 0): abort 0x05040001. CiA 301 §7.2.4.3.11: pst = 0 forbids
    the switch to the normal upload protocol (canopen's SdoServer.block_upload answered 0x43, an expedited upload)."""
    _, bus = scratch
    reply = _exchange(bus, 2, bytes([0xA4, 0x00, 0x10, 0x00, 127, 0, 0, 0]))
    assert reply is not None
    assert reply[0] == 0x80 and struct.unpack_from("<L", reply, 4)[0] == ABORT_COMMAND, reply.hex()


def test_sdo_transfer_ends_at_nmt_reset(scratch):
    """An NMT reset node ends an SDO transfer in progress (CiA 301 §7.3.2.2: the communication state goes back to
    power-up): a download segment after the boot-up is refused with 0x05040001, not taken as the end of the
    segmented download begun before the reset (which then aborted 0x06070010: 2 bytes for the U32 0x6081)."""
    _, bus = scratch
    assert _exchange(bus, 2, bytes([0x21, 0x81, 0x60, 0x00, 4, 0, 0, 0])) == bytes([0x60, 0x81, 0x60, 0, 0, 0, 0, 0])
    bus.send(can.Message(arbitration_id=0, data=[0x81, 2], is_extended_id=False))
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        msg = bus.recv(0.05)
        if msg is not None and msg.arbitration_id == 0x702 and bytes(msg.data) == b"\x00":
            break
    else:
        pytest.fail("no boot-up after the NMT reset")
    reply = _exchange(bus, 2, bytes([0x0B, 0x10, 0x27, 0, 0, 0, 0, 0]))     # last segment, 2 bytes
    assert reply is not None and reply[0] == 0x80, reply
    assert struct.unpack_from("<L", reply, 4)[0] == ABORT_COMMAND, reply.hex()
