"""Daemon rig files (`servo-hil run RIG.toml`): N actuators, the loop, ZeroMQ and MQTT settings.

    name = "default"                       # topic prefix part: servo-hil/<name>/…
    [loop]    rate_hz, substeps, integrator, fifo_priority, mlockall, spin_us, lockstep
    [zmq]     pub, command, publish_every
    [mqtt]    url ("" = embedded broker), embedded_port, username, password, tls_ca, tls_cert,
              tls_key, tls_insecure, status_period_s
    [[buses]]                               # optional: impersonate the servos on their own bus
    name = "dxl"  protocol = "dynamixel"    # or "canopen" (eRob CiA 402 nodes behind an SLCAN adapter)
    port = "/tmp/servo-hil-dxl"             # pty symlink to create (or device = "/dev/ttyUSB0")
    baud = 1000000  fast = false            # canopen: baud is the CAN bit rate
    real = "/dev/ttyUSB0"  record = "logs/"  # mirror: the real bus (canopen: "slcan:/dev/ttyACM0@1000000"
                                            # or a table of can.Bus arguments), side-by-side MCAP logs
    record_segment_s = 600                  # … cut into files (segments) of this many seconds
    [[buses]]
    name = "ethercat"  protocol = "etherban"  # Rhoban's Etherban ZeroMQ server (bam's eRob client)
    bind = "tcp://127.0.0.1:7332"  joints = ["elbow"]   # device 0, 1, … in this order
    [[actuators]]
    joint = "shoulder"                      # the actuator's name in topics and commands
    catalog = "mx64"  model = "m1"          # or mjcf / inline <dcmotor> attributes, as offline
    load = { mass = 0.3, length = 0.1 }     # [actuators.load], .encoder, .faults, .initial as offline
    bus = "dxl"  id = 1                     # on a bus: its ID there, and
    registers = { "Return Delay Time" = 0 } # … register values it powers up with (EEPROM as configured)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, ValidationInfo, field_validator, model_validator

from hil.kernel import Kernel
from hil.params.actuator import ActuatorSpec
from hil.params.config_file import ConfigError, Strict, read_toml, validate
from hil.rig import ActuatorConfig, JointSetup, LoadConfig, kernel_params
from hil.robot.rig import Binding, Robot, RobotConfig, build_robot

ETHERBAN_ENDPOINT = "tcp://127.0.0.1:7332"   # bam/erob/etherban.py Client: tcp://<host>:7332
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _check_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError("use 1–64 letters, digits, '_', '-' or '.' (it becomes an MQTT / ZeroMQ topic level)")
    return value


class BusConfig(Strict):
    """One `[[buses]]` entry: a bus on which the rig's servos answer as the real ones do."""

    name: str
    protocol: Literal["dynamixel", "canopen", "etherban"]
    port: str | None = Field(None, description="pty symlink path to create; none = print the /dev/pts name")
    device: str | None = Field(None, description="a real serial device (e.g. a USB-RS485 adapter) instead of a pty")
    baud: int = Field(1_000_000, gt=0, description="the servos' line speed at power-up [bit/s]")
    fast: bool = Field(False, description="answer at once: no return delay, no wire-time pacing (CI throughput)")
    real: str | dict[str, Any] | None = Field(
        None, description="mirror: the real bus the controller's packets are forwarded to (dynamixel: a serial "
                          "device; canopen: a python-can bus, INTERFACE:CHANNEL[@BITRATE] or a table of can.Bus "
                          "arguments); the rig's servos become their simulated twins")
    record: str | None = Field(None, description="mirror: folder for the side-by-side MCAP logs")
    record_segment_s: PositiveFloat = Field(600.0, description="mirror: a new MCAP file (segment) every this many "
                                                               "seconds of log time; a kill cuts only the last")
    bind: str = Field(ETHERBAN_ENDPOINT, description="etherban: the ZeroMQ REP endpoint to bind")
    joints: list[str] = Field(default_factory=list, description="etherban: the eRob joints it drives, as "
                                                                "devices 0, 1, … in this order")

    _name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))

    @field_validator("real")
    @classmethod
    def _real_bus(cls, value: str | dict | None, info: ValidationInfo) -> str | dict | None:
        if value is None:
            return value
        if info.data.get("protocol") == "canopen":
            from drivers.can.interface import can_bus_kwargs

            can_bus_kwargs(value)           # a python-can spec: refused here with what is wrong in it
        elif not isinstance(value, str):
            raise ValueError("a dynamixel mirror's real bus is a serial device path")
        return value

    @model_validator(mode="after")
    def _one_port(self) -> BusConfig:
        if self.port and self.device:
            raise ValueError("give port (a pty) or device (a serial device), not both")
        if self.record and not self.real:
            raise ValueError("record = ... logs a mirror: give real = <the real bus device> too")
        if self.protocol == "etherban":
            if self.port or self.device or self.real:
                raise ValueError("an etherban server has no port, device or real: it binds `bind`")
            if not self.joints:
                raise ValueError("joints: list the eRob joints the etherban server drives (device 0, 1, …)")
            if len(set(self.joints)) != len(self.joints):
                raise ValueError("joints: a joint is listed twice")
        elif self.joints:
            raise ValueError(f"joints = ... is for etherban; a {self.protocol} bus lists its actuators "
                             "by their bus = ... and id = ...")
        return self


