"""Active mirror for eRobs (`servo-hil record --protocol etherban|canopen`): drive one eRob through bam's
excitation trajectories with bam's host-side PD and record bam's raw JSON logs (eRob flavour) plus the processed
log (5 ms grid) that `replay`, `report` and bam's fitting read.

As `bam/erob/record.py` does (notes/bam.md §2.3, §5): every 1 ms cycle the host computes
amps = kp·(q* − q) + damping·√kp·(0 − q̇), clipped to ±12 A (the target velocity is 0, as bam's model assumes),
from the last state, and sends it as a torque/current order; torque off is 0 A, not a disconnection. Before each
run it waits (at most 3 s, at 0 A) for the joint to be still, then brings it to the trajectory's start with the
same PD on a 3 s cubic (choice: bam uses the server's POSITION mode there; the PD is one path for both
transports). Raw entries, one per cycle: timestamp [s], position [rad, wrapped, minus `offset`], speed [rad/s],
goal_position, torque_enable, torque_demand [A], control = present current [A]. Header: mass, length,
arm_mass, kp [A/rad], damping, motor, trajectory.

Two transports, one `Link` each: an Etherban server (ZeroMQ REQ, TORQUE orders in amps) and CANopen with
python-canopen over any python-can bus (CST at 1 kHz: RPDO + SYNC, state back in two TPDOs).
"""

from __future__ import annotations

import math
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hil.bam_logs import record_sweep
from hil.excitation import DURATION_S, TRAJECTORIES
from hil.params.config_file import ConfigError

__all__ = ["BAM_DAMPING", "CanopenLink", "EtherbanLink", "Link", "Sample", "open_link", "pd_amps", "record"]

MAX_AMPS = 12.0               # bam's clip (notes/bam.md §2.3)
BAM_DAMPING = {"erob80_100": 2.0, "erob80_50": 1.0}   # bam's ErobActuator damping per motor (notes/bam.md §2.3)
ETHERBAN_ENDPOINT = "tcp://127.0.0.1:7332"            # bam's Client("localhost")
PERIOD_S = 1e-3               # bam's Etherban client cycle
_GOTO_S = 3.0                 # bam's goto_safe: a 3 s cubic to the start pose
_STILL_S, _STILL_STD = 3.0, 1e-5   # bam waits for std(last 100 positions) < 1e-5 rad; we wait at most 3 s
_ALREADY_THERE = 0.01         # [rad] no start move when this close


@dataclass(frozen=True)
class Sample:
    """The drive's state after one cycle, in SI: position [rad], velocity [rad/s], torque demand and current [A]."""

    position: float
    velocity: float
    torque_demand: float
    current: float


class Link(Protocol):
    def exchange(self, amps: float) -> Sample:
        """Order `amps` [A] as the current set-point and return the drive's state of this cycle."""

    def close(self) -> None: ...


def pd_amps(kp: float, damping: float, goal: float, position: float, velocity: float) -> float:
    """bam's host PD (`Client.position_control`): kp·(goal − q) + damping·√kp·(0 − q̇), clipped ±12 A."""
    amps = kp * (goal - position) + damping * math.sqrt(kp) * (0.0 - velocity)
    return min(max(amps, -MAX_AMPS), MAX_AMPS)


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


