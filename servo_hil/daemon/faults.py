"""Faults that can be injected into a running rig, and how each one changes the kernel.

Kernel faults follow the Simscape DC Motor block reference (Faults) plus what real servos show; bus faults are
a `BusFaults` per actuator, which the bus adapters apply. Names, arguments and units: the fault table of
docs/configuration.md, Commands.
"""

from __future__ import annotations

import math
from typing import Any

from drivers.wire.faults import BUS_FAULTS, BusFaults
from servo_hil.daemon.arguments import CommandError, number, only, shown

KERNEL_FAULTS = ("open_circuit", "supply_sag", "encoder_noise", "encoder_stuck", "encoder_slip", "overheat")
# each fault's arguments and their units, in the order the table above gives them
FAULT_ARGUMENTS: dict[str, tuple[tuple[str, str], ...]] = {
    "open_circuit": (("fraction", "0–1"), ("at_s", "s"), ("current_a", "A"), ("duration_s", "s")),
    "supply_sag": (("voltage_v", "V"),), "encoder_noise": (("std_rad", "rad"),), "encoder_stuck": (),
    "encoder_slip": (("rate_rad_s", "rad/s"),), "overheat": (("temperature_c", "°C"),),
    "drop": (("probability", "0–1"),), "corrupt": (("probability", "0–1"),), "delay": (("seconds", "s"),),
    "wrong_baud": (),
}


def _only(args: dict[str, Any], fault: str) -> None:
    only(args, tuple(name for name, _ in FAULT_ARGUMENTS[fault]))


def inject_bus_fault(faults: BusFaults, fault: str, args: dict[str, Any]) -> None:
    """Inject bus fault `fault` (one of BUS_FAULTS) with command arguments `args`, validated."""
    _only(args, fault)
    if fault == "drop":
        faults.drop = number(args, "probability", 0.0, 1.0)
    elif fault == "corrupt":
        faults.corrupt = number(args, "probability", 0.0, 1.0)
    elif fault == "delay":
        faults.delay_s = number(args, "seconds", 0.0, 1.0)
    else:
        faults.wrong_baud = True


def kernel_fault_params(fault: str, args: dict[str, Any], now_s: float) -> dict[str, float]:
    """Kernel parameter changes that inject `fault` at simulation time `now_s` [s]."""
    if fault not in KERNEL_FAULTS or fault == "overheat":
        raise CommandError(f"unknown fault {shown(fault)} (known: {', '.join(KERNEL_FAULTS + BUS_FAULTS)})")
    _only(args, fault)
    if fault == "open_circuit":
        frac = number(args, "fraction", 1e-6, 1.0, 1.0)
        if "current_a" in args:
            return dict(oc_fraction=frac, oc_time=math.inf,
                        oc_current=number(args, "current_a", 0.0, 1e4),
                        oc_duration=number(args, "duration_s", 0.0, 3600.0, 0.0))
        return dict(oc_fraction=frac, oc_time=number(args, "at_s", 0.0, 1e9, now_s), oc_current=math.inf)
    if fault == "supply_sag":
        return dict(supply_override=number(args, "voltage_v", 0.0, 1000.0))
    if fault == "encoder_noise":
        return dict(encoder_noise=number(args, "std_rad", 0.0, 10.0))
    if fault == "encoder_stuck":
        return dict(encoder_stuck=1)
    return dict(encoder_slip=number(args, "rate_rad_s", -100.0, 100.0))


def kernel_fault_clear(fault: str, configured: dict) -> dict[str, float]:
    """Kernel parameter values that clear `fault` (back to the rig's configuration)."""
    keys = {"open_circuit": ("oc_fraction", "oc_time", "oc_current", "oc_duration"),
            "supply_sag": ("supply_override",), "encoder_noise": ("encoder_noise",),
            "encoder_stuck": ("encoder_stuck",), "encoder_slip": ("encoder_slip",), "overheat": ()}[fault]
    return {k: configured[k] for k in keys}
