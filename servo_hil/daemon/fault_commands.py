"""The fault commands of a running rig (`inject_fault`, `clear_fault`, `faults`) and what they remember: the faults
injected into each actuator with their arguments, and the winding temperature an `overheat` replaced. What each
fault does to the kernel or a bus is servo_hil/daemon/faults.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from drivers.wire.faults import BUS_FAULTS
from servo_hil.daemon.arguments import CommandError, number, only, shown
from servo_hil.daemon.faults import KERNEL_FAULTS, inject_bus_fault, kernel_fault_clear, kernel_fault_params

if TYPE_CHECKING:
    from servo_hil.daemon.live_rig import LiveRig


class FaultCommands:
    """Fault injection into `live`, and the faults active on each of its actuators."""

    def __init__(self, live: LiveRig):
        self.live = live
        self.active: list[dict[str, dict]] = [{} for _ in live.names]  # injected faults and their args
        self.overheat_restore: list[float | None] = [None for _ in live.names]  # °C before the injection

    def forget(self) -> None:
        """No fault active any more (the rig was `reset`)."""
        self.active = [{} for _ in self.live.names]
        self.overheat_restore = [None for _ in self.live.names]

    def inject(self, cmd: dict) -> dict:
        only(cmd, ("actuator", "fault", "args"), where="inject_fault")
        live = self.live
        j = live.actuator(cmd)
        fault, args = cmd.get("fault"), cmd.get("args", {})
        if not isinstance(args, dict):
            raise CommandError("inject_fault: args must be a map")
        try:
            if fault in BUS_FAULTS:
                inject_bus_fault(live.bus_faults[j], fault, args)
            elif fault == "overheat":
                before = self._overheat(j, args)
                if self.overheat_restore[j] is None:  # a second injection keeps the pre-fault temperature
                    self.overheat_restore[j] = before
            else:
                live.set_params(j, kernel_fault_params(fault, args, live.now()))
        except CommandError as exc:
            raise CommandError(f"inject_fault {fault}: {exc}") from None
        self.active[j][fault] = dict(args)
        live.emit({"type": "fault_injected", "actuator": live.names[j], "fault": fault, "args": args})
        return {}

    def _overheat(self, j: int, args: dict) -> float:
        """Heat the winding past its limit; returns the temperature to restore when cleared [°C]."""
        only(args, ("temperature_c",))
        live, p = self.live, self.live.params[j]
        if not p["thermal_r"] > 0 or not p["temp_limit"] > 0:
            raise CommandError("this actuator has no thermal model with a temperature limit")
        before = live.loop.snapshot()[0][j]["temperature"]
        live.push("set_temperature", j, number(args, "temperature_c", -50.0, 500.0, p["temp_limit"] + 5.0))
        return before if before == before else p["ambient"]

    def clear(self, cmd: dict) -> dict:
        only(cmd, ("actuator", "fault"), where="clear_fault")
        live = self.live
        j = live.actuator(cmd)
        fault = cmd.get("fault")
        if fault in BUS_FAULTS:
            live.bus_faults[j].clear(fault)
        elif fault in KERNEL_FAULTS:
            restore = None
            if fault == "overheat":
                # undo the injection: the winding goes back to its temperature before it, then the
                # shutdown latch is released (clearing the latch alone would re-latch on a hot winding)
                temp = live.loop.snapshot()[0][j]["temperature"]
                if temp > live.params[j]["temp_limit"]:
                    restore = self.overheat_restore[j]
                    if restore is None:
                        raise CommandError(f"clear_fault overheat: winding at {temp:.1f} °C is still above its "
                                           f"limit {live.params[j]['temp_limit']:g} °C; let it cool or `reset`")
            with live.atomic():
                live.set_params(j, kernel_fault_clear(fault, live.configured[j]))
                if restore is not None:
                    live.push("set_temperature", j, restore)
                if fault in ("open_circuit", "overheat", "encoder_slip"):
                    live.push("clear_latches", j)
        else:
            raise CommandError(f"clear_fault: unknown fault {shown(fault)} "
                               f"(known: {', '.join(KERNEL_FAULTS + BUS_FAULTS)})")
        self.active[j].pop(fault, None)
        if fault == "overheat":
            self.overheat_restore[j] = None
        live.emit({"type": "fault_clear_requested", "actuator": live.names[j], "fault": fault})
        return {}

    def by_joint(self) -> dict[str, dict[str, dict]]:
        """The faults active on each actuator, with the arguments they were injected with, by joint name."""
        return {n: self.active[j] for j, n in enumerate(self.live.names)}

    def listing(self, cmd: dict) -> dict:
        only(cmd, (), where="faults")
        return {"faults": self.by_joint()}
