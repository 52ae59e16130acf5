"""Rig files: the actuators, their loads and the buses they answer on, as TOML.

One schema for `servo-hil simulate`, `replay`, `run` and `mirror`: a one-actuator rig (`[actuator]` and its
tables) is the rig of one `[[actuators]]` entry with joint = "actuator". Every table, key, unit and default:
docs/configuration.md; every float must be finite.
"""

from __future__ import annotations

import ipaddress
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveFloat,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from drivers.emulated import PROTOCOLS
from hil.kernel import INTEGRATORS, LAWS, Kernel
from hil.params import catalog
from hil.params.actuator import ActuatorSpec
from hil.params.bam import load_bam_params
from hil.params.config_file import ConfigError, Strict, describe, read_toml, validate
from hil.params.dcmotor import DCMotor
from hil.params.firmware import DcmotorLaw, parse_firmware
from hil.params.mjcf import load_dcmotor
from hil.robot.rig import Binding, Robot, RobotConfig, build_robot

STANDARD_GRAVITY = 9.80665  # m/s², also bam's value
SINGLE_JOINT = "actuator"   # the joint name of a rig spelled with one [actuator]
_SINGLE_ONLY = ("actuator", "load", "encoder", "faults", "initial")


class ActuatorConfig(DCMotor):
    """Where the actuator comes from: the catalog, an MJCF file, or inline `<dcmotor>` attributes."""

    catalog: str | None = None
    model: Literal["m1", "m2", "m3", "m4", "m5", "m6"] | None = None
    params: str | None = Field(None, description="bam parameter JSON file (instead of model)")
    mjcf: str | None = None
    name: str | None = Field(None, description="<dcmotor> name in the MJCF file")
    firmware: dict[str, Any] | None = None
    exact_bam: bool | None = Field(None, description="bam's simulator exactly, as `replay` runs it (exact_bam_spec); "
                                                     "default: the rig's exact_bam")

    @model_validator(mode="after")
    def _consistent(self) -> ActuatorConfig:
        # a catalog actuator's attributes complete the entry's: they are checked together (CatalogEntry.actuator)
        return self if self.catalog else DCMotor._consistent(self)

    @model_validator(mode="after")
    def _one_source(self) -> ActuatorConfig:
        inline = any(getattr(self, k) is not None for k in ("resistance", "kt", "nominal", "rated",
                                                             "kt_mnm_per_a", "kv_rpm_per_v"))
        sources = [n for n, on in (("catalog", self.catalog), ("mjcf", self.mjcf), ("inline attributes", inline))
                   if on]
        if len(sources) != 1:
            raise ValueError("give exactly one of catalog, mjcf or inline <dcmotor> attributes"
                             + (f" (found {', '.join(sources)})" if sources else ""))
        if self.model and self.params:
            raise ValueError("give model or params, not both")
        if (self.model or self.params) and not self.catalog:
            raise ValueError("model / params select a bam set of a catalog actuator: add catalog = ...")
        return self

    def spec(self, base: Path) -> ActuatorSpec:
        """Resolve to an ActuatorSpec; relative file names are relative to `base`."""
        if self.catalog:
            entry = catalog.entry(self.catalog)
            overrides = {k: getattr(self, k) for k in self.model_fields_set if k in DCMotor.model_fields}
            spec = entry.actuator(self.model, self.firmware, overrides)
            if self.params:
                spec = spec.with_bam(load_bam_params(base / self.params))
            return spec
        if self.mjcf:
            motor = load_dcmotor(base / self.mjcf, self.name)
        else:
            fields = {k: v for k, v in self.model_dump(exclude_none=True).items() if k in DCMotor.model_fields}
            motor = DCMotor.model_validate(fields)
        try:
            constants = motor.resolve()
        except ValueError as exc:
            raise ConfigError(f"actuator: {exc}") from None
        law = DcmotorLaw()
        if self.firmware:
            law = parse_firmware(self.firmware, "actuator.firmware")
        return ActuatorSpec(name=self.name or "motor", motor=constants, firmware=law)


