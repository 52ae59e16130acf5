"""The Feetech SCS/STS dialect of the FF FF frame.

Instructions (Feetech SCS protocol manual §Instruction types; feetech-servo-sdk 1.0.0 `scservo_def.py`): PING 0x01,
READ 0x02, WRITE 0x03, REG WRITE 0x04, ACTION 0x05, RESET 0x06 (riot-os `feetech_protocol.h` INST_RESET; back to
factory values), SYNC READ 0x82, SYNC WRITE 0x83. Status Return Level (address 8): 0 answers only PING and READ,
1 answers every instruction (Feetech STS memory table, "Response Status Level").
Error byte (feetech-servo-sdk `protocol_packet_handler.py` ERRBIT_*; STS memory table §Servo status, address 65):
bit 0 voltage, bit 1 angle sensor, bit 2 overheat, bit 3 over-current, bit 5 overload. The table has no bit for a
bad checksum, an unknown instruction or a malformed parameter list: such packets are not answered (our reading of
the manual, which lists no reply for them; the SDK then reports COMM_RX_TIMEOUT).
"""

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
