"""Register → SI conversions a Feetech STS firmware model hands the kernel's law `sts` (hil/kernel/feetech.pxi).

Pure functions of register values (the Feetech STS memory table's units; the names are LeRobot's,
src/lerobot/motors/feetech/tables.py). The position loop's P is bam's measured scaling (duty per P unit
and rad, bam/feetech/actuator.py `STS3215Actuator` error_gain); Feetech publishes no scaling of I, D or
the speed loop's gains: the choices are stated where they are made and in docs/feetech.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from hil.kernel import LAWS, STS_MODES

__all__ = ["CONTROL_PERIOD_S", "MODES", "acceleration", "dead_band", "duty_limit", "kernel_params", "position_gains",
           "pwm_duty", "speed", "speed_loop_gains", "step_rad"]

# The firmware's loop period [s], the time base of the I and D terms: Feetech publishes none; 1 ms is the
# position update period its STS3250 datasheet gives (robonine.com, "Feetech STS3250 Smart Actuator" Table 1)
CONTROL_PERIOD_S = 1e-3
ACCELERATION_STEPS = 100.0     # step/s² per Acceleration (41) unit (memory table: 100 step/s², 8.7°/s²)
# Operating Mode (33) values (memory table): 0 position servo, 1 constant speed (wheel), 2 PWM open loop, 3 step
MODES = {0: "position", 1: "wheel", 2: "pwm", 3: "step"}


def step_rad(resolution: int = 4096) -> float:
    """One position step [rad] of an encoder of `resolution` steps per turn (STS3215: 4096, 0.088°)."""
    return 2.0 * math.pi / resolution


def position_gains(p: int, i: int, d: int, error_gain: float, period_s: float = CONTROL_PERIOD_S) -> dict[str, float]:
    """P/D/I Coefficient (21, 22, 23) → the kernel's position PID.

    P stays the raw multiplier: the kernel forms (q_s − θ)·P·error_gain in bam's order, error_gain [duty per
    (P unit · rad)]. Our choice for I and D, in P's units: each unit is worth a P unit on the error summed
    over one control period (I) or on its change over one period (D):
    ki = I·error_gain/period [duty/(rad·s)], kd = D·error_gain·period [duty·s/rad]."""
    return {"sts_p": float(p), "sts_error_gain": error_gain, "sts_ki": i * error_gain / period_s,
            "sts_kd": d * error_gain * period_s}


def speed_loop_gains(vp: int, vi: int, error_gain: float, period_s: float = CONTROL_PERIOD_S) -> dict[str, float]:
    """Velocity closed-loop P (37) and I (39) → the kernel's wheel-mode PI, scaled as position_gains scales D
    and P (our choice): the I term acts on ∫(v_s − ω)dt, a lag in rad, as P on a position error,
    kvi = VI·error_gain/10 [duty/rad]; the P term as D, kvp = VP·error_gain·period·10 [duty·s/rad]. The
    factor 10 keeps the memory table's defaults (10, 200) from a loop stiffer than the position loop's."""
    return {"sts_kvp": vp * error_gain * period_s * 10.0, "sts_kvi": vi * error_gain / 10.0}


def speed(steps_per_s: float, resolution: int = 4096) -> float:
    """Goal Speed (46) [step/s, sign-magnitude decoded] → [rad/s] (in bam's order: 3400 step/s gives bam's
    STS3215Actuator default_max_velocity, (3400·2·π)/4096, bit for bit)."""
    return steps_per_s * 2.0 * math.pi / resolution


def acceleration(units: int, resolution: int = 4096) -> float:
    """Acceleration (41) [100 step/s²] → [rad/s²]; 0 is no limit (the kernel's sts_acc 0)."""
    return units * ACCELERATION_STEPS * step_rad(resolution)


def dead_band(cw_steps: int, ccw_steps: int, resolution: int = 4096) -> dict[str, float]:
    """CW/CCW Dead Zone (26, 27) [step] → the kernel's dead band of the position error [rad]. The memory table
    gives the unit only: our choice is that CCW (the direction of rising steps) bounds positive errors (goal
    ahead in +), CW negative ones, and that the firmware drives nothing within the band."""
    return {"sts_dead_pos": ccw_steps * step_rad(resolution), "sts_dead_neg": cw_steps * step_rad(resolution)}


def duty_limit(torque_limit_permille: int, full_duty: float) -> float:
    """Torque Limit (48) [0.1 %] → the duty clamp; `full_duty` is the duty at 100 % (bam max_pwm 0.97)."""
    return full_duty * min(max(torque_limit_permille, 0), 1000) / 1000.0


def pwm_duty(goal_time_permille: int, full_duty: float) -> float:
    """Goal Time (44) in PWM mode [0.1 %, sign-magnitude decoded, BIT10 the direction] → the duty [-1, 1]."""
    return full_duty * max(-1000, min(goal_time_permille, 1000)) / 1000.0


def kernel_params(registers: Mapping[str, int], error_gain: float, full_duty: float, full_speed_steps: float,
                  resolution: int = 4096) -> dict[str, float]:
    """The law `sts`'s kernel parameters from register values by LeRobot's names (signed items decoded):
    Operating_Mode, P/D/I_Coefficient, CW/CCW_Dead_Zone, the two Velocity_closed_loop coefficients,
    Acceleration, Goal_Velocity, Torque_Limit, Minimum_Startup_Force (24: the least duty, in 0.1 % of the
    locked-rotor output like Torque_Limit); absent ones count as 0 (Torque_Limit as 1000).

    `full_speed_steps` [step/s] is the speed a Goal_Velocity of 0 means (the servo's maximum, e.g.
    Maximum_Velocity_Limit × 50 with Phase bit 3; 0 for a servo on which Goal_Velocity 0 stops)."""
    r = registers.get
    goal_speed = abs(r("Goal_Velocity", 0))
    steps = full_speed_steps if goal_speed == 0 else min(goal_speed, full_speed_steps or goal_speed)
    out = {"law": LAWS["sts"], "sts_mode": STS_MODES[MODES.get(r("Operating_Mode", 0), "position")],
           "sts_speed": speed(steps, resolution), "sts_acc": acceleration(r("Acceleration", 0), resolution),
           "max_duty": duty_limit(r("Torque_Limit", 1000), full_duty),
           "sts_punch": duty_limit(r("Minimum_Startup_Force", 0), full_duty)}
    out |= position_gains(r("P_Coefficient", 0), r("I_Coefficient", 0), r("D_Coefficient", 0), error_gain)
    out |= speed_loop_gains(r("Velocity_closed_loop_P_proportional_coefficient", 0),
                            r("Velocity_closed_loop_I_integral_coefficient", 0), error_gain)
    out |= dead_band(r("CW_Dead_Zone", 0), r("CCW_Dead_Zone", 0), resolution)
    return out