class LoadConfig(Strict):
    inertia: NonNegativeFloat = Field(0.0, description="[kg·m²] about the axis, pendulum mass excluded")
    mass: NonNegativeFloat = Field(0.0, description="pendulum point mass [kg]")
    length: NonNegativeFloat = Field(0.0, description="[m]")
    arm_mass: NonNegativeFloat = Field(0.0, description="uniform arm [kg]")
    gravity: NonNegativeFloat = STANDARD_GRAVITY

    def kernel_params(self) -> dict[str, float]:
        return dict(load_inertia=self.inertia, mass=self.mass, length=self.length, arm_mass=self.arm_mass,
                    gravity=self.gravity)


class EncoderConfig(Strict):
    encoder_counts: NonNegativeFloat | None = Field(
        None, description="counts per output revolution (the kernel's encoder_counts); default: the catalog's encoder")
    encoder_noise: NonNegativeFloat = Field(0.0, description="std-dev of the measured position's noise [rad]")
    seed: int = Field(1, ge=1, lt=2**64)


class FaultConfig(Strict):
    open_circuit_fraction: float = Field(0.0, ge=0.0, le=1.0)
    open_circuit_time_s: NonNegativeFloat = math.inf
    open_circuit_current_a: NonNegativeFloat = math.inf
    open_circuit_duration_s: NonNegativeFloat = 0.0
    supply_v: NonNegativeFloat | None = Field(None, description="supply override (sag) [V]")


class InitialConfig(Strict):
    theta: float = 0.0
    omega: float = 0.0
    temperature_c: float | None = None


class SimConfig(Strict):
    dt: PositiveFloat = 0.001
    integrator: Literal["euler", "bam", "implicitfast"] = "euler"


class JointSetup(Strict):
    """What surrounds one actuator in a rig: its load, encoder, faults at start and initial state."""

    load: LoadConfig = LoadConfig()
    encoder: EncoderConfig = EncoderConfig()
    faults: FaultConfig = FaultConfig()
    initial: InitialConfig = InitialConfig()


ETHERBAN_ENDPOINT = "tcp://127.0.0.1:7332"   # bam/erob/etherban.py Client: tcp://<host>:7332
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _check_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError("use 1–64 letters, digits, '_', '-' or '.' (it becomes an MQTT / ZeroMQ topic level)")
    return value


class BusConfig(Strict):
    """One `[[buses]]` entry: a bus on which the rig's servos answer as the real ones do."""

    name: str
    protocol: str = Field(description=f"what the bus speaks: one of {', '.join(PROTOCOLS)}")
    port: str | None = Field(None, description="pty symlink path to create; none = print the /dev/pts name")
    device: str | None = Field(None, description="a real serial device (e.g. a USB-RS485 adapter) instead of a pty")
    baud: int = Field(1_000_000, gt=0, description="the servos' line speed at power-up [bit/s]")
    fast: bool = Field(False, description="answer at once: no return delay, no wire-time pacing (CI throughput)")
    real: str | dict[str, Any] | None = Field(
        None, description="mirror: the real bus the controller's packets are forwarded to (dynamixel, dynamixel1, "
                          "feetech: a serial device; canopen: a python-can bus, INTERFACE:CHANNEL[@BITRATE] or a "
                          "table of can.Bus arguments; etherban: the real server's ZeroMQ endpoint, tcp://HOST:PORT); "
                          "the rig's servos become their simulated twins")
    record: str | None = Field(None, description="mirror: folder for the side-by-side MCAP logs")
    eeprom: str | None = Field(None, description="EEPROM state file: what clients write to the servos' EEPROM "
                                                 "is kept there and comes back at the next start")
    record_segment_s: PositiveFloat = Field(600.0, description="mirror: a new MCAP file (segment) every this many "
                                                               "seconds of log time; a kill cuts only the last")
    bind: str = Field(ETHERBAN_ENDPOINT, description="etherban: the ZeroMQ REP endpoint to bind")
    joints: list[str] = Field(default_factory=list, description="etherban: the eRob joints it drives, as "
                                                                "devices 0, 1, … in this order")

    _name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, value: str) -> str:
        if value not in PROTOCOLS:
            raise ValueError(f"one of {', '.join(PROTOCOLS)}, got {value!r}")
        return value

    _bind = field_validator("bind")(classmethod(lambda cls, v: check_endpoint(v)))

    @field_validator("real")
    @classmethod
    def _real_bus(cls, value: str | dict | None, info: ValidationInfo) -> str | dict | None:
        if value is None:
            return value
        if info.data.get("protocol") == "canopen":
            from drivers.hosts.can_interface import can_bus_kwargs

            can_bus_kwargs(value)           # a python-can spec: refused here with what is wrong in it
        elif info.data.get("protocol") == "etherban":
            if not isinstance(value, str) or not value.startswith(("tcp://", "ipc://")):
                raise ValueError("an etherban mirror's real server is a ZeroMQ endpoint, e.g. tcp://robot-pc:7332")
        elif not isinstance(value, str):
            raise ValueError("a dynamixel, dynamixel1 or feetech mirror's real bus is a serial device path")
        return value

    @model_validator(mode="after")
    def _one_port(self) -> BusConfig:
        if self.port and self.device:
            raise ValueError("give port (a pty) or device (a serial device), not both")
        if self.record and not self.real:
            raise ValueError("record = ... logs a mirror: give real = <the real bus device> too")
        if self.protocol == "etherban":
            if self.port or self.device:
                raise ValueError("an etherban server has no port or device: it binds `bind`")
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
    integrator: Literal["euler", "bam", "implicitfast"] = "euler"
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


