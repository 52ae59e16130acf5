"""Commands on the REP socket: each one's effect shows in the state stream; bad ones are refused by name."""

from __future__ import annotations

import math
import time

import msgpack
import pytest

from servo_hil.daemon.zmq_io import request

from . import DT, MODE_CODES, Stream, command, ok, raw_request, refused
from .conftest import ARM_GEAR


@pytest.fixture
def daemon(shared_daemon):
    """The tests of this module share one daemon (arm, mx), reset before each test by `stream`."""
    return shared_daemon


def test_set_goal_converges(daemon, stream):
    ep = daemon.rig.cmd
    ok(ep, "set_goal", actuator="arm", value=0.5 * ARM_GEAR)
    ok(ep, "set_goal", actuator="mx", value=-0.7)
    p = stream.wait_for("arm", lambda p: p["goal"] == 0.5 * ARM_GEAR, 1.0, "the new goal")
    assert abs(p["position"]) < 0.05, "the arm was already at the goal: the test proves nothing"
    stream.wait_for("arm", lambda p: abs(p["position"] - 0.5) < 0.01 and abs(p["velocity"]) < 0.05, 3.0,
                    "the arm settled at 0.5 rad")
    stream.wait_for("mx", lambda p: p["goal"] == -0.7 and abs(p["position"] + 0.7) < 0.05, 3.0,
                    "the MX-64 near -0.7 rad")
    # the `state` command agrees with the stream
    st = ok(ep, "state", actuator="arm")["state"]
    assert set(st) == {"arm"}
    assert abs(st["arm"]["position"] - 0.5) < 0.01 and st["arm"]["goal"] == 0.5 * ARM_GEAR


def test_set_enable_false_zero_torque(daemon, stream):
    ep = daemon.rig.cmd
    ok(ep, "set_goal", actuator="arm", value=0.8 * ARM_GEAR)
    # settled, not passing through: at 0.8 rad the lifted pendulum needs m·g·l·sin(0.8) ≈ 0.21 N·m
    held = stream.wait_for("arm", lambda p: abs(p["position"] - 0.8) < 0.02 and abs(p["velocity"]) < 0.05, 3.0,
                           "arm settled at 0.8 rad")
    assert abs(held["torque"]) > 0.05, "holding a lifted pendulum needs torque"
    ok(ep, "set_enable", actuator="arm", value=False)
    after = [stream.wait_for("arm", lambda p: p["enable"] == 0.0, 1.0, "enable 0")]
    while after[-1]["t"] < after[0]["t"] + 0.3:   # 0.3 s of simulated time (a stalled host slows wall time)
        after.append(stream.wait_for("arm", lambda p: True, 2.0, "the next sample"))
    assert all(p["torque"] == 0.0 and p["current"] == 0.0 for p in after)
    assert after[-1]["position"] < 0.7, "the unpowered pendulum did not fall"
    ok(ep, "set_enable", actuator="arm", value=True)
    stream.wait_for("arm", lambda p: p["enable"] == 1.0 and p["torque"] != 0.0, 1.0, "torque back on")


def test_set_external_torque_moves_the_joint(daemon, stream):
    ep = daemon.rig.cmd
    ok(ep, "set_enable", actuator="arm", value=False)
    rest = stream.latest("arm")
    assert abs(rest["position"]) < 1e-6 and rest["external_torque"] == 0.0
    ok(ep, "set_external_torque", actuator="arm", value=0.1)
    stream.wait_for("arm", lambda p: p["external_torque"] == 0.1, 1.0, "external_torque 0.1 in the payload")
    # a 0.3 kg·0.1 m pendulum pushed with 0.1 N·m swings towards asin(0.1/(0.3·g·0.1)) ≈ 0.35 rad
    stream.wait_for("arm", lambda p: p["position"] > 0.1, 2.0, "the joint pushed up by the external torque")
    ok(ep, "set_external_torque", actuator="arm", value=-0.1)
    stream.wait_for("arm", lambda p: p["position"] < -0.1, 3.0, "the joint pushed the other way")


def test_set_param_kp_changes_behaviour(daemon, stream):
    ep = daemon.rig.cmd
    ok(ep, "set_param", actuator="arm", name="kp", value=0.0)
    ok(ep, "set_goal", actuator="arm", value=0.5 * ARM_GEAR)
    stream.wait_for("arm", lambda p: p["goal"] == 0.5 * ARM_GEAR, 1.0, "the goal")
    idle = stream.samples_over_sim_time("arm", 0.4)
    assert all(abs(p["position"]) < 1e-3 for p in idle), "with kp = 0 the arm must not track the goal"
    ok(ep, "set_param", actuator="arm", name="kp", value=20.0)
    stream.wait_for("arm", lambda p: abs(p["position"] - 0.5) < 0.02, 3.0, "the arm tracking again with kp 20")


