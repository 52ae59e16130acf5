"""Stream fuzz of a running daemon's two command planes, with valid probes checked against the joint state.

ZeroMQ command socket (REQ/REP, msgpack): random bytes, msgpack of random shapes, commands with random, huge,
nested or non-finite arguments, multi-frame requests (one REQ socket answers each), and messages over the
socket's size limit (a throwaway socket: libzmq drops the peer, nothing answers). MQTT (the daemon's embedded
amqtt broker, with credentials): publications on `servo-hil/<rig>/cmd/<name>` with random names and payloads
of random bytes, JSON of random shapes, huge numbers and deep nesting, at QoS 0 as fast as the broker takes
them.

Every answered input must be answered with one bounded reply (ZeroMQ) or exactly one event (MQTT). Every
PROBE_EVERY inputs two probes follow on the same plane: `status` must succeed and count exactly the refusals
seen so far, and a `set_goal` with a fresh value must show as that goal in the joint state (`state`). The
daemon must stay up and log no traceback and no ERROR, and its RSS (/proc/<pid>/status VmRSS) must grow by less
than 5 MB from after the first tenth of the run to its end: over the ZeroMQ soak, a plateau.

The normal run sends >= 10^4 inputs per plane; `-m soak` 10^6 to the ZeroMQ socket and 10^5 through MQTT.
"""

from __future__ import annotations

import json
import math
import random
import time

import msgpack
import pytest
import zmq

from servo_hil.daemon.commands import CommandSet
from servo_hil.daemon.mqtt_plane import MAX_PAYLOAD
from servo_hil.daemon.zmq_io import MAX_REQUEST_BYTES
from tests.daemon_process import RSS_GROWTH_LIMIT_KB, rss_kb

from . import MqttClient, connect_to_embedded_broker, free_port, ok
from .conftest import Launcher, write_rig

SEED = 0x2F1A
PROBE_EVERY = 50
REPLY_TIMEOUT_S = 2.0
GOAL_TIMEOUT_S = 2.0
MAX_ERROR_REPLY_BYTES = 2048   # an error names a bad value, it does not echo it whole
JOINTS = ("arm", "mx")
USER, PASSWORD = "rig", "s3cret"
# commands that would stop the loop or rewrite its state under the probe: fuzzed only with an argument no
# command takes, so they are refused
DISRUPTIVE = {"pause", "step", "reset", "set_param", "set_mode", "set_enable", "inject_fault", "clear_fault"}
COMMANDS = CommandSet.names()


# ---------------------------------------------------------------------------------------------- generators
def huge_number(rng: random.Random):
    return rng.choice([math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, 2**63 - 1, -2**63, 2**64 - 1,
                       rng.uniform(-1e300, 1e300), rng.randrange(-2**63, 2**64)])


def shape(rng: random.Random, depth: int = 0):
    """A random msgpack/JSON-able value: scalars (huge and non-finite numbers too), lists and maps."""
    k = rng.random()
    if depth < 4 and k < 0.15:
        return [shape(rng, depth + 1) for _ in range(rng.randrange(0, 6))]
    if depth < 4 and k < 0.3:
        return {rng.choice([*JOINTS, "cmd", "actuator", "value", "id", "fault", "name", rand_text(rng)]):
                shape(rng, depth + 1) for _ in range(rng.randrange(0, 6))}
    return rng.choice([None, True, False, rng.randrange(-1000, 1000), rng.uniform(-10, 10), huge_number(rng),
                       rand_text(rng), rng.choice(JOINTS), rng.choice(COMMANDS)])


def rand_text(rng: random.Random, n: int = 12) -> str:
    return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0xA0, 0x2FFF)]))
                   for _ in range(rng.randrange(0, n)))


def deep(rng: random.Random) -> object:
    value: object = rng.uniform(-1, 1)
    for _ in range(rng.randrange(10, 200)):
        value = [value] if rng.random() < 0.5 else {"value": value}
    return value