def loopback(endpoint: str) -> bool:
    """Whether a ZeroMQ endpoint (tcp://host:port, ipc://, inproc://) or a bare host is reachable only from
    this machine: a loopback address or `localhost`, or not TCP at all."""
    scheme, sep, rest = endpoint.partition("://")
    if sep and scheme != "tcp":
        return True
    host = (rest.rpartition(":")[0] if sep else endpoint).strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:   # `*`, an interface name, a host name: reachable from elsewhere
        return False


def check_endpoint(endpoint: str) -> str:
    """A ZeroMQ endpoint as zmq_connect/zmq_bind take it (zmq_tcp(7): tcp://HOST:PORT; zmq_ipc(7): ipc://PATH;
    inproc://NAME), else ValueError saying the form expected."""
    scheme, sep, rest = endpoint.partition("://")
    host, colon, port = rest.rpartition(":")
    ok = sep and rest and (scheme in ("ipc", "inproc") or (scheme == "tcp" and colon and host
                                                           and (port == "*" or port.isdigit())))
    if not ok:
        raise ValueError(f"{endpoint!r} is not a ZeroMQ endpoint: expected tcp://HOST:PORT (e.g. "
                         "tcp://127.0.0.1:9873), ipc://PATH or inproc://NAME")
    return endpoint


class ZmqConfig(Strict):
    pub: str = "tcp://127.0.0.1:9872"
    command: str = "tcp://127.0.0.1:9873"
    publish_every: int = Field(1, ge=1, description="publish one tick in N (decimation)")
    framing: Literal["multipart", "single"] = Field(
        "multipart", description="multipart: [topic, msgpack map, timestamp] per joint (a SUB may filter by "
                                 "topic); single: one msgpack frame {rig: {joint: map}, timestamp: s} (what every "
                                 "PlotJuggler version shows per joint)")
    curve_secret_key: str | None = Field(
        None, description="CURVE: the daemon's secret key file (zmq.auth.create_certificates' NAME.key_secret); "
                          "both sockets then encrypt and admit only the clients of curve_clients")
    curve_clients: str | None = Field(None, description="CURVE: folder of the public key files (*.key) of the "
                                                        "clients admitted")
    allow_remote: bool = Field(False, description="bind a non-loopback address without CURVE (anyone on the "
                                                  "network may command the rig)")

    _endpoints = field_validator("pub", "command")(classmethod(lambda cls, v: check_endpoint(v)))

    @model_validator(mode="after")
    def _exposure(self) -> ZmqConfig:
        if (self.curve_secret_key is None) != (self.curve_clients is None):
            raise ValueError("give curve_secret_key and curve_clients together")
        exposed = [e for e in (self.pub, self.command) if not loopback(e)]
        if exposed and self.curve_secret_key is None and not self.allow_remote:
            raise ValueError(f"{exposed[0]} is reachable from other machines: set curve_secret_key and "
                             "curve_clients (CURVE), or allow_remote = true to expose it unauthenticated")
        return self


