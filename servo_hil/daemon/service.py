"""The daemon: loads a rig, runs its loop, ZeroMQ and MQTT, and stops cleanly on SIGTERM/SIGINT."""

from __future__ import annotations

import faulthandler
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from drivers.wire.server import BusServer
from hil.loop.realtime import lock_memory
from hil.params.config_file import ConfigError, validate
from servo_hil.daemon.commands import CommandSet
from servo_hil.daemon.live_rig import LiveRig
from servo_hil.daemon.mqtt_plane import MqttPlane, check_embedded_port
from servo_hil.daemon.port_locks import PortLocks, lock_ports
from servo_hil.daemon.zmq_io import (
    CommandServer,
    StatePublisher,
    StateRecording,
    StateSubscriber,
    curve_keys,
    decimation,
    realtime_context,
)
from servo_hil.rig import (
    BusConfig,
    ConsoleConfig,
    FoxgloveConfig,
    RecordConfig,
    Rig,
    load_rig,
    load_robot_rig,
    read_rig,
)
from servo_hil.wiring import open_buses

log = logging.getLogger("servo-hil")

# How long `servo-hil run` may take to stop and exit before it dumps its threads' stacks and exits 1 [s]: it
# stops within a second; docker and podman send SIGKILL 10 s after SIGTERM (`docker stop`'s default grace period).
STOP_WATCHDOG_S = 8.0


ConsoleFactory = Callable[["Daemon", ConsoleConfig], Any]
"""What builds the web console of a rig with [console] (servo_hil.console.server.Console): started with the viewers."""


class DaemonFailure(RuntimeError):
    """A thread the daemon needs has ended: the daemon stops with exit status 1 and this one-line reason."""


