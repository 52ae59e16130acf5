"""A servo's control table or object dictionary for the console: read as a grid, written through its own write path.

A write takes the path a packet or an SDO download would (Dynamixel: `DynamixelServo.write` under the bus
lock; Feetech: `FeetechServo.write`, as a WRITE packet; eRob: `CanopenNode.set_data(…, check_writable=True)` under
the drives' lock), so a refusal is the error number or abort code the device would send (docs/console.md, The write
path). A Feetech servo refuses nothing (its status byte has no such bit, docs/feetech.md): the reply carries its
Status bits, and a read-only byte or an out-of-range value is left or stored as the servo leaves or stores it.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from typing import Any

from drivers.emulated.canopen.node import CanopenNode
from drivers.emulated.slcan.adapter import CanFrame
from firmware_models.dynamixel.errors import ErrorCode
from firmware_models.feetech.control_table import decode_sign, encode_sign
from firmware_models.feetech.servo import STATUS_BITS
from servo_hil.daemon.arguments import CommandError

# Protocol 2.0 §Status Packet, Error: the numbers' names as the e-manual gives them
ERROR_TEXT = {
    ErrorCode.RESULT_FAIL: "Result Fail", ErrorCode.INSTRUCTION: "Instruction Error", ErrorCode.CRC: "CRC Error",
    ErrorCode.DATA_RANGE: "Data Range Error", ErrorCode.DATA_LENGTH: "Data Length Error",
    ErrorCode.DATA_LIMIT: "Data Limit Error", ErrorCode.ACCESS: "Access Error",
}
ALERT = 0x80   # the Error byte's Alert bit: the servo has a Hardware Error Status set
ETHERBAN_NODE_ID = 1   # an Etherban-only drive's dictionary is built as node 1 (servo_hil/wiring/erob.py)


class RegisterError(CommandError):
    """A console request about a servo's table that cannot be served (no such servo or item, bad value)."""


_ETHERBAN_NODES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # drive → its dictionary's SDO side


def erob_nodes(daemon) -> dict[str, tuple[Any, Any]]:
    """{joint: (bus, CanopenNode)} of every simulated eRob: the CANopen buses' nodes, and for a drive served over
    Etherban a node that sends nothing, built on the drive's object dictionary as its CAN node would be (an
    EtherCAT master reads and writes that dictionary with CoE SDO transfers, the same services: ETG.1000.6)."""
    out = {}
    for server in daemon.buses:
        for node in getattr(server, "nodes", ()):
            out[daemon.live.names[node.drive.joint.j]] = (server, node)
        if not hasattr(server, "nodes"):
            for drive in getattr(server, "devices", ()):
                node = _ETHERBAN_NODES.get(drive)
                if node is None:
                    node = _ETHERBAN_NODES[drive] = CanopenNode(drive, ETHERBAN_NODE_ID, lambda frame: None)
                out[daemon.live.names[drive.joint.j]] = (server, node)
    return out


def _od_variables(od):
    """Every object of an eRob's dictionary (records and arrays by their members), as a read lists them."""
    for obj in od.values():
        if obj.index < 0x1000:      # the dummy data types of RPDO maps
            continue
        yield from (obj.values() if hasattr(obj, "values") else (obj,))


def _abort_text(exc: Exception) -> tuple[int, str]:
    code = getattr(exc, "code", 0)
    return code, str(exc)


def read_od(daemon, joint: str) -> dict:
    """Every object of the eRob's dictionary: qualified name, index:subindex, size, access, unit, range and its
    value as an SDO upload reads it (the abort text where the drive refuses the upload)."""
    server, node = erob_nodes(daemon)[joint]
    rows = []
    with server.drives.lock:
        for var in _od_variables(node.od):
            try:
                value = var.decode_raw(node.get_data(var.index, var.subindex))
            except Exception as exc:   # an SdoAbortedError: shown as the client would see it
                value = _abort_text(exc)[1]
            if isinstance(value, bytes):
                value = value.hex()
            rows.append({"name": var.qualname, "address": f"0x{var.index:04X}:{var.subindex:02X}",
                         "size": len(var) // 8, "area": "", "access": var.access_type,
                         "writable": bool(var.writable), "unit": var.unit or "", "min": var.min, "max": var.max,
                         "value": value, "si": None})
        mode = node.drive.values.get((0x6061, 0))
        status = node.drive.values.get((0x6041, 0))
    goal = {1: "Target position", 8: "Target position", 3: "Target velocity", 9: "Target velocity",
            4: "Target torque", 10: "Target torque"}.get(mode, "Target position")
    goal = next((r["name"] for r in rows if r["name"] == goal), goal)
    return {"joint": joint, "kind": "erob", "model": node.drive.config.name, "id": node.id, "rows": rows,
            "torque": int(bool(status is not None and status & 0x6F == 0x27)), "operating_mode": mode,
            "goal_item": goal, "hardware_error": node.drive.values.get((0x603F, 0))}


