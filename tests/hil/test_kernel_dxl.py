"""The kernel's Dynamixel firmware law (LAW_DXL): profile generator, modes, current loop, overload.

Profile facts from the e-manual (§Profile Velocity(112), §Profile Acceleration(108)): trapezoidal with t1 = V/A,
triangular when the distance is too short to reach V, rectangular without acceleration, a step without velocity;
time-based: the move takes t3 with ramps of t1 ≤ t3/2.
"""

import math

import pytest

from hil.kernel import DXL_MODES, FAULT_BITS, LAWS, Kernel

from .kernel_helpers import LOCKED, params, trajectory

DT = 1e-3
MOTOR = dict(resistance=2.0, kt=0.5, armature=1e-3, supply_v=12.0, max_duty=1.0, dxl_goal_duty=1.0)


def dxl(**kw) -> dict:
    return params(law=LAWS["dxl"], **(MOTOR | kw))


def test_trapezoid_reaches_v_after_v_over_a_and_lands_on_the_goal():
    v, a, goal = 2.0, 10.0, 5.0
    st = trajectory(dxl(dxl_mode=DXL_MODES["position"], dxl_prof_vel=v, dxl_prof_acc=a, load_inertia=LOCKED),
                    [goal] * 3000)
    vel = [s["traj_vel"] for s in st]
    assert st[0]["prof_type"] == 3
    assert vel[49] == pytest.approx(a * 0.05, abs=a * DT)          # ramping at A
    assert max(vel) == pytest.approx(v, abs=1e-12)                  # plateau at V, never above
    t1 = next(k for k, x in enumerate(vel) if x >= v - 1e-9) * DT
    assert t1 == pytest.approx(v / a, abs=2 * DT)
    done = next(k for k, s in enumerate(st) if not s["prof_active"]) * DT
    assert done == pytest.approx(goal / v + v / a, abs=3 * DT)     # d/V + t1
    assert st[-1]["traj_pos"] == goal and st[-1]["traj_vel"] == 0.0
    assert all(abs(vel[k + 1] - vel[k]) <= a * DT * (1 + 1e-9) for k in range(len(vel) - 1))


def test_short_move_is_triangular_with_peak_sqrt_d_a():
    v, a, goal = 2.0, 10.0, 0.1          # d·A = 1 < V² = 4
    st = trajectory(dxl(dxl_mode=DXL_MODES["position"], dxl_prof_vel=v, dxl_prof_acc=a, load_inertia=LOCKED),
                    [goal] * 500)
    assert st[0]["prof_type"] == 2
    assert max(s["traj_vel"] for s in st) == pytest.approx(math.sqrt(goal * a), abs=2 * a * DT)
    assert st[-1]["traj_pos"] == goal


def test_rectangular_and_step_profiles():
    rect = trajectory(dxl(dxl_mode=DXL_MODES["position"], dxl_prof_vel=1.0, load_inertia=LOCKED), [0.5] * 600)
    assert rect[0]["prof_type"] == 1 and rect[0]["traj_vel"] == 1.0
    assert next(k for k, s in enumerate(rect) if not s["prof_active"]) == pytest.approx(500, abs=1)
    step = trajectory(dxl(dxl_mode=DXL_MODES["position"], load_inertia=LOCKED), [0.5] * 3)
    assert step[0]["prof_type"] == 0 and step[0]["traj_pos"] == 0.5 and not step[0]["prof_active"]


@pytest.mark.parametrize("t1, shape", [(0.3, 3), (0.8, 2)])
def test_time_based_profile_takes_t3(t1, shape):
    st = trajectory(dxl(dxl_mode=DXL_MODES["position"], dxl_time_profile=1, dxl_prof_vel=1.0, dxl_prof_acc=t1,
                        load_inertia=LOCKED), [2.0] * 1500)
    assert st[0]["prof_type"] == shape          # t1 > t3/2 is clipped to t3/2: a triangle
    done = next(k for k, s in enumerate(st) if not s["prof_active"]) * DT
    assert done == pytest.approx(1.0, abs=3 * DT)
    ramp = min(t1, 0.5)
    assert max(s["traj_vel"] for s in st) == pytest.approx(2.0 / (1.0 - ramp), rel=1e-3)