class Daemon:
    """Everything `servo-hil run` starts, in start order; `stop()` reverses it."""

    def __init__(self, rig_path: str | Path, mqtt: bool | None = None, ports: list[str] = (),
                 real: list[str] = (), record: str | None = None, record_segment_s: float | None = None,
                 console: bool = False, console_factory: ConsoleFactory | None = None):
        """`console_factory` builds the web console of a rig with [console] (the application passes
        servo_hil.console.server.Console: the daemon imports no console)."""
        self.console_factory = console_factory
        self.robot = None   # a robot rig: its actuators turn the hinges of a MuJoCo model (docs/robots.md)
        if read_rig(rig_path).robot is not None:
            self.rig, self.specs, self.robot = load_robot_rig(rig_path)
            kernel = self.robot.kernel
        else:
            self.rig, self.specs, kernel = load_rig(rig_path)
        self.rig_dir = Path(rig_path).parent   # relative paths in the rig are from its folder
        if console and self.rig.console is None:   # `run --console`: the web console at its defaults
            self.rig = self.rig.model_copy(update={"console": ConsoleConfig()})
        if self.rig.console is not None and console_factory is None:
            raise ConfigError(f"{rig_path}: console: this program serves no web console (`servo-hil run` does)")
        self.ports = _bus_ports(self.rig, ports, "--port")
        for name, device in _bus_ports(self.rig, real, "--real").items():   # `servo-hil mirror`
            k = next(k for k, b in enumerate(self.rig.buses) if b.name == name)
            bus = self.rig.buses[k]
            self.rig.buses[k] = validate(BusConfig, bus.model_dump() | {"real": device}, f"--real {device}")
        if record is not None:
            mirrored = [k for k, b in enumerate(self.rig.buses) if b.real]
            if not mirrored:
                raise ConfigError(f"{rig_path}: --record needs a mirrored bus: give --real or real = ... in the rig")
            for k in mirrored:
                self.rig.buses[k] = self.rig.buses[k].model_copy(update={"record": record})
        if record_segment_s is not None:
            for k, bus in enumerate(self.rig.buses):
                self.rig.buses[k] = validate(BusConfig, bus.model_dump() | {"record_segment_s": record_segment_s},
                                             f"--record-segment-s {record_segment_s}")
        self.buses: list[BusServer] = []
        self.live = LiveRig(self.rig, self.specs, kernel, self.robot)
        self.command_set = CommandSet(self.live)   # what the command socket, MQTT and the console execute
        self.context = realtime_context(self.rig.loop.io_priority)
        self.publisher: StatePublisher | None = None
        self.commands: CommandServer | None = None
        self.mqtt_enabled = self.rig.mqtt.enabled if mqtt is None else mqtt
        self.mqtt: MqttPlane | None = None
        self.authenticator = None   # the ZAP handler of the CURVE sockets, when [zmq] has keys
        self.tap: StateSubscriber | None = None      # reads the state stream for [record] and [foxglove]
        self.recording: StateRecording | None = None
        self.foxglove = None                          # servo_hil.daemon.foxglove.FoxgloveBridge, with [foxglove]
        self.console = None                           # servo_hil.console.server.Console, with [console]
        self.started = False        # start() completed: only then is a stop worth a log line
        self.port_locks: PortLocks | None = None      # this daemon's hold on its rig's ports

    def start(self) -> None:
        rig = self.rig
        if rig.loop.mlockall and (err := lock_memory()):
            log.warning("mlockall failed (errno %d): memory may be paged; continuing", err)
        # another servo-hil on this rig's ports is said at once, naming it (port_locks), before any bind fails
        self.port_locks = lock_ports(rig, self.mqtt_enabled)
        # sockets first: a port already in use fails before the loop starts
        curve, self.authenticator = curve_keys(rig.zmq, self.context, self.rig_dir)
        if self.mqtt_enabled and rig.mqtt.allow_remote and not rig.mqtt.url and rig.mqtt.username is None:
            log.warning("embedded MQTT broker on %s without credentials ([mqtt] allow_remote = true): anyone "
                        "who reaches it can command the rig", rig.mqtt.embedded_host)
        viewers = [v for v in (rig.foxglove, rig.record, rig.console) if v is not None]
        try:
            self.publisher = StatePublisher(self.live, rig.zmq.pub, self.context, rig.loop.io_priority, curve,
                                            rig.zmq.framing, math.gcd(*(self._every(v) for v in viewers)))
        except zmq.ZMQError as exc:
            raise zmq.ZMQError(exc.errno, f"{rig.zmq.pub}: {exc}") from None
        try:
            self.commands = CommandServer(self.live, self.command_set, rig.zmq.command, self.context, curve)
        except zmq.ZMQError as exc:
            raise zmq.ZMQError(exc.errno, f"{rig.zmq.command}: {exc}") from None
        if self.mqtt_enabled:   # after the ZeroMQ binds: a busy ZeroMQ port is not reported as MQTT's
            check_embedded_port(rig.mqtt)
        if viewers:
            self._start_viewers()
        self.live.start()
        self.publisher.start()
        self.commands.start()
        deadline = time.monotonic() + 1.0
        while self.live.loop.telemetry()["rt_mode"] == "starting" and time.monotonic() < deadline:
            time.sleep(1e-3)
        mode = self.live.loop.telemetry()["rt_mode"]
        if mode != "SCHED_FIFO" and rig.loop.fifo_priority > 0:
            log.warning("SCHED_FIFO priority %d refused; loop runs as %s (give the process CAP_SYS_NICE / "
                        "rtprio to get FIFO)", rig.loop.fifo_priority, mode)
        # The state publisher (woken by the loop each tick) and the bus threads (woken by a packet) must
        # get the GIL within tens of µs, not after the default 5 ms a busy thread (MQTT, broker) may keep it.
        sys.setswitchinterval(5e-5)
        for cfg, bus in zip(rig.buses, open_buses(self.live, self.ports), strict=True):
            self.buses.append(bus)
            self.live.bus_errors[cfg.name] = lambda bus=bus: bus.errors_isolated   # inputs isolated, for `status`
            if hasattr(bus, "wire_stats"):   # a Dynamixel bus: its parser's and its paced replies' counters
                self.live.bus_wire[cfg.name] = lambda bus=bus: bus.wire_stats
            bus.start()
            print(f"servo-hil: {cfg.protocol} bus {cfg.name!r} at {bus.path} ({bus.summary})", flush=True)
        if self.mqtt_enabled:
            self.mqtt = MqttPlane(self.live, self.command_set, rig.mqtt)
            self.mqtt.start()  # connects in the background; run_until_signal reports how it went
        log.info("rig %r: %d actuators at %g Hz%s, loop %s", rig.name, len(self.live.names), rig.loop.rate_hz,
                 " (lock-step)" if rig.loop.lockstep else "", mode)
        log.info("joint state: ZeroMQ PUB %s; commands: ZeroMQ REP %s", self.publisher.endpoint, self.commands.endpoint)
        self.started = True

    def _every(self, viewer: FoxgloveConfig | RecordConfig | ConsoleConfig) -> int:
        """The viewer's decimation: one published tick in N."""
        return decimation(self.rig.loop.rate_hz, self.rig.zmq.publish_every, viewer.rate_hz)

    def _start_viewers(self) -> None:
        """The state stream's in-process readers: the MCAP recording of [record], the Foxglove server."""
        rig, sinks = self.rig, []
        if rig.foxglove is not None:
            from servo_hil.daemon.foxglove import FoxgloveBridge

            self.foxglove = FoxgloveBridge(self.live, rig.foxglove)
            sinks.append((self._every(rig.foxglove), self.foxglove.state))
            log.info("Foxglove WebSocket server: ws://%s:%d", rig.foxglove.bind, self.foxglove.port)
        if rig.record is not None:
            self.recording = StateRecording(self.rig_dir / rig.record.dir, rig.record.segment_s, rig.name,
                                            self.robot.model if self.robot is not None else None)
            sinks.append((self._every(rig.record), self.recording))
            log.info("recording the state stream to %s", self.rig_dir / rig.record.dir)
        if rig.console is not None:   # the web console (docs/console.md): state at a UI rate
            self.console = self.console_factory(self, rig.console)
            self.console.start()
            sinks.append((self._every(rig.console), self.console.state))
            print(f"servo-hil: console at {self.console.url}", flush=True)
        poses = [v.poses for v in (self.foxglove, self.recording, self.console)
                 if v is not None] if self.robot is not None else []
        self.tap = StateSubscriber(self.context, sinks, rig.name, poses)
        self.tap.start()

    def stop(self) -> None:
        """Stop the loop, flush the state stream, publish `offline`, close the sockets (well within 2 s).

        Safe after a start that failed half-way (e.g. a port in use): parts never started are closed.
        """
        for bus in self.buses:
            bus.stop()
        self.live.stop()
        parts = [p for p in (self.publisher, self.commands) if p is not None]
        for part in parts:
            part.stop()
        for part in parts:
            if part.ident is not None:
                part.join(1.0)
            else:
                part.sock.close(0)
        if self.tap is not None:   # after the publisher's flush: the tap hands on its last messages
            self.tap.stop()
            self.tap.join(2.0)
        for viewer in (self.recording, self.foxglove, self.console):
            if viewer is not None:
                viewer.close()
        if self.mqtt is not None and self.mqtt.ident is not None:
            self.mqtt.stop(1.0)
        if self.authenticator is not None:
            self.authenticator.stop()
        self.context.destroy(linger=0)
        if self.port_locks is not None:
            self.port_locks.release()
        if self.started:   # a start that failed half-way (a bad bus setting) ends with its error alone
            log.info("stopped")

    def failure(self) -> str | None:
        """Why the daemon cannot go on (a thread it needs has ended), or None while every one runs. A daemon
        without its loop, a bus, its state stream or its command socket would look alive and serve nothing."""
        if not self.live.running:
            return "the real-time loop thread ended unexpectedly"
        for bus in self.buses:
            if bus.error is not None:
                return f"bus {bus.name} failed: {bus.error}"
        for part, what in ((self.commands, "command socket"), (self.publisher, "state publisher"),
                           (self.tap, "recorder / Foxglove reader")):
            if part is not None and part.ident is not None and not part.is_alive():
                return f"the {what} thread ended: {part.error or 'no reason given'}"
        return None

    def run_until_signal(self, stop_watchdog_s: float | None = None) -> None:
        """Start, serve until SIGTERM/SIGINT or a failure, stop. With `stop_watchdog_s`, a stop (and the process's
        exit after it) that takes longer writes every thread's stack to stderr and ends the process with status 1
        (`faulthandler.dump_traceback_later`): a hung daemon says where it hangs instead of waiting for SIGKILL."""
        stop = threading.Event()

        def handler(signum, _frame):
            log.info("%s received, stopping", signal.Signals(signum).name)
            stop.set()

        old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
        warn_at = time.monotonic() + 5.0
        try:
            self.start()
            while not stop.wait(0.1):
                if reason := self.failure():
                    raise DaemonFailure(reason)
                if self.mqtt is not None:
                    if self.mqtt.failed:
                        # a setting it cannot use (a busy port, a bad URL) is the rig's: exit 2; anything else a
                        # failure of the running daemon: exit 1
                        kind = ConfigError if isinstance(self.mqtt.failed, ConfigError) else DaemonFailure
                        raise kind(f"MQTT control plane: {self.mqtt.failed}")
                    if warn_at and time.monotonic() > warn_at:
                        warn_at = 0.0
                        if not self.mqtt.connected.is_set():
                            log.warning("MQTT broker %s:%d not reachable yet; will keep retrying",
                                        self.mqtt.host, self.mqtt.port)
        finally:
            if stop_watchdog_s:
                faulthandler.dump_traceback_later(stop_watchdog_s, exit=True)
            self.stop()
            for s, h in old.items():
                signal.signal(s, h)


