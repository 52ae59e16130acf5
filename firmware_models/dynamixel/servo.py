"""One simulated Dynamixel servo: its control table and what its firmware does with it.

The bus hands this module the packets its C base class (`ServoCore`) leaves to Python; it turns register
writes into kernel parameters and goals (SI) as the ROBOTIS e-manual describes each item (<model> §Control
Table Description), and says so where the choice is ours (docs/dynamixel.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from firmware_models.dynamixel.control_table import ControlTable, ControlTableError, ModelSpec
from firmware_models.dynamixel.firmware_constants import FirmwareConstants, load_firmware_constants
from firmware_models.dynamixel.model_spec import EEPROM_END, Access
from firmware_models.dynamixel.present import PULSES_PER_REV, PWM_FULL, VELOCITY_UNIT, PresentItems
from firmware_models.dynamixel.servo_core import (
    EFFECT_CACHE,
    EFFECT_GOAL,
    EFFECT_MODE,
    EFFECT_PARAMS,
    EFFECT_TORQUE,
    EFFECT_WATCHDOG,
    POSITION_MODES,
    Reply,
    ServoCore,
    effects_of,
)
from hil.joint import Joint
from hil.kernel import DXL_MODES, FAULT_BITS, LAWS, peak_spent

ACCELERATION_UNIT = 214.577 * 2.0 * math.pi / 3600.0   # Profile Acceleration [rad/s² per unit]
# Operating Mode register value (e-manual "Operating Mode") → what the kernel's Dynamixel law regulates;
# extended position differs from position only in the Present Position register, not in the law
KERNEL_MODES = {0: DXL_MODES["current"], 1: DXL_MODES["velocity"], 3: DXL_MODES["position"],
                4: DXL_MODES["position"], 5: DXL_MODES["current_position"], 16: DXL_MODES["pwm"]}

# Hardware Error Status (70) and Shutdown (63) bits (e-manual §Shutdown(63))
HW_INPUT_VOLTAGE = 0x01
HW_OVERHEATING = 0x04
HW_MOTOR_ENCODER = 0x08
HW_ELECTRICAL_SHOCK = 0x10
HW_OVERLOAD = 0x20

# kernel fault bits behind each hardware error
_KERNEL_TO_HW = {FAULT_BITS["overheat"]: HW_OVERHEATING, FAULT_BITS["overload"]: HW_OVERLOAD,
                 FAULT_BITS["encoder_stuck"]: HW_MOTOR_ENCODER, FAULT_BITS["open_circuit"]: HW_ELECTRICAL_SHOCK}

_LATCHED = FAULT_BITS["overheat"] | FAULT_BITS["overload"]

CLEAR_KEY = bytes([0x01, 0x44, 0x58, 0x4C, 0x22])     # 0x01 + "DXL\"" (Protocol 2.0 §Clear)
BACKUP_KEY = b"CTRL"                                  # after 0x01 (store) or 0x02 (restore)

class DynamixelServo(ServoCore):
    """A Dynamixel servo of model `spec` driving actuator `joint` of the kernel.

    The bus's common packets run in C (`ServoCore`, servo_core.pyx): a Read, a Write whose only effect is a new
    goal, the Bus Watchdog's note of each instruction, and the per-packet fields the bus reads (`id`,
    `secondary_id`, `baud_bps`, `return_delay_s`, `status_return_level`, `_hw_error` behind `alert`). The core
    calls nothing here: when a packet needs more, the bus calls `read`, `write` or `trip_watchdog`, which call
    the core's pieces and do the rest of what the firmware does.

    `registers` overrides EEPROM defaults at power-up (ID, Baud Rate, Return Delay Time, …) as a
    rig file gives them; they survive Reboot but not Factory Reset, like values written by a user.
    """

    def __init__(self, spec: ModelSpec, joint: Joint, registers: dict[str, int] | None = None,
                 constants: FirmwareConstants | None = None):
        self.spec = spec
        self.joint = joint
        self.fw = constants or load_firmware_constants(spec.name)
        self.table = ControlTable(spec)
        for name, value in (registers or {}).items():
            self.table.set(name, value)
        base = joint.params()
        self._hw_max_duty = base["max_duty"]          # duty at PWM Limit 885 (bam MXActuator: max_pwm 0.9625)
        self._registered: tuple[int, bytes] | None = None
        self._backup: bytearray | None = None
        self._hw_error = 0             # Hardware Error Status as latched (HW_* bits)
        self._last_instruction_s = 0.0
        self._current_a = self._current_unit_a(spec)   # [A per unit] of Present Current (or Present Load)
        # register ⇄ SI: Present items, positions (multi-turn, homing, reverse), velocities, currents (in C)
        self._units = PresentItems(spec, self._current_a, self._hw_max_duty, self.fw.in_position_window_pulses,
                                   self.fw.following_error_window_pulses)
        super().__init__(joint, self.table, self._units)
        self._a_watchdog = spec.item("Bus Watchdog").address
        self._a_torque = spec.item("Torque Enable").address
        self._a_drive = spec.item("Drive Mode").address
        self._cache()
        self._sense()
        self._power_up()
        # EEPROM as last saved: a change after an instruction is handed to `on_eeprom_change` (a state file)
        self.on_eeprom_change: Callable[[DynamixelServo], None] | None = None
        self._eeprom_seen = bytes(self.table.data[:EEPROM_END])

    def eeprom_items(self) -> dict[str, int]:
        """The writable EEPROM items and their values: what a servo's flash keeps over a power cycle."""
        return {it.name: self.table.get(it.name) for it in self.spec.items
                if it.address < EEPROM_END and it.access is Access.RW}

    def _eeprom_written(self) -> None:
        now = bytes(self.table.data[:EEPROM_END])
        if now != self._eeprom_seen:
            self._eeprom_seen = now
            if self.on_eeprom_change is not None:
                self.on_eeprom_change(self)

    # ------------------------------------------------------------------ identity, as the bus needs it
    def _cache(self) -> None:
        """Register values the bus reads on every packet, kept as attributes (refreshed after writes)."""
        t = self.table
        self.id = t.get("ID")
        sid = t.get("Secondary(Shadow) ID")
        self.secondary_id = sid if sid <= 252 else None
        self.baud_bps = self.spec.baud_rates[t.get("Baud Rate")]
        self.identity = (self.id, self.secondary_id, self.baud_bps)   # what the bus indexes servos by
        self.return_delay_s = t.get("Return Delay Time") * 2e-6
        self.status_return_level = t.get("Status Return Level")
        u = self._units
        u.sign = -1 if t.get("Drive Mode") & 0x01 else 1          # reverse mode (e-manual §Drive Mode(10))
        u.mode = t.get("Operating Mode")
        u.homing = t.get("Homing Offset")
        u.moving_threshold = t.get("Moving Threshold")

    # ------------------------------------------------------------------ instructions
    def read(self, address: int, length: int) -> Reply:
        """Read `length` bytes at `address`: Torque Enable .. Hardware Error Status as of now, the Present items
        as of the loop's latest state, then the table's bytes."""
        if address <= 70 and address + length > 64:
            self.housekeeping()
        return self.read_now(address, length)

    def write(self, address: int, data: bytes) -> Reply:
        """Write `data` at `address` as a Write instruction does: checked, applied all or nothing, then acted on."""
        data = bytes(data)
        end = address + len(data)
        if address <= 64 < end:
            self.housekeeping()   # a torque-on must see the hardware errors as of now
        wakes = self.torque_on_by_goal(address, end)
        if wakes:
            self.table.set("Torque Enable", 1)
        try:
            changed = self.write_table(address, data)
        except ControlTableError as exc:
            if wakes:
                self.table.set("Torque Enable", 0)
            return Reply(exc.code)
        if wakes:
            changed = ["Torque Enable", *changed]
        reply = Reply(self._apply(changed, wakes) if changed else 0)
        if address < EEPROM_END:
            self._eeprom_written()
        return reply

    def note_instruction(self, now_s: float | None = None) -> None:
        """An instruction packet reached this servo at simulation time `now_s` [s] (default: now): the Bus
        Watchdog restarts, or trips if the silence before it already exceeded it (e-manual §Bus Watchdog(98))."""
        if self.note_at(self.link_time_s() if now_s is None else now_s):
            self.trip_watchdog()

    def ping(self) -> Reply:
        return Reply(0, self.table.get("Model Number").to_bytes(2, "little")
                     + bytes([self.table.get("Firmware Version")]))

    def reg_write(self, address: int, data: bytes) -> Reply:
        """Hold the write until Action; Registered Instruction (69) shows it (Protocol 2.0 §Reg Write)."""
        self._registered = (address, bytes(data))
        self.table.set("Registered Instruction", 1)
        return Reply()

    def action(self) -> Reply:
        if self._registered is None:
            return Reply(2)          # Instruction Error: Action without Reg Write (Protocol 2.0 §Status Packet)
        address, data = self._registered
        self._registered = None
        self.table.set("Registered Instruction", 0)
        return self.write(address, data)

    def reboot(self) -> Reply:
        self._power_up(reboot=True)
        return Reply()

    def factory_reset(self, option: int) -> Reply:
        if option not in (0x01, 0x02, 0xFF):
            return Reply(4)
        self.table.factory_reset(option)
        self._backup = None
        self._power_up(reboot=True)
        self._eeprom_written()
        return Reply()

    def clear(self, params: bytes) -> Reply:
        """Clear (0x10): the multi-turn count back to one turn, only while stopped (Protocol 2.0 §Clear)."""
        if params != CLEAR_KEY:
            return Reply(4)
        self.refresh()
        if self.table.get("Moving"):
            return Reply(1)          # Result Fail
        self._single_turn()
        self.refresh()
        return Reply()

    def backup(self, params: bytes) -> Reply:
        """Control Table Backup (0x20): store, or restore the EEPROM and reboot; torque must be off."""
        if len(params) != 5 or params[1:] != BACKUP_KEY or params[0] not in (1, 2):
            return Reply(4)
        if self.table.get("Torque Enable"):
            return Reply(1)
        if params[0] == 1:
            self._backup = bytearray(self.table.data)
            self._set_if_present("Backup Ready", 1)
            return Reply()
        if self._backup is None:
            return Reply(1)
        self.table.data[:EEPROM_END] = self._backup[:EEPROM_END]
        self._power_up(reboot=True)
        self._eeprom_written()
        return Reply()

    # ------------------------------------------------------------------ power-up / reboot
    def _power_up(self, reboot: bool = False) -> None:
        """Power-up and Reboot: RAM to defaults, torque off, multi-turn reset, latches released."""
        if reboot:
            self.table.reset_ram()
        self._cache()
        self._registered = None
        self._hw_error = 0
        startup = self._get_if_present("Startup Configuration")
        if startup & 0x02 and self._backup is not None:
            self.table.data[64:] = self._backup[64:len(self.table.data)]
            self._cache()
        self.joint.command(params=self._kernel_params(), enable=False, clear_latches=True)
        self.joint.sync()   # the released latches must be what housekeeping reads next
        self._single_turn()
        self.refresh()
        self._set_goal_from_present()
        self.housekeeping()
        if startup & 0x01 and not self._hw_shutdown():
            self.table.set("Torque Enable", 1)
            self._torque(True)
        self._last_instruction_s = self.joint.time_s()

    def _single_turn(self) -> None:
        raw = self._units.encoder_pulses(self.link)
        self._units.turn_offset = (raw // PULSES_PER_REV) * PULSES_PER_REV

    # ------------------------------------------------------------------ write side effects
    def _apply(self, changed: list[str], goal_wakes: bool) -> int:
        """What the firmware does because the items named in `changed` changed; the reply's error number."""
        effects = effects_of(changed)
        if effects & EFFECT_CACHE:
            self._cache()
        if effects & EFFECT_TORQUE:
            on = self.table.get("Torque Enable") == 1
            if on and self._hw_shutdown():
                # Only a reboot allows torque on after a shutdown (e-manual §Shutdown(63)); silent on the reply.
                self.table.set("Torque Enable", 0)
                return 1
            self._torque(on, keep_goal=goal_wakes)
        if effects & EFFECT_MODE:
            for name, value in self.table.mode_defaults(self._units.mode).items():
                self.table.set(name, value)
            if self.table.get("Operating Mode") == 3:
                self._single_turn()
            self._set_goal_from_present()
        if effects & EFFECT_WATCHDOG and self.table.get("Bus Watchdog") == 0:
            self._last_instruction_s = self.link_time_s()
        if effects & EFFECT_PARAMS:
            self.joint.command(params=self._kernel_params())
        if effects & EFFECT_GOAL:
            self.send_goal()
        return 0

    def _torque(self, on: bool, keep_goal: bool = False) -> None:
        if on:
            mode = self.table.get("Operating Mode")
            self.refresh()
            if mode == 3:
                self._single_turn()   # Present Position re-initialised on torque on in Position mode
                self.refresh()
            if mode in POSITION_MODES and not keep_goal:
                # Goal Position follows Present Position when the torque comes on, so the servo holds
                # where it is (our reading of the firmware; the e-manual does not say).
                self._set_goal_from_present()
            self.joint.command(goal=self._kernel_goal(), enable=True)
        else:
            self.joint.command(enable=False)

    def _set_goal_from_present(self) -> None:
        if self.table.get("Operating Mode") in POSITION_MODES:
            self.table.set("Goal Position", self.table.get("Present Position"))

    # ------------------------------------------------------------------ register → SI
    def _kernel_params(self) -> dict:
        """Kernel parameters of the firmware law from the registers (gain scalings: FirmwareConstants)."""
        t, fw = self.table, self.fw
        mode = t.get("Operating Mode")
        time_based = bool(t.get("Drive Mode") & 0x04)
        pv, pa = t.get("Profile Velocity"), t.get("Profile Acceleration")
        if self._watchdog_tripped():
            pv = pa = 0   # the watchdog stop uses Profile Velocity and Acceleration 0 (e-manual §Bus Watchdog(98))
        duty_per_pwm = self._hw_max_duty / PWM_FULL
        shutdown = t.get("Shutdown")
        mask = (FAULT_BITS["overheat"] if shutdown & HW_OVERHEATING else 0) | \
            (FAULT_BITS["overload"] if shutdown & HW_OVERLOAD else 0)
        p = self.joint.params()
        stall_a = p["supply_v"] / p["resistance"]
        current_limit_a = t.get("Current Limit") * self._current_a if self.spec.has("Current Limit") else 0.0
        return {
            "law": LAWS["dxl"], "dxl_time_profile": int(time_based),
            "dxl_mode": KERNEL_MODES[mode],
            "dxl_kpp": fw.position_p(t.get("Position P Gain")),
            "dxl_kpi": fw.position_i(t.get("Position I Gain")),
            "dxl_kpd": fw.position_d(t.get("Position D Gain")),
            "dxl_kff1": fw.feedforward_1st(t.get("Feedforward 1st Gain")),
            "dxl_kff2": fw.feedforward_2nd(t.get("Feedforward 2nd Gain")),
            "dxl_kvp": fw.velocity_p(t.get("Velocity P Gain")),
            "dxl_kvi": fw.velocity_i(t.get("Velocity I Gain")),
            "max_duty": t.get("PWM Limit") * duty_per_pwm,
            "dxl_goal_duty": abs(t.get("Goal PWM")) * duty_per_pwm,
            "dxl_goal_current": abs(self._get_if_present("Goal Current")) * self._current_a,
            "max_current": current_limit_a if fw.current_limiter else 0.0,
            "dxl_prof_vel": pv * 1e-3 if time_based else pv * VELOCITY_UNIT,
            "dxl_prof_acc": pa * 1e-3 if time_based else pa * ACCELERATION_UNIT,
            "dxl_vel_limit": t.get("Velocity Limit") * VELOCITY_UNIT,
            "temp_limit": float(t.get("Temperature Limit")),
            "shutdown_mask": mask,
            "overload_current": fw.overload_stall_fraction * stall_a * self._hw_max_duty,
            "overload_time": fw.overload_time_s,
        }

    # ------------------------------------------------------------------ kernel state → registers
    def refresh(self, address: int = 0, length: int = 1 << 16) -> None:
        """Present items, Moving, Moving Status and Realtime Tick from the kernel state: those a read
        of address..address+length returns (all of them by default; Indirect Data may map any)."""
        self._units.refresh(self.link, self.table.data, address, address + length)

    def decode_state(self, address: int, data: bytes) -> dict:
        """The joint state in SI that register bytes `data` read at `address` carry (e.g. a real servo's
        reply seen by the mirror): position [rad], velocity [rad/s], current [A], goal [rad],
        temperature [°C], voltage [V], enable — each only if its item lies within the bytes."""
        end = address + len(data)
        out: dict = {}

        def item(name: str) -> int | None:
            if not self.spec.has(name):
                return None
            it = self.spec.item(name)
            if it.address < address or it.address + it.size > end:
                return None
            raw = data[it.address - address:it.address - address + it.size]
            return int.from_bytes(raw, "little", signed=it.signed)

        u = self._units
        for key, name, convert in (
                ("position", "Present Position", u.position_si),
                ("velocity", "Present Velocity", u.velocity_si),
                ("current", "Present Current", u.current_si),
                ("goal", "Goal Position", u.position_si),
                ("temperature", "Present Temperature", float),
                ("voltage", "Present Input Voltage", lambda v: v / 10.0),
                ("enable", "Torque Enable", bool)):
            v = item(name)
            if v is not None:
                out[key] = convert(v)
        return out

    def housekeeping(self) -> None:
        """What the firmware watches between packets: hardware errors, shutdown, Bus Watchdog (e-manual
        §Hardware Error Status(70), §Shutdown(63), §Bus Watchdog(98)). The bus server calls it every few
        milliseconds."""
        self._sense()
        self._hardware_errors(self.joint.read_state(), self._units.vin, self.joint.time_s())

    def _sense(self) -> None:
        """Supply voltage (with injected sag) and ambient temperature from the kernel parameters."""
        p = self.joint.params()
        self._units.vin = p["supply_override"] if p["supply_override"] == p["supply_override"] else p["supply_v"]
        self._units.ambient = p["ambient"]

    def supply_outside_limits(self) -> str | None:
        """Why this servo's supply raises an Input Voltage Error at once (outside its Min/Max Voltage Limit,
        e-manual §Max/Min Voltage Limit(32, 34)) and what that does, or None within its limits."""
        self._sense()
        t, vin = self.table, self._units.vin
        if self._supply_within_limits(vin):
            return None
        lo, hi = t.get("Min Voltage Limit"), t.get("Max Voltage Limit")
        off = " and switches torque off (its Shutdown has the bit)" if t.get("Shutdown") & HW_INPUT_VOLTAGE else ""
        return (f"supply {vin:g} V is outside Min/Max Voltage Limit {lo / 10:.1f}–{hi / 10:.1f} V: it reports an Input "
                f"Voltage Error{off}")

    def _supply_within_limits(self, vin: float) -> bool:
        """The supply `vin` [V] within Min/Max Voltage Limit [0.1 V] (else an Input Voltage Error)."""
        return self.table.get("Min Voltage Limit") <= round(vin * 10) <= self.table.get("Max Voltage Limit")

    def _hardware_errors(self, st: dict, vin: float, now: float) -> None:
        t = self.table
        hw = 0
        # latched kernel faults from the latch itself (a reboot's clear is seen as soon as it is applied),
        # live conditions (encoder stuck, open circuit) from the flags of the last step
        flags = st["latched"] | (st["fault_flags"] & ~_LATCHED)
        for bit, hw_bit in _KERNEL_TO_HW.items():
            if flags & bit:
                hw |= hw_bit
        i2t = st["i2t"]
        if i2t > 0 and t.get("Torque Enable") and peak_spent(self.joint.params(), i2t):
            # the peak current's i²t budget is spent and the current held to the continuous limit: a persistent
            # load above the maximum output (e-manual §Hardware Error Status(70), Overload Error)
            hw |= HW_OVERLOAD
        if not self._supply_within_limits(vin):
            hw |= HW_INPUT_VOLTAGE
        new = hw & ~self._hw_error
        self._hw_error |= hw            # latched until reboot (e-manual §Shutdown(63))
        t.set("Hardware Error Status", self._hw_error)
        if new & t.get("Shutdown") and t.get("Torque Enable"):
            t.set("Torque Enable", 0)
            self.joint.command(enable=False)
        if self._hw_shutdown() and t.get("Torque Enable"):
            t.set("Torque Enable", 0)
        self._check_watchdog(now)

    def _check_watchdog(self, now: float) -> None:
        """Bus Watchdog: torque on and no instruction for value × 20 ms of simulation time (e-manual
        §Bus Watchdog(98))."""
        if self.watchdog_expired(now):
            self.trip_watchdog()

    def _hw_shutdown(self) -> bool:
        return bool(self._hw_error & self.table.get("Shutdown"))

    def _watchdog_tripped(self) -> bool:
        return self.spec.has("Bus Watchdog") and self.table.get("Bus Watchdog") in (-1, 255)

    def trip_watchdog(self) -> None:
        """No instruction for the watchdog time with torque on: stop at once and read −1 (e-manual
        §Bus Watchdog(98))."""
        t = self.table
        t.set("Bus Watchdog", -1 if self.spec.item("Bus Watchdog").signed else 255)
        mode = t.get("Operating Mode")
        if mode in POSITION_MODES:
            t.set("Goal Position", t.get("Present Position"))
        elif mode == 1:
            t.set("Goal Velocity", 0)
        elif mode == 0:
            t.set("Goal Current", 0)
        else:
            t.set("Goal PWM", 0)
        self.joint.command(params=self._kernel_params(), goal=self._kernel_goal())

    # ------------------------------------------------------------------ helpers
    def _current_unit_a(self, spec: ModelSpec) -> float:
        """[A] per unit of Present Current; a model without a current sensor (XL430) reports Present Load in
        0.1 % of its maximum torque instead (e-manual XL430-W250 §Present Load(126): "inferred … from the
        internal output value"), taken as 0.1 % of the stall current at the configured supply."""
        if spec.has("Present Current"):
            return spec.item("Present Current").si_per_unit
        p = self.joint.params()
        return spec.item("Present Load").si_per_unit * p["supply_v"] / p["resistance"]

    def _get_if_present(self, name: str) -> int:
        return self.table.get(name) if self.spec.has(name) else 0

    def _set_if_present(self, name: str, value: int) -> None:
        if self.spec.has(name):
            self.table.set(name, value)
