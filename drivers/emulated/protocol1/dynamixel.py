"""The Dynamixel Protocol 1.0 dialect of the FF FF frame, and its bus: instructions (BULK READ on MX), Status
Return Level and error byte (docs/protocols/protocol1.md)."""

from __future__ import annotations

from drivers.emulated.protocol1.bus import Dialect, Protocol1Bus, Transmission
from drivers.emulated.protocol1.frame import BROADCAST_ID, Instruction

__all__ = ["DYNAMIXEL1", "ERROR_BITS", "Dynamixel1Bus"]

ERROR_BITS = {"input_voltage": 0x01, "angle_limit": 0x02, "overheating": 0x04, "range": 0x08, "checksum": 0x10,
              "overload": 0x20, "instruction": 0x40}

DYNAMIXEL1 = Dialect(
    name="dynamixel1",
    instructions=frozenset({Instruction.PING, Instruction.READ, Instruction.WRITE, Instruction.REG_WRITE,
                            Instruction.ACTION, Instruction.RESET, Instruction.SYNC_WRITE, Instruction.BULK_READ}),
    read_level=1,
    all_level=2,
    error_bits=ERROR_BITS,
    checksum_error=ERROR_BITS["checksum"],
    instruction_error=ERROR_BITS["instruction"],
    # parameters that do not fit the instruction: "an instruction out of the range for use" (§Status Packet, bit 3)
    length_error=ERROR_BITS["range"],
)


class Dynamixel1Bus(Protocol1Bus):
    """Protocol 1.0 Dynamixels on one bus: the FF FF bus under `DYNAMIXEL1`, where each servo executes only the
    instructions its model has (`servo.supports(instruction)`)."""

    def __init__(self, servos, faults=None):
        super().__init__(DYNAMIXEL1, servos, faults)

    def _dispatch(self, pid: int, ins: int, p: bytes, listening: list[int], bps: int) -> list[Transmission]:
        able = [i for i in listening if self.servos[i].supports(ins)]
        if len(able) != len(listening) and ins in self.dialect.instructions:
            if pid != BROADCAST_ID:
                i = self._find(listening, pid)
                if i >= 0 and not self.servos[i].supports(ins):
                    return self._unicast_error(pid, ins, listening, self.dialect.instruction_error)
            listening = able
        return super()._dispatch(pid, ins, p, listening, bps)
