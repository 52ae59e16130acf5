"""A servo's control table or object dictionary for the console: read as a grid, written through its own write path.

A write takes the path a packet or an SDO download would: a serial servo's (Dynamixel Protocol 2.0 and 1.0,
Feetech) own `write` under the bus lock, as a Write packet; an eRob's `CanopenNode.set_data(…, check_writable=True)`
under the drives' lock. So a refusal is the error the device would send (docs/console.md, The write path). The
serial families share one read, write and action path; `_Family` holds what tells them apart (item encoding,
EEPROM area, the error byte's meaning, torque and goal items, reboot and factory reset).
"""

from __future__ import annotations

import contextlib
import time
import weakref
from typing import Any

from drivers.emulated.canopen.node import CanopenNode
from drivers.emulated.slcan.adapter import CanFrame
from firmware_models.dynamixel.errors import ErrorCode
from firmware_models.dynamixel.protocol1 import servo as p1
from firmware_models.dynamixel.servo import (
    HW_ELECTRICAL_SHOCK,
    HW_INPUT_VOLTAGE,
    HW_MOTOR_ENCODER,
    HW_OVERHEATING,
    HW_OVERLOAD,
)
from firmware_models.feetech.control_table import decode_sign, encode_sign
from firmware_models.feetech.servo import STATUS_BITS
from servo_hil.daemon.arguments import CommandError

# Protocol 2.0 §Status Packet, Error: the numbers' names as the e-manual gives them
ERROR_TEXT = {
    ErrorCode.RESULT_FAIL: "Result Fail", ErrorCode.INSTRUCTION: "Instruction Error", ErrorCode.CRC: "CRC Error",
    ErrorCode.DATA_RANGE: "Data Range Error", ErrorCode.DATA_LENGTH: "Data Length Error",
    ErrorCode.DATA_LIMIT: "Data Limit Error", ErrorCode.ACCESS: "Access Error",
}
# e-manual X series §Hardware Error Status(70): the bits' names
HARDWARE_ERROR_TEXT = {HW_INPUT_VOLTAGE: "Input Voltage Error", HW_OVERHEATING: "Overheating Error",
                       HW_MOTOR_ENCODER: "Motor Encoder Error", HW_ELECTRICAL_SHOCK: "Electrical Shock Error",
                       HW_OVERLOAD: "Overload Error"}
# e-manual Protocol 1.0 §Status Packet, Error: the error byte's bits' names
P1_ERROR_TEXT = {p1.INPUT_VOLTAGE: "Input Voltage Error", p1.ANGLE_LIMIT: "Angle Limit Error",
                 p1.OVERHEATING: "Overheating Error", p1.RANGE: "Range Error", p1.CHECKSUM: "Checksum Error",
                 p1.OVERLOAD: "Overload Error", p1.INSTRUCTION: "Instruction Error"}
FEETECH_STATUS_TEXT = {bit: name for name, bit in STATUS_BITS.items()}   # Status (65): "voltage", "overload", …
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


class _Family:
    """What one serial family's grid differs in: how an item's bytes read, which area it lies in, what the error
    byte of a reply says, the torque and goal items, and the reboot and factory reset. Reading, writing and the
    actions are one path for every family (`read_table`, `write_item`, `servo_action`)."""

    kind = ""
    torque_item = "Torque Enable"
    hardware_label = "hardware error"

    def value(self, spec, item, raw: bytes) -> int:
        """Item `item`'s register value from its bytes `raw` (Dynamixel: little-endian, two's complement if signed)."""
        return item.decode(raw)

    def encode(self, spec, item, value: int) -> bytes:
        """The bytes a Write carries for `value`; RegisterError if it does not fit the item."""
        if not -(1 << (8 * item.size)) < value < (1 << (8 * item.size)):
            raise RegisterError(f"write {item.name}: {value} does not fit in {item.size} byte(s)")
        return item.encode(value)

    def area(self, servo, item) -> str:
        """"EEPROM" or "RAM" (Feetech: "factory" too), as the grid marks the row."""
        return "EEPROM" if item.eeprom else "RAM"

    def status(self, byte: int) -> dict:
        """A write or action reply's error byte: the error that refused or flagged it, and the hardware bits."""
        raise NotImplementedError

    def hardware(self, servo, byte: int) -> int:
        """The hardware error a read shows, from the read reply's error byte or the table."""
        return byte

    def hardware_text(self, value: int) -> str:
        """The names of the hardware error bits set in `value`, comma-separated."""
        return ""

    def mode_goal(self, servo) -> tuple[Any, str]:
        """(operating mode as the servo holds it, the item a goal is written to in that mode)."""
        raise NotImplementedError

    def reboot(self, servo):
        raise NotImplementedError

    def factory_reset(self, servo):
        raise NotImplementedError


def _bit_names(value: int, names: dict[int, str]) -> str:
    return ", ".join(name for bit, name in names.items() if value & bit)


