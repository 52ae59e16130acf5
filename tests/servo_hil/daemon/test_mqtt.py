"""MQTT control plane through a real broker: retained status/online, commands, events, errors."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from tests.daemon_process import PROMPT_STOP_S

from . import FLAG, MqttClient, Stream, free_port, ok
from .conftest import ARM_GEAR, start_broker


@pytest.fixture
def mqtt_daemon(make_rig, start_daemon, mqtt_broker):
    rig = make_rig(mqtt_port=mqtt_broker.port, status_period_s=0.5)
    d = start_daemon(rig)
    with MqttClient(mqtt_broker.port, [f"servo-hil/{rig.name}/online"]) as probe:
        probe.wait(lambda m: m.payload == b"online", 10.0, "the daemon online")
    return d


@pytest.fixture
def mq(mqtt_daemon, mqtt_broker):
    """A client on every topic of the rig."""
    with MqttClient(mqtt_broker.port, [f"servo-hil/{mqtt_daemon.rig.name}/#"]) as client:
        yield client


@pytest.fixture
def shared_mq(shared_mqtt_daemon, mqtt_broker):
    """A client on every topic of the module's shared MQTT daemon (which must be online)."""
    with MqttClient(mqtt_broker.port, [f"servo-hil/{shared_mqtt_daemon.rig.name}/#"]) as client:
        client.wait(lambda m: m.topic.endswith("/online") and m.payload == b"online", 10.0, "the daemon online")
        yield client


def topic(d, leaf: str) -> str:
    return f"servo-hil/{d.rig.name}/{leaf}"


def test_retained_status_and_online_for_a_new_subscriber(shared_mq, shared_mqtt_daemon, mqtt_broker):
    d = shared_mqtt_daemon
    time.sleep(0.6)  # the daemon has been up a while: what a late subscriber gets must come from retention
    # the retain flag tells a retained message from a live one (a broker clears it on live publications), so
    # the waits may be generous: the in-process broker and this client share a possibly loaded host
    with MqttClient(mqtt_broker.port, [topic(d, "status"), topic(d, "online")]) as late:
        status = late.wait(lambda m: m.topic == topic(d, "status") and m.retain, 10.0, "retained status")
        online = late.wait(lambda m: m.topic == topic(d, "online"), 10.0, "retained online")
    assert online.payload == b"online" and online.retain
    st = status.json()
    assert st["rig"] == d.rig.name and st["pid"] == d.proc.pid
    assert st["rate_hz"] == 1000.0 and st["lockstep"] is False
    assert isinstance(st["lateness_p50_us"], float) and st["lateness_p50_us"] >= 0.0
    assert isinstance(st["steal_fraction"], float) and 0.0 <= st["steal_fraction"] <= 1.0
    assert st["rt_mode"].startswith("SCHED_")
    assert st["tick"] > 0 and 0.0 <= st["overrun_fraction"] <= 1.0
    assert set(st["actuators"]) == {"arm", "mx"}
    assert st["actuators"]["mx"]["mode"] == "dxl_pwm" and st["actuators"]["mx"]["temperature"] == pytest.approx(25, 1)
    assert st["actuators"]["arm"]["temperature"] is None


def test_status_is_republished_periodically(shared_mq, shared_mqtt_daemon):
    d, mq = shared_mqtt_daemon, shared_mq
    first = mq.wait(lambda m: m.topic == topic(d, "status"), 2.0, "a status")
    second = mq.wait(lambda m: m.topic == topic(d, "status") and m.json()["tick"] > first.json()["tick"], 2.0,
                     "a later status (status_period_s = 0.5)")
    assert second.json()["uptime_s"] > first.json()["uptime_s"]


