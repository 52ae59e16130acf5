"""One simulated eRob's CiA 402 drive: state machine, modes, actual values and faults.

The drive keeps a plain object store `values[(index, subindex)] = int`, seeded from the object
dictionary (`object_dictionary.load_object_dictionary`), and reaches the physics only through a
`hil.joint.Joint`. The CANopen layers (SDO server, PDOs, NMT, EMCY producer) sit on top and call:

- `write(index, subindex, value)` for every SDO download or RPDO entry, after they checked existence,
  access, size and the EDS range. It returns None or the CiA 402-level SDO abort code
  0x06090030 (value range) for a mode 0x6060 outside 0x6502, a quick stop option 0x605A other than
  0, 1, 2, 5, 6, a fault reaction option 0x605E other than 0, 1, 2, or a non-zero write to 0x1003:0.
  The generic codes (0x06020000 no object, 0x06090011 no sub-index, 0x06010002 read only,
  0x06070010 length, 0x06090030 for EDS limits) are the SDO layer's.
- `read(index, subindex)` for uploads and TPDOs (the statusword is current after every write and tick);
- `tick()` periodically (1 kHz in the real-time loop): actual values from the kernel state, faults,
  automatic transitions, the profile generators, and the kernel command;
- `emcy_pending()` for the EMCY frames to send.
Calls must be serialised by the caller (the class holds no lock).

State machine (notes/erob.md §3.3, CiA 402 / canopen.profiles.p402.State402): controlword commands need
bit 7 = 0; a rising edge of bit 7 is fault reset. Commands that are not a transition of the present state
are ignored. "Switch on + enable operation" (0x0F) in Ready to switch on runs transitions 3 and 4.
Transitions 0/1 happen at the first `tick()` after power-up or `reset()`; 14 (fault reaction → fault)
and 12 after a quick-stop ramp (options 1, 2) at a later tick.

Statusword: state bits per the table; bit 4 (voltage enabled) while the DC link is powered; bit 5
(quick stop) is 1 in Ready to switch on, Switched on and Operation enabled; bit 9 (remote) once
initialised; bit 7 (warning) while the kernel derates current for temperature; bit 11 (internal limit)
while a software position limit 0x607D, the max torque 0x6072 or (CSV) the max motor speed 0x6080 cuts
the demand. Mode-specific bits in
Operation enabled: PP 10 target reached (demand at the target, |actual − target| ≤ 0x6067 for 0x6068 ms;
or stopped under halt), 12 set-point acknowledge, 13 following error; PV 10 |v − target| ≤ 0x606D for
0x606E ms, 12 speed (|v| ≤ 0x606F); PT 10 torque demand at the target; CSP/CSV/CST 12 "drive follows
the command value", CSP 13 following error (bit 10 is reserved in the cyclic modes and stays 0).
In Quick stop active bit 10 means "stopped". With mode 0 (no mode, the EDS default) the drive holds
its position and sets no mode bits.

Control (what the kernel runs; the eRob's own loop gains 0x2380–0x2382 have unpublished units and are
only stored): one position loop with the kernel law `erob_pd`, its gains from `config/erob/<variant>.toml`
[loop]. The goal u folds the drive's demand into bam's law i = kp·(u − θ) − D·ω, D = damping·√kp:
u = θd + (D·ωd + I + i_ff)/kp gives i = kp·(θd − θ) + D·(ωd − ω) + I + i_ff, where I = ∫ki·(θd − θ)dt is
computed here at tick rate (clamped to the current limit) and i_ff is a torque feed-forward (0x60B2).
- PP (1): a trapezoidal profile generated here at tick rate (0x6081 ≤ 0x607F, 0x6083, 0x6084) gives
  θd and ωd; set-point handshake per CiA 402 (bit 4 rising edge, bit 5 change immediately, bit 6
  relative, one buffered set-point), halt (bit 8) ramps down with 0x6084.
- CSP (8): 0x607A (+ 0x60B0) is interpolated linearly over the interpolation period (0x60C2 if set, else
  the SYNC period 0x1006, else the measured interval between target writes), the slope is the velocity
  feed-forward (+ 0x60B1); no profile limits (notes §1.2). On enable (or a switch to CSP) the drive heads
  for 0x607A as it stands, so a master writes the actual position there first (third-party eRob scripts
  do); a stale target far away ends in a following-error fault.
- PV (3) / CSV (9): the velocity demand (PV: ramped with 0x6083/0x6084 toward 0x60FF ≤ 0x607F; CSV:
  0x60FF + 0x60B1 ≤ 0x6080) is integrated into θd, so the same law is a velocity PI with P = D and
  I = kp; θd is held within max current/kp of the shaft (anti-windup when the current saturates).
- PT (4) / CST (10): the kernel law `current` with u = τd/kt (kt = motorconst·gear·efficiency of the
  kernel parameters), τd = 0x6071 (‰ of 0x6076; PT ramped by 0x6087 ‰/s, 0 = step; CST + 0x60B2),
  clamped by 0x6072.
- Current limit everywhere: the kernel's max_amps at power-up (the catalog's 12 A) and 0x6072.
- Software limits 0x607D (active when min < max): position targets are clamped; in the velocity modes
  a demand pointing further out is set to 0; in the torque modes such a torque is cut (notes §3.4).
- Torque is on only in Operation enabled, Quick stop active and a ramping fault reaction. Disable
  operation, shutdown and disable voltage switch it off at once (0x605B/0x605C "disable drive function").
- Quick stop 0x605A: 0 torque off, 1/5 ramp with 0x6084, 2/6 ramp with 0x6085; 1/2 then go to Switch on
  disabled, 5/6 stay (transition 16 allowed). A ramp deceleration of 0 stops at once. Every stop ramp
  starts from the shaft's position and velocity and runs on the position loop, whatever the mode.
- Accelerations are in counts/s² as ZeroErr's demos write them (notes §3.2); note that the EDS defaults
  (0x6083/0x6084/0x6085 = 200 counts/s²) make ramps very slow until the master sets them.

Faults (→ Fault reaction active → Fault, 0x603F, 0x1001, 0x1003 history, one EMCY each): kernel latches
overheat → 0x4310, overload (|i| too long) and open circuit → 0x2310; the supply (kernel supply_v or
an injected supply_override) outside [dc_link_min_v, dc_link_max_v] → 0x3220 / 0x3210; |θd − θ| above
0x6065 for longer than 0x6066 ms in PP, CSP or no mode → 0x8611. Power faults switch torque off at
once; a following error reacts per 0x605E (0 torque off, 1 ramp 0x6084, 2 ramp 0x6085). Fault reset
(0x6040 bit 7 rising edge in Fault) succeeds only once the supply is back in range and the winding is
below the kernel's temp_limit; it releases the kernel latches and sends EMCY 0x0000.
"""