class MqttConfig(Strict):
    url: str = Field("", description="mqtt://host:port or mqtts://host:port; empty = embedded broker")
    embedded_port: int = Field(1883, ge=1, le=65535)
    embedded_host: str = Field("127.0.0.1", description="address the embedded broker binds")
    username: str | None = None
    password: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_insecure: bool = False
    status_period_s: PositiveFloat = 1.0
    enabled: bool = True
    max_commands_per_s: float = Field(1000.0, ge=1.0, le=1e6, description="commands executed per second at "
                                                                          "most; the excess is dropped")
    allow_remote: bool = Field(False, description="embedded broker on a non-loopback address without "
                                                  "username/password (anyone on the network may command the rig)")

    @model_validator(mode="after")
    def _exposure(self) -> MqttConfig:
        if (self.enabled and not self.url and not loopback(self.embedded_host) and self.username is None
                and not self.allow_remote):
            raise ValueError(f"embedded_host = {self.embedded_host!r} is reachable from other machines: set "
                             "username and password, or allow_remote = true to expose the broker unauthenticated")
        return self


class FoxgloveConfig(Strict):
    """`[foxglove]`: a live Foxglove WebSocket server (foxglove-sdk) carrying every joint's state and the events."""

    bind: str = Field("127.0.0.1", description="address the WebSocket server listens on")
    port: int = Field(8765, ge=0, le=65535, description="TCP port (0: any free port, logged)")
    rate_hz: float = Field(100.0, gt=0.0, le=1000.0, description="joint states sent per joint per second at "
                                                                 "most (a browser plots ~100 Hz smoothly)")
    allow_remote: bool = Field(False, description="listen on a non-loopback address (the server has no "
                                                  "authentication: anyone on the network sees the rig)")

    @model_validator(mode="after")
    def _exposure(self) -> FoxgloveConfig:
        if not loopback(self.bind) and not self.allow_remote:
            raise ValueError(f"bind = {self.bind!r} is reachable from other machines: use a loopback address, or "
                             "allow_remote = true to expose the state stream unauthenticated")
        return self


class ConsoleConfig(Strict):
    """`[console]`: the daemon's web console (servo_hil/console, docs/console.md): state, control tables, plots,
    faults."""

    bind: str = Field("127.0.0.1", description="address the HTTP server listens on")
    port: int = Field(8780, ge=0, le=65535, description="TCP port (0: any free port, logged)")
    rate_hz: float = Field(50.0, gt=0.0, le=200.0, description="joint states pushed to each browser per joint per "
                                                               "second at most (a UI rate, never every tick)")
    token: str | None = Field(None, min_length=16, description="secret every request must carry (?token= or the "
                                                               "X-Console-Token header); required off loopback; "
                                                               "the SERVO_HIL_CONSOLE_TOKEN variable overrides it")
    record_dir: str = Field("recordings", description="folder of the recordings started from the console "
                                                      "(relative: from the rig file's folder)")


class RecordConfig(Strict):
    """`[record]`: the daemon writes its own state stream to MCAP (`/sim/<joint>/state`, servo_hil.logs.mcap)."""

    dir: str = Field(description="folder of the MCAP files (relative: from the rig file's folder)")
    segment_s: PositiveFloat = Field(600.0, description="a new file (segment) every this many seconds")
    rate_hz: float = Field(100.0, gt=0.0, le=10000.0, description="joint states recorded per joint per second "
                                                                  "at most (one published tick in N)")


