"""Live viewers of the daemon: both state-stream framings read by a real pyzmq SUB, the Foxglove WebSocket
server read by a client speaking Foxglove's published WebSocket protocol, and the daemon's own MCAP
recording read with the `mcap` package's reader."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import math
import struct
import threading
import time

import msgpack
import pytest
import zmq

from hil.params.config_file import ConfigError
from servo_hil.rig import read_rig

from . import DT, PAYLOAD_KEYS, free_port, ok
from .conftest import ARM_GEAR

REALIGN_PERIODS = 100  # the loop realigns after a stall longer than this many periods (hil/loop/rt.pyx)


def unexplained_steps(stamps: list[float], nominal: float, skipped_periods: int, tol: float = 2e-6) -> list[float]:
    """Steps between consecutive tick stamps (wall-clock s) that are neither `nominal` (within `tol`) nor the loop
    realigning after a stall: it then skips the stalled periods, counts them in status `skipped_periods`, and its
    stamp jumps by them. So a longer step must exceed `nominal` by over REALIGN_PERIODS periods, and all such steps
    together by no more periods than the loop counted over the window (+1 each: two stalls may share a step)."""
    steps = [b - a for a, b in itertools.pairwise(stamps)]
    jumps = [x for x in steps if abs(x - nominal) > tol]
    if sum(int((x - nominal - tol) // DT) for x in jumps) > skipped_periods + len(jumps):
        return jumps
    return [x for x in jumps if x - nominal < REALIGN_PERIODS * DT - tol]


def with_zmq(rig, line: str):
    """Add `line` to the rig file's [zmq] table."""
    text = rig.path.read_text()
    rig.path.write_text(text.replace("[zmq]\n", f"[zmq]\n{line}\n", 1))
    return rig


class Collector(threading.Thread):
    """A SUB on the daemon's state stream keeping every message's frames until stop()."""

    def __init__(self, endpoint: str):
        super().__init__(daemon=True)
        self.sock = zmq.Context.instance().socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.connect(endpoint)
        self.messages: list[list[bytes]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            if self.sock.poll(50):
                self.messages.append(self.sock.recv_multipart())
        self.sock.close()

    def until(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self.messages) >= count, f"{len(self.messages)} state messages within {timeout} s"

    def stop(self) -> list[list[bytes]]:
        self.halt.set()
        self.join(2.0)
        return self.messages


@pytest.mark.parametrize("framing", ["multipart", "single"])
def test_framing_read_by_a_sub(framing, make_rig, start_daemon):
    rig = with_zmq(make_rig(), f'framing = "{framing}"')
    d = start_daemon(rig)
    skipped_before = ok(rig.cmd, "status")["status"]["skipped_periods"]
    sub = Collector(rig.pub)
    sub.start()
    sub.until(200)
    ok(rig.cmd, "set_goal", actuator="arm", value=0.5 * ARM_GEAR)
    time.sleep(0.8)
    messages = sub.stop()
    skipped = ok(rig.cmd, "status")["status"]["skipped_periods"] - skipped_before
    assert d.alive
    series: dict[str, list[tuple[float, dict]]] = {"arm": [], "mx": []}
    for frames in messages:
        if framing == "multipart":
            assert len(frames) == 3, f"multipart framing sent {len(frames)} frames"
            topic, payload, stamp = frames
            rig_name, _, joint = topic.decode().partition("/")
            state, t = msgpack.unpackb(payload), float(stamp.decode())
        else:
            assert len(frames) == 1, f"single framing sent {len(frames)} frames"
            message = msgpack.unpackb(frames[0])
            assert set(message) == {rig.name, "timestamp"}, message.keys()
            (joint,) = message[rig.name]
            rig_name, state, t = rig.name, message[rig.name][joint], message["timestamp"]
            assert isinstance(t, float)
        assert rig_name == rig.name
        assert set(state) == PAYLOAD_KEYS | ({"temperature"} if joint == "mx" else set()), state.keys()
        assert abs(t - time.time()) < 30.0, f"timestamp {t} is not wall-clock time"
        series[joint].append((t, state))
    for joint, samples in series.items():
        seqs = [s["seq"] for _, s in samples]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"{joint}: seq not gap-free"
        stamps = [t for t, _ in samples]
        odd = unexplained_steps(stamps, DT, skipped)
        assert not odd, f"{joint}: timestamps are not one tick apart: steps {odd[:5]}, {skipped} periods skipped"
    # the two joints' series are theirs alone: the arm rises to its goal, the mx (torque off) never moves
    arm = [s["position"] for _, s in series["arm"]]
    assert arm[0] == pytest.approx(0.0, abs=1e-3) and arm[-1] > 0.3, (arm[0], arm[-1])
    assert max(abs(s["position"]) for _, s in series["mx"]) < 1e-3
    assert {s["goal"] for _, s in series["mx"]} == {0.0}


def test_single_frame_head_lengths():
    """Rig and joint names of every length fit the head: msgpack's fixstr (< 32 bytes) and str8."""
    from servo_hil.daemon.zmq_io import decode_state, single_frame_head

    for rig, joint in (("r", "j"), ("r" * 31, "j" * 32), ("r" * 64, "j" * 64)):
        state = {"seq": 3, "position": 0.25}
        frame = single_frame_head(rig, joint) + msgpack.packb(state) + msgpack.packb("timestamp") + \
            b"\xcb" + struct.pack(">d", 12.5)
        assert msgpack.unpackb(frame) == {rig: {joint: state}, "timestamp": 12.5}
        assert decode_state([frame]) == (joint, 12_500_000_000, state)


def decoder(channel: dict):
    """bytes -> message of an advertised channel: JSON, or protobuf from the FileDescriptorSet the server
    sends base64-encoded with it (Foxglove WebSocket protocol, `advertise`; its well-known schemas)."""
    if channel["encoding"] == "json":
        return json.loads
    assert channel["encoding"] == "protobuf" and channel["schemaEncoding"] == "protobuf", channel
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    files = {f.name: f for f in descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(channel["schema"])).file}
    pool, added = descriptor_pool.DescriptorPool(), set()

    def add(name: str) -> None:      # a file after the files it imports
        if name not in added:
            for dependency in files[name].dependency:
                add(dependency)
            pool.AddSerializedFile(files[name].SerializeToString())
            added.add(name)

    for name in files:
        add(name)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(channel["schemaName"])).FromString


