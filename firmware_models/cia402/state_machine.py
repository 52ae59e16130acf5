"""The CiA 402 state machine (controlword, transitions) and the drive's faults, a mixin of `Cia402Drive`
(CiA 402-2 drive device control FSA; docs/protocols/cia402.md, "State machine and faults")."""

from __future__ import annotations

from enum import IntEnum

from firmware_models.cia402.objects import (
    _M,
    _POSITION_MODES,
    _POWER_FAULTS,
    _VELOCITY_MODES,
    CW_FAULT_RESET,
    ERR_FOLLOWING,
    ERR_NONE,
    ERR_OVERCURRENT,
    ERR_OVERHEAT,
    ERR_OVERVOLTAGE,
    ERR_UNDERVOLTAGE,
    ERROR_CODE,
    ERROR_HISTORY,
    ERROR_REGISTER,
    FAULT_REACTION_OPTION,
    FOLLOWING_ERROR_ACTUAL,
    FOLLOWING_ERROR_TIME,
    FOLLOWING_ERROR_WINDOW,
    HISTORY_LENGTH,
    MODE_DISPLAY,
    PROFILE_DECELERATION,
    QUICK_STOP_DECELERATION,
    QUICK_STOP_OPTION,
    TORQUE_ACTUAL,
    Mode,
    _members,
    _sat,
)
from hil.kernel import FAULT_BITS, peak_spent


class State(IntEnum):
    NOT_READY_TO_SWITCH_ON = 0
    SWITCH_ON_DISABLED = 1
    READY_TO_SWITCH_ON = 2
    SWITCHED_ON = 3
    OPERATION_ENABLED = 4
    QUICK_STOP_ACTIVE = 5
    FAULT_REACTION_ACTIVE = 6
    FAULT = 7


# statusword bits 0, 1, 2, 3, 5, 6 of each state (CiA 402-2 FSA; canopen's State402.SW_MASK)
STATE_BITS = {
    State.NOT_READY_TO_SWITCH_ON: 0x00,
    State.SWITCH_ON_DISABLED: 0x40,
    State.READY_TO_SWITCH_ON: 0x21,
    State.SWITCHED_ON: 0x23,
    State.OPERATION_ENABLED: 0x27,
    State.QUICK_STOP_ACTIVE: 0x07,
    State.FAULT_REACTION_ACTIVE: 0x0F,
    State.FAULT: 0x08,
}


class Command(IntEnum):
    DISABLE_VOLTAGE = 0
    QUICK_STOP = 1
    SHUTDOWN = 2
    SWITCH_ON = 3            # also "disable operation"
    ENABLE_OPERATION = 4     # also "switch on + enable operation"


def decode_controlword(cw: int) -> Command | None:
    """The state-machine command of controlword bits 0..3, 7 (None while bit 7 is set)."""
    if cw & CW_FAULT_RESET:
        return None
    if not cw & 0x02:
        return Command.DISABLE_VOLTAGE      # 0xxx xx0x
    if not cw & 0x04:
        return Command.QUICK_STOP           # 0xxx x01x
    if not cw & 0x01:
        return Command.SHUTDOWN             # 0xxx x110
    if not cw & 0x08:
        return Command.SWITCH_ON            # 0xxx 0111
    return Command.ENABLE_OPERATION         # 0xxx 1111


def error_register(code: int) -> int:
    """0x1001 for an error code (CiA 301): bit 0 generic, 1 current, 2 voltage, 3 temperature,
    5 device profile (CiA 402 0x8xxx monitoring codes such as the following error)."""
    if code == ERR_NONE:
        return 0
    reg = 0x01
    reg |= {0x2: 0x02, 0x3: 0x04, 0x4: 0x08, 0x8: 0x20}.get(code >> 12, 0)
    return reg


_S, _C = _members(State), _members(Command)


