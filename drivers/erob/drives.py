"""The eRob drives of a running rig and the thread that runs their firmware at the control rate.

An eRob is reached two ways (notes/erob.md §0): CANopen on its CAN bus (`drivers/erob/canopen_bus.py`)
and, as Rhoban does, through an EtherCAT master behind the Etherban ZeroMQ server
(`drivers/erob/etherban.py`). Both talk to the same simulated drive: one `Cia402Drive` per actuator,
created by whichever opens it first, shared by both, and ticked here.

Threads: the drive model holds no lock (firmware_models/erob/cia402.py), so every access — a CAN frame,
an Etherban request, a tick — goes under `lock`. The tick thread runs `Cia402Drive.tick()` of every
drive once per `period_s` of wall time (the eRob's 1 kHz position loop; the drive takes its dt from the
simulation clock, so a paused or lock-step rig simply sees dt = 0), then the `tick_hooks` (the CANopen
time services: heartbeat, event-driven TPDOs, EMCY, delayed frames) with the monotonic time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from firmware_models.erob.cia402 import Cia402Drive
from hil.joint import Joint

__all__ = ["ErobDrives"]

log = logging.getLogger("servo-hil")


class ErobDrives:
    """The rig's eRob drives by actuator index, their lock and their tick thread.

    `start()` / `release()` are reference counted (each bus or server that uses the drives calls
    both); the thread runs while at least one user is started. A crash of the thread is kept in
    `error` and logged; the users report it (the daemon checks their `error`).
    """

    def __init__(self, period_s: float = 1e-3):
        if not period_s > 0:
            raise ValueError(f"period must be > 0 s, got {period_s}")
        self.period_s = period_s
        self.lock = threading.RLock()
        self.drives: dict[int, Cia402Drive] = {}
        self.tick_hooks: list[Callable[[float], None]] = []      # called with time.monotonic()
        self.power_hooks: list[Callable[[], None]] = []          # called after every power cycle
        self.error: BaseException | None = None
        self.ticks = 0
        self._users = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def drive(self, j: int, variant: str, node_id: int, joint: Joint) -> Cia402Drive:
        """The drive of actuator `j`, created on first use as `variant` (config/erob/<variant>.toml)
        with the object dictionary of CANopen node `node_id`."""
        with self.lock:
            d = self.drives.get(j)
            if d is None:
                d = self.drives[j] = Cia402Drive.for_variant(variant, node_id, joint)
            elif d.config.name != variant:
                raise ValueError(f"actuator {j} is already an {d.config.name} drive, not {variant}")
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
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="servo-hil-erob", daemon=True)
                self._thread.start()

    def release(self, timeout: float = 1.0) -> None:
        with self.lock:
            self._users = max(0, self._users - 1)
            if self._users or self._thread is None:
                return
            thread, self._thread = self._thread, None
            self._stop.set()
        thread.join(timeout)

    def tick_once(self, now: float | None = None) -> None:
        """One control period of every drive, then the tick hooks (the thread calls this)."""
        with self.lock:
            for d in self.drives.values():
                d.tick()
            now = time.monotonic() if now is None else now
            for hook in self.tick_hooks:
                hook(now)
            self.ticks += 1

    def _run(self) -> None:
        try:
            due = time.monotonic()
            while not self._stop.is_set():
                self.tick_once()
                due += self.period_s
                now = time.monotonic()
                if due < now - self.period_s:      # fell behind (a stall): skip, do not burst
                    due = now
                if self._stop.wait(max(0.0, due - now)):
                    return
        except BaseException as exc:   # a dead drive thread must be visible: the users report it
            self.error = exc
            log.exception("eRob drive thread stopped")
