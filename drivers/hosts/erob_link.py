"""How a host drives one real eRob's current at 1 kHz (`servo-hil record --protocol etherban|canopen`): a `Link`
takes the current set-point of one cycle and returns the drive's state of that cycle, in SI, over Etherban
(`EtherbanLink`) or CANopen in CST (`CanopenLink`); docs/protocols/canopen.md, "Recording a real drive"."""

from __future__ import annotations

import logging
import math
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from hil.params.config_file import ConfigError

__all__ = ["PERIOD_S", "CanopenLink", "EtherbanLink", "Link", "Sample", "open_link"]

log = logging.getLogger("servo-hil")

PERIOD_S = 1e-3               # bam's Etherban client cycle
ETHERBAN_ENDPOINT = "tcp://127.0.0.1:7332"            # bam's Client("localhost")


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


class EtherbanLink:
    """Device `device` of the Etherban server at `endpoint` (bam's client: ZeroMQ REQ, protobuf)."""

    def __init__(self, endpoint: str, device: int = 0, timeout_s: float = 1.0):
        import zmq

        from drivers.emulated.etherban import etherban_pb2

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


# CiA 301 / CiA 402-2 objects and frames, as ZeroErr Driver_V1.5.eds lists them
_CONTROLWORD, _STATUSWORD, _MODE, _TARGET_TORQUE = 0x6040, 0x6041, 0x6060, 0x6071
_RATED_CURRENT, _RATED_TORQUE, _SYNC_PERIOD = 0x6075, 0x6076, 0x1006
_CST = 10
_NMT_START, _NMT_PRE_OPERATIONAL = 0x01, 0x80
_SYNC = 0x080
_COUNTS_PER_REV = 524288      # the eRob's 19-bit output encoder (ZeroErr's demos: encoder_resolution)
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
        from canopen.sdo import SdoAbortedError, SdoCommunicationError

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
        self._enabled = False                           # enabling began (close() then shuts the drive down)
        # canopen logs its own abort of a timed-out transfer as an error; the failure is reported once, below
        logging.getLogger("canopen.sdo.client").setLevel(logging.CRITICAL)
        try:
            self._setup(kt)
        except BaseException as exc:
            self.close()
            if isinstance(exc, SdoAbortedError | SdoCommunicationError):   # no such node, or it refuses the set-up
                raise ConfigError(f"CANopen node {node_id}: {exc}") from None
            raise

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
        self._enabled = True                            # from here on, close() switches the torque off
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
        if self.misses:
            log.warning("CANopen node %d: %d SYNC(s) without both TPDOs within %g ms (the last state was kept)",
                        self.node_id, self.misses, 1e3 * _TPDO_WAIT_S)
        try:
            if self._enabled:
                self._write(_TARGET_TORQUE, 0, "h", 0)
                self._write(_CONTROLWORD, 0, "H", 0x06)   # shutdown: torque off
        except Exception:    # the bus may be gone already; closing must not hide the first error
            pass
        self._network.disconnect()


def open_link(protocol: str, endpoint: str | None, device: int = 0, node: int | None = None,
              kt: float | None = None) -> Link:
    """The transport of `servo-hil record --protocol etherban|canopen` (ConfigError naming the option)."""
    if protocol == "etherban":
        return EtherbanLink(endpoint or ETHERBAN_ENDPOINT, device)
    from drivers.hosts.can_interface import can_bus_kwargs

    if endpoint is None:
        raise ConfigError("--endpoint: give the python-can bus, INTERFACE:CHANNEL[@BITRATE]")
    if node is None:
        raise ConfigError("--node: give the eRob's CANopen node ID")
    try:
        kwargs = can_bus_kwargs(endpoint, 1_000_000)     # the eRob's only CAN bit rate (EDS: BaudRate_1000)
    except ValueError as exc:
        raise ConfigError(f"--endpoint {exc}") from None
    return CanopenLink(kwargs, node, kt)
