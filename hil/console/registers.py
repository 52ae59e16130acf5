"""A Dynamixel servo's control table for the console: read as a grid, written through the servo's own Write.

A write takes the bus thread's lock and the rig's atomic batch, as a Write packet does (drivers/dynamixel/
server.py), and calls `DynamixelServo.write`, the entry point the bus gives a packet: the servo's access,
range, limit and EEPROM-lock checks answer with the Protocol 2.0 error number the status packet would carry.
"""

from __future__ import annotations

import contextlib
from typing import Any

from firmware_models.dynamixel.errors import ErrorCode
from hil.daemon.arguments import CommandError

# Protocol 2.0 §Status Packet, Error: the numbers' names as the e-manual gives them
ERROR_TEXT = {
    ErrorCode.RESULT_FAIL: "Result Fail", ErrorCode.INSTRUCTION: "Instruction Error", ErrorCode.CRC: "CRC Error",
    ErrorCode.DATA_RANGE: "Data Range Error", ErrorCode.DATA_LENGTH: "Data Length Error",
    ErrorCode.DATA_LIMIT: "Data Limit Error", ErrorCode.ACCESS: "Access Error",
}
ALERT = 0x80   # the Error byte's Alert bit: the servo has a Hardware Error Status set


class RegisterError(CommandError):
    """A console request about a servo's table that cannot be served (no such servo or item, bad value)."""


def dynamixel_servos(daemon) -> dict[str, tuple[Any, Any]]:
    """{joint: (bus server, DynamixelServo)} of every simulated Dynamixel servo of the daemon's buses."""
    out = {}
    for server in daemon.buses:
        bus = getattr(server, "bus", None)
        for servo in getattr(bus, "servos", ()):
            if hasattr(servo, "table") and hasattr(servo, "joint"):
                out[daemon.live.names[servo.joint.j]] = (server, servo)
    return out


def _servo(daemon, joint: str) -> tuple[Any, Any]:
    servos = dynamixel_servos(daemon)
    if joint not in servos:
        known = ", ".join(servos) or "none"
        raise RegisterError(f"no Dynamixel servo for actuator {joint!r} (servos with a control table: {known})")
    return servos[joint]


@contextlib.contextmanager
def _as_a_packet(server):
    """What a packet's handling holds: the bus thread's lock and the rig's atomic batch (one tick sees it all)."""
    with server.lock, server.batch():
        yield


def read_table(daemon, joint: str) -> dict:
    """Every item of the servo's control table: name, address, size, area, access, unit, range and its value (in
    register units, and SI where the item has a unit), read as a Read packet would (Present items fresh)."""
    server, servo = _servo(daemon, joint)
    spec = servo.table.spec
    with server.lock:
        reply = servo.read(0, spec.size)
    data = reply.params
    rows = []
    for it in spec.items:
        value = it.decode(data[it.address:it.address + it.size]) if len(data) >= it.address + it.size else None
        rows.append({"name": it.name, "address": it.address, "size": it.size, "area": "EEPROM" if it.eeprom else "RAM",
                     "access": str(it.access), "unit": it.unit, "min": it.min, "max": it.max, "value": value,
                     "si": value * it.si_per_unit if value is not None and it.si_per_unit else None})
    mode = servo.table.get("Operating Mode")
    goal = {0: "Goal Current", 1: "Goal Velocity", 16: "Goal PWM"}.get(mode, "Goal Position")
    return {"joint": joint, "model": spec.title, "id": servo.table.get("ID"), "rows": rows,
            "torque": servo.table.get("Torque Enable"), "operating_mode": mode, "goal_item": goal,
            "hardware_error": servo.table.get("Hardware Error Status")}


def write_item(daemon, joint: str, name: Any, value: Any) -> dict:
    """Write `value` (register units) to item `name` as a Write packet would; returns the servo's error (0 and
    "" when accepted) and the Error byte's Alert bit."""
    server, servo = _servo(daemon, joint)
    if not isinstance(name, str):
        raise RegisterError("write: name must be the item's name")
    try:
        item = servo.table.spec.item(name)
    except KeyError:
        raise RegisterError(f"write: {servo.table.spec.title} has no item {name!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegisterError(f"write {name}: value must be an integer in register units")
    if not -(1 << (8 * item.size)) < value < (1 << (8 * item.size)):
        raise RegisterError(f"write {name}: {value} does not fit in {item.size} byte(s)")
    with _as_a_packet(server):
        reply = servo.write(item.address, item.encode(value))
    code = reply.error & 0x7F
    return {"error": code, "error_text": ERROR_TEXT.get(code, "") if code else "", "alert": bool(reply.error & ALERT)}


def servo_action(daemon, joint: str, action: str) -> dict:
    """`reboot` or `factory_reset` (option 0x02: all but ID and Baud Rate, Protocol 2.0 §Factory Reset), run as
    the bus runs those instructions."""
    server, servo = _servo(daemon, joint)
    with _as_a_packet(server):
        if action == "reboot":
            reply = servo.reboot()
        elif action == "factory_reset":
            reply = servo.factory_reset(0x02)
        else:
            raise RegisterError(f"unknown servo action {action!r} (reboot, factory_reset)")
    code = reply.error & 0x7F
    return {"error": code, "error_text": ERROR_TEXT.get(code, "") if code else ""}
