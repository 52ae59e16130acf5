"""Proxy mirror of an Etherban server: a client speaking bam's protocol (one protobuf Request on a REQ socket, one
Response) talks to `servo-hil mirror`, whose real server is a second servo-hil daemon (bam m6); the twins are bam m1.
Every reply the client gets must be the real server's, unchanged (the side-by-side log holds what the real server
sent: its positions are the client's, bit for bit), and the twins must follow the same orders.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from drivers.erob import etherban_pb2 as pb
from hil.daemon.zmq_io import request
from hil.logs.mcap import read_side_by_side
from tests.daemon_process import SERVO_HIL

from .test_etherban import ROOT, Master, free_port, write_rig

BANNER = re.compile(r"servo-hil: etherban bus 'ethercat' at (\S+) \((.*)\)")


def _start(args: list[str], directory: Path) -> tuple[subprocess.Popen, re.Match]:
    out, err = directory / "stdout", directory / "stderr"
    with out.open("w") as fo, err.open("w") as fe:
        proc = subprocess.Popen([*SERVO_HIL, *args], stdout=fo, stderr=fe, cwd=ROOT)
    deadline, banner = time.monotonic() + 30.0, None
    while banner is None and time.monotonic() < deadline and proc.poll() is None:
        banner = BANNER.search(out.read_text())
        time.sleep(0.05)
    if banner is None:
        proc.kill()
        pytest.fail(f"servo-hil {args[0]}: no etherban banner; stderr:\n{err.read_text()}")
    return proc, banner


def _stop(proc: subprocess.Popen, directory: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(15.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    stderr = (directory / "stderr").read_text()
    assert rc == 0 and "Traceback" not in stderr, stderr


def test_bam_protocol_through_the_etherban_mirror(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "twin").mkdir()
    real_bind = f"tcp://127.0.0.1:{free_port()}"
    real_rig = write_rig(tmp_path / "real", real_bind)
    twin_rig = write_rig(tmp_path / "twin", f"tcp://127.0.0.1:{free_port()}")
    logs = tmp_path / "logs"
    text = twin_rig.read_text().replace('model = "m6"', 'model = "m1"')
    twin_rig.write_text(text.replace('joints = ["big", "small"]',
                                     f'joints = ["big", "small"]\nreal = "{real_bind}"\nrecord = "{logs}"'))
    commands = {name: tomllib.loads(p.read_text())["zmq"]["command"] for name, p in
                (("real", real_rig), ("twin", twin_rig))}
    real, _ = _start(["run", str(real_rig)], tmp_path / "real")
    got = []
    try:
        mirror, banner = _start(["mirror", str(twin_rig)], tmp_path / "twin")
        try:
            assert real_bind in banner.group(2)
            master = Master(banner.group(1))
            try:
                assert master.raw(b"not a request") == b""      # the real server's answer to garbage: empty
                # device 0 in POSITION: a ramp to 0.3 rad over 1 s; device 1 in VELOCITY at 0.5 rad/s
                t0 = time.monotonic()

                def orders(_resp):
                    s = min(1.0, time.monotonic() - t0)
                    return [(0, pb.POSITION, 0.3 * s), (1, pb.VELOCITY, 0.5)]

                got = master.run(1.5, orders)
                last = master.exchange((0, pb.POSITION, 0.3), (1, pb.VELOCITY, 0.0))
            finally:
                master.close()
            real_state = request(commands["real"], {"cmd": "state"}, 5.0)["state"]
            twin_state = request(commands["twin"], {"cmd": "state"}, 5.0)["state"]
        finally:
            _stop(mirror, tmp_path / "twin")
    finally:
        _stop(real, tmp_path / "real")
    # the client saw the real server: its statuses are the real drive's (and the real daemon agrees)
    assert [s.device for s in last.statuses] == [0, 1] and not last.has_fault
    assert last.statuses[0].present_position == pytest.approx(real_state["big"]["position"], abs=0.01)
    assert real_state["big"]["position"] == pytest.approx(0.3, abs=0.02)
    # the twin followed the same orders: at the goal too, and device 1 turned
    assert twin_state["big"]["position"] == pytest.approx(0.3, abs=0.02)
    assert twin_state["small"]["position"] > 0.3
    log = read_side_by_side(logs)
    real_log, sim_log = log["/real/big/state"], log["/sim/big/state"]
    # one real/sim pair per Response the client received; the real side is exactly what the client got
    client = [resp.statuses[0].present_position for _, resp in got] + [last.statuses[0].present_position]
    assert len(real_log) == len(sim_log) == len(client) + 1            # + the first exchange of run()
    assert [m["position"] for m in real_log[-len(client):]] == client
    assert all(m["enable"] is True and m["mode"] == 8 for m in sim_log[1:])   # the twin in CSP, enabled
    assert log["/bus/big/commands"][-1] == {**log["/bus/big/commands"][-1], "operation_mode": "POSITION",
                                            "target": 0.3}