class StateMachine:
    """Controlword commands, transitions and faults of `Cia402Drive` (which holds the state they act on)."""

    def _on_controlword(self, cw: int) -> None:
        prev, self._cw_prev = self._cw_prev, cw
        cmd = decode_controlword(cw)
        if cmd is None:
            if not prev & CW_FAULT_RESET and self.state == _S.FAULT:
                self._fault_reset()
        else:
            self._command(cmd)
        if self.state == _S.OPERATION_ENABLED and self._mode == _M.PP:
            self._pp_controlword(cw, prev)

    def _command(self, cmd: Command) -> None:
        s, C, S = self.state, _C, _S
        nxt = None
        if s == S.SWITCH_ON_DISABLED:
            if cmd == C.SHUTDOWN:
                nxt = S.READY_TO_SWITCH_ON                                    # 2
        elif s == S.READY_TO_SWITCH_ON:
            if cmd == C.SWITCH_ON:
                nxt = S.SWITCHED_ON                                           # 3
            elif cmd == C.ENABLE_OPERATION:
                self._set_state(S.SWITCHED_ON)                                # 3 then 4
                nxt = S.OPERATION_ENABLED
            elif cmd in (C.DISABLE_VOLTAGE, C.QUICK_STOP):
                nxt = S.SWITCH_ON_DISABLED                                    # 7
        elif s == S.SWITCHED_ON:
            if cmd == C.ENABLE_OPERATION:
                nxt = S.OPERATION_ENABLED                                     # 4
            elif cmd == C.SHUTDOWN:
                nxt = S.READY_TO_SWITCH_ON                                    # 6
            elif cmd in (C.DISABLE_VOLTAGE, C.QUICK_STOP):
                nxt = S.SWITCH_ON_DISABLED                                    # 10
        elif s == S.OPERATION_ENABLED:
            nxt = {C.SWITCH_ON: S.SWITCHED_ON,                                # 5
                   C.SHUTDOWN: S.READY_TO_SWITCH_ON,                          # 8
                   C.DISABLE_VOLTAGE: S.SWITCH_ON_DISABLED,                   # 9
                   C.QUICK_STOP: S.QUICK_STOP_ACTIVE}.get(cmd)                # 11
        elif s == S.QUICK_STOP_ACTIVE:
            if cmd == C.DISABLE_VOLTAGE:
                nxt = S.SWITCH_ON_DISABLED                                    # 12
            elif cmd == C.ENABLE_OPERATION and self.values[QUICK_STOP_OPTION] in (5, 6):
                nxt = S.OPERATION_ENABLED                                     # 16
        if nxt is not None:
            self._set_state(nxt)

    def _set_state(self, new: State) -> None:
        self.state = new
        self._fe_time = 0.0
        if new == _S.OPERATION_ENABLED:
            self._start_operation()
        elif new == _S.QUICK_STOP_ACTIVE:
            option = self.values[QUICK_STOP_OPTION]
            self._begin_stop(coast=option == 0,
                             decel=self.values[PROFILE_DECELERATION if option in (1, 5) else QUICK_STOP_DECELERATION])
        elif new not in (_S.FAULT_REACTION_ACTIVE,):
            self._coast = False
            self._ramp = None
        self._actuate()
        self._update_status()

    def _start_operation(self) -> None:
        """Transitions 4 and 16: the demand starts from the shaft as it is."""
        self._coast = False
        self._ramp = None
        self._resync()

    def _resync(self) -> None:
        self._sense()
        self._pos_dem = self._pos_act
        self._vel_dem = self._vel_act if self._mode in _VELOCITY_MODES else 0.0
        self._trq_dem = float(self.values[TORQUE_ACTUAL]) if self._mode == _M.PT else 0.0
        self._integral = 0.0
        self._i_ff = 0.0
        self._fe_active = False
        self._fe_time = 0.0
        self._pp_target = self._pos_act
        self._pp_moving = False
        self._pp_pending = None
        self._pp_limited = self._pp_pending_limited = False
        self._ack = False
        self._reached = False
        self._window_since = None
        self._limit_active = False
        if self._mode == _M.CSP:
            self._last_sample_t = None
            self._csp_sample()

    def _on_mode(self, mode: Mode) -> None:
        """0x6060 takes effect at once; 0x6061 follows."""
        self._mode = mode
        self.values[MODE_DISPLAY] = int(mode)
        if self.state == _S.OPERATION_ENABLED:
            self._resync()
            self._actuate()

    def _power_fault(self, st: dict, p: dict) -> int:
        latched = st["latched"]
        if latched & FAULT_BITS["overheat"]:
            return ERR_OVERHEAT
        if latched & FAULT_BITS["overload"] or st["oc_active"]:
            return ERR_OVERCURRENT
        if self._supply_v < self.config.dc_link_min_v:
            return ERR_UNDERVOLTAGE
        if self._supply_v > self.config.dc_link_max_v:
            return ERR_OVERVOLTAGE
        return ERR_NONE

    def _overload(self, st, p: dict) -> bool:
        """The peak current's i²t budget spent while the drive drives: the current is held to the continuous
        limit (MuJoCo DC motor model §1.1), a continuous over-current (CiA 301 error code 0x2310)."""
        i2t = st["i2t"]
        return i2t > 0 and self._torque_on() and peak_spent(p, i2t)

    def _fault(self, code: int, by_option: bool = False) -> None:
        """Transition 13: error code, error register, history, EMCY, and the fault reaction: torque off at once
        for a power fault unless `by_option`, otherwise as 0x605E says."""
        register = error_register(code)
        self.values[ERROR_CODE] = code
        self.values[ERROR_REGISTER] = register
        self._push_history(code)
        self._emcy.append((code, register, bytes(5)))
        option = self.values[FAULT_REACTION_OPTION]
        coast = (code in _POWER_FAULTS and not by_option) or option == 0
        decel = self.values[PROFILE_DECELERATION if option == 1 else QUICK_STOP_DECELERATION]
        self.state = _S.FAULT_REACTION_ACTIVE
        self._begin_stop(coast=coast, decel=decel)
        self._actuate()
        self._update_status()

    def _fault_reset(self) -> None:
        """Transition 15, once no fault condition remains."""
        self._sense()
        if not self.config.dc_link_min_v <= self._supply_v <= self.config.dc_link_max_v:
            return
        limit = self.joint.params()["temp_limit"]
        if limit > 0 and self._temperature > limit:
            return
        self.joint.command(clear_latches=True)
        self.joint.sync()
        self.values[ERROR_CODE] = ERR_NONE
        self.values[ERROR_REGISTER] = 0
        self._emcy.append((ERR_NONE, 0, bytes(5)))
        self._fe_active = False
        self._set_state(_S.SWITCH_ON_DISABLED)

    def _push_history(self, code: int) -> None:
        v = self.values
        n = min(v.get((ERROR_HISTORY, 0), 0) + 1, HISTORY_LENGTH)
        for sub in range(n, 1, -1):
            v[(ERROR_HISTORY, sub)] = v.get((ERROR_HISTORY, sub - 1), 0)
        v[(ERROR_HISTORY, 1)] = code
        v[(ERROR_HISTORY, 0)] = n

    def _clear_history(self) -> None:
        for sub in range(HISTORY_LENGTH + 1):
            self.values[(ERROR_HISTORY, sub)] = 0

    def _following_error(self, dt: float) -> None:
        """|θd − θ| above 0x6065 for longer than 0x6066 ms, in the position-controlled modes."""
        err = self._pos_dem - self._pos_act
        self.values[FOLLOWING_ERROR_ACTUAL] = _sat(round(err), 32)
        window = self.values[FOLLOWING_ERROR_WINDOW]
        if self._mode not in _POSITION_MODES or window < 0:       # 0xFFFFFFFF (I32 −1): monitoring off
            self._fe_time = 0.0
            return
        if abs(err) <= window:
            self._fe_time = 0.0
            return
        self._fe_time += dt
        if self._fe_time * 1000.0 >= self.values[FOLLOWING_ERROR_TIME]:
            self._fe_active = True
            self._fault(ERR_FOLLOWING)
