"""The commands of a running rig, as the ZeroMQ and MQTT planes and the web console deliver them.

Every command arrives as a dict `{"cmd": name, …arguments}` and is validated here: an unknown command, actuator,
argument or an out-of-range value raises CommandError naming it. Commands only ever change numbers in the kernel
(through the loop's command ring); nothing in a command can run code or read files. docs/commands.md lists them.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from hil.kernel import LAWS
from servo_hil.daemon.arguments import CommandError, number, only, shown
from servo_hil.daemon.fault_commands import FaultCommands
from servo_hil.daemon.hand import default_feel, hand_from_command
from servo_hil.daemon.live_rig import LAW_NAMES, LiveRig, holding_goal
from servo_hil.daemon.set_param import checked_change

log = logging.getLogger("servo-hil")
DIRECT_MODES = ("voltage", "current", "torque")
BIG = 1e9


def _finite(cmd: dict, key: str, lo: float = -BIG, hi: float = BIG) -> float:
    return number(cmd, key, lo, hi, where=cmd["cmd"])


def _check_args(cmd: dict, allowed: tuple[str, ...]) -> None:
    only(cmd, allowed, where=cmd["cmd"])


class CommandSet:
    """The commands `live` answers: `execute` looks a command up in the table of `_cmd_<name>` handlers."""

    def __init__(self, live: LiveRig):
        self.live = live
        self.faults = FaultCommands(live)
        self.table = {name: getattr(self, f"_cmd_{name}") for name in self.names()}

    @classmethod
    def names(cls) -> list[str]:
        """Every command's name, sorted."""
        return sorted(n[5:] for n in dir(cls) if n.startswith("_cmd_"))

    def execute(self, cmd: Any) -> dict:
        """Run one command; returns its result. Raises CommandError for anything refused.

        Any other exception is a bug, but one malformed command must not take the daemon down: it is
        logged with its traceback and refused as an internal error.
        """
        if not isinstance(cmd, dict) or not isinstance(cmd.get("cmd"), str):
            raise CommandError("a command is a map with a string 'cmd'")
        name = cmd["cmd"]
        handler = self.table.get(name)
        if handler is None:
            raise CommandError(f"unknown command {shown(name)} (known: {', '.join(self.table)})")
        try:
            return handler(cmd)
        except CommandError:
            raise
        except Exception as exc:
            log.warning("command %s failed: %s: %s (command: %s)", shown(name), type(exc).__name__, shown(str(exc)),
                        shown(cmd))
            raise CommandError(f"{shown(name)}: internal error ({type(exc).__name__}: {shown(str(exc))})") from exc

    # ------------------------------------------------------------------ views
    def _cmd_state(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator",))
        st = self.live.state()
        if "actuator" in cmd:
            name = self.live.names[self.live.actuator(cmd)]
            return {"state": {name: st[name]}}
        return {"state": st}

    def _cmd_status(self, cmd: dict) -> dict:
        _check_args(cmd, ())
        return {"status": self.live.status()}

    def _cmd_timing(self, cmd: dict) -> dict:
        """Raw loop counters and the lateness histogram (sparse: {µs bin: count}) for benchmarks."""
        _check_args(cmd, ())
        tel = self.live.loop.telemetry()
        hist = tel.pop("histogram_us")
        nz = hist.nonzero()[0]
        return {"timing": tel | {"histogram_us": {int(b): int(hist[b]) for b in nz}}}

    # ------------------------------------------------------------------ inputs
    def _cmd_set_goal(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator", "value"))
        j = self.live.actuator(cmd)
        self.live.push("set_u", j, _finite(cmd, "value", -1e6, 1e6))
        return {}

    def _cmd_set_enable(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator", "value"))
        j = self.live.actuator(cmd)
        if not isinstance(cmd.get("value"), bool):
            raise CommandError(f"set_enable: value must be true or false, got {shown(cmd.get('value'))}")
        self.live.push("set_enable", j, 1.0 if cmd["value"] else 0.0)
        return {}

    def _cmd_set_external_torque(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator", "value"))
        j = self.live.actuator(cmd)
        self.live.push("set_external", j, _finite(cmd, "value", -1e5, 1e5))
        return {}

    def _cmd_hand(self, cmd: dict) -> dict:
        """A person's hand on a joint: drags it toward `target` or along `path` through its physics; `release`."""
        j = self.live.actuator(cmd)
        self.live.push("set_hand", j, hand=hand_from_command(cmd, default_feel()))
        return {}

    def _cmd_plug(self, cmd: dict) -> dict:
        """Pull (`connected: false`) or plug back in a servo's bus cable: unplugged, it hears and answers nothing; a
        serial servo's cable carries its supply too, so it goes limp and powers up again when plugged back in."""
        _check_args(cmd, ("actuator", "connected"))
        live = self.live
        j = live.actuator(cmd)
        connected = cmd.get("connected")
        if not isinstance(connected, bool):
            raise CommandError(f"plug: connected must be true or false, got {shown(connected)}")
        bus = live.rig.actuators[j].bus
        if bus is None or {b.name: b.protocol for b in live.rig.buses}[bus] == "etherban":
            raise CommandError(f"plug: {live.names[j]} has no bus cable of its own (it is reached over Etherban or "
                               "not at all)")
        faults = live.bus_faults[j]
        if faults.unplugged == (not connected):
            return {"connected": connected}
        faults.unplugged = not connected
        power_up = live.power_up_hooks.get(j)
        if power_up is not None:            # the cable carries the supply: off with it, and a power-up with it
            if connected:
                power_up()
            else:
                live.push("set_enable", j, 0.0)
        live.emit({"event": "plug", "actuator": live.names[j], "connected": connected})
        return {"connected": connected}

    # ------------------------------------------------------------------ firmware
    def _cmd_set_mode(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator", "mode"))
        live = self.live
        j = live.actuator(cmd)
        allowed = sorted({LAW_NAMES[live.configured[j]["law"]], *DIRECT_MODES})
        mode = cmd.get("mode")
        if mode not in allowed:
            raise CommandError(f"set_mode: mode {shown(mode)} is not available for {live.names[j]} (allowed: "
                               f"{', '.join(allowed)})")
        # A new mode starts from a command that holds the joint where it is (or no drive at all).
        u = holding_goal(live.params[j] | {"law": LAWS[mode]}, live.loop.snapshot()[0][j]["theta_meas"])
        with live.atomic():
            live.set_params(j, {"law": LAWS[mode]})
            live.push("set_u", j, u)
        live.emit({"type": "mode", "actuator": live.names[j], "mode": mode})
        return {"goal": u}

    def _cmd_set_param(self, cmd: dict) -> dict:
        """A kernel parameter of config/daemon/set_param.toml, under the rules of servo_hil/daemon/set_param.py."""
        _check_args(cmd, ("actuator", "name", "value"))
        j = self.live.actuator(cmd)
        key, value = checked_change(self.live, j, cmd)
        self.live.set_params(j, {key: value})
        return {}

    # ------------------------------------------------------------------ faults (servo_hil/daemon/fault_commands.py)
    def _cmd_inject_fault(self, cmd: dict) -> dict:
        return self.faults.inject(cmd)

    def _cmd_clear_fault(self, cmd: dict) -> dict:
        return self.faults.clear(cmd)

    def _cmd_faults(self, cmd: dict) -> dict:
        return self.faults.listing(cmd)

    # ------------------------------------------------------------------ clock
    def _no_clock_in_lockstep(self, name: str) -> None:
        if self.live.rig.loop.lockstep:
            raise CommandError(f"{name}: a lock-step rig advances only on `step`; there is no clock to {name}")

    def _cmd_pause(self, cmd: dict) -> dict:
        _check_args(cmd, ())
        self._no_clock_in_lockstep("pause")
        self.live.push("pause")
        self.live.emit({"type": "paused"})
        return {}

    def _cmd_resume(self, cmd: dict) -> dict:
        _check_args(cmd, ())
        self._no_clock_in_lockstep("resume")
        self.live.push("resume")
        self.live.emit({"type": "resumed"})
        return {}

    def _cmd_reset(self, cmd: dict) -> dict:
        """Every actuator back to its configured parameters, initial state and goal; faults cleared."""
        _check_args(cmd, ())
        self.faults.forget()
        self.live.reset()
        self.live.emit({"type": "reset"})
        return {}

    def _cmd_step(self, cmd: dict) -> dict:
        """Lock-step mode: advance n ticks, wait for them, return the state."""
        _check_args(cmd, ("n",))
        live = self.live
        if not live.rig.loop.lockstep:
            raise CommandError("step: the rig is not in lock-step mode (set [loop] lockstep = true)")
        n = cmd.get("n", 1)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10_000_000:
            raise CommandError(f"step: n must be an integer in [1, 10000000], got {shown(n)}")
        target = live.loop.request_steps(n)
        deadline = time.monotonic() + 60.0
        while live.loop.telemetry()["tick"] < target:
            if time.monotonic() > deadline or not live.running:
                raise CommandError("step: the loop did not finish the steps in time")
            time.sleep(2e-5)
        return {"tick": target, "state": live.state()}