from __future__ import annotations

import functools
import math
import types
from dataclasses import dataclass
from enum import IntEnum

from canopen.objectdictionary import ObjectDictionary

from firmware_models.erob.object_dictionary import (
    ErobConfig,
    default_values,
    load_config,
    load_object_dictionary,
)
from hil.joint import Joint
from hil.kernel import FAULT_BITS, LAWS

TWO_PI = 2.0 * math.pi

# objects
ERROR_REGISTER = (0x1001, 0)
ERROR_HISTORY = 0x1003
SYNC_PERIOD = (0x1006, 0)
ERROR_CODE = (0x603F, 0)
CONTROLWORD = (0x6040, 0)
STATUSWORD = (0x6041, 0)
QUICK_STOP_OPTION = (0x605A, 0)
FAULT_REACTION_OPTION = (0x605E, 0)
MODE = (0x6060, 0)
MODE_DISPLAY = (0x6061, 0)
POSITION_DEMAND = (0x6062, 0)
POSITION_INTERNAL = (0x6063, 0)
POSITION_ACTUAL = (0x6064, 0)
FOLLOWING_ERROR_WINDOW = (0x6065, 0)
FOLLOWING_ERROR_TIME = (0x6066, 0)
POSITION_WINDOW = (0x6067, 0)
POSITION_WINDOW_TIME = (0x6068, 0)
VELOCITY_DEMAND = (0x606B, 0)
VELOCITY_ACTUAL = (0x606C, 0)
VELOCITY_WINDOW = (0x606D, 0)
VELOCITY_WINDOW_TIME = (0x606E, 0)
VELOCITY_THRESHOLD = (0x606F, 0)
TARGET_TORQUE = (0x6071, 0)
MAX_TORQUE = (0x6072, 0)
TORQUE_DEMAND = (0x6074, 0)
RATED_CURRENT = (0x6075, 0)
RATED_TORQUE = (0x6076, 0)
TORQUE_ACTUAL = (0x6077, 0)
CURRENT_ACTUAL = (0x6078, 0)
DC_LINK_VOLTAGE = (0x6079, 0)
TARGET_POSITION = (0x607A, 0)
POSITION_LIMIT_MIN = (0x607D, 1)
POSITION_LIMIT_MAX = (0x607D, 2)
MAX_PROFILE_VELOCITY = (0x607F, 0)
MAX_MOTOR_SPEED = (0x6080, 0)
PROFILE_VELOCITY = (0x6081, 0)
PROFILE_ACCELERATION = (0x6083, 0)
PROFILE_DECELERATION = (0x6084, 0)
QUICK_STOP_DECELERATION = (0x6085, 0)
TORQUE_SLOPE = (0x6087, 0)
POSITION_OFFSET = (0x60B0, 0)
VELOCITY_OFFSET = (0x60B1, 0)
TORQUE_OFFSET = (0x60B2, 0)
INTERPOLATION_UNITS = (0x60C2, 1)
INTERPOLATION_INDEX = (0x60C2, 2)
FOLLOWING_ERROR_ACTUAL = (0x60F4, 0)
TARGET_VELOCITY = (0x60FF, 0)
SUPPORTED_MODES = (0x6502, 0)
AUX_POSITION = (0x20A0, 0)
MOTOR_ENCODER = (0x2240, 0)
ENCODER_DIFFERENCE = (0x2241, 0)
DRIVE_TEMPERATURE = (0x22A2, 0)
TORQUE_SENSOR = (0x3B69, 0)

