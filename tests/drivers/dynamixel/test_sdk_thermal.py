"""Overheating shutdown through the real SDK (e-manual §Shutdown(63), §Temperature Limit(31)): a lock-step rig whose
MX-64 (ID 1) holds a 10 kg pendulum it cannot lift, so its current stays high and the winding heats (the catalog's
thermal model, config/actuators/mx64.toml). Temperature Limit is lowered to 40 °C to keep the run short, Goal PWM to 600
so the current stays below the (estimated) Overload threshold and Overheating is the error that trips.

Each test gets a daemon of its own: a latched hardware error is what is being tested.
"""

from __future__ import annotations

import dynamixel_sdk as sdk

from .conftest import ALERT, SERVOS, A, open_dxl, to_bytes, write_dxl_rig

OK = sdk.COMM_SUCCESS
OVERHEATING = 0x04
HEAVY = (("mx64", "mx64", 1, 311, 'model = "m6"\nload = { mass = 10.0, length = 0.1 }\n'), *SERVOS[1:])
LIMIT_C = 40


def heat_until_shutdown(daemon, x) -> list[tuple[int, int, int]]:
    """Stall ID 1 until Hardware Error Status is set; the (tick, Present Temperature, Present Current) seen."""
    x.write(1, A.TEMPERATURE_LIMIT, LIMIT_C)
    x.write(1, A.TORQUE_ENABLE, 1)
    x.write(1, A.GOAL_PWM, 600)
    x.write(1, A.GOAL_POSITION, 3072)               # horizontal: 9.8 N·m of gravity, out of reach
    seen = []
    for k in range(1, 81):
        daemon.step(250)
        data, comm, err = x.try_read(1, 64, 7)       # Torque Enable .. Hardware Error Status
        assert comm == OK
        if data[6]:
            return seen
        assert err == 0 and data[0] == 1
        temp = x.read(1, A.PRESENT_TEMPERATURE)
        cur = x.read(1, A.PRESENT_CURRENT, signed=True)
        pos = x.read(1, A.PRESENT_POSITION, signed=True)
        assert pos < 3072 - 300, "the pendulum must stay short of the goal (stalled)"
        seen.append((250 * k, temp, cur))
    raise AssertionError(f"no shutdown within 20 s of stall: {seen[-5:]}")


def test_overheating_shutdown(launcher):
    d = launcher.start(write_dxl_rig(launcher.dir, "sdk-thermal", fast=True, lockstep=True, servos=HEAVY))
    with open_dxl(d.rig.port) as x:
        seen = heat_until_shutdown(d, x)
        temps = [t for _, t, _ in seen]
        assert temps == sorted(temps) and temps[0] < temps[-1], "the winding heats while stalled"
        assert temps[-1] >= LIMIT_C - 2, f"tripped at Present Temperature {temps[-1]} °C, limit {LIMIT_C}"
        assert all(t <= LIMIT_C for t in temps), "no trip while above the limit"
        assert all(c > 500 for _, _, c in seen), "the stall current stays high (> 1.7 A)"
        # latched: Overheating alone (the overload estimate must not be what tripped), torque off, alert everywhere
        data, comm, err = x.try_read(1, A.HW_ERROR)
        assert (data, comm, err) == ([OVERHEATING], OK, ALERT)
        assert x.try_read(1, A.TORQUE_ENABLE)[::2] == ([0], ALERT)
        assert x.try_read(1, A.PRESENT_POSITION)[2] == ALERT
        assert x.ping(1)[1:] == (OK, ALERT)
        assert x.try_write(1, A.LED, 1) == (OK, ALERT)
        comm, err = x.ph.regWriteTxRx(x.port, 1, A.LED[0], 1, to_bytes(0, 1))
        assert (comm, err & ALERT) == (OK, ALERT)
        assert x.ping(2)[1:] == (OK, 0), "the other servos carry no alert"
        comm, err = x.try_write(1, A.TORQUE_ENABLE, 1)
        assert comm == OK and err & ALERT
        assert x.try_read(1, A.TORQUE_ENABLE)[0] == [0], "torque on refused until a reboot"
        d.step(300)
        assert x.try_read(1, A.PRESENT_PWM)[0] == [0, 0], "the motor is driven at 0 %"
        assert x.try_read(1, A.PRESENT_CURRENT)[0] in ([0, 0], [1, 0], [255, 255])
        # still hot for the servo: with the limit now below the winding, a reboot finds it again
        assert x.try_write(1, A.TEMPERATURE_LIMIT, LIMIT_C - 5) == (OK, ALERT)   # EEPROM: torque is off
        for _ in range(2):
            x.reboot(1)
            d.step(1)
            data, comm, err = x.try_read(1, A.HW_ERROR)
            assert (data, err) == ([OVERHEATING], ALERT), "re-latched at once while above the limit"
            x.try_write(1, A.TORQUE_ENABLE, 1)
            assert x.try_read(1, A.TORQUE_ENABLE)[0] == [0]


def test_reboot_after_cooling_clears_overheating(launcher):
    """Cooled below the limit, one reboot clears the error and torque may come on again (§Shutdown(63))."""
    d = launcher.start(write_dxl_rig(launcher.dir, "sdk-thermal-cool", fast=True, lockstep=True, servos=HEAVY))
    with open_dxl(d.rig.port) as x:
        heat_until_shutdown(d, x)
        for _ in range(40):                          # torque off: the winding cools (τ = 400 s)
            d.step(5000)
            if x.try_read(1, A.PRESENT_TEMPERATURE)[0][0] <= LIMIT_C - 2:
                break
        assert d.ok("state", actuator="mx64")["state"]["mx64"]["temperature"] < LIMIT_C - 1.5
        assert x.try_read(1, A.HW_ERROR)[::2] == ([OVERHEATING], ALERT), "latched until a reboot"
        x.reboot(1)
        d.step(1)
        data, comm, err = x.try_read(1, A.HW_ERROR)
        assert (data, comm, err) == ([0], OK, 0), "one reboot once cooled clears it"
        x.write(1, A.TORQUE_ENABLE, 1)
        assert x.read(1, A.TORQUE_ENABLE) == 1


def test_present_temperature_at_power_up_before_any_step(launcher):
    """Present Temperature is the winding temperature from power-up on, also before the first tick of a lock-step
    rig: the temperature is state from power-up on, not an output of step()."""
    d = launcher.start(write_dxl_rig(launcher.dir, "sdk-thermal-t0", fast=True, lockstep=True,
                                     actuator_extra={3: "initial = { temperature_c = 30.0 }\n"}))
    with open_dxl(d.rig.port) as x:
        before = {i: x.read(i, A.PRESENT_TEMPERATURE) for i in (1, 2, 3, 4)}
        d.step(1)
        after = {i: x.read(i, A.PRESENT_TEMPERATURE) for i in (1, 2, 3, 4)}
        assert after == {1: 25, 2: 25, 3: 30, 4: 25}
        assert before == after, "the servo reports its temperature from power-up on, not from the first tick"
