"""One simulated Feetech STS servo: its control table and what its firmware does with a register write.

The bus (drivers/emulated/protocol1) hands each instruction to `FeetechServo`; the servo keeps its table, turns
writes into the kernel law `sts`'s SI parameters and goal, fills the Present items from the kernel's state, and
runs the protections of the Feetech STS memory table (Unloading_Condition with Overload_Torque and Protection_Time,
Protection_Current and Over_Current_Protection_Time, the temperature and voltage limits). Where the memory table is
silent the choice is ours and docs/feetech.md says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from firmware_models.feetech import law
from firmware_models.feetech.control_table import ControlTable, ModelSpec, decode_sign, encode_sign
from hil.joint import Joint, encoder_reading

__all__ = ["STATUS_BITS", "FeetechServo"]

# Status (65) and status-packet error bits (Feetech STS memory table §Servo status; feetech-servo-sdk ERRBIT_*)
VOLTAGE, ANGLE, OVERHEAT, OVERCURRENT, OVERLOAD = 1, 2, 4, 8, 32
STATUS_BITS = {"voltage": VOLTAGE, "angle": ANGLE, "overheat": OVERHEAT, "overcurrent": OVERCURRENT,
               "overload": OVERLOAD}

_EEPROM_END = 40          # addresses below are EEPROM (Feetech STS memory table: EPROM 0..39, SRAM from 40)
_PRESENT_FIRST, _PRESENT_END = 56, 71   # Present_Position .. Present_Current: from the kernel's state on a read
_CALIBRATE = 128          # Torque_Enable value: the present position becomes 2048 (memory table, Torque switch)
# Phase (18) bits (Feetech STS memory table §Special bytes, Servo phase; the SCSCL table has bits 0 and 3 only)
_PHASE_DRIVE_REVERSE = 0x01       # bit 0: the motor's drive direction reversed
_PHASE_SPEED_STEP = 0x04          # bit 2: speeds in 1 step/s (0.0146 rpm), else in 50 step/s (0.732 rpm)
_PHASE_SPEED_ZERO_IS_MAX = 0x08   # bit 3: Goal_Velocity 0 means the maximum speed
_PHASE_FULL_ANGLE = 0x10          # bit 4: Present_Position is not folded into 0..4095
_PHASE_FEEDBACK_REVERSE = 0x80    # bit 7: the position feedback's direction reversed
_MAX_RESOLUTION_FACTOR = 100      # Angular_Resolution (30): 1..100 (memory table)
# the registers law.kernel_params converts (LeRobot's names)
_LAW_REGISTERS = ("Operating_Mode", "P_Coefficient", "D_Coefficient", "I_Coefficient", "CW_Dead_Zone",
                  "CCW_Dead_Zone", "Velocity_closed_loop_P_proportional_coefficient",
                  "Velocity_closed_loop_I_integral_coefficient", "Acceleration", "Goal_Velocity", "Torque_Limit",
                  "Minimum_Startup_Force")
# writes whose only effect is on what the law is given (gains, limits, profile)
_LAW_ITEMS = frozenset({"P_Coefficient", "D_Coefficient", "I_Coefficient", "CW_Dead_Zone", "CCW_Dead_Zone",
                        "Velocity_closed_loop_P_proportional_coefficient",
                        "Velocity_closed_loop_I_integral_coefficient", "Acceleration", "Maximum_Acceleration",
                        "Goal_Velocity", "Torque_Limit", "Phase", "Operating_Mode", "Protective_Torque",
                        "Minimum_Startup_Force", "Angular_Resolution"})
_GOAL_ITEMS = frozenset({"Goal_Position", "Goal_Velocity", "Goal_Time", "Running_Time", "Min_Position_Limit",
                         "Max_Position_Limit", "Homing_Offset", "Operating_Mode", "Phase", "Angular_Resolution"})


class FeetechServo:
    """A Feetech servo of model `spec` driving actuator `joint` of the kernel (a `Protocol1Servo` for the bus:
    each instruction returns (error byte, parameters), or None where the servo stays silent).

    `registers` override EEPROM defaults at power-up as a rig file gives them (the servo's saved EEPROM: they
    survive a power cycle)."""

    family = "feetech"

    def __init__(self, spec: ModelSpec, joint: Joint, registers: Mapping[str, int] | None = None):
        self.spec = spec
        self.joint = joint
        self.table = ControlTable(spec)
        for name, value in (registers or {}).items():
            self.table.set(name, value)
        self._flash = bytes(self.table.data[:_EEPROM_END])   # EEPROM as kept over a power cycle
        # the writable factory items (Maximum_Acceleration) are kept like EEPROM
        self._flash_factory = {it.name: self.table.get(it.name) for it in spec.items
                               if it.area == "factory" and it.access == "RW"}
        base = joint.params()
        self._full_duty = base["max_duty"] or 1.0    # the catalog's duty at Torque_Limit 1000 (bam max_pwm)
        self._error_gain = base.get("sts_error_gain") or base.get("error_gain") or 0.166
        self._supply_v = base.get("supply_v") or 7.4
        self._rad = spec.step_rad                        # [rad per step]
        self._zero = spec.zero_step                      # the step of 0 rad
        # a 300° potentiometer servo (SCS) reads its ends beyond its range; an STS encoder folds over a turn
        self._folds = spec.range_deg == 360.0
        # the move time of a position goal: Goal_Time (44) on an STS, Running_Time (44, ms) on an SCS
        self._time_item = next((n for n in ("Goal_Time", "Running_Time") if spec.has(n)), None)
        self._move_speed: float | None = None   # [rad/s] of the move Goal_Time set, None without one
        self._registered: tuple[int, bytes] | None = None
        self._status = 0                 # latched protection bits (Status, 65)
        self._timers = {OVERLOAD: 0.0, OVERCURRENT: 0.0}     # [s] above each threshold so far
        self._last_t: float | None = None
        self._enabled = False            # torque on as the client asked it
        self._unloaded = False           # a protection released the torque (Unloading_Condition)
        self._protective = False         # overload without unloading: the output is held at Protective_Torque
        self._power_up()
        # the saved EEPROM changed (a write with Lock 0, a calibration, a RESET): handed to this (a state file)
        self.on_eeprom_change: Callable[[FeetechServo], None] | None = None

    def eeprom_items(self) -> dict[str, int]:
        """The writable EEPROM items (and writable factory items) as saved: what the servo's flash keeps over a
        power cycle (Lock decides what reaches it)."""
        saved = ControlTable(self.spec)
        saved.data[:_EEPROM_END] = self._flash
        out = {it.name: saved.get(it.name) for it in self.spec.items if it.area == "eeprom" and it.access == "RW"}
        return out | self._flash_factory

    def _saved(self, before: tuple) -> None:
        if (self._flash, self._flash_factory) != before and self.on_eeprom_change is not None:
            self.on_eeprom_change(self)

    # ------------------------------------------------------------------ identity, as the bus reads it
    def _cache(self) -> None:
        t = self.table
        self.id = t.get("ID")
        self.baud_bps = self.spec.baud_rates.get(t.get("Baud_Rate"), 0)   # a code the model lacks: nobody hears it
        self.return_delay_s = t.get("Return_Delay_Time") * t.item("Return_Delay_Time").si_per_unit
        self.status_return_level = t.get("Response_Status_Level")

    def _power_up(self) -> None:
        t = self.table
        t.data[:_EEPROM_END] = self._flash
        for it in self.spec.items:
            if it.area == "ram":
                t.set(it.name, it.default)
        for name, value in self._flash_factory.items():
            t.set(name, value)
        if self.spec.has("Torque_Limit"):     # STS memory table: 48 is loaded from 16 at power-up (SCS: no 48)
            t.set("Torque_Limit", t.get("Max_Torque_Limit"))
        self._registered = None
        self._move_speed = None
        self._status = 0
        self._enabled = self._unloaded = self._protective = False
        self._timers = {OVERLOAD: 0.0, OVERCURRENT: 0.0}
        self._last_t = None
        self._cache()
        self._settings()
        self.joint.command(params=self._kernel_params(), enable=False, clear_latches=True)
        self.joint.sync()
        t.set("Goal_Position", self._present_steps(self._measured()))
        self._refresh_present()

    def reboot(self) -> None:
        """Power cycle: EEPROM as last saved, RAM at its defaults, torque off."""
        self._power_up()

    # ------------------------------------------------------------------ instructions (bus.Protocol1Servo)
    def ping(self) -> tuple[int, bytes]:
        return self._status, b""

    def read(self, address: int, length: int) -> tuple[int, bytes] | None:
        """`length` bytes at `address`, the Present items as of the loop's latest state. A read past the table is
        not answered: the status byte has no bit for it (our choice, docs/feetech.md)."""
        if address + length > _PRESENT_FIRST and address < _PRESENT_END:
            st = self._state()
            self.housekeeping(st)
            self._refresh_present(st)
        data = self.table.read(address, length)
        return None if data is None else (self._status, data)

    def write(self, address: int, data: bytes) -> tuple[int, bytes]:
        """A WRITE: the bytes of writable items are stored (others ignored, as the servo has no error bit to
        refuse them), then acted on."""
        self._apply(address, bytes(data))
        return self._status, b""

    def reg_write(self, address: int, data: bytes) -> tuple[int, bytes]:
        """REG WRITE: held until ACTION; Async_Write_Flag (64) says one is waiting (memory table)."""
        self._registered = (address, bytes(data))
        self.table.write(64, b"\x01", writable=False)
        return self._status, b""

    def action(self) -> tuple[int, bytes]:
        if self._registered is not None:
            address, data = self._registered
            self._registered = None
            self.table.write(64, b"\x00", writable=False)
            self._apply(address, data)
        return self._status, b""

    def reset(self) -> tuple[int, bytes]:
        """RESET: factory values everywhere but ID and Baud_Rate, so the servo stays reachable (our choice: the
        manual does not say which items a reset keeps), saved at once, then a power cycle."""
        before = (self._flash, dict(self._flash_factory))
        keep = {"ID": self.table.get("ID"), "Baud_Rate": self.table.get("Baud_Rate")}
        reply = (self._status, b"")
        self.table.reset()
        for name, value in keep.items():
            self.table.set(name, value)
        self._flash = bytes(self.table.data[:_EEPROM_END])
        self._flash_factory = {n: self.spec.item(n).default for n in self._flash_factory}
        self._power_up()
        self._saved(before)
        return reply

    # ------------------------------------------------------------------ firmware
    def _apply(self, address: int, data: bytes) -> None:
        before = (self._flash, dict(self._flash_factory))
        self._apply_now(address, data)
        self._saved(before)

    def _apply_now(self, address: int, data: bytes) -> None:
        t = self.table
        lock_open = t.get("Lock") == 0      # as before this write: the Lock flag decides whether EEPROM is saved
        changed = t.write(address, data)
        if not changed:
            return
        end = address + len(data)
        if address < _EEPROM_END and lock_open:
            lo, hi = address, min(end, _EEPROM_END)
            self._flash = self._flash[:lo] + bytes(t.data[lo:hi]) + self._flash[hi:]
        for name in self._flash_factory:
            if name in changed and lock_open:
                self._flash_factory[name] = t.get(name)
        if "ID" in changed or "Baud_Rate" in changed or "Return_Delay_Time" in changed \
                or "Response_Status_Level" in changed:
            self._cache()
        self._settings()
        if "Max_Torque_Limit" in changed and self.spec.has("Torque_Limit") \
                and t.get("Torque_Limit") > t.get("Max_Torque_Limit"):
            t.set("Torque_Limit", t.get("Max_Torque_Limit"))
        if "Torque_Enable" in changed:
            self._torque(t.get("Torque_Enable"))
            return
        timed = self._move_speed
        goal = self._kernel_goal() if _GOAL_ITEMS.intersection(changed) else None
        law_changed = _LAW_ITEMS.intersection(changed) or self._move_speed != timed
        params = self._kernel_params() if law_changed else None
        if params is not None or goal is not None:
            self.joint.command(params=params, goal=goal)

    def _torque(self, value: int) -> None:
        t = self.table
        if value == _CALIBRATE and self.spec.has("Homing_Offset"):
            # the present position becomes 2048: Homing_Offset = actual − 2048 (memory table, Torque switch 128),
            # saved at once; the torque stays as it was
            actual = round(self._sense * self._measured() / self._unit) + self._zero
            offset = (actual - self._zero + 2048) % 4096 - 2048
            t.set("Homing_Offset", max(-2047, min(2047, offset)))
            lo = t.item("Homing_Offset").address
            self._flash = self._flash[:lo] + bytes(t.data[lo:lo + 2]) + self._flash[lo + 2:]   # only the offset
            self._settings()
            t.set("Torque_Enable", 0 if self._unloaded else int(self._enabled))
            self.joint.command(goal=self._kernel_goal())
            return
        on = value != 0
        if on:
            # enabling again releases the latched protections (our choice: the manual names no other way but a
            # power cycle); the goal is where the shaft is unless one was written before
            self._status = 0
            self._unloaded = self._protective = False
            self._timers = {OVERLOAD: 0.0, OVERCURRENT: 0.0}
        self._enabled = on
        goal = self._kernel_goal()      # first: it sets the speed of a timed move, which the parameters carry
        self.joint.command(params=self._kernel_params(), goal=goal, enable=on, clear_latches=on)

    def _kernel_params(self) -> dict:
        """The law `sts`'s parameters from the registers (law.kernel_params), with what the firmware adds:
        Maximum_Acceleration caps Acceleration, Protective_Torque caps the torque after an overload, and
        Goal_Velocity 0 is the maximum speed only with Phase bit 3 (the STS3215's setting), else a stop; a timed
        move (Goal_Time) sets the speed; the dead zones count in the position unit (Angular_Resolution); Phase
        bits 0 and 7 set the loop's sign."""
        t = self.table
        registers = {name: t.get(name) for name in _LAW_REGISTERS if self.spec.has(name)}
        registers["Goal_Velocity"] = registers.get("Goal_Velocity", 0) * self._speed_steps
        if "Torque_Limit" not in registers:      # SCS: Max_Torque_Limit (16) is the only torque limit
            registers["Torque_Limit"] = t.get("Max_Torque_Limit")
        registers["Acceleration"] = self._acceleration_units()
        if self._protective:
            registers["Torque_Limit"] = min(registers["Torque_Limit"], 10 * t.get("Protective_Torque"))
        out = law.kernel_params(registers, self._error_gain, self._full_duty, self._full_speed_steps(),
                                self.spec.turn_steps)
        if self._move_speed is not None and self._get("Operating_Mode", 0) in (0, 3):
            out["sts_speed"] = self._move_speed
        out |= law.dead_band(t.get("CW_Dead_Zone"), t.get("CCW_Dead_Zone"), self.spec.turn_steps / self._factor)
        out["sts_polarity"] = float(self._polarity)
        # Minimum_Startup_Force starts a still shaft: still as the firmware's Moving flag counts it, or (an SCS,
        # without the threshold) below one step per second (our choice)
        out["sts_rest_speed"] = self._moving_threshold or self._rad
        return out

    def _acceleration_units(self) -> int:
        """Acceleration (41) as the firmware applies it: capped by Maximum_Acceleration (an SCS has neither: 0)."""
        return min(self._get("Acceleration", 0), self._get("Maximum_Acceleration", 254))

    def _full_speed_steps(self) -> float:
        """[step/s] what Goal_Velocity 0 means: the maximum with Phase bit 3, else 0 (a stop)."""
        t = self.table
        return t.get("Maximum_Velocity_Limit") * 50 if t.get("Phase") & _PHASE_SPEED_ZERO_IS_MAX else 0

    def _timed_speed(self, distance: float) -> float | None:
        """The setpoint speed [rad/s] that moves `distance` [rad] in Goal_Time [ms] (position and step modes, with
        Goal_Velocity 0: a written speed takes precedence, as the SCS SDK's WritePos(ID, position, time, speed)
        examples pass time 0 with a speed); None without a time. With an Acceleration a, the trapezoid's cruise
        speed v that takes the time T: T = d/v + v/a; a move too short for it runs at the maximum speed."""
        t = self.table
        if self._time_item is None or self._get("Operating_Mode", 0) not in (0, 3) or t.get("Goal_Velocity"):
            return None
        time_s = abs(t.get(self._time_item)) * 1e-3
        if time_s <= 0 or distance <= 0:
            return None
        full = law.speed(self._full_speed_steps(), self.spec.turn_steps) or math.inf
        a = law.acceleration(self._acceleration_units(), self.spec.turn_steps)
        if a <= 0:
            return min(distance / time_s, full)
        disc = (a * time_s) ** 2 - 4.0 * a * distance
        return full if disc < 0 else min(0.5 * (a * time_s - math.sqrt(disc)), full)

    def _kernel_goal(self) -> float:
        """The law's goal u: a position [rad] (modes 0 and 3), a velocity [rad/s] (1) or a duty (2)."""
        t = self.table
        mode = self._get("Operating_Mode", 0)
        sense = self._sense                     # the goal in the shaft's frame: mirrored with Phase bit 7
        if mode == 1:
            return sense * law.speed(t.get("Goal_Velocity") * self._speed_steps, self.spec.turn_steps)
        if mode == 2:
            return sense * law.pwm_duty(t.get("Goal_Time"), self._full_duty)
        theta = self._measured()
        present = self._present_steps(theta)
        goal = t.get("Goal_Position")
        lo, hi = t.get("Min_Position_Limit"), t.get("Max_Position_Limit")
        if mode == 0 and not (lo == 0 and hi == 0):
            goal = max(lo, min(hi, goal))       # the limits clamp the goal (both 0: multi-turn, no clamp)
        if mode == 3:
            goal = present + goal               # step mode: the goal counts from where the shaft is
        if self.spec.has("Present_Goal"):
            t.set("Present_Goal", goal)
        self._move_speed = self._timed_speed(abs(goal - present) * self._unit)
        return theta + sense * (goal - present) * self._unit

    # ------------------------------------------------------------------ register ⇄ SI
    def _state(self) -> Mapping:
        return self.joint.read_state()

    def _measured(self, st: Mapping | None = None) -> float:
        """The position register's angle [rad]: `encoder_reading`, the rule of every family."""
        return encoder_reading(st if st is not None else self._state())

    def _get(self, name: str, default: int) -> int:
        """Item `name`'s value, or `default` on a model without it (an SCS table lacks the STS's current
        protection, homing offset, mode and acceleration cap)."""
        return self.table.get(name) if self.spec.has(name) else default

    def _settings(self) -> None:
        """The register values every read and every housekeeping pass use, kept as attributes (refreshed after
        each write that changes a register, and at power-up), with the Present items' places in the table."""
        t = self.table
        unit = {name: t.item(name).si_per_unit if self.spec.has(name) else 0.0
                for name in ("Present_Velocity", "Present_Current", "Protection_Current", "Moving_Velocity_Threshold")}
        self._homing = self._get("Homing_Offset", 0)
        phase = t.get("Phase")
        self._full_angle = bool(phase & _PHASE_FULL_ANGLE)
        # STS (a 360° magnetic encoder): bit 0 reverses the drive, bit 7 the feedback, both the servo's direction
        # (memory table: "runs in reverse: 128 + 1 = 129"); one alone turns the loop positive. The SCSCL table has
        # no bit 7: its bit 0 reverses the servo's direction (our reading: else it could not hold a position)
        drive = -1 if phase & _PHASE_DRIVE_REVERSE else 1
        self._sense = (-1 if phase & _PHASE_FEEDBACK_REVERSE else 1) if self._folds else drive
        self._polarity = self._sense * drive
        # speeds in step/s (bit 2) or 50 step/s; the SCS table has no bit 2 (its unit: a step per second)
        self._speed_steps = 1 if phase & _PHASE_SPEED_STEP or not self._folds else 50
        # the position unit: Angular_Resolution (30) steps of the encoder (memory table: the multiplier of the
        # minimum resolution angle, 1..100, which extends the turns a position counts)
        self._factor = max(1, min(self._get("Angular_Resolution", 1), _MAX_RESOLUTION_FACTOR))
        self._unit = self._rad * self._factor             # [rad per position unit]
        self._v_range = (t.get("Min_Voltage_Limit") / 10, t.get("Max_Voltage_Limit") / 10)    # [V]
        self._max_temp = t.get("Max_Temperature_Limit")                                    # [°C]
        # SCS: no Overload_Torque (the load bit's threshold is not published: taken as the STS's 80 %) and no
        # current protection (no bit 3 in its Status)
        self._overload_pct = self._get("Overload_Torque", 80)
        self._overload_s = t.get("Protection_Time") * 0.01
        self._current_max = self._get("Protection_Current", 0) * unit["Protection_Current"] or math.inf   # [A]
        self._current_s = self._get("Over_Current_Protection_Time", 0) * 0.01
        self._unloading = t.get("Unloading_Condition")
        self._moving_threshold = self._get("Moving_Velocity_Threshold", 0) * unit["Moving_Velocity_Threshold"]
        self._velocity_unit = unit["Present_Velocity"] * self._speed_steps
        self._current_unit = unit["Present_Current"]
        order = self.spec.byte_order
        self._put = {name: (t.item(name).address, t.item(name).size, t.item(name).sign_bit, order)
                     for name in ("Present_Position", "Present_Velocity", "Present_Load", "Present_Current",
                                  "Present_Voltage", "Present_Temperature", "Status", "Moving", "Torque_Enable")}

    def _set_fast(self, name: str, value: int) -> None:
        address, size, bit, order = self._put[name]
        raw = encode_sign(value, bit)
        self.table.data[address:address + size] = max(0, min(raw, (1 << (8 * size)) - 1)).to_bytes(size, order)

    def _present_steps(self, theta: float) -> int:
        """Present_Position for shaft angle `theta`: actual − Homing_Offset (LeRobot `_get_half_turn_homings`),
        folded into 0..4095 unless Phase bit 4 (angle feedback mode) asks for the full angle; mirrored about 0 rad
        with Phase bit 7 and counted in Angular_Resolution steps."""
        p = round(self._sense * theta / self._unit) + self._zero - self._homing
        if not self._folds:
            return max(0, min(p, self.spec.resolution - 1))
        return p if self._full_angle else p % self.spec.resolution

    def _refresh_present(self, st: Mapping | None = None) -> None:
        st = st if st is not None else self._state()
        put = self._set_fast
        put("Present_Position", self._present_steps(self._measured(st)))
        put("Present_Velocity", round(self._sense * st["omega"] / self._velocity_unit))
        # the firmware's output in its own direction (Phase bit 0 reverses it at the motor)
        load = self._polarity * self._sense * st["duty"]
        put("Present_Load", round(load / self._full_duty * 1000) if self._full_duty else 0)
        put("Present_Current", round(abs(st["i_out"]) / self._current_unit))
        put("Present_Voltage", round(self._vin() * 10))
        put("Present_Temperature", max(0, round(self._temperature(st))))
        put("Status", self._status)
        moving = abs(st["omega"]) > self._moving_threshold or st["traj_vel"] != 0.0
        put("Moving", int(moving and self._enabled))
        put("Torque_Enable", int(self._enabled and not self._unloaded))

    def refresh(self, address: int = 0, length: int = 1 << 16) -> None:
        """The Present items from the kernel's state, if a read of address..address+length covers any of them."""
        if address + length > _PRESENT_FIRST and address < _PRESENT_END:
            self._refresh_present()

    def decode_state(self, address: int, data: bytes) -> dict:
        """The joint state in SI that register bytes `data` read at `address` carry (a real servo's reply seen by
        the mirror, in this servo's Homing_Offset frame): position and goal [rad], velocity [rad/s], current [A],
        temperature [°C], voltage [V], enable; each only if its item lies within the bytes."""
        order, end, out = self.spec.byte_order, address + len(data), {}
        for key, name in (("position", "Present_Position"), ("velocity", "Present_Velocity"),
                          ("current", "Present_Current"), ("goal", "Goal_Position"),
                          ("temperature", "Present_Temperature"), ("voltage", "Present_Voltage"),
                          ("enable", "Torque_Enable")):
            it = self.spec.item(name)
            if it.address < address or it.address + it.size > end:
                continue
            v = decode_sign(int.from_bytes(data[it.address - address:it.address - address + it.size], order),
                            it.sign_bit)
            if key in ("position", "goal"):
                out[key] = self._sense * (v - self._zero + self._homing) * self._unit    # inverse of _present_steps
            elif key == "enable":
                out[key] = bool(v)
            elif key == "velocity":
                out[key] = self._sense * v * self._velocity_unit
            else:
                out[key] = v * it.si_per_unit
        return out

    @staticmethod
    def _temperature(st: Mapping) -> float:
        """The kernel's temperature [°C]; before its first step, ambient (25 °C) plus the rise."""
        return st["temperature"] if st["k"] > 0 else 25.0 + st["temp_rise"]

    def _vin(self) -> float:
        """The supply [V]: read from the kernel's parameters at most every 10 ms of simulation time (a supply
        fault changes it at run time)."""
        now = self.joint.time_s()
        if self._vin_at is None or not 0.0 <= now - self._vin_at < 0.01:
            p = self.joint.params()
            v = p.get("supply_override", math.nan)
            self._vin_cached = v if v == v else (p.get("supply_v") or self._supply_v)
            self._vin_at = now
        return self._vin_cached

    _vin_at: float | None = None
    _vin_cached = 0.0

    # ------------------------------------------------------------------ protections
    def housekeeping(self, st: Mapping | None = None) -> None:
        """The protections, run between packets (and before a read of the Present items, with the state `st` that
        read uses): each condition of the Status byte is set while it holds; one whose Unloading_Condition bit is
        set releases the torque."""
        t = self.table
        st = st if st is not None else self._state()
        now = self.joint.time_s()
        dt = 0.0 if self._last_t is None else max(0.0, now - self._last_t)
        self._last_t = now
        found = 0
        lo, hi = self._v_range
        if not lo <= self._vin() <= hi:
            found |= VOLTAGE
        if self._temperature(st) > self._max_temp:
            found |= OVERHEAT
        load = abs(st["duty"]) / self._full_duty * 100 if self._full_duty else 0.0     # [%]
        timers = self._timers
        over = self._enabled and load >= self._overload_pct > 0
        timers[OVERLOAD] = timers[OVERLOAD] + dt if over else 0.0
        if over and timers[OVERLOAD] >= self._overload_s:
            found |= OVERLOAD
        over = abs(st["i_out"]) > self._current_max
        timers[OVERCURRENT] = timers[OVERCURRENT] + dt if over else 0.0
        if over and timers[OVERCURRENT] >= self._current_s:
            found |= OVERCURRENT
        if not found & ~self._status:
            return
        self._status |= found
        if found & self._unloading and self._enabled and not self._unloaded:
            self._unloaded = True
            t.set("Torque_Enable", 0)
            self.joint.command(enable=False)
        elif found & OVERLOAD and not self._protective:
            # overload protection without unloading: the output is held at Protective_Torque (34)
            self._protective = True
            self.joint.command(params=self._kernel_params())
        t.set("Status", self._status)