# ------------------------------------------------------------------------------------------ transports
class EtherbanLink:
    """Device `device` of the Etherban server at `endpoint` (bam's client: ZeroMQ REQ, protobuf)."""

    def __init__(self, endpoint: str, device: int = 0, timeout_s: float = 1.0):
        import zmq

        from drivers.erob import etherban_pb2

        self._pb = etherban_pb2
        self.endpoint, self.device, self._timeout_ms = endpoint, device, round(timeout_s * 1000)
        self._context = zmq.Context()
        self._sock = self._context.socket(zmq.REQ)
        self._sock.setsockopt(zmq.LINGER, 0)
        try:
            self._sock.connect(endpoint)
        except zmq.ZMQError as exc:
            self.close()
            raise ConfigError(f"--endpoint {endpoint}: {exc}") from None

    def exchange(self, amps: float) -> Sample:
        request = self._pb.Request()
        order = request.orders.add()
        order.device, order.operation_mode, order.target = self.device, self._pb.TORQUE, amps
        self._sock.send(request.SerializeToString())
        if not self._sock.poll(self._timeout_ms):
            raise ConfigError(f"--endpoint {self.endpoint}: no Etherban response within {self._timeout_ms} ms")
        response = self._pb.Response.FromString(self._sock.recv())
        status = next((s for s in response.statuses if s.device == self.device), None)
        if status is None:
            raise ConfigError(f"--endpoint {self.endpoint}: the server reports no device {self.device}")
        if response.has_fault:     # bam's client exits here too
            raise ConfigError(f"--endpoint {self.endpoint}: the server reports a drive fault")
        return Sample(status.present_position, status.present_velocity, status.torque_demand,
                      status.present_current)

    def close(self) -> None:
        self._sock.close(0)
        self._context.term()


# CiA 301 / 402 objects and frames (notes/erob.md §3)
_CONTROLWORD, _STATUSWORD, _MODE, _TARGET_TORQUE = 0x6040, 0x6041, 0x6060, 0x6071
_RATED_CURRENT, _RATED_TORQUE, _SYNC_PERIOD = 0x6075, 0x6076, 0x1006
_CST = 10
_NMT_START, _NMT_PRE_OPERATIONAL = 0x01, 0x80
_SYNC = 0x080
_COUNTS_PER_REV = 524288      # the eRob's 19-bit output encoder (notes/erob.md §1.2)
_OPERATION_ENABLED = (0x6F, 0x27)
_FAULT = (0x4F, 0x08)
_TPDO_WAIT_S = 0.02           # a cycle whose TPDOs do not come within this keeps the last state