def test_mqtt_set_goal_moves_the_joint(mq, mqtt_daemon):
    d = mqtt_daemon
    with Stream(d.rig.pub) as stream:
        stream.first()
        start = mq.mark()
        mq.publish_json(topic(d, "cmd/set_goal"), {"actuator": "mx", "value": 0.6, "id": "g1"})
        stream.wait_for("mx", lambda p: p["goal"] == 0.6, 2.0, "goal 0.6 from MQTT")
        stream.wait_for("mx", lambda p: abs(p["position"] - 0.6) < 0.05, 3.0, "MX-64 near 0.6 rad")
    ev = mq.event(lambda e: e.get("id") == "g1", 2.0, "the command's result event", start)
    assert ev["type"] == "command" and ev["command"] == "set_goal" and ev["ok"] is True


def test_mqtt_state_command_reports_in_events(shared_mq, shared_mqtt_daemon):
    d, mq = shared_mqtt_daemon, shared_mq
    start = mq.mark()
    mq.publish(topic(d, "cmd/state"), b'{"actuator": "arm", "id": 7}')
    ev = mq.event(lambda e: e.get("id") == 7, 2.0, "state result", start)
    assert ev["ok"] is True and set(ev["result"]["state"]) == {"arm"}
    assert ev["result"]["state"]["arm"]["mode"] == "position"


def test_mqtt_lifecycle_events(shared_mq, shared_mqtt_daemon):
    """pause, resume and set_mode announce themselves on `events` (whoever sent them)."""
    d, mq = shared_mqtt_daemon, shared_mq
    start = mq.mark()
    ok(d.rig.cmd, "pause")
    mq.publish_json(topic(d, "cmd/resume"), {})
    ok(d.rig.cmd, "set_mode", actuator="mx", mode="current")
    mq.publish_json(topic(d, "cmd/set_mode"), {"actuator": "mx", "mode": "dxl_pwm"})
    mq.event(lambda e: e.get("type") == "paused", 2.0, "paused", start)
    mq.event(lambda e: e.get("type") == "resumed", 2.0, "resumed", start)
    ev = mq.event(lambda e: e.get("type") == "mode" and e.get("mode") == "current", 2.0, "mode current", start)
    assert ev["actuator"] == "mx"
    mq.event(lambda e: e.get("type") == "mode" and e.get("mode") == "dxl_pwm", 2.0, "mode dxl_pwm", start)
    assert ok(d.rig.cmd, "status")["status"]["paused"] is False


def test_last_will_offline_after_sigkill(make_rig, start_daemon, private_broker):
    """A daemon that dies without cleaning up (SIGKILL) is marked offline by the broker (last will)."""
    port = free_port()
    private_broker(port)
    rig = make_rig(mqtt_port=port)
    d = start_daemon(rig, strict=False)
    with MqttClient(port, [f"servo-hil/{rig.name}/online"]) as client:
        client.wait(lambda m: m.payload == b"online", 5.0, "online")
        d.kill()
        client.wait(lambda m: m.payload == b"offline", 5.0, "offline (last will)")
    with MqttClient(port, [f"servo-hil/{rig.name}/online"]) as late:
        m = late.wait(lambda m: True, 2.0, "retained online/offline")
    assert m.payload == b"offline" and m.retain


def test_mqtt_inject_and_clear_fault(mq, mqtt_daemon):
    d = mqtt_daemon
    with Stream(d.rig.pub) as stream:
        stream.first()
        start = mq.mark()
        mq.publish_json(topic(d, "cmd/inject_fault"),
                        {"actuator": "arm", "fault": "open_circuit", "args": {"fraction": 1.0}})
        stream.wait_for("arm", lambda p: p["fault_flags"] & FLAG["open_circuit"], 2.0, "open-circuit bit 1")
        raised = mq.event(lambda e: e.get("type") == "fault_raised", 2.0, "fault_raised", start)
        assert raised["actuator"] == "arm" and raised["faults"] == ["open_circuit"]
        injected = mq.event(lambda e: e.get("type") == "fault_injected", 2.0, "fault_injected", start)
        assert injected["fault"] == "open_circuit" and injected["args"] == {"fraction": 1.0}
        assert ok(d.rig.cmd, "faults")["faults"]["arm"] == {"open_circuit": {"fraction": 1.0}}
        start = mq.mark()
        mq.publish_json(topic(d, "cmd/clear_fault"), {"actuator": "arm", "fault": "open_circuit"})
        stream.wait_for("arm", lambda p: p["fault_flags"] == 0, 2.0, "open circuit cleared")
        cleared = mq.event(lambda e: e.get("type") == "fault_cleared", 2.0, "fault_cleared", start)
        assert cleared["actuator"] == "arm" and cleared["faults"] == ["open_circuit"]


