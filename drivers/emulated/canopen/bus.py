"""A CAN bus of CANopen nodes behind an SLCAN adapter that the controller opens on a pty: frames in, the nodes'
answers out at the wire's pace, the drives ticked at each SYNC, and bus faults per node (docs/protocols/canopen.md,
"The bus")."""

from __future__ import annotations

import logging
import time

from drivers.emulated.canopen.node import CanopenNode
from drivers.emulated.slcan.adapter import CanFrame, SlcanAdapter, frame_bits
from drivers.schedulers.cia402_drives import Cia402Drives
from drivers.wire.faults import BusFaults
from drivers.wire.ports import PtyPort, SerialDevicePort
from firmware_models.cia402 import Cia402Drive

__all__ = ["CanopenBus"]

log = logging.getLogger("servo-hil")

_ERROR_FRAME_BITS = 20      # error flag (6..12) + delimiter (8) + intermission (3), rounded up


class CanopenBus:
    """The `nodes` ((drive, node ID, bus faults)) on one CAN bus at `bitrate`, reached through an
    SLCAN adapter on `port` whose thread runs at SCHED_FIFO `fifo_priority` if allowed (0: not tried).
    `start()` powers the nodes up (boot-up frames) and starts the adapter. A `BusServer`."""

    def __init__(self, drives: Cia402Drives, nodes: list[tuple[Cia402Drive, int, BusFaults]],
                 port: PtyPort | SerialDevicePort, bitrate: int = 1_000_000, name: str = "can",
                 fifo_priority: int = 0):
        self.name = name
        self.drives = drives
        self.bitrate = bitrate
        self.adapter = SlcanAdapter(port, self._on_frame, name, bitrate=bitrate, fifo_priority=fifo_priority)
        self.nodes: list[CanopenNode] = []
        self.faults: list[BusFaults] = []
        self._delayed: list[tuple[float, CanFrame]] = []    # (due, frame) held by the delay fault
        self._answering: float | None = None    # end [s, monotonic] of the frame the nodes are handling
        for drive, node_id, faults in nodes:
            self.nodes.append(CanopenNode(drive, node_id, self._sender(faults)))
            self.faults.append(faults)
        self._started = False
        self._ticks = False             # this bus's thread runs the drives' periodic ticks

    # ------------------------------------------------------------------ lifecycle
    @property
    def path(self) -> str:
        return self.adapter.path

    @property
    def summary(self) -> str:
        ids = ", ".join(f"{n.id}: {n.drive.config.name}" for n in self.nodes)
        return f"nodes {ids}; SLCAN, {self.bitrate} bit/s"

    @property
    def error(self) -> BaseException | None:
        return self.adapter.error or self.drives.error

    @property
    def errors_isolated(self) -> int:
        """Frames and lines whose handling raised, answered as the adapter and nodes could (SlcanAdapter)."""
        return self.adapter.errors_isolated

    def start(self) -> None:
        with self.drives.lock:
            now = time.monotonic()
            for n in self.nodes:
                n.boot(now)       # the host's channel is not open yet: the boot-up frames are lost, as on a bus
            self.drives.tick_hooks.append(self._poll)
            self.drives.power_hooks.append(self._power_up)
        self._ticks = self.drives.take_ticks(self, timeout=1.0)
        self.adapter.timer = self._timer
        self.adapter.start()
        self.drives.start()
        self._started = True

    def stop(self, timeout: float = 1.0) -> None:
        if not self._started:
            self.adapter.stop(timeout)
            return
        self._started = False
        with self.drives.lock:
            self.drives.tick_hooks.remove(self._poll)
            self.drives.power_hooks.remove(self._power_up)
        self.adapter.stop(timeout)
        if self._ticks:
            self.drives.give_back_ticks(self, timeout)
        self.drives.release(timeout)

    # ------------------------------------------------------------------ frames
    def _heard(self) -> bool:
        """The host's adapter runs at the bus's bit rate (else both sides see only errors)."""
        return self.adapter.bitrate == self.bitrate

    def _on_frame(self, frame: CanFrame, t: float) -> None:
        if not self._heard():
            return
        synced = False
        with self.drives.lock:
            self._answering = t     # the nodes' answers are ready when the frame ended (see _sender)
            try:
                for node, faults in zip(self.nodes, self.faults, strict=True):
                    if not faults.deaf:
                        node.handle(frame, t)
                        synced = synced or node.is_sync(frame)
            finally:
                self._answering = None
        if synced:
            self.drives.sync_tick(t)

    def _timer(self, now: float) -> float | None:
        """The drives' periodic ticks, in the adapter thread, if this bus runs them."""
        if not self._ticks:
            return None
        clock = self.drives.clock
        if clock.due(now) is None:
            self.drives.tick_once(now)
            now = time.monotonic()
        due = clock.due(now)
        return now if due is None else due

    def _sender(self, faults: BusFaults):
        def send(frame: CanFrame) -> None:
            if faults.deaf or not self._heard() or (faults.drop and faults.rng.random() < faults.drop):
                return
            lost = 0
            if faults.corrupt and faults.rng.random() < faults.corrupt:
                lost = frame_bits(frame) + _ERROR_FRAME_BITS
            if faults.delay_s > 0:
                self._delayed.append((time.monotonic() + faults.delay_s, frame))
                return
            # an answer (a TPDO at a SYNC, an SDO reply) is ready at the end of the frame it answers: the
            # node's firmware answers at once, and our time computing it does not delay its bits on the wire
            self.adapter.send(frame, lost, ready=self._answering)
        return send

    def _poll(self, now: float) -> None:
        """Drive-tick hook (under the lock): delayed frames that are due, then every node's time services."""
        if self._delayed:
            due = [f for t, f in self._delayed if t <= now]
            self._delayed = [(t, f) for t, f in self._delayed if t > now]
            for frame in due:
                self.adapter.send(frame)
        for node in self.nodes:
            node.poll(now)

    def _power_up(self) -> None:
        now = time.monotonic()
        for node in self.nodes:
            node.boot(now)
