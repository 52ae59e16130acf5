"""ZeroMQ interfaces: joint state PUB (two framings), an in-process tap of it, and the msgpack command socket.

One message per actuator per published tick in the framing `[zmq] framing` names, the bodies' poses on
`<rig>/poses` for a robot rig, and msgpack command maps on a REP socket. Framings, payload keys and units:
docs/configuration.md, ZeroMQ state stream; the poses: docs/robots.md, In real time.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgpack
import numpy as np
import zmq
import zmq.auth

from hil.kernel import FAULT_BITS
from hil.loop.rt import bind_libzmq, realtime_thread
from hil.params.config_file import ConfigError
from hil.robot.rig import POSES_TOPIC
from servo_hil.daemon.arguments import CommandError, shown
from servo_hil.daemon.commands import CommandSet
from servo_hil.daemon.live_rig import LiveRig, fault_names
from servo_hil.rig import ZmqConfig, loopback

log = logging.getLogger("servo-hil")

STATE_TAP = "inproc://servo-hil-state"
"""The state stream inside the daemon's process, already decimated: the publisher's C path sends one published
tick in `tap_every` to a second PUB socket bound here, and the recorder and the Foxglove server read it in a
thread of their own, so the loop and the publisher do no Python work for them. A robot's poses messages go
there too, each one."""


def loaded_libzmq() -> str:
    """Path of the libzmq pyzmq loaded into this process (its bundled copy or the system's)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/libzmq" in path and ".so" in path:
                return path
    raise OSError("libzmq is not loaded (pyzmq's backend should have loaded it)")


bind_libzmq(loaded_libzmq())


def fifo_allowed(priority: int) -> bool:
    """Whether a thread of this process may switch itself to SCHED_FIFO at `priority` (asked by a throw-away
    thread through `realtime_thread`: the caller's own scheduling is left alone)."""
    modes = []
    t = threading.Thread(target=lambda: modes.append(realtime_thread(priority)), name="servo-hil-fifo-probe")
    t.start()
    t.join()
    return modes == ["SCHED_FIFO"]


def realtime_context(priority: int) -> zmq.Context:
    """A ZeroMQ context whose I/O threads run SCHED_FIFO at `priority` (1..99) when the process may, else a
    plain one. Each state message crosses the publisher's I/O thread: at normal priority it waits behind
    every busy process for its wake-up, as the loop would without SCHED_FIFO. libzmq aborts the process when
    it cannot apply the policy (thread.cpp, posix_assert), so it is asked only after a probe succeeded."""
    context = zmq.Context()
    if priority > 0 and fifo_allowed(priority):
        context.set(zmq.THREAD_SCHED_POLICY, os.SCHED_FIFO)
        context.set(zmq.THREAD_PRIORITY, priority)
    return context


class StatePublisher(threading.Thread):
    """Drains the loop's sample ring and publishes it; raises fault events on flag changes."""

    def __init__(self, live: LiveRig, endpoint: str, context: zmq.Context, fifo_priority: int = 0,
                 curve: tuple[bytes, bytes] | None = None, framing: str = "multipart", tap_every: int = 0):
        super().__init__(name="servo-hil-pub", daemon=True)
        self.live = live
        self.fifo_priority = fifo_priority   # SCHED_FIFO priority of this thread (0 = do not try)
        self.rt_mode: str | None = None
        self.sock = context.socket(zmq.PUB)
        self.sock.setsockopt(zmq.SNDHWM, 200_000)
        self.sock.setsockopt(zmq.LINGER, 500)
        curve_server(self.sock, curve)
        self.sock.bind(endpoint)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.tap_every = tap_every
        self.tap: zmq.Socket | None = None   # STATE_TAP (inproc needs no CURVE: it never leaves the process)
        if tap_every > 0:
            self.tap = context.socket(zmq.PUB)
            self.tap.setsockopt(zmq.SNDHWM, 200_000)
            self.tap.setsockopt(zmq.LINGER, 0)
            self.tap.bind(STATE_TAP)
        self.single_frame = framing == "single"
        self.topics = [single_frame_head(live.rig.name, n) if self.single_frame else f"{live.rig.name}/{n}".encode()
                       for n in live.names]
        self.flags = np.zeros(len(live.names), dtype=np.int64)   # fault flags last published (C updates)
        self._reported = [0] * len(live.names)                    # … and last reported as events
        self.published = 0
        self.error: str | None = None   # why run() ended, if not by stop()
        self._halt = threading.Event()
        # epoch time = monotonic time + this offset [ns] (both clocks read once, back to back)
        self._epoch_minus_monotonic_ns = time.time_ns() - time.monotonic_ns()
        self.robot = live.robot
        self._wait_s = 0.1   # how long a publish_pending call serves the stream: poses go out between calls
        if self.robot is not None:
            self._wait_s = min(0.1, live.rig.robot.pose_every / live.rig.loop.rate_hz)
        self.poses_sent = 0
        self._pose_copy = -1   # the number of the last copy of the poses sent (RobotEngine.poses_since)
        # a copy's t = tick·period: written to the period's decimals (0.57, not the float noise 0.5700000000000001)
        from servo_hil.offline.simulate import step_decimals

        self._t_decimals = step_decimals(1.0 / live.rig.loop.rate_hz)
        if self.robot is not None:
            self.robot.engine.publish_poses(live.rig.robot.pose_every)
            self._bodies = [self.robot.model.body(i).name for i in range(self.robot.model.nbody)]

    def stop(self) -> None:
        self._halt.set()

    def publish_pending(self, wait_s: float = 0.0) -> int:
        """Publish what the loop has produced, then (for up to `wait_s` [s]) each tick's samples as they come,
        until a fault flag changes (its events are raised here); the messages sent."""
        live = self.live
        # encoded, sent and waited for by C code without the GIL (`RealtimeLoop.publish`): Python here only
        # when a fault flag changes or wait_s has passed
        sent, changes = live.loop.publish(self.sock.underlying, self.topics, live.bus_flag_bits,
                                          self._epoch_minus_monotonic_ns, live.rig.loop.lockstep, self.flags, wait_s,
                                          self.single_frame, 0 if self.tap is None else self.tap.underlying,
                                          max(self.tap_every, 1))
        for j, flags, t, temp in changes:
            self._flags_changed(j, flags, t, None if temp != temp else temp)
        self.published += sent
        return sent

    def publish_poses(self) -> None:
        """Every copy of the robot's bodies' poses made since the last call, on `<rig>/poses` in the rig's framing
        (module docstring)."""
        copies = self.robot.engine.poses_since(self._pose_copy)
        if not copies:
            return
        rate_hz, lockstep = self.live.rig.loop.rate_hz, self.live.rig.loop.lockstep
        now, tick_now = time.time(), self.robot.engine.ticks
        for number, tick, t, poses in copies:
            self._pose_copy = number
            payload = {"seq": number, "t": t if self._t_decimals is None else round(t, self._t_decimals),
                       "tick": tick, "bodies": self._bodies,
                       "position": poses[:, :3].ravel().tolist(), "quaternion": poses[:, 3:].ravel().tolist()}
            # real time: the wall-clock time of the copy's tick, counted back from the engine's latest tick
            stamp = t if lockstep else now - (tick_now - tick) / rate_hz
            if self.single_frame:
                frames = [msgpack.packb({self.live.rig.name: {POSES_TOPIC: payload}, "timestamp": float(stamp)})]
            else:
                frames = [poses_topic(self.live.rig.name), msgpack.packb(payload), f"{stamp:.9f}".encode()]
            self.sock.send_multipart(frames)
            if self.tap is not None:
                self.tap.send_multipart(frames)
            self.poses_sent += 1

    def _flags_changed(self, j: int, flags: int, t: float, temperature: float | None) -> None:
        live = self.live
        before = self._reported[j]
        raised, cleared = flags & ~before, before & ~flags
        self._reported[j] = flags
        for kind, bits in (("fault_raised", raised), ("fault_cleared", cleared)):
            if bits:
                live.emit({"type": kind, "actuator": live.names[j], "faults": fault_names(bits), "t": t})
        for reason in ("overheat", "overload"):
            if raised & FAULT_BITS[reason] & live.params[j]["shutdown_mask"]:
                live.emit({"type": "shutdown", "actuator": live.names[j], "reason": reason,
                           "temperature": temperature, "t": t})

    def run(self) -> None:
        # woken by the loop every published tick: at normal priority that wake-up waits behind other processes
        self.rt_mode = realtime_thread(self.fifo_priority)
        try:
            while not self._halt.is_set():
                if self.live.stopping.is_set():
                    # loop.publish returns at once from now on: spinning on it at SCHED_FIFO would starve the
                    # loop's own exit and the main thread (sched(7): FIFO runs until it blocks); wait for stop()
                    self._halt.wait()
                    break
                self.publish_pending(wait_s=self._wait_s)
                if self.robot is not None:
                    self.publish_poses()
            self.publish_pending()  # flush what the loop produced before it stopped
        except BaseException as exc:  # seen by the daemon's watchdog, which stops the daemon with this reason
            self.error = f"{type(exc).__name__}: {shown(str(exc))}"
            raise
        finally:
            self.sock.close()


def poses_topic(rig: str) -> bytes:
    """The topic of a robot rig's poses messages (module docstring)."""
    return f"{rig}/{POSES_TOPIC}".encode()


def single_frame_head(rig: str, joint: str) -> bytes:
    """The msgpack bytes that open a "single" frame of `joint`: a 2-entry map whose first key is the rig name,
    whose value is a 1-entry map keyed by the joint; the publisher appends the state map, then `"timestamp"`
    and its float64 value (the map's second entry)."""
    return b"\x82" + msgpack.packb(rig) + b"\x81" + msgpack.packb(joint)


def decode_state(frames: list[bytes]) -> tuple[str, int, dict]:
    """(joint, timestamp [ns], state map) of one state-stream message of either framing."""
    if len(frames) == 3:
        topic, payload, stamp = frames
        return topic.decode().rpartition("/")[2], stamp_ns(stamp), msgpack.unpackb(payload)
    if len(frames) != 1:
        raise ValueError(f"a state message has 1 or 3 frames, got {len(frames)}")
    message = msgpack.unpackb(frames[0])
    stamp = message.pop("timestamp")
    ((_rig, joints),) = message.items()
    ((joint, state),) = joints.items()
    return joint, round(stamp * 1e9), state


def stamp_ns(stamp: bytes) -> int:
    """The timestamp frame of a multipart message (ASCII seconds) in integer nanoseconds, without rounding."""
    seconds, _, fraction = stamp.decode().partition(".")
    return int(seconds) * 10**9 + int(fraction.ljust(9, "0")[:9])


_SEQ_ENTRY = msgpack.packb("seq") + b"\xd3"   # the key and the int64 marker of the state map's first entry

StateSink = Callable[[str, int, dict], None]
"""Called with (joint, timestamp [ns], state map) of each message kept."""
PosesSink = Callable[[int, dict], None]
"""Called with (timestamp [ns], poses map) of each poses message of a robot rig."""


class StateSubscriber(threading.Thread):
    """Reads the daemon's state stream from its in-process tap (STATE_TAP) and hands one published tick in
    `every` to each sink (decimation by the message's `seq`, so every joint keeps the same ticks; each `every`
    is a multiple of the tap's), and every poses message of the rig `rig` to each of `poses_sinks`. `error` is
    set if a sink raised (the thread then ends and the daemon stops with that reason)."""

    def __init__(self, context: zmq.Context, sinks: list[tuple[int, StateSink]], rig: str,
                 poses_sinks: list[PosesSink] = ()):
        super().__init__(name="servo-hil-tap", daemon=True)
        self.sinks = sinks
        self.poses_topic = poses_topic(rig)
        self.poses_head = single_frame_head(rig, POSES_TOPIC)   # how a "single" poses frame starts
        self.poses_sinks = list(poses_sinks)
        self.sock = context.socket(zmq.SUB)
        self.sock.setsockopt(zmq.RCVHWM, 200_000)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(STATE_TAP)
        self.received = 0
        self.error: str | None = None
        self._halt = threading.Event()

    def stop(self) -> None:
        """End after handing on what the publisher has sent so far (call it after the publisher's stop)."""
        self._halt.set()

    def _deliver(self, frames: list[bytes]) -> None:
        self.received += 1
        # a robot rig's poses (its sinks are given exactly then: no actuator of a robot is named like them)
        if self.poses_sinks and (frames[0] == self.poses_topic
                                 or (len(frames) == 1 and frames[0].startswith(self.poses_head))):
            _, stamp, payload = decode_state(frames)
            for sink in self.poses_sinks:
                sink(stamp, payload)
            return
        # the map's first entry is "seq": int64 (publisher.pyx), found by a byte search so that the ticks no
        # sink keeps are not decoded
        payload = frames[len(frames) // 2]   # the map's frame in either framing
        at = payload.find(_SEQ_ENTRY)
        seq = int.from_bytes(payload[at + len(_SEQ_ENTRY):at + len(_SEQ_ENTRY) + 8], "big", signed=True)
        wanted = [sink for every, sink in self.sinks if seq % every == 0]
        if wanted:
            joint, stamp, state = decode_state(frames)
            for sink in wanted:
                sink(joint, stamp, state)

    def _drain(self) -> None:
        """Hand on every message queued (one wake-up per tick's batch, not per message)."""
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._deliver(frames)

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                if self.sock.poll(100):
                    self._drain()
            self._drain()   # inproc delivers at send: what the publisher flushed is queued here
        except BaseException as exc:  # seen by the daemon's watchdog, which stops the daemon with this reason
            self.error = f"{type(exc).__name__}: {shown(str(exc))}"
            raise
        finally:
            self.sock.close()


def decimation(rig_rate_hz: float, publish_every: int, rate_hz: float) -> int:
    """One published tick in N that gives at most `rate_hz` [Hz] from a loop at `rig_rate_hz` publishing one
    tick in `publish_every`."""
    return max(1, math.ceil(rig_rate_hz / publish_every / rate_hz - 1e-9))


class StateRecording:
    """The sink of `[record]`: each joint's state on `/sim/<joint>/state` of rotating MCAP files, as a
    mirror writes its simulated side (servo_hil.logs.mcap); with a robot's MuJoCo `model`, its bodies' poses too
    (`poses`, on `/sim/poses`)."""

    def __init__(self, directory: Path, segment_s: float, rig: str, model=None):
        from servo_hil.logs.mcap import SideBySideRecorder

        self.recorder = SideBySideRecorder(directory, prefix=rig, rotate_s=segment_s, metadata={"rig": rig})
        self.frames: list[str] = []
        if model is not None:
            from servo_hil.daemon.foxglove import body_frames

            self.frames = body_frames(model)

    def __call__(self, joint: str, stamp_ns: int, state: dict) -> None:
        self.recorder.state("sim", joint, stamp_ns, {k: state.get(k) for k in RECORDED_KEYS})

    def poses(self, stamp_ns: int, poses: dict) -> None:
        """One poses message of the state stream, as foxglove.FrameTransforms (servo_hil.daemon.foxglove)."""
        from servo_hil.daemon.foxglove import frame_transforms

        self.recorder.poses(stamp_ns, frame_transforms(stamp_ns, poses, self.frames))

    def close(self) -> None:
        self.recorder.close()


RECORDED_KEYS = ("position", "velocity", "current", "torque", "goal", "temperature", "voltage", "enable")
"""The state keys a `/sim/<joint>/state` message holds (servo_hil.logs.mcap.STATE_FIELDS, besides t)."""


# Limits on a command request: a command is a small map. libzmq drops a peer that sends a bigger message
# before it is buffered whole (ZMQ_MAXMSGSIZE, zmq_setsockopt(3)); msgpack refuses longer strings, binaries,
# arrays and maps than these while unpacking (msgpack.Unpacker's max_*_len), before allocating them.
MAX_REQUEST_BYTES = 64 * 1024
UNPACK_LIMITS = dict(max_str_len=4096, max_bin_len=4096, max_array_len=256, max_map_len=64, max_ext_len=0)
_ID_TYPES = (int, float, str, bool, type(None))


def unpack_request(raw: bytes):
    """A request's msgpack object, within UNPACK_LIMITS; CommandError naming what is wrong otherwise."""
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=True, **UNPACK_LIMITS)
    except Exception as exc:  # msgpack raises ValueError subclasses, TypeError (map keys), StackError
        raise CommandError(f"request is not a msgpack command within limits ({type(exc).__name__}: "
                           f"{shown(str(exc))})") from None


class CommandServer(threading.Thread):
    """REP socket answering msgpack commands with CommandSet.execute.

    One request is one message: whatever it holds or raises, it is answered (an error reply for anything
    refused or failing), a malformed or failing one is logged once at WARNING, every error reply is
    counted in `status` (`command_errors.zmq`), and the next request is served. `error` is set if the
    thread ends for any other reason (the daemon then stops).
    """

    def __init__(self, live: LiveRig, commands: CommandSet, endpoint: str, context: zmq.Context,
                 curve: tuple[bytes, bytes] | None = None):
        super().__init__(name="servo-hil-cmd", daemon=True)
        self.live = live
        self.command_set = commands
        self.sock = context.socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
        curve_server(self.sock, curve)
        self.sock.bind(endpoint)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.error: str | None = None
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def handle(self, frames: list[bytes]) -> dict:
        """The reply to one request (its frames); never raises."""
        cmd = None
        try:
            if len(frames) != 1:
                raise CommandError(f"a request is one msgpack frame, got {len(frames)} frames")
            cmd = unpack_request(frames[0])
            tag = {"id": cmd["id"]} if isinstance(cmd, dict) and isinstance(cmd.get("id", ()), _ID_TYPES) else {}
            try:
                return {"ok": True, **self.command_set.execute(cmd)} | tag
            except CommandError as exc:
                return {"ok": False, "error": str(exc)} | tag
        except Exception as exc:  # malformed input (or a bug): answered and logged, never the thread's end
            text = str(exc) if isinstance(exc, CommandError) else f"internal error ({type(exc).__name__})"
            log.warning("command socket: %s (request: %s)", text if isinstance(exc, CommandError)
                        else f"{type(exc).__name__}: {shown(str(exc))}", shown(cmd if cmd is not None else frames))
            return {"ok": False, "error": text}

    def _reply(self, reply: dict) -> bytes:
        try:
            return msgpack.packb(reply, default=str)
        except Exception as exc:  # a result msgpack cannot carry (a bug): still one error reply
            log.warning("command socket: reply not encodable: %s: %s", type(exc).__name__, shown(str(exc)))
            return msgpack.packb({"ok": False, "error": f"reply not encodable ({type(exc).__name__})"})

    def run(self) -> None:
        try:
            poller = zmq.Poller()
            poller.register(self.sock, zmq.POLLIN)
            while not self._halt.is_set():
                if not poller.poll(100):
                    continue
                # every frame of the request is read before the reply: a REP socket refuses to send while
                # frames of the request are left (EFSM)
                reply = self.handle(self.sock.recv_multipart())
                if not reply["ok"]:
                    self.live.command_errors["zmq"] += 1
                self.sock.send(self._reply(reply))
        except BaseException as exc:  # seen by the daemon's watchdog, which stops the daemon with this reason
            self.error = f"{type(exc).__name__}: {shown(str(exc))}"
            raise
        finally:
            self.sock.close()


def curve_server(sock: zmq.Socket, curve: tuple[bytes, bytes] | None) -> None:
    """Make `sock` a CURVE server with the key pair `curve` (public, secret; Z85) before it binds; None:
    plain. Which clients may connect is the context's authenticator's business (`curve_keys`)."""
    if curve is not None:
        sock.curve_publickey, sock.curve_secretkey = curve
        sock.curve_server = True


def curve_keys(cfg: ZmqConfig, context: zmq.Context, base: Path) -> tuple[tuple[bytes, bytes] | None, object]:
    """The daemon's CURVE key pair (public, secret) from `[zmq] curve_secret_key` and an authenticator (a
    started zmq.auth ThreadAuthenticator: stop() it before destroying `context`) admitting only the public
    keys in `curve_clients` (RFC 27 ZAP); (None, None) without CURVE. Relative paths are from `base`, the
    rig file's folder.
    Every endpoint of the rig that is not loopback without CURVE is reported at WARNING (allow_remote)."""
    if cfg.curve_secret_key is None:
        for endpoint in (cfg.pub, cfg.command):
            if not loopback(endpoint):
                log.warning("ZeroMQ %s is reachable from other machines without authentication ([zmq] "
                            "allow_remote = true): anyone who reaches it can command the rig", endpoint)
        return None, None
    from zmq.auth.thread import ThreadAuthenticator

    key_file, clients = base / cfg.curve_secret_key, base / cfg.curve_clients
    try:
        public, secret = zmq.auth.load_certificate(key_file)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"zmq.curve_secret_key: cannot read {str(key_file)!r}: {exc}") from None
    if secret is None:
        raise ConfigError(f"zmq.curve_secret_key: {str(key_file)!r} holds no secret key (give the .key_secret file)")
    if not clients.is_dir():
        raise ConfigError(f"zmq.curve_clients: {str(clients)!r} is not a folder of client public keys")
    auth = ThreadAuthenticator(context, log=logging.getLogger("servo-hil.zap"))
    auth.start()
    auth.configure_curve(domain="*", location=str(clients))
    return (public, secret), auth


def request(endpoint: str, cmd: dict, timeout_s: float = 2.0, context: zmq.Context | None = None) -> dict:
    """Send one command to a running daemon and return its reply; TimeoutError if none comes."""
    ctx = context or zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
    sock.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
    try:
        sock.connect(endpoint)
        sock.send(msgpack.packb(cmd))
        try:
            return msgpack.unpackb(sock.recv(), raw=False, strict_map_key=False)
        except zmq.Again:
            raise TimeoutError(f"no reply from {endpoint} within {timeout_s} s (is the daemon running?)") from None
    finally:
        sock.close()
