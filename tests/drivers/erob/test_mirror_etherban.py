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

from drivers.emulated.etherban import etherban_pb2 as pb
from servo_hil.daemon.zmq_io import request
from servo_hil.logs.mcap import read_side_by_side
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


def test_a_request_the_real_server_leaves_unanswered_stays_unanswered(tmp_path):
    """In-process: the real server is the rig's Etherban server on its own drives. Once it is gone, a request
    through the mirror gets no reply (none is made up) and the mirror carries on: the client that times out and
    reconnects, as a REQ client must, is answered by the real server again once it is back."""
    from drivers.emulated.etherban.server import EtherbanServer
    from drivers.hosts.etherban_mirror import EtherbanMirror
    from drivers.schedulers.cia402_drives import Cia402Drives
    from firmware_models.erob.drive import new_drive
    from hil.joint import KernelJoint
    from servo_hil.rig import load_rig

    _rig, _specs, kernel = load_rig(write_rig(tmp_path, "tcp://127.0.0.1:1"))
    real_drives, twin_drives = Cia402Drives(), Cia402Drives()
    real_devices = [real_drives.drive(0, "erob80_100", lambda: new_drive("erob80_100", 1, KernelJoint(kernel, 0)))]
    twin_devices = [twin_drives.drive(0, "erob80_100", lambda: new_drive("erob80_100", 1, KernelJoint(kernel, 1)))]
    real = EtherbanServer(real_drives, real_devices, "tcp://127.0.0.1:0", name="real")
    real.start()
    mirror = EtherbanMirror(twin_drives, twin_devices, "tcp://127.0.0.1:0", real.path, ["big"], timeout_s=0.3)
    mirror.start()
    master = Master(mirror.path)
    try:
        assert [s.device for s in master.exchange((0, pb.POSITION, 0.0)).statuses] == [0]
        real.stop()
        with pytest.raises(Exception, match="Resource temporarily unavailable"):    # RCVTIMEO: no reply
            master.exchange((0, pb.POSITION, 0.0))
        assert mirror.forwarded["unanswered"] == 1 and mirror.error is None
        master.close()
        again = EtherbanServer(real_drives, real_devices, real.path, name="real")
        again.start()
        try:
            master = Master(mirror.path)
            assert [s.device for s in master.exchange((0, pb.POSITION, 0.0)).statuses] == [0]
            assert mirror.forwarded == {"to_real": 3, "to_client": 2, "unanswered": 1}
        finally:
            again.stop()
    finally:
        master.close()
        mirror.stop()
        real.stop()


def test_a_real_that_is_not_an_endpoint_is_one_line_naming_the_key(tmp_path):
    rig = write_rig(tmp_path, f"tcp://127.0.0.1:{free_port()}")
    joints = 'joints = ["big", "small"]'
    rig.write_text(rig.read_text().replace(joints, f'{joints}\nreal = "robot:7332"'))
    run = subprocess.run([*SERVO_HIL, "mirror", str(rig)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "buses.0.real" in run.stderr and "tcp://" in run.stderr