class CanopenLink:
    """CANopen node `node_id` on the python-can bus `bus_kwargs` (`can.Bus` arguments), driven in CST.

    Set-up by SDO in PRE-OPERATIONAL (ZeroErr's remapping sequence): RPDO1 = controlword + target torque and
    TPDO1 = position + velocity, TPDO2 = statusword + current + torque demand, all synchronous (type 1);
    0x1006 = 1000 µs; mode CST. Then NMT start and shutdown → switch on → enable operation. Each cycle: RPDO1,
    then SYNC (the drive applies the RPDO at the SYNC, then samples the TPDOs), then both TPDOs.
    Current ⇄ torque: 0x6071 and 0x6074 are ‰ of the rated torque 0x6076, converted with `kt` [N·m/A]
    (default: rated torque / rated current, 0x6076 / 0x6075: torque ‰ = current ‰)."""

    def __init__(self, bus_kwargs: dict[str, Any], node_id: int, kt: float | None = None):
        import canopen

        if not 1 <= node_id <= 127:
            raise ConfigError(f"--node {node_id}: a CANopen node ID is 1..127")
        self.node_id = node_id
        self.misses = 0
        self._network = canopen.Network()
        try:
            self._network.connect(**bus_kwargs)
        except Exception as exc:      # python-can raises many kinds for a bus that cannot open
            raise ConfigError(f"--endpoint: cannot open CAN bus {bus_kwargs}: {exc}") from None
        self._node = canopen.RemoteNode(node_id, canopen.ObjectDictionary())
        self._network.add_node(self._node)
        self._latest: dict[int, bytes] = {}
        self._last: dict[int, bytes] | None = None         # the TPDOs of the last answered SYNC
        self._arrived = threading.Condition()
        try:
            self._setup(kt)
        except canopen.SdoError as exc:
            self.close()
            raise ConfigError(f"CANopen node {node_id}: {exc}") from None

    # SDO helpers ----------------------------------------------------------------------------
    def _read(self, index: int, fmt: str, subindex: int = 0) -> int:
        return struct.unpack("<" + fmt, self._node.sdo.upload(index, subindex)[:struct.calcsize(fmt)])[0]

    def _write(self, index: int, subindex: int, fmt: str, value: int) -> None:
        self._node.sdo.download(index, subindex, struct.pack("<" + fmt, value))

    def _remap(self, comm: int, mapping: int, cob: int, entries: tuple[int, ...]) -> None:
        self._write(comm, 1, "I", cob | 0x8000_0000)       # invalid while the map changes (CiA 301)
        self._write(mapping, 0, "B", 0)
        for k, entry in enumerate(entries, 1):
            self._write(mapping, k, "I", entry)
        self._write(mapping, 0, "B", len(entries))
        self._write(comm, 2, "B", 1)                       # synchronous, every SYNC
        self._write(comm, 1, "I", cob)

    def _setup(self, kt: float | None) -> None:
        n = self.node_id
        self._node.nmt.send_command(_NMT_PRE_OPERATIONAL)     # this node only: others on the bus keep going
        self._rated_torque = self._read(_RATED_TORQUE, "I") / 1000.0        # mN·m → N·m
        self._rated_current = self._read(_RATED_CURRENT, "I") / 1000.0      # mA → A
        self.kt = kt if kt is not None else self._rated_torque / self._rated_current
        self._remap(0x1400, 0x1600, 0x200 + n, (0x60400010, 0x60710010))
        self._remap(0x1800, 0x1A00, 0x180 + n, (0x60640020, 0x606C0020))
        self._remap(0x1801, 0x1A01, 0x280 + n, (0x60410010, 0x60780010, 0x60740010))
        self._write(_SYNC_PERIOD, 0, "I", round(PERIOD_S * 1e6))
        self._write(_TARGET_TORQUE, 0, "h", 0)
        self._write(_MODE, 0, "b", _CST)
        for cob in (0x180 + n, 0x280 + n):
            self._network.subscribe(cob, self._on_tpdo)
        self._node.nmt.send_command(_NMT_START)
        sw = self._read(_STATUSWORD, "H")
        if sw & _FAULT[0] == _FAULT[1]:
            self._write(_CONTROLWORD, 0, "H", 0x80)       # fault reset (rising edge of bit 7)
        for cw in (0x06, 0x07, 0x0F):
            self._write(_CONTROLWORD, 0, "H", cw)
        deadline = time.monotonic() + 1.0
        while (sw := self._read(_STATUSWORD, "H")) & _OPERATION_ENABLED[0] != _OPERATION_ENABLED[1]:
            if time.monotonic() > deadline:
                raise ConfigError(f"CANopen node {n}: not OPERATION ENABLED after 1 s (statusword 0x{sw:04X})")
            time.sleep(0.01)

    # cycle ------------------------------------------------------------------------------------
    def _on_tpdo(self, can_id: int, data: bytearray, timestamp: float) -> None:
        with self._arrived:
            self._latest[can_id] = bytes(data)
            self._arrived.notify_all()

    def exchange(self, amps: float) -> Sample:
        n = self.node_id
        permille = round(amps * self.kt / self._rated_torque * 1000.0)
        permille = min(max(permille, -32768), 32767)
        with self._arrived:
            self._latest.clear()
        self._network.send_message(0x200 + n, struct.pack("<Hh", 0x0F, permille))
        self._network.send_message(_SYNC, b"")
        with self._arrived:
            got = self._arrived.wait_for(lambda: len(self._latest) == 2, _TPDO_WAIT_S)
            latest = dict(self._latest)
        if not got:
            self.misses += 1
            if self._last is None:
                raise ConfigError(f"CANopen node {n}: no TPDO answers the SYNC")
            latest = self._last | latest
        self._last = latest
        counts, velocity = struct.unpack("<ii", latest[0x180 + n])
        _sw, current, torque = struct.unpack("<Hhh", latest[0x280 + n])
        rad = 2.0 * math.pi / _COUNTS_PER_REV
        return Sample(counts * rad, velocity * rad, torque / 1000.0 * self._rated_torque / self.kt,
                      current / 1000.0 * self._rated_current)

    def close(self) -> None:
        try:
            self._write(_TARGET_TORQUE, 0, "h", 0)
            self._write(_CONTROLWORD, 0, "H", 0x06)       # shutdown: torque off
        except Exception:    # the bus may be gone already; closing must not hide the first error
            pass
        self._network.disconnect()


