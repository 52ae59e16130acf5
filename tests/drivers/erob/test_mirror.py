"""Proxy mirror of an eRob CAN bus: an unchanged python-canopen controller on the mirror's SLCAN pty, the "real" eRob a
second servo-hil daemon (bam m6 with encoder noise) on its own SLCAN pty, reached by the mirror through python-can's
slcan; the twin is bam m1. Wiretaps (slcan_tap.py) on both serial lines see every frame: what the controller sent
must reach the real bus unchanged and in order, and what the real bus sent must reach the controller unchanged and
in order. Expected values: CiA 301 / CiA 402-2, the EDS, the eRob's 524 288 counts/rev (ZeroErr's demos:
encoder_resolution), never the code under test."""

from __future__ import annotations

import contextlib
import math
import statistics
import struct
import subprocess
import time

import canopen
import pytest
from canopen.profiles.p402 import BaseNode402

from drivers.hosts.can_interface import can_bus_kwargs
from servo_hil.logs.mcap import read_side_by_side
from servo_hil.offline.report import report
from tests.daemon_process import SERVO_HIL

from .conftest import ACTUATORS, CanLauncher, connect, write_can_rig
from .slcan_tap import SlcanTap
from .test_canopen import WAIT_S, enable_by_sdo, remap, reset_nodes

RAD_PER_COUNT = 2 * math.pi / 524288
ONE_EROB = ACTUATORS[:1]                    # erob100, node 2
SYNC_HZ = 100


class MirrorLauncher(CanLauncher):
    def argv(self, rig) -> list[str]:
        return [*SERVO_HIL, "mirror", str(rig.path)]


def test_real_bus_specs():
    assert can_bus_kwargs("slcan:/dev/ttyACM0@1000000") == {"interface": "slcan", "channel": "/dev/ttyACM0",
                                                           "bitrate": 1000000}
    assert can_bus_kwargs("socketcan:can0", 500000) == {"interface": "socketcan", "channel": "can0",
                                                       "bitrate": 500000}
    table = {"interface": "slcan", "channel": "/dev/x", "sleep_after_open": 0}
    assert can_bus_kwargs(table, 1000000) == table | {"bitrate": 1000000}
    for bad, says in (("can0", "INTERFACE:CHANNEL"), ("nosuch:can0", "unknown python-can interface"),
                      ("slcan:/dev/x@fast", "bitrate"), ({"channel": "can0"}, "interface")):
        with pytest.raises(ValueError, match=says):
            can_bus_kwargs(bad)


