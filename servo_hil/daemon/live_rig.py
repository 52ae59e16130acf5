"""The running rig: the kernel in its real-time loop thread, its actuators as the buses drive them, and the
host-side bookkeeping the planes read (state, status, events).

Every change goes to the loop through its command ring (`push`), alone or with others in one batch (`atomic`):
the loop applies a batch at one tick. What a command may ask is decided elsewhere (servo_hil/daemon/commands.py);
this module only carries it out.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping

import numpy as np

from drivers.wire.faults import BUS_FLAG_BITS, BusFaults
from hil.kernel import FAULT_BITS, LAWS, Kernel
from hil.loop.rt import COMMANDS, RealtimeLoop
from hil.params.actuator import ActuatorSpec
from hil.robot.rig import Robot
from servo_hil.daemon.arguments import CommandError, shown
from servo_hil.daemon.hand import RELEASE, hand_shown
from servo_hil.daemon.telemetry import LoopStats
from servo_hil.rig import Rig

log = logging.getLogger("servo-hil")
LAW_NAMES = {v: k for k, v in LAWS.items()}
POSITION_LAWS = {LAWS["position"], LAWS["dxl_pwm"], LAWS["sts_pwm"], LAWS["erob_pd"]}


def fault_names(flags: int) -> list[str]:
    """The kernel and bus faults whose bits are set in `flags` (a state sample's `fault_flags`)."""
    names = [n for n, bit in FAULT_BITS.items() if flags & bit]
    return names + [n for n, bit in BUS_FLAG_BITS.items() if flags & bit]


def holding_goal(params: dict, theta: float) -> float:
    """The goal that holds an actuator of `params` where it is (output angle `theta` [rad]) under its law: the
    motor angle for the position law, the output angle for the other position laws, no drive for the rest."""
    if params["law"] == LAWS["position"]:
        return theta * params["gear"]
    return theta if params["law"] in POSITION_LAWS else 0.0


class LiveRig:
    """The kernel running in its loop thread: lifecycle, actuators, batches of loop commands, state and status."""

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
        self.power_up_hooks: dict[int, Callable[[], None]] = {}   # actuator j's firmware powers up (`plug`)
        # error replies per command plane ("zmq", "mqtt"): refused commands and malformed or failing input
        self.command_errors: Counter[str] = Counter()
        # bus packets whose handling raised, answered as the device would and served on: per bus (status)
        self.bus_errors: dict[str, Callable[[], int]] = {}
        self.bus_wire: dict[str, Callable[[], dict]] = {}   # a bus's wire counters (DynamixelServer.wire_stats)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        # the first tick holds each actuator where it starts, as after `reset` (the kernel's own goal is 0, which
        # would drive an arm that starts in a rest pose toward its zero until a servo's firmware powers up)
        for j, (theta, _, _) in enumerate(self.initial):
            self.push("set_u", j, holding_goal(self.params[j], theta))
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

    def joint(self, j: int) -> LiveJoint:
        """Actuator j as a bus's firmware model drives it (servo_hil.wiring.live.RunningRig)."""
        return LiveJoint(self, j)

    def actuator(self, cmd: dict) -> int:
        """The index of the actuator command `cmd` names; CommandError naming the known ones otherwise."""
        name = cmd.get("actuator")
        if not isinstance(name, str) or name not in self.index:
            raise CommandError(f"{cmd['cmd']}: unknown actuator {shown(name)} (known: {', '.join(self.names)})")
        return self.index[name]

    def emit(self, event: dict) -> None:
        event.setdefault("t_wall", time.time())
        log.info("event %s", event)
        for sink in list(self.listeners):
            try:
                sink(event)
            except Exception:  # a broken sink must not stop the others
                log.exception("event sink failed")

    # ------------------------------------------------------------------ host → loop
    def push(self, kind: str, index: int = 0, a: float = 0.0, b: float = 0.0, params: dict | None = None,
             hand: dict | None = None) -> None:
        """Queue loop command `kind` (hil.loop.rt COMMANDS) for actuator `index`; staged inside `atomic()`."""
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

    def set_params(self, j: int, changes: dict) -> None:
        """Change kernel parameters of actuator j (the loop takes the whole set)."""
        self.params[j].update(changes)
        self.push("set_params", j, params=self.params[j])

    def reset(self) -> None:
        """Every actuator back to its configured parameters, initial state and goal, bus faults cleared, at one
        tick; then the reset hooks (the buses' firmware powers up again)."""
        with self.atomic():
            for j in range(len(self.names)):
                self.params[j] = dict(self.configured[j])
                self.push("set_params", j, params=self.params[j])
                self.push("reset_state", j)   # integrals, trajectory, current, heat, backlash gap: as at start
                theta, omega, temp = self.initial[j]
                self.push("set_state", j, theta, omega)
                self.push("clear_latches", j)
                if temp is not None or self.params[j]["thermal_r"] > 0:
                    self.push("set_temperature", j, temp if temp is not None else self.params[j]["ambient"])
                self.push("set_u", j, holding_goal(self.params[j], theta))
                self.push("set_external", j, 0.0)
                self.push("set_hand", j, hand=RELEASE)
                self.push("set_enable", j, 1.0)
                self.bus_faults[j].reset()
        for hook in self.reset_hooks:
            hook()

    # ------------------------------------------------------------------ views
    def now(self) -> float:
        """Simulation time [s] of the loop's last tick."""
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
        self.live.push("set_u", self.j, u)

    def command(self, params: dict | None = None, goal: float | None = None, enable: bool | None = None,
                clear_latches: bool = False) -> None:
        live, j = self.live, self.j
        if params is None and enable is None and not clear_latches and goal is not None:
            live.push("set_u", j, goal)    # the drives' every tick: one command needs no batch
            return
        with live.atomic():
            if params:
                live.set_params(j, params)
            if goal is not None:
                live.push("set_u", j, goal)
            if enable is not None:
                live.push("set_enable", j, 1.0 if enable else 0.0)
            if clear_latches:
                live.push("clear_latches", j)

    def time_s(self) -> float:
        return self.live.loop.tick * self.live.period_s

    def sync(self, timeout_s: float = 0.1) -> None:
        # the loop applies queued commands at its next tick (≤ one period) or, idle in lock-step, within µs
        deadline = time.monotonic() + timeout_s
        with self.live._push_lock:
            self.live.loop.commit()   # inside a batch (a bus packet) the commands are only staged so far
        while self.live.loop.commands_pending() and time.monotonic() < deadline and self.live.running:
            time.sleep(2e-5)