def enough_states(want_events: int, want_states: int = 40):
    """done(channels, received) of `foxglove_session`: `want_events` events and `want_states` joint states."""
    def done(channels: dict, received: dict) -> bool:
        counts = {"events": 0, "states": 0}
        for cid, ms in received.items():
            counts["events" if channels[cid]["topic"].endswith("/events") else "states"] += len(ms)
        return counts["events"] >= want_events and counts["states"] >= want_states

    return done


async def foxglove_session(port: int, done, timeout: float = 10.0) -> tuple[dict, dict[int, list], list]:
    """Connect as a Foxglove WebSocket client (subprotocol foxglove.sdk.v1), subscribe to every channel
    advertised, and collect messages until done(channels, received) or `timeout` s: (channels by id, decoded
    messages (log time [ns], message) per channel id, server info)."""
    import websockets

    async with websockets.connect(f"ws://127.0.0.1:{port}", subprotocols=["foxglove.sdk.v1"]) as ws:
        assert ws.subprotocol == "foxglove.sdk.v1"
        channels: dict[int, dict] = {}
        info = []
        received: dict[int, list] = {}
        decoders: dict[int, object] = {}
        deadline = time.monotonic() + timeout
        subscribed: dict[int, int] = {}
        while time.monotonic() < deadline:
            try:
                raw = await asyncio.wait_for(ws.recv(), 0.5)
            except TimeoutError:
                raw = None
            if isinstance(raw, str):
                op = json.loads(raw)
                if op["op"] == "serverInfo":
                    info.append(op)
                elif op["op"] == "advertise":
                    for ch in op["channels"]:
                        channels[ch["id"]] = ch
                        decoders[ch["id"]] = decoder(ch)
                        sub_id = len(subscribed) + 1
                        subscribed[sub_id] = ch["id"]
                        await ws.send(json.dumps({"op": "subscribe",
                                                  "subscriptions": [{"id": sub_id, "channelId": ch["id"]}]}))
            elif isinstance(raw, bytes):
                assert raw[0] == 0x01, f"binary opcode {raw[0]}"   # message data
                sub_id, log_time = struct.unpack_from("<IQ", raw, 1)
                cid = subscribed[sub_id]
                received.setdefault(cid, []).append((log_time, decoders[cid](raw[13:])))
            if done(channels, received):
                break
        return channels, received, info


