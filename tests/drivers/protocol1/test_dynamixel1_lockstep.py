"""A lock-step Protocol 1.0 rig driven by dynamixel-sdk 4.1.0: the physics advances only on ZeroMQ `step`, so what
the servos report over the bus can be compared tick by tick with an offline run of the same kernel and firmware
model, and an MX-64's goal step with `servo-hil simulate` of the catalog's `mx64`: the daemon's path (pty, bus, live
joints, command ring) adds nothing and loses nothing."""

from __future__ import annotations

import math

import dynamixel_sdk as sdk
import pytest

from firmware_models.dynamixel.protocol1.servo import Dynamixel1Servo
from firmware_models.dynamixel.protocol1.table import load_model
from hil.joint import KernelJoint
from servo_hil.rig import load_rig
from tests.daemon_process import simulate_goal
from tests.drivers.protocol1.dynamixel1_rig import (
    AX,
    GOAL,
    MOVING_SPEED,
    MX64,
    MX106,
    SERVOS,
    TORQUE_ENABLE,
    Dxl1Launcher,
    SlackPortHandler,
    write_rig,
)

PRESENT_BLOCK = (36, 8)     # Present Position, Speed, Load, Voltage, Temperature in one read
TICKS = 400                 # 0.4 s at 1 kHz: the MX-64's rise, at full duty first, and its settling
MX64_GOAL = 3000            # a 83.7° step from the power-up position 2048
# the MX-64 of the daemon's rig (dynamixel1_rig.SERVOS), offline; the daemon's loop steps at 1 kHz with Euler
OFFLINE_MX64 = """\
[actuator]
catalog = "mx64"
model = "m6"
[load]
mass = 0.5
length = 0.1
[sim]
dt = 0.001
"""


class OfflineRig:
    """The daemon's rig rebuilt offline: `load_rig` (same kernel parameters) and one Dynamixel1Servo per actuator
    on a KernelJoint, as servo_hil/wiring/dynamixel1.py builds them (Baud Rate 1 = 1 Mbps)."""

    def __init__(self, rig_path):
        rig, _, self.kernel = load_rig(rig_path)
        self.joints = [KernelJoint(self.kernel, j) for j in range(self.kernel.n)]
        self.servo = {a.id: Dynamixel1Servo(load_model(a.catalog), self.joints[j], {"ID": a.id, "Baud Rate": 1})
                      for j, a in enumerate(rig.actuators)}

    def write(self, dxl_id: int, item: tuple[int, int], value: int) -> None:
        assert self.servo[dxl_id].write(item[0], value.to_bytes(item[1], "little")).error == 0

    def read(self, dxl_id: int, address: int, length: int) -> bytes:
        reply = self.servo[dxl_id].read(address, length)
        assert reply.error == 0
        return reply.params

    def step(self, n: int) -> None:
        for _ in range(n):
            self.kernel.step([jt.u for jt in self.joints], [jt.enable for jt in self.joints], 0.0)


@pytest.fixture
def daemon(tmp_path):
    launcher = Dxl1Launcher(tmp_path)
    yield launcher.start(write_rig(tmp_path, "dxl1_lockstep", lockstep=True))
    launcher.finish()


