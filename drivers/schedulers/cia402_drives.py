"""The CiA 402 drives of a running rig and the thread that runs their firmware at the control rate: every bus or
server that reaches a drive (a CANopen node, an Etherban device) shares it here, under one lock, and the drives tick
once per master cycle or else once per period (docs/protocols/cia402.md, "Scheduling")."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from drivers.wire.server import ServerThread
from firmware_models.cia402 import Cia402Drive

__all__ = ["Cia402Drives"]

class Cia402Drives:
    """The rig's CiA 402 drives by actuator index, their lock and their tick thread.

    `start()` / `release()` are reference counted (each bus or server that uses the drives calls
    both); the thread (a `ServerThread`) runs while at least one user is started. A crash of
    the thread is kept in `error` and logged; the users report it (the daemon checks their `error`).
    """

    def __init__(self, period_s: float = 1e-3, fifo_priority: int = 0):
        if not period_s > 0:
            raise ValueError(f"period must be > 0 s, got {period_s}")
        self.period_s = period_s
        self.fifo_priority = fifo_priority      # our thread's SCHED_FIFO priority if allowed (0: not tried)
        self.lock = threading.RLock()
        self.drives: dict[int, Cia402Drive] = {}
        self.tick_hooks: list[Callable[[float], None]] = []      # called with time.monotonic()
        self.power_hooks: list[Callable[[], None]] = []          # called after every power cycle
        self._error: BaseException | None = None    # what ended a tick thread that is gone
        self.ticks = 0
        self._users = 0
        self._ticker: object | None = None       # the bus whose thread runs the periodic ticks, if any
        self.clock = TickClock(period_s)
        self._thread: ServerThread | None = None

    @property
    def error(self) -> BaseException | None:
        """What ended the tick thread, if anything (its users report it)."""
        thread = self._thread
        return self._error or (thread.error if thread is not None else None)

    def drive(self, j: int, name: str, create: Callable[[], Cia402Drive]) -> Cia402Drive:
        """The drive of actuator `j`, made by `create()` on first use (a drive of product `name`); ValueError if
        actuator `j` already has a drive of another product."""
        with self.lock:
            d = self.drives.get(j)
            if d is None:
                d = self.drives[j] = create()
            if d.config.name != name:
                raise ValueError(f"actuator {j} is already a {d.config.name} drive, not {name}")
            return d

    def power_cycle(self) -> None:
        """Every drive powers up again (objects to their defaults, torque off), then the power hooks
        run (CANopen nodes send their boot-up)."""
        with self.lock:
            for d in self.drives.values():
                d.reset()
            for hook in list(self.power_hooks):
                hook()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        with self.lock:
            self._users += 1
        self._own_thread()

    def release(self, timeout: float = 1.0) -> None:
        with self.lock:
            self._users = max(0, self._users - 1)
        self._own_thread(timeout)

    def take_ticks(self, owner: object, timeout: float = 1.0) -> bool:
        """`owner` (a bus) runs the periodic ticks (`clock`) from now on, in its own thread; False if another
        owner already does. Our thread stops meanwhile."""
        with self.lock:
            if self._ticker is not None:
                return False
            self._ticker = owner
        self._own_thread(timeout)
        return True

    def give_back_ticks(self, owner: object, timeout: float = 1.0) -> None:
        """`owner` stops ticking; our thread takes over while the drives have users."""
        with self.lock:
            if self._ticker is owner:
                self._ticker = None
        self._own_thread(timeout)

    def _own_thread(self, timeout: float = 1.0) -> None:
        """Run our tick thread exactly while the drives have users and no bus ticks them."""
        with self.lock:
            wanted = self._users > 0 and self._ticker is None
            if wanted and self._thread is None:
                # as the bus threads that wait for our lock
                self._thread = ServerThread("servo-hil-cia402", self.fifo_priority, target=self._run)
                self._thread.start()
                return
            if wanted or self._thread is None:
                return
            thread, self._thread = self._thread, None
            self._error = self._error or thread.error
        thread.stop(timeout)

    def tick_once(self, now: float | None = None, synced: bool = False) -> None:
        """One control period of every drive, then the tick hooks; `synced`: at a master's cycle."""
        with self.lock:
            for d in self.drives.values():
                d.tick()
            now = time.monotonic() if now is None else now
            for hook in self.tick_hooks:
                hook(now)
            self.ticks += 1
            self.clock.ticked(now, synced)

    def sync_tick(self, now: float) -> None:
        """A master's cycle (SYNC, Etherban request) at `now` has been answered: its tick, unless the
        last tick is less than half a period old (cycles faster than the position loop)."""
        with self.lock:
            if self.clock.sync_may_tick(now):
                self.tick_once(now, synced=True)
            else:          # the period's tick just ran for this cycle: from now on the cycles set the pace
                self.clock.follow(now)

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            due = self.clock.due(time.monotonic())
            if due is None:
                self.tick_once()
            elif stop.wait(due - time.monotonic()):
                return


class TickClock:
    """When the drives tick: once per `period_s` of wall time on absolute deadlines (a tick that falls a
    whole period behind, a stall, skips the missed ones rather than bursting; an early one, e.g. by hand,
    does not run the schedule ahead). A tick at a master's cycle (`synced`) moves the next one to half a
    period after the cycle's next expected one, so that a 1 kHz master ticks the drives once per cycle and
    the period resumes by itself when the cycles stop; a cycle within half a period of the last tick does
    not tick again."""

    def __init__(self, period_s: float, now: float | None = None):
        self.period_s = period_s
        self._next = time.monotonic() if now is None else now     # the first tick is due at once
        self._last = -math.inf

    def due(self, now: float) -> float | None:
        """None if a tick is due now, else when the next one is [s, time.monotonic()]."""
        return None if now >= self._next else self._next

    def sync_may_tick(self, now: float) -> bool:
        return now - self._last >= 0.5 * self.period_s

    def follow(self, now: float) -> None:
        """A master's cycle at `now` found its tick already done by the period: the period's next tick waits
        until half a period after the cycle's next expected one, so that cycles in phase just after the period's
        ticks hand the ticking to the master instead of being refused every time."""
        self._next = max(self._next, now + 1.5 * self.period_s)

    def ticked(self, now: float, synced: bool = False) -> None:
        self._last = now
        if synced:
            self._next = now + 1.5 * self.period_s
            return
        nxt = self._next + self.period_s
        # fell behind (a stall): skip, do not burst; ahead (ticked early): not more than a period ahead
        self._next = now if nxt < now - self.period_s else min(nxt, now + self.period_s)