def test_set_param_gravity_and_mass_change_equilibrium(daemon, stream):
    """Unpowered pendulum held out by an external torque: its angle follows m·g·l·sin θ = τ."""
    ep = daemon.rig.cmd
    g = 9.80665
    ok(ep, "set_enable", actuator="arm", value=False)
    ok(ep, "set_param", actuator="arm", name="gravity", value=2 * g)
    ok(ep, "set_external_torque", actuator="arm", value=0.1)

    def settled(target):
        return lambda p: abs(p["position"] - target) < 0.01 and abs(p["velocity"]) < 0.02

    # at standard gravity it would settle at asin(0.1 / (0.3·g·0.1)) = 0.35 rad
    stream.wait_for("arm", settled(math.asin(0.1 / (0.3 * 2 * g * 0.1))), 6.0, "equilibrium at 2 g (0.17 rad)")
    ok(ep, "set_param", actuator="arm", name="mass", value=0.6)
    stream.wait_for("arm", settled(math.asin(0.1 / (0.6 * 2 * g * 0.1))), 6.0, "equilibrium with 0.6 kg (0.085 rad)")


def test_set_mode_torque(daemon, stream):
    ep = daemon.rig.cmd
    reply = ok(ep, "set_mode", actuator="arm", mode="torque")
    assert reply["goal"] == 0.0
    stream.wait_for("arm", lambda p: p["mode"] == MODE_CODES["torque"], 1.0, "mode torque (6)")
    ok(ep, "set_goal", actuator="arm", value=0.02)
    p = stream.wait_for("arm", lambda p: p["goal"] == 0.02, 1.0, "goal 0.02 N·m")
    more = [p, *stream.samples_over_sim_time("arm", 0.2)]
    assert all(q["torque"] == 0.02 for q in more), {q["torque"] for q in more}
    assert more[-1]["position"] > p["position"], "a positive torque on a pendulum at rest must lift it"
    assert ok(ep, "state", actuator="arm")["state"]["arm"]["mode"] == "torque"
    # and back to the actuator's own law, holding where it is
    reply = ok(ep, "set_mode", actuator="arm", mode="position")
    stream.wait_for("arm", lambda p: p["mode"] == MODE_CODES["position"], 1.0, "mode position (1)")
    assert reply["goal"] == pytest.approx(ARM_GEAR * more[-1]["position"], abs=ARM_GEAR * 0.05)
    refused(ep, "set_mode", "velocity", "mx", actuator="mx", mode="velocity")


def test_set_mode_voltage(daemon, stream):
    """Voltage mode: the goal is the terminal voltage; at rest i = V/R and τ = g·K·i (R 2 Ω, K 0.05, g 50)."""
    ep = daemon.rig.cmd
    ok(ep, "set_mode", actuator="arm", mode="voltage")
    ok(ep, "set_goal", actuator="arm", value=1.0)
    p = stream.wait_for("arm", lambda p: p["goal"] == 1.0, 1.0, "1 V goal")
    assert p["mode"] == MODE_CODES["voltage"] and p["voltage"] == 1.0
    assert p["current"] == pytest.approx(0.5, rel=1e-9) and p["torque"] == pytest.approx(1.25, rel=1e-9)
    later = stream.samples_over_sim_time("arm", 0.2)[-1]
    # terminal speed ≈ (1.25 − 0.29 N·m) / (K²g²/R + b·g² = 3.4 N·m·s/rad) ≈ 0.3 rad/s
    assert later["velocity"] > 0.1 and later["current"] < 0.49, "no back-EMF: the current did not drop with speed"
    refused(ep, "set_mode", "dxl_pwm", "not available", actuator="arm", mode="dxl_pwm")


