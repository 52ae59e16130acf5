"""Dynamixel Protocol 1.0 servos through unchanged rustypot 1.13.1 (`AxPyController`, `MxPyController`, PyPI
rustypot) on the pty of a running daemon, and a rig the servos cannot run: one line, exit 2. Expected values: ROBOTIS
e-manual (dynamixel1_rig.py), never the code under test."""

from __future__ import annotations

import math
import subprocess
import time

import pytest
import rustypot

from tests.daemon_process import SERVO_HIL, assert_one_cli_line
from tests.drivers.protocol1.dynamixel1_rig import AX, MX64, MX106, Dxl1Launcher, write_rig

BAUD = 1_000_000
AX_RAD = math.radians(300 / 1024)        # AX-12A position unit (§Present Position: 0..1023 over 300°)
MX_RAD = 2 * math.pi / 4096              # MX position unit (§Goal Position: 0.088°)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    launcher = Dxl1Launcher(tmp_path_factory.mktemp("dxl1rp"))
    d = launcher.start(write_rig(launcher.dir, "dxl1_rustypot"))
    yield d
    launcher.finish()


def settle(read, goal: float, tol: float, timeout_s: float = 5.0) -> float:
    """Poll `read()` until it is within `tol` of `goal`; its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if abs(value - goal) <= tol or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_ax_controller(daemon):
    c = rustypot.AxPyController(daemon.rig.port, BAUD, 0.1)
    try:
        assert c.read_model_number(AX) == [12]
        assert c.read_cw_compliance_slope(AX) == [32] and c.read_ccw_compliance_margin(AX) == [1]
        assert c.read_punch(AX) == [32]
        assert c.read_max_torque(AX) == c.read_torque_limit(AX) == [1023]
        c.write_torque_enable(AX, True)
        c.write_goal_position(AX, 0.5)
        pos = settle(lambda: c.read_present_position(AX)[0], 0.5, 3 * AX_RAD)
        assert pos == pytest.approx(0.5, abs=3 * AX_RAD)
        assert c.read_raw_present_position(AX)[0] == pytest.approx(512 + 0.5 / AX_RAD, abs=3)
        assert c.read_present_temperature(AX) == [25]            # the catalog's 25 °C ambient, at rest
        c.sync_write_goal_position([AX], [-0.3])
        assert settle(lambda: c.read_present_position(AX)[0], -0.3, 3 * AX_RAD) == pytest.approx(-0.3, abs=3 * AX_RAD)
    finally:
        c.close()


def test_ax_wheel_mode(daemon):
    # e-manual §CW/CCW Angle Limit: both 0 = wheel mode; §Moving Speed: output 0.1 %, bit 10 = CW
    c = rustypot.AxPyController(daemon.rig.port, BAUD, 0.1)
    try:
        c.write_raw_cw_angle_limit(AX, 0)
        c.write_raw_ccw_angle_limit(AX, 0)
        c.write_moving_speed(AX, 1024 + 800)
        time.sleep(0.5)
        speed = c.read_present_speed(AX)[0]
        assert speed >> 10 == 1 and speed & 0x3FF == pytest.approx(800, abs=2)   # the output, CW
        assert c.read_torque_enable(AX) == [True]          # the goal write turned the torque on
        c.write_moving_speed(AX, 0)
        c.write_raw_ccw_angle_limit(AX, 1023)
    finally:
        c.close()


def test_ax_has_no_sync_read(daemon):
    # rustypot's Protocol 1.0 sync read sends instruction 0x82, which Protocol 1.0 does not have (e-manual
    # Protocol 1.0 §Instruction): sent to the broadcast ID it gets no answer, and the call times out
    c = rustypot.AxPyController(daemon.rig.port, BAUD, 0.05)
    try:
        with pytest.raises(Exception, match="timed out"):
            c.sync_read_present_position([AX])
        assert c.read_model_number(AX) == [12]                   # the bus still answers
    finally:
        c.close()


def test_mx_controller(daemon):
    m = rustypot.MxPyController(daemon.rig.port, BAUD, 0.1)
    try:
        assert m.read_model_number(MX64) == [310] and m.read_model_number(MX106) == [320]
        assert m.read_p_gain(MX64) == [32] and m.read_i_gain(MX64) == [0] and m.read_d_gain(MX64) == [0]
        m.write_p_gain(MX106, 64)
        assert m.read_p_gain(MX106) == [64]
        m.write_torque_enable(MX64, True)
        m.write_goal_position(MX64, 0.6)
        assert settle(lambda: m.read_present_position(MX64)[0], 0.6, 8 * MX_RAD) == pytest.approx(0.6, abs=8 * MX_RAD)
        m.sync_write_goal_position([MX64, MX106], [-0.2, 0.3])
        assert m.read_goal_position(MX106)[0] == pytest.approx(0.3, abs=MX_RAD)
        assert settle(lambda: m.read_present_position(MX106)[0], 0.3, 8 * MX_RAD) == pytest.approx(0.3,
                                                                                                    abs=8 * MX_RAD)
        assert m.read_realtime_tick(MX64)[0] > 0
    finally:
        m.close()


# ------------------------------------------------------------------------------------------ rigs refused
@pytest.mark.parametrize(("edit", "needles"), [
    (lambda t: t.replace("id = 2\n", "id = 1\n"), ("id 1 is used twice", "'ax'")),
    (lambda t: t.replace("baud = 1000000", "baud = 4000000"), ("baud 4000000", "AX-12A")),
    (lambda t: t.replace('catalog = "mx106"\nmodel = "m6"', 'catalog = "xm430_w350"'), ("dynamixel1", "xm430_w350")),
])
def test_a_rig_the_servos_cannot_run_is_one_line_exit_2(tmp_path, edit, needles):
    rig = write_rig(tmp_path, "bad")
    rig.path.write_text(edit(rig.path.read_text()))
    res = subprocess.run([*SERVO_HIL, "run", str(rig.path), "--port", rig.port], capture_output=True, text=True,
                         timeout=60)
    assert_one_cli_line(res, *needles)
