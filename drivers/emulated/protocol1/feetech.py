"""The Feetech SCS/STS dialect of the FF FF frame: its instructions, Status Return Level and error byte
(docs/protocols/protocol1.md)."""

from __future__ import annotations

from drivers.emulated.protocol1.bus import Dialect
from drivers.emulated.protocol1.frame import Instruction

__all__ = ["ERROR_BITS", "FEETECH"]

ERROR_BITS = {"voltage": 1, "angle": 2, "overheat": 4, "overcurrent": 8, "overload": 32}

FEETECH = Dialect(
    name="feetech",
    instructions=frozenset({Instruction.PING, Instruction.READ, Instruction.WRITE, Instruction.REG_WRITE,
                            Instruction.ACTION, Instruction.RESET, Instruction.SYNC_READ, Instruction.SYNC_WRITE}),
    read_level=0,
    all_level=1,
    error_bits=ERROR_BITS,
)
