"""Feetech STS3215 registers that shape the motion, driven by scservo_sdk on a lock-step daemon (the physics advances
only on ZeroMQ `step`, 1 ms a tick): Goal_Time (44) as a position move's duration, the Phase (18) direction and
speed-unit bits, Minimum_Startup_Force (24) and Angular_Resolution (30), each asserted by what the shaft does (Feetech
STS memory table; docs/feetech.md)."""

from __future__ import annotations

import math

import pytest
import scservo_sdk as scs

from tests.drivers.protocol1.conftest import ScsSlackPort, write_sts_rig

# Feetech STS memory table addresses
PHASE, MIN_STARTUP_FORCE, ANGULAR_RESOLUTION = 18, 24, 30
TORQUE_ENABLE, ACCELERATION, GOAL_POSITION, GOAL_TIME, GOAL_VELOCITY = 40, 41, 42, 44, 46
PRESENT_POSITION = 56
STEP_RAD = 2 * math.pi / 4096          # one STS3215 encoder step
PHASE_DEFAULT = 12                     # bits 2 (speed in step/s) and 3 (Goal_Velocity 0 = the maximum)
TICK_S = 1e-3


@pytest.fixture
def start(module_launcher):
    """`start(registers)`: a lock-step daemon with one STS3215 (ID 1) whose saved EEPROM holds `registers`, and an
    scservo_sdk link to it: (daemon, bus) with bus.w1/w2/r2(address[, value])."""
    running = []

    def go(registers: str | None = None):
        rig = write_sts_rig(module_launcher.dir, f"regs{len(running)}", ids=(1,), fast=True, lockstep=True,
                            registers={1: registers} if registers else None)
        daemon = module_launcher.start(rig)
        port = ScsSlackPort(rig.port)
        assert port.openPort() and port.setBaudRate(1_000_000)
        running.append((daemon, port))
        return daemon, Bus(port, scs.PacketHandler(0))

    yield go
    for daemon, port in running:
        port.closePort()
        daemon.terminate()


class Bus:
    def __init__(self, port, ph):
        self.port, self.ph = port, ph

    def w1(self, address: int, value: int) -> None:
        assert self.ph.write1ByteTxRx(self.port, 1, address, value) == (scs.COMM_SUCCESS, 0)

    def w2(self, address: int, value: int) -> None:
        assert self.ph.write2ByteTxRx(self.port, 1, address, value) == (scs.COMM_SUCCESS, 0)

    def r2(self, address: int) -> int:
        value, comm, error = self.ph.read2ByteTxRx(self.port, 1, address)
        assert (comm, error) == (scs.COMM_SUCCESS, 0)
        return value


def arrival_s(daemon, bus, goal: int, within: int = 5, limit_s: float = 2.0) -> float:
    """Simulated time [s] until Present_Position first comes within `within` steps of `goal`, read every 2 ticks."""
    for k in range(1, int(limit_s / TICK_S / 2) + 1):
        daemon.ok("step", n=2)
        if abs(bus.r2(PRESENT_POSITION) - goal) <= within:
            return 2 * k * TICK_S
    raise AssertionError(f"Present_Position never came within {within} steps of {goal} in {limit_s} s")


def test_goal_time_is_the_duration_of_a_position_move(start):
    moves = {}
    for name, time_ms, velocity, acc in (("max speed", 0, 0, 0), ("500 ms", 500, 0, 0), ("500 ms, acc", 500, 0, 100),
                                         ("velocity first", 500, 1600, 0)):
        daemon, bus = start()
        bus.w2(GOAL_TIME, time_ms)
        bus.w2(GOAL_VELOCITY, velocity)
        bus.w1(ACCELERATION, acc)
        bus.w1(TORQUE_ENABLE, 1)
        p0 = bus.r2(PRESENT_POSITION)
        bus.w2(GOAL_POSITION, p0 + 400)
        moves[name] = arrival_s(daemon, bus, p0 + 400)
        daemon.terminate()
    print(f"\narrival within 5 steps of a 400-step move: {moves}")
    # the shaft follows the setpoint ~30 ms behind; without a time the move runs at 3400 step/s (118 ms)
    assert moves["max speed"] < 0.2
    assert 0.50 <= moves["500 ms"] <= 0.56
    # with Acceleration 100 (10 000 step/s²) the trapezoid cruises at 1000 step/s: 0.4 s + 0.1 s of ramps
    assert 0.48 <= moves["500 ms, acc"] <= 0.56
    # a Goal_Velocity takes precedence: 400 steps at 1600 step/s take 250 ms
    assert 0.25 <= moves["velocity first"] <= 0.31


def test_goal_time_move_is_linear_in_time(start):
    daemon, bus = start()
    bus.w2(GOAL_TIME, 500)
    bus.w1(TORQUE_ENABLE, 1)
    p0 = bus.r2(PRESENT_POSITION)
    bus.w2(GOAL_POSITION, p0 + 400)
    daemon.ok("step", n=250)
    half = bus.r2(PRESENT_POSITION) - p0
    daemon.ok("step", n=125)
    three_quarters = bus.r2(PRESENT_POSITION) - p0
    # 0.8 step/ms at a constant setpoint speed: 200 steps at 250 ms, 300 at 375 ms, less the shaft's lag
    assert 150 <= half <= 200 and 250 <= three_quarters <= 300, (half, three_quarters)
    assert three_quarters - half == pytest.approx(100, abs=8)