@pytest.mark.parametrize(("leaf", "payload", "needles"), [
    ("cmd/launch", b"{}", ("unknown command", "launch")),
    ("cmd/set_goal", b'{"actuator": "mx", "value": 1e9}', ("value", "out of range")),
    ("cmd/set_goal", b'{"actuator": "elbow", "value": 1}', ("unknown actuator", "elbow")),
    ("cmd/set_param", b'{"actuator": "mx", "name": "stiffness", "value": 1}', ("unknown parameter", "stiffness")),
    ("cmd/set_goal", b"goal=1", ("not JSON",)),
    ("cmd/set_goal", b"\xff\xfe", ("not JSON",)),
    ("cmd/set_goal", b"[1, 2]", ("JSON object",)),
    ("cmd/set_goal", b'{"actuator": "mx", "value": NaN}', ("value", "finite")),
    ("cmd/set_goal", b'{"actuator": "mx", "value": 1' + b" " * 70_000 + b"}", ("larger than",)),
    ("cmd/", b"{}", ("unknown command",)),
    ("cmd/set_goal/now", b'{"actuator": "mx", "value": 1}', ("unknown command", "set_goal/now")),
], ids=["unknown-command", "out-of-range", "unknown-actuator", "unknown-parameter", "not-json", "not-utf8",
        "not-an-object", "nan", "too-large", "empty-name", "nested-name"])
def test_mqtt_command_errors(shared_mq, shared_mqtt_daemon, leaf, payload, needles):
    d, mq = shared_mqtt_daemon, shared_mq
    start = mq.mark()
    mq.publish(topic(d, leaf), payload)
    ev = mq.event(lambda e: e.get("type") == "command_error", 2.0, "command_error event", start)
    assert ev["ok"] is False and ev["command"] == leaf.removeprefix("cmd/")
    for needle in needles:
        assert needle in ev["error"], f"{needle!r} not in {ev['error']!r}"
    # still alive, still online, still obeying
    mq.publish_json(topic(d, "cmd/set_goal"), {"actuator": "arm", "value": 0.1 * ARM_GEAR, "id": "after"})
    good = mq.event(lambda e: e.get("id") == "after", 2.0, "a good command after the bad one", start)
    assert good["ok"] is True
    assert d.alive and ok(d.rig.cmd, "status")["status"]["tick"] > 0


def test_mqtt_unhashable_actuator_is_a_command_error(shared_mq, shared_mqtt_daemon):
    d, mq = shared_mqtt_daemon, shared_mq
    start = mq.mark()
    mq.publish(topic(d, "cmd/set_goal"), b'{"actuator": ["mx"], "value": 1}')
    ev = mq.event(lambda e: e.get("type") in ("command_error", "command"), 2.0, "a reply event", start)
    assert ev["type"] == "command_error" and "unknown actuator" in ev["error"]
    assert d.alive


