"""Integration tests of the `servo-hil run` daemon with real components (no mocks).

Every test starts the daemon as a subprocess on free loopback ports and talks to it the way a user
does: ZeroMQ SUB on the joint-state stream, msgpack requests on the REP command socket, MQTT through
a real broker (mosquitto when installed, else amqtt in-process), and the CLI. The helpers below are
shared by the test modules; the fixtures are in conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiomqtt
import msgpack
import zmq
from zmq.utils.monitor import recv_monitor_message

from servo_hil.daemon.zmq_io import request

RATE_HZ = 1000.0
DT = 1.0 / RATE_HZ  # the kernel's dt for rate 1000 Hz, 1 substep: bit-identical to the daemon's
# every key of a state message (zmq_io.py docstring); `temperature` only with a thermal model
PAYLOAD_KEYS = {"seq", "t", "position", "position_measured", "velocity", "torque", "current", "voltage",
                "goal", "enable", "external_torque", "mode", "fault_flags"}
INT_KEYS = {"seq", "mode", "fault_flags"}
MODE_CODES = {"voltage": 0, "position": 1, "velocity": 2, "dxl_pwm": 3, "erob_pd": 4, "current": 5, "torque": 6}
FLAG = {"open_circuit": 1, "supply_sag": 2, "encoder_noise": 4, "derated": 8, "overheat": 16, "encoder_stuck": 32,
        "encoder_slip": 64, "drop": 256, "corrupt": 512, "delay": 1024, "wrong_baud": 2048}

_ids = itertools.count()


@contextlib.contextmanager
def running_rig(path, text: str):
    """A LiveRig of the rig file `text` (written to `path`), started; stopped on exit."""
    from servo_hil.daemon.live_rig import LiveRig
    from servo_hil.rig import load_rig

    path.write_text(text)
    live = LiveRig(*load_rig(path))
    live.start()
    try:
        yield live
    finally:
        live.stop()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (bind port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rig_head(name: str, command: str | None = None) -> str:
    """The head of a rig TOML: `name`, ZeroMQ publisher and command endpoints on free local ports (the command
    one `command` when given), MQTT off."""
    command = command or f"tcp://127.0.0.1:{free_port()}"
    return (f'name = "{name}"\n[zmq]\npub = "tcp://127.0.0.1:{free_port()}"\ncommand = "{command}"\n'
            f'[mqtt]\nenabled = false\n')


def wait_port(port: int, timeout: float = 10.0, alive: Callable[[], bool] = lambda: True) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError(f"the process meant to listen on port {port} ended")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


# ---------------------------------------------------------------------------------------------- commands
def command(endpoint: str, cmd: str, timeout_s: float = 3.0, **args) -> dict:
    """One request on the daemon's REP socket; the reply as a dict."""
    return request(endpoint, {"cmd": cmd, **args}, timeout_s)


def ok(endpoint: str, cmd: str, **args) -> dict:
    reply = command(endpoint, cmd, **args)
    assert reply.get("ok") is True, f"{cmd} {args} refused: {reply}"
    return reply


def refused(endpoint: str, cmd: str, *needles: str, **args) -> str:
    """Send a command that must be refused; the error must name every needle. Returns the error."""
    reply = command(endpoint, cmd, **args)
    assert reply.get("ok") is False, f"{cmd} {args} was accepted: {reply}"
    error = reply.get("error")
    assert isinstance(error, str) and error, reply
    for needle in needles:
        assert needle in error, f"{needle!r} not named in the error {error!r}"
    return error


def raw_request(endpoint: str, payload: bytes | list[bytes], timeout_s: float = 3.0) -> dict:
    """Send raw bytes (not necessarily msgpack), or these frames as one multipart message, on the REP socket;
    the decoded reply."""
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
    try:
        sock.connect(endpoint)
        if isinstance(payload, list):
            sock.send_multipart(payload)
        else:
            sock.send(payload)
        try:
            return msgpack.unpackb(sock.recv(), raw=False)
        except zmq.Again:
            raise TimeoutError(f"no reply from {endpoint} within {timeout_s} s") from None
    finally:
        sock.close()


# ---------------------------------------------------------------------------------------------- ZeroMQ stream
@dataclass
class Sample:
    topic: str
    joint: str
    payload: dict
    stamp: bytes
    frames: int