# SDO abort codes this layer returns
ABORT_VALUE_RANGE = 0x06090030

# EMCY / 0x603F error codes (CiA 301 / CiA 402)
ERR_NONE = 0x0000
ERR_OVERCURRENT = 0x2310      # continuous over-current (overload, open circuit)
ERR_OVERVOLTAGE = 0x3210      # DC link over-voltage
ERR_UNDERVOLTAGE = 0x3220     # DC link under-voltage
ERR_OVERHEAT = 0x4310         # drive / motor excess temperature
ERR_FOLLOWING = 0x8611        # following error
_POWER_FAULTS = (ERR_OVERCURRENT, ERR_OVERVOLTAGE, ERR_UNDERVOLTAGE, ERR_OVERHEAT)

# statusword bits
SW_VOLTAGE_ENABLED = 0x0010
SW_QUICK_STOP = 0x0020
SW_WARNING = 0x0080
SW_REMOTE = 0x0200
SW_TARGET_REACHED = 0x0400
SW_INTERNAL_LIMIT = 0x0800
SW_BIT12 = 0x1000   # PP set-point acknowledge, PV speed, CSx drive follows the command value
SW_BIT13 = 0x2000   # PP/CSP following error

# controlword bits
CW_NEW_SETPOINT = 0x0010
CW_CHANGE_IMMEDIATELY = 0x0020
CW_RELATIVE = 0x0040
CW_FAULT_RESET = 0x0080
CW_HALT = 0x0100

