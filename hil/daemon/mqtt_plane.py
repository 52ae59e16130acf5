"""MQTT control plane (aiomqtt — the maintained successor of asyncio-mqtt).

Topics under `servo-hil/<rig>/`:

| topic | direction | retained | payload |
|---|---|---|---|
| `online` | out | yes | `online`; `offline` as last will and when the daemon stops |
| `status` | out | yes | JSON every `status_period_s`: rate, overruns, lateness, steal, temperatures, faults |
| `events` | out | no | JSON: faults raised/cleared, shutdowns, mode changes, command results and errors |
| `cmd/<command>` | in | – | JSON map of arguments, e.g. `cmd/set_goal` `{"actuator": "shoulder", "value": 0.5}` |

With no broker URL the daemon starts an embedded amqtt broker bound to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import ssl
import threading
from urllib.parse import urlparse

import aiomqtt

from hil.daemon.arguments import CommandError
from hil.daemon.live_rig import LiveRig
from hil.params.config_file import ConfigError
from hil.rig import MqttConfig

log = logging.getLogger("servo-hil")
MAX_PAYLOAD = 64 * 1024


def _json(obj) -> bytes:
    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(obj), separators=(",", ":")).encode()


def broker_address(cfg: MqttConfig) -> tuple[str, int, bool]:
    """(host, port, tls) of the configured broker; the embedded one when no URL is given."""
    if not cfg.url:
        return "127.0.0.1", cfg.embedded_port, False
    u = urlparse(cfg.url)
    if u.scheme not in ("mqtt", "mqtts", "tcp", "ssl") or not u.hostname:
        raise ConfigError(f"mqtt.url: expected mqtt://host[:port] or mqtts://host[:port], got {cfg.url!r}")
    tls = u.scheme in ("mqtts", "ssl")
    return u.hostname, u.port or (8883 if tls else 1883), tls


class MqttPlane(threading.Thread):
    """Runs the MQTT client (and the embedded broker) in its own asyncio thread."""

    def __init__(self, live: LiveRig, cfg: MqttConfig):
        super().__init__(name="servo-hil-mqtt", daemon=True)
        self.live = live
        self.cfg = cfg
        self.prefix = f"servo-hil/{live.rig.name}"
        self.host, self.port, self.tls = broker_address(cfg)
        self.connected = threading.Event()
        self.failed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: asyncio.Queue | None = None
        self._stopping: asyncio.Event | None = None
        self._broker = None
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
        from amqtt.broker import Broker

        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{self.port}"}},
            "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
        }
        self._broker = Broker(config)
        await self._broker.start()
        log.info("embedded MQTT broker on 127.0.0.1:%d", self.port)

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
        await client.subscribe(f"{self.prefix}/cmd/#", qos=1)
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
            await self._execute(name, bytes(message.payload or b""))

    async def _execute(self, name: str, payload: bytes) -> None:
        event: dict = {"type": "command", "command": name}
        try:
            if len(payload) > MAX_PAYLOAD:
                raise CommandError(f"{name}: payload larger than {MAX_PAYLOAD} bytes")
            try:
                args = json.loads(payload) if payload.strip() else {}
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise CommandError(f"{name}: payload is not JSON: {exc}") from None
            if not isinstance(args, dict):
                raise CommandError(f"{name}: payload must be a JSON object")
            if "id" in args:
                event["id"] = args["id"]
            if not name or "/" in name:
                raise CommandError(f"unknown command {name!r} (known: {', '.join(self.live.commands())})")
            result = await asyncio.to_thread(self.live.execute, args | {"cmd": name})
            event |= {"ok": True, "result": result}
        except CommandError as exc:
            event |= {"type": "command_error", "ok": False, "error": str(exc)}
            log.warning("MQTT command refused: %s", exc)
        except Exception as exc:  # a malformed message must never end the control plane
            log.exception("MQTT command %r failed", name)
            event |= {"type": "command_error", "ok": False, "error": f"{name}: internal error ({exc})"}
        self._on_event(event)
