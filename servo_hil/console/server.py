"""The web console's HTTP and WebSocket server (aiohttp), run by the daemon in a thread of its own.

State comes from the daemon's in-process state tap (`zmq_io.STATE_TAP`) already decimated to
`[console] rate_hz`; the server batches it and pushes it to every browser `PUSH_HZ` times a second, so the loop
and the publisher do no work for the console. Control-table edits run the servo's own Write (the entry point a
bus packet reaches, under the bus thread's lock), so its checks and error numbers are the servo's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import WSMsgType, web

from hil.params.config_file import ConfigError
from servo_hil.console.busmon import attach
from servo_hil.console.registers import RegisterError, read_table, servo_action, table_joints, write_item
from servo_hil.daemon.arguments import CommandError
from servo_hil.daemon.faults import FAULT_ARGUMENTS, KERNEL_FAULTS
from servo_hil.daemon.foxglove import body_frames
from servo_hil.daemon.set_param import settable_params
from servo_hil.daemon.zmq_io import StateRecording
from servo_hil.rig import ConsoleConfig, loopback

log = logging.getLogger("servo-hil")

STATIC = Path(__file__).parent / "static"
TOKEN_ENV = "SERVO_HIL_CONSOLE_TOKEN"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
PUSH_HZ = 30.0          # state batches sent to each browser per second (the plot redraws at this rate or more)
EVENTS_KEPT = 200       # events the console keeps for a page that opens later
PLOT_KEYS = ("position", "position_measured", "velocity", "torque", "current", "voltage", "temperature", "goal")
# the commands the console sends to LiveRig.execute (it validates every argument)
COMMANDS = frozenset({"set_goal", "set_enable", "set_mode", "set_param", "inject_fault", "clear_fault", "faults",
                      "pause", "resume", "reset", "status", "state", "hand"})
HAND_READ_S = 0.25      # how often the push reads the hands on the joints (the state stream does not carry them)
# web apps that open a recording by URL (?ds=remote-file&ds.url=…): the file route answers them with CORS
FOXGLOVE_ORIGINS = frozenset({"https://app.foxglove.dev", "https://embed.foxglove.dev"})
FILE_ROUTE = "/api/record/file/"


def console_token(cfg: ConsoleConfig) -> str | None:
    """The token requests must carry: $SERVO_HIL_CONSOLE_TOKEN, else `[console] token`, else none. A console
    reachable from other machines without one is refused (ConfigError naming the key)."""
    token = os.environ.get(TOKEN_ENV) or cfg.token
    if not loopback(cfg.bind) and not token:
        raise ConfigError(f"console: bind = {cfg.bind!r} is reachable from other machines: set [console] token "
                          f"(16 characters or more) or {TOKEN_ENV}")
    if token is not None and len(token) < 16:
        raise ConfigError(f"console: {TOKEN_ENV} must be 16 characters or more")
    return token


class Console:
    """The console of a running daemon: `state` and `poses` are state-tap sinks, events arrive as a LiveRig
    listener. `start()` binds (a port in use is a ConfigError), `close()` stops the server and its thread.
    `daemon` is the running servo_hil.daemon.service.Daemon (its live rig, bus servers, rig folder)."""

    def __init__(self, daemon, cfg: ConsoleConfig):
        self.daemon = daemon
        self.live = daemon.live
        self.cfg = cfg
        self.token = console_token(cfg)
        self.port = cfg.port
        self.latest: dict[str, dict] = {}
        self._pending: list[tuple[str, float, dict]] = []
        self._pending_lock = threading.Lock()
        self.events: deque[dict] = deque(maxlen=EVENTS_KEPT)
        self.sockets: set[web.WebSocketResponse] = set()
        self.recording = None            # zmq_io.StateRecording while a recording runs
        self.record_dir = daemon.rig_dir / cfg.record_dir
        self.loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None   # set in the server's loop: it ends
        self.pushed = 0                  # state batches sent (all browsers)
        self.packet_logs: dict | None = None   # bus name → busmon.PacketLog (None: a bus that has none)
        self._sending: set[asyncio.Future] = set()   # sends in flight (a task nobody holds may be collected)
        self.hands: dict[str, dict | None] = {}   # joint → its hand as the `state` command shows it
        self._hands_read = 0.0

    # ----------------------------------------------------------------- sinks (the tap's thread)
    def state(self, joint: str, stamp_ns: int, state: dict) -> None:
        with self._pending_lock:
            self._pending.append((joint, stamp_ns * 1e-9, state))
        rec = self.recording
        if rec is not None:
            rec(joint, stamp_ns, state)

    def poses(self, stamp_ns: int, poses: dict) -> None:
        self.latest_poses = {"t": stamp_ns * 1e-9, "bodies": poses.get("bodies"),
                             "position": list(poses["position"]), "quaternion": list(poses["quaternion"])}

    def event(self, event: dict) -> None:
        self.events.append(event)
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._broadcast, {"type": "event", "event": event})

    # ----------------------------------------------------------------- life cycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="servo-hil-console", daemon=True)
        self._thread.start()
        self._started.wait(10.0)
        if self._error is not None:
            raise ConfigError(f"console: cannot listen on {self.cfg.bind}:{self.cfg.port}: {self._error}")
        self.live.listeners.append(self.event)

    @property
    def url(self) -> str:
        host = f"[{self.cfg.bind}]" if ":" in self.cfg.bind else self.cfg.bind
        return f"http://{host}:{self.port}/"

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:   # reported by start() as the console's one-line error
            self._error = exc
            self._started.set()
        finally:
            self.loop.close()

    async def _serve(self) -> None:
        app = web.Application(middlewares=[self._guard], client_max_size=64 * 1024)
        routes = [
            web.get("/", self._index), web.get("/ws", self._ws),
            web.get("/api/overview", self._overview), web.get("/api/servo/{joint}", self._servo),
            web.post("/api/servo/{joint}/write", self._write), web.post("/api/servo/{joint}/{action}", self._action),
            web.post("/api/command", self._command), web.get("/api/faults", self._faults),
            web.get("/api/params/{joint}", self._params), web.get("/api/record", self._record_list),
            web.post("/api/record/start", self._record_start), web.post("/api/record/stop", self._record_stop),
            web.get("/api/record/file/{name}", self._record_file), web.get("/api/bus", self._bus),
            web.get("/api/robot", self._robot),
        ]
        app.add_routes(routes)
        app.router.add_static("/static/", STATIC)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.cfg.bind, self.cfg.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self._stop = asyncio.Event()
        self._started.set()
        pusher = asyncio.ensure_future(self._push())
        await self._stop.wait()
        pusher.cancel()
        for ws in list(self.sockets):
            await ws.close()
        await self._runner.cleanup()

    def close(self) -> None:
        if self.event in self.live.listeners:
            self.live.listeners.remove(self.event)
        if self._stop is not None and self._thread is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):   # the loop may have ended already
                self.loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(3.0)
        if self.recording is not None:
            self.recording.close()
            self.recording = None

    # ----------------------------------------------------------------- security
    def _origin_ok(self, request: web.Request) -> bool:
        """A browser's Origin must be this console's own (scheme, host and port as the request's Host): a page of
        another site cannot drive the rig through the user's browser (RFC 6455 §10.2)."""
        origin = request.headers.get("Origin")
        if origin is None:   # not a browser (a browser always sends it with a POST and a WebSocket handshake)
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.netloc == request.host

    @web.middleware
    async def _guard(self, request: web.Request, handler):
        if request.method == "OPTIONS" and request.path.startswith(FILE_ROUTE):
            return _preflight(request)   # a CORS preflight carries no credentials and reveals nothing
        if self.token is not None:
            given = (request.query.get("token") or request.headers.get("X-Console-Token")
                     or request.cookies.get("console_token") or "")
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return web.json_response({"ok": False, "error": "console token missing or wrong: open the console "
                                          "URL with ?token=…"}, status=401)
        elif urlsplit(f"//{request.host}").hostname not in LOOPBACK_NAMES:
            # without a token only a loopback Host is served: a DNS-rebound name cannot reach the rig
            return web.json_response({"ok": False, "error": f"Host {request.host!r} refused: open the console at "
                                      f"127.0.0.1 or localhost"}, status=403)
        if (request.method != "GET" or request.path == "/ws") and not self._origin_ok(request):
            return web.json_response({"ok": False, "error": "request refused: its Origin is not this console's"},
                                     status=403)
        response = await handler(request)
        if self.token is not None and request.query.get("token") and isinstance(response, web.Response):
            response.set_cookie("console_token", self.token, httponly=True, samesite="Strict")
        return response

    # ----------------------------------------------------------------- push
    def _broadcast(self, message: dict) -> None:
        text = json.dumps(message, default=_plain)
        for ws in list(self.sockets):
            if not ws.closed:
                task = asyncio.ensure_future(ws.send_str(text))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)

    async def _push(self) -> None:
        period = 1.0 / PUSH_HZ
        while True:
            await asyncio.sleep(period)
            with self._pending_lock:
                batch, self._pending = self._pending, []
            if not batch or not self.sockets:
                continue
            series: dict[str, dict[str, list]] = {}
            for joint, t, st in batch:
                cols = series.setdefault(joint, {"t": [], **{k: [] for k in PLOT_KEYS}})
                cols["t"].append(st.get("t", t))   # simulation time k·dt: the plot's x axis
                for k in PLOT_KEYS:
                    cols[k].append(st.get(k))
                self.latest[joint] = st
            if time.monotonic() - self._hands_read > HAND_READ_S:   # one snapshot of the loop's inputs
                self._hands_read = time.monotonic()
                self.hands = {j: s["hand"] for j, s in self.live.state().items()}
            latest = {j: {k: s.get(k) for k in ("position", "velocity", "temperature", "enable", "mode", "goal",
                                                  "fault_flags", "current", "torque")} | {"hand": self.hands.get(j)}
                      for j, s in self.latest.items()}
            message = {"type": "state", "series": series, "latest": latest, "stats": self.live.stats.status(
                self.live.rig.name, self.live.rig.loop.lockstep)}
            if self.daemon.robot is not None and getattr(self, "latest_poses", None):
                message["poses"] = self.latest_poses
            self.pushed += 1
            self._broadcast(message)

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=20.0)
        await ws.prepare(request)
        self.sockets.add(ws)
        await ws.send_str(json.dumps({"type": "hello", "events": list(self.events)}, default=_plain))
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:   # a command over the socket: the same path as POST /api/command
                    try:
                        reply = self._execute(json.loads(msg.data))
                    except (CommandError, ValueError) as exc:
                        reply = {"ok": False, "error": str(exc)}
                    await ws.send_str(json.dumps({"type": "reply", **reply}, default=_plain))
        finally:
            self.sockets.discard(ws)
        return ws

    # ----------------------------------------------------------------- pages and API
    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html")

    async def _ready(self) -> None:
        """Until the daemon has opened its buses (≤ 10 s): the console listens before they exist."""
        for _ in range(200):
            if self.daemon.started:
                if self.packet_logs is None:   # the bus monitor counts from the first request on
                    self.packet_logs = {cfg.name: attach(server) for server, cfg
                                        in zip(self.daemon.buses, self.live.rig.buses, strict=True)}
                return
            await asyncio.sleep(0.05)

    async def _overview(self, request: web.Request) -> web.Response:
        live, rig = self.live, self.live.rig
        await self._ready()
        buses = []
        for server, cfg in zip(self.daemon.buses, rig.buses, strict=True):
            ids = [a.id for a in rig.actuators if a.bus == cfg.name]
            buses.append({"name": cfg.name, "protocol": cfg.protocol, "path": server.path, "baud": cfg.baud,
                          "ids": ids, "joints": [a.joint for a in rig.actuators if a.bus == cfg.name]})
        actuators, tables = [], table_joints(self.daemon)
        for a in rig.actuators:
            actuators.append({"joint": a.joint, "catalog": a.catalog, "bus": a.bus, "id": a.id,
                              "table": tables.get(a.joint)})
        return _ok({"rig": rig.name, "rate_hz": rig.loop.rate_hz, "lockstep": rig.loop.lockstep,
                    "buses": buses, "actuators": actuators, "status": live.status(), "robot": live.robot is not None})

    async def _servo(self, request: web.Request) -> web.Response:
        await self._ready()
        try:
            return _ok(read_table(self.daemon, request.match_info["joint"]))
        except RegisterError as exc:
            return _error(str(exc), 404)

    async def _write(self, request: web.Request) -> web.Response:
        await self._ready()
        try:
            body = await _json(request)
            return _ok(write_item(self.daemon, request.match_info["joint"], body.get("name"), body.get("value")))
        except CommandError as exc:
            return _error(str(exc))

    async def _action(self, request: web.Request) -> web.Response:
        await self._ready()
        joint, action = request.match_info["joint"], request.match_info["action"]
        try:
            return _ok(servo_action(self.daemon, joint, action))
        except RegisterError as exc:
            return _error(str(exc))

    def _execute(self, cmd: Any) -> dict:
        if not isinstance(cmd, dict) or cmd.get("cmd") not in COMMANDS:
            raise CommandError(f"the console sends one of: {', '.join(sorted(COMMANDS))}")
        return {"ok": True, **self.daemon.command_set.execute(cmd)}

    async def _command(self, request: web.Request) -> web.Response:
        try:
            return _ok(self._execute(await _json(request)))
        except CommandError as exc:
            return _error(str(exc))

    async def _faults(self, request: web.Request) -> web.Response:
        catalog = [{"fault": f, "kind": "kernel" if f in KERNEL_FAULTS else "bus", "args": FAULT_ARGUMENTS[f]}
                   for f in FAULT_ARGUMENTS]
        active = self.daemon.command_set.faults.by_joint()
        return _ok({"catalog": catalog, "active": active, "events": list(self.events)})

    async def _params(self, request: web.Request) -> web.Response:
        joint = request.match_info["joint"]
        if joint not in self.live.index:
            return _error(f"no actuator {joint!r}", 404)
        j = self.live.index[joint]
        rows = [{"name": n, "unit": s.unit, "min": s.range[0], "max": s.range[1], "doc": s.doc,
                 "value": self.live.params[j].get(n), "configured": self.live.configured[j].get(n)}
                for n, s in settable_params().items()]
        return _ok({"joint": joint, "params": rows})

    async def _record_list(self, request: web.Request) -> web.Response:
        files = sorted(self.record_dir.glob("*.mcap")) if self.record_dir.is_dir() else []
        return _ok({"recording": self.recording is not None, "dir": str(self.record_dir),
                    "files": [{"name": f.name, "bytes": f.stat().st_size} for f in files]})

    async def _record_start(self, request: web.Request) -> web.Response:
        if self.recording is None:
            robot = self.daemon.robot
            self.recording = StateRecording(self.record_dir, 3600.0, self.live.rig.name,
                                            robot.model if robot is not None else None)
            self.live.emit({"type": "recording_started", "dir": str(self.record_dir)})
        return await self._record_list(request)

    async def _record_stop(self, request: web.Request) -> web.Response:
        rec, self.recording = self.recording, None
        if rec is not None:
            await asyncio.sleep(0.05)   # a state the tap's thread was writing finishes first
            rec.close()
            self.live.emit({"type": "recording_stopped", "dir": str(self.record_dir)})
        return await self._record_list(request)

    async def _record_file(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        path = self.record_dir / name
        if "/" in name or not name.endswith(".mcap") or not path.is_file():
            return _error(f"no recording {name!r}", 404)
        headers = {"Content-Disposition": f'attachment; filename="{name}"', **_cors(request)}
        return web.FileResponse(path, headers=headers)   # answers Range requests (206) itself

    async def _robot(self, request: web.Request) -> web.Response:
        """A robot rig's bodies (MJCF names, `body<i>` if unnamed) and each one's parent, for the 3D view."""
        robot = self.daemon.robot
        if robot is None:
            return _ok({"robot": None})
        model = robot.model
        return _ok({"robot": robot.mjcf.name, "bodies": body_frames(model),
                    "parents": [int(model.body_parentid[i]) for i in range(model.nbody)],
                    "pose_every": self.live.rig.robot.pose_every})

    async def _bus(self, request: web.Request) -> web.Response:
        await self._ready()
        out = []
        for server, cfg in zip(self.daemon.buses, self.live.rig.buses, strict=True):
            wire = getattr(server, "wire_stats", None)
            packets = self.packet_logs.get(cfg.name) if self.packet_logs else None
            out.append({"name": cfg.name, "protocol": cfg.protocol, "errors_isolated": server.errors_isolated,
                        "wire": wire if isinstance(wire, dict) else {}, "t_wall": time.time(),
                        **(packets.report() if packets is not None else {})})
        return _ok({"buses": out})


def _cors(request: web.Request) -> dict:
    """CORS headers for a Foxglove origin: it reads the MCAP with Range requests and needs to see their answer."""
    origin = request.headers.get("Origin")
    if origin not in FOXGLOVE_ORIGINS:
        return {}
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin",
            "Access-Control-Expose-Headers": "Accept-Ranges, Content-Range, Content-Length"}


def _preflight(request: web.Request) -> web.Response:
    """The answer to a CORS preflight for a recording: GET and HEAD with a Range header, and Chrome's Private
    Network Access opt-in (an https page reading a loopback server; WICG private-network-access)."""
    headers = _cors(request)
    if headers:
        headers.update({"Access-Control-Allow-Methods": "GET, HEAD", "Access-Control-Allow-Headers": "Range",
                        "Access-Control-Max-Age": "600"})
        if request.headers.get("Access-Control-Request-Private-Network") == "true":
            headers["Access-Control-Allow-Private-Network"] = "true"
    return web.Response(status=204, headers=headers)


def _plain(value: Any) -> Any:
    """JSON for what the state and events carry besides plain types (numpy scalars, arrays, paths)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _nan_free(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_nan_free(v) for v in value]
    return value


def _ok(body: dict) -> web.Response:
    return web.json_response({"ok": True, **_nan_free(body)}, dumps=lambda v: json.dumps(v, default=_plain))


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"ok": False, "error": message}, status=status)


async def _json(request: web.Request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        raise CommandError("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise CommandError("the request body must be a JSON object")
    return body