def test_pause_and_resume(daemon, stream):
    ep = daemon.rig.cmd
    ok(ep, "pause")
    deadline = time.monotonic() + 10.0
    while stream.collect(0.1):  # the last pre-pause samples, however late a loaded host delivers them
        assert time.monotonic() < deadline, "samples kept coming for 10 s after pause"
    t0 = ok(ep, "state")["state"]["arm"]["t"]
    assert stream.collect(0.4) == [], "samples kept coming while paused"
    assert ok(ep, "state")["state"]["arm"]["t"] == t0, "simulation time advanced while paused"
    assert ok(ep, "status")["status"]["paused"] is True
    last_seq = stream.last["arm"]["seq"]
    ok(ep, "resume")
    p = stream.wait_for("arm", lambda p: True, 1.0, "a sample after resume")
    assert p["seq"] == last_seq + 1, "the sequence is not gap-free across pause/resume"
    assert p["t"] == pytest.approx(t0 + DT, abs=1e-12)
    assert ok(ep, "status")["status"]["paused"] is False


def test_state_shows_commands_applied_while_paused(daemon, stream):
    """Regression: the snapshot `state` reads was refreshed only by ticks, so it hid accepted commands."""
    ep = daemon.rig.cmd
    ok(ep, "pause")
    ok(ep, "set_goal", actuator="mx", value=0.9)
    ok(ep, "set_enable", actuator="arm", value=False)
    deadline = time.monotonic() + 10.0  # the loop applies commands every period, paused or not
    while not ((st := ok(ep, "state")["state"])["mx"]["goal"] == 0.9 and st["arm"]["enable"] is False):
        assert time.monotonic() < deadline, ("commands not shown while paused", st["mx"]["goal"], st["arm"]["enable"])
        time.sleep(0.01)


def test_reset_returns_to_initial_state(daemon, stream):
    ep = daemon.rig.cmd
    ok(ep, "set_goal", actuator="arm", value=0.7 * ARM_GEAR)
    ok(ep, "set_external_torque", actuator="mx", value=0.3)
    ok(ep, "set_param", actuator="arm", name="kp", value=30.0)
    ok(ep, "inject_fault", actuator="mx", fault="drop", args={"probability": 0.5})
    moved = stream.wait_for("arm", lambda p: p["position"] > 0.6, 3.0, "arm moved")
    ok(ep, "reset")
    p = stream.wait_for("arm", lambda p: p["goal"] == 0.0, 1.0, "goal back to the initial position")
    assert p["t"] > moved["t"], "reset rewound the simulation time"
    assert abs(p["position"]) < 0.05, "the arm was not put back (reset sets the state, it does not drive there)"
    # (exactly 0 unless a tick falls between reset's ring commands: see test_races.py)
    stream.wait_for("arm", lambda p: abs(p["position"]) < 1e-3 and abs(p["velocity"]) < 1e-3, 2.0, "at rest at 0")
    after = stream.samples_over_sim_time("arm", 0.2)
    assert all(abs(q["position"]) < 1e-3 and q["goal"] == 0.0 for q in after), after[-1]
    mx = stream.latest("mx")
    assert mx["external_torque"] == 0.0 and mx["fault_flags"] == 0
    assert ok(ep, "faults")["faults"] == {"arm": {}, "mx": {}}
    status = ok(ep, "status")["status"]
    assert status["actuators"]["mx"]["faults"] == [] and status["actuators"]["arm"]["enable"] is True


def test_the_daemon_starts_holding_the_initial_theta(make_rig, start_daemon):
    """From its first tick an actuator that starts away from 0 is held there, as after a `reset`: its goal is the
    initial position, not the kernel's 0 (an arm in its rest pose would swing toward its zero)."""
    rig = make_rig(actuator_extra={"arm": "initial = { theta = 0.3 }\n"})
    start_daemon(rig)
    with Stream(rig.pub) as stream:
        stream.first()
        held = stream.samples_over_sim_time("arm", 0.3)
    assert all(p["goal"] == 0.3 * ARM_GEAR for p in held)
    assert all(abs(p["position"] - 0.3) < 0.01 for p in held), [p["position"] for p in held[:3]]


def test_reset_restores_initial_theta(make_rig, start_daemon):
    rig = make_rig(actuator_extra={"arm": "initial = { theta = 0.3 }\n"})
    start_daemon(rig)
    with Stream(rig.pub) as stream:
        stream.first()
        ok(rig.cmd, "set_goal", actuator="arm", value=-0.4 * ARM_GEAR)
        stream.wait_for("arm", lambda p: p["position"] < -0.3, 3.0, "arm at -0.4")
        ok(rig.cmd, "reset")
        stream.wait_for("arm", lambda p: p["goal"] == 0.3 * ARM_GEAR, 1.0, "goal = initial position")
        held = stream.samples_over_sim_time("arm", 0.3)
    assert all(abs(p["position"] - 0.3) < 0.01 for p in held), [p["position"] for p in held[:3]]


