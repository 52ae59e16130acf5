"""The register → SI conversions of the Feetech law (firmware_models/feetech/law.py). Expected values from the
Feetech STS memory table's units (0.088° steps, step/s, 100 step/s², 0.1 %) and bam's STS3215Actuator, and a
kernel run showing that bam's registers through law.py give bam's law bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from firmware_models.feetech import law
from hil.kernel import LAWS, STS_MODES, Kernel
from hil.params import catalog
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

# bam's recorder (bam/feetech/record.py): P Coefficient = kp, D Coefficient 0; Goal_Velocity and Acceleration
# never written (0: the servo's maximum speed, no acceleration limit); no dead zone in bam's law
BAM_REGISTERS = {"Operating_Mode": 0, "P_Coefficient": 32, "D_Coefficient": 0, "I_Coefficient": 0,
                 "Goal_Velocity": 0, "Acceleration": 0, "Torque_Limit": 1000, "CW_Dead_Zone": 0, "CCW_Dead_Zone": 0}


def test_units_of_the_memory_table():
    assert law.step_rad() == pytest.approx(math.radians(0.087890625), rel=1e-15)     # 360°/4096
    assert law.speed(3400) == (3400 * 2 * math.pi) / 4096        # bam's default_max_velocity, bit for bit
    assert law.speed(-50) == pytest.approx(-0.732 * 2 * math.pi / 60, rel=1e-3)     # 50 step/s ≈ 0.732 rpm
    assert law.acceleration(1) == pytest.approx(math.radians(8.7890625), rel=1e-12)  # 100 step/s² = 8.79°/s²
    assert law.acceleration(0) == 0.0
    assert law.duty_limit(500, 0.97) == pytest.approx(0.485) and law.duty_limit(1500, 0.97) == 0.97
    assert law.pwm_duty(-250, 0.97) == pytest.approx(-0.2425) and law.pwm_duty(-2000, 0.97) == -0.97


def test_gains_and_dead_band():
    g = law.position_gains(32, 2, 16, 0.166, period_s=1e-3)
    assert g == {"sts_p": 32.0, "sts_error_gain": 0.166, "sts_ki": pytest.approx(2 * 0.166 / 1e-3),
                 "sts_kd": pytest.approx(16 * 0.166 * 1e-3)}
    v = law.speed_loop_gains(10, 200, 0.166)
    assert v["sts_kvp"] == pytest.approx(10 * 0.166 * law.CONTROL_PERIOD_S * 10) and v["sts_kvi"] == pytest.approx(3.32)
    d = law.dead_band(cw_steps=2, ccw_steps=3)
    assert d == {"sts_dead_pos": pytest.approx(3 * 2 * math.pi / 4096),
                 "sts_dead_neg": pytest.approx(2 * 2 * math.pi / 4096)}


def test_kernel_params_from_registers():
    p = law.kernel_params(BAM_REGISTERS | {"Operating_Mode": 1, "Goal_Velocity": -1000, "Acceleration": 20},
                          0.166, 0.97, full_speed_steps=3400)
    assert p["law"] == LAWS["sts"] and p["sts_mode"] == STS_MODES["wheel"]
    assert p["sts_speed"] == law.speed(1000) and p["sts_acc"] == law.acceleration(20)
    assert law.kernel_params({"Goal_Velocity": 5000}, 0.166, 0.97, 3400)["sts_speed"] == law.speed(3400)
    # Goal_Velocity 0 on a servo where it means a stop: the setpoint holds
    assert law.kernel_params({"Goal_Velocity": 0}, 0.166, 0.97, 0)["sts_speed"] == 0.0
    assert law.kernel_params({"Torque_Limit": 250}, 0.166, 0.97, 3400)["max_duty"] == pytest.approx(0.2425)
    for value, mode in ((0, "position"), (2, "pwm"), (3, "step")):
        assert law.kernel_params({"Operating_Mode": value}, 0.166, 0.97, 3400)["sts_mode"] == STS_MODES[mode]


def test_bams_registers_through_the_law_give_bams_law_bit_for_bit():
    entry = catalog.entry("sts3215")
    fw = entry.firmware
    spec = entry.actuator("m1").bam_only()
    base = kernel_params(spec, LoadConfig(mass=0.567, length=0.105), EncoderConfig(), FaultConfig(), "bam")
    assert base["law"] == LAWS["sts_pwm"]
    firmware = base | law.kernel_params(BAM_REGISTERS, fw["error_gain"], fw["max_duty"], full_speed_steps=3400)
    t = np.arange(1200) * 0.005
    goal = np.where(t < 0.5, 0.0, np.where(t < 2.0, 1.2, np.where(t < 3.5, -0.8, 0.3 * np.sin(3 * t))))
    runs = []
    for p in (base, firmware, firmware | {"sts_kd": law.position_gains(32, 0, 32, fw["error_gain"])["sts_kd"]}):
        k = Kernel(1, 0.005)
        k.set_params(0, p)
        runs.append(k.run(goal)["theta"][:, 0])
    assert np.ptp(runs[0]) > 1.0
    assert np.array_equal(runs[0], runs[1])
    assert np.max(np.abs(runs[2] - runs[0])) > 1e-6      # the default D Coefficient 32 changes the motion
