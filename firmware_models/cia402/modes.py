"""The modes of operation of the CiA 402 drive model (PP, PV, PT, CSP, CSV, CST), its stop ramps and the goal it
hands the kernel's position loop, a mixin of `Cia402Drive` (docs/protocols/cia402.md, "Modes of operation")."""

from __future__ import annotations

import math

from firmware_models.cia402.objects import (
    _M,
    _POSITION_MODES,
    _TORQUE_MODES,
    _VELOCITY_MODES,
    CONTROLWORD,
    CW_CHANGE_IMMEDIATELY,
    CW_HALT,
    CW_NEW_SETPOINT,
    CW_RELATIVE,
    INTERPOLATION_INDEX,
    INTERPOLATION_UNITS,
    MAX_MOTOR_SPEED,
    MAX_PROFILE_VELOCITY,
    MAX_TORQUE,
    POSITION_LIMIT_MAX,
    POSITION_LIMIT_MIN,
    POSITION_OFFSET,
    POSITION_WINDOW,
    POSITION_WINDOW_TIME,
    PROFILE_ACCELERATION,
    PROFILE_DECELERATION,
    PROFILE_VELOCITY,
    SYNC_PERIOD,
    TARGET_POSITION,
    TARGET_TORQUE,
    TARGET_VELOCITY,
    TORQUE_OFFSET,
    TORQUE_SLOPE,
    VELOCITY_OFFSET,
    VELOCITY_WINDOW,
    VELOCITY_WINDOW_TIME,
    Mode,
)


def _toward(v: float, target: float, up: float, down: float) -> float:
    """v moved toward target by at most `up` if |v| grows (or v changes sign) else `down` (both ≥ 0)."""
    dv = target - v
    step = up if v == 0.0 or (v > 0.0) == (dv > 0.0) else down
    return target if abs(dv) <= step else v + math.copysign(step, dv)


def profile_step(p: float, v: float, target: float, vmax: float, acc: float, dec: float,
                 dt: float) -> tuple[float, float, bool]:
    """One tick of a trapezoidal move from (p, v) toward `target` [counts, counts/s]: the new position,
    velocity and whether the move is done. acc/dec ≤ 0 mean "at once"; vmax is |v| at cruise."""
    if dt <= 0.0:
        return p, v, p == target and v == 0.0
    e = target - p
    if e == 0.0 and v == 0.0:
        return target, 0.0, True
    acc_step = acc * dt if acc > 0 else math.inf
    dec_step = dec * dt if dec > 0 else math.inf
    s = math.copysign(1.0, e) if e else 0.0
    # the largest v_new from which `dec` still stops at the target once this tick's motion,
    # (v + v_new)/2·dt, is done: v_new² + dec·dt·v_new ≤ 2·dec·(|e| − v·s·dt/2)
    v_stop = math.inf
    if dec > 0:
        rem = abs(e) - 0.5 * v * s * dt
        v_stop = 0.5 * (math.sqrt(dec_step * dec_step + 8.0 * dec * rem) - dec_step) if rem > 0 else 0.0
    v_new = _toward(v, s * min(vmax, v_stop), acc_step, dec_step)
    p_new = p + 0.5 * (v + v_new) * dt
    if s and (target - p_new) * s <= 0.0 and abs(v_new) <= dec_step * (1.0 + 1e-9):
        return target, 0.0, True            # arrived (would pass it within a tick it can stop in)
    return p_new, v_new, False