class RigSettings(Strict):
    """What every rig has besides its actuators: its name, the daemon's loop, ZeroMQ and MQTT, the offline step."""

    name: str = "default"
    loop: LoopConfig = LoopConfig()
    zmq: ZmqConfig = ZmqConfig()
    mqtt: MqttConfig = MqttConfig()
    foxglove: FoxgloveConfig | None = None
    record: RecordConfig | None = None
    console: ConsoleConfig | None = None
    sim: SimConfig | None = Field(None, description="the offline step of `simulate`; default: the loop's")
    exact_bam: bool = Field(False, description="every actuator runs bam's simulator exactly (an actuator's own "
                                               "exact_bam overrides)")

    _name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))

    @property
    def offline(self) -> SimConfig:
        """The step and integrator `simulate` runs at: [sim], else the loop's 1/(rate·substeps) and integrator."""
        if self.sim is not None:
            return self.sim
        return SimConfig(dt=1.0 / (self.loop.rate_hz * self.loop.substeps), integrator=self.loop.integrator)


class OfflineRig(RigSettings, JointSetup):
    """A rig spelled with one `[actuator]` and its `[load]`, `[encoder]`, `[faults]`, `[initial]` tables:
    validated as written (errors name the file's keys), then read as the Rig of that one actuator."""

    actuator: ActuatorConfig


class Rig(RigSettings):
    """A rig: its actuators, the buses they answer on, and the settings of the daemon and the offline step."""

    buses: list[BusConfig] = Field(default_factory=list)
    actuators: list[RigActuator] = Field(min_length=1)
    robot: RobotConfig | None = Field(None, description="the actuators drive the hinges of this MuJoCo model")

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


BAM_INTEGRATOR = "bam"   # the step bam's published parameters were identified with (DESIGN.md, Physics)


def exact_bam_spec(spec: ActuatorSpec, encoder: EncoderConfig) -> ActuatorSpec:
    """The actuator as bam's simulator runs it — `ActuatorSpec.bam_only()`, what `replay` runs: no inductance,
    thermal state (R(T)'s α), saturation, cogging or encoder quantization — to be stepped with BAM_INTEGRATOR.
    ConfigError for what bam's model cannot have: no bam parameter set, an encoder given."""
    if spec.friction is None:
        raise ConfigError("exact_bam: bam's model needs a bam parameter set: catalog = … with model = … or params = …")
    if encoder.encoder_counts is not None or encoder.encoder_noise > 0:
        raise ConfigError("exact_bam: bam's model has no encoder: drop encoder.encoder_counts / encoder.encoder_noise")
    return spec.bam_only()


def kernel_params(spec: ActuatorSpec, load: LoadConfig, encoder: EncoderConfig, faults: FaultConfig,
                  integrator: str) -> dict:
    """The full kernel parameter dict of one actuator on its load."""
    p = spec.kernel_params()
    p.update(load.kernel_params())
    p["integrator"] = INTEGRATORS[integrator]
    if encoder.encoder_counts is not None:
        p["encoder_counts"] = encoder.encoder_counts
    p.update(encoder_noise=encoder.encoder_noise, seed=encoder.seed, oc_fraction=faults.open_circuit_fraction,
             oc_time=faults.open_circuit_time_s, oc_current=faults.open_circuit_current_a,
             oc_duration=faults.open_circuit_duration_s)
    if faults.supply_v is not None:
        p["supply_override"] = faults.supply_v
    if p["law"] == LAWS["dxl_pwm"] and not p["supply_v"] > 0:
        raise ConfigError("actuator.firmware.supply_v: must be > 0 for the dxl_pwm law")
    return p


def _parse(path: Path) -> tuple[Rig, bool]:
    """The rig of the file at `path` and whether it is spelled with one `[actuator]`."""
    data = read_toml(path)
    where = str(path)
    single = "actuator" in data or ("actuators" not in data and any(k in data for k in _SINGLE_ONLY))
    if not single:
        return validate(Rig, data, where), False
    if "actuators" in data:
        raise ConfigError(f"{where}: actuator: give one [actuator] or [[actuators]] entries, not both")
    validate(OfflineRig, data, where)
    one = {"joint": SINGLE_JOINT, **data.pop("actuator")}
    for key in _SINGLE_ONLY[1:]:
        if key in data:
            one[key] = data.pop(key)
    return validate(Rig, {**data, "actuators": [one]}, where), True