def command_args(rng: random.Random, name: str) -> dict:
    """Arguments for command `name`: the right keys with random values, or random keys."""
    args: dict = {}
    if rng.random() < 0.7:
        args["actuator"] = rng.choice([*JOINTS, *JOINTS, shape(rng)])
    if rng.random() < 0.7:
        args["value"] = rng.choice([huge_number(rng), shape(rng), deep(rng), rng.uniform(-2, 2)])
    for _ in range(rng.randrange(0, 3)):
        args[rand_text(rng) or "x"] = shape(rng)
    if name in DISRUPTIVE:
        args["unknown argument"] = 0
    if rng.random() < 0.2:
        args["id"] = shape(rng)
    return args


def fuzz_command(rng: random.Random) -> dict:
    name = rng.choice(COMMANDS) if rng.random() < 0.8 else rand_text(rng)
    return {"cmd": name, **command_args(rng, name)}


def zmq_input(rng: random.Random) -> tuple[str, list[bytes]]:
    """(kind, frames) of one request: "oversized" is dropped by libzmq, every other kind is answered."""
    k = rng.random()
    if k < 0.15:
        return "bytes", [rng.randbytes(rng.randrange(0, 200))]
    if k < 0.35:
        return "shape", [msgpack.packb(shape(rng))]
    if k < 0.8:
        return "command", [msgpack.packb(fuzz_command(rng))]
    if k < 0.88:
        return "nested", [msgpack.packb({"cmd": rng.choice(COMMANDS), "value": deep(rng)} if rng.random() < 0.5
                                        else b"\x91" * rng.randrange(100, 5000) + b"\xc0")]
    if k < 0.97:
        return "multi", [msgpack.packb(fuzz_command(rng)) for _ in range(rng.randrange(2, 5))]
    if k < 0.99:   # within the size limit, beyond the unpacker's string and container limits
        return "long", [msgpack.packb({"cmd": "set_goal", "actuator": "x" * rng.randrange(5000, 60_000)})]
    return "oversized", [rng.randbytes(MAX_REQUEST_BYTES + rng.randrange(1, 100_000))]


def mqtt_input(rng: random.Random) -> tuple[str, bytes]:
    """(command name, payload) of one publication."""
    k = rng.random()
    if k < 0.7:
        name = rng.choice(COMMANDS)
    elif k < 0.85:
        name = rand_text(rng).replace("+", "").replace("#", "")
    else:
        name = "/".join(rng.choice([*COMMANDS, rand_text(rng, 4)]).replace("+", "").replace("#", "")
                        for _ in range(rng.randrange(2, 4)))
    k = rng.random()
    if k < 0.15:
        payload = rng.randbytes(rng.randrange(0, 200))
    elif k < 0.35:
        payload = json.dumps(shape(rng)).encode()
    elif k < 0.8:
        payload = json.dumps(command_args(rng, name)).encode()
    elif k < 0.88:
        digits = rng.choice([b"1" + b"0" * rng.randrange(300, 5000), b"-1e" + b"9" * rng.randrange(3, 400),
                             b"0." + b"0" * rng.randrange(300, 5000) + b"1"])
        payload = b'{"actuator": "mx", "value": ' + digits + b"}"
    elif k < 0.98:
        n = rng.randrange(100, 10_000)   # within MAX_PAYLOAD: a bigger packet ends the connection (another test)
        payload = rng.choice([b"[" * n + b"]" * n, b'{"a":' * n + b"0" + b"}" * n])
    else:
        payload = b'{"value": "' + b"9" * (MAX_PAYLOAD + rng.randrange(1, 500)) + b'"}'
    return name, payload


# ---------------------------------------------------------------------------------------------- probes
def goal_shows(cmd_endpoint: str, joint: str, value: float) -> None:
    deadline = time.monotonic() + GOAL_TIMEOUT_S
    while (goal := ok(cmd_endpoint, "state", actuator=joint)["state"][joint]["goal"]) != pytest.approx(value, abs=1e-9):
        assert time.monotonic() < deadline, f"set_goal {joint} {value}: the joint's goal stays at {goal}"
        time.sleep(0.002)


