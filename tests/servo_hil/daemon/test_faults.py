"""Faults injected over the command socket: visible in the stream's fault_flags, effective, and clearable."""

from __future__ import annotations

import statistics

import pytest

from . import FLAG, MqttClient, Stream, ok
from .conftest import ARM_GEAR

MX_TEMP_LIMIT = 80.0  # config/actuators/mx64.toml temp_limit_c


@pytest.fixture
def daemon(shared_daemon):
    """The tests of this module share one daemon (arm, mx), reset before each test by `stream`."""
    return shared_daemon


def flag_on(bit):
    return lambda p: bool(p["fault_flags"] & bit)


def flag_off(bit):
    return lambda p: not p["fault_flags"] & bit


def active_faults(ep):
    return ok(ep, "faults")["faults"]


def test_open_circuit_now(daemon, stream):
    ep = daemon.rig.cmd
    ok(ep, "set_goal", actuator="arm", value=0.6 * ARM_GEAR)
    stream.wait_for("arm", lambda p: abs(p["position"] - 0.6) < 0.02, 3.0, "arm at 0.6 rad")
    assert stream.latest("arm")["fault_flags"] == 0
    ok(ep, "inject_fault", actuator="arm", fault="open_circuit", args={"fraction": 1.0})
    stream.wait_for("arm", flag_on(FLAG["open_circuit"]), 1.0, "open-circuit bit 1")
    opened = stream.samples_over_sim_time("arm", 0.3)
    assert all(p["fault_flags"] & FLAG["open_circuit"] for p in opened)
    assert all(p["torque"] == 0.0 and p["current"] == 0.0 for p in opened), "an open armature made torque"
    assert opened[-1]["position"] < opened[0]["position"] - 0.02, "the pendulum did not fall with the armature open"
    assert active_faults(ep) == {"arm": {"open_circuit": {"fraction": 1.0}}, "mx": {}}
    assert ok(ep, "state", actuator="arm")["state"]["arm"]["faults"] == ["open_circuit"]
    ok(ep, "clear_fault", actuator="arm", fault="open_circuit")
    stream.wait_for("arm", flag_off(FLAG["open_circuit"]), 1.0, "open-circuit bit cleared")
    stream.wait_for("arm", lambda p: abs(p["position"] - 0.6) < 0.02, 3.0, "arm driven back to 0.6 rad")
    assert active_faults(ep) == {"arm": {}, "mx": {}}


def test_open_circuit_at_time(daemon, stream):
    ep = daemon.rig.cmd
    now = ok(ep, "state", actuator="arm")["state"]["arm"]["t"]
    ok(ep, "inject_fault", actuator="arm", fault="open_circuit", args={"fraction": 0.5, "at_s": now + 0.5})
    early = [p for p in stream.samples_over_sim_time("arm", 0.25) if p["t"] < now + 0.5 - 1e-9]
    assert early and not any(p["fault_flags"] & FLAG["open_circuit"] for p in early), "triggered too early"
    p = stream.wait_for("arm", flag_on(FLAG["open_circuit"]), 2.0, "open circuit at the set time")
    assert now + 0.5 - 1e-9 <= p["t"] <= now + 0.5 + 0.002, (p["t"], now + 0.5)


def test_open_circuit_behavioural(daemon, stream):
    """current_a + duration_s: armed, triggers only once |i| exceeds the current for the duration."""
    ep = daemon.rig.cmd
    ok(ep, "inject_fault", actuator="arm", fault="open_circuit",
       args={"fraction": 1.0, "current_a": 1.0, "duration_s": 0.02})
    idle = stream.samples_over_sim_time("arm", 0.3)
    assert idle and not any(p["fault_flags"] & FLAG["open_circuit"] for p in idle), "triggered at rest"
    ok(ep, "set_goal", actuator="arm", value=1.0 * ARM_GEAR)
    p = stream.wait_for("arm", flag_on(FLAG["open_circuit"]), 2.0, "behavioural open circuit under current")
    assert p["torque"] == 0.0
    ok(ep, "clear_fault", actuator="arm", fault="open_circuit")
    stream.wait_for("arm", flag_off(FLAG["open_circuit"]), 1.0, "cleared")


