"""Reply faults of one simulated servo's bus adapter: drop, corrupt, delay, wrong baud.

The application injects them (commands `inject_fault` / `clear_fault`); every bus adapter of `drivers/`
applies them to the replies it sends. Bit values are those the state stream publishes in `fault_flags`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

BUS_FAULTS = ("drop", "corrupt", "delay", "wrong_baud")
BUS_FLAG_BITS = {"drop": 1 << 8, "corrupt": 1 << 9, "delay": 1 << 10, "wrong_baud": 1 << 11, "unplugged": 1 << 12}


# the field each bus flag bit stands for
_FIELD_BITS = {"drop": BUS_FLAG_BITS["drop"], "corrupt": BUS_FLAG_BITS["corrupt"], "delay_s": BUS_FLAG_BITS["delay"],
               "wrong_baud": BUS_FLAG_BITS["wrong_baud"], "unplugged": BUS_FLAG_BITS["unplugged"]}


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
    unplugged: bool = False   # the servo's cable pulled (the `plug` command): it neither hears nor answers
    rng: random.Random = field(default_factory=lambda: random.Random(1), repr=False)
    # a one-element int64 array (a view) that receives `active` on every change: the state publisher ORs
    # it into every sample from C without calling into Python (LiveRig.bus_flag_bits)
    flag_sink: Any = field(default=None, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        bit = _FIELD_BITS.get(name)
        if bit is not None:
            object.__setattr__(self, "active", self.active | bit if value else self.active & ~bit)
        if bit is not None or name == "flag_sink":
            flag_sink = getattr(self, "flag_sink", None)     # __init__ sets it last
            if flag_sink is not None:
                flag_sink[0] = self.active

    def flags(self) -> int:
        return self.active

    @property
    def deaf(self) -> bool:
        """The servo hears no packet: it listens at another baud rate, or its cable is pulled."""
        return self.wrong_baud or self.unplugged

    def apply(self, reply: bytes) -> tuple[bytes | None, float]:
        """What to send for `reply`: (bytes or None for silence, extra delay [s])."""
        if self.deaf or (self.drop and self.rng.random() < self.drop):
            return None, 0.0
        if self.corrupt and reply and self.rng.random() < self.corrupt:
            i = self.rng.randrange(len(reply))
            reply = reply[:i] + bytes([reply[i] ^ 0xFF]) + reply[i + 1:]
        return reply, self.delay_s

    def clear(self, fault: str) -> None:
        """Clear one of BUS_FAULTS."""
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
        self.wrong_baud = self.unplugged = False
        self.rng.seed(1)


class Transmission(NamedTuple):
    """A reply and when it starts: `offset_s` after the instruction's last byte [s]."""

    data: bytes
    offset_s: float
    servo: int | None    # index of the sending servo on the bus (None: a reply no one servo sends, e.g. a Fast one)


def apply_faults(out: list[Transmission], faults: Sequence[BusFaults | None]) -> list[Transmission]:
    """`out` as the wire carries it once each sender's injected faults (drop, corrupt, delay) are applied;
    `faults[i]` belongs to servo index i."""
    done = []
    for tx in out:
        f = None if tx.servo is None else faults[tx.servo]
        if f is None or not f.active:
            done.append(tx)      # what apply() would return: the reply unchanged, no extra delay
            continue
        data, extra = f.apply(tx.data)
        if data is not None:
            done.append(Transmission(data, tx.offset_s + extra, tx.servo))
    return done