def test_retained_messages_of_other_subscriptions_are_not_commands(make_rig, start_daemon, tmp_path):
    """amqtt 0.12, the daemon's embedded broker, sends a connecting client the retained messages of every
    client's subscriptions, not only its own: another rig's retained status reached the daemon, which
    took it for a command with an empty name and published a command_error. The first event is now the
    first command's."""
    broker = start_broker(free_port(), tmp_path, kind="amqtt")
    try:
        rig = make_rig(mqtt_port=broker.port)
        with MqttClient(broker.port, ["servo-hil/other-rig/#", f"servo-hil/{rig.name}/#"]) as client:
            client.publish("servo-hil/other-rig/status", b'{"rig": "other-rig"}', retain=True)
            client.wait(lambda m: m.topic == "servo-hil/other-rig/status", 5.0, "the retained status")
            d = start_daemon(rig)
            client.wait(lambda m: m.topic == f"servo-hil/{rig.name}/online" and m.payload == b"online", 10.0,
                        "online")
            client.publish_json(f"servo-hil/{rig.name}/cmd/set_goal", {"actuator": "mx", "value": 0.2, "id": "first"})
            ev = client.event(lambda e: e.get("type") in ("command_error", "command"), 2.0, "the first command event")
            assert ev.get("id") == "first" and ev["ok"] is True, ev
        assert d.alive
    finally:
        broker.stop()


def test_mqtt_unhashable_parameter_name_is_a_command_error(make_rig, start_daemon, mqtt_broker):
    """Regression: used to end the MQTT plane and then the whole daemon, leaving `online` retained."""
    rig = make_rig(mqtt_port=mqtt_broker.port)
    d = start_daemon(rig)
    with MqttClient(mqtt_broker.port, [f"servo-hil/{rig.name}/#"]) as client:
        client.wait(lambda m: m.payload == b"online", 5.0, "online")
        client.publish(f"servo-hil/{rig.name}/cmd/set_param", b'{"actuator": "mx", "name": ["kp"], "value": 1}')
        ev = client.event(lambda e: e.get("type") in ("command_error", "command"), 2.0, "a reply event")
        assert ev["type"] == "command_error" and "parameter" in ev["error"]
        client.publish_json(f"servo-hil/{rig.name}/cmd/set_goal", {"actuator": "mx", "value": 0.2, "id": "next"})
        assert client.event(lambda e: e.get("id") == "next", 2.0, "the next command's result")["ok"] is True
        time.sleep(0.3)
        assert not any(m.payload == b"offline" for m in client.messages), "the daemon went offline"
    assert d.alive, f"the daemon died (exit {d.proc.returncode}):\n{d.stderr()[-1500:]}"


# ---------------------------------------------------------------------------------------------- broker outages
def test_broker_restart_reconnects(make_rig, start_daemon, private_broker):
    """The broker goes away and comes back (empty, like a restarted mosquitto): the daemon reconnects,
    re-publishes its retained `online` and status, and obeys commands again; ZeroMQ never stops."""
    port = free_port()
    broker = private_broker(port)
    rig = make_rig(mqtt_port=port, status_period_s=0.5)
    d = start_daemon(rig)
    with MqttClient(port, [f"servo-hil/{rig.name}/online"]) as probe:
        probe.wait(lambda m: m.payload == b"online", 15.0, "online")
    broker.stop()
    with Stream(rig.pub) as stream:
        stream.first()
        got = stream.collect(0.5)
        # simulation time, not a count: a count would measure how fast this process drains a loaded host
        span = max(s.payload["t"] for s in got) - min(s.payload["t"] for s in got) if got else 0.0
        assert span > 0.25, f"the state stream stalled while the broker was down ({len(got)} samples, {span} s)"
    private_broker(port)
    with MqttClient(port, [f"servo-hil/{rig.name}/#"]) as client:
        # normally ~1 s (retry period); up to ~11 s if a connect attempt hits the restarting broker and
        # waits out aiomqtt's default 10 s timeout
        client.wait(lambda m: m.topic.endswith("/online") and m.payload == b"online", 15.0, "online again")
        client.wait(lambda m: m.topic.endswith("/status"), 3.0, "status again")
        client.publish_json(f"servo-hil/{rig.name}/cmd/set_goal", {"actuator": "mx", "value": 0.3, "id": "back"})
        assert client.event(lambda e: e.get("id") == "back", 3.0, "a command after the outage")["ok"] is True
    assert d.alive


