"""A goal step of an emulated STS3215, driven by scservo_sdk on a lock-step daemon, against `servo-hil simulate` of
the same actuator: the bus path (pty, FeetechServo, the loop's command ring) adds nothing to the physics.

The servo runs the firmware law `sts`; `simulate` of catalog `sts3215` runs bam's law `sts_pwm`. With P 32, I 0,
D 0, Goal_Velocity 0 (3400 step/s), Acceleration 0 and no dead zone the two give the same bits while the torque is
on (tests/hil/test_kernel_feetech.py), so the trajectories must agree to the last bit, the Present_Position counts
exactly.
"""

from __future__ import annotations

import math

import pytest
import scservo_sdk as scs

from firmware_models.feetech.control_table import load_model
from firmware_models.feetech.servo import FeetechServo
from hil.joint import KernelJoint
from servo_hil.rig import load_rig
from tests.daemon_process import simulate_goal
from tests.drivers.protocol1.conftest import write_sts_rig

PRESENT_POSITION, GOAL_POSITION, TORQUE_ENABLE = 56, 42, 40      # Feetech STS memory table addresses
STEP_RAD = 2 * math.pi / 4096          # one STS3215 position step
TICKS = 400                            # 0.4 s at 1 kHz: the rise, the overshoot and most of the settling
GOAL_STEPS = 2048 + 600                # a 52.7° step from the power-up position
# the registers under which the firmware's law is bam's (docs/feetech.md, The firmware law in the kernel): D and
# the dead zones off (power-up D 32, dead zones 1); P 32, I 0, Goal_Velocity 0 and Acceleration 0 are the defaults
BAM_REGISTERS = "D_Coefficient = 0, CW_Dead_Zone = 0, CCW_Dead_Zone = 0"
OFFLINE_RIG = """\
[actuator]
catalog = "sts3215"
model = "m1"
[load]
mass = 0.1
length = 0.1
[sim]
dt = 0.001
integrator = "bam"
"""


@pytest.fixture
def daemon(module_launcher):
    rig = write_sts_rig(module_launcher.dir, "sts_vs_simulate", ids=(1,), fast=True, lockstep=True,
                        registers={1: BAM_REGISTERS})
    d = module_launcher.start(rig)
    yield d
    d.terminate()


def present_steps(rig_path) -> FeetechServo:
    """A FeetechServo of the daemon's rig, built as servo_hil/wiring/feetech.py builds it, for its
    `_present_steps` (shaft angle [rad] → Present_Position [step])."""
    _, _, kernel = load_rig(rig_path)
    registers = {"ID": 1, "Baud_Rate": 0} | {k.strip(): int(v) for k, v in
                                              (kv.split("=") for kv in BAM_REGISTERS.split(","))}
    return FeetechServo(load_model("sts3215"), KernelJoint(kernel, 0), registers)._present_steps


def test_goal_step_over_the_bus_equals_simulate_tick_for_tick(daemon, tmp_path):
    port = scs.PortHandler(daemon.rig.port)
    assert port.openPort() and port.setBaudRate(1_000_000)
    ph = scs.PacketHandler(0)
    try:
        # torque on and the goal step before the first tick: both act from step 0
        p0, comm, error = ph.read2ByteTxRx(port, 1, PRESENT_POSITION)
        assert (comm, error) == (scs.COMM_SUCCESS, 0)
        theta0 = daemon.ok("status")["status"]["actuators"]["j0"]["position"]
        assert ph.write1ByteTxRx(port, 1, TORQUE_ENABLE, 1) == (scs.COMM_SUCCESS, 0)
        assert ph.write2ByteTxRx(port, 1, GOAL_POSITION, GOAL_STEPS) == (scs.COMM_SUCCESS, 0)
        bus, theta, theta_meas = [], [], []
        for k in range(TICKS):
            st = daemon.ok("step", n=1)["state"]["j0"]
            if k == 0:
                # the firmware's goal: θ at the write + (Goal_Position − Present_Position)·2π/4096
                u = theta0 + (GOAL_STEPS - p0) * STEP_RAD
                assert st["goal"] == u and st["enable"], st
            pos, comm, error = ph.read2ByteTxRx(port, 1, PRESENT_POSITION)
            assert (comm, error) == (scs.COMM_SUCCESS, 0), f"tick {k + 1}"
            bus.append(pos)
            theta.append(st["position"])
            theta_meas.append(st["position_measured"])
    finally:
        port.closePort()

    out = simulate_goal(tmp_path, OFFLINE_RIG, u, TICKS + 1)
    to_steps = present_steps(daemon.rig.path)
    assert out[0]["theta"] == theta0
    # a read after tick k+1 holds the sample step k took (hil.joint.encoder_reading): OUT.csv row k's theta_meas
    sim_steps = [to_steps(r["theta_meas"]) for r in out[:-1]]
    for k in range(TICKS):
        assert bus[k] == sim_steps[k], f"tick {k + 1}: Present_Position {bus[k]} over the bus, {sim_steps[k]} simulated"
    d_theta = max(abs(a - r["theta"]) for a, r in zip(theta, out[1:], strict=True))
    # the state stream's measured position is what the law read in the tick just done: OUT.csv row k (step k)
    d_meas = max(abs(a - r["theta_meas"]) for a, r in zip(theta_meas, out[:-1], strict=True))
    print(f"\n{TICKS} ticks: Present_Position equal at every tick; max |Δθ| {d_theta:.3g} rad, "
          f"max |Δθ_meas| {d_meas:.3g} rad")
    assert d_theta <= 1e-12 and d_meas <= 1e-12
    # the comparison covers a real move: the rise to the goal and past it
    assert bus[0] < bus[50] < bus[150] and max(bus) > GOAL_STEPS - 20, bus[::25]
