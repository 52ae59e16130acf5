"""MQTT control plane (aiomqtt, the maintained successor of asyncio-mqtt).

Retained `online` and `status`, `events`, and `cmd/<command>` under `servo-hil/<rig>/`, with an embedded amqtt
broker when the rig gives no URL; commands are taken at QoS 0 and rate-limited. Topics, limits and
credentials: docs/configuration.md, MQTT topics, and docs/commands.md, MQTT.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import math
import os
import socket
import ssl
import threading
import time
from urllib.parse import urlparse

import aiomqtt

from hil.params.config_file import ConfigError
from servo_hil.daemon.arguments import CommandError, shown
from servo_hil.daemon.commands import CommandSet
from servo_hil.daemon.live_rig import LiveRig
from servo_hil.rig import MqttConfig

log = logging.getLogger("servo-hil")
MAX_PAYLOAD = 64 * 1024                # a command's JSON [bytes]
MAX_PACKET = MAX_PAYLOAD + 1024        # the largest packet the embedded broker takes [bytes]: JSON and topic


def _json(obj) -> bytes:
    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    # a value JSON has no type for goes out as its text: one event must not end the events task (and the plane)
    return json.dumps(clean(obj), separators=(",", ":"), default=str).encode()


def check_embedded_port(cfg: MqttConfig) -> None:
    """ConfigError (one line saying what to do) if the embedded broker's port is taken, e.g. by a system
    mosquitto on 1883; nothing when the rig names a broker URL."""
    if cfg.url:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as asyncio's server binds it
        try:
            s.bind((cfg.embedded_host, cfg.embedded_port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise ConfigError(f"mqtt.embedded_host = {cfg.embedded_host!r}: cannot bind: {exc.strerror}") from None
            raise ConfigError(
                f"mqtt: port {cfg.embedded_port} on {cfg.embedded_host} is in use (another MQTT broker?): use that "
                f'broker with [mqtt] url = "mqtt://{cfg.embedded_host}:{cfg.embedded_port}", pick a free port with '
                "[mqtt] embedded_port = ..., or run without MQTT (--no-mqtt)") from None


def broker_address(cfg: MqttConfig) -> tuple[str, int, bool]:
    """(host, port, tls) of the configured broker; the embedded one when no URL is given."""
    if not cfg.url:
        host = "127.0.0.1" if cfg.embedded_host in ("0.0.0.0", "") else cfg.embedded_host
        return host, cfg.embedded_port, False
    u = urlparse(cfg.url)
    if u.scheme not in ("mqtt", "mqtts", "tcp", "ssl") or not u.hostname:
        raise ConfigError(f"mqtt.url: expected mqtt://host[:port] or mqtts://host[:port], got {cfg.url!r}")
    tls = u.scheme in ("mqtts", "ssl")
    return u.hostname, u.port or (8883 if tls else 1883), tls


class MqttPlane(threading.Thread):
    """Runs the MQTT client (and the embedded broker) in its own asyncio thread."""

    def __init__(self, live: LiveRig, commands: CommandSet, cfg: MqttConfig):
        super().__init__(name="servo-hil-mqtt", daemon=True)
        self.live = live
        self.command_set = commands
        self.cfg = cfg
        self.prefix = f"servo-hil/{live.rig.name}"
        self.host, self.port, self.tls = broker_address(cfg)
        self.connected = threading.Event()
        self.failed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: asyncio.Queue | None = None
        self._stopping: asyncio.Event | None = None
        self._broker = None
        self.dropped = 0                 # commands dropped by the rate limit (also in status)
        self._flooding = False           # a drop has been reported and the flood has not ended yet
        self._last_drop = 0.0            # time.monotonic() of the last drop [s]
        self._tokens = float(cfg.max_commands_per_s)
        self._refilled = time.monotonic()
        live.listeners.append(self._on_event)

    # ------------------------------------------------------------------ thread-safe entry points
    def _on_event(self, event: dict) -> None:
        if self._loop is not None and self._events is not None:
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)

    def stop(self, timeout: float = 1.5) -> None:
        if self._loop is not None and self._stopping is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stopping.set)
        self.join(timeout)

    # ------------------------------------------------------------------ asyncio side
    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by the daemon, which decides what to do
            self.failed = exc
            self.connected.set()
            log.error("MQTT plane stopped: %s", exc)

    async def _start_embedded_broker(self) -> None:
        from servo_hil.daemon.embedded_broker import EmbeddedBroker  # amqtt: only when it is used

        cfg = self.cfg
        if cfg.username is not None or cfg.password is not None:
            auth = {"servo_hil.daemon.embedded_broker.RigCredentials": {"username": cfg.username or "",
                                                                  "password": cfg.password or ""}}
        else:
            auth = {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}}
        config = {"listeners": {"default": {"type": "tcp", "bind": f"{cfg.embedded_host}:{self.port}"}},
                  "plugins": auth}
        self._broker = EmbeddedBroker(config, MAX_PACKET, lambda n: self._oversize(n, MAX_PACKET))
        await self._broker.start()
        log.info("embedded MQTT broker on %s:%d (%s)", cfg.embedded_host, self.port,
                 "anonymous clients" if "amqtt.plugins.authentication.AnonymousAuthPlugin" in auth
                 else "the rig's credentials only")

    def _oversize(self, n: int, limit: int) -> None:
        self.live.command_errors["mqtt"] += 1
        log.warning("embedded MQTT broker: dropped a client sending a %d-byte packet (limit %d)", n, limit)

    def _client(self) -> aiomqtt.Client:
        tls_params = None
        if self.tls or self.cfg.tls_ca or self.cfg.tls_cert:
            tls_params = aiomqtt.TLSParameters(ca_certs=self.cfg.tls_ca, certfile=self.cfg.tls_cert,
                                               keyfile=self.cfg.tls_key, cert_reqs=ssl.CERT_REQUIRED)
        return aiomqtt.Client(
            self.host, self.port, username=self.cfg.username, password=self.cfg.password,
            identifier=f"servo-hil-{self.live.rig.name}-{os.getpid()}",
            will=aiomqtt.Will(f"{self.prefix}/online", b"offline", qos=1, retain=True),
            tls_params=tls_params, tls_insecure=self.cfg.tls_insecure or None, keepalive=10,
            timeout=2.0)  # a broker that resets the connection mid-CONNECT is retried after 2 s, not 10

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._events = asyncio.Queue()
        self._stopping = asyncio.Event()
        if not self.cfg.url:
            await self._start_embedded_broker()
        try:
            while not self._stopping.is_set():
                try:
                    async with self._client() as client:
                        await self._session(client)
                except aiomqtt.MqttError as exc:
                    if self._stopping.is_set():
                        break
                    log.warning("MQTT broker %s:%d unreachable (%s); retrying in 1 s", self.host, self.port, exc)
                    self.connected.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopping.wait(), 1.0)
        finally:
            if self._broker is not None:
                await self._broker.shutdown()

    async def _session(self, client: aiomqtt.Client) -> None:
        # QoS 0: the broker does not wait for an acknowledgement of each command (a flood of commands would
        # be a flood of PUBACK timeouts); the commands that arrive are answered on `events`
        await client.subscribe(f"{self.prefix}/cmd/#", qos=0)
        await client.publish(f"{self.prefix}/online", b"online", qos=1, retain=True)
        await self._publish_status(client)
        self.connected.set()
        log.info("MQTT connected to %s:%d, topics under %s/", self.host, self.port, self.prefix)
        tasks = [asyncio.create_task(t) for t in (self._status_task(client), self._events_task(client),
                                                  self._commands_task(client))]
        stop = asyncio.create_task(self._stopping.wait())
        done, _ = await asyncio.wait([stop, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            t.cancel()
        for t in tasks:
            if t in done and t.exception():
                raise t.exception()
        if self._stopping.is_set():
            # orderly stop: last status, pending events, then `offline` (retained) replaces the will
            while not self._events.empty():
                await client.publish(f"{self.prefix}/events", _json(self._events.get_nowait()), qos=1)
            await self._publish_status(client)
            await client.publish(f"{self.prefix}/online", b"offline", qos=1, retain=True)

    async def _publish_status(self, client: aiomqtt.Client) -> None:
        await client.publish(f"{self.prefix}/status", _json(self.live.status()), qos=1, retain=True)

    async def _status_task(self, client: aiomqtt.Client) -> None:
        while True:
            await asyncio.sleep(self.cfg.status_period_s)
            await self._publish_status(client)

    async def _events_task(self, client: aiomqtt.Client) -> None:
        while True:
            event = await self._events.get()
            await client.publish(f"{self.prefix}/events", _json(event), qos=1)

    async def _commands_task(self, client: aiomqtt.Client) -> None:
        base = f"{self.prefix}/cmd/"
        async for message in client.messages:
            # only what the subscription asks for: amqtt 0.12 sends a connecting client the retained
            # messages of every client's subscriptions (another rig's status, a dashboard's), not a command
            if not message.topic.matches(base + "#"):
                log.debug("MQTT message on %s ignored: not under %s", message.topic, base)
                continue
            name = str(message.topic)[len(base):]
            if self._admit():
                await self._execute(name, bytes(message.payload or b""))

    def _admit(self) -> bool:
        """Token bucket of `max_commands_per_s` (burst: one second's worth): whether the next command runs.
        A drop is counted; a flood (drops less than a second apart) is reported once at WARNING when it
        starts, and its total at INFO when a command comes a second after its last drop."""
        now = time.monotonic()
        rate = float(self.cfg.max_commands_per_s)
        self._tokens = min(rate, self._tokens + (now - self._refilled) * rate)
        self._refilled = now
        if self._flooding and now - self._last_drop > 1.0:
            self._flooding = False
            log.info("MQTT command flood over: %d commands dropped so far", self.dropped)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        self.dropped += 1
        self._last_drop = now
        self.live.command_errors["mqtt_dropped"] += 1
        if not self._flooding:
            self._flooding = True
            log.warning("MQTT commands arrive faster than %g/s ([mqtt] max_commands_per_s): dropping the excess",
                        rate)
        return False

    async def _execute(self, name: str, payload: bytes) -> None:
        event: dict = {"type": "command", "command": name}
        try:
            if len(payload) > MAX_PAYLOAD:
                raise CommandError(f"{shown(name)}: payload larger than {MAX_PAYLOAD} bytes")
            try:
                args = json.loads(payload) if payload.strip() else {}
            except (ValueError, RecursionError) as exc:   # bad JSON or UTF-8, too many digits, too deep
                raise CommandError(f"{shown(name)}: payload is not JSON within limits ({type(exc).__name__}: "
                                   f"{shown(str(exc))})") from None
            if not isinstance(args, dict):
                raise CommandError(f"{shown(name)}: payload must be a JSON object")
            if "id" in args and isinstance(args["id"], int | float | str | bool | None):
                event["id"] = args.get("id")
            if not name or "/" in name:
                raise CommandError(f"unknown command {shown(name)} (known: {', '.join(self.command_set.names())})")
            result = await asyncio.to_thread(self.command_set.execute, args | {"cmd": name})
            event |= {"ok": True, "result": result}
        except Exception as exc:  # one message never ends the control plane: refused or failed, it is answered
            error = (str(exc) if isinstance(exc, CommandError)
                     else f"{shown(name)}: internal error ({type(exc).__name__})")
            event |= {"type": "command_error", "ok": False, "error": error}
            self.live.command_errors["mqtt"] += 1
            log.warning("MQTT command refused: %s", error if isinstance(exc, CommandError)
                        else f"{error}: {shown(str(exc))} (payload {shown(payload)})")
        self._on_event(event)