def test_sigterm_while_the_broker_is_down(make_rig, start_daemon, private_broker):
    """SIGTERM while the daemon retries a broker that went away (every second): exit 0 promptly, without waiting
    for the retries or a connect attempt to end."""
    port = free_port()
    broker = private_broker(port)
    rig = make_rig(mqtt_port=port)
    d = start_daemon(rig)
    with MqttClient(port, [f"servo-hil/{rig.name}/online"]) as probe:
        probe.wait(lambda m: m.payload == b"online", 10.0, "online")
    broker.stop()
    deadline = time.monotonic() + 10.0
    while "unreachable" not in d.stderr():   # the daemon has lost the broker and is retrying
        assert time.monotonic() < deadline, f"no retry logged 10 s after the broker stopped:\n{d.stderr()[-2000:]}"
        time.sleep(0.05)
    t0 = time.monotonic()
    rc = d.terminate(PROMPT_STOP_S)
    elapsed = time.monotonic() - t0
    assert rc == 0 and elapsed < PROMPT_STOP_S, f"exit {rc} after {elapsed:.2f} s\n{d.stderr()[-2000:]}"


def test_daemon_runs_without_a_broker_and_connects_later(make_rig, start_daemon, private_broker):
    """No broker at the configured URL: ZeroMQ state and commands work anyway; once a broker appears
    the daemon connects (it retries every second) and goes online."""
    port = free_port()
    rig = make_rig(mqtt_port=port)
    d = start_daemon(rig)
    with Stream(rig.pub) as stream:
        stream.first()
        ok(rig.cmd, "set_goal", actuator="mx", value=0.4)
        stream.wait_for("mx", lambda p: abs(p["position"] - 0.4) < 0.05, 3.0, "the MX-64 at 0.4 rad")
    private_broker(port)
    with MqttClient(port, [f"servo-hil/{rig.name}/#"]) as client:
        client.wait(lambda m: m.topic.endswith("/online") and m.payload == b"online", 15.0,
                    "online once the broker is up")
        client.publish_json(f"servo-hil/{rig.name}/cmd/state", {"id": "s"})
        assert client.event(lambda e: e.get("id") == "s", 3.0, "a command result")["ok"] is True
    assert d.alive and ok(rig.cmd, "status")["status"]["tick"] > 0


def test_sigterm_soon_after_start_without_a_broker(make_rig, start_daemon):
    """Regression: start() used to wait up to 5 s for the broker, deaf to SIGTERM (measured 4.7 s)."""
    rig = make_rig(mqtt_port=free_port())
    d = start_daemon(rig)  # ready = the command socket answers
    time.sleep(0.3)
    t0 = time.monotonic()
    rc = d.terminate(PROMPT_STOP_S)
    elapsed = time.monotonic() - t0
    if rc is None:
        d.kill()
    assert rc == 0 and elapsed < PROMPT_STOP_S, f"exit {rc} after {elapsed:.2f} s"


def test_reconnects_promptly_after_a_reset_during_connect(make_rig, start_daemon, private_broker):
    """Regression: a reset mid-CONNECT used to stall reconnection for aiomqtt's default 10 s (measured 9.3 s);
    now the connect times out after 2 s and is retried 1 s later."""
    port = free_port()
    fake = socket.socket()
    fake.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    fake.bind(("127.0.0.1", port))
    fake.listen(8)
    fake.settimeout(10.0)
    rig = make_rig(mqtt_port=port)
    start_daemon(rig)
    try:
        conn, _ = fake.accept()  # the daemon's first connection attempt: reset it
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
    finally:
        fake.close()
    private_broker(port)
    t0 = time.monotonic()
    with MqttClient(port, [f"servo-hil/{rig.name}/online"]) as client:
        client.wait(lambda m: m.payload == b"online", 6.0, "online within 6 s of the broker being up")
    assert time.monotonic() - t0 < 6.0
