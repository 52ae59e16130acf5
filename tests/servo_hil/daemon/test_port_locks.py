"""A second daemon of a rig whose ports another servo-hil holds (servo_hil/daemon/port_locks.py): one line naming the
port and the holder's pid, exit 2, with or without MQTT, and the first daemon serves on untouched."""

from __future__ import annotations

import subprocess

import pytest

from tests.daemon_process import SERVO_HIL, daemon_env

from . import free_port, ok


@pytest.mark.parametrize("args", [(), ("--no-mqtt",)])
def test_a_second_daemon_of_the_same_rig_names_the_first(args, make_rig, start_daemon, tmp_path):
    rig = make_rig()
    # the embedded MQTT broker on a port of its own (the default 1883 may be anyone's)
    rig.path.write_text(rig.path.read_text().replace("[mqtt]\nenabled = false\n",
                                                     f"[mqtt]\nembedded_port = {free_port()}\n"))
    first = start_daemon(rig, no_mqtt_flag=False)
    second = subprocess.run([*SERVO_HIL, "run", str(rig.path), *args], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path, env=daemon_env(), stdin=subprocess.DEVNULL)
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 2, second.stderr
    assert len(lines) == 1, second.stderr
    assert f"(pid {first.proc.pid}, rig {rig.name!r})" in lines[0] and "[zmq] pub" in lines[0], lines[0]
    assert "mqtt" not in lines[0].lower(), lines[0]
    assert ok(rig.cmd, "status")["status"]["tick"] > 0   # the first one still serves


def test_ports_are_free_again_once_the_daemon_stopped(make_rig, start_daemon):
    rig = make_rig()
    first = start_daemon(rig)
    assert first.terminate() == 0, first.stderr()
    start_daemon(rig)
    assert ok(rig.cmd, "status")["ok"]
