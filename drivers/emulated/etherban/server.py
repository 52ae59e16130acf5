"""An Etherban-compatible ZeroMQ server: bam's eRob client (`bam/erob/etherban.py`, `Client`) runs unchanged
against the rig's simulated drives, one protobuf Request in, one Response out per master cycle
(docs/protocols/etherban.md: what is known of the real server, and the choices made where it is not)."""

from __future__ import annotations

import logging
import math
import time

import zmq
from google.protobuf.message import DecodeError

from drivers.emulated.etherban import etherban_pb2 as pb
from drivers.schedulers.cia402_drives import Cia402Drives
from drivers.wire.server import InputFailures, ServerThread
from firmware_models.cia402 import (
    CONTROLWORD,
    CURRENT_ACTUAL,
    ERROR_CODE,
    MODE,
    POSITION_ACTUAL,
    TARGET_POSITION,
    TARGET_TORQUE,
    TARGET_VELOCITY,
    TORQUE_DEMAND,
    VELOCITY_ACTUAL,
    VELOCITY_DEMAND,
    Cia402Drive,
    Mode,
    State,
)

__all__ = ["DrivesServerThread", "EtherbanServer"]

log = logging.getLogger("servo-hil")

CYCLIC_MODE = {pb.POSITION: Mode.CSP, pb.VELOCITY: Mode.CSV, pb.TORQUE: Mode.CST}
_SHUTDOWN, _SWITCH_ON, _ENABLE_OPERATION, _FAULT_RESET = 0x06, 0x07, 0x0F, 0x80