class RigActuator(ActuatorConfig, JointSetup):
    """One `[[actuators]]` entry: where the actuator comes from, its joint name and its surroundings."""

    joint: str
    bus: str | None = Field(None, description="name of the [[buses]] entry it answers on")
    id: int | None = Field(None, ge=0, le=252, description="its ID on that bus")
    registers: dict[str, int] = Field(default_factory=dict, description="register values at power-up")

    _joint = field_validator("joint")(classmethod(lambda cls, v: _check_name(v)))


class LoopConfig(Strict):
    rate_hz: float = Field(1000.0, ge=1.0, le=10000.0)
    substeps: int = Field(1, ge=1, le=100, description="physics steps per loop tick")
    integrator: Literal["euler", "bam"] = "euler"
    fifo_priority: int = Field(50, ge=0, le=99, description="SCHED_FIFO priority; 0 = do not try")
    mlockall: bool = True
    spin_us: NonNegativeFloat = Field(0.0, le=1000.0, description="busy-wait margin before each deadline")
    lockstep: bool = Field(False, description="advance only on `step N` commands (co-simulation)")

    @property
    def io_priority(self) -> int:
        """SCHED_FIFO priority of the threads serving the loop's I/O (bus adapters and servers, the state
        publisher, ZeroMQ's I/O threads): one below the loop, so that they never delay a tick; 0 (do not
        try) when the loop itself does not ask for FIFO."""
        return max(self.fifo_priority - 1, 0)


class ZmqConfig(Strict):
    pub: str = "tcp://127.0.0.1:9872"
    command: str = "tcp://127.0.0.1:9873"
    publish_every: int = Field(1, ge=1, description="publish one tick in N (decimation)")


class MqttConfig(Strict):
    url: str = Field("", description="mqtt://host:port or mqtts://host:port; empty = embedded broker")
    embedded_port: int = Field(1883, ge=1, le=65535)
    username: str | None = None
    password: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_insecure: bool = False
    status_period_s: PositiveFloat = 1.0
    enabled: bool = True


