"""Closed-loop replay of recorded logs in bam's processed format (`servo-hil replay`).

As bam's `rollout_log(simulate_control=True)` does: the firmware law acts on the *simulated* state,
the initial state is the log's first entry, the header (mass, length, arm_mass, kp, vin or
damping, dt) sets the rig, and the MAE is the mean |q_sim − q_log| over the log [rad].
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat

from hil.kernel import INTEGRATORS, Kernel
from hil.params import catalog
from hil.params.actuator import ActuatorSpec
from hil.params.bam import BamParams
from hil.params.config_file import ConfigError, Strict, validate
from hil.params.firmware import DynamixelPwmLaw, ErobPdLaw, StsPwmLaw
from servo_hil.rig import STANDARD_GRAVITY, EncoderConfig, FaultConfig, LoadConfig, kernel_params


class LogEntry(Strict):
    model_config = Strict.model_config | {"extra": "ignore"}
    position: float
    speed: float
    goal_position: float
    torque_enable: bool
    temp: float | None = None   # the servo's reported temperature [°C], where the recorder logged it


class ProcessedLog(Strict):
    """bam's processed log (bam/process.py); the Dynamixel recorder's `arm-mass` is accepted, as bam/logs.py does."""

    model_config = Strict.model_config | {"extra": "ignore", "populate_by_name": True}
    mass: NonNegativeFloat
    length: NonNegativeFloat
    arm_mass: NonNegativeFloat = Field(0.0, validation_alias="arm-mass")
    kp: NonNegativeFloat
    vin: PositiveFloat | None = None
    damping: NonNegativeFloat | None = None
    dt: PositiveFloat
    motor: str | None = None
    trajectory: str | None = None
    entries: list[LogEntry] = Field(min_length=2)


def load_log(path: Path) -> ProcessedLog:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from None
    if isinstance(data, dict) and "arm_mass" in data and "arm-mass" not in data:
        data["arm-mass"] = data.pop("arm_mass")
    return validate(ProcessedLog, data, str(path))


def log_files(path: str | Path, recordings: bool = False) -> list[Path]:
    """A log file, or every *.json in a folder (sorted), then with `recordings` the folder's side-by-side
    MCAP recordings (`servo_hil.logs.mcap.recording_files`)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if recordings:
            from servo_hil.logs.mcap import recording_files

            files += recording_files(path)
        if not files:
            kinds = "*.json or *.mcap logs" if recordings else "*.json logs"
            raise ConfigError(f"{path}: no {kinds} in this folder")
        return files
    if not path.exists():
        raise ConfigError(f"{path}: no such file or folder")
    return [path]


@dataclass
class ReplayResult:
    file: str
    t: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    q_log: np.ndarray
    mae: float

    def as_json(self) -> dict:
        return {"file": self.file, "t": self.t.tolist(), "q": self.q.tolist(), "dq": self.dq.tolist(),
                "mae": self.mae}


def log_spec(spec: ActuatorSpec, log: ProcessedLog) -> ActuatorSpec:
    """The actuator as it ran in `log`: the header's gain and supply (or eRob damping) in its firmware law."""
    fw = spec.firmware
    if isinstance(fw, DynamixelPwmLaw | StsPwmLaw):   # bam's Feetech actuator takes kp and vin from the log too
        fw = fw.model_copy(update={"kp": log.kp} | ({"supply_v": log.vin} if log.vin else {}))
    elif isinstance(fw, ErobPdLaw):
        fw = fw.model_copy(update={"kp": log.kp} | ({"damping": log.damping} if log.damping is not None else {}))
    else:
        raise ConfigError(f"{spec.name}: replay needs a position law (dxl_pwm, sts_pwm or erob_pd), not {fw.law}")
    return ActuatorSpec(spec.name, spec.motor, fw, spec.friction, spec.encoder_counts)


def log_params(spec: ActuatorSpec, log: ProcessedLog, integrator: str) -> dict:
    """The kernel parameter dict of `spec` on the pendulum and firmware settings of `log`. With a thermal model
    (an identified set's `thermal_r`), the winding starts at the log's first logged temperature, taken as the
    ambient (the servo at rest when the log starts)."""
    load = LoadConfig(mass=log.mass, length=log.length, arm_mass=log.arm_mass, gravity=STANDARD_GRAVITY)
    p = kernel_params(log_spec(spec, log), load, EncoderConfig(), FaultConfig(), integrator)
    if p["thermal_r"] > 0:
        if not log.entries or log.entries[0].temp is None:
            raise ConfigError("the parameters carry a thermal model (thermal_r), which needs logs with a logged "
                              "temperature (a `temp` in every entry)")
        p["ambient"] = log.entries[0].temp
    return p


def batch_params(specs: list[ActuatorSpec], logs: list[ProcessedLog], integrator: str) -> list[dict]:
    """`log_params(spec, log)` for every spec × log, spec-major, from one dict per spec and one per log.

    A log sets the load and the firmware's gain and supply, a spec everything else (motor, friction), so
    the keys where a log's dict differs from the first log's are taken from the log and the rest from the
    spec: the same dicts as log_params, at the cost of len(specs) + len(logs) of them.
    """
    per_log = [log_params(specs[0], log, integrator) for log in logs]
    keys = [[k for k, v in p.items() if v != per_log[0][k] and v == v] for p in per_log]   # NaN: unset
    out = []
    for spec in specs:
        base = log_params(spec, logs[0], integrator)
        out += [base | {k: p[k] for k in ks} for p, ks in zip(per_log, keys, strict=True)]
    return out