def _bus_ports(rig: Rig, ports: list[str], option: str) -> dict[str, str]:
    """`--port PATH` (a rig with one bus) or `--port BUS=PATH` → {bus name: path} (also --real). An
    etherban server has no port (it binds `bind`): `--port` does not count or accept it."""
    names = [b.name for b in rig.buses if b.protocol != "etherban" or option != "--port"]
    out: dict[str, str] = {}
    for arg in ports:
        name, sep, path = arg.partition("=")
        if not sep:
            if len(names) != 1:
                raise ConfigError(f"{option} {arg}: the rig has {len(names)} buses; use {option} BUS=PATH "
                                  f"(buses: {', '.join(names) or 'none'})")
            name, path = names[0], arg
        if name not in names:
            raise ConfigError(f"{option} {arg}: no bus named {name!r} (buses: {', '.join(names) or 'none'})")
        out[name] = path
    return out


def serve(rig: Path, mqtt: bool | None, ports: list[str], log_level: str, real: list[str] = (),
          record: str | None = None, record_segment_s: float | None = None, console: bool = False,
          console_factory: ConsoleFactory | None = None) -> None:
    """`servo-hil run` / `servo-hil mirror`: log to stderr, run the daemon of `rig` until SIGTERM/SIGINT."""
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s servo-hil %(levelname)s %(message)s")
    logging.getLogger("amqtt").setLevel(logging.WARNING)
    logging.getLogger("transitions").setLevel(logging.WARNING)
    daemon = Daemon(rig, mqtt=mqtt, ports=ports, real=list(real), record=record, record_segment_s=record_segment_s,
                    console=console, console_factory=console_factory)
    try:
        daemon.run_until_signal(STOP_WATCHDOG_S)
    except zmq.ZMQError as exc:
        raise ConfigError(f"{rig}: cannot open a ZeroMQ endpoint: {exc}") from None
    except DaemonFailure as exc:
        print(f"servo-hil: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