class _Dynamixel2(_Family):
    """Protocol 2.0: an error number and the Alert bit (§Status Packet), Hardware Error Status (70)."""

    kind = "dynamixel"

    def status(self, byte: int) -> dict:
        code = byte & 0x7F
        return {"error": code, "error_text": ERROR_TEXT.get(code, "") if code else "", "alert": bool(byte & ALERT),
                "status_text": ""}

    def hardware(self, servo, byte: int) -> int:
        return servo.table.get("Hardware Error Status")

    def hardware_text(self, value: int) -> str:
        return _bit_names(value, HARDWARE_ERROR_TEXT)

    def mode_goal(self, servo) -> tuple[Any, str]:
        mode = servo.table.get("Operating Mode")
        return mode, {0: "Goal Current", 1: "Goal Velocity", 16: "Goal PWM"}.get(mode, "Goal Position")

    def reboot(self, servo):
        return servo.reboot()

    def factory_reset(self, servo):
        return servo.factory_reset(0x02)   # all but ID and Baud Rate (Protocol 2.0 §Factory Reset)


class _Dynamixel1(_Family):
    """Protocol 1.0: one error byte of seven bits (§Status Packet); Input Voltage, Overheating and Overload are the
    servo's state, the other four the instruction's fault."""

    kind = "dynamixel1"
    HARDWARE_BITS = p1.INPUT_VOLTAGE | p1.OVERHEATING | p1.OVERLOAD

    def area(self, servo, item) -> str:
        return "EEPROM" if item.address < servo.model.eeprom_end else "RAM"

    def status(self, byte: int) -> dict:
        error = byte & ~self.HARDWARE_BITS
        return {"error": error, "error_text": _bit_names(error, P1_ERROR_TEXT),
                "alert": bool(byte & self.HARDWARE_BITS), "status_text": self.hardware_text(byte)}

    def hardware(self, servo, byte: int) -> int:
        return byte & self.HARDWARE_BITS

    def hardware_text(self, value: int) -> str:
        return _bit_names(value & self.HARDWARE_BITS, P1_ERROR_TEXT)

    def mode_goal(self, servo) -> tuple[Any, str]:
        # no Operating Mode: the angle limits and Torque Ctrl Mode Enable select it (the firmware's rule, servo.py)
        kind = servo.operation_type()
        return kind, {"torque": "Goal Torque", "wheel": "Moving Speed"}.get(kind, "Goal Position")

    def reboot(self, servo):
        servo.power_cycle()   # Protocol 1.0 has no Reboot instruction: a power cycle (EEPROM kept)

    def factory_reset(self, servo):
        return servo.reset()   # Factory Reset (0x06): the whole table, ID and Baud Rate included


class _Feetech(_Family):
    """Feetech: items in the model's byte order, sign-magnitude where it says; the status byte refuses nothing and
    carries the Status bits (docs/feetech.md)."""

    kind = "feetech"
    torque_item = "Torque_Enable"
    hardware_label = "status"

    def value(self, spec, item, raw: bytes) -> int:
        return decode_sign(int.from_bytes(raw, spec.byte_order), item.sign_bit)

    def encode(self, spec, item, value: int) -> bytes:
        raw = encode_sign(value, item.sign_bit)
        if not 0 <= raw < (1 << (8 * item.size)) or (item.sign_bit is not None and abs(value) >= 1 << item.sign_bit):
            raise RegisterError(f"write {item.name}: {value} does not fit in {item.size} byte(s)")
        return raw.to_bytes(item.size, spec.byte_order)

    def area(self, servo, item) -> str:
        return {"eeprom": "EEPROM", "ram": "RAM"}.get(item.area, item.area)

    def status(self, byte: int) -> dict:
        return {"error": 0, "error_text": "", "alert": bool(byte), "status_text": self.hardware_text(byte)}

    def hardware_text(self, value: int) -> str:
        return _bit_names(value, FEETECH_STATUS_TEXT)

    def mode_goal(self, servo) -> tuple[Any, str]:
        t = servo.table
        mode = t.get("Operating_Mode") if t.spec.has("Operating_Mode") else 0
        return mode, {1: "Goal_Velocity", 2: "Goal_Time"}.get(mode, "Goal_Position")   # memory table: wheel, PWM

    def reboot(self, servo):
        servo.reboot()   # a power cycle: Feetech has no REBOOT instruction (EEPROM as Lock let it be saved)

    def factory_reset(self, servo):
        return servo.reset()   # RESET (0x06): all but ID and Baud_Rate


FAMILIES = {f.kind: f for f in (_Dynamixel2(), _Dynamixel1(), _Feetech())}


def serial_servos(daemon) -> dict[str, tuple[Any, Any, _Family]]:
    """{joint: (bus server, servo, its family)} of every simulated serial servo (Dynamixel 2.0 and 1.0, Feetech)
    of the daemon's buses; a servo names its family (`family`, Protocol 2.0's C servo has none)."""
    out = {}
    for server in daemon.buses:
        for servo in getattr(getattr(server, "bus", None), "servos", ()):
            family = FAMILIES.get(getattr(servo, "family", "dynamixel"))
            if family is not None and hasattr(servo, "table") and hasattr(servo, "joint"):
                out[daemon.live.names[servo.joint.j]] = (server, servo, family)
    return out