@dataclass(frozen=True)
class LogArrays:
    """What a rollout needs of a log, as arrays: dt [s], goal [rad], torque enable [0/1] and measured
    position [rad] per entry, and the first entry's speed [rad/s]; the logged temperature [°C] per
    entry when every entry has one, else None."""

    dt: float
    goal: np.ndarray
    enable: np.ndarray
    q: np.ndarray
    dq0: float
    temp: np.ndarray | None = None

    @classmethod
    def of(cls, log: ProcessedLog) -> LogArrays:
        temps = [e.temp for e in log.entries]
        return cls(log.dt, np.array([e.goal_position for e in log.entries]),
                   np.array([float(e.torque_enable) for e in log.entries]),
                   np.array([e.position for e in log.entries]), log.entries[0].speed,
                   None if any(t is None for t in temps) else np.array(temps, dtype=float))


def _fill(column: np.ndarray, x: np.ndarray, steps: int) -> None:
    """x applied `steps` late (its first value held meanwhile), then its last value held to the column's end."""
    n = len(x)
    steps = min(steps, n)
    column[:steps] = x[0]
    column[steps:n] = x[:n - steps]
    column[n:] = x[-1]


def rollout_batch(cases: list[tuple[LogArrays, dict]], delays: list[int] | None = None,
                  temperature: bool = False) -> list[tuple[np.ndarray, ...]]:
    """Closed-loop rollouts of (log, kernel parameters) cases as actuators of one kernel run per dt.

    Every case starts from its log's first state and follows its log's goals and torque enable,
    delayed by `delays[i]` steps. Logs of different lengths share a run: a shorter one holds its last
    command past its end, and its result is cut to its length. Returns (q [rad], dq [rad/s]) per case,
    the state before each step, as bam's `rollout_log` records it; with `temperature`, (q, dq, the
    published temperature [°C] before each step).
    """
    delays = delays or [0] * len(cases)
    out: list[tuple[np.ndarray, ...] | None] = [None] * len(cases)
    by_dt: dict[float, list[int]] = {}
    for i, (log, _) in enumerate(cases):
        by_dt.setdefault(log.dt, []).append(i)
    for dt, idx in by_dt.items():
        T = max(len(cases[i][0].q) for i in idx)
        goal, enable = np.empty((T, len(idx))), np.empty((T, len(idx)))
        kernel = Kernel(len(idx), dt)
        for col, i in enumerate(idx):
            log, params = cases[i]
            _fill(goal[:, col], log.goal, delays[i])
            _fill(enable[:, col], log.enable, delays[i])
            kernel.set_params(col, params)
            kernel.set_state(col, theta=log.q[0], omega=log.dq0)
        res = kernel.run(goal, enable, record=True if temperature else "state")
        for col, i in enumerate(idx):
            n = len(cases[i][0].q)
            out[i] = (res["theta"][:n, col], res["omega"][:n, col]) + \
                ((res["temperature"][:n, col],) if temperature else ())
    return out  # type: ignore[return-value]


def replay_log(log: ProcessedLog, spec: ActuatorSpec, integrator: str, name: str, delay: int = 0) -> ReplayResult:
    """Roll the actuator over one log, closed loop, from the log's first state."""
    arrays = LogArrays.of(log)
    ((q, dq),) = rollout_batch([(arrays, log_params(spec, log, integrator))], [delay])
    return ReplayResult(name, np.arange(len(q)) * log.dt, q, dq, arrays.q, float(np.mean(np.abs(q - arrays.q))))


def check_motor(log: ProcessedLog, actuator: str, where: str | Path) -> None:
    """Refuse a log whose header names another motor than `actuator` (bam's `motor` key: "xl330" for the catalog's
    xl330_m288, as bam/logs.py writes it); a log without the key is taken as it is."""
    if not log.motor or log.motor == actuator or actuator.startswith(log.motor + "_"):
        return
    from servo_hil.offline.identify.space import bounds_table

    bam_key = bounds_table()["actuators"].get(actuator, {}).get("bam")
    if log.motor != bam_key:
        raise ConfigError(f"{where}: the log was recorded on motor {log.motor!r} (its header), not on --actuator "
                          f"{actuator!r}: give the catalog actuator it was recorded on")


def replay(path: str | Path, actuator: str, model: str | None = None, params: BamParams | None = None,
           integrator: Literal["euler", "bam"] = "bam") -> list[ReplayResult]:
    """Replay a log or a folder of logs with a catalog actuator and one bam parameter set.

    The actuator runs exactly as bam's simulator does (`ActuatorSpec.bam_only`), so the MAE is
    comparable with bam's own `bam.mae`.
    """
    if (model is None) == (params is None):
        raise ConfigError("give exactly one of --model or --params")
    if integrator not in INTEGRATORS:
        raise ConfigError(f"integrator: unknown {integrator!r} (known: {', '.join(INTEGRATORS)})")
    entry = catalog.entry(actuator)
    spec = entry.actuator(model) if model else entry.actuator().with_bam(params)
    spec = spec.bam_only()
    delay = spec.friction.delay_steps if spec.friction else 0
    out = []
    for f in log_files(path):
        log = load_log(f)   # its errors name the file already
        check_motor(log, actuator, f)
        try:
            out.append(replay_log(log, spec, integrator, f.name, delay))
        except ConfigError as exc:
            raise ConfigError(f"{f}: {exc}") from None
    return out


def write_report(results: list[ReplayResult], out: str | Path) -> dict:
    """OUT.json: {"logs": [{"file", "t", "q", "dq", "mae"}], "mae": mean over logs} [rad]."""
    doc = {"logs": [r.as_json() for r in results], "mae": float(np.mean([r.mae for r in results]))}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(doc))
    return doc