def test_bad_real_spec_is_one_line_naming_the_key(tmp_path):
    rig = write_can_rig(tmp_path, "bad", actuators=ONE_EROB, bus_extra='real = "nosuch:can0"\n')
    run = subprocess.run([*SERVO_HIL, "mirror", str(rig.path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "buses.0.real" in run.stderr and "nosuch" in run.stderr
    ok = write_can_rig(tmp_path, "ok", actuators=ONE_EROB)
    run = subprocess.run([*SERVO_HIL, "mirror", str(ok.path), "--real", "slcan:/dev/null@x"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "--real" in run.stderr and "bitrate" in run.stderr


def _quiet(taps: list[SlcanTap], still_s: float = 0.5, timeout: float = 10.0) -> None:
    """Wait until no frame crossed either tap for `still_s` (every frame in flight has arrived)."""
    end, last, since = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < end:
        counts = [tuple(map(len, t.frames())) for t in taps]
        if counts != last:
            last, since = counts, time.monotonic()
        elif time.monotonic() - since > still_s:
            return
        time.sleep(0.05)


def _target(t: float, start: int) -> int:
    """A cubic move of +0.3 rad in 1 s from `start` [counts], then hold."""
    s = min(t, 1.0)
    return start + round(0.3 * s * s * (3 - 2 * s) / RAD_PER_COUNT)


def test_python_canopen_through_the_mirror(tmp_path, record_property, eds):
    launcher = MirrorLauncher(tmp_path)
    real_launcher = CanLauncher(tmp_path)
    taps: list[SlcanTap] = []
    net = canopen.Network()
    try:
        real = real_launcher.start(write_can_rig(tmp_path, "real", actuators=ONE_EROB, model="m6",
                                                 actuator_extra="encoder = { encoder_noise = 0.0005, seed = 3 }\n"))
        real_tap = SlcanTap(real.rig.port)
        taps.append(real_tap)
        real_tap.start()
        logs = tmp_path / "logs"
        bus_extra = (f'real = {{ interface = "slcan", channel = "{real_tap.path}", sleep_after_open = 0 }}\n'
                     f'record = "{logs}"\n')
        twin = launcher.start(write_can_rig(tmp_path, "twin", actuators=ONE_EROB, model="m1", bus_extra=bus_extra))
        assert "mirroring" in twin.banner and real_tap.path in twin.banner
        ctl_tap = SlcanTap(twin.rig.port)
        taps.append(ctl_tap)
        ctl_tap.start()

        connect(net, ctl_tap.path)
        node = BaseNode402(2, eds[2])
        net.add_node(node)
        # an SDO crosses two taps, two python-can readers (the mirror's, the controller's) and three processes on
        # 2 shared cores, each of which a loaded host may stall: how long that takes is not the point here
        node.sdo.RESPONSE_TIMEOUT = WAIT_S
        reset_nodes(net, ids=(2,))                 # reset node: the real node's boot-up comes back through the mirror
        uploads = []
        for _ in range(20):                        # SDO round trips through the mirror (and both taps)
            t0 = time.perf_counter()
            assert node.sdo[0x1000].raw == 0x00420192    # device type, CiA 402 (EDS [1000])
            uploads.append(time.perf_counter() - t0)
        remap(node, 0x1800, 0x1A00, 0x182, (0x60640020, 0x606C0020), 1)              # TPDO1: position, velocity
        remap(node, 0x1801, 0x1A01, 0x282, (0x60410010, 0x60780010, 0x60770010), 1)  # TPDO2: status, current, torque
        remap(node, 0x1400, 0x1600, 0x202, (0x60400010, 0x607A0020), 0xFF)          # RPDO1: control, target
        node.sdo[0x1006].raw = 1_000_000 // SYNC_HZ
        node.nmt.state = "OPERATIONAL"
        start = enable_by_sdo(node, 8)                                               # CSP, operation enabled
        t0 = time.perf_counter()
        for k in range(int(2.0 * SYNC_HZ)):
            time.sleep(max(0.0, t0 + k / SYNC_HZ - time.perf_counter()))
            target = _target(k / SYNC_HZ, start)
            net.send_message(0x202, struct.pack("<Hi", 0x0F, target))
            net.send_message(0x80, b"")
        _quiet(taps)                               # every frame reached both buses: the last target is in force
        goal = target * RAD_PER_COUNT
        end = time.monotonic() + WAIT_S            # the real node's frames come through two relays: let it settle
        while True:
            real_q = real.ok("state")["state"]["erob100"]["position"]
            twin_q = twin.ok("state")["state"]["erob100"]["position"]
            if max(abs(real_q - goal), abs(twin_q - goal)) <= 0.02 or time.monotonic() > end:
                break
            time.sleep(0.05)
        net.disconnect()
        assert twin.terminate() == 0, twin.stderr()          # closes the MCAP file
    finally:
        with contextlib.suppress(Exception):
            net.disconnect()
        # the daemons stop before the taps close: the twin reads the real bus through one
        try:
            launcher.finish()
        finally:
            try:
                real_launcher.finish()     # even when the twin's check fails: no daemon outlives the test
            finally:
                for tap in taps:
                    tap.close()

    # both followed the targets: the real node, and the twin that saw the same frames
    assert real_q == pytest.approx(goal, abs=0.02) and twin_q == pytest.approx(goal, abs=0.02), (real_q, twin_q, goal)
    # every frame forwarded unchanged and in order, both ways
    sent, received = ctl_tap.frames()
    real_in, real_out = real_tap.frames()
    # before that, the mirror's own reads of the real drive's state (SDO uploads of 0x6041 and 0x6061, CiA 301
    # §7.2.4.3.3), which the controller never sees
    assert [f[:2] for f in real_in[:2]] == [(0x602, b"\x40\x41\x60\x00\x00\x00\x00\x00"),
                                           (0x602, b"\x40\x61\x60\x00\x00\x00\x00\x00")]
    assert [(f[0], f[1][:4]) for f in real_out[:2]] == [(0x582, b"\x4b\x41\x60\x00"), (0x582, b"\x4f\x61\x60\x00")]
    assert sent == real_in[2:] and received == real_out[2:]
    tpdo1 = [f for f in received if f[0] == 0x182]
    print(f"mirror: {len(sent)} frames to the real bus, {len(received)} back; SDO upload p50 "
          f"{1e3 * statistics.median(uploads):.2f} ms")
    record_property("frames_to_real", len(sent))
    record_property("frames_to_controller", len(received))
    record_property("sdo_upload_p50_ms", round(1e3 * statistics.median(uploads), 3))
    assert len(tpdo1) >= 0.8 * 2.0 * SYNC_HZ and sum(f[0] == 0x80 for f in sent) == 2.0 * SYNC_HZ
    assert (0x702, b"\x00", False, False) in received                     # the real node's boot-up

    # side by side: one real/sim pair per reply that carried the position (uploads of 0x6064 and TPDO1s)
    log = read_side_by_side(logs)
    real_log, sim_log = log["/real/erob100/state"], log["/sim/erob100/state"]
    positions = [struct.unpack_from("<i", d)[0] if cid == 0x182 else struct.unpack_from("<i", d, 4)[0]
                 for cid, d, _, _ in received if cid == 0x182 or (cid == 0x582 and d[:4] == b"\x43\x64\x60\x00")]
    assert [m["position"] for m in real_log] == pytest.approx([p * RAD_PER_COUNT for p in positions], abs=1e-12)
    assert [m["log_time_ns"] for m in real_log] == [m["log_time_ns"] for m in sim_log]
    velocities = [struct.unpack_from("<i", d, 4)[0] * RAD_PER_COUNT for cid, d, _, _ in tpdo1]
    assert [m["velocity"] for m in real_log if m["velocity"] is not None] == pytest.approx(velocities, abs=1e-12)
    assert sim_log[-1]["position"] == pytest.approx(twin_q, abs=0.01)
    assert sim_log[-1]["position"] == pytest.approx(real_log[-1]["position"], abs=0.03)
    # TPDO2 (statusword, current, torque) joins the TPDO1 before it in one state: ‰ of 0x6075 / 0x6076 (config/erob)
    tpdo2 = [struct.unpack("<Hhh", d) for cid, d, _, _ in received if cid == 0x282]
    cycles = [m for m in real_log if m["current"] is not None]
    assert [m["current"] for m in cycles] == pytest.approx([c * 5.5 / 1000 for _, c, _ in tpdo2], abs=1e-12)
    assert [m["torque"] for m in cycles] == pytest.approx([t * 31.0 / 1000 for _, _, t in tpdo2], abs=1e-12)
    assert cycles[-1]["enable"] is True and sim_log[-1]["enable"] is True and sim_log[-1]["current"] is not None
    # the real mode is the 0x6060 = 8 the drive acknowledged (no TPDO carries 0x6061): twin and real agree throughout
    assert real_log[-1]["mode"] == sim_log[-1]["mode"] == 8
    assert report(logs, tmp_path / "report")["state_disagreements"] == []
    commands = log["/bus/erob100/commands"]
    rpdos = [m for m in commands if m["service"] == "rpdo"]
    assert len(rpdos) == 2.0 * SYNC_HZ and rpdos[-1]["objects"] == {"0x6040:0": 0x0F, "0x607A:0": target}
    assert any(m["service"] == "sdo_download" and m["index"] == 0x6060 and m["data"] == "08" for m in commands)
    assert any(m["service"] == "nmt" and m["command"] == 0x01 for m in commands)


def _poll(node: BaseNode402, n: int) -> list[tuple[int, int, int]]:
    """What a controller polls by SDO through the mirror: (statusword, mode display, position), n times."""
    return [(node.sdo[0x6041].raw, node.sdo[0x6061].raw, node.sdo[0x6064].raw) for _ in range(n)]


def test_the_twin_takes_the_state_of_a_drive_enabled_before_the_mirror(tmp_path, eds):
    """The real eRob was enabled in CSP by an earlier program: the twin reads its statusword and mode display as the
    mirror starts and is in Operation enabled, CSP before the first frame it forwards. Then the real drive faults
    (supply sag, CiA 402 Fault): the twin has no cause for a fault and stays enabled, and the report flags it. The
    fault reset takes the real drive to Switch on disabled, which the twin takes from the next statusword."""
    launcher, real_launcher = MirrorLauncher(tmp_path), CanLauncher(tmp_path)
    net = canopen.Network()
    try:
        real = real_launcher.start(write_can_rig(tmp_path, "real", actuators=ONE_EROB, model="m6"))
        earlier = connect(canopen.Network(), real.rig.port)
        node = BaseNode402(2, eds[2])
        earlier.add_node(node)
        node.sdo.RESPONSE_TIMEOUT = 3.0
        enable_by_sdo(node, 8)                     # CSP, Operation enabled (CiA 402 modes of operation 8)
        earlier.disconnect()
        logs = tmp_path / "logs"
        bus_extra = (f'real = {{ interface = "slcan", channel = "{real.rig.port}", sleep_after_open = 0 }}\n'
                     f'record = "{logs}"\n')
        twin = launcher.start(write_can_rig(tmp_path, "twin", actuators=ONE_EROB, model="m1", bus_extra=bus_extra))
        connect(net, twin.rig.port)
        node = BaseNode402(2, eds[2])
        net.add_node(node)
        node.sdo.RESPONSE_TIMEOUT = 3.0
        assert all(sw & 0x6F == 0x27 and mode == 8 for sw, mode, _ in _poll(node, 4))   # Operation enabled, CSP
        real.inject(2, "supply_sag", voltage_v=30.0)                     # below the eRob's DC-link minimum
        end = time.monotonic() + 10.0
        while node.sdo[0x6041].raw & 0x4F != 0x08 and time.monotonic() < end:   # Fault
            time.sleep(0.05)
        assert all(sw & 0x4F == 0x08 for sw, _, _ in _poll(node, 4))
        # the supply is back and the controller resets the fault: the real drive goes to Switch on disabled, the
        # twin (enabled, where a controlword with bit 7 set is no command) stays, until the next statusword
        real.clear(2, "supply_sag")
        node.sdo[0x6040].raw = 0x80               # fault reset: a rising edge of bit 7
        while node.sdo[0x6041].raw & 0x4F != 0x40 and time.monotonic() < end:
            time.sleep(0.05)
        assert all(sw & 0x4F == 0x40 for sw, _, _ in _poll(node, 4))    # Switch on disabled
        net.disconnect()
        assert twin.terminate() == 0, twin.stderr()
    finally:
        try:
            launcher.finish()
        finally:
            real_launcher.finish()
    log = read_side_by_side(logs)
    [attach] = [e for e in log["/bus/erob100/events"] if e["reason"] == "attach"]
    assert attach["real"] == {"state": "OPERATION_ENABLED", "mode": 8}
    assert attach["sim_before"]["state"] != "OPERATION_ENABLED"
    assert attach["sim_after"] == {"state": "OPERATION_ENABLED", "mode": 8}
    real_log, sim_log = log["/real/erob100/state"], log["/sim/erob100/state"]
    assert len(real_log) == len(sim_log) >= 7
    assert (sim_log[0]["enable"], sim_log[0]["mode"]) == (True, 8) == (real_log[0]["enable"], real_log[0]["mode"])
    assert real_log[-1]["enable"] is False and sim_log[-1]["enable"] is False
    [divergence] = [e for e in log["/bus/erob100/events"] if e["reason"] == "divergence"]
    assert divergence["real"]["state"] == "SWITCH_ON_DISABLED" and divergence["sim_before"]["state"] == \
        "OPERATION_ENABLED" and divergence["sim_after"]["state"] == "SWITCH_ON_DISABLED"
    doc = report(logs, tmp_path / "report")
    spans = doc["state_disagreements"]
    assert [(s["what"], s["real"], s["sim"]) for s in spans] == [("enable", 0.0, 1.0)]
    assert 0 < spans[0]["start_s"] < spans[0]["end_s"] < doc["rows"][0]["duration_s"]
    assert doc["warnings"] and "enable" in doc["warnings"][0]