class DrivesServerThread(ServerThread):
    """A server thread that owns sockets and serves `devices` of `drives`: it starts the drives' tick thread
    with itself and releases it when it stops. Subclasses set `drives`, `devices` and implement `_close`
    (close the sockets)."""

    drives: Cia402Drives
    devices: list[Cia402Drive]
    _deadline: float

    @property
    def error(self) -> BaseException | None:
        """What stopped the server, or the drives' tick thread, if anything (the daemon polls this)."""
        return self._thread_error or self.drives.error

    @error.setter
    def error(self, exc: BaseException | None) -> None:
        self._thread_error = exc

    def devices_summary(self) -> str:
        """`devices 0: <name>, 1: <name>, ...` for the daemon's listing."""
        return "devices " + ", ".join(f"{i}: {d.config.name}" for i, d in enumerate(self.devices))

    def start(self) -> None:
        self.drives.start()          # the drives' 1 kHz tick thread (reference counted)
        super().start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop serving, close the sockets (the port is free on return) and release the drives, all within
        `timeout` [s]; idempotent."""
        self._deadline = time.monotonic() + timeout
        super().stop(timeout)

    def close(self) -> None:
        if self.ident is None:       # never started: nothing else uses the sockets
            self._close()
            return
        self.drives.release(max(0.0, self._deadline - time.monotonic()))

    def finish(self) -> None:
        self._close()                # the sockets belong to the serving thread

    def _close(self) -> None:
        raise NotImplementedError


class EtherbanServer(DrivesServerThread):
    """The Etherban REP server of `devices` (device i = devices[i], as EtherCAT slave positions), bound to
    `endpoint` at construction (a port in use raises zmq.ZMQError naming it). See the module docstring."""

    def __init__(self, drives: Cia402Drives, devices: list[Cia402Drive], endpoint: str, name: str = "etherban",
                 context: zmq.Context | None = None, fifo_priority: int = 0):
        self.drives = drives
        self.devices = list(devices)
        self._modes: list[Mode | None] = [None] * len(self.devices)   # last cyclic mode ordered per device
        self._fault_reported: list[int] = []               # devices the last Response reported in fault
        self._logged: set[tuple] = set()
        self.failures = InputFailures(f"etherban {name}: request")
        self._own_context = context is None
        self._context = zmq.Context() if context is None else context
        self._sock = self._context.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        try:
            self._sock.bind(endpoint)
        except zmq.ZMQError as exc:
            self._close()
            raise zmq.ZMQError(exc.errno, f"etherban {name}: cannot bind {endpoint}: {exc}") from None
        super().__init__(name, fifo_priority)    # SCHED_FIFO: a reply must not wait behind other processes
        self.path = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.summary = self.devices_summary()

    # ------------------------------------------------------------------ lifecycle
    def _close(self) -> None:
        self._sock.close(0)
        if self._own_context:
            self._context.term()

    def serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self.stop_fd, zmq.POLLIN)     # stop() wakes the wait at once
        while True:
            ready = dict(poller.poll())
            if self.stop_fd in ready:
                return
            frames = self._sock.recv_multipart(zmq.NOBLOCK)
            self._sock.send(self.handle(frames))
            self.drives.sync_tick(time.monotonic())   # the cycle's tick, once its answer is out

    @property
    def errors_isolated(self) -> int:
        """Requests whose handling raised, answered with an empty Response (module docstring), for `status`."""
        return self.failures.count

    # ------------------------------------------------------------------ one request
    def handle(self, frames: list[bytes]) -> bytes:
        """The serialized Response to one request's frames (the module docstring says what it does); never raises."""
        try:
            return self._handle(frames)
        except Exception as exc:
            self.failures.record(exc, "request", b"".join(frames), "answered with an empty Response")
            return pb.Response().SerializeToString()

    def _handle(self, frames: list[bytes]) -> bytes:
        request = pb.Request()
        try:
            if len(frames) != 1:
                raise DecodeError(f"{len(frames)} frames")
            request.ParseFromString(frames[0])
        except DecodeError as exc:
            self._log_once(("malformed",), "etherban %s: a request is not an etherban Request (%s); answered "
                           "with an empty Response (logged once)", self.name, exc)
            return pb.Response().SerializeToString()
        response = pb.Response()
        with self.drives.lock:
            self._recover()
            ordered = set()
            for order in request.orders:
                if self._apply(order):
                    ordered.add(order.device)
            for i, drive in enumerate(self.devices):
                mode = self._modes[i]
                if i not in ordered and mode is not None and drive.state != State.OPERATION_ENABLED:
                    self._enable(drive, mode)
            reported, self._fault_reported = self._fault_reported, []
            for i, drive in enumerate(self.devices):
                self._status(response.statuses.add(), i, drive)
                if drive.has_fault:
                    self._fault_reported.append(i)
                    if i not in reported:
                        log.warning("etherban %s: device %d in fault, error code 0x%04X", self.name, i,
                                    drive.read(*ERROR_CODE))
            response.has_fault = bool(self._fault_reported)
        return response.SerializeToString()

    def _apply(self, order: pb.Order) -> bool:
        """Bring the drive to its cyclic mode and write the target; False if the order was ignored."""
        i = order.device
        if not 0 <= i < len(self.devices):
            self._log_once(("device", i), "etherban %s: order for device %d ignored (devices 0..%d)",
                           self.name, i, len(self.devices) - 1)
            return False
        if not math.isfinite(order.target):
            self._log_once(("target", i), "etherban %s: device %d: non-finite target %r ignored",
                           self.name, i, order.target)
            return False
        drive, mode = self.devices[i], CYCLIC_MODE.get(order.operation_mode)
        if mode is None:
            self._log_once(("op", order.operation_mode), "etherban %s: unknown operation mode %d ignored",
                           self.name, order.operation_mode)
            return False
        self._modes[i] = mode
        if drive.state != State.OPERATION_ENABLED:
            if not self._enable(drive, mode):
                return True                   # in fault or not initialised yet: the next order's target counts
        elif drive.mode != mode and not self._switch(drive, mode):
            return True
        u = drive.units
        if mode == Mode.CSP:
            drive.write(*TARGET_POSITION, u.position_counts(order.target))
        elif mode == Mode.CSV:
            drive.write(*TARGET_VELOCITY, u.velocity_counts(order.target))
        else:
            nm = order.target * drive.output_kt_nm_per_a
            drive.write(*TARGET_TORQUE, u.torque_permille(nm))
        return True

    def _switch(self, drive: Cia402Drive, mode: Mode) -> bool:
        """0x6060 = mode (for CSP after 0x607A = the actual position, so the drive holds where it is)."""
        if mode == Mode.CSP:
            drive.refresh()
            drive.write(*TARGET_POSITION, drive.read(*POSITION_ACTUAL))
        abort = drive.write(*MODE, int(mode))
        if abort is not None:
            self._log_once(("mode", id(drive), mode), "etherban %s: drive %s refuses mode %s (SDO abort 0x%08X)",
                           self.name, drive.config.name, mode.name, abort)
            return False
        return True

    def _enable(self, drive: Cia402Drive, mode: Mode) -> bool:
        """Mode, then shutdown / switch on / enable operation; True once in Operation enabled."""
        if drive.has_fault or drive.state == State.NOT_READY_TO_SWITCH_ON:
            return False
        if not self._switch(drive, mode):
            return False
        for cw in (_SHUTDOWN, _SWITCH_ON, _ENABLE_OPERATION):
            drive.write(*CONTROLWORD, cw)
        return drive.state == State.OPERATION_ENABLED

    def _recover(self) -> None:
        """Fault reset of the drives the last Response reported in fault (re-enabled by the caller)."""
        for i in self._fault_reported:
            drive = self.devices[i]
            if drive.state != State.FAULT:
                continue                      # still reacting (a stop ramp), or already reset
            drive.write(*CONTROLWORD, 0x00)   # bit 7 low, so that the next write is a rising edge
            drive.write(*CONTROLWORD, _FAULT_RESET)
            if drive.state == State.FAULT:
                self._log_once(("reset", i), "etherban %s: device %d: fault reset refused (the fault "
                               "condition persists)", self.name, i)
            else:
                self._logged.discard(("reset", i))
                log.info("etherban %s: device %d: fault reset", self.name, i)

    def _status(self, status: pb.Status, i: int, drive: Cia402Drive) -> None:
        drive.refresh()
        u, kt = drive.units, drive.output_kt_nm_per_a
        status.device = i
        status.target_position = u.position_rad(drive.read(*TARGET_POSITION))
        status.velocity_demand = u.velocity_rad(drive.read(*VELOCITY_DEMAND))
        status.torque_demand = u.torque_nm(drive.read(*TORQUE_DEMAND)) / kt if kt > 0 else 0.0
        status.present_position = u.position_rad(drive.read(*POSITION_ACTUAL))
        status.present_velocity = u.velocity_rad(drive.read(*VELOCITY_ACTUAL))
        status.present_current = u.current_a(drive.read(*CURRENT_ACTUAL))

    def _log_once(self, key: tuple, msg: str, *args) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning(msg, *args)
