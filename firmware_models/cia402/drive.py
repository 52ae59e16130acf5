"""The CiA 402 drive model (`Cia402Drive`): an object store, the state machine, the modes of operation, actual
values and faults of one drive, on one `hil.joint.Joint`. Interface, statusword and behaviour:
docs/protocols/cia402.md."""

from __future__ import annotations

import math

from canopen.objectdictionary import ObjectDictionary

from firmware_models.cia402.config import DriveConfig, Sensed
from firmware_models.cia402.modes import Modes
from firmware_models.cia402.objects import (
    _M,
    _MODE_VALUES,
    _TORQUE_MODES,
    ABORT_VALUE_RANGE,
    CONTROLWORD,
    CURRENT_ACTUAL,
    DC_LINK_VOLTAGE,
    ERR_OVERCURRENT,
    ERROR_HISTORY,
    FAULT_REACTION_OPTION,
    FAULT_REACTION_OPTIONS,
    FOLLOWING_ERROR_ACTUAL,
    MAX_TORQUE,
    MODE,
    MODE_DISPLAY,
    POSITION_ACTUAL,
    POSITION_DEMAND,
    POSITION_INTERNAL,
    QUICK_STOP_OPTION,
    QUICK_STOP_OPTIONS,
    RATED_CURRENT,
    RATED_TORQUE,
    STATUSWORD,
    SUPPORTED_MODES,
    SW_BIT12,
    SW_BIT13,
    SW_INTERNAL_LIMIT,
    SW_REMOTE,
    SW_TARGET_REACHED,
    SW_VOLTAGE_ENABLED,
    SW_WARNING,
    TARGET_POSITION,
    TARGET_TORQUE,
    TORQUE_ACTUAL,
    TORQUE_DEMAND,
    TORQUE_OFFSET,
    VELOCITY_ACTUAL,
    VELOCITY_DEMAND,
    VELOCITY_THRESHOLD,
    Mode,
    Units,
    _sat,
    default_values,
)
from firmware_models.cia402.state_machine import _S, STATE_BITS, StateMachine
from hil.joint import Joint, encoder_reading
from hil.kernel import FAULT_BITS, LAWS