def test_a_reset_replays_the_start_bit_for_bit(make_rig, start_daemon):
    """Lock-step: the same commands from the daemon's start and after a `reset` give the same states, bit for bit,
    though the first run left the arm's PID integral, the MX-64's Dynamixel profile and integrals, current, heat
    and backlash gap behind (the reset starts each actuator as a new kernel does)."""
    rig = make_rig(lockstep=True)
    start_daemon(rig)
    ep = rig.cmd

    def run() -> dict:
        ok(ep, "set_param", actuator="arm", name="ki", value=5.0)
        ok(ep, "set_goal", actuator="arm", value=0.6 * ARM_GEAR)
        ok(ep, "set_goal", actuator="mx", value=1.0)
        ok(ep, "set_external_torque", actuator="mx", value=-0.3)
        ok(ep, "step", n=700)
        ok(ep, "set_goal", actuator="mx", value=-0.5)   # a reversal: the gap crosses the backlash
        return ok(ep, "step", n=800)["state"]

    first = run()
    ok(ep, "reset")
    again = run()
    for joint in ("arm", "mx"):
        del first[joint]["t"], again[joint]["t"]   # the clock runs on
        assert again[joint] == first[joint], joint
    assert first["mx"]["temperature"] > 25.0 and abs(first["mx"]["position"] + 0.5) < 0.2


# ---------------------------------------------------------------------------------------------- refusals
ERRORS = [
    pytest.param({"cmd": "launch"}, ("unknown command", "launch"), id="unknown-command"),
    pytest.param({"cmd": "set_goal", "actuator": "elbow", "value": 1.0}, ("unknown actuator", "elbow"),
                 id="unknown-actuator"),
    pytest.param({"cmd": "set_goal", "actuator": "arm", "value": float("nan")}, ("value", "finite", "nan"),
                 id="nan"),
    pytest.param({"cmd": "set_goal", "actuator": "arm", "value": float("inf")}, ("value", "finite", "inf"),
                 id="inf"),
    pytest.param({"cmd": "set_goal", "actuator": "arm", "value": 1e7}, ("value", "out of range"),
                 id="out-of-range"),
    pytest.param({"cmd": "set_goal", "actuator": "arm", "value": "1"}, ("value", "finite number"),
                 id="string-value"),
    pytest.param({"cmd": "set_goal", "actuator": "arm"}, ("missing", "value"), id="missing-value"),
    pytest.param({"cmd": "set_goal", "actuator": "arm", "value": 1, "speed": 2}, ("unknown argument", "speed"),
                 id="unknown-argument"),
    pytest.param({"cmd": "set_external_torque", "actuator": "arm", "value": 1e6}, ("value", "out of range"),
                 id="torque-out-of-range"),
    pytest.param({"cmd": "set_enable", "actuator": "arm", "value": 1}, ("value", "true or false"),
                 id="enable-not-bool"),
    pytest.param({"cmd": "set_param", "actuator": "arm", "name": "stiffness", "value": 1.0},
                 ("unknown parameter", "stiffness"), id="unknown-parameter"),
    pytest.param({"cmd": "set_param", "actuator": "arm", "name": "law", "value": 1.0},
                 ("unknown parameter", "law"), id="structural-parameter"),
    pytest.param({"cmd": "set_param", "actuator": "arm", "name": "motorconst", "value": 0.05},
                 ("unknown parameter", "motorconst", " kt,"), id="mujoco-name-of-kt"),
    pytest.param({"cmd": "set_param", "actuator": "arm", "name": "gear", "value": 0.0}, ("gear", "out of range"),
                 id="gear-zero"),
    pytest.param({"cmd": "set_param", "actuator": "arm", "name": "mass", "value": -1.0},
                 ("value", "out of range"), id="negative-mass"),
    pytest.param({"cmd": "set_param", "actuator": "mx", "name": "pd_kp", "value": 100.0},
                 ("pd_kp", "mx's firmware law 'dxl_pwm'", "only by erob_pd"), id="erob-gain-on-a-dynamixel"),
    pytest.param({"cmd": "set_param", "actuator": "arm", "name": "max_duty", "value": 0.5},
                 ("max_duty", "firmware law 'position'", "dxl_pwm"), id="dynamixel-limit-on-a-dcmotor"),
    pytest.param({"cmd": "set_mode", "actuator": "arm", "mode": "warp"}, ("mode", "warp"), id="unknown-mode"),
    pytest.param({"cmd": "inject_fault", "actuator": "arm", "fault": "gremlin"}, ("unknown fault", "gremlin"),
                 id="unknown-fault"),
    pytest.param({"cmd": "inject_fault", "actuator": "arm", "fault": "supply_sag", "args": {"voltage_v": -3}},
                 ("voltage_v", "out of range"), id="fault-arg-out-of-range"),
    pytest.param({"cmd": "inject_fault", "actuator": "arm", "fault": "drop", "args": {"p": 0.5}},
                 ("unknown argument", "p"), id="fault-unknown-arg"),
    pytest.param({"cmd": "inject_fault", "actuator": "arm", "fault": "overheat"}, ("overheat", "thermal"),
                 id="overheat-without-thermal"),
    pytest.param({"cmd": "clear_fault", "actuator": "arm", "fault": "gremlin"}, ("unknown fault", "gremlin"),
                 id="clear-unknown-fault"),
    pytest.param({"cmd": "step", "n": 10}, ("lock-step",), id="step-not-lockstep"),
    pytest.param({"cmd": "status", "verbose": True}, ("unknown argument", "verbose"), id="status-argument"),
    pytest.param({"command": "status"}, ("cmd",), id="no-cmd-key"),
]


