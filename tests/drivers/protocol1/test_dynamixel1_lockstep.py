"""A lock-step Protocol 1.0 rig driven by dynamixel-sdk 4.1.0: the physics advances only on ZeroMQ `step`, so what
the servos report over the bus can be compared tick by tick with an offline run of the same kernel and firmware
model: the daemon's path (pty, bus, live joints, command ring) adds nothing and loses nothing."""

from __future__ import annotations

import dynamixel_sdk as sdk
import pytest

from firmware_models.dynamixel.protocol1.servo import Dynamixel1Servo
from firmware_models.dynamixel.protocol1.table import load_model
from hil.joint import KernelJoint
from servo_hil.rig import load_rig
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