def test_supply_sag_limits_voltage(daemon, stream):
    """MX-64 (Dynamixel PWM law): output voltage = duty · supply, so a 6 V sag halves the maximum."""
    ep = daemon.rig.cmd
    ok(ep, "inject_fault", actuator="mx", fault="supply_sag", args={"voltage_v": 6.0})
    stream.wait_for("mx", flag_on(FLAG["supply_sag"]), 1.0, "supply bit 2")
    ok(ep, "set_goal", actuator="mx", value=2.0)
    driven = stream.wait_for("mx", lambda p: p["goal"] == 2.0, 1.0, "goal 2 rad")
    sagged = [driven, *stream.samples_over_sim_time("mx", 0.3)]
    vmax = max(abs(p["voltage"]) for p in sagged)
    assert 5.0 < vmax <= 0.9625 * 6.0 + 1e-9, vmax
    assert all(p["fault_flags"] & FLAG["supply_sag"] for p in sagged)
    ok(ep, "clear_fault", actuator="mx", fault="supply_sag")
    ok(ep, "set_goal", actuator="mx", value=-2.0)
    stream.wait_for("mx", lambda p: not p["fault_flags"] and abs(p["voltage"]) > 10.0, 1.0,
                    "full 12 V drive after clearing the sag")


def test_encoder_noise(daemon, stream):
    ep = daemon.rig.cmd
    ok(ep, "inject_fault", actuator="arm", fault="encoder_noise", args={"std_rad": 0.01})
    stream.wait_for("arm", flag_on(FLAG["encoder_noise"]), 1.0, "encoder-noise bit 4")
    noisy = stream.samples_over_sim_time("arm", 0.3)
    err = [p["position_measured"] - p["position"] for p in noisy]
    assert 0.005 < statistics.pstdev(err) < 0.02, statistics.pstdev(err)
    ok(ep, "clear_fault", actuator="arm", fault="encoder_noise")
    stream.wait_for("arm", flag_off(FLAG["encoder_noise"]), 1.0, "noise cleared")
    stream.wait_for("arm", lambda p: abs(p["position"]) < 1e-3 and abs(p["velocity"]) < 1e-3, 3.0, "settled")
    quiet = stream.samples_over_sim_time("arm", 0.1)
    assert all(abs(p["position_measured"] - p["position"]) < 1e-4 for p in quiet)


def test_encoder_stuck(daemon, stream):
    ep = daemon.rig.cmd
    ok(ep, "set_enable", actuator="arm", value=False)
    ok(ep, "inject_fault", actuator="arm", fault="encoder_stuck")
    stream.wait_for("arm", flag_on(FLAG["encoder_stuck"]), 1.0, "encoder-stuck bit 32")
    ok(ep, "set_external_torque", actuator="arm", value=0.1)  # moves the unpowered pendulum
    pushed = stream.wait_for("arm", lambda p: p["external_torque"] == 0.1, 1.0, "external torque 0.1")
    moving = [pushed, *stream.samples_over_sim_time("arm", 0.3)]
    assert max(p["position"] for p in moving) > 0.05, "the joint did not move"
    assert len({p["position_measured"] for p in moving}) == 1, "the measured position is not frozen"
    ok(ep, "clear_fault", actuator="arm", fault="encoder_stuck")
    p = stream.wait_for("arm", flag_off(FLAG["encoder_stuck"]), 1.0, "stuck cleared")
    later = stream.samples_over_sim_time("arm", 0.1)
    assert all(abs(q["position_measured"] - q["position"]) <= abs(q["velocity"]) * 0.0011 + 1e-9 for q in later)
    assert later[-1]["position_measured"] != p["position_measured"]


def test_encoder_slip(daemon, stream):
    ep = daemon.rig.cmd
    ok(ep, "inject_fault", actuator="arm", fault="encoder_slip", args={"rate_rad_s": 1.0})
    first = stream.wait_for("arm", flag_on(FLAG["encoder_slip"]), 1.0, "encoder-slip bit 64")
    later = stream.samples_over_sim_time("arm", 0.3)[-1]
    slip0 = first["position_measured"] - first["position"]
    slip1 = later["position_measured"] - later["position"]
    rate = (slip1 - slip0) / (later["t"] - first["t"])
    assert rate == pytest.approx(1.0, rel=0.1), rate
    ok(ep, "clear_fault", actuator="arm", fault="encoder_slip")
    stream.wait_for("arm", flag_off(FLAG["encoder_slip"]), 1.0, "slip cleared")
    p = stream.latest("arm")
    # no offset left: the measured position is the step's pre-step angle, one step behind the published
    # one (as in test_encoder_stuck); a fixed 0.01 rad failed once with the arm swinging at 10 rad/s
    assert abs(p["position_measured"] - p["position"]) <= abs(p["velocity"]) * 0.0011 + 1e-9, \
        "the slip offset survived clear_fault"
    stream.wait_for("arm", lambda p: abs(p["position"]) < 0.01, 3.0, "arm back at its goal")