def test_goal_steps_match_the_offline_kernel(daemon):
    port = SlackPortHandler(daemon.rig.port)
    assert port.openPort() and port.setBaudRate(1_000_000)
    ph = sdk.PacketHandler(1.0)
    twin = OfflineRig(daemon.rig.path)
    assert {i: s.spec.name for i, s in twin.servo.items()} == {s[2]: s[1] for s in SERVOS}

    def write(dxl_id: int, item: tuple[int, int], value: int) -> None:
        fn = ph.write1ByteTxRx if item[1] == 1 else ph.write2ByteTxRx
        assert fn(port, dxl_id, item[0], value) == (sdk.COMM_SUCCESS, 0)
        twin.write(dxl_id, item, value)

    try:
        for dxl_id, goal in ((AX, 800), (MX64, 3000), (MX106, 1200)):
            write(dxl_id, TORQUE_ENABLE, 1)
            write(dxl_id, GOAL, goal)
        compared = 0
        for batch in range(24):
            if batch == 10:                       # a speed-limited move back on the MX-64 (§Moving Speed)
                write(MX64, MOVING_SPEED, 150)
                write(MX64, GOAL, 2048)
            reply = daemon.ok("step", n=25)
            twin.step(25)
            for j, (joint, _, dxl_id, _) in enumerate(SERVOS):
                data, comm, error = ph.readTxRx(port, dxl_id, *PRESENT_BLOCK)
                assert (comm, error) == (sdk.COMM_SUCCESS, 0)
                assert bytes(data) == twin.read(dxl_id, *PRESENT_BLOCK), f"ID {dxl_id} batch {batch}"
                assert reply["state"][joint]["position"] == twin.kernel.get_state(j)["theta"], f"{joint} θ"
                compared += 1
        assert compared == 24 * 3
        # and the servos moved: the AX-12A reached its goal
        assert abs(int.from_bytes(twin.read(AX, 36, 2), "little") - 800) <= 4
    finally:
        port.closePort()


def test_an_mx64_goal_step_over_the_bus_equals_simulate_tick_for_tick(daemon, tmp_path):
    """The MX-64 runs the Dynamixel firmware law (`dxl`: its P Gain 32, I and D 0, Moving Speed 0), `simulate` of
    catalog `mx64` bam's law (`dxl_pwm`: kp 32, error gain 0.158); the two are one law at these registers, the
    saturated rise included (tests/hil), so Present Position read over the bus after each tick must be the
    simulated encoder sample of that tick to the count, and the shaft angles equal to the bit."""
    port = SlackPortHandler(daemon.rig.port)
    assert port.openPort() and port.setBaudRate(1_000_000)
    ph = sdk.PacketHandler(1.0)
    joint = next(s[0] for s in SERVOS if s[2] == MX64)
    rad_per_count = 2 * math.pi / 4096      # MX-64 (1.0) §Goal Position: 0.088° per count, 2048 = centre
    try:
        p0, comm, error = ph.read2ByteTxRx(port, MX64, PRESENT_BLOCK[0])
        assert (comm, error) == (sdk.COMM_SUCCESS, 0) and p0 == 2048
        theta0 = daemon.ok("status")["status"]["actuators"][joint]["position"]
        assert ph.write1ByteTxRx(port, MX64, TORQUE_ENABLE[0], 1) == (sdk.COMM_SUCCESS, 0)
        assert ph.write2ByteTxRx(port, MX64, GOAL[0], MX64_GOAL) == (sdk.COMM_SUCCESS, 0)
        bus, theta = [], []
        for k in range(TICKS):
            st = daemon.ok("step", n=1)["state"][joint]
            if k == 0:
                u = st["goal"]
                assert st["enable"] and abs(u - (theta0 + (MX64_GOAL - p0) * rad_per_count)) < 1e-12, st
            pos, comm, error = ph.read2ByteTxRx(port, MX64, PRESENT_BLOCK[0])
            assert (comm, error) == (sdk.COMM_SUCCESS, 0), f"tick {k + 1}"
            bus.append(pos)
            theta.append(st["position"])
    finally:
        port.closePort()

    out = simulate_goal(tmp_path, OFFLINE_MX64, u, TICKS + 1)
    assert out[0]["theta"] == theta0
    # a read after tick k+1 holds the sample step k took (hil.joint.encoder_reading): OUT.csv row k's theta_meas
    sim = [2048 + round((r["theta_meas"] - theta0) / rad_per_count) for r in out[:-1]]
    for k in range(TICKS):
        assert bus[k] == sim[k], f"tick {k + 1}: Present Position {bus[k]} over the bus, {sim[k]} simulated"
    d_theta = max(abs(a - r["theta"]) for a, r in zip(theta, out[1:], strict=True))
    print(f"\n{TICKS} ticks: Present Position equal at every tick; max |Δθ| {d_theta:.3g} rad")
    assert d_theta <= 1e-12
    # a real move: the rise at full duty, then close to the goal
    assert bus[0] < bus[40] < bus[120] and abs(bus[-1] - MX64_GOAL) <= 4, bus[::25]
