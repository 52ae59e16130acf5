"""ZeroMQ interfaces: joint state PUB (PlotJuggler framing) and the msgpack command socket.

State: one message per actuator per published tick, multipart
`[b"<rig>/<joint>", msgpack(map), b"<timestamp seconds>"]`, the framing PlotJuggler's ZMQ plugin
reads (topic → series prefix, third frame → time stamp). Payload keys (SI units):

| key | unit | meaning |
|---|---|---|
| seq | – | publish number, +1 per published tick; a gap means messages were lost |
| t | s | simulation time k·dt |
| position, position_measured | rad | true output angle; what the encoder reports |
| velocity | rad/s | output velocity |
| torque | N·m | actuator torque at the output |
| current | A | armature current |
| voltage | V | terminal voltage |
| temperature | °C | winding temperature (absent without a thermal model) |
| goal | law unit | the command u: output rad (dxl_pwm, erob_pd), gear·rad (dcmotor position), V, A, N·m |
| enable | 0/1 | torque enable |
| external_torque | N·m | co-simulation torque applied at the output |
| mode | – | firmware law code (0 voltage, 1 position, 2 velocity, 3 dxl_pwm, 4 erob_pd, 5 current, 6 torque, 7 dxl) |
| fault_flags | – | bits: 1 open circuit, 2 supply, 4 encoder noise, 8 derated, 16 overheat, 32 encoder stuck, |
|  |  | 64 encoder slip, 128 overload, 256 bus drop, 512 bus corrupt, 1024 bus delay, 2048 wrong baud |

The timestamp frame is wall-clock time (epoch seconds) of the tick's deadline in real-time mode and
the simulation time in lock-step mode.

Commands: REP socket, request = msgpack map `{"cmd": …, …}`, reply = `{"ok": true, …result}` or
`{"ok": false, "error": "…"}` (see LiveRig for the commands).
"""

from __future__ import annotations

import logging
import os
import threading
import time

import msgpack
import numpy as np
import zmq

from hil.daemon.arguments import CommandError
from hil.daemon.live_rig import LiveRig, fault_names
from hil.kernel import FAULT_BITS
from hil.loop.rt import bind_libzmq, realtime_thread

log = logging.getLogger("servo-hil")