class Stream:
    """A SUB socket on the daemon's joint-state PUB, with bounded waits."""

    def __init__(self, endpoint: str, topic: str = ""):
        self.sock = zmq.Context.instance().socket(zmq.SUB)
        self.sock.setsockopt(zmq.RCVHWM, 0)  # never drop on our side: gaps must come from the daemon
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt_string(zmq.SUBSCRIBE, topic)
        self._monitor = self.sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self.sock.connect(endpoint)
        self.last: dict[str, dict] = {}

    def wait_subscribed(self, timeout: float = 5.0, settle: float = 0.3) -> None:
        """For a silent publisher (lock-step): wait for the ZMTP handshake, then give the subscription
        `settle` s to reach the publisher (it is sent right after the handshake)."""
        assert self._monitor.poll(int(timeout * 1000)), f"no connection to the publisher within {timeout} s"
        recv_monitor_message(self._monitor)
        time.sleep(settle)

    def close(self) -> None:
        self.sock.disable_monitor()
        self._monitor.close()
        self.sock.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def recv(self, timeout: float) -> Sample | None:
        if not self.sock.poll(max(0, int(timeout * 1000))):
            return None
        frames = self.sock.recv_multipart()
        topic = frames[0].decode()
        payload = msgpack.unpackb(frames[1], raw=False) if len(frames) > 1 else {}
        s = Sample(topic, topic.split("/", 1)[-1], payload, frames[2] if len(frames) > 2 else b"", len(frames))
        self.last[s.joint] = payload
        return s

    def first(self, timeout: float = 5.0) -> Sample:
        """The first message (slow joiner: the subscription takes a moment to reach the publisher)."""
        s = self.recv(timeout)
        assert s is not None, f"no state message within {timeout} s"
        return s

    def drain(self) -> list[Sample]:
        out = []
        while (s := self.recv(0)) is not None:
            out.append(s)
        return out

    def collect(self, seconds: float) -> list[Sample]:
        out = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            s = self.recv(left)
            if s is not None:
                out.append(s)
        return out

    def samples(self, joint: str, seconds: float) -> list[dict]:
        return [s.payload for s in self.collect(seconds) if s.joint == joint]

    def samples_over_sim_time(self, joint: str, seconds: float, timeout: float = 10.0) -> list[dict]:
        """Samples of `joint` from the next one until its simulation time `t` has advanced by `seconds`: a window
        of simulated behaviour, whatever wall time a stalled host takes to deliver it (at most `timeout` s)."""
        deadline = time.monotonic() + timeout
        out = [self.wait_for(joint, lambda p: True, timeout, "a sample")]
        while out[-1]["t"] < out[0]["t"] + seconds - 1e-9:
            out.append(self.wait_for(joint, lambda p: True, max(deadline - time.monotonic(), 0.0),
                                     f"{seconds} s of simulated time"))
        return out

    def latest(self, joint: str, timeout: float = 2.0) -> dict:
        """A sample of `joint` produced after this call (what is already queued is dropped)."""
        self.drain()
        return self.wait_for(joint, lambda p: True, timeout, "a fresh sample")

    def wait_for(self, joint: str, pred: Callable[[dict], bool], timeout: float, what: str) -> dict:
        """The first sample of `joint` satisfying `pred`; AssertionError naming `what` after `timeout` s."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            s = self.recv(left)
            if s is not None and s.joint == joint and pred(s.payload):
                return s.payload
        raise AssertionError(f"{joint}: {what} not seen within {timeout} s; last sample {self.last.get(joint)}")


def rel_close(a: float, b: float, rel: float = 1e-9, abs_: float = 1e-12) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


# ---------------------------------------------------------------------------------------------- MQTT
@dataclass
class MqttMessage:
    topic: str
    payload: bytes
    retain: bool

    def json(self):
        return json.loads(self.payload)


def connect_to_embedded_broker(port: int, topics: list[str], daemon, **credentials) -> MqttClient:
    """An MqttClient on the daemon's embedded broker once it listens (it starts after the command socket
    answers), subscribed to `topics`, after the rig's retained `online`; `topics` must include `…/online`."""
    deadline = time.monotonic() + 20.0
    while True:
        try:
            client = MqttClient(port, topics, **credentials)
            break
        except aiomqtt.MqttError:
            assert time.monotonic() < deadline and daemon.alive, f"no embedded broker on {port}:\n{daemon.stderr()}"
            time.sleep(0.2)
    client.wait(lambda m: m.topic.endswith("/online") and m.payload == b"online", 10.0, "online")
    return client


