"""Proxy mirror of an Etherban server: bam's unchanged eRob client talks to the real server through us, the same
requests drive the rig's drives as twins, and both sides' states go to the side-by-side log
(docs/protocols/etherban.md, "Proxy mirror")."""

from __future__ import annotations

import logging
import time

import zmq
from google.protobuf.message import DecodeError

from drivers.emulated.etherban import etherban_pb2 as pb
from drivers.emulated.etherban.server import DrivesServerThread, EtherbanServer
from drivers.hosts.side_by_side import SideBySideLog, record_pair
from drivers.schedulers.cia402_drives import Cia402Drives
from firmware_models.cia402 import MODE_DISPLAY, Cia402Drive, State

__all__ = ["EtherbanMirror"]

log = logging.getLogger("servo-hil")


def _fields(status: pb.Status) -> dict:
    """A Status as the recorder's state fields (SI, the Etherban units)."""
    return {"position": status.present_position, "velocity": status.present_velocity,
            "current": status.present_current, "goal": status.target_position}


class EtherbanMirror(DrivesServerThread):
    """Serves the Etherban endpoint `bind`, forwards to the real server `real`, drives `devices` as twins.
    `joints`: device index → joint name. A `BusServer`."""

    def __init__(self, drives: Cia402Drives, devices: list[Cia402Drive], bind: str, real: str, joints: list[str],
                 record: SideBySideLog | None = None, name: str = "etherban", timeout_s: float = 1.0,
                 fifo_priority: int = 0):
        self.drives = drives
        self.devices = list(devices)
        self.joints = list(joints)
        self.record = record
        self.real_label = real
        self.timeout_s = timeout_s
        self.forwarded = {"to_real": 0, "to_client": 0, "unanswered": 0}
        self._context = zmq.Context()
        # the twins answer through the very code of the rig's own server, on a socket nobody connects to
        self.twin = EtherbanServer(drives, devices, f"inproc://servo-hil-twin-{name}-{id(self)}", name=name,
                                   context=self._context)
        self._front = self._context.socket(zmq.ROUTER)
        self._front.setsockopt(zmq.LINGER, 0)
        self._back = self._context.socket(zmq.REQ)
        self._back.setsockopt(zmq.LINGER, 0)
        self._back.setsockopt(zmq.REQ_RELAXED, 1)
        self._back.setsockopt(zmq.REQ_CORRELATE, 1)
        try:
            self._front.bind(bind)
            self._back.connect(real)
        except zmq.ZMQError as exc:
            self._close()
            raise zmq.ZMQError(exc.errno, f"etherban mirror {name}: {bind} / {real}: {exc}") from None
        super().__init__(name, fifo_priority)
        self.path = self._front.getsockopt_string(zmq.LAST_ENDPOINT)
        self.summary = self.devices_summary() + f"; mirroring {real}"

    @property
    def errors_isolated(self) -> int:
        """Requests whose handling by the twins raised (`EtherbanServer.handle`), for `status`."""
        return self.twin.errors_isolated

    def close(self) -> None:
        started = self.ident is not None
        super().close()
        if started and self.record is not None:
            self.record.close()

    def _close(self) -> None:
        self._front.close(0)
        self._back.close(0)
        self.twin.stop()               # never started: closes its socket
        self._context.term()

    # ------------------------------------------------------------------ serving
    def serve(self) -> None:
        front, back = zmq.Poller(), zmq.Poller()
        front.register(self._front, zmq.POLLIN)
        front.register(self.stop_fd, zmq.POLLIN)
        back.register(self._back, zmq.POLLIN)
        back.register(self.stop_fd, zmq.POLLIN)
        while True:
            if self.stop_fd in dict(front.poll()):
                return
            envelope = self._front.recv_multipart(zmq.NOBLOCK)
            split = envelope.index(b"") + 1 if b"" in envelope else len(envelope)
            route, frames = envelope[:split], envelope[split:]
            self._back.send_multipart(frames)          # first the wire, unchanged; then the twins
            self.forwarded["to_real"] += 1
            t_ns = time.time_ns()
            sim = self.twin.handle(frames)
            ready = dict(back.poll(self.timeout_s * 1e3))
            if self.stop_fd in ready:
                return
            if self._back not in ready:
                self.forwarded["unanswered"] += 1
                if self.forwarded["unanswered"] == 1:
                    log.warning("etherban mirror %s: %s did not answer within %.1f s; the request is left "
                                "unanswered, as the real server left it (counted, logged once)", self.name,
                                self.real_label, self.timeout_s)
                continue
            reply = self._back.recv_multipart()
            self._front.send_multipart(route + reply)  # the real reply, as it came
            self.forwarded["to_client"] += 1
            self.drives.sync_tick(time.monotonic())    # the twins' cycle, as the rig's own server ticks them
            if self.record is not None:
                self._log(frames, reply, sim, t_ns)

    def _log(self, frames: list[bytes], reply: list[bytes], sim_reply: bytes, t_ns: int) -> None:
        request, real, sim = pb.Request(), pb.Response(), pb.Response()
        try:
            request.ParseFromString(frames[0] if len(frames) == 1 else b"")
            real.ParseFromString(reply[0] if len(reply) == 1 else b"")
            sim.ParseFromString(sim_reply)
        except DecodeError:
            return                     # not the protocol: forwarded, nothing to compare
        for order in request.orders:
            if 0 <= order.device < len(self.joints):
                self.record.command(self.joints[order.device], t_ns, {
                    "service": "etherban", "operation_mode": pb.OperationMode.Name(order.operation_mode)
                    if order.operation_mode in pb.OperationMode.values() else order.operation_mode,
                    "target": order.target})
        twin = {s.device: s for s in sim.statuses}
        for status in real.statuses:
            if not 0 <= status.device < len(self.joints) or status.device not in twin:
                continue
            drive = self.devices[status.device]
            with self.drives.lock:
                state = {"enable": drive.state == State.OPERATION_ENABLED, "mode": drive.read(*MODE_DISPLAY)}
            record_pair(self.record, self.joints[status.device], t_ns, _fields(status),
                        _fields(twin[status.device]) | state)