def loaded_libzmq() -> str:
    """Path of the libzmq pyzmq loaded into this process (its bundled copy or the system's)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/libzmq" in path and ".so" in path:
                return path
    raise OSError("libzmq is not loaded (pyzmq's backend should have loaded it)")


bind_libzmq(loaded_libzmq())


def fifo_allowed(priority: int) -> bool:
    """Whether a thread of this process may switch itself to SCHED_FIFO at `priority` (asked by a throw-away
    thread through `realtime_thread`: the caller's own scheduling is left alone)."""
    modes = []
    t = threading.Thread(target=lambda: modes.append(realtime_thread(priority)), name="servo-hil-fifo-probe")
    t.start()
    t.join()
    return modes == ["SCHED_FIFO"]


def realtime_context(priority: int) -> zmq.Context:
    """A ZeroMQ context whose I/O threads run SCHED_FIFO at `priority` (1..99) when the process may, else a
    plain one. Each state message crosses the publisher's I/O thread: at normal priority it waits behind
    every busy process for its wake-up, as the loop would without SCHED_FIFO. libzmq aborts the process when
    it cannot apply the policy (thread.cpp, posix_assert), so it is asked only after a probe succeeded."""
    context = zmq.Context()
    if priority > 0 and fifo_allowed(priority):
        context.set(zmq.THREAD_SCHED_POLICY, os.SCHED_FIFO)
        context.set(zmq.THREAD_PRIORITY, priority)
    return context


class StatePublisher(threading.Thread):
    """Drains the loop's sample ring and publishes it; raises fault events on flag changes."""

    def __init__(self, live: LiveRig, endpoint: str, context: zmq.Context, fifo_priority: int = 0):
        super().__init__(name="servo-hil-pub", daemon=True)
        self.live = live
        self.fifo_priority = fifo_priority   # SCHED_FIFO priority of this thread (0 = do not try)
        self.rt_mode: str | None = None
        self.sock = context.socket(zmq.PUB)
        self.sock.setsockopt(zmq.SNDHWM, 200_000)
        self.sock.setsockopt(zmq.LINGER, 500)
        self.sock.bind(endpoint)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.topics = [f"{live.rig.name}/{n}".encode() for n in live.names]
        self.flags = np.zeros(len(live.names), dtype=np.int64)   # fault flags last published (C updates)
        self._reported = [0] * len(live.names)                    # … and last reported as events
        self.published = 0
        self._halt = threading.Event()
        # epoch time = monotonic time + this offset [ns] (both clocks read once, back to back)
        self._epoch_minus_monotonic_ns = time.time_ns() - time.monotonic_ns()

    def stop(self) -> None:
        self._halt.set()

    def publish_pending(self, wait_s: float = 0.0) -> int:
        """Publish what the loop has produced, then (for up to `wait_s` [s]) each tick's samples as they come,
        until a fault flag changes (its events are raised here); the messages sent."""
        live = self.live
        # encoded, sent and waited for by C code without the GIL (hil/loop/rt.pyx publish): Python here only
        # when a fault flag changes or wait_s has passed
        sent, changes = live.loop.publish(self.sock.underlying, self.topics, live.bus_flag_bits,
                                          self._epoch_minus_monotonic_ns, live.rig.loop.lockstep, self.flags, wait_s)
        for j, flags, t, temp in changes:
            self._flags_changed(j, flags, t, None if temp != temp else temp)
        self.published += sent
        return sent

    def _flags_changed(self, j: int, flags: int, t: float, temperature: float | None) -> None:
        live = self.live
        before = self._reported[j]
        raised, cleared = flags & ~before, before & ~flags
        self._reported[j] = flags
        for kind, bits in (("fault_raised", raised), ("fault_cleared", cleared)):
            if bits:
                live.emit({"type": kind, "actuator": live.names[j], "faults": fault_names(bits), "t": t})
        for reason in ("overheat", "overload"):
            if raised & FAULT_BITS[reason] & live.params[j]["shutdown_mask"]:
                live.emit({"type": "shutdown", "actuator": live.names[j], "reason": reason,
                           "temperature": temperature, "t": t})

    def run(self) -> None:
        # woken by the loop every published tick: at normal priority that wake-up waits behind other processes
        self.rt_mode = realtime_thread(self.fifo_priority)
        while not self._halt.is_set():
            if self.live.stopping.is_set():
                # loop.publish returns at once from now on: spinning on it at SCHED_FIFO starved the loop's
                # own exit and the main thread (stops of 2-7 s on a busy CPU); wait for stop() instead
                self._halt.wait()
                break
            self.publish_pending(wait_s=0.1)
        self.publish_pending()  # flush what the loop produced before it stopped
        self.sock.close()


class CommandServer(threading.Thread):
    """REP socket answering msgpack commands with LiveRig.execute."""

    def __init__(self, live: LiveRig, endpoint: str, context: zmq.Context):
        super().__init__(name="servo-hil-cmd", daemon=True)
        self.live = live
        self.sock = context.socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def handle(self, raw: bytes) -> dict:
        """The reply to one raw request; never raises (a bad request must not stop the server)."""
        try:
            cmd = msgpack.unpackb(raw, raw=False, strict_map_key=True)
        except Exception as exc:  # any malformed request gets an error reply, never a crash
            return {"ok": False, "error": f"request is not msgpack: {exc}"}
        try:
            result = self.live.execute(cmd)
        except CommandError as exc:
            tag = {"id": cmd["id"]} if isinstance(cmd, dict) and "id" in cmd else {}
            return {"ok": False, "error": str(exc)} | tag
        return {"ok": True, **result} | ({"id": cmd["id"]} if "id" in cmd else {})

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self._halt.is_set():
            if not poller.poll(100):
                continue
            raw = self.sock.recv()
            reply = self.handle(raw)
            try:
                self.sock.send(msgpack.packb(reply, default=str))
            except Exception as exc:
                log.exception("command reply failed")
                self.sock.send(msgpack.packb({"ok": False, "error": f"reply failed: {exc}"}))
        self.sock.close()


def request(endpoint: str, cmd: dict, timeout_s: float = 2.0, context: zmq.Context | None = None) -> dict:
    """Send one command to a running daemon and return its reply; TimeoutError if none comes."""
    ctx = context or zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
    sock.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
    try:
        sock.connect(endpoint)
        sock.send(msgpack.packb(cmd))
        try:
            return msgpack.unpackb(sock.recv(), raw=False, strict_map_key=False)
        except zmq.Again:
            raise TimeoutError(f"no reply from {endpoint} within {timeout_s} s (is the daemon running?)") from None
    finally:
        sock.close()
