"""The bus thread's wire trace ($SERVO_HIL_WIRE_TRACE, docs/protocols/wire.md "Replies under load"): one row per
paced reply with when the thread went into poll(), woke, handled the packet and wrote the reply, written as the thread
ends; nothing kept or written without it."""

from __future__ import annotations

import json

import serial

from drivers.emulated.dynamixel.bus import DynamixelBus
from drivers.emulated.dynamixel.protocol import Instruction, encode_instruction
from drivers.emulated.dynamixel.server import DynamixelServer
from drivers.wire.ports import PtyPort, wire_time_s
from firmware_models.dynamixel.control_table import load_model
from firmware_models.dynamixel.servo import DynamixelServo
from hil.joint import KernelJoint
from hil.kernel import Kernel
from hil.params.catalog import entry
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

BAUD = 1_000_000
PING_REPLY = 14     # bytes of a Protocol 2.0 Ping status packet


def _server(tmp_path) -> DynamixelServer:
    kernel = Kernel(1, 1e-3)
    kernel.set_params(0, kernel_params(entry("xm430_w350").actuator(), LoadConfig(mass=0.3, length=0.1),
                                       EncoderConfig(), FaultConfig(), "euler"))
    servo = DynamixelServo(load_model("xm430_w350"), KernelJoint(kernel), {"ID": 3, "Baud Rate": 3})
    return DynamixelServer(DynamixelBus([servo]), PtyPort(tmp_path / "tty"), name="traced")


def _pings(tmp_path, n: int) -> None:
    with serial.Serial(str(tmp_path / "tty"), BAUD, timeout=1.0) as client:
        for _ in range(n):
            client.write(encode_instruction(3, Instruction.PING, b""))
            assert len(client.read(PING_REPLY)) == PING_REPLY


def _serve_pings(server, tmp_path, n: int) -> None:
    """`n` Pings answered by `server`, started and stopped around them; the server raised nothing."""
    server.start()
    try:
        _pings(tmp_path, n)
    finally:
        server.stop()
    assert server.error is None


def test_each_paced_reply_is_traced_in_order(tmp_path, monkeypatch):
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    monkeypatch.setenv("SERVO_HIL_WIRE_TRACE", str(trace_dir))
    server = _server(tmp_path)
    _serve_pings(server, tmp_path, 3)
    rows = [json.loads(line) for line in (trace_dir / f"{server.name}.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and {r["instruction"] for r in rows} == {Instruction.PING} and \
        {r["bytes"] for r in rows} == {PING_REPLY}
    for r in rows:
        assert r["polled"] <= r["received"] <= r["handled"] <= r["first_write"] <= r["last_write"], r
        assert r["run_delay_ns"] >= 0 and r["wake_slices"] >= 0, r
        # the reply starts no sooner than its due time (the Ping on the wire + Return Delay Time 500 µs) and
        # its last byte no sooner than the reply's wire time after that
        assert r["due"] >= r["received"] + wire_time_s(10, BAUD) + 500e-6 - 1e-9, r
        assert r["first_write"] >= r["due"] and r["last_write"] >= r["due"] + wire_time_s(PING_REPLY, BAUD), r
    assert [r["received"] for r in rows] == sorted(r["received"] for r in rows)


def test_without_the_variable_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("SERVO_HIL_WIRE_TRACE", raising=False)
    server = _server(tmp_path)
    assert server.trace is None
    _serve_pings(server, tmp_path, 1)
    assert not list(tmp_path.glob("*.jsonl"))


def test_a_trace_directory_that_cannot_be_written_is_one_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SERVO_HIL_WIRE_TRACE", str(tmp_path / "missing"))
    server = _server(tmp_path)
    _serve_pings(server, tmp_path, 1)
    assert len([r for r in caplog.records if "wire trace not written" in r.getMessage()]) == 1, caplog.text