class Modes:
    """Profile position, cyclic synchronous position, profile / cyclic velocity and torque, and the stop ramps of
    `Cia402Drive` (which holds the demand they compute)."""

    def _operate(self, dt: float, now: float) -> None:
        mode = self._mode
        self._limit_active = mode == _M.PP and self._pp_limited
        self._i_ff = 0.0
        if mode == _M.PP:
            self._profile_position(dt)
        elif mode == _M.CSP:
            self._cyclic_position(now)
        elif mode in _VELOCITY_MODES:
            self._velocity(dt, mode)
        elif mode in _TORQUE_MODES:
            self._torque(dt, mode)
        else:
            self._vel_dem = 0.0                                   # no mode: hold
        if mode in _POSITION_MODES:
            self._integrate(dt)

    def _profile_velocity_limit(self) -> float:
        return float(min(self.values[PROFILE_VELOCITY], self.values[MAX_PROFILE_VELOCITY]))

    def _limits(self) -> tuple[float, float] | None:
        lo, hi = self.values[POSITION_LIMIT_MIN], self.values[POSITION_LIMIT_MAX]
        return (lo, hi) if lo < hi else None

    def _clamp_position(self, target: float) -> float:
        limits = self._limits()
        if limits is None:
            return target
        clamped = min(max(target, limits[0]), limits[1])
        if clamped != target:
            self._limit_active = True
        return clamped

    def _demand(self, target: float, limit: float) -> float:
        """A velocity or torque demand within ±limit (internal limit active, statusword bit 11, when cut),
        and 0 if it points further out past a software position limit (0x607D; docs/protocols/cia402.md)."""
        if abs(target) > limit:
            target = math.copysign(limit, target)
            self._limit_active = True
        return 0.0 if self._outward(target) else target

    def _outward(self, direction: float) -> bool:
        """A demand of this sign would push the shaft further past a software limit."""
        limits = self._limits()
        if limits is None or direction == 0:
            return False
        out = (direction > 0 and self._pos_act >= limits[1]) or (direction < 0 and self._pos_act <= limits[0])
        self._limit_active |= out
        return out

    # PP
    def _pp_controlword(self, cw: int, prev: int) -> None:
        if cw & CW_NEW_SETPOINT and not prev & CW_NEW_SETPOINT:
            base = self._pp_pending if self._pp_pending is not None else self._pp_target
            target = float(self.values[TARGET_POSITION])
            if cw & CW_RELATIVE:
                target += base
            limits = self._limits()
            limited = limits is not None and not limits[0] <= target <= limits[1]
            if limited:
                target = min(max(target, limits[0]), limits[1])
            if cw & CW_CHANGE_IMMEDIATELY or not self._pp_moving:
                self._pp_start(target, limited)
                self._pp_pending = None
                self._ack = True
            elif self._pp_pending is None:
                self._pp_pending = target
                self._pp_pending_limited = limited                # buffered: starts when this move ends
                self._ack = True
            # buffer full: the set-point is ignored and the acknowledge stays set
        if not cw & CW_NEW_SETPOINT and self._pp_pending is None:
            self._ack = False

    def _pp_start(self, target: float, limited: bool) -> None:
        self._pp_target = target
        self._pp_limited = limited
        self._pp_moving = True
        self._reached = False
        self._window_since = None

    def _profile_position(self, dt: float) -> None:
        v = self.values
        halt = bool(v[CONTROLWORD] & CW_HALT)
        if halt:
            self._ramp_velocity(0.0, v[PROFILE_DECELERATION], v[PROFILE_DECELERATION], dt)
        elif self._pp_moving:
            self._pos_dem, self._vel_dem, done = profile_step(
                self._pos_dem, self._vel_dem, self._pp_target, self._profile_velocity_limit(),
                v[PROFILE_ACCELERATION], v[PROFILE_DECELERATION], dt)
            if done:
                self._pp_moving = False
                if self._pp_pending is not None:
                    self._pp_start(self._pp_pending, self._pp_pending_limited)
                    self._pp_pending = None
                    if not v[CONTROLWORD] & CW_NEW_SETPOINT:
                        self._ack = False
        else:
            self._vel_dem = 0.0
        if halt:
            self._reached = self._vel_dem == 0.0
        elif self._pp_moving or self._pp_pending is not None:
            self._reached = False
        else:
            window = v[POSITION_WINDOW]
            inside = window < 0 or abs(self._pp_target - self._pos_act) <= window
            self._reached = self._held(inside, v[POSITION_WINDOW_TIME])

    def _held(self, condition: bool, time_ms: int) -> bool:
        """`condition` has held for `time_ms` (a 0x6068 / 0x606E window time)."""
        if not condition:
            self._window_since = None
            return False
        if self._window_since is None:
            self._window_since = self._t
        return (self._t - self._window_since) * 1000.0 >= time_ms - 1e-9

    # CSP
    def _interpolation_period(self, now: float) -> float:
        units, index = self.values[INTERPOLATION_UNITS], self.values[INTERPOLATION_INDEX]
        if units > 0:
            return units * 10.0 ** index
        if self.values[SYNC_PERIOD] > 0:
            return self.values[SYNC_PERIOD] * 1e-6
        last = self._last_sample_t
        if last is not None and 0.0 < now - last <= 0.1:
            return now - last
        return self._dt or 1e-3

    def _csp_sample(self) -> None:
        """A new 0x607A: interpolate from the present demand to it over one interpolation period."""
        now = self.joint.time_s()
        self._seg_T = max(self._interpolation_period(now), 1e-9)
        self._last_sample_t = now
        self._seg_t0 = now
        self._seg_from = self._pos_dem
        self._seg_to = float(self.values[TARGET_POSITION] + self.values[POSITION_OFFSET])

    def _cyclic_position(self, now: float) -> None:
        target = self._clamp_position(self._seg_to)
        # the demand for the coming period: at now + one tick
        tau = min(max((now + self._dt - self._seg_t0) / self._seg_T, 0.0), 1.0)
        self._pos_dem = self._seg_from + (target - self._seg_from) * tau
        # feed-forward while samples keep coming (half a tick of slack for the phase of writes and ticks)
        fresh = now - self._seg_t0 < self._seg_T + 0.5 * self._dt
        slope = (target - self._seg_from) / self._seg_T if fresh else 0.0
        self._vel_dem = slope + self.values[VELOCITY_OFFSET]
        self._i_ff = self._torque_ff()

    def _torque_ff(self) -> float:
        offset = self.values[TORQUE_OFFSET]
        return self.units.torque_nm(offset) / self._kt_out if offset and self._kt_out > 0 else 0.0

    # PV / CSV
    def _velocity(self, dt: float, mode: Mode) -> None:
        v = self.values
        if mode == _M.PV:
            vmax = float(v[MAX_PROFILE_VELOCITY])
            target = 0.0 if v[CONTROLWORD] & CW_HALT else min(max(float(v[TARGET_VELOCITY]), -vmax), vmax)
            if self._outward(target):
                target = 0.0
            self._ramp_velocity(target, v[PROFILE_ACCELERATION], v[PROFILE_DECELERATION], dt)
            if v[CONTROLWORD] & CW_HALT:
                self._reached = self._vel_dem == 0.0
            else:
                inside = abs(self._vel_act - target) <= v[VELOCITY_WINDOW]
                self._reached = self._held(inside, v[VELOCITY_WINDOW_TIME])
        else:
            vmax = v[MAX_MOTOR_SPEED] / 60.0 / self.config.motor_revs_per_output_rev * self.units.counts_per_rev
            target = self._demand(float(v[TARGET_VELOCITY] + v[VELOCITY_OFFSET]), vmax)
            self._vel_dem = target
            self._pos_dem += target * dt
            self._i_ff = self._torque_ff()
        # anti-windup: θd stays within what the current limit can pull the shaft back from
        band = self._max_amps() / self.config.loop.kp * self.units.counts_per_rad
        self._pos_dem = min(max(self._pos_dem, self._pos_act - band), self._pos_act + band)
        self._integral = 0.0

    def _ramp_velocity(self, target: float, acc: float, dec: float, dt: float) -> None:
        up = acc * dt if acc > 0 else math.inf
        down = dec * dt if dec > 0 else math.inf
        v0 = self._vel_dem
        self._vel_dem = _toward(v0, target, up, down)
        self._pos_dem += 0.5 * (v0 + self._vel_dem) * dt

    # PT / CST
    def _torque(self, dt: float, mode: Mode) -> None:
        v = self.values
        limit = float(v[MAX_TORQUE])
        if mode == _M.PT:
            target = 0.0 if v[CONTROLWORD] & CW_HALT else float(v[TARGET_TORQUE])
        else:
            target = float(v[TARGET_TORQUE] + v[TORQUE_OFFSET])
        target = self._demand(target, limit)
        if mode == _M.PT:
            slope = v[TORQUE_SLOPE]
            step = slope * dt if slope > 0 else math.inf
            self._trq_dem = _toward(self._trq_dem, target, step, step)
            self._reached = self._trq_dem == target
        else:
            self._trq_dem = target
        self._pos_dem = self._pos_act
        self._vel_dem = self._vel_act
        self._integral = 0.0

    # stops
    def _begin_stop(self, coast: bool, decel: float) -> None:
        self._coast = coast
        self._stopped = False
        self._ramp = float(decel)
        self._integral = 0.0
        self._i_ff = 0.0
        # from the shaft as it is: after a following error the demand is exactly what it cannot follow
        self._sense()
        self._pos_dem, self._vel_dem = self._pos_act, self._vel_act
        if coast:
            self._ramp = None

    def _stop_ramp(self, dt: float) -> None:
        if self._coast:
            return
        decel = self._ramp or 0.0
        self._ramp_velocity(0.0, decel, decel, dt)
        self._stopped = self._vel_dem == 0.0
        self._integrate(dt)

    def _integrate(self, dt: float) -> None:
        ki = self.config.loop.ki
        if ki <= 0 or dt <= 0:
            return
        e = (self._pos_dem - self._pos_act) / self.units.counts_per_rad
        limit = self._max_amps()
        self._integral = min(max(self._integral + ki * e * dt, -limit), limit)