def write_od(daemon, joint: str, name: str, value: Any) -> dict:
    """Download `value` to the eRob object `name` as its SDO server does; the abort code and text if refused."""
    server, node = erob_nodes(daemon)[joint]
    var = next((v for v in _od_variables(node.od) if v.qualname == name), None)
    if var is None:
        raise RegisterError(f"write: the eRob has no object {name!r}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RegisterError(f"write {name}: value must be a number")
    try:
        data = var.encode_raw(value)
    except Exception as exc:   # struct.error: the value does not fit the object's type
        raise RegisterError(f"write {name}: {value} does not fit its type ({exc})") from None
    with server.drives.lock:
        try:
            node.set_data(var.index, var.subindex, data, check_writable=True)
        except Exception as exc:   # the SdoAbortedError the SDO server would send
            code, text = _abort_text(exc)
            return {"error": code or 1, "error_text": text, "alert": False}
    return {"error": 0, "error_text": "", "alert": False}


def dynamixel_servos(daemon) -> dict[str, tuple[Any, Any]]:
    """{joint: (bus server, DynamixelServo)} of every simulated Dynamixel servo of the daemon's buses."""
    out = {}
    for server in daemon.buses:
        bus = getattr(server, "bus", None)
        for servo in getattr(bus, "servos", ()):
            # a Feetech or Protocol 1.0 servo's table has another layout and error byte: the grid shows Dynamixel
            # Protocol 2.0 tables only so far
            if hasattr(servo, "table") and hasattr(servo, "joint") and getattr(servo, "family", "") not in (
                    "feetech", "dynamixel1"):
                out[daemon.live.names[servo.joint.j]] = (server, servo)
    return out


def feetech_servos(daemon) -> dict[str, tuple[Any, Any]]:
    """{joint: (bus server, FeetechServo)} of every simulated Feetech servo of the daemon's buses."""
    out = {}
    for server in daemon.buses:
        for servo in getattr(getattr(server, "bus", None), "servos", ()):
            if getattr(servo, "family", "") == "feetech" and hasattr(servo, "joint"):
                out[daemon.live.names[servo.joint.j]] = (server, servo)
    return out


def table_joints(daemon) -> dict[str, str]:
    """{joint: "dynamixel" | "feetech" | "erob"} of every actuator with a control table or object dictionary."""
    return {**{j: "erob" for j in erob_nodes(daemon)}, **{j: "dynamixel" for j in dynamixel_servos(daemon)},
            **{j: "feetech" for j in feetech_servos(daemon)}}


def _status_text(status: int) -> str:
    """The names of a Feetech status byte's bits (Status (65), feetech-servo-sdk ERRBIT_*), e.g. "overload"."""
    return ", ".join(name for name, bit in STATUS_BITS.items() if status & bit)


def _read_feetech(daemon, joint: str) -> dict:
    """Every item of the Feetech servo's table, as a READ of the whole table gets it (Present items fresh), decoded
    in the model's byte order and sign-magnitude bits; SI where the item has a unit."""
    server, servo = feetech_servos(daemon)[joint]
    spec = servo.table.spec
    with server.lock:
        reply = servo.read(0, spec.size)
    status, data = reply if reply is not None else (0, b"")
    rows = []
    for it in spec.items:
        value = None
        if len(data) >= it.address + it.size:
            value = decode_sign(int.from_bytes(data[it.address:it.address + it.size], spec.byte_order), it.sign_bit)
        rows.append({"name": it.name, "address": it.address, "size": it.size,
                     "area": {"eeprom": "EEPROM", "ram": "RAM"}.get(it.area, it.area), "access": it.access,
                     "writable": it.access == "RW", "unit": it.unit, "min": it.min, "max": it.max, "value": value,
                     "si": value * it.si_per_unit if value is not None and it.si_per_unit else None})
    t = servo.table
    mode = t.get("Operating_Mode") if spec.has("Operating_Mode") else 0
    goal = {1: "Goal_Velocity", 2: "Goal_Time"}.get(mode, "Goal_Position")   # memory table: wheel, PWM modes
    return {"joint": joint, "kind": "feetech", "model": spec.title, "id": t.get("ID"), "rows": rows,
            "torque": t.get("Torque_Enable"), "torque_item": "Torque_Enable", "operating_mode": mode,
            "goal_item": goal, "hardware_error": status, "status_text": _status_text(status)}


def _write_feetech(daemon, joint: str, name: Any, value: Any) -> dict:
    """A WRITE of `value` (register units, signed where the item is sign-magnitude) to item `name`."""
    server, servo = feetech_servos(daemon)[joint]
    spec = servo.table.spec
    if not isinstance(name, str) or not spec.has(name):
        raise RegisterError(f"write: {spec.title} has no item {name!r}")
    item = spec.item(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegisterError(f"write {name}: value must be an integer in register units")
    raw = encode_sign(value, item.sign_bit)
    if not 0 <= raw < (1 << (8 * item.size)) or (item.sign_bit is not None and abs(value) >= 1 << item.sign_bit):
        raise RegisterError(f"write {name}: {value} does not fit in {item.size} byte(s)")
    with _as_a_packet(server):
        status, _ = servo.write(item.address, raw.to_bytes(item.size, spec.byte_order))
    return {"error": 0, "error_text": "", "alert": bool(status), "status_text": _status_text(status)}


def _servo(daemon, joint: str) -> tuple[Any, Any]:
    servos = dynamixel_servos(daemon)
    if joint not in servos:
        known = ", ".join(table_joints(daemon)) or "none"
        raise RegisterError(f"no servo with a control table for actuator {joint!r} (servos with one: {known})")
    return servos[joint]


@contextlib.contextmanager
def _as_a_packet(server):
    """What a packet's handling holds: the bus thread's lock and the rig's atomic batch (one tick sees it all)."""
    with server.lock, server.batch():
        yield


def read_table(daemon, joint: str) -> dict:
    """The grid of `joint`: its control table (Dynamixel) or object dictionary (eRob)."""
    if joint in erob_nodes(daemon):
        return read_od(daemon, joint)
    if joint in feetech_servos(daemon):
        return _read_feetech(daemon, joint)
    return _read_dynamixel(daemon, joint)


def _read_dynamixel(daemon, joint: str) -> dict:
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
                     "access": str(it.access), "writable": it.access == "RW", "unit": it.unit, "min": it.min,
                     "max": it.max, "value": value,
                     "si": value * it.si_per_unit if value is not None and it.si_per_unit else None})
    mode = servo.table.get("Operating Mode")
    goal = {0: "Goal Current", 1: "Goal Velocity", 16: "Goal PWM"}.get(mode, "Goal Position")
    return {"joint": joint, "kind": "dynamixel", "model": spec.title, "id": servo.table.get("ID"), "rows": rows,
            "torque": servo.table.get("Torque Enable"), "operating_mode": mode, "goal_item": goal,
            "hardware_error": servo.table.get("Hardware Error Status")}