@pytest.mark.parametrize(("cmd", "needles"), ERRORS)
def test_refused_commands_name_the_problem(shared_daemon, cmd, needles):
    ep = shared_daemon.rig.cmd
    before = ok(ep, "state")["state"]
    reply = request(ep, cmd, 3.0)
    assert reply.get("ok") is False, reply
    for needle in needles:
        assert needle in reply["error"], f"{needle!r} not in {reply['error']!r}"
    # the daemon keeps running and nothing changed
    assert shared_daemon.alive
    after = ok(ep, "state")["state"]
    for j in ("arm", "mx"):
        for k in ("goal", "enable", "external_torque", "mode", "fault_flags"):
            assert after[j][k] == before[j][k], f"a refused command changed {j}.{k}"
    assert_ticking(ep, after["arm"]["t"])


def assert_ticking(ep: str, t0: float, timeout: float = 2.0) -> None:
    """The loop still advances: simulation time moves past t0 within `timeout` s."""
    deadline = time.monotonic() + timeout
    while ok(ep, "state", actuator="arm")["state"]["arm"]["t"] <= t0:
        assert time.monotonic() < deadline, f"simulation time stuck at {t0} s"
        time.sleep(0.01)


def test_request_id_is_echoed(shared_daemon):
    ep = shared_daemon.rig.cmd
    assert ok(ep, "status", id=17)["id"] == 17
    assert command(ep, "launch", id="x1") == {"ok": False, "error": command(ep, "launch")["error"], "id": "x1"}


@pytest.mark.parametrize("payload", [b"\xc1\xff not msgpack", b"\x82\xa3cmd", b""], ids=["garbage", "truncated",
                                                                                          "empty"])
def test_malformed_msgpack_is_refused(shared_daemon, payload):
    reply = raw_request(shared_daemon.rig.cmd, payload)
    assert reply["ok"] is False and "msgpack" in reply["error"], reply
    assert ok(shared_daemon.rig.cmd, "status")["status"]["tick"] > 0


@pytest.mark.parametrize("payload", [msgpack.packb([1, 2, 3]), msgpack.packb("status"), msgpack.packb({1: 2})],
                         ids=["list", "string", "int-keys"])
def test_msgpack_that_is_not_a_command_map(shared_daemon, payload):
    reply = raw_request(shared_daemon.rig.cmd, payload)
    assert reply["ok"] is False and reply["error"], reply
    assert ok(shared_daemon.rig.cmd, "status")["ok"]


def test_unhashable_actuator_is_refused(shared_daemon):
    reply = command(shared_daemon.rig.cmd, "set_goal", timeout_s=2.0, actuator=["arm"], value=1.0)
    assert reply["ok"] is False and "unknown actuator" in reply["error"], reply
    assert ok(shared_daemon.rig.cmd, "status")["ok"]


def test_unhashable_parameter_name_is_refused(shared_daemon):
    """Regression: a list as parameter name used to raise TypeError and kill the REP thread (then SIGTERM hung)."""
    ep = shared_daemon.rig.cmd
    reply = command(ep, "set_param", timeout_s=2.0, actuator="arm", name=["kp"], value=1.0)
    assert reply["ok"] is False and "unknown parameter" in reply["error"], reply
    assert ok(ep, "status")["ok"]


