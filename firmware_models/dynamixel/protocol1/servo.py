"""One simulated Dynamixel with Protocol 1.0 firmware (AX-12A, MX-64, MX-106): its control table and what the firmware
does with it, on the kernel's Dynamixel law (`LAW_DXL`) through `hil.joint`.

The bus (drivers/emulated/protocol1/) calls `ping`, `read`, `write`, `reg_write`, `action` and `reset` with decoded
packets and sends back the `Reply` each returns. The operation types (joint, wheel, multi-turn, torque), the error
byte, the Alarm Shutdown through Torque Limit and the choices made where the e-manual is silent are described in
docs/dynamixel-protocol1.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from firmware_models.dynamixel.control_table import Access, ControlTable, ControlTableError
from firmware_models.dynamixel.protocol1.table import BAUD_TOLERANCE, Protocol1Model
from hil.joint import Joint, encoder_reading
from hil.kernel import DXL_MODES, FAULT_BITS, LAWS

__all__ = ["ERROR_BITS", "Dynamixel1Servo", "Reply"]

# status packet error byte (e-manual Protocol 1.0 §Status Packet, Error; §Alarm LED/Shutdown)
INPUT_VOLTAGE = 0x01
ANGLE_LIMIT = 0x02
OVERHEATING = 0x04
RANGE = 0x08
CHECKSUM = 0x10
OVERLOAD = 0x20
INSTRUCTION = 0x40
ERROR_BITS = {"input_voltage": INPUT_VOLTAGE, "angle_limit": ANGLE_LIMIT, "overheating": OVERHEATING,
              "range": RANGE, "checksum": CHECKSUM, "overload": OVERLOAD, "instruction": INSTRUCTION}

DIRECTION_BIT = 0x400          # bit 10 of Moving Speed, Present Speed/Load, Goal Torque: CW (e-manual §Moving Speed)
MAGNITUDE = 0x3FF
GOAL_TORQUE_A = 0.0045         # Goal Torque / Current unit [A] (e-manual MX-64 §Goal Torque(71), §Current(68))
CURRENT_ZERO = 2048            # Current(68) at no current
MULTI_TURN_LIMIT = 4095        # both angle limits 4095: multi-turn mode (e-manual MX §CW/CCW Angle Limit)
TICK_MODULO = 32768            # Realtime Tick wraps at 0x7FFF (e-manual MX §Realtime Tick(50))
# the line speeds a controller's serial port offers (termios); a Baud Rate value within 3 % of one of them talks to it
STANDARD_BPS = (9600, 19200, 38400, 57600, 115200, 230400, 460800, 500000, 576000, 921600, 1_000_000, 1_152_000,
                2_000_000, 2_500_000, 3_000_000, 3_500_000, 4_000_000)


class Reply(NamedTuple):
    """What the servo makes of one instruction: its status packet's error byte and parameters."""

    error: int
    params: bytes = b""


def slope_representative(value: int) -> int:
    """The value a Compliance Slope register is used as (e-manual §Compliance Slope: 7 steps, 2..128)."""
    rep = 2
    for step in (4, 8, 16, 32, 64, 128):
        if value >= step:
            rep = step
    return rep


def nominal_bps(bps: int) -> int:
    """The standard line speed within 3 % of `bps` (what a controller sets to talk to it), else `bps` itself."""
    best = min(STANDARD_BPS, key=lambda s: abs(s - bps))
    return best if abs(best - bps) <= BAUD_TOLERANCE * best else bps