def test_foxglove_server(make_rig, start_daemon):
    port = free_port()
    rig = make_rig(extra=f'\n[foxglove]\nport = {port}\nrate_hz = 50\n')
    start_daemon(rig)
    ok(rig.cmd, "set_goal", actuator="arm", value=0.4 * ARM_GEAR)

    async def session():
        task = asyncio.create_task(foxglove_session(port, enough_states(want_events=2)))
        await asyncio.sleep(1.0)        # subscribed by now: the events below reach the client
        await asyncio.to_thread(ok, rig.cmd, "pause")
        await asyncio.to_thread(ok, rig.cmd, "resume")
        return await task

    channels, received, info = asyncio.run(session())
    assert info and info[0]["name"] == f"servo-hil {rig.name}"
    by_topic = {c["topic"]: c for c in channels.values()}
    assert set(by_topic) == {f"/{rig.name}/arm/state", f"/{rig.name}/mx/state", f"/{rig.name}/events"}
    for topic, ch in by_topic.items():
        assert ch["encoding"] == "json" and ch["schemaEncoding"] == "jsonschema"
        schema = json.loads(ch["schema"])
        assert schema["type"] == "object"
        if topic.endswith("/state"):
            assert ch["schemaName"] == "servo_hil.JointState"
            assert set(schema["properties"]) == PAYLOAD_KEYS | {"temperature"}
        else:
            assert ch["schemaName"] == "servo_hil.Event" and "type" in schema["required"]
    for joint in ("arm", "mx"):
        states = received[by_topic[f"/{rig.name}/{joint}/state"]["id"]]
        assert len(states) >= 10, f"{joint}: {len(states)} states"
        required = set(json.loads(by_topic[f"/{rig.name}/{joint}/state"]["schema"])["required"])
        for log_time, s in states:
            assert set(s) >= PAYLOAD_KEYS | required
            assert s["seq"] % 20 == 0, "50 Hz of a 1 kHz stream is one tick in 20"
            assert abs(log_time / 1e9 - time.time()) < 30.0
        seqs = [s["seq"] for _, s in states]
        assert all(b - a == 20 for a, b in itertools.pairwise(seqs)), seqs
    arm, mx = ([s["position"] for _, s in received[by_topic[f"/{rig.name}/{j}/state"]["id"]]] for j in ("arm", "mx"))
    assert arm[-1] > 0.2 and max(map(abs, mx)) < 1e-3
    events = [e for _, e in received[by_topic[f"/{rig.name}/events"]["id"]]]
    assert [e["type"] for e in events][-2:] == ["paused", "resumed"], events


@pytest.mark.parametrize(("subprotocols", "accepted"), [
    (["foxglove.sdk.v1"], "foxglove.sdk.v1"),                              # Foxglove app, Lichtblick with sdk.v1
    (["foxglove.websocket.v1", "foxglove.sdk.v1"], "foxglove.sdk.v1"),     # a client offering both names
    (["foxglove.websocket.v1"], None),                                      # older clients: refused, HTTP 400
])
def test_foxglove_subprotocols(subprotocols, accepted, make_rig, start_daemon):
    """docs/configuration.md "Foxglove live view": foxglove-sdk's handshake takes `foxglove.sdk.v1` only; a client
    offering nothing else is refused with HTTP 400 (the documented client versions follow from this)."""
    import websockets

    port = free_port()
    start_daemon(make_rig(extra=f'\n[foxglove]\nport = {port}\n'))

    async def handshake():
        async with websockets.connect(f"ws://127.0.0.1:{port}", subprotocols=subprotocols) as ws:
            info = json.loads(await asyncio.wait_for(ws.recv(), 5.0))
            return ws.subprotocol, info["op"]

    if accepted is None:
        with pytest.raises(websockets.exceptions.InvalidStatus) as err:
            asyncio.run(handshake())
        assert err.value.response.status_code == 400
    else:
        assert asyncio.run(handshake()) == (accepted, "serverInfo")


def pause_and_count_skipped(cmd: str) -> int:
    """Pause the loop, wait until status says so, and return its `skipped_periods`: paused, the loop records nothing
    more, so the count covers a whole recording."""
    ok(cmd, "pause")
    deadline = time.monotonic() + 10.0
    while not (status := ok(cmd, "status")["status"])["paused"]:
        assert time.monotonic() < deadline, "the loop did not pause within 10 s"
        time.sleep(0.01)
    return status["skipped_periods"]