def test_set_param_iron_loss_heats_a_spinning_motor(make_rig, start_daemon):
    """set_param of a term beyond the oracles, iron loss K_fe (MuJoCo DC motor model §1.3.2): the same lock-step run,
    torque off and the joint spun by an external torque, ends hotter by the heat K_fe·(g·ω)² and moves alike."""
    d = start_daemon(make_rig(joints=("mx",), lockstep=True))
    ep = d.rig.cmd

    def spin() -> dict:
        ok(ep, "set_param", actuator="mx", name="gravity", value=0.0)
        ok(ep, "set_enable", actuator="mx", value=False)
        ok(ep, "set_external_torque", actuator="mx", value=0.5)
        return ok(ep, "step", n=2000)["state"]["mx"]

    cold = spin()   # from the daemon's start
    ok(ep, "reset")
    ok(ep, "set_param", actuator="mx", name="iron_loss", value=1e-3)
    hot = spin()
    # a reset starts from the daemon's start (the mx64's backlash gap too): the same motion, bit for bit
    assert hot["position"] == cold["position"] and hot["velocity"] > 10.0
    # the catalog's motor is an output-side equivalent (g = 1): about K_fe·ω²·t/C ≈ 1e-3·(18 rad/s)²·1 s/27 J/K
    assert cold["temperature"] == 25.0 and 0.01 < hot["temperature"] - 25.0 < 0.05


def test_set_param_of_coupled_terms_takes_them_in_order(make_rig, start_daemon):
    """A term that acts only with another (backlash with the motor side's armature, the rising stiction with its γ,
    the housing node with its heat capacity, the peak current with its time and the current limiter) is refused in
    one line saying what to set first, and its partner may not drop to 0 under it; in order, both are taken."""
    rig = make_rig(actuator_extra={"mx": "saturation = [0.0, 2.0]\n"})
    start_daemon(rig)
    ep = rig.cmd

    def set_(joint: str, name: str, value: float) -> None:
        ok(ep, "set_param", actuator=joint, name=name, value=value)

    refused(ep, "set_param", "stiction_rise > 0 needs stiction_time > 0 first", actuator="arm", name="stiction_rise",
            value=0.01)
    set_("arm", "stiction_time", 0.5)
    set_("arm", "stiction_rise", 0.01)
    refused(ep, "set_param", "stiction_time must stay > 0 while stiction_rise > 0", actuator="arm",
            name="stiction_time", value=0.0)
    refused(ep, "set_param", "thermal_r2 > 0 needs thermal_c2 > 0 first", actuator="mx", name="thermal_r2", value=5.0)
    set_("mx", "thermal_c2", 20.0)
    set_("mx", "thermal_r2", 5.0)
    set_("arm", "peak_time", 1.0)
    refused(ep, "set_param", "no continuous current limit", actuator="arm", name="peak_current", value=5.0)
    set_("mx", "peak_time", 1.0)
    refused(ep, "set_param", "must exceed the continuous limit 2 A", actuator="mx", name="peak_current", value=1.5)
    set_("mx", "peak_current", 4.0)
    set_("arm", "backlash", 0.01)
    refused(ep, "set_param", "armature must stay > 0 while backlash > 0", actuator="arm", name="armature", value=0.0)
    set_("arm", "backlash", 0.0)
    set_("arm", "armature", 0.0)
    assert ok(ep, "status")["ok"]


def test_set_param_takes_what_the_actuators_own_law_reads(make_rig, start_daemon):
    """config/daemon/set_param.toml `laws`: the eRob PD gain goes to the eRob, the Dynamixel PWM limit to the
    Dynamixel, each refused on the other in one line; a parameter of every law goes to both."""
    ep = start_daemon(make_rig(joints=("mx", "erob"))).rig.cmd
    ok(ep, "set_param", actuator="erob", name="pd_kp", value=120.0)
    ok(ep, "set_param", actuator="mx", name="max_duty", value=0.5)
    for actuator, name in (("mx", "pd_kp"), ("mx", "kd"), ("erob", "max_duty"), ("erob", "kp")):
        error = refused(ep, "set_param", name, "firmware law", actuator=actuator, name=name, value=1.0)
        assert "\n" not in error, error
    for actuator in ("mx", "erob"):
        ok(ep, "set_param", actuator=actuator, name="supply_v", value=20.0)