QUICK_STOP_OPTIONS = (0, 1, 2, 5, 6)
FAULT_REACTION_OPTIONS = (0, 1, 2)
HISTORY_LENGTH = 4      # 0x1003:1..4 in the EDS


class State(IntEnum):
    NOT_READY_TO_SWITCH_ON = 0
    SWITCH_ON_DISABLED = 1
    READY_TO_SWITCH_ON = 2
    SWITCHED_ON = 3
    OPERATION_ENABLED = 4
    QUICK_STOP_ACTIVE = 5
    FAULT_REACTION_ACTIVE = 6
    FAULT = 7


# statusword bits 0, 1, 2, 3, 5, 6 of each state (notes/erob.md §3.3)
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


class Mode(IntEnum):
    NO_MODE = 0
    PP = 1      # profile position
    PV = 3      # profile velocity
    PT = 4      # profile torque
    CSP = 8     # cyclic synchronous position
    CSV = 9     # cyclic synchronous velocity
    CST = 10    # cyclic synchronous torque


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


def _members(enum: type[IntEnum]) -> types.SimpleNamespace:
    """The members of `enum` as plain attributes. Python 3.11's EnumType has a `__getattr__`, which sends every
    `State.X` through the slow generic lookup (≈ 0.3 µs; 3.12 dropped it): the drive compares its state and mode
    dozens of times per tick, through these (`_S.FAULT is State.FAULT`)."""
    return types.SimpleNamespace(**enum.__members__)


_S, _M, _C = _members(State), _members(Mode), _members(Command)
_MODE_VALUES = frozenset(int(m) for m in Mode)
_POSITION_MODES = (_M.NO_MODE, _M.PP, _M.CSP)
_VELOCITY_MODES = (_M.PV, _M.CSV)
_TORQUE_MODES = (_M.PT, _M.CST)


@dataclass(frozen=True)
class Units:
    """The drive's units ⇄ SI: counts at the output (0x6064, 0x607A), counts/s, ‰ of the rated values."""

    counts_per_rev: int
    zero_counts: int
    rated_torque_nm: float
    rated_current_a: float

    @functools.cached_property
    def counts_per_rad(self) -> float:
        return self.counts_per_rev / TWO_PI

    def position_counts(self, rad: float) -> int:
        return round(rad * self.counts_per_rad) + self.zero_counts

    def position_rad(self, counts: float) -> float:
        return (counts - self.zero_counts) / self.counts_per_rad

    def velocity_counts(self, rad_s: float) -> int:
        return round(rad_s * self.counts_per_rad)

    def velocity_rad(self, counts_s: float) -> float:
        return counts_s / self.counts_per_rad

    def torque_permille(self, nm: float) -> int:
        return round(nm / self.rated_torque_nm * 1000.0)

    def torque_nm(self, permille: float) -> float:
        return permille * self.rated_torque_nm / 1000.0

    def current_permille(self, amps: float) -> int:
        return round(amps / self.rated_current_a * 1000.0)

    def current_a(self, permille: float) -> float:
        return permille * self.rated_current_a / 1000.0


_RANGES = {(bits, signed): ((-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1))
           for bits in (16, 32) for signed in (False, True)}


def _sat(value: int, bits: int, signed: bool = True) -> int:
    lo, hi = _RANGES[bits, signed]
    return lo if value < lo else hi if value > hi else value


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