def read_rig(path: str | Path) -> Rig:
    """Read and validate a rig file of either spelling (ConfigError naming the file and the key)."""
    return _parse(Path(path))[0]


def _build_kernel(rig: Rig, path: Path, single: bool, dt: float,
                  integrator: str) -> tuple[Kernel, list[ActuatorSpec]]:
    """A kernel of the actuators of `rig` (read from `path`: file names are relative to its folder) in their
    initial state; a problem is a ConfigError naming the file and, unless it is `single`-spelled, the actuator."""
    kernel = Kernel(len(rig.actuators), dt)
    specs = []
    for j, a in enumerate(rig.actuators):
        where = str(path) if single else f"{path}: actuators[{j}] ({a.joint})"
        try:
            spec = a.spec(path.parent)
            exact = rig.exact_bam if a.exact_bam is None else a.exact_bam
            if exact:
                spec = exact_bam_spec(spec, a.encoder)
            kernel.set_params(j, kernel_params(spec, a.load, a.encoder, a.faults,
                                               BAM_INTEGRATOR if exact else integrator))
        except ConfigError as exc:
            text = str(exc)
            raise ConfigError(text if text.startswith(str(path)) else f"{where}: {text}") from None
        except ValidationError as exc:
            raise ConfigError(describe(exc, where)) from None
        kernel.set_state(j, theta=a.initial.theta, omega=a.initial.omega, temperature=a.initial.temperature_c)
        specs.append(spec)
    return kernel, specs


def load_rig(path: str | Path) -> tuple[Rig, list[ActuatorSpec], Kernel]:
    """Read a rig for the daemon and build its kernel (dt = 1/(rate·substeps)) in the initial state."""
    path = Path(path)
    rig, single = _parse(path)
    if rig.robot is not None:
        raise ConfigError(f"{path}: robot: a robot rig's actuators turn its MJCF's hinges: load it with "
                          "load_robot_rig")
    kernel, specs = _build_kernel(rig, path, single, 1.0 / (rig.loop.rate_hz * rig.loop.substeps),
                                  rig.loop.integrator)
    return rig, specs, kernel


def load_robot_rig(path: str | Path) -> tuple[Rig, list[ActuatorSpec], Robot]:
    """Read a robot rig (`[robot] mjcf = ...`): its actuators bound to the MJCF's hinges named by `joint`."""
    path = Path(path)
    rig, single = _parse(path)
    if rig.robot is None or single:
        raise ConfigError(f"{path}: robot: a robot rig names its MJCF ([robot] mjcf = ...) and its [[actuators]]")
    if "integrator" in rig.loop.model_fields_set or "substeps" in rig.loop.model_fields_set:
        raise ConfigError(f"{path}: loop: a robot's integrator and physics step are its MJCF's <option>: give "
                          "neither integrator nor substeps")
    tick = 1.0 / rig.loop.rate_hz
    kernel, specs = _build_kernel(rig, path, single, tick, rig.loop.integrator)
    bindings = [Binding(a.joint, kernel.get_params(j), f"actuators[{j}] ({a.joint})", a.initial.theta,
                        a.initial.omega, a.initial.temperature_c) for j, a in enumerate(rig.actuators)]
    try:
        return rig, specs, build_robot(rig.robot, path.parent, bindings, tick)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def load_offline_rig(path: str | Path, integrator: str | None = None) -> tuple[Rig, Kernel, ActuatorSpec]:
    """Read a rig of one actuator and build its kernel at the offline step (`Rig.offline`) in its initial state.

    `integrator` ("euler" | "bam" | "implicitfast") overrides the rig's.
    """
    path = Path(path)
    rig, single = _parse(path)
    if len(rig.actuators) != 1:
        raise ConfigError(f"{path}: actuators: simulate runs one actuator; this rig has {len(rig.actuators)}")
    step = rig.offline
    if integrator is not None:
        if integrator not in INTEGRATORS:
            raise ConfigError(f"integrator: unknown {integrator!r} (known: {', '.join(INTEGRATORS)})")
        step = step.model_copy(update={"integrator": integrator})
    kernel, specs = _build_kernel(rig, path, single, step.dt, step.integrator)
    return rig, kernel, specs[0]