@dataclass
class MqttClient:
    """An aiomqtt client in its own thread + event loop, with a blocking API and bounded waits."""

    port: int
    topics: list[str]
    messages: list[MqttMessage] = field(default_factory=list)
    username: str | None = None
    password: str | None = None

    def __post_init__(self) -> None:
        self._queue: queue.Queue[MqttMessage] = queue.Queue()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._client: aiomqtt.Client | None = None
        self._thread = threading.Thread(target=self._run, name=f"test-mqtt-{self.port}", daemon=True)
        self._thread.start()
        if not self._ready.wait(10.0):
            raise TimeoutError("the test MQTT client did not connect within 10 s")
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        for attempt in range(3):  # amqtt (the fallback broker) now and then drops a connecting client
            try:
                await self._session()
                return
            except aiomqtt.MqttError:
                if self._ready.is_set() or attempt == 2:
                    raise
                await asyncio.sleep(0.2)

    async def _session(self) -> None:
        async with aiomqtt.Client("127.0.0.1", self.port, identifier=f"servo-hil-test-{next(_ids)}",
                                  username=self.username, password=self.password, timeout=3.0) as client:
            for t in self.topics:
                await client.subscribe(t, qos=1)
            self._client = client
            pump = asyncio.create_task(self._pump(client))
            self._ready.set()
            await self._stop.wait()
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump

    async def _pump(self, client: aiomqtt.Client) -> None:
        async for m in client.messages:
            payload = m.payload if isinstance(m.payload, bytes | bytearray) else str(m.payload).encode()
            self._queue.put(MqttMessage(str(m.topic), bytes(payload), bool(m.retain)))

    def publish(self, topic: str, payload: bytes | str, timeout: float = 5.0, retain: bool = False) -> None:
        if isinstance(payload, str):
            payload = payload.encode()
        fut = asyncio.run_coroutine_threadsafe(self._client.publish(topic, payload, qos=1, retain=retain),
                                               self._loop)
        fut.result(timeout)

    def publish_many(self, topic: str, payloads: list[bytes], timeout: float = 60.0) -> None:
        """Publish every payload at QoS 1 as fast as the broker acknowledges them (20 in flight, paho's
        window), as a flooding client does."""
        async def flood() -> None:
            for k in range(0, len(payloads), 20):
                await asyncio.gather(*(self._client.publish(topic, p, qos=1) for p in payloads[k:k + 20]))

        asyncio.run_coroutine_threadsafe(flood(), self._loop).result(timeout)

    def publish_many_topics(self, messages: list[tuple[str, bytes]], qos: int = 1, timeout: float = 60.0) -> None:
        """Publish (topic, payload) pairs in order, at `qos`, as fast as the client writes them (QoS 0) or the
        broker acknowledges them (QoS 1, 20 in flight)."""
        async def flood() -> None:
            for k in range(0, len(messages), 20):
                await asyncio.gather(*(self._client.publish(t, p, qos=qos) for t, p in messages[k:k + 20]))

        asyncio.run_coroutine_threadsafe(flood(), self._loop).result(timeout)

    def publish_json(self, topic: str, obj) -> None:
        self.publish(topic, json.dumps(obj))

    def wait(self, pred: Callable[[MqttMessage], bool], timeout: float, what: str, start: int = 0) -> MqttMessage:
        """The first message (from index `start` of all received) with pred true; AssertionError on timeout."""
        for m in self.messages[start:]:
            if pred(m):
                return m
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                m = self._queue.get(timeout=left)
            except queue.Empty:
                break
            self.messages.append(m)
            if pred(m):
                return m
        seen = [(m.topic, m.payload[:200]) for m in self.messages[start:]][-10:]
        raise AssertionError(f"MQTT: {what} not received within {timeout} s; last messages: {seen}")

    def event(self, pred: Callable[[dict], bool], timeout: float, what: str, start: int = 0) -> dict:
        """The first JSON event on `…/events` with pred(event) true."""
        def match(m: MqttMessage) -> bool:
            if not m.topic.endswith("/events"):
                return False
            try:
                ev = m.json()
            except ValueError:
                return False
            return isinstance(ev, dict) and pred(ev)

        return self.wait(match, timeout, what, start).json()

    def mark(self) -> int:
        """Index after every message received so far (drains the queue): wait(start=mark()) sees only later ones."""
        while True:
            try:
                self.messages.append(self._queue.get_nowait())
            except queue.Empty:
                return len(self.messages)

    def close(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5.0)

    def __enter__(self) -> MqttClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