def test_new_goal_mid_move_keeps_the_velocity_continuous():
    a = 5.0
    goals = [3.0] * 400 + [-1.0] * 2000
    st = trajectory(dxl(dxl_mode=DXL_MODES["position"], dxl_prof_vel=2.0, dxl_prof_acc=a, load_inertia=LOCKED), goals)
    vel = [s["traj_vel"] for s in st]
    assert vel[399] > 1.5
    assert all(abs(vel[k + 1] - vel[k]) <= a * DT * (1 + 1e-9) for k in range(len(vel) - 1))
    assert st[-1]["traj_pos"] == -1.0


def test_current_mode_drives_the_goal_current_through_the_winding():
    st = trajectory(dxl(dxl_mode=DXL_MODES["current"], load_inertia=LOCKED), [1.5] * 5)
    assert st[-1]["i_out"] == pytest.approx(1.5, rel=1e-12)       # ideal loop, rotor at rest
    clamped = trajectory(dxl(dxl_mode=DXL_MODES["current"], dxl_goal_duty=0.1, load_inertia=LOCKED), [5.0] * 5)
    assert clamped[-1]["i_out"] == pytest.approx(0.1 * 12.0 / 2.0, rel=1e-12)   # Goal PWM caps the voltage


def test_pwm_mode_applies_the_goal_duty_up_to_the_limits():
    st = trajectory(dxl(dxl_mode=DXL_MODES["pwm"], max_duty=0.8, load_inertia=LOCKED), [0.5, 0.95, -2.0])
    assert [s["duty"] for s in st] == [0.5, 0.8, -0.8]
    assert st[0]["v_out"] == pytest.approx(6.0)


def test_current_based_position_caps_the_current_at_goal_current():
    st = trajectory(dxl(dxl_mode=DXL_MODES["current_position"], dxl_kpp=5.0, dxl_goal_current=0.4,
                        load_inertia=LOCKED), [1.0] * 10)
    assert st[-1]["i_out"] == pytest.approx(0.4, rel=1e-12)


def test_velocity_mode_ramps_at_profile_acceleration_and_tracks():
    st = trajectory(dxl(dxl_mode=DXL_MODES["velocity"], dxl_prof_acc=20.0, dxl_kvp=0.5, dxl_kvi=20.0,
                        load_inertia=0.01), [4.0] * 2000)
    assert st[99]["traj_vel"] == pytest.approx(2.0, abs=20.0 * DT)
    assert st[-1]["traj_vel"] == 4.0
    assert st[-1]["omega"] == pytest.approx(4.0, rel=0.02)


def test_overload_latches_after_its_time_and_shuts_down_only_if_masked():
    over = dict(dxl_mode=DXL_MODES["pwm"], load_inertia=LOCKED, overload_current=3.0, overload_time=0.05)
    st = trajectory(dxl(**over), [1.0] * 100)              # 6 A stall
    k = next(i for i, s in enumerate(st) if s["fault_flags"] & FAULT_BITS["overload"])
    assert k == pytest.approx(49, abs=1)
    assert st[-1]["shutdown"] and st[-1]["i_out"] == 0.0
    kept = trajectory(dxl(shutdown_mask=0, **over), [1.0] * 100)
    assert kept[-1]["fault_flags"] & FAULT_BITS["overload"] and kept[-1]["i_out"] == pytest.approx(6.0)


def test_torque_off_makes_the_trajectory_follow_the_shaft():
    k = Kernel(1, DT)
    k.set_params(0, dxl(dxl_mode=DXL_MODES["position"], dxl_kpp=2.0, load_inertia=1.0))
    k.set_state(0, theta=0.7)
    k.step([0.7], [0.0], [0.0])
    assert k.get_state(0)["traj_pos"] == pytest.approx(0.7) and k.get_state(0)["duty"] == 0.0
    k.step([0.7], [1.0], [0.0])
    s = k.get_state(0)
    assert s["traj_pos"] == pytest.approx(0.7) and abs(s["duty"]) < 1e-9   # no jump on torque on