def check_daemon(d, rss_start: int) -> int:
    rss_end = rss_kb(d.proc.pid)
    assert d.alive, d.stderr()[-3000:]
    err = d.stderr()
    assert "Traceback" not in err and " ERROR " not in err, err[-3000:]
    assert rss_end - rss_start < RSS_GROWTH_LIMIT_KB, f"RSS {rss_start} -> {rss_end} kB"
    return rss_end


# ---------------------------------------------------------------------------------------------- ZeroMQ
class Req:
    """A REQ socket with a bounded wait for each reply."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.sock = zmq.Context.instance().socket(zmq.REQ)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def ask(self, frames: list[bytes]) -> bytes:
        self.sock.send_multipart(frames)
        assert self.sock.poll(int(REPLY_TIMEOUT_S * 1000)), f"no reply within {REPLY_TIMEOUT_S} s to {frames!r:.300}"
        return self.sock.recv()

    def close(self) -> None:
        self.sock.close()


def send_oversized(endpoint: str, frames: list[bytes]) -> None:
    """Send and close: libzmq drops the connection of a peer whose message exceeds ZMQ_MAXMSGSIZE."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 500)
    sock.connect(endpoint)
    sock.send_multipart([b"", *frames])
    sock.close()


def run_zmq(d, n_inputs: int) -> dict:
    rng = random.Random(SEED)
    req = Req(d.rig.cmd)
    refusals = ok(d.rig.cmd, "status")["status"]["command_errors"]["zmq"]
    sent = probes = dropped = 0
    rss_trace: list[int] = []
    try:
        while sent < n_inputs:
            for _ in range(PROBE_EVERY):
                kind, frames = zmq_input(rng)
                sent += 1
                if kind == "oversized":
                    send_oversized(d.rig.cmd, frames)
                    dropped += 1
                    continue
                raw = req.ask(frames)
                reply = msgpack.unpackb(raw, raw=False, strict_map_key=False)
                assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool), f"{kind}: reply {reply!r:.300}"
                if not reply["ok"]:
                    refusals += 1
                    assert isinstance(reply.get("error"), str) and len(raw) <= MAX_ERROR_REPLY_BYTES, \
                        f"{kind}: {len(raw)}-byte error reply {raw[:300]!r}"
            status = msgpack.unpackb(req.ask([msgpack.packb({"cmd": "status"})]), raw=False)
            assert status["ok"] and status["status"]["loop_alive"], status
            assert status["status"]["command_errors"]["zmq"] == refusals, (status["status"]["command_errors"], refusals)
            joint, value = rng.choice(JOINTS), round(rng.uniform(-1, 1), 6)
            reply = msgpack.unpackb(req.ask([msgpack.packb({"cmd": "set_goal", "actuator": joint, "value": value})]),
                                    raw=False)
            assert reply["ok"], f"probe {probes + 1} after {sent} inputs: {reply}"
            goal_shows(d.rig.cmd, joint, value)
            probes += 1
            if sent >= (len(rss_trace) + 1) * n_inputs // 10:   # RSS after each tenth of the run
                rss_trace.append(rss_kb(d.proc.pid))
    finally:
        req.close()
    rss_end = check_daemon(d, rss_trace[0])
    return {"plane": "zmq", "inputs": sent, "dropped_oversized": dropped, "refused": refusals, "probes": probes,
            "rss_start_kb": rss_trace[0], "rss_end_kb": rss_end, "rss_kb_each_tenth": rss_trace}


