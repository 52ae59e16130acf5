"""The console's HTTP API and its guards, against a real daemon: the token off loopback, the Origin of
WebSocket handshakes and POSTs, the servo's own error through the write path, one-line errors for bad input."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request

import aiohttp
import pytest

from tests.daemon_process import SERVO_HIL, daemon_env
from tests.servo_hil.console.conftest import console_rig
from tests.servo_hil.daemon.conftest import Launcher

TOKEN = "correct-horse-battery-staple"


def fetch(url: str, body: dict | None = None, headers: dict | None = None) -> tuple[int, dict]:
    """(HTTP status, JSON body) of a GET, or of a POST of `body`."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def websocket_status(url: str, origin: str) -> int | str:
    """The handshake's HTTP status for a WebSocket to `url` from `origin`, or the first message's type."""
    async def run():
        async with aiohttp.ClientSession() as session:
            try:
                async with session.ws_connect(url, origin=origin) as ws:
                    return json.loads((await ws.receive(timeout=5)).data)["type"]
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status

    return asyncio.run(run())


def test_write_path_gives_the_servos_own_errors(console_daemon):
    _, url = console_daemon
    mx = f"{url}api/servo/mx"
    assert fetch(mx + "/write", {"name": "Torque Enable", "value": 1})[1]["error"] == 0
    status, reply = fetch(mx + "/write", {"name": "Max Position Limit", "value": 3000})
    assert (status, reply["error"], reply["error_text"]) == (200, 7, "Access Error")   # EEPROM locked: torque on
    reply = fetch(mx + "/write", {"name": "Goal Position", "value": 9000})[1]
    assert (reply["error"], reply["error_text"]) == (6, "Data Limit Error")   # beyond Max Position Limit 4095
    reply = fetch(mx + "/write", {"name": "Present Position", "value": 1})[1]
    assert reply["error_text"] == "Access Error"   # a read-only item
    table = fetch(mx)[1]
    assert {r["name"]: r["value"] for r in table["rows"]}["Max Position Limit"] == 4095
    status, reply = fetch(mx + "/write", {"name": "No Such Item", "value": 1})
    assert status == 400 and "no item 'No Such Item'" in reply["error"] and "\n" not in reply["error"]
    status, reply = fetch(f"{url}api/servo/arm")
    assert status == 404 and "no servo with a control table for actuator 'arm'" in reply["error"]
    status, reply = fetch(f"{url}api/command", {"cmd": "set_goal", "actuator": "nope", "value": 0})
    assert status == 400 and "nope" in reply["error"]


def test_foreign_origin_is_refused(console_daemon):
    _, url = console_daemon
    ws = url.replace("http", "ws") + "ws"
    assert websocket_status(ws, url.rstrip("/")) == "hello"
    assert websocket_status(ws, "http://evil.example") == 403
    status, reply = fetch(f"{url}api/command", {"cmd": "pause"}, {"Origin": "http://evil.example"})
    assert status == 403 and "Origin" in reply["error"]
    status, _ = fetch(f"{url}api/overview", headers={"Host": "rebound.example:80"})
    assert status == 403   # no token: only a loopback Host is served


def test_request_without_token_to_a_remote_console_is_refused(tmp_path):
    launcher = Launcher(tmp_path)
    rig, url = console_rig(tmp_path / "remote.toml", "console-remote", f'bind = "0.0.0.0"\ntoken = "{TOKEN}"',
                           joints=("mx",))
    launcher.start(rig)
    try:
        status, reply = fetch(f"{url}api/overview")
        assert status == 401 and "token" in reply["error"]
        status, reply = fetch(f"{url}api/overview", headers={"X-Console-Token": "wrong-token-wrong-token"})
        assert status == 401
        status, reply = fetch(f"{url}api/overview?token={TOKEN}")
        assert status == 200 and reply["rig"] == "console-remote"
        assert fetch(f"{url}api/overview", headers={"X-Console-Token": TOKEN})[0] == 200
    finally:
        launcher.finish()


@pytest.mark.parametrize("console", ['bind = "0.0.0.0"', 'token = "short"'])
def test_console_settings_refused_with_one_line(tmp_path, console):
    rig, _ = console_rig(tmp_path / "bad.toml", "console-bad", console, joints=("mx",))
    run = subprocess.run([*SERVO_HIL, "run", str(rig.path), "--no-mqtt"], capture_output=True, text=True, timeout=60,
                         env=daemon_env() | {"SERVO_HIL_CONSOLE_TOKEN": ""})
    assert run.returncode == 2, run.stderr
    lines = [x for x in run.stderr.splitlines() if "error" in x.lower()]
    assert len(lines) == 1 and ("token" in lines[0]), run.stderr
    assert "Traceback" not in run.stderr


