"""Hostile and careless input on the command planes, pty links and exposed sockets: one input never takes the
daemon down, replies and memory stay bounded, credentials hold, and a clash is one line saying what to do."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import aiomqtt
import msgpack
import pytest
import zmq
import zmq.auth
from dynamixel_sdk import COMM_SUCCESS, PacketHandler, PortHandler

from servo_hil.daemon.service import Daemon, DaemonFailure
from servo_hil.daemon.set_param import settable_params
from servo_hil.rig import load_rig, loopback
from tests.daemon_process import SERVO_HIL, assert_one_cli_line, rss_kb

from . import MqttClient, command, connect_to_embedded_broker, free_port, ok, raw_request, refused
from .test_lifecycle import run_cli

ROOT = Path(__file__).resolve().parents[3]


def warnings_in(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if " WARNING " in line and needle in line]


# ---------------------------------------------------------------------------------------------- ZeroMQ commands
def test_a_two_frame_request_is_answered_and_the_next_one_served(daemon):
    """Regression: the REP thread read one frame, could not reply (EFSM), its fallback raised again and the
    thread ended; the daemon ran on without a command socket, silently."""
    ep = daemon.rig.cmd
    reply = raw_request(ep, [msgpack.packb({"cmd": "status"}), b"second frame"])
    assert reply["ok"] is False and "one msgpack frame" in reply["error"] and "2 frames" in reply["error"], reply
    status = ok(ep, "status")["status"]
    assert status["command_errors"]["zmq"] == 1
    time.sleep(0.2)   # the log line is written before the reply, flushed by then
    assert len(warnings_in(daemon.stderr(), "one msgpack frame")) == 1, daemon.stderr()


def test_malformed_requests_are_answered_counted_and_logged_once(shared_daemon):
    ep = shared_daemon.rig.cmd
    before = ok(ep, "status")["status"]["command_errors"]["zmq"]
    bad = [b"\xc1", b"\x92\x01", msgpack.packb({1: 2}), msgpack.packb([[[1]]] * 300),
           msgpack.packb({f"k{i}": i for i in range(1000)}), msgpack.packb({"cmd": "status", "x": b"\0" * 5000})]
    for payload in bad:
        reply = raw_request(ep, payload)
        assert reply["ok"] is False and reply["error"], reply
    assert "within limits" in raw_request(ep, bad[4])["error"]
    after = ok(ep, "status")["status"]["command_errors"]["zmq"]
    assert after - before == len(bad) + 1


def test_error_replies_name_a_long_value_without_echoing_it(shared_daemon):
    ep = shared_daemon.rig.cmd
    for args in ({"actuator": "x" * 4000, "value": 1.0}, {"actuator": "arm", "value": "y" * 4000},
                 {"actuator": "arm", "value": 1.0, "z" * 4000: 1}, {"actuator": "arm", "value": "y" * 40_000}):
        reply = command(ep, "set_goal", **args)
        assert reply["ok"] is False and len(reply["error"]) < 400, len(reply["error"])
    assert "xxxxxxxx..." in command(ep, "set_goal", actuator="x" * 4000, value=1.0)["error"]


def test_big_messages_are_dropped_without_growing_memory(daemon):
    """A 10 MB request is refused by the socket (ZMQ_MAXMSGSIZE) before it is buffered: no reply, no memory kept
    (it was +40-50 MB of RSS per message)."""
    ep = daemon.rig.cmd
    ok(ep, "status")
    start = rss_kb(daemon.proc.pid)
    for payload in (msgpack.packb({"cmd": "set_goal", "actuator": "arm", "value": "v" * 10_000_000}),
                    msgpack.packb({"cmd": "state", **{f"k{i}": 0 for i in range(1_000_000)}})):
        with pytest.raises(TimeoutError):
            raw_request(ep, payload, timeout_s=1.0)
    assert ok(ep, "status")["ok"]
    grown_mib = (rss_kb(daemon.proc.pid) - start) / 1024
    assert grown_mib < 10, f"RSS grew by {grown_mib:.1f} MiB"


def test_set_param_takes_only_the_documented_parameters_within_their_ranges(shared_daemon):
    ep = shared_daemon.rig.cmd
    for internal in ("_inv_dt", "_inertia", "law", "seed", "oc_fraction"):
        refused(ep, "set_param", "unknown parameter", actuator="arm", name=internal, value=1.0)
    refused(ep, "set_param", "mass", "kg", "out of range", actuator="arm", name="mass", value=1e6)
    refused(ep, "set_param", "efficiency", "out of range", actuator="arm", name="efficiency", value=0.0)
    refused(ep, "set_param", "finite", actuator="arm", name="mass", value=float("nan"))
    ok(ep, "set_param", actuator="arm", name="mass", value=0.3)


def test_the_settable_table_names_kernel_parameters_and_is_documented(make_rig):
    table = settable_params()
    _, _, kernel = load_rig(make_rig().path)
    params = kernel.get_params(0)
    docs = (ROOT / "docs" / "commands.md").read_text()
    for name, entry in table.items():
        assert name in params and not name.startswith("_"), name
        assert f"| `{name}` | {entry.unit} |" in docs, f"{name} is not in docs/commands.md's table"


def test_a_command_thread_that_ends_stops_the_daemon_with_its_reason(make_rig):
    """The watchdog: a daemon whose command socket thread is gone stops (exit 1 from `servo-hil run`) instead
    of running on headless. Here the thread is made to end from outside, as a bug would end it."""
    d = Daemon(make_rig().path, mqtt=False)

    def end_the_command_thread() -> None:
        while d.commands is None or not d.commands.is_alive():
            time.sleep(0.01)
        d.commands.stop()

    threading.Thread(target=end_the_command_thread, daemon=True).start()
    with pytest.raises(DaemonFailure, match="command socket thread ended"):
        d.run_until_signal()


# ---------------------------------------------------------------------------------------------- MQTT, embedded broker
def embedded_rig(make_rig, port: int, mqtt: str = ""):
    rig = make_rig()
    text = rig.path.read_text().replace("[mqtt]\nenabled = false\n", f"[mqtt]\nembedded_port = {port}\n{mqtt}")
    rig.path.write_text(text)
    rig.mqtt_port = port
    return rig


@pytest.fixture
def guarded(make_rig, start_daemon):
    """A daemon with its embedded broker and credentials (at most 20 commands/s)."""
    port = free_port()
    rig = embedded_rig(make_rig, port, 'username = "rig"\npassword = "s3cret"\nmax_commands_per_s = 20\n')
    d = start_daemon(rig, no_mqtt_flag=False)
    client = connect_to_embedded_broker(port, [f"servo-hil/{rig.name}/#"], d, username="rig", password="s3cret")
    yield d, client
    client.close()


def test_the_embedded_broker_admits_only_the_rigs_credentials(guarded):
    d, client = guarded
    port, name = d.rig.mqtt_port, d.rig.name
    for username, password in ((None, None), ("rig", "wrong"), ("intruder", "s3cret")):
        with pytest.raises(aiomqtt.MqttError):
            MqttClient(port, [], username=username, password=password).close()
    start = client.mark()
    client.publish_json(f"servo-hil/{name}/cmd/set_goal", {"actuator": "mx", "value": 0.1, "id": "mine"})
    assert client.event(lambda e: e.get("id") == "mine", 3.0, "the command's result", start)["ok"] is True
    with MqttClient(port, [f"servo-hil/{name}/online"], username="rig", password="s3cret") as late:
        assert late.wait(lambda m: m.retain, 5.0, "retained online").payload == b"online"


def test_huge_numbers_and_deep_json_are_one_warning_and_an_error_event(guarded):
    d, client = guarded
    name = d.rig.name
    for payload in (b'{"actuator": "mx", "value": 1' + b"0" * 400 + b"}", b"[" * 30_000 + b"]" * 30_000,
                    b'{"actuator": "mx", "value": ' + b"9" * 5000 + b"}"):
        start = client.mark()
        client.publish(f"servo-hil/{name}/cmd/set_goal", payload)
        ev = client.event(lambda e: e.get("type") in ("command", "command_error"), 3.0, "the reply event", start)
        assert ev["type"] == "command_error" and len(ev["error"]) < 400, ev
    time.sleep(0.2)
    err = d.stderr()
    assert "Traceback" not in err and " ERROR " not in err, err[-3000:]
    assert len(warnings_in(err, "MQTT command refused")) == 3, err[-3000:]
    assert ok(d.rig.cmd, "status")["status"]["command_errors"]["mqtt"] == 3


def test_the_embedded_broker_drops_a_client_sending_a_huge_packet(guarded):
    d, client = guarded
    name = d.rig.name
    # the connection is aborted: aiomqtt's error or a timeout
    with MqttClient(d.rig.mqtt_port, [], username="rig", password="s3cret") as sender, \
            pytest.raises(Exception):  # noqa: B017
        sender.publish(f"servo-hil/{name}/cmd/set_goal", b"x" * 10_000_000, timeout=5.0)
    start = client.mark()
    client.publish(f"servo-hil/{name}/cmd/marker", b"{}")
    client.wait(lambda m: m.topic.endswith("/cmd/marker"), 3.0, "the marker after the huge message", start)
    assert not any(len(m.payload) > 100_000 for m in client.messages), "the broker relayed the huge message"
    time.sleep(0.5)
    err = d.stderr()
    assert len(warnings_in(err, "byte packet")) == 1, err[-2000:]
    # the rest of the dropped packet is not parsed as packets (it was: 60 000 "Received PUBCOMP for unknown …")
    assert "Received" not in err and " ERROR " not in err, err[-2000:]


def test_a_command_flood_is_dropped_with_one_counted_warning(guarded):
    d, client = guarded
    name = d.rig.name
    client.publish_many(f"servo-hil/{name}/cmd/status", [b"{}"] * 600)   # ~90/s through the embedded broker
    time.sleep(1.5)
    start = client.mark()
    client.publish_json(f"servo-hil/{name}/cmd/set_goal", {"actuator": "mx", "value": 0.1, "id": "after"})
    assert client.event(lambda e: e.get("id") == "after", 5.0, "a command after the flood", start)["ok"] is True
    dropped = ok(d.rig.cmd, "status")["status"]["command_errors"]["mqtt_dropped"]
    assert 0 < dropped < 600
    err = d.stderr()
    assert len(warnings_in(err, "faster than")) == 1, err[-3000:]
    assert "PUBACK" not in err and " ERROR " not in err, err[-3000:]


def test_a_busy_embedded_broker_port_is_one_line_saying_what_to_do(make_rig):
    import socket

    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        rig = embedded_rig(make_rig, port)
        res = run_cli("run", str(rig.path), timeout=20.0)
    assert_one_cli_line(res, str(port), "url =", "embedded_port")


# ---------------------------------------------------------------------------------------------- pty links
def wait_link(link: Path, timeout: float = 10.0) -> str:
    """Where `link` points once the daemon has opened its bus (after it answers commands)."""
    deadline = time.monotonic() + timeout
    while not os.path.islink(link):
        assert time.monotonic() < deadline, f"no pty link {link} after {timeout} s"
        time.sleep(0.02)
    return os.readlink(link)


def test_a_second_daemon_on_a_live_link_is_refused(make_rig, start_daemon, tmp_path):
    link = tmp_path / "ttyDXL"
    rig = make_rig(extra='[[buses]]\nname = "dxl"\nprotocol = "dynamixel"\n',
                   actuator_extra={"mx": 'bus = "dxl"\nid = 1\n'})
    first = start_daemon(rig, "--port", str(link))
    target = wait_link(link)
    second = make_rig(extra='[[buses]]\nname = "dxl"\nprotocol = "dynamixel"\n',
                      actuator_extra={"mx": 'bus = "dxl"\nid = 1\n'})
    res = run_cli("run", str(second.path), "--no-mqtt", "--port", str(link), timeout=20.0)
    assert_one_cli_line(res, str(link), "in use", str(first.proc.pid))
    assert os.readlink(link) == target and first.alive and ok(first.rig.cmd, "status")["ok"]


def test_a_killed_daemons_link_is_replaced(make_rig, start_daemon, tmp_path):
    link = tmp_path / "ttyDXL"
    extra = {"extra": '[[buses]]\nname = "dxl"\nprotocol = "dynamixel"\n',
             "actuator_extra": {"mx": 'bus = "dxl"\nid = 1\n'}}
    first = start_daemon(make_rig(**extra), "--port", str(link), strict=False)
    stale = wait_link(link)
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(5.0)
    assert os.readlink(link) == stale   # left behind by the killed daemon
    second = start_daemon(make_rig(**extra), "--port", str(link))
    lock = Path(f"{link}.lock")
    deadline = time.monotonic() + 10.0
    while lock.read_text().strip() != str(second.proc.pid):   # the bus opens after the command socket
        assert time.monotonic() < deadline, f"the lock holds {lock.read_text()!r}, not pid {second.proc.pid}"
        time.sleep(0.02)
    port = PortHandler(str(link))    # the link reaches the new daemon's servo
    assert port.openPort() and port.setBaudRate(1_000_000)
    try:
        model, result, error = PacketHandler(2.0).ping(port, 1)
    finally:
        port.closePort()
    assert result == COMM_SUCCESS and error == 0 and model > 0


# ---------------------------------------------------------------------------------------------- exposure
@pytest.mark.parametrize(("endpoint", "local"), [
    ("tcp://127.0.0.1:9873", True), ("tcp://127.8.9.10:1", True), ("tcp://localhost:5", True),
    ("tcp://[::1]:5", True), ("ipc:///tmp/servo-hil", True), ("inproc://x", True), ("127.0.0.1", True),
    ("tcp://0.0.0.0:9873", False), ("tcp://*:9873", False), ("tcp://eth0:9873", False),
    ("tcp://192.168.1.5:9873", False), ("tcp://[::]:9873", False), ("0.0.0.0", False)])
def test_loopback_endpoints(endpoint, local):
    assert loopback(endpoint) is local


def test_a_non_loopback_command_socket_needs_an_explicit_opt_in(make_rig, start_daemon):
    port = free_port()
    rig = make_rig(cmd_port=port)
    rig.path.write_text(rig.path.read_text().replace(f"tcp://127.0.0.1:{port}", f"tcp://0.0.0.0:{port}"))
    assert_one_cli_line(run_cli("run", str(rig.path), "--no-mqtt"), "zmq", "allow_remote")
    rig.path.write_text(rig.path.read_text().replace("[zmq]\n", "[zmq]\nallow_remote = true\n"))
    d = start_daemon(rig)
    assert warnings_in(d.stderr(), "reachable from other machines"), d.stderr()


def test_curve_admits_a_client_with_a_known_key_and_refuses_a_plain_one(make_rig, tmp_path):
    keys, clients = tmp_path / "keys", tmp_path / "clients"
    keys.mkdir()
    clients.mkdir()
    server_public_file, _ = zmq.auth.create_certificates(keys, "server")
    client_public_file, client_secret_file = zmq.auth.create_certificates(keys, "client")
    os.replace(client_public_file, clients / "client.key")
    _, stranger_secret_file = zmq.auth.create_certificates(keys, "stranger")
    port = free_port()
    rig = make_rig(cmd_port=port)
    rig.path.write_text(rig.path.read_text().replace(f"tcp://127.0.0.1:{port}", f"tcp://0.0.0.0:{port}").replace(
        "[zmq]\n", '[zmq]\ncurve_secret_key = "keys/server.key_secret"\ncurve_clients = "clients"\n'))
    server_public, _ = zmq.auth.load_certificate(server_public_file)
    err_path = tmp_path / "curve.stderr"
    with err_path.open("w") as err:
        proc = subprocess.Popen([*SERVO_HIL, "run", str(rig.path), "--no-mqtt"], stdout=subprocess.DEVNULL,
                                stderr=err)

    def curve_request(secret_file: Path, timeout_s: float) -> dict:
        public, secret = zmq.auth.load_certificate(secret_file)
        sock = zmq.Context.instance().socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = server_public, public, secret
        try:
            sock.connect(f"tcp://127.0.0.1:{port}")
            sock.send(msgpack.packb({"cmd": "status"}))
            if not sock.poll(int(timeout_s * 1000)):
                raise TimeoutError(f"no reply within {timeout_s} s")
            return msgpack.unpackb(sock.recv(), raw=False)
        finally:
            sock.close()

    try:
        assert curve_request(client_secret_file, 20.0)["ok"] is True, err_path.read_text()
        with pytest.raises(TimeoutError):
            raw_request(f"tcp://127.0.0.1:{port}", msgpack.packb({"cmd": "status"}), timeout_s=1.0)
        with pytest.raises(TimeoutError):
            curve_request(stranger_secret_file, 1.0)
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15.0) == 0, err_path.read_text()