class Dynamixel1Servo:
    """A Protocol 1.0 Dynamixel of `model` driving actuator `joint` of the kernel.

    `registers` overrides EEPROM defaults at power-up (ID, Baud Rate, angle limits, …) as a rig gives them; they
    survive a power cycle but not Factory Reset, like values a user wrote. `id`, `baud_bps`, `return_delay_s` and
    `status_return_level` are what the bus reads per packet.
    """

    family = "dynamixel1"   # what the web console tells servo kinds apart by

    def __init__(self, model: Protocol1Model, joint: Joint, registers: dict[str, int] | None = None):
        self.model = model
        self.spec = model.spec
        self.fw = model.firmware
        self.joint = joint
        self.table = ControlTable(model.spec)
        self._factory = bytes(self.table.data)
        for name, value in (registers or {}).items():
            self.table.set(name, value)
        self._hw_max_duty = joint.params()["max_duty"]    # duty at 100 % output (the catalog's firmware law)
        self._rad = self.fw.position_unit_deg * math.pi / 180.0            # [rad per position unit]
        self._speed = self.fw.speed_unit_rpm * 2.0 * math.pi / 60.0          # [rad/s per speed unit]
        self._mx = self.spec.has("P Gain")
        self._registered: tuple[int, bytes] | None = None
        self._reset_pending = False
        self._hw = 0             # live hardware error bits (Input Voltage, Overheating, Overload)
        self._t0 = joint.time_s()
        # EEPROM as last saved: a change after an instruction is handed to `on_eeprom_change` (a state file)
        self.on_eeprom_change: Callable[[Dynamixel1Servo], None] | None = None
        self._eeprom_seen = bytes(self.table.data[:model.eeprom_end])
        self._power_up()

    def eeprom_items(self) -> dict[str, int]:
        """The writable EEPROM items (addresses below the RAM area) and their values."""
        end = self.model.eeprom_end
        return {it.name: self.table.get(it.name) for it in self.spec.items
                if it.address < end and it.access is Access.RW}

    def _eeprom_written(self) -> None:
        now = bytes(self.table.data[:self.model.eeprom_end])
        if now != self._eeprom_seen:
            self._eeprom_seen = now
            if self.on_eeprom_change is not None:
                self.on_eeprom_change(self)

    # ------------------------------------------------------------------ what the bus reads
    @property
    def id(self) -> int:
        return self._id

    def supports(self, instruction: int) -> bool:
        """Whether the model executes `instruction` (Bulk Read is MX only)."""
        return instruction in self.spec.instructions

    def _cache(self) -> None:
        t = self.table
        self._id = t.get("ID")
        self.baud_bps = nominal_bps(self.model.baud_bps(t.get("Baud Rate")))
        self.return_delay_s = t.get("Return Delay Time") * 2e-6     # 2 µs units (e-manual §Return Delay Time)
        self.status_return_level = t.get("Status Return Level")

    # ------------------------------------------------------------------ instructions
    def ping(self) -> Reply:
        """Ping: an empty status packet, answered whatever the Status Return Level (Protocol 1.0 §Ping)."""
        self.housekeeping()
        return Reply(self._hw)

    def read(self, address: int, length: int) -> Reply:
        """Read `length` bytes at `address`, the Present items as of the loop's latest state. A read outside the
        table is a Range Error without data (our choice: the e-manual does not say)."""
        self.housekeeping()
        self._refresh()
        try:
            return Reply(self._hw, self.table.read(address, length))
        except ControlTableError:
            return Reply(self._hw | RANGE)

    def write(self, address: int, data: bytes) -> Reply:
        """Write `data` at `address`: checked, applied all or nothing, then acted on."""
        self.housekeeping()
        data = bytes(data)
        end = address + len(data)
        lock_at = self.spec.item("Lock").address
        if self.table.get("Lock") and (address < self.model.eeprom_end or (address <= lock_at < end
                                                                           and data[lock_at - address] == 0)):
            # Lock = 1: EEPROM cannot be written and Lock stays 1 until power-off (e-manual §Lock(47)); the
            # error bit a refused write gets is not documented: Range Error, our choice
            return self._answer(RANGE)
        goal = self.spec.item("Goal Position")
        try:
            changed = self.table.write(address, data)
        except ControlTableError:
            # every refusal of the table engine (read-only or undefined address, part of an item, out of range)
            # is the Range Error of Protocol 1.0: "an instruction out of the range for use" (§Status Packet)
            return self._answer(RANGE)
        error = 0
        goal_written = address <= goal.address < end
        if (goal_written and self.operation_type() == "joint"
                and not self._within_limits(self.table.get("Goal Position"))):
            error |= ANGLE_LIMIT     # kept, and the kernel goal clamped to the limits (e-manual §Goal Position)
        wheel_goal = address <= self.spec.item("Moving Speed").address < end and self.operation_type() == "wheel"
        if (goal_written or wheel_goal) and not self.table.get("Torque Enable"):
            # a goal write turns the torque on (our reading of the 1.0 firmware: the X series' "Torque On by Goal
            # Update" Drive Mode bit makes it optional; not in the 1.0 e-manual, unverified on hardware)
            self.table.set("Torque Enable", 1)
            changed = ["Torque Enable", *changed]
        self._apply(changed)
        self._eeprom_written()
        return self._answer(error)

    def reg_write(self, address: int, data: bytes) -> Reply:
        """Hold the write until Action; Registered (44) shows it (Protocol 1.0 §Reg Write)."""
        self.housekeeping()
        self._registered = (address, bytes(data))
        self.table.set("Registered", 1)
        return Reply(self._hw)

    def action(self) -> Reply:
        """Run the registered write; without one, Instruction Error (Protocol 1.0 §Status Packet, bit 6)."""
        if self._registered is None:
            self.housekeeping()
            return Reply(self._hw | INSTRUCTION)
        address, data = self._registered
        self._registered = None
        self.table.set("Registered", 0)
        return self.write(address, data)

    def reset(self) -> Reply:
        """Factory Reset (0x06): the whole table back to factory values, ID 1 included (Protocol 1.0 §Factory
        Reset). The status packet still comes from the old ID (the e-manual's example); the reset takes effect
        right after it, at the next housekeeping."""
        self.housekeeping()
        self._reset_pending = True
        return Reply(self._hw)

    # ------------------------------------------------------------------ between packets
    def housekeeping(self) -> None:
        """What the firmware watches between packets: a pending Factory Reset, the hardware error conditions and
        the Alarm Shutdown (e-manual §Alarm LED/Shutdown). The bus server calls it every few milliseconds."""
        if self._reset_pending:
            self._reset_pending = False
            self.table.data[:] = self._factory
            self._power_up()
            self._eeprom_written()
        self._hw = self._conditions()
        self._shutdown(self._hw)

    def _conditions(self) -> int:
        """The hardware error bits whose condition holds now (Input Voltage, Overheating, Overload)."""
        t, st, p = self.table, self.joint.read_state(), self.joint.params()
        hw = 0
        vin = self._vin(p)
        if not t.get("Min Voltage Limit") <= round(vin * 10) <= t.get("Max Voltage Limit"):
            hw |= INPUT_VOLTAGE
        if self._temperature(st, p) > t.get("Temperature Limit") or st["latched"] & FAULT_BITS["overheat"]:
            hw |= OVERHEATING
        if st["latched"] & FAULT_BITS["overload"]:
            hw |= OVERLOAD
        return hw

    def _answer(self, error: int) -> Reply:
        self._shutdown(error)
        return Reply(self._hw | error)

    def _shutdown(self, bits: int) -> None:
        """An error named in Shutdown(18) zeroes Torque Limit: the motor's output is 0 % (e-manual §Torque Limit)."""
        t = self.table
        if bits & t.get("Shutdown") and t.get("Torque Limit"):
            t.set("Torque Limit", 0)
            self.joint.command(params=self._kernel_params())

    # ------------------------------------------------------------------ power-up
    def _power_up(self) -> None:
        """Power-up: RAM to defaults, Torque Limit = Max Torque, Goal Position = Present Position, torque off,
        latches released (e-manual §Torque Limit, §Lock: only a power cycle clears Lock)."""
        end = self.model.eeprom_end
        self.table.data[end:] = self._factory[end:]
        self.table.set("Torque Limit", self.table.get("Max Torque"))
        self._registered = None
        self._cache()
        self.joint.command(params=self._kernel_params(), enable=False, clear_latches=True)
        self.joint.sync()
        self._refresh()
        if self.operation_type() in ("joint", "multi"):
            self.table.set("Goal Position", self.table.get("Present Position"))

    def power_cycle(self) -> None:
        """Power off and on (a rig `reset`): EEPROM kept, RAM back to its defaults."""
        self._reset_pending = False
        self._power_up()

    # ------------------------------------------------------------------ write side effects
    def _apply(self, changed: list[str]) -> None:
        if not changed:
            return
        t = self.table
        self._cache()
        if "Torque Limit" in changed and t.get("Torque Limit"):
            # the motor runs again once the error is gone and Torque Limit is non-zero (§Torque Limit note): the
            # kernel's overload latch is released, and what still holds is reported
            self.joint.command(clear_latches=True)
            self.joint.sync()
            self._hw = self._conditions()
        if "Torque Enable" in changed and t.get("Torque Enable"):
            self._refresh()
        enable = bool(t.get("Torque Enable"))
        self.joint.command(params=self._kernel_params(), goal=self._kernel_goal(), enable=enable)

    # ------------------------------------------------------------------ register → SI
    def operation_type(self) -> str:
        """Operation type from the registers: "torque" (MX Torque Ctrl Mode Enable), "wheel" (both angle limits
        0), "multi" (MX, both 4095), else "joint" (e-manual §CW/CCW Angle Limit)."""
        t = self.table
        if self.spec.has("Torque Ctrl Mode Enable") and t.get("Torque Ctrl Mode Enable"):
            return "torque"
        cw, ccw = t.get("CW Angle Limit"), t.get("CCW Angle Limit")
        if cw == 0 and ccw == 0:
            return "wheel"
        if self._mx and cw == MULTI_TURN_LIMIT and ccw == MULTI_TURN_LIMIT:
            return "multi"
        return "joint"

    def _within_limits(self, goal: int) -> bool:
        return self.table.get("CW Angle Limit") <= goal <= self.table.get("CCW Angle Limit")

    def _sign(self) -> int:
        """−1 in reverse mode (MX-106 Drive Mode bit 0; joint and multi-turn only, e-manual §Drive Mode)."""
        reverse = self.spec.has("Drive Mode") and self.table.get("Drive Mode") & 0x01
        if reverse and self.operation_type() in ("joint", "multi"):
            return -1
        return 1

    def _divider(self) -> int:
        return self.table.get("Resolution Divider") if self.operation_type() == "multi" else 1

    def _offset(self) -> int:
        return self.table.get("Multi Turn Offset") if self.operation_type() == "multi" else 0

    def position_si(self, value: int) -> float:
        """Goal/Present Position register `value` as the output angle [rad] (multi-turn: (value − offset) ×
        divider, e-manual §Resolution Divider; 0 rad at the middle of the range)."""
        real = (value - self._offset()) * self._divider()
        return self._sign() * (real - self.fw.position_center) * self._rad

    def position_register(self, theta: float) -> int:
        """The Present Position register at output angle `theta` [rad]."""
        real = self.fw.position_center + self._sign() * theta / self._rad
        kind = self.operation_type()
        if kind == "multi":
            value = round(real / self._divider()) + self._offset()
            return max(-28672, min(28672, value))
        top = self.spec.item("CCW Angle Limit").max
        if self._mx:
            return round(real) % (top + 1)     # a magnetic encoder: one turn, 0..4095 (e-manual MX §Present Position)
        return max(0, min(top, round(real)))   # AX: a potentiometer's 0..1023 over 300°

    @staticmethod
    def _signed_magnitude(value: int) -> int:
        """A bit-10 direction register (0..1023 CCW, 1024..2047 CW) as a signed value, CCW positive."""
        return -(value & MAGNITUDE) if value & DIRECTION_BIT else value & MAGNITUDE

    @staticmethod
    def _to_signed_magnitude(x: float) -> int:
        mag = min(MAGNITUDE, round(abs(x)))
        return mag | (DIRECTION_BIT if x < 0 and mag else 0)

    def _kernel_goal(self) -> float:
        t, kind = self.table, self.operation_type()
        if kind == "torque":
            return self._signed_magnitude(t.get("Goal Torque")) * GOAL_TORQUE_A
        if kind == "wheel":
            v = self._signed_magnitude(t.get("Moving Speed"))
            return v * self._speed if self._mx else v / MAGNITUDE * self._hw_max_duty
        goal = t.get("Goal Position")
        if kind == "joint":
            goal = max(t.get("CW Angle Limit"), min(t.get("CCW Angle Limit"), goal))
        return self.position_si(goal)

    def _kernel_params(self) -> dict:
        """Kernel parameters of the Dynamixel law (`LAW_DXL`) from the registers."""
        t, fw, kind = self.table, self.fw, self.operation_type()
        p = self.joint.params()
        stall_a = p["supply_v"] / p["resistance"]
        out = {
            "law": LAWS["dxl"], "dxl_compliance": 0, "dxl_time_profile": 0, "dxl_kff1": 0.0, "dxl_kff2": 0.0,
            "dxl_vel_limit": 0.0,
            "max_current": 0.0, "dxl_goal_duty": 1.0, "dxl_goal_current": 0.0,
            "dxl_kpp": 0.0, "dxl_kpi": 0.0, "dxl_kpd": 0.0, "dxl_kvp": 0.0, "dxl_kvi": 0.0,
            "dxl_prof_vel": 0.0, "dxl_prof_acc": 0.0,
            # Torque Limit, 0.1 % of the maximum output (e-manual §Torque Limit(34))
            "max_duty": t.get("Torque Limit") / MAGNITUDE * self._hw_max_duty,
            "temp_limit": float(t.get("Temperature Limit")),
            "shutdown_mask": 0,     # the firmware's Shutdown acts through Torque Limit (here), not the kernel
            "overload_current": fw.overload_stall_fraction * stall_a * self._hw_max_duty,
            "overload_time": fw.overload_time_s,
        }
        accel = t.get("Goal Acceleration") * self.spec.item("Goal Acceleration").si_per_unit \
            if self.spec.has("Goal Acceleration") else 0.0     # 0 = no acceleration control
        if kind == "torque":
            out["dxl_mode"] = DXL_MODES["current"]
        elif kind == "wheel":
            if self._mx:
                out.update(dxl_mode=DXL_MODES["velocity"], dxl_kvp=fw.wheel_kvp, dxl_kvi=fw.wheel_kvi,
                           dxl_prof_acc=accel)
            else:
                out["dxl_mode"] = DXL_MODES["pwm"]     # AX wheel mode: output control only (§Moving Speed)
        else:
            out["dxl_mode"] = DXL_MODES["position"]
            # Moving Speed 0: no speed control, the motor's maximum (§Moving Speed); the kernel's step profile
            out["dxl_prof_vel"] = (t.get("Moving Speed") & MAGNITUDE) * self._speed
            out["dxl_prof_acc"] = accel
            out.update(self._position_gains())
        return out

    def _position_gains(self) -> dict:
        t, fw = self.table, self.fw
        if self._mx:
            # e-manual MX §PID Gains: K_p = P/8, K_i = I·1000/2048, K_d = D·4/1000. P: the measured duty per unit
            # (catalog TOML). I and D: per control period I/2048 and D·4 (the 1000s convert ms to s), in the
            # units of the 2.0 firmware's I/65536 and D/16 (firmware_constants.py): pulses, 885 = full duty.
            pulse_per_rad = 1.0 / self._rad
            kpp = t.get("P Gain") * (fw.p_duty_per_rad or pulse_per_rad / 8.0)
            kpi = t.get("I Gain") / 2048.0 * pulse_per_rad / fw.control_period_s
            kpd = t.get("D Gain") * 4.0 * pulse_per_rad * fw.control_period_s
            return {"dxl_kpp": kpp, "dxl_kpi": kpi, "dxl_kpd": kpd}
        # AX: the compliance curve instead of a PID (e-manual AX-12A §Compliance Margin, §Compliance Slope, §Punch):
        # no output within the margin, Punch at its edge, the full output a slope's representative value beyond
        # it. The CW items hold where the shaft is CW of the goal (the error goal − present > 0: the e-manual's
        # graph puts the CW margin and slope on the CW side of the goal)
        full = self._hw_max_duty
        punch = min(t.get("Punch"), MAGNITUDE) / MAGNITUDE * full        # 0.1 % of the output, like Torque Limit
        cw = slope_representative(t.get("CW Compliance Slope")) * self._rad
        ccw = slope_representative(t.get("CCW Compliance Slope")) * self._rad
        return {"dxl_compliance": 1, "dxl_punch": punch,
                "dxl_margin_pos": t.get("CW Compliance Margin") * self._rad,
                "dxl_margin_neg": t.get("CCW Compliance Margin") * self._rad,
                "dxl_slope_pos": (full - punch) / cw, "dxl_slope_neg": (full - punch) / ccw}

    # ------------------------------------------------------------------ kernel state → registers
    @staticmethod
    def _vin(p: dict) -> float:
        return p["supply_override"] if p["supply_override"] == p["supply_override"] else p["supply_v"]

    @staticmethod
    def _temperature(st, p: dict) -> float:
        """The servo's temperature sensor [°C]: the housing node of a two-node thermal model, else the winding."""
        if p.get("thermal_r2", 0.0) > 0:
            return p["ambient"] + st["housing_rise"]
        return st["temperature"] if st["k"] > 0 else p["ambient"] + st["temp_rise"]

    def refresh(self, address: int = 0, length: int = 1 << 16) -> None:
        """The Present items from the kernel state, as a read of address..address+length returns them."""
        self._refresh()

    def decode_state(self, address: int, data: bytes) -> dict:
        """The joint state in SI that register bytes `data` read at `address` carry (a real servo's reply seen by the
        mirror, under this servo's angle limits and Drive Mode): position and goal [rad], velocity [rad/s], current
        [A], temperature [°C], voltage [V], enable; each only if its item lies within the bytes (no velocity in AX
        wheel mode, where Present Speed is the output)."""
        end, out = address + len(data), {}
        for key, name in (("position", "Present Position"), ("velocity", "Present Speed"), ("current", "Current"),
                          ("goal", "Goal Position"), ("temperature", "Present Temperature"),
                          ("voltage", "Present Voltage"), ("enable", "Torque Enable")):
            if not self.spec.has(name):
                continue
            it = self.spec.item(name)
            if it.address < address or it.address + it.size > end:
                continue
            v = it.decode(data[it.address - address:it.address - address + it.size])
            if key in ("position", "goal"):
                out[key] = self.position_si(v)
            elif key == "velocity" and not (self.operation_type() == "wheel" and not self._mx):
                out[key] = self._sign() * self._signed_magnitude(v) * self._speed
            elif key == "current":
                out[key] = (v - CURRENT_ZERO) * GOAL_TORQUE_A
            elif key == "voltage":
                out[key] = v / 10.0
            elif key in ("temperature", "enable"):
                out[key] = float(v) if key == "temperature" else bool(v)
        return out

    def _refresh(self) -> None:
        """Present items, Moving, Realtime Tick and Current from the kernel state."""
        t, st, p = self.table, self.joint.read_state(), self.joint.params()
        theta = encoder_reading(st)
        omega, duty = st["omega"], st["duty"]
        t.set("Present Position", self.position_register(theta))
        if self.operation_type() == "wheel" and not self._mx:
            speed = duty / self._hw_max_duty * MAGNITUDE     # AX wheel mode: the output, 0.1 % (§Present Speed)
        else:
            speed = self._sign() * omega / self._speed
        t.set("Present Speed", self._to_signed_magnitude(speed))
        # load: inferred from the output (§Present Load note), 0.1 % of the maximum, bit 10 = CW
        t.set("Present Load", self._to_signed_magnitude(self._sign() * duty / self._hw_max_duty * MAGNITUDE))
        t.set("Present Voltage", max(0, min(255, round(self._vin(p) * 10))))
        t.set("Present Temperature", max(0, min(255, round(self._temperature(st, p)))))
        t.set("Moving", int(bool(st["prof_active"]) or abs(omega) > self._speed))
        if self.spec.has("Realtime Tick"):
            t.set("Realtime Tick", int((self.joint.time_s() - self._t0) * 1000) % TICK_MODULO)
        if self.spec.has("Current"):
            t.set("Current", max(0, min(4095, CURRENT_ZERO + round(st["i_out"] / GOAL_TORQUE_A))))