class Cia402Drive(StateMachine, Modes):
    """The CiA 402 drive of one product (`config`) with object dictionary `od`: object store `values`, state
    machine, modes, faults, on `joint`. Calls must be serialised by the caller (the drive holds no lock)."""

    def __init__(self, od: ObjectDictionary, joint: Joint, config: DriveConfig):
        self.od = od
        self.joint = joint
        self.config = config
        self.defaults = default_values(od)
        self.values: dict[tuple[int, int], int] = {}
        p = joint.params()
        self._hw_max_amps = p["max_amps"] if p["max_amps"] > 0 else math.inf
        self._kt_out = p["kt"] * p["gear"] * p["efficiency"]
        self._supply_v = 0.0
        self._derated = False
        self._emcy: list[tuple[int, int, bytes]] = []
        self.reset()

    def reset(self) -> None:
        """Power-up / NMT reset node: objects to their defaults, Not ready to switch on, torque off,
        kernel latches released. The first `tick()` completes the initialisation (transitions 0, 1)."""
        v = self.values
        v.clear()
        v.update(self.defaults)
        self.units = Units(self.config.counts_per_rev, self.config.zero_counts,
                           v[RATED_TORQUE] / 1000.0, v[RATED_CURRENT] / 1000.0)
        self.state = _S.NOT_READY_TO_SWITCH_ON
        self._mode = Mode(v[MODE]) if v[MODE] in _MODE_VALUES else _M.NO_MODE
        v[MODE_DISPLAY] = int(self._mode)
        self._cw_prev = v[CONTROLWORD]
        self._t = self.joint.time_s()
        self._dt = 0.0
        self._law: int | None = None
        self._sent_max_amps = math.nan
        self._enabled: bool | None = None
        self._pos_dem = 0.0          # θd [counts]
        self._vel_dem = 0.0          # ωd [counts/s]
        self._trq_dem = 0.0          # τd [‰]
        self._integral = 0.0         # I [A]
        self._i_ff = 0.0             # torque feed-forward [A]
        self._limit_active = False
        self._ramp: float | None = None     # stop-ramp deceleration [counts/s²] while stopping
        self._coast = False                 # torque off during the quick stop / fault reaction
        self._stopped = False               # the stop ramp has finished
        self._fe_time = 0.0
        self._fe_active = False
        self._pp_target = 0.0
        self._pp_moving = False
        self._pp_pending: float | None = None
        self._pp_limited = self._pp_pending_limited = False
        self._ack = False
        self._reached = False
        self._window_since: float | None = None
        self._seg_from = self._seg_to = 0.0
        self._seg_t0 = self._seg_T = 0.0
        self._last_sample_t: float | None = None
        self._sensed_state: dict | None = None     # what the actual values were last computed from
        self._sensed_inputs: tuple = ()
        self.joint.command(params=self._law_params(self.config.loop.law), enable=False, clear_latches=True)
        self._enabled = False
        self.joint.sync()
        self._sense()
        self._pos_dem = self._pos_act
        self._update_status()

    def read(self, index: int, subindex: int = 0) -> int:
        return self.values[(index, subindex)]

    def write(self, index: int, subindex: int, value: int) -> int | None:
        """A master's write; returns None or a CiA 402-level SDO abort code (see the module docstring)."""
        key = (index, subindex)
        if key == MODE and not self.mode_supported(value):
            return ABORT_VALUE_RANGE
        if key == QUICK_STOP_OPTION and value not in QUICK_STOP_OPTIONS:
            return ABORT_VALUE_RANGE
        if key == FAULT_REACTION_OPTION and value not in FAULT_REACTION_OPTIONS:
            return ABORT_VALUE_RANGE
        if key == (ERROR_HISTORY, 0):
            if value != 0:
                return ABORT_VALUE_RANGE
            self._clear_history()
            return None
        self.values[key] = value
        if key == CONTROLWORD:
            self._on_controlword(value)
        elif key == MODE:
            self._on_mode(Mode(value))
        elif key == TARGET_POSITION:
            self._csp_sample()
            return None                 # a CSP sample changes no statusword bit (the cyclic set-point path)
        elif key in (MAX_TORQUE, TARGET_TORQUE, TORQUE_OFFSET) and self.state == _S.OPERATION_ENABLED:
            self._actuate()
        self._update_status()
        return None

    def mode_supported(self, mode: int) -> bool:
        """0 (no mode) or a mode whose bit (mode − 1) is set in 0x6502 and that this model implements."""
        if mode == 0:
            return True
        return mode in _MODE_VALUES and bool(self.values[SUPPORTED_MODES] >> (mode - 1) & 1)

    @property
    def statusword(self) -> int:
        return self.values[STATUSWORD]

    @property
    def output_kt_nm_per_a(self) -> float:
        """Output torque per armature ampere (kt·gear·efficiency of the kernel parameters)."""
        return self._kt_out

    @property
    def has_fault(self) -> bool:
        """In Fault reaction active or Fault."""
        return self.state in (_S.FAULT_REACTION_ACTIVE, _S.FAULT)

    def refresh(self) -> None:
        """Actual values (0x6064, 0x606C, 0x6077, 0x6078, …) and the statusword from the kernel state as it
        is now, without running the control period: what a drive samples at a SYNC between two ticks."""
        self._sense()
        self._update_status()

    @property
    def mode(self) -> Mode:
        return self._mode

    def emcy_pending(self) -> list[tuple[int, int, bytes]]:
        """EMCY frames to send, oldest first: (error code, error register 0x1001, 5 manufacturer bytes).
        The list is handed over (the next call returns only newer ones)."""
        out, self._emcy = self._emcy, []
        return out

    def tick(self) -> None:
        """One control period: actual values, faults, automatic transitions, demand, kernel command."""
        now = self.joint.time_s()
        dt = now - self._t
        if dt < 0:
            dt = 0.0
        self._t = now
        if dt > 0:
            self._dt = dt
        st, p = self._sense()
        s = self.state
        if s == _S.NOT_READY_TO_SWITCH_ON:
            self._set_state(_S.SWITCH_ON_DISABLED)              # transition 1 (0 was the power-up)
        elif s == _S.FAULT_REACTION_ACTIVE and (self._coast or self._stopped):
            self._set_state(_S.FAULT)                           # transition 14
        elif s == _S.QUICK_STOP_ACTIVE and (
                self._coast or (self._stopped and self.values[QUICK_STOP_OPTION] in (1, 2))):
            self._set_state(_S.SWITCH_ON_DISABLED)              # transition 12 (options 5, 6 stay)
        if self.state not in (_S.NOT_READY_TO_SWITCH_ON, _S.FAULT_REACTION_ACTIVE, _S.FAULT):
            code = self._power_fault(st, p)
            if code:
                self._fault(code)
            elif self._overload(st, p):
                self._fault(ERR_OVERCURRENT, by_option=True)
        if self.state == _S.OPERATION_ENABLED:
            self._following_error(dt)
        if self.state == _S.OPERATION_ENABLED:
            self._operate(dt, now)
        elif self.state in (_S.QUICK_STOP_ACTIVE, _S.FAULT_REACTION_ACTIVE):
            self._stop_ramp(dt)
        self._actuate()
        self._publish_demands()
        self._update_status()

    def _sense(self) -> tuple[dict, dict]:
        st = self.joint.read_state()
        p = self.joint.params()
        inputs = (p["supply_override"], p["supply_v"], p["ambient"], p["kt"], p["gear"], p["efficiency"])
        same = st is self._sensed_state or st == self._sensed_state    # a LiveJoint hands out one dict per step
        if same and inputs == self._sensed_inputs:
            return st, p        # the kernel has not stepped since (a SYNC's refresh, then the tick): as it was
        self._sensed_state, self._sensed_inputs = st, inputs
        u, v = self.units, self.values
        theta = encoder_reading(st)
        cpr = u.counts_per_rad
        self._pos_act = theta * cpr + u.zero_counts
        self._vel_act = st["omega"] * cpr
        pos = _sat(round(self._pos_act), 32)
        v[POSITION_ACTUAL] = v[POSITION_INTERNAL] = pos
        v[VELOCITY_ACTUAL] = _sat(round(self._vel_act), 32)
        v[TORQUE_ACTUAL] = u.torque_permille(st["torque"])
        v[CURRENT_ACTUAL] = u.current_permille(st["i_out"])
        self._supply_v = p["supply_override"] if p["supply_override"] == p["supply_override"] else p["supply_v"]
        v[DC_LINK_VOLTAGE] = _sat(round(self._supply_v * 1000.0), 32, signed=False)
        # the winding as it is now (the kernel's `temperature` is the one at the start of the last step); the
        # drive's sensor reads the housing node where the two-node thermal model is on (MuJoCo DC motor model §1.3)
        self._temperature = p["ambient"] + st["temp_rise"]
        two_node = p["thermal_r"] > 0 and p["thermal_r2"] > 0
        sensor_c = p["ambient"] + st["housing_rise"] if two_node else self._temperature
        if self.config.vendor_values is not None:
            self.config.vendor_values(v, Sensed(theta, pos, st["torque"], sensor_c))
        self._kt_out = p["kt"] * p["gear"] * p["efficiency"]
        self._derated = bool(st["fault_flags"] & FAULT_BITS["derated"])
        return st, p

    def _max_amps(self) -> float:
        """The current limit: the kernel's max_amps at power-up and the max torque 0x6072."""
        if self._kt_out <= 0:
            return self._hw_max_amps
        return min(self._hw_max_amps, self.units.torque_nm(self.values[MAX_TORQUE]) / self._kt_out)

    def _law_params(self, law: int) -> dict:
        if law == LAWS["current"]:
            return {"law": law}
        loop = self.config.loop
        self._sent_max_amps = self._max_amps()
        return {"law": law, "pd_kp": loop.kp, "pd_damping": loop.damping,
                "max_amps": min(self._sent_max_amps, 1e9)}

    def _torque_on(self) -> bool:
        s = self.state
        if s == _S.OPERATION_ENABLED:
            return True
        return s in (_S.QUICK_STOP_ACTIVE, _S.FAULT_REACTION_ACTIVE) and not self._coast

    def _actuate(self) -> None:
        if not self._torque_on():
            if self._enabled is not False:
                self.joint.command(enable=False)
                self._enabled = False
            return
        torque_law = self.state == _S.OPERATION_ENABLED and self._mode in _TORQUE_MODES
        law = LAWS["current"] if torque_law else self.config.loop.law
        params = None
        if law != self._law or (law == self.config.loop.law and self._max_amps() != self._sent_max_amps):
            params = self._law_params(law)
            self._law = law
        if torque_law:
            limit = self._max_amps()
            amps = self.units.torque_nm(self._trq_dem) / self._kt_out if self._kt_out > 0 else 0.0
            goal = min(max(amps, -limit), limit)
        else:
            loop = self.config.loop
            d = loop.damping * math.sqrt(loop.kp)
            omega = self.units.velocity_rad(self._vel_dem)
            goal = self.units.position_rad(self._pos_dem) + (d * omega + self._integral + self._i_ff) / loop.kp
        self.joint.command(params=params, goal=goal, enable=True if self._enabled is not True else None)
        self._enabled = True

    def _publish_demands(self) -> None:
        v = self.values
        v[POSITION_DEMAND] = _sat(round(self._pos_dem), 32)
        v[VELOCITY_DEMAND] = _sat(round(self._vel_dem), 32)
        if self.state == _S.OPERATION_ENABLED and self._mode in _TORQUE_MODES:
            v[TORQUE_DEMAND] = _sat(round(self._trq_dem), 16)
        else:
            v[TORQUE_DEMAND] = v[TORQUE_ACTUAL]
        if self.state != _S.OPERATION_ENABLED:
            v[FOLLOWING_ERROR_ACTUAL] = _sat(round(self._pos_dem - self._pos_act), 32) if self._torque_on() else 0

    def _update_status(self) -> None:
        s = self.state
        sw = STATE_BITS[s]
        if self._supply_v > 0:
            sw |= SW_VOLTAGE_ENABLED
        if s != _S.NOT_READY_TO_SWITCH_ON:
            sw |= SW_REMOTE
        if self._derated:
            sw |= SW_WARNING
        mode = self._mode
        if s == _S.OPERATION_ENABLED:
            if self._limit_active:
                sw |= SW_INTERNAL_LIMIT
            if mode == _M.PP:
                sw |= (SW_TARGET_REACHED if self._reached else 0) | (SW_BIT12 if self._ack else 0)
            elif mode == _M.PV:
                speed_zero = abs(self._vel_act) <= self.values[VELOCITY_THRESHOLD]
                sw |= (SW_TARGET_REACHED if self._reached else 0) | (SW_BIT12 if speed_zero else 0)
            elif mode == _M.PT:
                sw |= SW_TARGET_REACHED if self._reached else 0
            elif mode in (_M.CSP, _M.CSV, _M.CST):
                sw |= SW_BIT12
        elif s == _S.QUICK_STOP_ACTIVE and (self._stopped or self._coast):
            sw |= SW_TARGET_REACHED
        if self._fe_active and mode in (_M.PP, _M.CSP):
            sw |= SW_BIT13
        self.values[STATUSWORD] = sw
