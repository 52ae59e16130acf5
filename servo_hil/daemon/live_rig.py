"""A running rig: the kernel in its real-time loop thread, and the commands that steer it.

Every command arrives as a dict `{"cmd": name, …arguments}` (over ZeroMQ or MQTT) and is validated
here: an unknown command, actuator, argument or an out-of-range value raises CommandError naming
it. Commands only ever change numbers in the kernel (through the loop's command ring); nothing in
a command can run code or read files.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from drivers.wire.faults import BUS_FAULTS, BUS_FLAG_BITS, BusFaults
from hil.kernel import FAULT_BITS, LAWS, Kernel
from hil.loop.rt import COMMANDS, RealtimeLoop
from hil.params.actuator import ActuatorSpec
from hil.params.catalog import config_dir
from hil.params.config_file import Strict, read_toml, validate
from hil.robot.rig import OFF_ON_A_HINGE, PENDULUM_KEYS, Robot
from servo_hil.daemon.arguments import CommandError, number, only, shown
from servo_hil.daemon.faults import KERNEL_FAULTS, inject_bus_fault, kernel_fault_clear, kernel_fault_params
from servo_hil.daemon.hand import RELEASE, default_feel, hand_from_command, hand_shown
from servo_hil.daemon.telemetry import LoopStats
from servo_hil.rig import Rig

log = logging.getLogger("servo-hil")
LAW_NAMES = {v: k for k, v in LAWS.items()}
POSITION_LAWS = {LAWS["position"], LAWS["dxl_pwm"], LAWS["sts_pwm"], LAWS["erob_pd"]}
DIRECT_MODES = ("voltage", "current", "torque")

BIG = 1e9


class Settable(Strict):
    """One entry of config/daemon/set_param.toml: a kernel parameter `set_param` may change."""

    unit: str
    range: tuple[float, float] = Field(description="[min, max], inclusive, in `unit`")
    doc: str
    laws: tuple[str, ...] | None = Field(None, description="the firmware laws that read it (None: every law)")

    @model_validator(mode="after")
    def _ordered(self) -> Settable:
        if not self.range[0] <= self.range[1]:
            raise ValueError(f"range: min {self.range[0]} > max {self.range[1]}")
        if unknown := [law for law in self.laws or () if law not in LAWS]:
            raise ValueError(f"laws: unknown law {unknown[0]!r} (laws: {', '.join(LAWS)})")
        return self


def settable_params(path: Path | None = None) -> dict[str, Settable]:
    """The parameters `set_param` accepts, by name (config/daemon/set_param.toml)."""
    path = path or config_dir() / "daemon" / "set_param.toml"
    return {name: validate(Settable, entry, f"{path}: {name}") for name, entry in read_toml(path).items()}


# A term that needs another parameter to act (the kernel ignores it alone, params.def): key → (that parameter, why)
_NEEDS = {"backlash": ("armature", "the motor side crosses the band with its own inertia"),
          "stiction_rise": ("stiction_time", "the rise needs its time constant"),
          "peak_current": ("peak_time", "the peak lasts as long as its i²t budget"),
          "thermal_r2": ("thermal_c2", "the housing node needs its heat capacity"),
          "thermal_r": ("thermal_c", None)}   # thermal_c has a positive minimum: only its "stay > 0" rule
_NEEDED_BY = {need: key for key, (need, _) in _NEEDS.items()}


def _coupling_problem(p: dict, key: str, value: float, robot: bool) -> str | None:
    """Why `set_param key value` cannot take effect as asked on an actuator of parameters `p`, or None."""
    if robot and key in OFF_ON_A_HINGE and value > 0:
        return f"{key}: a robot rig's hinge is the output, which has neither backlash nor rising static friction"
    if key in _NEEDED_BY and value <= 0 and p[_NEEDED_BY[key]] > 0:
        return f"{key} must stay > 0 while {_NEEDED_BY[key]} > 0 (set {_NEEDED_BY[key]} to 0 first)"
    need, why = _NEEDS.get(key, (None, None))
    if why and value > 0 and not p[need] > 0:
        return f"{key} > 0 needs {need} > 0 first ({why})"
    if key == "thermal_r2" and value > 0 and not p["thermal_r"] > 0:
        return "thermal_r2 > 0 needs the thermal model (thermal_r > 0: the winding-to-housing R_th1)"
    if key == "peak_current" and value > 0:   # the kernel then limits the current (plan.pxi, LIMIT_CURRENT)
        if not (p["tau_max"] > 0 and p["kt"] > 0):
            return "peak_current: this actuator has no continuous current limit to rise above (saturation)"
        i_cont = p["tau_max"] / p["kt"]
        if not value > i_cont:
            return f"peak_current {value:g} A must exceed the continuous limit {i_cont:g} A (tau_max / kt)"
    return None


def fault_names(flags: int) -> list[str]:
    names = [n for n, bit in FAULT_BITS.items() if flags & bit]
    return names + [n for n, bit in BUS_FLAG_BITS.items() if flags & bit]


def _finite(cmd: dict, key: str, lo: float = -BIG, hi: float = BIG) -> float:
    return number(cmd, key, lo, hi, where=cmd["cmd"])


def _check_args(cmd: dict, allowed: tuple[str, ...]) -> None:
    only(cmd, allowed, where=cmd["cmd"])


class LiveRig:
    """The kernel running in its loop thread, plus the host-side bookkeeping of commands and faults."""

    def __init__(self, rig: Rig, specs: list[ActuatorSpec], kernel: Kernel, robot: Robot | None = None):
        self.rig = rig
        self.robot = robot   # the loop ticks its engine (kernel + MuJoCo) instead of the kernel alone
        self.specs = specs
        self.names = [a.joint for a in rig.actuators]
        self.index = {n: j for j, n in enumerate(self.names)}
        self.params = [kernel.get_params(j) for j in range(kernel.n)]
        self.configured = [dict(p) for p in self.params]
        self.initial = [(a.initial.theta, a.initial.omega, a.initial.temperature_c) for a in rig.actuators]
        # their flag bits, kept by each BusFaults: the state publisher ORs them into every sample from C
        self.bus_flag_bits = np.zeros(len(self.names), dtype=np.int64)
        self.bus_faults = [BusFaults(flag_sink=self.bus_flag_bits[j:j + 1]) for j in range(len(self.names))]
        self.active: list[dict[str, dict]] = [{} for _ in self.names]  # injected faults and their args
        self.overheat_restore: list[float | None] = [None for _ in self.names]  # °C before the injection
        self.period_s = 1.0 / rig.loop.rate_hz
        self.loop = RealtimeLoop(kernel, rig.loop.rate_hz, robot.substeps if robot else rig.loop.substeps,
                                 rig.zmq.publish_every, rig.loop.fifo_priority, rig.loop.spin_us, rig.loop.lockstep,
                                 physics=robot.engine if robot else None)
        self.stats = LoopStats(self.loop)
        self._push_lock = threading.RLock()
        # the thread inside atomic() (it holds _push_lock), None outside: its pushes are staged until the batch ends
        self.batch_thread: int | None = None
        self._thread = threading.Thread(target=self.loop.run, name="servo-hil-loop", daemon=True)
        self.stopping = threading.Event()   # set by stop(): the loop is told to end and produces no more ticks
        self.listeners: list[Callable[[dict], None]] = []  # event sinks (MQTT, log)
        self.reset_hooks: list[Callable[[], None]] = []     # run after `reset` (bus firmware power-cycles)
        self._shared: dict[str, Any] = {}                   # what several buses of the rig share (shared())
        self.settable = settable_params()
        # error replies per command plane ("zmq", "mqtt"): refused commands and malformed or failing input
        self.command_errors: Counter[str] = Counter()
        # bus packets whose handling raised, answered as the device would and served on: per bus (status)
        self.bus_errors: dict[str, Callable[[], int]] = {}
        self.bus_wire: dict[str, Callable[[], dict]] = {}   # a bus's wire counters (DynamixelServer.wire_stats)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread.start()
        self.stats.start()

    def stop(self) -> None:
        self.stopping.set()
        self.loop.stop()
        if self._thread.ident is not None:  # started (a failed start may never have started it)
            self._thread.join(timeout=2.0)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def shared(self, key: str, create: Callable[[], Any]) -> Any:
        """The rig's resource `key` that several of its buses share (the eRob drives behind its CAN buses and
        Etherban servers): made by `create()` on first use, the same object afterwards."""
        if key not in self._shared:
            self._shared[key] = create()
        return self._shared[key]

    def joint(self, j: int) -> LiveJoint:
        """Actuator j as a bus's firmware model drives it (servo_hil.wiring.live.RunningRig)."""
        return LiveJoint(self, j)

    def emit(self, event: dict) -> None:
        event.setdefault("t_wall", time.time())
        log.info("event %s", event)
        for sink in list(self.listeners):
            try:
                sink(event)
            except Exception:  # a broken sink must not stop the others
                log.exception("event sink failed")

    # ------------------------------------------------------------------ host → loop
    def _push(self, kind: str, index: int = 0, a: float = 0.0, b: float = 0.0, params: dict | None = None,
              hand: dict | None = None) -> None:
        with self._push_lock:
            if self.loop.push(COMMANDS[kind], index, a, b, params, self.batch_thread is None, hand):
                return
            deadline = time.monotonic() + 1.0   # the ring is full: wait for the loop to drain it
            while not self.loop.push(COMMANDS[kind], index, a, b, params, self.batch_thread is None, hand):
                if time.monotonic() > deadline or not self.running:
                    raise CommandError("the loop is not taking commands (stopped or stalled)")
                time.sleep(1e-4)

    def atomic(self) -> _Batch:
        """Commands pushed inside reach the loop together: it applies all of them at one tick."""
        return _Batch(self)

    def _set_params(self, j: int, changes: dict) -> None:
        self.params[j].update(changes)
        self._push("set_params", j, params=self.params[j])

    def _actuator(self, cmd: dict) -> int:
        name = cmd.get("actuator")
        if not isinstance(name, str) or name not in self.index:
            raise CommandError(f"{cmd['cmd']}: unknown actuator {shown(name)} (known: {', '.join(self.names)})")
        return self.index[name]

    # ------------------------------------------------------------------ views
    def now(self) -> float:
        return self.loop.telemetry()["tick"] * self.period_s

    def state(self) -> dict:
        states, inputs = self.loop.snapshot()
        out = {}
        for j, name in enumerate(self.names):
            s, i, p = states[j], inputs[j], self.params[j]
            flags = int(s["fault_flags"]) | self.bus_faults[j].flags()
            out[name] = {
                "t": s["k"] * self.loop_dt, "position": s["theta"], "position_measured": s["theta_meas"],
                "velocity": s["omega"], "torque": s["torque"], "current": s["i_out"], "voltage": s["v_out"],
                "temperature": None if math.isnan(s["temperature"]) else s["temperature"],
                "goal": i["u"], "enable": bool(i["enable"]), "external_torque": i["external_torque"],
                "hand": hand_shown(i["hand"]),
                "mode": LAW_NAMES[p["law"]], "fault_flags": flags, "faults": fault_names(flags),
            }
        return out

    @property
    def loop_dt(self) -> float:
        """The kernel's step [s]: a tick over the loop's substeps (a robot's are its MJCF's)."""
        return self.period_s / self.loop.substeps

    def status(self) -> dict:
        st = self.state()
        return self.stats.status(self.rig.name, self.rig.loop.lockstep) | {"loop_alive": self.running} | {
            "command_errors": {plane: self.command_errors[plane] for plane in ("zmq", "mqtt", "mqtt_dropped")},
            "bus_errors_isolated": {name: count() for name, count in self.bus_errors.items()},
            "bus_wire": {name: stats() for name, stats in self.bus_wire.items()}} | {
            "actuators": {n: {"temperature": s["temperature"], "faults": s["faults"], "mode": s["mode"],
                              "enable": s["enable"], "position": s["position"]} for n, s in st.items()}}

    # ------------------------------------------------------------------ commands
    def execute(self, cmd: Any) -> dict:
        """Run one command; returns its result. Raises CommandError for anything refused.

        Any other exception is a bug, but one malformed command must not take the daemon down: it is
        logged with its traceback and refused as an internal error.
        """
        if not isinstance(cmd, dict) or not isinstance(cmd.get("cmd"), str):
            raise CommandError("a command is a map with a string 'cmd'")
        name = cmd["cmd"]
        handler = getattr(self, f"_cmd_{name}", None) if name.isidentifier() else None
        if handler is None:
            raise CommandError(f"unknown command {shown(name)} (known: {', '.join(self.commands())})")
        try:
            return handler(cmd)
        except CommandError:
            raise
        except Exception as exc:
            log.warning("command %s failed: %s: %s (command: %s)", shown(name), type(exc).__name__, shown(str(exc)),
                        shown(cmd))
            raise CommandError(f"{shown(name)}: internal error ({type(exc).__name__}: {shown(str(exc))})") from exc

    @classmethod
    def commands(cls) -> list[str]:
        return sorted(n[5:] for n in dir(cls) if n.startswith("_cmd_"))

    def _cmd_state(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator",))
        st = self.state()
        if "actuator" in cmd:
            return {"state": {self.names[self._actuator(cmd)]: st[self.names[self._actuator(cmd)]]}}
        return {"state": st}

    def _cmd_status(self, cmd: dict) -> dict:
        _check_args(cmd, ())
        return {"status": self.status()}

    def _cmd_timing(self, cmd: dict) -> dict:
        """Raw loop counters and the lateness histogram (sparse: {µs bin: count}) for benchmarks."""
        _check_args(cmd, ())
        tel = self.loop.telemetry()
        hist = tel.pop("histogram_us")
        nz = hist.nonzero()[0]
        return {"timing": tel | {"histogram_us": {int(b): int(hist[b]) for b in nz}}}

    def _cmd_set_goal(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator", "value"))
        j = self._actuator(cmd)
        self._push("set_u", j, _finite(cmd, "value", -1e6, 1e6))
        return {}

    def _cmd_set_enable(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator", "value"))
        j = self._actuator(cmd)
        if not isinstance(cmd.get("value"), bool):
            raise CommandError(f"set_enable: value must be true or false, got {shown(cmd.get('value'))}")
        self._push("set_enable", j, 1.0 if cmd["value"] else 0.0)
        return {}

    def _cmd_set_external_torque(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator", "value"))
        j = self._actuator(cmd)
        self._push("set_external", j, _finite(cmd, "value", -1e5, 1e5))
        return {}

    def _cmd_hand(self, cmd: dict) -> dict:
        """A person's hand on a joint: drags it toward `target` or along `path` through its physics; `release`."""
        j = self._actuator(cmd)
        self._push("set_hand", j, hand=hand_from_command(cmd, default_feel()))
        return {}

    def _cmd_set_mode(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator", "mode"))
        j = self._actuator(cmd)
        own = self.configured[j]["law"]
        allowed = sorted({LAW_NAMES[own], *DIRECT_MODES})
        mode = cmd.get("mode")
        if mode not in allowed:
            raise CommandError(f"set_mode: mode {shown(mode)} is not available for {self.names[j]} (allowed: "
                               f"{', '.join(allowed)})")
        law = LAWS[mode]
        # A new mode starts from a command that holds the joint where it is (or no drive at all).
        theta = self.loop.snapshot()[0][j]["theta_meas"]
        u = theta * self.params[j]["gear"] if law == LAWS["position"] else theta if law in POSITION_LAWS else 0.0
        with self.atomic():
            self._set_params(j, {"law": law})
            self._push("set_u", j, u)
        self.emit({"type": "mode", "actuator": self.names[j], "mode": mode})
        return {"goal": u}

    def _cmd_set_param(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator", "name", "value"))
        j = self._actuator(cmd)
        key = cmd.get("name")
        if not isinstance(key, str) or key not in self.settable:
            raise CommandError(f"set_param: unknown parameter {shown(key)} (settable: {', '.join(self.settable)})")
        if self.robot is not None and key in PENDULUM_KEYS:
            raise CommandError(f"set_param: {key} belongs to a pendulum load; a robot rig's load is its MJCF "
                               f"({self.robot.mjcf.name})")
        entry = self.settable[key]
        # the law running, or the actuator's own one (set_mode may switch back to it)
        laws = {LAW_NAMES[self.params[j]["law"]], LAW_NAMES[self.configured[j]["law"]]}
        if entry.laws is not None and not laws & set(entry.laws):
            raise CommandError(f"set_param: {key} is not used by {self.names[j]}'s firmware law "
                               f"{LAW_NAMES[self.params[j]['law']]!r} (only by {', '.join(entry.laws)})")
        value = number(cmd, "value", *entry.range, where=f"set_param {key} [{entry.unit}]")
        if problem := _coupling_problem(self.params[j], key, value, self.robot is not None):
            raise CommandError(f"set_param: {problem}")
        self._set_params(j, {key: value})
        return {}

    def _cmd_inject_fault(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator", "fault", "args"))
        j = self._actuator(cmd)
        fault, args = cmd.get("fault"), cmd.get("args", {})
        if not isinstance(args, dict):
            raise CommandError("inject_fault: args must be a map")
        try:
            if fault in BUS_FAULTS:
                inject_bus_fault(self.bus_faults[j], fault, args)
            elif fault == "overheat":
                before = self._overheat(j, args)
                if self.overheat_restore[j] is None:  # a second injection keeps the pre-fault temperature
                    self.overheat_restore[j] = before
            else:
                self._set_params(j, kernel_fault_params(fault, args, self.now()))
        except CommandError as exc:
            raise CommandError(f"inject_fault {fault}: {exc}") from None
        self.active[j][fault] = dict(args)
        self.emit({"type": "fault_injected", "actuator": self.names[j], "fault": fault, "args": args})
        return {}

    def _overheat(self, j: int, args: dict) -> float:
        """Heat the winding past its limit; returns the temperature to restore when cleared [°C]."""
        only(args, ("temperature_c",))
        p = self.params[j]
        if not p["thermal_r"] > 0 or not p["temp_limit"] > 0:
            raise CommandError("this actuator has no thermal model with a temperature limit")
        before = self.loop.snapshot()[0][j]["temperature"]
        self._push("set_temperature", j, number(args, "temperature_c", -50.0, 500.0, p["temp_limit"] + 5.0))
        return before if before == before else p["ambient"]

    def _cmd_clear_fault(self, cmd: dict) -> dict:
        _check_args(cmd, ("actuator", "fault"))
        j = self._actuator(cmd)
        fault = cmd.get("fault")
        if fault in BUS_FAULTS:
            self.bus_faults[j].clear(fault)
        elif fault in KERNEL_FAULTS:
            restore = None
            if fault == "overheat":
                # undo the injection: the winding goes back to its temperature before it, then the
                # shutdown latch is released (clearing the latch alone would re-latch on a hot winding)
                temp = self.loop.snapshot()[0][j]["temperature"]
                if temp > self.params[j]["temp_limit"]:
                    restore = self.overheat_restore[j]
                    if restore is None:
                        raise CommandError(f"clear_fault overheat: winding at {temp:.1f} °C is still above its "
                                           f"limit {self.params[j]['temp_limit']:g} °C; let it cool or `reset`")
            with self.atomic():
                self._set_params(j, kernel_fault_clear(fault, self.configured[j]))
                if restore is not None:
                    self._push("set_temperature", j, restore)
                if fault in ("open_circuit", "overheat", "encoder_slip"):
                    self._push("clear_latches", j)
        else:
            raise CommandError(f"clear_fault: unknown fault {shown(fault)} "
                               f"(known: {', '.join(KERNEL_FAULTS + BUS_FAULTS)})")
        self.active[j].pop(fault, None)
        if fault == "overheat":
            self.overheat_restore[j] = None
        self.emit({"type": "fault_clear_requested", "actuator": self.names[j], "fault": fault})
        return {}

    def _cmd_faults(self, cmd: dict) -> dict:
        _check_args(cmd, ())
        return {"faults": {n: self.active[j] for j, n in enumerate(self.names)}}

    def _no_clock_in_lockstep(self, name: str) -> None:
        if self.rig.loop.lockstep:
            raise CommandError(f"{name}: a lock-step rig advances only on `step`; there is no clock to {name}")

    def _cmd_pause(self, cmd: dict) -> dict:
        _check_args(cmd, ())
        self._no_clock_in_lockstep("pause")
        self._push("pause")
        self.emit({"type": "paused"})
        return {}

    def _cmd_resume(self, cmd: dict) -> dict:
        _check_args(cmd, ())
        self._no_clock_in_lockstep("resume")
        self._push("resume")
        self.emit({"type": "resumed"})
        return {}

    def _cmd_reset(self, cmd: dict) -> dict:
        """Every actuator back to its configured parameters, initial state and goal; faults cleared."""
        _check_args(cmd, ())
        with self.atomic():
            self._reset_all()
        for hook in self.reset_hooks:
            hook()
        self.emit({"type": "reset"})
        return {}

    def _reset_all(self) -> None:
        for j in range(len(self.names)):
            self.params[j] = dict(self.configured[j])
            self._push("set_params", j, params=self.params[j])
            self._push("reset_state", j)   # integrals, trajectory, current, heat, backlash gap: as at start
            theta, omega, temp = self.initial[j]
            self._push("set_state", j, theta, omega)
            self._push("clear_latches", j)
            if temp is not None or self.params[j]["thermal_r"] > 0:
                self._push("set_temperature", j, temp if temp is not None else self.params[j]["ambient"])
            self._push("set_u", j, theta * self.params[j]["gear"] if self.params[j]["law"] == LAWS["position"]
                       else theta if self.params[j]["law"] in POSITION_LAWS else 0.0)
            self._push("set_external", j, 0.0)
            self._push("set_hand", j, hand=RELEASE)
            self._push("set_enable", j, 1.0)
            self.bus_faults[j].reset()
            self.active[j] = {}
            self.overheat_restore[j] = None

    def _cmd_step(self, cmd: dict) -> dict:
        """Lock-step mode: advance n ticks, wait for them, return the state."""
        _check_args(cmd, ("n",))
        if not self.rig.loop.lockstep:
            raise CommandError("step: the rig is not in lock-step mode (set [loop] lockstep = true)")
        n = cmd.get("n", 1)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10_000_000:
            raise CommandError(f"step: n must be an integer in [1, 10000000], got {shown(n)}")
        target = self.loop.request_steps(n)
        deadline = time.monotonic() + 60.0
        while self.loop.telemetry()["tick"] < target:
            if time.monotonic() > deadline or not self.running:
                raise CommandError("step: the loop did not finish the steps in time")
            time.sleep(2e-5)
        return {"tick": target, "state": self.state()}



class _Batch:
    """`LiveRig.atomic()`: a class rather than a generator context manager, as every bus packet enters one."""

    __slots__ = ("live", "outer")

    def __init__(self, live: LiveRig):
        self.live = live

    def __enter__(self) -> None:
        live = self.live
        live._push_lock.acquire()
        self.outer = live.batch_thread
        live.batch_thread = threading.get_ident()

    def __exit__(self, *exc) -> None:
        live = self.live
        try:
            live.batch_thread = self.outer
            if self.outer is None:
                live.loop.commit()
        finally:
            live._push_lock.release()


class LiveJoint:
    """Actuator j of a running rig, as a firmware model drives it (the `hil.joint.Joint` and
    `hil.joint.GoalPort` protocols)."""

    def __init__(self, live: LiveRig, j: int):
        self.live = live
        self.j = j
        self._seq = -1          # snapshot_seq when _state was fetched
        self._state: Mapping = {}

    def read_state(self) -> Mapping:
        """The state as of the loop's latest snapshot, a read-only mapping (`RealtimeLoop.state_view`: one struct
        copy, not a 44-entry dict, as a bus packet looks at a few fields of each servo). The same object comes
        back until the loop publishes a new snapshot."""
        loop = self.live.loop
        seq = loop.snapshot_seq
        if seq != self._seq:
            self._state = loop.state_view(self.j)   # at least as new as `seq`: a newer copy only refetches sooner
            self._seq = seq
        return self._state

    def params(self) -> dict:
        return self.live.params[self.j]

    @property
    def loop(self) -> RealtimeLoop:
        return self.live.loop

    @property
    def period_s(self) -> float:
        return self.live.period_s

    @property
    def batch_thread(self) -> int | None:
        return self.live.batch_thread

    def queue_goal(self, u: float) -> None:
        self.live._push("set_u", self.j, u)

    def command(self, params: dict | None = None, goal: float | None = None, enable: bool | None = None,
                clear_latches: bool = False) -> None:
        live, j = self.live, self.j
        if params is None and enable is None and not clear_latches and goal is not None:
            live._push("set_u", j, goal)    # the drives' every tick: one command needs no batch
            return
        with live.atomic():
            if params:
                live._set_params(j, params)
            if goal is not None:
                live._push("set_u", j, goal)
            if enable is not None:
                live._push("set_enable", j, 1.0 if enable else 0.0)
            if clear_latches:
                live._push("clear_latches", j)

    def time_s(self) -> float:
        return self.live.loop.tick * self.live.period_s

    def sync(self, timeout_s: float = 0.1) -> None:
        # the loop applies queued commands at its next tick (≤ one period) or, idle in lock-step, within µs
        deadline = time.monotonic() + timeout_s
        with self.live._push_lock:
            self.live.loop.commit()   # inside a batch (a bus packet) the commands are only staged so far
        while self.live.loop.commands_pending() and time.monotonic() < deadline and self.live.running:
            time.sleep(2e-5)
