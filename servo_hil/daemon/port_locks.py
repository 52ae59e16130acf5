"""One daemon per network port: `servo-hil run` holds an exclusive flock(2) on a lock file per TCP port (and
ipc:// path) its rig binds, holding its pid and rig name, so that a second daemon of the same rig is told at
once, in one line, which servo-hil holds them — as a pty link's lock does (`hold_lock_file`). The kernel drops
a lock when its process dies, so a crashed daemon never blocks the next one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from drivers.wire.ports import hold_lock_file
from hil.params.config_file import ConfigError
from servo_hil.rig import Rig


def lock_dir() -> Path:
    """Where the lock files live: one folder for every user of the host (sticky, like /tmp)."""
    path = Path(tempfile.gettempdir()) / "servo-hil-ports"
    if not path.is_dir():
        path.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):
            path.chmod(0o1777)
    return path


def bound_ports(rig: Rig, mqtt: bool) -> list[tuple[str, str]]:
    """(lock key, what binds it) for each port the rig's daemon binds: the ZeroMQ endpoints, the embedded
    MQTT broker (when MQTT is on without a broker URL), the Foxglove server and the web console; port 0 (any
    free) is none."""
    out = []
    for what, endpoint in (("[zmq] pub", rig.zmq.pub), ("[zmq] command", rig.zmq.command)):
        scheme, _, rest = endpoint.partition("://")
        if scheme == "tcp":
            port = rest.rpartition(":")[2]
            if port.isdigit() and int(port) > 0:
                out.append((f"tcp-{int(port)}", f"tcp port {int(port)} ({what} {endpoint})"))
        elif scheme == "ipc":
            digest = hashlib.sha1(os.path.abspath(rest).encode()).hexdigest()[:16]
            out.append((f"ipc-{digest}", f"{endpoint} ({what})"))
    if mqtt and not rig.mqtt.url and rig.mqtt.embedded_port > 0:
        out.append((f"tcp-{rig.mqtt.embedded_port}", f"tcp port {rig.mqtt.embedded_port} ([mqtt] embedded broker)"))
    if rig.foxglove is not None and rig.foxglove.port > 0:
        out.append((f"tcp-{rig.foxglove.port}", f"tcp port {rig.foxglove.port} ([foxglove] port)"))
    if rig.console is not None and rig.console.port > 0:
        out.append((f"tcp-{rig.console.port}", f"tcp port {rig.console.port} ([console] port)"))
    return out


@dataclass
class PortLocks:
    """The locks a daemon holds; `release()` removes their files and drops them."""

    held: list[tuple[Path, int]]

    def release(self) -> None:
        for path, fd in self.held:
            with contextlib.suppress(OSError):
                os.unlink(path)   # while still holding it: a waiting daemon then locks a file of its own
            os.close(fd)
        self.held = []


def lock_ports(rig: Rig, mqtt: bool) -> PortLocks:
    """Lock every port of `bound_ports`; ConfigError naming the port and the servo-hil (pid, rig) holding it
    when another one does (the locks taken so far are released)."""
    locks = PortLocks([])
    directory = lock_dir()
    try:
        for key, what in dict(bound_ports(rig, mqtt)).items():
            path = directory / f"{key}.lock"
            locks.held.append((path, _lock(path, what, rig.name)))
    except BaseException:
        locks.release()
        raise
    return locks


def _lock(path: Path, what: str, rig_name: str) -> int:
    """An fd with an exclusive flock on `path`, which then holds "pid rig"; ConfigError naming the holder."""
    try:
        held = hold_lock_file(path, f"{os.getpid()} {rig_name}", 0o666)
    except OSError as exc:
        raise ConfigError(f"cannot create the lock file {path} of {what}: {exc.strerror}") from None
    if isinstance(held, str):
        pid, _, holder_rig = held.partition(" ")
        raise ConfigError(f"{what} is held by another servo-hil (pid {pid or '?'}, rig {holder_rig or '?'!r}): "
                          f"stop it, or give rig {rig_name!r} other ports")
    return held