# ---------------------------------------------------------------------------------------------- MQTT
def run_mqtt(d, client: MqttClient, n_inputs: int) -> dict:
    rng = random.Random(SEED + 1)
    prefix = f"servo-hil/{d.rig.name}"
    refusals = ok(d.rig.cmd, "status")["status"]["command_errors"]["mqtt"]
    sent = probes = 0
    rss_start = None
    while sent < n_inputs:
        start = client.mark()
        batch = [mqtt_input(rng) for _ in range(PROBE_EVERY)]
        client.publish_many_topics([(f"{prefix}/cmd/{name}", payload) for name, payload in batch], qos=0)
        sent += len(batch)
        tag = f"probe-{probes}"
        joint, value = rng.choice(JOINTS), round(rng.uniform(-1, 1), 6)
        client.publish_many_topics([(f"{prefix}/cmd/status", json.dumps({"id": tag + "-status"}).encode()),
                                    (f"{prefix}/cmd/set_goal",
                                     json.dumps({"id": tag, "actuator": joint, "value": value}).encode())], qos=0)
        try:
            ev = client.event(lambda e, tag=tag: e.get("id") == tag, 10.0, f"the reply to {tag}", start)
        except AssertionError as exc:
            raise AssertionError(f"probe {probes + 1} after {sent} inputs: {exc}") from None
        assert ev["ok"] is True, ev
        events = [m.json() for m in client.messages[start:] if m.topic == f"{prefix}/events"]
        commands = [e for e in events if e.get("type") in ("command", "command_error")]
        # one event per publication, in order: the batch's, then the two probes'
        assert len(commands) == len(batch) + 2, f"{len(commands)} command events for {len(batch)} + 2 publications"
        status = commands[-2]
        assert status.get("id") == tag + "-status" and status["ok"] is True, status
        refusals += sum(e["type"] == "command_error" for e in commands[:-2])
        counted = status["result"]["status"]["command_errors"]
        assert counted["mqtt"] == refusals, (counted, refusals)
        goal_shows(d.rig.cmd, joint, value)
        probes += 1
        client.messages.clear()   # memory of this side stays bounded over a soak
        if rss_start is None and sent >= n_inputs // 10:
            rss_start = rss_kb(d.proc.pid)
    assert ok(d.rig.cmd, "status")["status"]["command_errors"]["mqtt_dropped"] == 0
    rss_end = check_daemon(d, rss_start)
    return {"plane": "mqtt", "inputs": sent, "refused": refusals, "probes": probes, "rss_start_kb": rss_start,
            "rss_end_kb": rss_end}


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    """One (arm, mx) daemon with its embedded broker (credentials; no command rate limit in reach), and an
    MQTT client subscribed to its events."""
    launcher = Launcher(tmp_path_factory.mktemp("fuzz-planes"))
    port = free_port()
    rig = write_rig(launcher.dir / "fuzz.toml", "fuzz-planes", joints=JOINTS)
    rig.path.write_text(rig.path.read_text().replace(
        "[mqtt]\nenabled = false\n",
        f'[mqtt]\nembedded_port = {port}\nusername = "{USER}"\npassword = "{PASSWORD}"\nmax_commands_per_s = 1e6\n'))
    rig.mqtt_port = port
    d = launcher.start(rig, no_mqtt_flag=False)
    client = connect_to_embedded_broker(port, [f"servo-hil/{rig.name}/events", f"servo-hil/{rig.name}/online"], d,
                                        username=USER, password=PASSWORD)
    yield d, client
    client.close()
    launcher.finish()


def test_zmq_stream_fuzz_every_probe_answered(fuzzed):
    print(run_zmq(fuzzed[0], 10_000))


def test_mqtt_stream_fuzz_every_probe_answered(fuzzed):
    print(run_mqtt(*fuzzed, 10_000))


@pytest.mark.soak
def test_zmq_stream_fuzz_soak(fuzzed):
    print(run_zmq(fuzzed[0], 1_000_000))


@pytest.mark.soak
def test_mqtt_stream_fuzz_soak(fuzzed):
    print(run_mqtt(*fuzzed, 100_000))
