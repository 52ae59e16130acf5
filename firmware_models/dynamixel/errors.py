"""What a Dynamixel answers when it refuses an instruction: the Protocol 2.0 error numbers (ROBOTIS e-manual,
Protocol 2.0 §Status Packet, Error) and the exception that carries one."""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Protocol 2.0 status-packet error numbers (low 7 bits of the Error byte, a single value, not a
    bitmask; Protocol 2.0 §Status Packet). The bus codec uses the same enum."""

    NONE = 0
    RESULT_FAIL = 1
    INSTRUCTION = 2
    CRC = 3
    DATA_RANGE = 4
    DATA_LENGTH = 5
    DATA_LIMIT = 6
    ACCESS = 7


class ControlTableError(Exception):
    """A read or write the servo refuses; `code` is the Protocol 2.0 error number (1..7)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = int(code)

    def __repr__(self) -> str:
        return f"ControlTableError({ErrorCode(self.code).name}, {self.args[0]!r})"
