"""Faults that can be injected into a running rig, and how each one changes the kernel.

Kernel faults (seed 003 "Faults", plus what real servos show):

| fault          | arguments                                        | effect |
|----------------|--------------------------------------------------|--------|
| open_circuit   | fraction (0–1], and either nothing (= now),      | armature open for `fraction` of each |
|                | at_s [s], or current_a [A] + duration_s [s]      | motor revolution (temporal / behavioural) |
| supply_sag     | voltage_v [V]                                    | supply voltage replaced (sag or surge) |
| encoder_noise  | std_rad [rad]                                    | Gaussian noise on the measured position |
| encoder_stuck  | —                                                | measured position frozen |
| encoder_slip   | rate_rad_s [rad/s]                               | measured position drifts from the true one |
| overheat       | temperature_c [°C] (default: limit + 5 °C)       | winding heated past its limit: shutdown |

Bus faults (applied by the bus adapters, `drivers/`): a `BusFaults` per actuator.

| fault       | arguments          | effect on the servo's replies |
|-------------|--------------------|-------------------------------|
| drop        | probability (0–1]  | the reply is not sent |
| corrupt     | probability (0–1]  | one byte of the reply is flipped (the CRC no longer matches) |
| delay       | seconds [s] (≤ 1)  | the reply starts this much later |
| wrong_baud  | —                  | the servo listens at another baud rate: silence |
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from hil.daemon.arguments import CommandError, number, only

KERNEL_FAULTS = ("open_circuit", "supply_sag", "encoder_noise", "encoder_stuck", "encoder_slip", "overheat")
BUS_FAULTS = ("drop", "corrupt", "delay", "wrong_baud")
BUS_FLAG_BITS = {"drop": 1 << 8, "corrupt": 1 << 9, "delay": 1 << 10, "wrong_baud": 1 << 11}


# the field each bus flag bit stands for
_FIELD_BITS = {"drop": BUS_FLAG_BITS["drop"], "corrupt": BUS_FLAG_BITS["corrupt"], "delay_s": BUS_FLAG_BITS["delay"],
               "wrong_baud": BUS_FLAG_BITS["wrong_baud"]}


@dataclass
class BusFaults:
    """Reply faults one servo's bus adapter applies (read on every reply, from any thread)."""

    # flags() kept current on every assignment: the bus servers ask at every reply, so the answer is an
    # attribute, not four tests (declared first: set first)
    active: int = field(default=0, init=False, repr=False, compare=False)
    drop: float = 0.0
    corrupt: float = 0.0
    delay_s: float = 0.0
    wrong_baud: bool = False
    rng: random.Random = field(default_factory=lambda: random.Random(1), repr=False)
    # a one-element int64 array (a view) that receives `active` on every change: the state publisher ORs
    # it into every sample from C without calling into Python (LiveRig.bus_flag_bits)
    mirror: Any = field(default=None, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        bit = _FIELD_BITS.get(name)
        if bit is not None:
            object.__setattr__(self, "active", self.active | bit if value else self.active & ~bit)
        if bit is not None or name == "mirror":
            mirror = getattr(self, "mirror", None)     # __init__ sets it last
            if mirror is not None:
                mirror[0] = self.active

    def flags(self) -> int:
        return self.active

    def apply(self, reply: bytes) -> tuple[bytes | None, float]:
        """What to send for `reply`: (bytes or None for silence, extra delay [s])."""
        if self.wrong_baud or (self.drop and self.rng.random() < self.drop):
            return None, 0.0
        if self.corrupt and reply and self.rng.random() < self.corrupt:
            i = self.rng.randrange(len(reply))
            reply = reply[:i] + bytes([reply[i] ^ 0xFF]) + reply[i + 1:]
        return reply, self.delay_s

    def inject(self, fault: str, args: dict[str, Any]) -> None:
        if fault == "drop":
            only(args, ("probability",))
            self.drop = number(args, "probability", 0.0, 1.0)
        elif fault == "corrupt":
            only(args, ("probability",))
            self.corrupt = number(args, "probability", 0.0, 1.0)
        elif fault == "delay":
            only(args, ("seconds",))
            self.delay_s = number(args, "seconds", 0.0, 1.0)
        else:
            only(args, ())
            self.wrong_baud = True

    def clear(self, fault: str) -> None:
        if fault == "drop":
            self.drop = 0.0
        elif fault == "corrupt":
            self.corrupt = 0.0
        elif fault == "delay":
            self.delay_s = 0.0
        else:
            self.wrong_baud = False

    def reset(self) -> None:
        """Every fault cleared and the random stream restarted, in place: the bus adapters hold this object."""
        self.drop = self.corrupt = self.delay_s = 0.0
        self.wrong_baud = False
        self.rng.seed(1)


def kernel_fault_params(fault: str, args: dict[str, Any], now_s: float) -> dict[str, float]:
    """Kernel parameter changes that inject `fault` at simulation time `now_s` [s]."""
    if fault == "open_circuit":
        only(args, ("fraction", "at_s", "current_a", "duration_s"))
        frac = number(args, "fraction", 1e-6, 1.0, 1.0)
        if "current_a" in args:
            return dict(oc_fraction=frac, oc_time=math.inf,
                        oc_current=number(args, "current_a", 0.0, 1e4),
                        oc_duration=number(args, "duration_s", 0.0, 3600.0, 0.0))
        return dict(oc_fraction=frac, oc_time=number(args, "at_s", 0.0, 1e9, now_s), oc_current=math.inf)
    if fault == "supply_sag":
        only(args, ("voltage_v",))
        return dict(supply_override=number(args, "voltage_v", 0.0, 1000.0))
    if fault == "encoder_noise":
        only(args, ("std_rad",))
        return dict(encoder_noise=number(args, "std_rad", 0.0, 10.0))
    if fault == "encoder_stuck":
        only(args, ())
        return dict(encoder_stuck=1)
    if fault == "encoder_slip":
        only(args, ("rate_rad_s",))
        return dict(encoder_slip=number(args, "rate_rad_s", -100.0, 100.0))
    raise CommandError(f"unknown fault {fault!r} (known: {', '.join(KERNEL_FAULTS + BUS_FAULTS)})")


def kernel_fault_clear(fault: str, configured: dict) -> dict[str, float]:
    """Kernel parameter values that clear `fault` (back to the rig's configuration)."""
    keys = {"open_circuit": ("oc_fraction", "oc_time", "oc_current", "oc_duration"),
            "supply_sag": ("supply_override",), "encoder_noise": ("encoder_noise",),
            "encoder_stuck": ("encoder_stuck",), "encoder_slip": ("encoder_slip",), "overheat": ()}[fault]
    return {k: configured[k] for k in keys}
