"""The objects of the CiA 402 drive model: their (index, subindex), the error codes, the statusword and
controlword bits, the modes of 0x6060, the conversions between the drive's units and SI (`Units`), and the
plain object store an object dictionary seeds (`default_values`)."""

from __future__ import annotations

import functools
import math
import types
from dataclasses import dataclass
from enum import IntEnum

from canopen.objectdictionary import ObjectDictionary, ODVariable

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


class Mode(IntEnum):
    NO_MODE = 0
    PP = 1      # profile position
    PV = 3      # profile velocity
    PT = 4      # profile torque
    CSP = 8     # cyclic synchronous position
    CSV = 9     # cyclic synchronous velocity
    CST = 10    # cyclic synchronous torque


def _members(enum: type[IntEnum]) -> types.SimpleNamespace:
    """The members of `enum` as plain attributes. Python 3.11's EnumType has a `__getattr__`, which sends every
    `State.X` through the slow generic lookup (3.12 dropped it): the drive compares its state and mode
    dozens of times per tick, through these (`_S.FAULT is State.FAULT`)."""
    return types.SimpleNamespace(**enum.__members__)


_M = _members(Mode)
_MODE_VALUES = frozenset(int(m) for m in Mode)
_POSITION_MODES = (_M.NO_MODE, _M.PP, _M.CSP)
_VELOCITY_MODES = (_M.PV, _M.CSV)
_TORQUE_MODES = (_M.PT, _M.CST)
_RANGES = {(bits, signed): ((-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1))
           for bits in (16, 32) for signed in (False, True)}
_EXACT = float(1 << 53)       # below this a float rounds to an int exactly; above it every object saturates


def _sat(value: int, bits: int, signed: bool = True) -> int:
    lo, hi = _RANGES[bits, signed]
    return lo if value < lo else hi if value > hi else value


def _to_object(x: float, bits: int, offset: int = 0) -> int:
    """round(x) + offset saturated at a signed `bits`-wide object's range, as a drive saturates a value its
    INTEGER32 / INTEGER16 object cannot hold (CiA 402-2: 0x607A, 0x60FF INTEGER32; 0x6071, 0x6077,
    0x6078 INTEGER16); ±inf saturates too. NaN is no value at all: ValueError."""
    if -_EXACT < x < _EXACT:
        return _sat(round(x) + offset, bits)
    if x != x:
        raise ValueError("NaN has no value in drive units")
    lo, hi = _RANGES[bits, True]
    return hi if x > 0 else lo


@dataclass(frozen=True)
class Units:
    """The drive's units ⇄ SI: counts at the output (0x6064, 0x607A), counts/s, ‰ of the rated values.

    SI → drive conversions give the value of the object they feed, saturated at its data type's range
    (positions and velocities INTEGER32, torques and currents INTEGER16); NaN raises ValueError."""

    counts_per_rev: int
    zero_counts: int
    rated_torque_nm: float
    rated_current_a: float

    @functools.cached_property
    def counts_per_rad(self) -> float:
        return self.counts_per_rev / TWO_PI

    def position_counts(self, rad: float) -> int:
        return _to_object(rad * self.counts_per_rad, 32, self.zero_counts)

    def position_rad(self, counts: float) -> float:
        return (counts - self.zero_counts) / self.counts_per_rad

    def velocity_counts(self, rad_s: float) -> int:
        return _to_object(rad_s * self.counts_per_rad, 32)

    def velocity_rad(self, counts_s: float) -> float:
        return counts_s / self.counts_per_rad

    def torque_permille(self, nm: float) -> int:
        return _to_object(nm / self.rated_torque_nm * 1000.0, 16)

    def torque_nm(self, permille: float) -> float:
        return permille * self.rated_torque_nm / 1000.0

    def current_permille(self, amps: float) -> int:
        return _to_object(amps / self.rated_current_a * 1000.0, 16)

    def current_a(self, permille: float) -> float:
        return permille * self.rated_current_a / 1000.0


def default_values(od: ObjectDictionary) -> dict[tuple[int, int], int]:
    """{(index, subindex): power-up value} of every object of `od` from 0x1000 on (the drive's plain object store;
    below 0x1000 are the data types an RPDO map may name as dummy entries)."""
    out = {}
    for obj in od.values():
        if obj.index < 0x1000:
            continue
        for var in [obj] if isinstance(obj, ODVariable) else obj.values():
            out[(var.index, var.subindex)] = int(var.default)
    return out
