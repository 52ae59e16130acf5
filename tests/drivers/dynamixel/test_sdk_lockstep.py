"""Lock-step rigs driven by the real SDK: the physics advances only on ZeroMQ `step`, so a trajectory read over the bus
can be compared tick by tick with an offline run of the same kernel and firmware model, and the profile generator
can be sampled every millisecond. Expected profile shapes: e-manual §Profile Velocity(112) and §Moving Status(123)
(t1 = 64·V/A ms; Moving Status bits 5..4: 3 trapezoidal, 2 triangular, 1 rectangular, 0 step; bit 1 while the
profile runs; time-based profile: Profile Velocity is the total time in ms)."""

from __future__ import annotations

import pytest

from firmware_models.dynamixel.control_table import load_model
from firmware_models.dynamixel.servo import DynamixelServo
from hil.joint import KernelJoint
from servo_hil.rig import load_rig

from .conftest import CATALOG, IDS, JOINT, A, write_dxl_rig

RATE_HZ = 1000.0


@pytest.fixture(scope="module")
def daemon(module_launcher):
    return module_launcher.start(write_dxl_rig(module_launcher.dir, "sdk-lockstep", fast=True, lockstep=True,
                                               rate_hz=RATE_HZ))


@pytest.fixture(autouse=True)
def clean(daemon, dxl):
    yield
    assert daemon.alive, daemon.stderr()
    daemon.ok("reset")
    daemon.step(1)
    for i in IDS:
        dxl.reboot(i)
        if dxl.read(i, A.DRIVE_MODE) != 0:
            dxl.write(i, A.DRIVE_MODE, 0)


# ------------------------------------------------------------------------------------------------ 9. offline twin
class OfflineRig:
    """The daemon's rig rebuilt offline: `load_rig` (same kernel parameters, dt = 1/rate_hz) and one
    DynamixelServo per actuator on a KernelJoint, built as servo_hil/wiring/dynamixel.py builds them."""

    def __init__(self, rig_path):
        rig, _, self.kernel = load_rig(rig_path)
        assert self.kernel.dt == 1.0 / RATE_HZ
        self.joints = [KernelJoint(self.kernel, j) for j in range(self.kernel.n)]
        self.servo = {}
        for j, a in enumerate(rig.actuators):
            registers = {"ID": a.id, "Baud Rate": 3, **a.registers}     # 3 = 1 Mbps, the rig's bus baud
            self.servo[a.id] = DynamixelServo(load_model(a.catalog), self.joints[j], registers)

    def write(self, dxl_id: int, item: tuple[int, int], value: int) -> None:
        reply = self.servo[dxl_id].write(item[0], (value & ((1 << (8 * item[1])) - 1)).to_bytes(item[1], "little"))
        assert reply.error == 0

    def read(self, dxl_id: int, item: tuple[int, int]) -> int:
        reply = self.servo[dxl_id].read(*item)
        assert reply.error == 0
        return int.from_bytes(reply.params, "little", signed=True)

    def step(self, n: int) -> None:
        for _ in range(n):
            self.kernel.step([jt.u for jt in self.joints], [jt.enable for jt in self.joints], 0.0)


TWIN_ITEMS = (A.PRESENT_POSITION, A.PRESENT_VELOCITY, A.PRESENT_CURRENT, A.PRESENT_PWM, A.POSITION_TRAJECTORY,
              A.VELOCITY_TRAJECTORY, A.MOVING_STATUS)


def test_goal_step_matches_offline_kernel(daemon, dxl):
    """Torque on + Goal Position over the SDK, the loop stepped in batches over ZeroMQ: Present Position (and
    the other Present items) equal the offline KernelJoint run of the same rig, exactly."""
    twin = OfflineRig(daemon.rig.path)
    assert {i: twin.servo[i].spec.name for i in IDS} == CATALOG
    writes = [(A.TORQUE_ENABLE, 1)]
    goals = {1: 3000, 2: 1200, 3: 2900, 4: 1000}
    for i in IDS:
        for item, v in writes:
            dxl.write(i, item, v)
            twin.write(i, item, v)
        for side in (dxl, twin):
            side.write(i, A.GOAL_POSITION, goals[i])
    # a profiled move on two of them half-way through
    compared = 0
    for batch in range(30):
        if batch == 12:
            for i in (2, 3):
                for item, v in ((A.PROFILE_ACCELERATION, 40), (A.PROFILE_VELOCITY, 120), (A.GOAL_POSITION, 2048)):
                    dxl.write(i, item, v)
                    twin.write(i, item, v)
        reply = daemon.step(25)
        twin.step(25)
        for i in IDS:
            for item in TWIN_ITEMS:
                assert dxl.read(i, item, signed=True) == twin.read(i, item), f"ID {i} item {item} batch {batch}"
                compared += 1
            st = twin.kernel.get_state(IDS.index(i))
            assert reply["state"][JOINT[i]]["position"] == st["theta"], f"ID {i} batch {batch}: θ [rad]"
    assert compared == 30 * 4 * len(TWIN_ITEMS)
    # and the servos really moved towards their goals
    assert abs(dxl.read(1, A.PRESENT_POSITION, signed=True) - 2048) > 500