@pytest.mark.parametrize("fault,args", [("drop", {"probability": 0.5}), ("corrupt", {"probability": 0.25}),
                                        ("delay", {"seconds": 0.01}), ("wrong_baud", {})])
def test_bus_fault_flags(daemon, stream, fault, args):
    ep = daemon.rig.cmd
    ok(ep, "inject_fault", actuator="mx", fault=fault, args=args)
    p = stream.wait_for("mx", flag_on(FLAG[fault]), 1.0, f"bus fault bit {FLAG[fault]}")
    assert p["fault_flags"] == FLAG[fault]
    assert stream.latest("arm")["fault_flags"] == 0, "the fault leaked to another actuator"
    assert active_faults(ep) == {"arm": {}, "mx": {fault: args}}
    assert ok(ep, "state", actuator="mx")["state"]["mx"]["faults"] == [fault]
    ok(ep, "clear_fault", actuator="mx", fault=fault)
    stream.wait_for("mx", lambda p: p["fault_flags"] == 0, 1.0, f"{fault} cleared")
    assert active_faults(ep) == {"arm": {}, "mx": {}}


def test_bus_faults_combine(daemon, stream):
    ep = daemon.rig.cmd
    for fault, args in (("drop", {"probability": 1.0}), ("delay", {"seconds": 0.5}), ("wrong_baud", {})):
        ok(ep, "inject_fault", actuator="arm", fault=fault, args=args)
    expected = FLAG["drop"] | FLAG["delay"] | FLAG["wrong_baud"]
    stream.wait_for("arm", lambda p: p["fault_flags"] == expected, 1.0, f"flags {expected}")
    ok(ep, "clear_fault", actuator="arm", fault="delay")
    stream.wait_for("arm", lambda p: p["fault_flags"] == expected & ~FLAG["delay"], 1.0, "delay cleared alone")
    assert set(active_faults(ep)["arm"]) == {"drop", "wrong_baud"}


def test_overheat_shutdown(make_rig, start_daemon, mqtt_broker):
    rig = make_rig(mqtt_port=mqtt_broker.port)
    start_daemon(rig)
    with Stream(rig.pub) as stream, MqttClient(mqtt_broker.port, [f"servo-hil/{rig.name}/#"]) as mq:
        mq.wait(lambda m: m.topic.endswith("/online") and m.payload == b"online", 5.0, "online")
        stream.first()
        ok(rig.cmd, "set_goal", actuator="mx", value=1.0)
        held = stream.wait_for("mx", lambda p: abs(p["position"] - 1.0) < 0.05, 3.0, "MX-64 lifting at 1 rad")
        assert abs(held["torque"]) > 0.1
        start = mq.mark()
        ok(rig.cmd, "inject_fault", actuator="mx", fault="overheat")
        p = stream.wait_for("mx", flag_on(FLAG["overheat"]), 1.0, "overheat bit 16")
        assert p["temperature"] > MX_TEMP_LIMIT
        after = stream.samples_over_sim_time("mx", 0.3)
        assert all(q["torque"] == 0.0 and q["fault_flags"] & FLAG["overheat"] for q in after)
        assert after[-1]["position"] < 0.9, "the unpowered pendulum did not fall"
        ev = mq.event(lambda e: e.get("type") == "shutdown", 3.0, "shutdown event", start)
        assert ev["actuator"] == "mx" and ev["reason"] == "overheat" and ev["temperature"] > MX_TEMP_LIMIT
        raised = mq.event(lambda e: e.get("type") == "fault_raised", 3.0, "fault_raised event", start)
        assert raised["actuator"] == "mx" and "overheat" in raised["faults"]
    assert ok(rig.cmd, "state", actuator="mx")["state"]["mx"]["faults"] == ["overheat"]