def open_link(protocol: str, endpoint: str | None, device: int = 0, node: int | None = None,
              kt: float | None = None) -> Link:
    """The transport of `servo-hil record --protocol etherban|canopen` (ConfigError naming the option)."""
    if protocol == "etherban":
        return EtherbanLink(endpoint or ETHERBAN_ENDPOINT, device)
    from drivers.can_interface import can_bus_kwargs

    if endpoint is None:
        raise ConfigError("--endpoint: give the python-can bus, INTERFACE:CHANNEL[@BITRATE]")
    if node is None:
        raise ConfigError("--node: give the eRob's CANopen node ID")
    try:
        kwargs = can_bus_kwargs(endpoint, 1_000_000)     # the eRob's only CAN bit rate (notes/erob.md §1.1)
    except ValueError as exc:
        raise ConfigError(f"--endpoint {exc}") from None
    return CanopenLink(kwargs, node, kt)


# ------------------------------------------------------------------------------------------ one run
class _Pacer:
    """Absolute 1 ms deadlines; a late cycle is not made up (no bursts)."""

    def __init__(self):
        self.t0 = time.monotonic()
        self._due = self.t0

    def wait(self) -> float:
        self._due += PERIOD_S
        now = time.monotonic()
        if self._due > now:
            time.sleep(self._due - now)
        else:
            self._due = now
        return time.monotonic() - self.t0


def _state(link: Link, amps: float, offset: float) -> Sample:
    s = link.exchange(amps)
    return Sample(_wrap(s.position - offset), s.velocity, s.torque_demand, s.current)


def _go_to_start(link: Link, kp: float, damping: float, start: float, offset: float) -> Sample:
    """Wait (0 A) for the joint to be still, then the 3 s cubic to `start` under the PD."""
    pacer, recent = _Pacer(), deque(maxlen=100)
    s = _state(link, 0.0, offset)
    while pacer.wait() < _STILL_S:
        recent.append(s.position)
        if len(recent) == recent.maxlen and _std(recent) < _STILL_STD:
            break
        s = _state(link, 0.0, offset)
    origin = s.position
    if abs(start - origin) < _ALREADY_THERE:
        return s
    pacer = _Pacer()
    while (t := pacer.wait()) < _GOTO_S:
        u = t / _GOTO_S
        goal = origin + (start - origin) * u * u * (3.0 - 2.0 * u)
        s = _state(link, pd_amps(kp, damping, goal, s.position, s.velocity), offset)
    return s


def _std(values) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def record_one(link: Link, trajectory: str, kp: float, damping: float, header: dict, offset: float = 0.0,
               duration: float = DURATION_S) -> dict:
    """One run: to the start, then `trajectory` for `duration` s at 1 kHz; bam's raw log (eRob flavour)."""
    traj = TRAJECTORIES[trajectory]
    s = _go_to_start(link, kp, damping, traj(0.0)[0], offset)
    entries = []
    pacer, t = _Pacer(), 0.0
    while t < duration:
        goal, enable = traj(t)
        amps = pd_amps(kp, damping, goal, s.position, s.velocity) if enable else 0.0
        s = _state(link, amps, offset)
        entries.append({"timestamp": time.monotonic() - pacer.t0, "position": s.position, "speed": s.velocity,
                        "goal_position": goal, "torque_enable": enable, "torque_demand": s.torque_demand,
                        "control": s.current})
        t = pacer.wait()
    _state(link, 0.0, offset)             # torque off: 0 A
    return {**header, "kp": kp, "damping": damping, "trajectory": trajectory, "entries": entries}


def record(link: Link, trajectories: list[str], gains: list[float], damping: float, header: dict, out: Path,
           offset: float = 0.0, duration: float = DURATION_S) -> list[Path]:
    """Every trajectory at every gain [A/rad] through `link` (closed at the end); writes <out>/raw/*.json and
    <out>/processed/*.json."""
    try:
        return record_sweep(trajectories, gains, lambda name, kp: record_one(
            link, name, kp, damping, header, offset, duration), out)
    finally:
        link.close()