# ------------------------------------------------------------------------------------------------ 10. profiles
def move(daemon, dxl, dxl_id, pa, pv, distance, ticks, every=1):
    """Write the profile and Goal Position = Goal Position + distance; sample (tick, Velocity Trajectory,
    Moving Status, Position Trajectory, Moving) every `every` ticks for `ticks` ticks."""
    dxl.write(dxl_id, A.PROFILE_ACCELERATION, pa)
    dxl.write(dxl_id, A.PROFILE_VELOCITY, pv)
    goal = dxl.read(dxl_id, A.GOAL_POSITION, signed=True) + distance
    dxl.write(dxl_id, A.GOAL_POSITION, goal)
    out = []
    for k in range(every, ticks + 1, every):
        daemon.step(every)
        data, comm, err = dxl.try_read(dxl_id, 120, 24)      # Realtime Tick .. Position Trajectory in one read
        assert (comm, err) == (0, 0)
        raw = bytes(data)
        vt = int.from_bytes(raw[136 - 120:140 - 120], "little", signed=True)
        pt = int.from_bytes(raw[140 - 120:144 - 120], "little", signed=True)
        out.append((k, vt, raw[123 - 120], pt, raw[122 - 120]))
    return goal, out


@pytest.mark.parametrize("dxl_id", [1, 3])
def test_trapezoidal_profile(daemon, dxl, dxl_id):
    v, a = 100, 20
    t1 = 64 * v / a                                                      # 320 ms
    dxl.write(dxl_id, A.TORQUE_ENABLE, 1)
    goal, s = move(daemon, dxl, dxl_id, a, v, 1500, int(t1) + 20)
    ramp = [(k, vt) for k, vt, *_ in s if k <= t1 - 2]
    for k, vt in ramp:                                                   # linear rise
        assert abs(vt - v * k / t1) <= 1.0, (k, vt)
    reached = next(k for k, vt, *_ in s if vt >= v)
    assert abs(reached - t1) <= 2, f"Velocity Trajectory reached {v} at {reached} ms, t1 = {t1} ms"
    assert all(vt == v for k, vt, *_ in s if k >= t1 + 2), "plateau at Profile Velocity"
    assert all(ms & 0x30 == 0x30 and ms & 0x02 and moving for _, _, ms, _, moving in s), "trapezoidal, running"
    # to the end: the trajectory lands on the goal, bit 1 clears, the type stays reported
    daemon.step(1500)
    data, _, _ = dxl.try_read(dxl_id, 120, 24)
    raw = bytes(data)
    assert int.from_bytes(raw[16:20], "little", signed=True) == 0
    assert int.from_bytes(raw[20:24], "little", signed=True) == goal
    assert raw[3] & 0x02 == 0


def test_triangular_profile(daemon, dxl):
    v, a = 100, 20
    dxl.write(1, A.TORQUE_ENABLE, 1)
    goal, s = move(daemon, dxl, 1, a, v, 100, 320, every=4)
    peak = max(vt for _, vt, *_ in s)
    assert 0 < peak < v, "too short to reach Profile Velocity"
    running = [ms for _, _, ms, _, _ in s if ms & 0x02]
    assert running and all(ms & 0x30 == 0x20 for ms in running), [hex(m) for m in running]
    assert s[-1][3] == goal and not s[-1][2] & 0x02


def test_rectangular_profile(daemon, dxl):
    dxl.write(1, A.TORQUE_ENABLE, 1)
    goal, s = move(daemon, dxl, 1, 0, 100, 300, 230, every=5)
    _, vt, ms, _, _ = s[0]
    assert vt == 100, "no acceleration phase"
    assert ms & 0x32 == 0x12, hex(ms)
    assert s[-1][3] == goal and s[-1][1] == 0 and not s[-1][2] & 0x02


def test_step_profile(daemon, dxl):
    dxl.write(1, A.TORQUE_ENABLE, 1)
    goal, s = move(daemon, dxl, 1, 20, 0, -300, 10, every=1)
    for _, vt, ms, pt, _ in s:
        assert pt == goal, "the goal is applied at once"
        assert ms & 0x32 == 0, hex(ms)
        assert vt == 0


@pytest.mark.parametrize("dxl_id", [1, 3, 4])
def test_time_based_profile(daemon, dxl, dxl_id):
    """Drive Mode bit 2: Profile Velocity = total move time 1000 ms, Profile Acceleration = t1 300 ms."""
    dxl.write(dxl_id, A.DRIVE_MODE, 4)
    dxl.write(dxl_id, A.TORQUE_ENABLE, 1)
    goal, s = move(daemon, dxl, dxl_id, 300, 1000, 800, 980, every=20)
    assert all(ms & 0x02 for _, _, ms, _, _ in s), "still running before 1000 ms"
    peak_at = max(s, key=lambda r: r[1])[0]
    assert 300 <= peak_at <= 700
    end = None
    for k in range(981, 1011):
        daemon.step(1)
        ms = dxl.read(dxl_id, A.MOVING_STATUS)
        if end is None and not ms & 0x02:
            end = k
    assert end is not None and abs(end - 1000) <= 2, f"the move ended at {end} ms"
    assert dxl.read(dxl_id, A.POSITION_TRAJECTORY, signed=True) == goal