def test_phase_bits_0_and_7_reverse_the_servo(start):
    daemon, bus = start()
    bus.w1(TORQUE_ENABLE, 1)
    bus.w2(GOAL_POSITION, 2048 + 300)
    daemon.ok("step", n=600)
    p = bus.r2(PRESENT_POSITION)
    theta = daemon.ok("status")["status"]["actuators"]["j0"]["position"]
    assert abs(p - 2348) <= 2 and theta > 0
    # Phase 12 + 1 + 128 (memory table: "runs in reverse: 128 + 1 = 129"): the same shaft reads mirrored about 2048
    bus.w1(PHASE, PHASE_DEFAULT | 0x81)
    assert bus.r2(PRESENT_POSITION) == (4096 - p) % 4096
    # and a goal above it turns the shaft the other way: Present_Position rises while θ falls
    mirrored = bus.r2(PRESENT_POSITION)
    bus.w2(GOAL_POSITION, mirrored + 200)
    daemon.ok("step", n=600)
    assert abs(bus.r2(PRESENT_POSITION) - (mirrored + 200)) <= 2
    assert daemon.ok("status")["status"]["actuators"]["j0"]["position"] == pytest.approx(theta - 200 * STEP_RAD,
                                                                                        abs=3 * STEP_RAD)


@pytest.mark.parametrize("bit", [0x01, 0x80])
def test_one_direction_bit_alone_turns_the_loop_positive(start, bit):
    # bit 0 reverses the drive, bit 7 the feedback: either alone drives the shaft away from its goal
    daemon, bus = start()
    bus.w1(PHASE, PHASE_DEFAULT | bit)
    bus.w1(TORQUE_ENABLE, 1)
    p0 = bus.r2(PRESENT_POSITION)
    bus.w2(GOAL_POSITION, p0 + 50)
    daemon.ok("step", n=100)
    error = [abs(bus.r2(PRESENT_POSITION) - (p0 + 50))]
    daemon.ok("step", n=100)
    error.append(abs(bus.r2(PRESENT_POSITION) - (p0 + 50)))
    assert 50 < error[0] < error[1], error


def test_phase_bit_2_sets_the_speed_unit(start):
    moved = {}
    for phase in (PHASE_DEFAULT, PHASE_DEFAULT & ~0x04):
        daemon, bus = start()
        bus.w1(PHASE, phase)
        bus.w2(GOAL_VELOCITY, 20)               # 20 step/s with bit 2, else 20 × 50 = 1000 step/s
        bus.w1(TORQUE_ENABLE, 1)
        p0 = bus.r2(PRESENT_POSITION)
        bus.w2(GOAL_POSITION, p0 + 400)
        daemon.ok("step", n=300)
        moved[phase] = bus.r2(PRESENT_POSITION) - p0
        daemon.terminate()
    assert moved[PHASE_DEFAULT] <= 8                                # 20 step/s: 6 steps in 0.3 s
    assert 230 <= moved[PHASE_DEFAULT & ~0x04] <= 300, moved      # 1000 step/s: 300 steps less the lag


def test_minimum_startup_force_starts_a_shaft_held_by_friction(start):
    # a weak P and no dead zone: 5 steps of error give ~1 % duty, which the gearbox's friction holds
    daemon, bus = start("P_Coefficient = 8, D_Coefficient = 0, CW_Dead_Zone = 0, CCW_Dead_Zone = 0, "
                        "Minimum_Startup_Force = 0")
    bus.w1(TORQUE_ENABLE, 1)
    p0 = bus.r2(PRESENT_POSITION)
    bus.w2(GOAL_POSITION, p0 + 5)
    daemon.ok("step", n=500)
    assert bus.r2(PRESENT_POSITION) == p0                    # held off its goal
    bus.w2(MIN_STARTUP_FORCE, 100)                           # 10 % of the locked-rotor output
    daemon.ok("step", n=500)
    assert abs(bus.r2(PRESENT_POSITION) - (p0 + 5)) <= 1     # started, and on its goal


def test_angular_resolution_multiplies_the_position_unit(start):
    daemon, bus = start()
    theta0 = daemon.ok("status")["status"]["actuators"]["j0"]["position"]
    bus.w1(PHASE, PHASE_DEFAULT | 0x10)          # bit 4: the full angle, not one turn folded
    bus.w1(ANGULAR_RESOLUTION, 4)                # a position unit of 4 encoder steps: 4 turns in 4096 units
    assert bus.r2(PRESENT_POSITION) == 2048 + round(theta0 / (4 * STEP_RAD))
    bus.w1(TORQUE_ENABLE, 1)
    bus.w2(GOAL_POSITION, 2048 + 1024)           # 1024 units of 4 steps: one turn of the shaft
    daemon.ok("step", n=2500)
    theta = daemon.ok("status")["status"]["actuators"]["j0"]["position"]
    assert theta == pytest.approx(2 * math.pi, abs=8 * STEP_RAD)
    assert abs(bus.r2(PRESENT_POSITION) - (2048 + 1024)) <= 2