def recorded_against_stream(directory, stream: list[list[bytes]], joints, min_count: int = 50,
                            skipped_periods: int = 0) -> tuple[dict, dict]:
    """The daemon's own recording in `directory` checked against the state stream a SUB collected (`stream`):
    one `/sim/<joint>/state` channel per joint, 100 Hz of the 1 kHz stream (a state every 10 ms, but for the
    loop realigning after a stall: `skipped_periods`, its status count over the recording), every recorded state
    that the SUB saw equal to it, at least `min_count` of them; a robot rig's `/sim/poses` (protobuf) is left to
    its own test. (recorded {topic: [(log time, body)]}, published {(joint, stamp ns): state})."""
    from mcap.reader import make_reader

    from servo_hil.daemon.zmq_io import decode_state

    published = {}
    for frames in stream:
        if len(frames) == 3 and frames[0].endswith(b"/poses"):
            continue   # a robot rig's poses messages: not joint states
        joint, stamp_ns, state = decode_state(frames)
        published[(joint, stamp_ns)] = state
    files = sorted(directory.glob("*.mcap"))
    assert files, "no MCAP file written"
    recorded: dict[str, list] = {}
    for path in files:
        with path.open("rb") as f:
            for schema, channel, message in make_reader(f).iter_messages():
                if channel.topic == "/sim/poses":
                    continue
                assert schema.encoding == "jsonschema" and channel.message_encoding == "json"
                recorded.setdefault(channel.topic, []).append((message.log_time, json.loads(message.data)))
    assert set(recorded) == {f"/sim/{joint}/state" for joint in joints}
    for joint in joints:
        msgs = recorded[f"/sim/{joint}/state"]
        assert len(msgs) >= min_count, f"{joint}: {len(msgs)} states recorded"
        odd = unexplained_steps([t / 1e9 for t, _ in msgs], 10 * DT, skipped_periods, tol=0.5e-3)
        assert not odd, (f"{joint}: 100 Hz of a 1 kHz stream is a state every 10 ms, got gaps {odd[:5]} s "
                         f"({skipped_periods} periods skipped)")
        matched = 0
        for log_time, body in msgs:
            state = published.get((joint, log_time))
            if state is None:
                continue   # recorded before the test's SUB had joined
            matched += 1
            for key in ("position", "velocity", "current", "torque", "goal", "voltage"):
                assert body[key] == state[key], (joint, key)
            assert body["enable"] == bool(state["enable"])
        assert matched >= min_count, f"{joint}: {matched} recorded states found in the published stream"
    return recorded, published


@pytest.mark.parametrize("framing", ["multipart", "single"])
def test_daemon_records_its_stream(framing, make_rig, start_daemon, tmp_path):
    rig = with_zmq(make_rig(extra='\n[record]\ndir = "rec"\nrate_hz = 100\n'), f'framing = "{framing}"')
    d = start_daemon(rig)
    sub = Collector(rig.pub)
    sub.start()
    sub.until(50)
    ok(rig.cmd, "set_goal", actuator="arm", value=0.5 * ARM_GEAR)
    time.sleep(1.0)
    skipped = pause_and_count_skipped(rig.cmd)
    assert d.terminate() == 0, d.stderr()
    recorded, published = recorded_against_stream(tmp_path / "rec", sub.stop(), ("arm", "mx"), skipped_periods=skipped)
    arm = [b["position"] for _, b in recorded["/sim/arm/state"]]
    assert arm[-1] > 0.3 and arm[-1] == pytest.approx(published[max(k for k in published if k[0] == "arm")]
                                                      ["position"], abs=0.05)
    assert all(b["goal"] == 0.0 for _, b in recorded["/sim/mx/state"])


@pytest.mark.parametrize(("table", "needles"), [
    ('[foxglove]\nbind = "0.0.0.0"\n', ("foxglove", "'0.0.0.0'", "allow_remote")),
    ('[foxglove]\nport = 70000\n', ("foxglove.port",)),
    ('[record]\nsegment_s = 5\n', ("record.dir",)),
    ('[zmq]\nframing = "frames"\n', ("zmq.framing",)),
])
def test_viewer_settings_refused(tmp_path, table, needles):
    path = tmp_path / "rig.toml"
    path.write_text(f'{table}\n[[actuators]]\njoint = "mx"\ncatalog = "mx64"\n')
    with pytest.raises(ConfigError) as err:
        read_rig(path)
    text = str(err.value)
    assert all(n in text for n in needles) and "\n" not in text.strip(), text


def test_remote_foxglove_needs_allow_remote(tmp_path):
    path = tmp_path / "rig.toml"
    path.write_text('[foxglove]\nbind = "0.0.0.0"\nallow_remote = true\n'
                    '[[actuators]]\njoint = "mx"\ncatalog = "mx64"\n')
    assert read_rig(path).foxglove.bind == "0.0.0.0"
    assert math.isclose(read_rig(path).foxglove.rate_hz, 100.0)


def test_plotjuggler_layout_names_the_default_rigs_series():
    """Every curve of config/plotjuggler/default.xml is a series the single framing gives the default rig
    (`/<rig>/<joint>/<key>`, PlotJuggler's flattening of nested maps), and both joints are plotted."""
    import xml.etree.ElementTree as ET
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    rig = read_rig(root / "config/rigs/default.toml")
    layout = ET.parse(root / "config/plotjuggler/default.xml").getroot()
    assert layout.find("previouslyLoaded_Streamer").get("name") == "ZMQ Subscriber"
    curves = [c.get("name") for c in layout.iter("curve")]
    joints = set()
    for name in curves:
        _, rig_name, joint, key = name.split("/")
        assert rig_name == rig.name and key in PAYLOAD_KEYS, name
        joints.add(joint)
    assert joints == {a.joint for a in rig.actuators}
