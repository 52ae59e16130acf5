"""One input whose handling raises, on the SLCAN (CANopen) and Etherban server threads of a running daemon: it is
answered as the device answers what it cannot carry out, logged once at WARNING with the input's bytes, counted in
`status` (`bus_errors_isolated`), and the next valid request is answered. A bus thread that ends anyway stops the
daemon with its reason.

No input is known to raise in these handlers (the stream fuzzers of tests/drivers/slcan and tests/drivers/erob found
none), so the failure is planted where a bug would sit: in the drive model under the SDO download (CAN) and in the
CiA 402 unit conversion of an order's target (Etherban), for one value only. The daemon runs in this process for
that reason (`Daemon.start`), with its real pty, sockets and threads; the client side is a raw pyserial line (as
tests/drivers/erob/test_canopen_fuzz.py has it) and a ZeroMQ REQ socket speaking etherban.proto. The Dynamixel
thread's isolation is tested with its bus (tests/drivers/dynamixel/test_fuzz_codec.py), the ZeroMQ command
socket's in test_reliability.py; the MQTT plane's events task is checked here to survive an event JSON cannot
carry.
"""

from __future__ import annotations

import json
import logging
import math
import struct
import threading
import time

import pytest

from drivers.emulated.etherban import etherban_pb2 as pb
from drivers.schedulers.cia402_drives import Cia402Drives
from firmware_models.cia402 import Cia402Drive, Units
from servo_hil.daemon.mqtt_plane import _json
from servo_hil.daemon.service import Daemon, DaemonFailure
from servo_hil.daemon.zmq_io import request
from tests.drivers.erob.conftest import write_can_rig
from tests.drivers.erob.test_canopen_fuzz import RawLine
from tests.drivers.erob.test_etherban import Master

from . import free_port

PROFILE_VELOCITY = (0x6081, 0)   # CiA 402-2 profile velocity, UNSIGNED32, writable by SDO
PLANTED = 12_345                  # the one value whose write raises
PLANTED_TARGET_RAD = 0.4321       # the one order target whose conversion raises
SDO_GENERAL_ERROR = 0x0800_0000   # CiA 301 §7.2.4.3.17: general error (what CANopenNode answers a failed access)


class Planted(RuntimeError):
    """The planted failure."""


@pytest.fixture
def running(tmp_path):
    """Start the daemon of a rig in this process; stopped at the end."""
    started: list[Daemon] = []

    def start(rig) -> Daemon:
        d = Daemon(rig.path, mqtt=False)
        started.append(d)
        d.start()
        return d

    yield start
    for d in started:
        d.stop()


def isolated(caplog, needle: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and needle in r.getMessage()]


def read_until(line: RawLine, needle: bytes, timeout_s: float = 5.0) -> bytes:
    """What the adapter sends up to and including the line that starts with `needle`."""
    buf = b""
    deadline = time.monotonic() + timeout_s
    while (i := buf.find(needle)) < 0 or buf.find(b"\r", i) < 0:
        assert time.monotonic() < deadline, f"no {needle!r} within {timeout_s} s; got {buf!r}"
        buf += line.read(1, 0.01)
    return buf[:buf.find(b"\r", i) + 1]


def sdo_download_line(node_id: int, index: int, subindex: int, value: int) -> bytes:
    """An expedited 4-byte SDO download request as the host writes it to the adapter (CiA 301 §7.2.4.3.3)."""
    data = struct.pack("<BHBI", 0x23, index, subindex, value)
    return f"t{0x600 + node_id:03X}8{data.hex().upper()}\r".encode()