def test_overheat_clears(daemon, stream):
    """Regression: clearing used to release the latch only, which re-latched on the still-hot winding."""
    ep = daemon.rig.cmd
    ok(ep, "inject_fault", actuator="mx", fault="overheat", args={"temperature_c": 90.0})
    stream.wait_for("mx", flag_on(FLAG["overheat"]), 1.0, "overheat bit 16")
    ok(ep, "clear_fault", actuator="mx", fault="overheat")
    p = stream.wait_for("mx", flag_off(FLAG["overheat"]), 1.0, "overheat cleared by clear_fault")
    assert p["temperature"] < MX_TEMP_LIMIT, "the winding was left above its limit"
    ok(ep, "set_goal", actuator="mx", value=0.5)
    stream.wait_for("mx", lambda p: abs(p["position"] - 0.5) < 0.05, 3.0, "the MX-64 driving again")
    assert ok(ep, "faults")["faults"]["mx"] == {}


def test_reset_clears_overheat(daemon, stream):
    ep = daemon.rig.cmd
    ok(ep, "inject_fault", actuator="mx", fault="overheat", args={"temperature_c": 95.0})
    stream.wait_for("mx", lambda p: p["fault_flags"] & FLAG["overheat"] and p["temperature"] > 94.0, 1.0,
                    "overheat at 95 °C")
    ok(ep, "reset")
    p = stream.wait_for("mx", flag_off(FLAG["overheat"]), 1.0, "overheat cleared by reset")
    assert p["temperature"] == pytest.approx(25.0, abs=0.5)


def test_overheat_injected_twice_still_clears(daemon, stream):
    """Regression: a second injection used to record the hot winding as the temperature to restore."""
    ep = daemon.rig.cmd
    ok(ep, "inject_fault", actuator="mx", fault="overheat")
    stream.wait_for("mx", flag_on(FLAG["overheat"]), 1.0, "overheat bit 16")
    ok(ep, "inject_fault", actuator="mx", fault="overheat", args={"temperature_c": 95.0})
    stream.wait_for("mx", lambda p: p["temperature"] > 94.0, 1.0, "the winding at 95 °C")
    ok(ep, "clear_fault", actuator="mx", fault="overheat")
    p = stream.wait_for("mx", flag_off(FLAG["overheat"]), 1.0, "overheat cleared")
    assert p["temperature"] < MX_TEMP_LIMIT


def test_faults_lists_overheat_with_its_arguments(daemon, stream):
    """Regression: `faults` used to show the internal `_restore_temperature_c` as an argument."""
    ep = daemon.rig.cmd
    ok(ep, "inject_fault", actuator="mx", fault="overheat", args={"temperature_c": 90.0})
    assert active_faults(ep) == {"arm": {}, "mx": {"overheat": {"temperature_c": 90.0}}}


def test_bus_fault_flags_follow_every_assignment():
    """BusFaults.flags() is kept as an attribute: it must follow inject, clear, the constructor and plain
    assignment alike (the bus servers read it at every reply)."""
    from drivers.wire.faults import BUS_FLAG_BITS, BusFaults
    from servo_hil.daemon.faults import inject_bus_fault
    b = BusFaults(drop=0.5, wrong_baud=True)
    assert b.flags() == BUS_FLAG_BITS["drop"] | BUS_FLAG_BITS["wrong_baud"]
    inject_bus_fault(b, "delay", {"seconds": 0.1})
    b.clear("drop")
    assert b.flags() == BUS_FLAG_BITS["delay"] | BUS_FLAG_BITS["wrong_baud"]
    b.corrupt = 0.25
    b.wrong_baud = False
    b.delay_s = 0.0
    assert b.flags() == BUS_FLAG_BITS["corrupt"]
    b.clear("corrupt")
    assert b.flags() == 0 == BusFaults().flags()


def test_bus_fault_flag_sink_follows_every_change():
    """The flags the state publisher reads from C (a one-element view of LiveRig.bus_flag_bits) follow the
    constructor, inject, clear and reset."""
    import numpy as np

    from drivers.wire.faults import BUS_FLAG_BITS, BusFaults
    from servo_hil.daemon.faults import inject_bus_fault
    bits = np.zeros(2, dtype=np.int64)
    b = BusFaults(drop=0.5, flag_sink=bits[1:2])
    assert bits.tolist() == [0, BUS_FLAG_BITS["drop"]]
    inject_bus_fault(b, "wrong_baud", {})
    assert bits[1] == BUS_FLAG_BITS["drop"] | BUS_FLAG_BITS["wrong_baud"] == b.flags()
    b.clear("drop")
    assert bits[1] == BUS_FLAG_BITS["wrong_baud"]
    inject_bus_fault(b, "corrupt", {"probability": 0.1})
    b.reset()
    assert bits.tolist() == [0, 0]