def write_item(daemon, joint: str, name: Any, value: Any) -> dict:
    """Write `value` (register units) to item `name` as a Write packet would (an SDO download on an eRob); returns
    the servo's error (0 and "" when accepted) and the Error byte's Alert bit."""
    if joint in erob_nodes(daemon):
        return write_od(daemon, joint, name, value)
    if joint in feetech_servos(daemon):
        return _write_feetech(daemon, joint, name, value)
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
    the bus runs those instructions. On an eRob, `reboot` is the NMT command Reset Node (CiA 301 §7.2.8.3.2.1)
    handed to the node as the bus hands it the frame."""
    if joint in erob_nodes(daemon):
        return _erob_action(daemon, joint, action)
    if joint in feetech_servos(daemon):
        return _feetech_action(daemon, joint, action)
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


def _erob_action(daemon, joint: str, action: str) -> dict:
    if action != "reboot":
        raise RegisterError(f"{action}: an eRob has no such service here (reboot: NMT Reset Node)")
    server, node = erob_nodes(daemon)[joint]
    if _ETHERBAN_NODES.get(node.drive) is node:
        raise RegisterError("reboot: an eRob served over Etherban has no NMT Reset Node (a CANopen service)")
    with server.drives.lock:
        node.handle(CanFrame(0x000, bytes([0x81, node.id])), time.monotonic())   # NMT: cs 0x81 = reset node
    return {"error": 0, "error_text": ""}


def _feetech_action(daemon, joint: str, action: str) -> dict:
    """`reboot`: a power cycle (EEPROM as saved, RAM at power-up values; Feetech has no REBOOT instruction);
    `factory_reset`: the RESET instruction (0x06), as the bus runs it (all but ID and Baud_Rate)."""
    server, servo = feetech_servos(daemon)[joint]
    with _as_a_packet(server):
        if action == "reboot":
            servo.reboot()
        elif action == "factory_reset":
            servo.reset()
        else:
            raise RegisterError(f"unknown servo action {action!r} (reboot, factory_reset)")
    return {"error": 0, "error_text": ""}
