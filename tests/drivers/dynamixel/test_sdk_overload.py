"""Overload Error through the real SDK (e-manual §Hardware Error Status(70), §Shutdown(63); Protocol 2.0 §Status
Packet, Alert): a lock-step rig whose MX-64 (ID 1) holds a 10 kg pendulum it cannot lift, its catalog entry given a
peak current of 2 A for 0.5 s above a continuous 1 A (a copy of config/ in $SERVO_HIL_CONFIG, which the daemon
reads). Stalled, the servo draws the peak until the i²t budget (2² − 1²) A² × 0.5 s is spent, 0.5 s later, then the
continuous current, and reports Overload. Each test gets a daemon of its own: a latched hardware error is what is
being tested."""

from __future__ import annotations

import shutil

import dynamixel_sdk as sdk
import pytest

from .conftest import ALERT, CONFIG, SERVOS, A, open_dxl, write_dxl_rig

OK = sdk.COMM_SUCCESS
OVERLOAD, OVERHEATING = 0x20, 0x04
HEAVY = (("mx64", "mx64", 1, 311, 'model = "m6"\nload = { mass = 10.0, length = 0.1 }\n'), *SERVOS[1:])
CURRENT_UNIT_A = 3.36e-3            # MX-64(2.0) Present Current (e-manual §Present Current(126))
I_CONT, I_PEAK, T_PEAK = 1.0, 2.0, 0.5


@pytest.fixture
def peak_catalog(tmp_path, monkeypatch):
    """config/ with the MX-64's continuous current 1 A and a 2 A peak for 0.5 s, for the daemon."""
    config = tmp_path / "config"
    shutil.copytree(CONFIG, config)
    path = config / "actuators" / "mx64.toml"
    text = path.read_text()
    old = "saturation = [0.0, 6.52]"
    assert old in text
    path.write_text(text.replace(old, f"saturation = [0.0, {I_CONT}]\npeak = [{I_PEAK}, {T_PEAK}]"))
    monkeypatch.setenv("SERVO_HIL_CONFIG", str(config))


def stall(x) -> None:
    x.write(1, A.TORQUE_ENABLE, 1)
    x.write(1, A.GOAL_POSITION, 3072)               # horizontal: 9.8 N·m of gravity, out of reach


def test_overload_when_the_budget_is_spent_shuts_the_torque_off(launcher, peak_catalog):
    d = launcher.start(write_dxl_rig(launcher.dir, "sdk-overload", fast=True, lockstep=True, servos=HEAVY))
    with open_dxl(d.rig.port) as x:
        assert x.read(1, A.SHUTDOWN) == 0x34        # Overload is in the default Shutdown
        stall(x)
        d.step(400)                                  # 0.4 s: within the budget
        data, comm, err = x.try_read(1, 64, 7)      # Torque Enable .. Hardware Error Status
        assert (comm, err, data[0], data[6]) == (OK, 0, 1, 0)
        assert x.read(1, A.PRESENT_CURRENT, signed=True) == round(I_PEAK / CURRENT_UNIT_A)
        d.step(150)                                  # past 0.5 s
        data, comm, err = x.try_read(1, A.HW_ERROR)
        assert (data, comm, err) == ([OVERLOAD], OK, ALERT)
        assert x.try_read(1, A.TORQUE_ENABLE)[::2] == ([0], ALERT)
        assert x.ping(1)[1:] == (OK, ALERT)
        assert x.ping(2)[1:] == (OK, 0), "the other servos carry no alert"
        d.step(5)
        assert x.try_read(1, A.PRESENT_CURRENT)[0] == [0, 0], "torque off: no current"
        x.try_write(1, A.TORQUE_ENABLE, 1)
        assert x.try_read(1, A.TORQUE_ENABLE)[0] == [0], "torque on refused until a reboot"
        d.step(200)
        assert x.try_read(1, A.HW_ERROR)[::2] == ([OVERLOAD], ALERT), "latched"
        x.reboot(1)
        d.step(1)
        assert x.try_read(1, A.HW_ERROR) == ([0], OK, 0), "one reboot clears it"
        x.write(1, A.TORQUE_ENABLE, 1)
        assert x.read(1, A.TORQUE_ENABLE) == 1


def test_overload_without_shutdown_keeps_the_torque_at_the_continuous_current(launcher, peak_catalog):
    d = launcher.start(write_dxl_rig(launcher.dir, "sdk-overload-on", fast=True, lockstep=True, servos=HEAVY,
                                     registers={1: {"Shutdown": OVERHEATING}}))
    with open_dxl(d.rig.port) as x:
        assert x.read(1, A.SHUTDOWN) == OVERHEATING
        stall(x)
        d.step(600)
        data, comm, err = x.try_read(1, A.HW_ERROR)
        assert (data, comm, err) == ([OVERLOAD], OK, ALERT), "the error and the alert, without a shutdown"
        data, comm, err = x.try_read(1, A.TORQUE_ENABLE)
        assert (data, err) == ([1], ALERT)
        cur, comm, err = x.try_read(1, A.PRESENT_CURRENT)
        assert err == ALERT and int.from_bytes(bytes(cur), "little", signed=True) == round(I_CONT / CURRENT_UNIT_A)
        x.reboot(1)
        d.step(1)
        assert x.try_read(1, A.HW_ERROR) == ([0], OK, 0)