def test_port_in_use_is_a_one_line_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        rig, _ = console_rig(tmp_path / "busy.toml", "console-busy", joints=("mx",), port=busy.getsockname()[1])
        run = subprocess.run([*SERVO_HIL, "run", str(rig.path), "--no-mqtt"], capture_output=True, text=True,
                             timeout=60, env=daemon_env())
    assert run.returncode == 2, run.stderr
    assert "console: cannot listen on 127.0.0.1" in run.stderr and "Traceback" not in run.stderr


def test_erob_object_dictionary_through_its_sdo_path(tmp_path):
    """An eRob's objects as an SDO upload reads them; writes as its SDO server takes a download (abort codes)."""
    launcher = Launcher(tmp_path)
    rig, url = console_rig(tmp_path / "erob.toml", "console-erob", joints=("erob",))
    rig.path.write_text(rig.path.read_text().replace(
        'catalog = "erob80_100"', 'catalog = "erob80_100"\nbus = "can"\nid = 2') + (
        f'\n[[buses]]\nname = "can"\nprotocol = "canopen"\nport = "{tmp_path / "can"}"\nbaud = 1000000\n'))
    rig.path.write_text(rig.path.read_text().replace(
        f'[[buses]]\nname = "dxl"\nprotocol = "dynamixel"\nport = "{tmp_path / "console-erob-dxl"}"\n'
        'baud = 1000000\nfast = true\n', ""))
    launcher.start(rig)
    try:
        erob = f"{url}api/servo/erob"
        table = fetch(erob)[1]
        assert table["kind"] == "erob" and table["id"] == 2
        rows = {r["address"]: r for r in table["rows"]}
        assert rows["0x6041:00"]["access"] == "ro" and rows["0x6040:00"]["writable"]
        status, reply = fetch(erob + "/write", {"name": rows["0x6041:00"]["name"], "value": 0})
        assert status == 200 and reply["error"] == 0x06010002 and "read only" in reply["error_text"].lower()
        reply = fetch(erob + "/write", {"name": rows["0x6060:00"]["name"], "value": 8})[1]   # cyclic sync position
        assert reply["error"] == 0
        assert {r["address"]: r for r in fetch(erob)[1]["rows"]}["0x6061:00"]["value"] == 8   # mode display
        assert fetch(erob + "/reboot", {})[1]["error"] == 0
    finally:
        launcher.finish()


def test_run_console_flag_serves_the_default_console(tmp_path):
    """`run --console` on a rig without [console] takes 127.0.0.1:8780: held here, the start fails saying so."""
    from tests.servo_hil.daemon.conftest import write_rig

    rig = write_rig(tmp_path / "plain.toml", "console-flag", joints=("arm",))
    with contextlib.ExitStack() as stack:
        busy = stack.enter_context(socket.socket())
        with contextlib.suppress(OSError):   # already taken by another process: busy all the same
            busy.bind(("127.0.0.1", 8780))
            busy.listen()
        run = subprocess.run([*SERVO_HIL, "run", str(rig.path), "--no-mqtt", "--console"], capture_output=True,
                             text=True, timeout=60, env=daemon_env())
    assert run.returncode == 2, run.stderr
    assert "console: cannot listen on 127.0.0.1:8780" in run.stderr and "Traceback" not in run.stderr


def test_a_recording_opens_in_foxglove_with_cors_and_ranges(console_daemon):
    _, url = console_daemon
    fetch(f"{url}api/record/start", {})
    time.sleep(0.5)
    files = fetch(f"{url}api/record/stop", {})[1]["files"]
    name = files[0]["name"]
    file_url = f"{url}api/record/file/{name}"
    origin = "https://app.foxglove.dev"
    request = urllib.request.Request(file_url, headers={"Origin": origin, "Range": "bytes=0-7"})
    with urllib.request.urlopen(request, timeout=10) as r:
        assert (r.status, r.read()) == (206, b"\x89MCAP0\r\n")   # the MCAP magic (mcap.dev/spec)
        assert r.headers["Access-Control-Allow-Origin"] == origin
        assert "Content-Range" in r.headers["Access-Control-Expose-Headers"]
        assert r.headers["Content-Range"] == f"bytes 0-7/{files[0]['bytes']}"
    preflight = urllib.request.Request(file_url, method="OPTIONS", headers={
        "Origin": origin, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "range",
        "Access-Control-Request-Private-Network": "true"})
    with urllib.request.urlopen(preflight, timeout=10) as r:
        assert r.status == 204 and r.headers["Access-Control-Allow-Origin"] == origin
        assert r.headers["Access-Control-Allow-Headers"] == "Range"
        assert r.headers["Access-Control-Allow-Private-Network"] == "true"
    with urllib.request.urlopen(urllib.request.Request(file_url, headers={"Origin": "http://evil.example"})) as r:
        assert "Access-Control-Allow-Origin" not in r.headers   # other sites' pages cannot read it
