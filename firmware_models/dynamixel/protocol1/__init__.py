"""Dynamixel servos with Protocol 1.0 firmware (AX-12A; MX-64 and MX-106 in their 1.0 firmware): control tables
from `config/dynamixel/protocol1/` (`table.py`) on the shared table engine, and the servo firmware (`servo.py`)."""