def table_joints(daemon) -> dict[str, str]:
    """{joint: "dynamixel" | "dynamixel1" | "feetech" | "erob"} of every actuator with a control table or object
    dictionary."""
    return {**{j: "erob" for j in erob_nodes(daemon)}, **{j: f.kind for j, (_, _, f) in serial_servos(daemon).items()}}


def _serial(daemon, joint: str) -> tuple[Any, Any, _Family]:
    servos = serial_servos(daemon)
    if joint not in servos:
        known = ", ".join(table_joints(daemon)) or "none"
        raise RegisterError(f"no servo with a control table for actuator {joint!r} (servos with one: {known})")
    return servos[joint]


def _error_and_data(reply) -> tuple[int, bytes]:
    """(error byte, parameters) of a servo's reply: Protocol 2.0's C `Reply`, a (byte, bytes) tuple, or None (a
    servo that keeps quiet, e.g. Feetech's power cycle)."""
    if reply is None:
        return 0, b""
    if isinstance(reply, tuple):
        return reply[0], bytes(reply[1])
    return reply.error, bytes(reply.params)


@contextlib.contextmanager
def _as_a_packet(server):
    """What a packet's handling holds: the bus thread's lock and the rig's atomic batch (one tick sees it all)."""
    with server.lock, server.batch():
        yield


def read_table(daemon, joint: str) -> dict:
    """The grid of `joint`: its object dictionary (eRob) or control table, every item with its name, address,
    size, area, access, unit, range and value (register units, and SI where the item has a unit), read as a Read
    packet reads it (Present items fresh)."""
    if joint in erob_nodes(daemon):
        return read_od(daemon, joint)
    server, servo, family = _serial(daemon, joint)
    spec = servo.table.spec
    with server.lock:
        status, data = _error_and_data(servo.read(0, spec.size))
    rows = []
    for it in spec.items:
        value = None
        if len(data) >= it.address + it.size:
            value = family.value(spec, it, data[it.address:it.address + it.size])
        rows.append({"name": it.name, "address": it.address, "size": it.size, "area": family.area(servo, it),
                     "access": str(it.access), "writable": it.access == "RW", "unit": it.unit, "min": it.min,
                     "max": it.max, "value": value,
                     "si": value * it.si_per_unit if value is not None and it.si_per_unit else None})
    mode, goal = family.mode_goal(servo)
    hardware = family.hardware(servo, status)
    return {"joint": joint, "kind": family.kind, "model": spec.title, "id": servo.table.get("ID"), "rows": rows,
            "torque": servo.table.get(family.torque_item), "torque_item": family.torque_item,
            "operating_mode": mode, "goal_item": goal, "hardware_error": hardware,
            "hardware_label": family.hardware_label, "status_text": family.hardware_text(hardware)}


def write_item(daemon, joint: str, name: Any, value: Any) -> dict:
    """Write `value` (register units; signed where the item is) to item `name` as a Write packet would (an SDO
    download on an eRob); returns the servo's error (0 and "" when accepted), whether its reply flags a hardware
    error (`alert`) and those flags' names (`status_text`)."""
    if joint in erob_nodes(daemon):
        return write_od(daemon, joint, name, value)
    server, servo, family = _serial(daemon, joint)
    spec = servo.table.spec
    if not isinstance(name, str) or not spec.has(name):
        raise RegisterError(f"write: {spec.title} has no item {name!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegisterError(f"write {name}: value must be an integer in register units")
    item = spec.item(name)
    data = family.encode(spec, item, value)
    with _as_a_packet(server):
        status, _ = _error_and_data(servo.write(item.address, data))
    return family.status(status)


def servo_action(daemon, joint: str, action: str) -> dict:
    """`reboot` or `factory_reset`, run as the bus runs those instructions (a power cycle where the family has no
    Reboot). On an eRob, `reboot` is the NMT command Reset Node (CiA 301 §7.2.8.3.2.1) handed to the node as the
    bus hands it the frame."""
    if joint in erob_nodes(daemon):
        return _erob_action(daemon, joint, action)
    server, servo, family = _serial(daemon, joint)
    if action not in ("reboot", "factory_reset"):
        raise RegisterError(f"unknown servo action {action!r} (reboot, factory_reset)")
    with _as_a_packet(server):
        status, _ = _error_and_data(getattr(family, action)(servo))
    return family.status(status)


def _erob_action(daemon, joint: str, action: str) -> dict:
    if action != "reboot":
        raise RegisterError(f"{action}: an eRob has no such service here (reboot: NMT Reset Node)")
    server, node = erob_nodes(daemon)[joint]
    if _ETHERBAN_NODES.get(node.drive) is node:
        raise RegisterError("reboot: an eRob served over Etherban has no NMT Reset Node (a CANopen service)")
    with server.drives.lock:
        node.handle(CanFrame(0x000, bytes([0x81, node.id])), time.monotonic())   # NMT: cs 0x81 = reset node
    return {"error": 0, "error_text": ""}


