"""docker/Dockerfile built and run for real, with podman (Debian's `podman`, rootful), on a machine that
reaches Debian's archive and PyPI but no container registry.

* Base images, built once and kept (skipped when `localhost/python:3.11-slim-bookworm` exists):
  `debootstrap --variant=minbase bookworm` imported with `podman import`, then Debian's Python 3.11 on it
  (python-base.Containerfile), tagged so that the Dockerfile's `FROM python:3.11-slim-bookworm` resolves
  to it under `--pull=never`; a mosquitto 2 broker on the same root (mosquitto.Containerfile), tagged as
  compose's `eclipse-mosquitto:2`.
* The unchanged docker/Dockerfile built from the repository root with `--format docker` (the OCI format
  drops HEALTHCHECK), the host's CA bundle and pip settings mounted read-only (PyPI may sit behind a
  TLS-intercepting proxy).
* The daemon started as docker/compose.yaml starts it (the rig mounted read-only, SYS_NICE, an init as
  PID 1, SIGTERM with a 10 s grace), next to the broker in one pod (`mosquitto` resolves to the pod's
  loopback); healthy by the image's own HEALTHCHECK; joint state received over ZeroMQ from the host,
  `status` answered, the broker's retained `online` read from the host; `podman stop` → exit status 0
  and the retained `offline`.

Real-time quality inside the container is not asserted (no RT budget there). compose's rtprio/memlock
ulimits are not applied: they exceed an unprivileged host's hard limits. Engine settings come from a
CONTAINERS_CONF file of the test's own: runtime runc (crun refuses a hybrid cgroup v1/v2 layout) and
default ulimits within the host's hard limits (podman's own nofile default, 1048576, is refused).
Measured figures are printed as one JSON line (`pytest -s`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from servo_hil.daemon.zmq_io import request
from tests.servo_hil.daemon import MqttClient, Stream, free_port

pytestmark = pytest.mark.container

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DOCKERFILE = REPO / "docker" / "Dockerfile"
RIG = REPO / "docker" / "rig.toml"
MOSQUITTO_CONF = REPO / "docker" / "mosquitto.conf"

MINBASE = "localhost/debian-minbase:bookworm"
PYTHON_BASE = "localhost/python:3.11-slim-bookworm"  # podman's local name for the FROM line's image
BROKER = "localhost/eclipse-mosquitto:2"  # podman's local name for compose's broker image
IMAGE = "localhost/servo-hil:container-test"
DEBIAN_MIRROR = os.environ.get("SERVO_HIL_DEBIAN_MIRROR", "http://deb.debian.org/debian")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # Debian's bundle (update-ca-certificates)
INSTALL = "apt-get install podman runc debootstrap catatonit (.ci/run installs them)"
CATATONIT = Path("/usr/libexec/podman/catatonit")  # podman's --init binary (Debian package catatonit)

BUILD_TIMEOUT_S = 3600.0
HEALTHY_TIMEOUT_S = 180.0
# podman lowers its own RLIMIT_NPROC to this when it cannot raise it, and runc can only lower from there
PODMAN_NPROC = 32768
# podman's default RLIMIT_NOFILE for containers (containers.conf(5), default_ulimits)
PODMAN_NOFILE = 1048576

FIGURES: dict[str, float | int | str] = {}


def _hard(limit: int, cap: int) -> int:
    hard = resource.getrlimit(limit)[1]
    return cap if hard == resource.RLIM_INFINITY else min(hard, cap)


@pytest.fixture(scope="module")
def podman(tmp_path_factory) -> Iterator[list[str]]:
    """The podman command line (with this test's CONTAINERS_CONF in its environment)."""
    binary = shutil.which("podman")
    if binary is None:
        pytest.skip(f"podman not installed: {INSTALL}")
    if shutil.which("runc") is None:
        pytest.skip(f"runc not installed: {INSTALL}")
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    nofile, nproc = _hard(resource.RLIMIT_NOFILE, PODMAN_NOFILE), _hard(resource.RLIMIT_NPROC, PODMAN_NPROC)
    conf.write_text("[containers]\n"
                    f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
                    "[engine]\n"
                    'runtime = "runc"\n')
    saved = os.environ.get("CONTAINERS_CONF")
    os.environ["CONTAINERS_CONF"] = str(conf)
    try:
        r = subprocess.run([binary, "info", "--format", "{{.Host.OCIRuntime.Name}}"], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "runc", f"podman info:\n{r.stdout}{r.stderr}"
        yield [binary]
    finally:
        if saved is None:
            os.environ.pop("CONTAINERS_CONF", None)
        else:
            os.environ["CONTAINERS_CONF"] = saved


def _run(argv: list[str], what: str, timeout: float = 120.0, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{what}: `{' '.join(argv)}` exited {r.returncode}:\n{r.stdout[-4000:]}{r.stderr[-4000:]}"
    return r


def _exists(podman: list[str], image: str) -> bool:
    return subprocess.run([*podman, "image", "exists", image], timeout=60).returncode == 0


def _build(podman: list[str], containerfile: Path, tag: str, context: Path, *extra: str) -> float:
    """`podman build` (docker format: keeps HEALTHCHECK); its wall time [s]."""
    t0 = time.monotonic()
    _run([*podman, "build", "--pull=never", "--format", "docker", *extra, "-f", str(containerfile), "-t", tag,
          str(context)], f"build of {tag}", timeout=BUILD_TIMEOUT_S)
    return time.monotonic() - t0


def _import_minbase(podman: list[str]) -> None:
    debootstrap = shutil.which("debootstrap") or ("/usr/sbin/debootstrap" if os.access("/usr/sbin/debootstrap",
                                                                                         os.X_OK) else None)
    if debootstrap is None:
        pytest.skip(f"debootstrap not installed (it builds the local base image): {INSTALL}")
    if os.geteuid() != 0:
        pytest.skip("debootstrap needs root to build the local base image")
    with tempfile.TemporaryDirectory(prefix="servo-hil-rootfs-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "rootfs"
        _run([debootstrap, "--variant=minbase", "bookworm", str(root), DEBIAN_MIRROR], "debootstrap",
             timeout=BUILD_TIMEOUT_S)
        # the downloaded .debs and package lists are not part of a base image (the official one has neither)
        for cache in (root / "var/cache/apt/archives", root / "var/lib/apt/lists"):
            for entry in cache.glob("*"):
                if entry.is_file():
                    entry.unlink()
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        try:
            _run([*podman, "import", "--change", 'CMD ["/bin/bash"]', "-", MINBASE], "podman import",
                 stdin=tar.stdout, timeout=600)
        finally:
            tar.stdout.close()
            assert tar.wait(60) == 0, "tar of the debootstrap root failed"


@pytest.fixture(scope="module")
def base_images(podman) -> None:
    """The local Python base and broker images (built once, then reused while their tags exist)."""
    t0 = time.monotonic()
    built = False
    for tag, containerfile in ((PYTHON_BASE, "python-base.Containerfile"), (BROKER, "mosquitto.Containerfile")):
        if _exists(podman, tag):
            continue
        if not _exists(podman, MINBASE):
            _import_minbase(podman)
        _build(podman, HERE / containerfile, tag, HERE, "--build-arg", f"BASE={MINBASE}")
        built = True
    if built:
        FIGURES["base_build_s"] = round(time.monotonic() - t0, 1)


def _pip_conf(path: Path) -> Path:
    """The host's network pip settings for the build (file:// indexes do not exist inside the build)."""
    settings: dict[str, str] = {}
    r = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60)
    for line in r.stdout.splitlines() if r.returncode == 0 else []:
        key, _, value = line.partition("=")
        settings[key.split(".", 1)[-1]] = value.strip().strip("'\"")
    for key in ("index-url", "extra-index-url", "trusted-host", "proxy", "default-timeout", "timeout"):
        env = os.environ.get("PIP_" + key.upper().replace("-", "_"))
        if env:
            settings[key] = env
    keep = {}
    for key in ("index-url", "extra-index-url"):
        urls = [u for u in settings.get(key, "").split() if u.startswith(("http://", "https://"))]
        if urls:
            keep[key] = " ".join(urls)
    for key in ("trusted-host", "proxy", "default-timeout", "timeout"):
        if settings.get(key):
            keep[key] = settings[key]
    if CA_BUNDLE.is_file():
        keep["cert"] = str(CA_BUNDLE)
    path.write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in keep.items()))
    return path


@pytest.fixture(scope="module")
def image(podman, base_images, tmp_path_factory) -> str:
    """docker/Dockerfile built from the repository root, as compose builds it."""
    mounts = ["-v", f"{_pip_conf(tmp_path_factory.mktemp('pip') / 'pip.conf')}:/etc/pip.conf:ro"]
    if CA_BUNDLE.is_file():
        mounts += ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
    FIGURES["image_build_s"] = round(_build(podman, DOCKERFILE, IMAGE, REPO, *mounts), 1)
    size = _run([*podman, "image", "inspect", "--format", "{{.Size}}", IMAGE], "image size").stdout.strip()
    FIGURES["image_mb"] = round(int(size) / 1e6)
    return IMAGE


def test_image_keeps_the_healthcheck(podman, image):
    r = _run([*podman, "image", "inspect", "--format", "{{json .Config.Healthcheck}}", image], "inspect")
    health = json.loads(r.stdout)
    assert health and health["Test"][1:4] == ["servo-hil", "status", "--check"], health


@contextlib.contextmanager
def _pod(podman: list[str], name: str, ports: dict[int, int]) -> Iterator[None]:
    publish = [a for host, inner in ports.items() for a in ("-p", f"127.0.0.1:{host}:{inner}")]
    subprocess.run([*podman, "pod", "rm", "-f", name], capture_output=True, timeout=120)
    # one network namespace: the rig's `mqtt://mosquitto:1883` is the broker on the pod's loopback
    _run([*podman, "pod", "create", "--name", name, "--add-host", "mosquitto:127.0.0.1", *publish], "pod create")
    try:
        yield
    finally:
        subprocess.run([*podman, "pod", "rm", "-f", "-t", "5", name], capture_output=True, timeout=120)


def _logs(podman: list[str], container: str) -> str:
    r = subprocess.run([*podman, "logs", container], capture_output=True, text=True, timeout=60)
    return r.stdout + r.stderr


def test_daemon_runs_healthy_answers_the_host_and_stops(podman, image):
    joints = [a["joint"] for a in tomllib.loads(RIG.read_text())["actuators"]]
    pub, cmd, mqtt = free_port(), free_port(), free_port()
    pod = f"servo-hil-test-{os.getpid()}"
    daemon = f"{pod}-daemon"
    with _pod(podman, pod, {pub: 9872, cmd: 9873, mqtt: 1883}):
        _run([*podman, "run", "-d", "--pod", pod, "--name", f"{pod}-mosquitto",
              "-v", f"{MOSQUITTO_CONF}:/mosquitto/config/mosquitto.conf:ro", BROKER], "broker")
        # docker/compose.yaml's service, less the rtprio/memlock ulimits (beyond this host's hard limits)
        init = ["--init"] if CATATONIT.exists() else []
        t0 = time.monotonic()
        _run([*podman, "run", "-d", "--pod", pod, "--name", daemon, *init, "--cap-add", "SYS_NICE",
              "--stop-signal", "SIGTERM", "--stop-timeout", "10", "-v", f"{RIG}:/config/rig.toml:ro", image],
             "daemon")
        try:
            # the image's HEALTHCHECK, run on demand (podman schedules it with systemd timers, absent here)
            deadline = time.monotonic() + HEALTHY_TIMEOUT_S
            while subprocess.run([*podman, "healthcheck", "run", daemon], capture_output=True,
                                 timeout=60).returncode != 0:
                state = _run([*podman, "inspect", "--format", "{{.State.Status}}", daemon], "inspect").stdout
                log = _logs(podman, daemon)
                assert state.strip() == "running", f"the daemon container is {state.strip()}:\n{log}"
                assert time.monotonic() < deadline, f"not healthy within {HEALTHY_TIMEOUT_S} s:\n{log}"
                time.sleep(1.0)
            FIGURES["healthy_s"] = round(time.monotonic() - t0, 1)
            health = _run([*podman, "inspect", "--format", "{{.State.Health.Status}}", daemon], "inspect").stdout
            assert health.strip() == "healthy"

            with Stream(f"tcp://127.0.0.1:{pub}") as stream:
                for joint in joints:
                    state = stream.wait_for(joint, lambda p: math.isfinite(p["position"]), 15.0, "joint state")
                    assert {"position", "velocity"} <= state.keys(), state

            reply = request(f"tcp://127.0.0.1:{cmd}", {"cmd": "status"}, 10.0)
            assert reply["ok"] is True, reply
            status = reply["status"]
            assert status["rig"] == "default" and status["loop_alive"] is True and status["tick"] > 0, status
            assert sorted(status["actuators"]) == sorted(joints), status["actuators"]

            with MqttClient(mqtt, ["servo-hil/default/online"]) as client:
                client.wait(lambda m: m.payload == b"online", 15.0, "retained `online` from the daemon")
                t1 = time.monotonic()
                stop = subprocess.run([*podman, "stop", daemon], capture_output=True, text=True, timeout=60)
                FIGURES["stop_s"] = round(time.monotonic() - t1, 2)
                assert stop.returncode == 0, stop.stderr
                client.wait(lambda m: m.payload == b"offline", 15.0, "`offline` on an orderly stop")
            code = _run([*podman, "inspect", "--format", "{{.State.ExitCode}}", daemon], "inspect").stdout
            log = _logs(podman, daemon)
            assert code.strip() == "0", f"exit status {code.strip()} after podman stop:\n{log}"
            assert "MQTT connected to mosquitto:1883" in log, log
            assert "Traceback" not in log, log
        finally:
            print(json.dumps({"container_test": FIGURES}))