@pytest.mark.parametrize("service", ["sdo", "nmt"])
def test_a_can_frame_that_raises_is_answered_counted_logged_once_and_the_next_served(tmp_path, running, caplog,
                                                                                      monkeypatch, service):
    """SDO: a download whose write fails in the drive model gets the abort 0x08000000 (general error: what
    canopen's own server and CANopenNode answer an access that failed in the device). NMT: a reset node that fails
    in the drive model leaves the node silent (no boot-up frame), as a node that did not carry it out."""
    write, reset = Cia402Drive.write, Cia402Drive.reset
    armed = threading.Event()

    def planted_write(self, index, subindex, value):
        if (index, subindex) == PROFILE_VELOCITY and value == PLANTED:
            raise Planted("planted in the drive model")
        return write(self, index, subindex, value)

    def planted_reset(self):
        if armed.is_set() and self.od.node_id == 2:
            raise Planted("planted in the drive model")
        return reset(self)

    monkeypatch.setattr(Cia402Drive, "write", planted_write)
    monkeypatch.setattr(Cia402Drive, "reset", planted_reset)
    rig = write_can_rig(tmp_path, f"isolation-{service}")
    bus = running(rig).buses[0]
    line = RawLine(rig.port)
    try:
        line.open_channel()
        caplog.set_level(logging.WARNING, logger="servo-hil")
        armed.set()
        if service == "sdo":
            bad = sdo_download_line(2, *PROFILE_VELOCITY, PLANTED)
            abort = struct.pack("<BHBI", 0x80, *PROFILE_VELOCITY, SDO_GENERAL_ERROR).hex().upper()
            answered = f"t5828{abort}\r".encode()
        else:
            bad = b"t00028102\r"             # NMT reset node 2 (CiA 301 §7.2.8)
            answered = b"t7021"               # node 2's boot-up frame: must not come
        line.write(bad)
        line.write(bad)                       # the second is counted and logged at DEBUG only
        if service == "sdo":
            assert read_until(line, answered).count(answered) == 1
            assert read_until(line, answered).endswith(answered)
        deadline = time.monotonic() + 5.0
        while bus.errors_isolated < 2:        # both frames handled before the drive model is whole again
            assert time.monotonic() < deadline, f"{bus.errors_isolated} isolated"
            time.sleep(0.005)
        armed.clear()
        upload = b"t60284000100000000000\r"   # SDO upload of 0x1000 from node 2: the next valid request
        line.write(upload)
        seen = read_until(line, b"t582843001000")
        assert b"t7021" not in seen, seen     # NMT: no boot-up came before the next answer
        assert line.sdo_upload_1000(3)[:13] == b"t583843001000"
    finally:
        line.close()
    status = request(rig.cmd, {"cmd": "status"})["status"]
    assert status["bus_errors_isolated"] == {"can": 2}
    logged = isolated(caplog, "slcan can:")
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert "Planted" in logged[0].getMessage() and repr(bad.decode()) in logged[0].getMessage()


def test_an_etherban_request_that_raises_is_answered_counted_logged_once_and_the_next_served(tmp_path, running,
                                                                                            caplog, monkeypatch):
    counts = Units.position_counts

    def planted(self, rad):
        if rad == PLANTED_TARGET_RAD:
            raise Planted("planted in the unit conversion")
        return counts(self, rad)

    monkeypatch.setattr(Units, "position_counts", planted)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    rig = write_can_rig(tmp_path, "isolation-etherban", etherban=endpoint)
    running(rig)
    caplog.set_level(logging.WARNING, logger="servo-hil")
    master = Master(endpoint)
    try:
        req = pb.Request()
        req.orders.add(device=0, operation_mode=pb.POSITION, target=PLANTED_TARGET_RAD)
        wire = req.SerializeToString()
        for _ in range(2):
            answer = pb.Response()
            answer.ParseFromString(master.raw(wire))
            assert not answer.statuses and not answer.has_fault, answer    # as for a request not understood
        after = master.exchange((0, pb.POSITION, 0.1))
        assert [s.device for s in after.statuses] == [0, 1], after
    finally:
        master.sock.close()
    status = request(rig.cmd, {"cmd": "status"})["status"]
    assert status["bus_errors_isolated"] == {"ethercat": 2}
    logged = isolated(caplog, "etherban ethercat: request")
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert "Planted" in logged[0].getMessage() and wire.hex(" ") in logged[0].getMessage()


@pytest.mark.parametrize("bus", ["can", "etherban"])
def test_a_bus_thread_that_ends_stops_the_daemon_with_its_reason(tmp_path, monkeypatch, bus):
    """What no input causes: the drives' tick raises (run by the SLCAN thread of a CAN bus; beside an Etherban
    server, by the drives' own thread between requests). The thread ends and the daemon stops (exit 1 and one line
    from `servo-hil run`), naming the bus."""
    tick = Cia402Drives.tick_once
    armed = threading.Event()

    def failing(self, *args, **kwargs):
        if armed.is_set():
            raise Planted("planted in the drives' tick")
        return tick(self, *args, **kwargs)

    monkeypatch.setattr(Cia402Drives, "tick_once", failing)
    etherban = bus == "etherban"
    rig = write_can_rig(tmp_path, f"dies-{bus}", etherban=f"tcp://127.0.0.1:{free_port()}" if etherban else None)
    d = Daemon(rig.path, mqtt=False)

    def arm() -> None:
        while not d.buses:
            time.sleep(0.01)
        armed.set()

    threading.Thread(target=arm, daemon=True).start()
    with pytest.raises(DaemonFailure, match=f"bus {'ethercat' if etherban else 'can'} failed: planted in the drives"):
        d.run_until_signal()


def test_an_mqtt_event_that_json_cannot_carry_goes_out_as_text():
    """The MQTT plane's events task publishes every event a command or a fault raises: a value JSON has no type
    for goes out as its text (non-finite numbers as null) instead of ending the task, and with it the plane."""
    event = {"type": "fault_injected", "args": {"raw": b"\x01\x02", "ratio": math.inf}}
    assert json.loads(_json(event)) == {"type": "fault_injected", "args": {"raw": "b'\\x01\\x02'", "ratio": None}}