class Cia402Drive:
    """The CiA 402 drive of one eRob: object store `values`, state machine, modes, faults, on `joint`."""

    def __init__(self, od: ObjectDictionary, joint: Joint, config: ErobConfig):
        self.od = od
        self.joint = joint
        self.config = config
        self.defaults = default_values(od)
        self.values: dict[tuple[int, int], int] = {}
        p = joint.params()
        self._hw_max_amps = p["max_amps"] if p["max_amps"] > 0 else math.inf
        self._kt = p["motorconst"] * p["gear"] * p["efficiency"]
        self._supply_v = 0.0
        self._derated = False
        self._emcy: list[tuple[int, int, bytes]] = []
        self.reset()

    @classmethod
    def for_variant(cls, variant: str, node_id: int, joint: Joint) -> Cia402Drive:
        """The drive of `config/erob/<variant>.toml` with its object dictionary for `node_id`."""
        return cls(load_object_dictionary(variant, node_id), joint, load_config(variant))

    # ------------------------------------------------------------------ power-up
    def reset(self) -> None:
        """Power-up / NMT reset node: objects to their defaults, Not ready to switch on, torque off,
        kernel latches released. The first `tick()` completes the initialisation (transitions 0, 1)."""
        v = self.values
        v.clear()
        v.update(self.defaults)
        self.units = Units(self.config.units.encoder_counts, self.config.units.zero_counts,
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
        self.joint.command(params=self._law_params(LAWS["erob_pd"]), enable=False, clear_latches=True)
        self._enabled = False
        self.joint.sync()
        self._sense()
        self._pos_dem = self._pos_act
        self._update_status()

    # ------------------------------------------------------------------ the object interface
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
    def kt_nm_per_a(self) -> float:
        """Output torque per armature ampere (motorconst·gear·efficiency of the kernel parameters)."""
        return self._kt

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

    # ------------------------------------------------------------------ tick
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
        if self.state == _S.OPERATION_ENABLED:
            self._following_error(dt)
        if self.state == _S.OPERATION_ENABLED:
            self._operate(dt, now)
        elif self.state in (_S.QUICK_STOP_ACTIVE, _S.FAULT_REACTION_ACTIVE):
            self._stop_ramp(dt)
        self._actuate()
        self._publish_demands()
        self._update_status()

    # ------------------------------------------------------------------ actual values
    def _sense(self) -> tuple[dict, dict]:
        st = self.joint.read_state()
        p = self.joint.params()
        inputs = (p["supply_override"], p["supply_v"], p["ambient"], p["motorconst"], p["gear"], p["efficiency"])
        same = st is self._sensed_state or st == self._sensed_state    # a LiveJoint hands out one dict per step
        if same and inputs == self._sensed_inputs:
            return st, p        # the kernel has not stepped since (a SYNC's refresh, then the tick): as it was
        self._sensed_state, self._sensed_inputs = st, inputs
        u, v = self.units, self.values
        theta = st["theta_meas"] if st["k"] > 0 else st["theta"]
        cpr = u.counts_per_rad
        self._pos_act = theta * cpr + u.zero_counts
        self._vel_act = st["omega"] * cpr
        pos = _sat(round(self._pos_act), 32)
        v[POSITION_ACTUAL] = v[POSITION_INTERNAL] = v[AUX_POSITION] = pos
        v[VELOCITY_ACTUAL] = _sat(round(self._vel_act), 32)
        v[TORQUE_ACTUAL] = _sat(u.torque_permille(st["torque"]), 16)
        v[CURRENT_ACTUAL] = _sat(u.current_permille(st["i_out"]), 16)
        self._supply_v = p["supply_override"] if p["supply_override"] == p["supply_override"] else p["supply_v"]
        v[DC_LINK_VOLTAGE] = _sat(round(self._supply_v * 1000.0), 32, signed=False)
        # the winding as it is now (the kernel's `temperature` is the one at the start of the last step)
        self._temperature = p["ambient"] + st["temp_rise"]
        v[DRIVE_TEMPERATURE] = _sat(round(self._temperature), 16, signed=False)
        motor = self.config.units
        v[MOTOR_ENCODER] = _sat(round(theta * motor.motor_revs_per_output_rev * motor.motor_encoder_counts / TWO_PI),
                                32)
        v[ENCODER_DIFFERENCE] = 0            # rigid gear: no twist between the two encoders
        v[TORQUE_SENSOR] = _sat(round(st["torque"] * 1000.0), 32)
        self._kt = p["motorconst"] * p["gear"] * p["efficiency"]
        self._derated = bool(st["fault_flags"] & FAULT_BITS["derated"])
        return st, p

    # ------------------------------------------------------------------ state machine
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
        # no kernel command here: a transition sent its own (_set_state), and a set-point handshake only
        # changes what the next tick's profile heads for

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

    # ------------------------------------------------------------------ faults
    def _power_fault(self, st: dict, p: dict) -> int:
        latched = st["latched"]
        if latched & FAULT_BITS["overheat"]:
            return ERR_OVERHEAT
        if latched & FAULT_BITS["overload"] or st["oc_active"]:
            return ERR_OVERCURRENT
        ratings = self.config.ratings
        if self._supply_v < ratings.dc_link_min_v:
            return ERR_UNDERVOLTAGE
        if self._supply_v > ratings.dc_link_max_v:
            return ERR_OVERVOLTAGE
        return ERR_NONE

    def _fault(self, code: int) -> None:
        """Transition 13: error code, error register, history, EMCY, and the fault reaction."""
        register = error_register(code)
        self.values[ERROR_CODE] = code
        self.values[ERROR_REGISTER] = register
        self._push_history(code)
        self._emcy.append((code, register, bytes(5)))
        option = self.values[FAULT_REACTION_OPTION]
        coast = code in _POWER_FAULTS or option == 0
        decel = self.values[PROFILE_DECELERATION if option == 1 else QUICK_STOP_DECELERATION]
        self.state = _S.FAULT_REACTION_ACTIVE
        self._begin_stop(coast=coast, decel=decel)
        self._actuate()
        self._update_status()

    def _fault_reset(self) -> None:
        """Transition 15, once no fault condition remains."""
        self._sense()
        ratings = self.config.ratings
        if not ratings.dc_link_min_v <= self._supply_v <= ratings.dc_link_max_v:
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

    # ------------------------------------------------------------------ modes
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
        and 0 if it points further out past a software position limit (notes §3.4)."""
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
        return self.units.torque_nm(offset) / self._kt if offset and self._kt > 0 else 0.0

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
            vmax = v[MAX_MOTOR_SPEED] / 60.0 / self.config.units.motor_revs_per_output_rev * self.units.counts_per_rev
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

    # ------------------------------------------------------------------ kernel command
    def _max_amps(self) -> float:
        """The current limit: the kernel's max_amps at power-up and the max torque 0x6072."""
        if self._kt <= 0:
            return self._hw_max_amps
        return min(self._hw_max_amps, self.units.torque_nm(self.values[MAX_TORQUE]) / self._kt)

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
        law = LAWS["current"] if torque_law else LAWS["erob_pd"]
        params = None
        if law != self._law or (law == LAWS["erob_pd"] and self._max_amps() != self._sent_max_amps):
            params = self._law_params(law)
            self._law = law
        if torque_law:
            limit = self._max_amps()
            amps = self.units.torque_nm(self._trq_dem) / self._kt if self._kt > 0 else 0.0
            goal = min(max(amps, -limit), limit)
        else:
            loop = self.config.loop
            d = loop.damping * math.sqrt(loop.kp)
            omega = self.units.velocity_rad(self._vel_dem)
            goal = self.units.position_rad(self._pos_dem) + (d * omega + self._integral + self._i_ff) / loop.kp
        self.joint.command(params=params, goal=goal, enable=True if self._enabled is not True else None)
        self._enabled = True

    # ------------------------------------------------------------------ published values
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


def error_register(code: int) -> int:
    """0x1001 for an error code (CiA 301): bit 0 generic, 1 current, 2 voltage, 3 temperature,
    5 device profile (CiA 402 0x8xxx monitoring codes such as the following error)."""
    if code == ERR_NONE:
        return 0
    reg = 0x01
    reg |= {0x2: 0x02, 0x3: 0x04, 0x4: 0x08, 0x8: 0x20}.get(code >> 12, 0)
    return reg
