"""The AX-12A's position control is its compliance curve (ROBOTIS e-manual AX-12A §Compliance Margin, §Compliance
Slope, §Punch): no output while the error lies within the margin, Punch at the margin's edge, the full output a
slope's representative value beyond it, each side with its own margin and slope. Driven by dynamixel-sdk
PacketHandler(1.0) on a lock-step daemon, so that the output read back belongs to a known tick."""

from __future__ import annotations

import dynamixel_sdk as sdk
import pytest

from tests.drivers.protocol1.dynamixel1_rig import (
    AX,
    GOAL,
    PRESENT,
    TORQUE_ENABLE,
    Dxl1Launcher,
    SlackPortHandler,
    write_rig,
)

CW_MARGIN, CCW_MARGIN, CW_SLOPE, CCW_SLOPE = (26, 1), (27, 1), (28, 1), (29, 1)    # AX-12A control table
PRESENT_LOAD, PUNCH = (40, 2), (48, 2)
CENTER = 512            # Present Position at power-up: the pendulum hangs at 0 rad (e-manual §Goal Position: 150°)
CW_BIT = 0x400          # Present Load bit 10: the output turns CW (e-manual §Present Load)


@pytest.fixture
def bus(tmp_path):
    launcher = Dxl1Launcher(tmp_path)
    daemon = launcher.start(write_rig(tmp_path, "ax_compliance", lockstep=True))
    port = SlackPortHandler(daemon.rig.port)
    assert port.openPort() and port.setBaudRate(1_000_000)
    yield daemon, port, sdk.PacketHandler(1.0)
    port.closePort()
    launcher.finish()


def write(port, ph, item: tuple[int, int], value: int) -> None:
    fn = ph.write1ByteTxRx if item[1] == 1 else ph.write2ByteTxRx
    assert fn(port, AX, item[0], value) == (sdk.COMM_SUCCESS, 0)


def read(port, ph, item: tuple[int, int]) -> int:
    value, comm, error = (ph.read1ByteTxRx if item[1] == 1 else ph.read2ByteTxRx)(port, AX, item[0])
    assert (comm, error) == (sdk.COMM_SUCCESS, 0)
    return value


def test_inside_the_margin_the_output_is_zero(bus):
    daemon, port, ph = bus
    write(port, ph, CW_MARGIN, 10)
    write(port, ph, CCW_MARGIN, 10)
    write(port, ph, TORQUE_ENABLE, 1)
    assert read(port, ph, PRESENT) == CENTER
    for goal in (CENTER + 6, CENTER - 6, CENTER + 10, CENTER - 10):
        write(port, ph, GOAL, goal)
        for _ in range(4):
            st = daemon.ok("step", n=50)["state"]["ax12a"]
            assert st["voltage"] == 0.0, (goal, st)          # no output at all: the margin holds
            assert read(port, ph, PRESENT_LOAD) == 0
        assert read(port, ph, PRESENT) == CENTER             # and the shaft is where it was
    # one unit beyond the margin the servo drives, and stops once the error is inside it again
    write(port, ph, GOAL, CENTER + 40)
    st = daemon.ok("step", n=1)["state"]["ax12a"]
    assert st["voltage"] > 0.0
    daemon.ok("step", n=1500)
    present = read(port, ph, PRESENT)
    assert CENTER + 40 - 11 <= present <= CENTER + 40, present
    assert present > CENTER + 20


def test_punch_at_the_margin_edge_and_the_slope_beyond_it(bus):
    daemon, port, ph = bus
    write(port, ph, PUNCH, 300)
    write(port, ph, CW_MARGIN, 4)
    write(port, ph, CW_SLOPE, 70)            # representative value 64 (e-manual §Compliance Slope: 64..127 → 64)
    write(port, ph, CCW_MARGIN, 2)
    write(port, ph, CCW_SLOPE, 20)           # 16..31 → 16
    write(port, ph, TORQUE_ENABLE, 1)
    assert read(port, ph, PRESENT) == CENTER
    # the goal 12 units CCW of the shaft: the shaft is 8 units beyond the CW margin. Moving Speed 0 makes the
    # goal the setpoint at once, so the first tick's output is Punch + (1023 − Punch)·8/64 in 0.1 % units
    write(port, ph, GOAL, CENTER + 12)
    daemon.ok("step", n=1)
    assert read(port, ph, PRESENT_LOAD) == round(300 + 723 * 8 / 64)          # 390, CCW
    # back to the centre first (the error within the margins again: no output), then the goal 6 units CW of the
    # shaft: 4 beyond the CCW margin, on the CCW slope
    write(port, ph, GOAL, CENTER)
    daemon.ok("step", n=1500)
    start = read(port, ph, PRESENT)
    assert abs(start - CENTER) <= 4
    write(port, ph, GOAL, start - 6)
    daemon.ok("step", n=1)
    assert read(port, ph, PRESENT_LOAD) == CW_BIT | round(300 + 723 * 4 / 16)  # 481, CW


def test_a_larger_punch_drives_harder_at_the_same_error(bus):
    daemon, port, ph = bus
    loads = []
    for punch in (32, 500):
        write(port, ph, PUNCH, punch)
        write(port, ph, TORQUE_ENABLE, 1)
        write(port, ph, GOAL, read(port, ph, PRESENT) + 3)    # 2 units beyond the power-up margin 1, slope 32
        daemon.ok("step", n=1)
        loads.append(read(port, ph, PRESENT_LOAD))
        write(port, ph, TORQUE_ENABLE, 0)
        daemon.ok("step", n=500)
    assert loads == [round(32 + 991 * 2 / 32), round(500 + 523 * 2 / 32)], loads