class Rig(Strict):
    name: str = "default"
    loop: LoopConfig = LoopConfig()
    zmq: ZmqConfig = ZmqConfig()
    mqtt: MqttConfig = MqttConfig()
    buses: list[BusConfig] = Field(default_factory=list)
    actuators: list[RigActuator] = Field(min_length=1)
    robot: RobotConfig | None = Field(None, description="the actuators drive the hinges of this MuJoCo model")

    _name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))

    @model_validator(mode="after")
    def _unique(self) -> Rig:
        seen: set[str] = set()
        for j, a in enumerate(self.actuators):
            if self.robot and "load" in a.model_fields_set:
                raise ValueError(f"actuators[{j}] ({a.joint}).load: a robot's load is its MJCF (robot.mjcf)")
            if a.joint in seen:
                raise ValueError(f"actuators: joint name {a.joint!r} is used twice")
            seen.add(a.joint)
        buses = {b.name for b in self.buses}
        if len(buses) != len(self.buses):
            raise ValueError("buses: a bus name is used twice")
        for b in self.buses:
            for joint in b.joints:
                if joint not in seen:
                    raise ValueError(f"buses ({b.name}): joints: no actuator is named {joint!r}")
        servers = {b.name for b in self.buses if b.protocol == "etherban"}
        ids: set[tuple[str, int]] = set()
        for j, a in enumerate(self.actuators):
            if a.bus is None:
                if a.id is not None or a.registers:
                    raise ValueError(f"actuators[{j}] ({a.joint}): id / registers need bus = ...")
                continue
            if a.bus in servers:
                raise ValueError(f"actuators[{j}] ({a.joint}): bus {a.bus!r} is an etherban server: list "
                                 "the joint in its joints = [...] instead")
            if a.bus not in buses:
                raise ValueError(f"actuators[{j}] ({a.joint}): bus {a.bus!r} is not among buses "
                                 f"({', '.join(sorted(buses)) or 'none defined'})")
            if a.id is None:
                raise ValueError(f"actuators[{j}] ({a.joint}): an actuator on a bus needs id = ...")
            if (a.bus, a.id) in ids:
                raise ValueError(f"actuators[{j}] ({a.joint}): id {a.id} is used twice on bus {a.bus!r}")
            ids.add((a.bus, a.id))
        return self


def load_rig(path: str | Path) -> tuple[Rig, list[ActuatorSpec], Kernel]:
    """Read a daemon rig and build its kernel (dt = 1/(rate·substeps)) in the initial state."""
    path = Path(path)
    rig = validate(Rig, read_toml(path), str(path))
    if rig.robot is not None:
        raise ConfigError(f"{path}: robot: a robot rig runs offline (servo-hil simulate); the real-time loop "
                          "does not tick a MuJoCo model yet")
    specs = []
    kernel = Kernel(len(rig.actuators), 1.0 / (rig.loop.rate_hz * rig.loop.substeps))
    for j, a in enumerate(rig.actuators):
        try:
            spec = a.spec(path.parent)
            kernel.set_params(j, kernel_params(spec, a.load, a.encoder, a.faults, rig.loop.integrator))
        except ConfigError as exc:
            raise ConfigError(f"{path}: actuators[{j}] ({a.joint}): {exc}") from None
        kernel.set_state(j, theta=a.initial.theta, omega=a.initial.omega, temperature=a.initial.temperature_c)
        specs.append(spec)
    return rig, specs, kernel


def load_robot_rig(path: str | Path) -> tuple[Rig, list[ActuatorSpec], Robot]:
    """Read a robot rig (`[robot] mjcf = ...`): its actuators bound to the MJCF's hinges named by `joint`."""
    path = Path(path)
    rig = validate(Rig, read_toml(path), str(path))
    if rig.robot is None:
        raise ConfigError(f"{path}: robot: required key is missing (a robot rig names its MJCF: [robot] mjcf = ...)")
    specs, bindings = [], []
    for j, a in enumerate(rig.actuators):
        where = f"actuators[{j}] ({a.joint})"
        try:
            spec = a.spec(path.parent)
            params = kernel_params(spec, LoadConfig(), a.encoder, a.faults, rig.loop.integrator)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {where}: {exc}") from None
        specs.append(spec)
        bindings.append(Binding(a.joint, params, where, a.initial.theta, a.initial.omega, a.initial.temperature_c))
    try:
        robot = build_robot(rig.robot, path.parent, bindings, 1.0 / rig.loop.rate_hz)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return rig, specs, robot
