"""`servo-hil` command line. Each command is a thin layer over a library function."""

from __future__ import annotations

import enum
import math
import os
import shutil
import sys
import typing
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.markup import escape  # "[rad]" in a header is rich markup, not text
from rich.table import Table

from hil.params.config_file import ConfigError
from servo_hil.command_errors import one_line_errors
from servo_hil.offline.identify.command import identify


class _PlainArgument(typer.core.TyperArgument):
    """An argument shown as RIG in usage lines and help rows (typer writes `{RIG}` and `RIG <path>`)."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx) -> str | None:
        return None


class _PlainCommand(typer.core.TyperCommand):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if type(param) is typer.core.TyperArgument:
                param.__class__ = _PlainArgument


class _OneLineUsage(typer.core.TyperGroup):
    """A misused option or argument (a value not among the choices, a missing option) ends in one
    `servo-hil: error:` line, as every other bad input does, instead of the usage block."""

    def invoke(self, ctx):
        from typer._click.exceptions import BadParameter, MissingParameter, NoArgsIsHelpError, UsageError

        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:
            raise
        except UsageError as exc:
            # typer checks choices with pydantic, whose messages start "Value error, "
            message = exc.format_message().replace("Value error, ", "")
            if isinstance(exc, BadParameter) and not isinstance(exc, MissingParameter) and exc.param is not None:
                message = f"{exc.param.get_error_hint().strip(chr(39))}: {exc.message.removeprefix('Value error, ')}"
            where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            print(f"servo-hil: error: {message}{where}", file=sys.stderr)
            raise typer.Exit(2) from None

# help texts are plain text: units in brackets ("[kg]") must not be read as rich markup and vanish
app = typer.Typer(help="Real-time hardware-in-the-loop servo emulator.", no_args_is_help=True, cls=_OneLineUsage,
                  pretty_exceptions_enable=False, add_completion=False, rich_markup_mode=None)
actuator_app = typer.Typer(help="Inspect the actuator catalog (config/actuators/*.toml).", no_args_is_help=True,
                           rich_markup_mode=None)
app.add_typer(actuator_app, name="actuator")


class _PluginGroup(typer.core.TyperGroup):
    """A command group that another package plugs in through the `servo_hil.commands` entry point (pyproject's
    `[project.entry-points]`, as `bench` does): its module is imported only when one of its commands is listed or
    run, and the application never names it."""

    entry_point: EntryPoint

    def _loaded(self) -> typer.core.TyperGroup:
        group = _PLUGINS.get(self.entry_point.name)
        if group is None:
            plugin = self.entry_point.load()
            _plain_metavars(plugin)
            group = _PLUGINS[self.entry_point.name] = typer.main.get_group(plugin)
        return group

    def list_commands(self, ctx) -> list[str]:
        return self._loaded().list_commands(ctx)

    def get_short_help_str(self, limit: int = 45) -> str:
        return self._loaded().get_short_help_str(limit)

    def format_help_text(self, ctx, formatter) -> None:
        self._loaded().format_help_text(ctx, formatter)

    def get_command(self, ctx, name: str):
        return self._loaded().get_command(ctx, name)


_PLUGINS: dict[str, typer.core.TyperGroup] = {}
for _plugin in entry_points(group="servo_hil.commands"):
    _group = type(f"_{_plugin.name.capitalize()}Group", (_PluginGroup,), {"entry_point": _plugin})
    app.add_typer(typer.Typer(no_args_is_help=True, rich_markup_mode=None, cls=_group), name=_plugin.name)
console = Console()
Model = Literal["m1", "m2", "m3", "m4", "m5", "m6"]
Integrator = Literal["euler", "bam", "implicitfast"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


@app.command()
@one_line_errors
def simulate(
    rig: Annotated[Path, typer.Argument(help="rig TOML: [actuator] [load] [sim] [encoder] [faults] [initial], "
                                             "or a robot rig ([robot] mjcf = ...)")],
    input: Annotated[Path, typer.Option("--input", help="IN.csv with columns t,u[,enable,external_torque]; "
                                                        "a robot: t,<joint>,...[,<joint>.enable]")],
    out: Annotated[Path, typer.Option("--out", help="OUT.csv to write")],
    integrator: Annotated[Integrator | None, typer.Option(help="override [sim] integrator")] = None,
) -> None:
    """Run one actuator, or a robot's joints, offline over a command CSV; one output row per step."""
    from servo_hil.offline.simulate import simulate as run

    cols = run(rig, input, out, integrator)
    n = len(cols["t"])
    console.print(f"{n} steps ({cols['t'][-1] + (cols['t'][1] - cols['t'][0] if n > 1 else 0):.6g} s) → {out}")


@app.command()
@one_line_errors
def replay(
    logs: Annotated[Path, typer.Argument(help="a log in bam's processed JSON format, or a folder of them")],
    actuator: Annotated[str, typer.Option(help="catalog actuator, e.g. mx64, xl330_m288, erob80_100")],
    out: Annotated[Path, typer.Option(help="OUT.json: {logs: [{file, t, q, dq, mae}], mae}")],
    model: Annotated[Model | None, typer.Option(help="bam identified set of the catalog actuator")] = None,
    params: Annotated[Path | None, typer.Option(help="a bam parameter JSON file instead of --model")] = None,
    integrator: Annotated[Integrator, typer.Option(help="bam's parameters were identified with 'bam'")] = "bam",
) -> None:
    """Closed-loop replay of recorded logs through a model; prints the MAE per log."""
    from hil.params.bam import load_bam_params
    from servo_hil.offline.replay import replay as run
    from servo_hil.offline.replay import write_report

    results = run(logs, actuator, model, load_bam_params(params) if params else None, integrator)
    doc = write_report(results, out)
    table = Table(title=f"{actuator} {model or params}: closed-loop replay")
    table.add_column("log")
    table.add_column("steps", justify="right")
    table.add_column(escape("MAE [mrad]"), justify="right")
    for r in results:
        table.add_row(r.file, str(len(r.t)), f"{1e3 * r.mae:.2f}")
    table.add_row("mean", "", f"{1e3 * doc['mae']:.2f}", style="bold")
    console.print(table)


app.command()(one_line_errors(identify))


@app.command()
@one_line_errors
def report(
    logs: Annotated[Path, typer.Argument(help="a bam processed log JSON or a side-by-side LOG.mcap, or a folder "
                                              "of either")],
    out: Annotated[Path, typer.Option(help="output folder: one PNG per log and joint, report.md, report.json")],
    actuator: Annotated[str | None, typer.Option(help="JSON logs: catalog actuator to replay them with, "
                                                      "e.g. xl330_m288")] = None,
    # checked by the report, which names the sets the actuator has
    model: Annotated[list[str] | None, typer.Option(metavar="|".join(typing.get_args(Model)),
                                                    help="JSON logs: bam identified set; repeatable")] = None,
    all_models: Annotated[bool, typer.Option("--all-models", help="JSON logs: every model of the actuator "
                                                                  "(m1..m6), ranked by mean MAE")] = False,
    integrator: Annotated[Integrator, typer.Option(help="bam's parameters were identified with 'bam'")] = "bam",
) -> None:
    """Sim vs real: plots per log and joint, and MAE / RMSE / max error tables (per friction model for replays)."""
    from servo_hil.offline.report import report as make_report

    doc = make_report(logs, out, actuator, model or [], all_models, integrator)
    names = _short_names([r["log"] for r in doc["rows"]])
    table = Table(title=f"sim vs real: {logs} (mrad)")
    for col in ("log", "joint", "model", "MAE", "RMSE", "max |err|"):
        table.add_column(col, justify="left" if col in ("log", "joint", "model") else "right",
                         overflow="fold" if col == "log" else "ellipsis")
    for r in doc["rows"]:
        table.add_row(names[r["log"]], r["joint"], r["model"] or "sim", f"{1e3 * r['mae_rad']:.2f}",
                      f"{1e3 * r['rmse_rad']:.2f}", f"{1e3 * r['max_abs_err_rad']:.2f}")
    console.print(table)
    if len(doc["model_summary"]) > 1:
        ranked = Table(title="models by mean MAE over the logs (best first)")
        for col in ("rank", "model", "mean MAE (mrad)", "best on"):
            ranked.add_column(col, justify="left" if col == "model" else "right")
        for s in doc["model_summary"]:
            ranked.add_row(str(s["rank"]), s["model"], f"{1e3 * s['mean_mae_rad']:.2f}", f"{s['best_on']}/{s['logs']}")
        console.print(ranked)
    for warning in doc.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True)
    console.print(f"{len({r['plot'] for r in doc['rows']})} plots, report.md, report.json → {out}")


def _short_names(names: list[str]) -> dict[str, str]:
    """Each log name without the prefix and extension all of them share (kept readable in 80 columns)."""
    stems = {n: n.removesuffix(".json").removesuffix(".mcap") for n in names}
    # character by character on purpose: names, not paths
    prefix = os.path.commonprefix(list(stems.values())) if len(set(stems.values())) > 1 else ""  # noqa: RUF071
    prefix = prefix[: max(prefix.rfind("_"), prefix.rfind("-")) + 1]   # cut at a word boundary
    return {n: ("…" if prefix else "") + stem[len(prefix):] for n, stem in stems.items()}


@app.command()
@one_line_errors
def run(
    rig: Annotated[Path, typer.Argument(help="daemon rig TOML (e.g. config/rigs/default.toml)")],
    mqtt: Annotated[bool | None, typer.Option(
        "--mqtt/--no-mqtt", help="run the MQTT control plane (default: the rig's [mqtt] enabled)")] = None,
    port: Annotated[list[str] | None, typer.Option(
        "--port", help="create the bus at this path (a pty symlink): PATH for a rig with one bus, "
                       "or BUS=PATH; repeatable")] = None,
    log_level: Annotated[LogLevel, typer.Option(help="how much the daemon logs")] = "INFO",
    console: Annotated[bool, typer.Option(
        help="serve the web console (docs/console.md) at http://127.0.0.1:8780/ when the rig has no "
             "[console] table")] = False,
) -> None:
    """Run the emulator daemon: real-time loop, ZeroMQ joint state and commands, MQTT control plane,
    and the rig's servo buses (each prints the port a controller opens)."""
    from servo_hil.console.server import Console
    from servo_hil.daemon.service import serve

    serve(rig, mqtt, port or [], log_level, console=console, console_factory=Console)


@app.command()
@one_line_errors
def mirror(
    rig: Annotated[Path, typer.Argument(help="daemon rig TOML whose bus servos become the simulated twins")],
    real: Annotated[list[str] | None, typer.Option(
        "--real", help="the real bus: a serial device (dynamixel, dynamixel1, feetech) or a python-can bus "
                       "INTERFACE:CHANNEL[@BITRATE] such as slcan:/dev/ttyACM0@1000000 (canopen), an Etherban server "
                       "tcp://HOST:PORT (etherban); "
                       "REAL for a rig with one bus, or BUS=REAL; "
                       "default: the rig's real = ...")] = None,
    port: Annotated[list[str] | None, typer.Option(
        "--port", help="the pty the controller opens: PATH or BUS=PATH")] = None,
    record: Annotated[Path | None, typer.Option(
        file_okay=False, metavar="DIRECTORY", help="folder for side-by-side MCAP logs (/real, /sim, /bus), created "
                                                   "when recording starts")] = None,
    record_segment_s: Annotated[float | None, typer.Option(
        help="seconds of log time per MCAP file (segment); default: the rig's record_segment_s, 600")] = None,
    mqtt: Annotated[bool | None, typer.Option("--mqtt/--no-mqtt", help="run the MQTT control plane")] = None,
    log_level: Annotated[LogLevel, typer.Option(help="how much the daemon logs")] = "INFO",
) -> None:
    """Proxy mirror: forward an unchanged controller's packets (Dynamixel, Feetech) or frames (eRob CANopen) to the real
    bus and its replies back unchanged, while the same writes drive a simulated twin of each servo (logged
    side by side)."""
    from servo_hil.rig import read_rig

    if not real and not any(b.real for b in read_rig(rig).buses):
        raise ConfigError(f"{rig}: no bus has real = ...: give --real REAL or BUS=REAL")
    from servo_hil.console.server import Console
    from servo_hil.daemon.service import serve

    # a mirror that fails to start (the real port will not open) leaves no empty log folder behind
    folders = [record] if record is not None else [Path(b.record) for b in read_rig(rig).buses if b.record]
    created = [_first_missing(f) for f in folders if not f.exists()]
    try:
        serve(rig, mqtt, port or [], log_level, real=real or [], record=None if record is None else str(record),
              record_segment_s=record_segment_s, console_factory=Console)
    except BaseException:
        for top in created:
            if top.is_dir() and not any(p.is_file() for p in top.rglob("*")):
                shutil.rmtree(top, ignore_errors=True)
        raise


def _first_missing(path: Path) -> Path:
    """The outermost folder of `path` that does not exist yet (what creating `path` would create first)."""
    top = path
    while not top.parent.exists() and top.parent != top:
        top = top.parent
    return top


@app.command()
@one_line_errors
def recover(path: Annotated[Path, typer.Argument(help="an MCAP file, or a folder of them")]) -> None:
    """Rewrite each MCAP file cut short by a kill as a complete, indexed one (atomically, in place)."""
    from servo_hil.logs.recover import recover as run

    results = run(path)
    if not results:
        raise ConfigError(f"{path}: no .mcap files in this folder")
    for r in results:
        print(f"servo-hil: error: {r}" if r.status == "unreadable" else r,
              file=sys.stderr if r.status == "unreadable" else sys.stdout)
    if any(r.status == "unreadable" for r in results):
        raise typer.Exit(2)


@app.command()
@one_line_errors
def record(
    out: Annotated[Path, typer.Option(help="output folder: raw/ and processed/ bam logs")],
    mass: Annotated[float, typer.Option(help="pendulum mass [kg]")],
    length: Annotated[float, typer.Option(help="pendulum length [m]")],
    motor: Annotated[str, typer.Option(help="the motor name bam's tools expect, e.g. xl330, mx64, erob80_100")],
    protocol: Annotated[Literal["dynamixel", "feetech", "etherban", "canopen"], typer.Option(
        help="dynamixel (dynamixel-sdk on --port), feetech (scservo_sdk on --port), etherban (bam's eRob client "
             "to --endpoint) or canopen (python-canopen on the python-can bus --endpoint)")] = "dynamixel",
    port: Annotated[str | None, typer.Option(help="dynamixel, feetech: the servo's serial port (a real adapter, "
                                                  "or a servo-hil bus)")] = None,
    endpoint: Annotated[str | None, typer.Option(
        help="etherban: the server, default tcp://127.0.0.1:7332; canopen: a python-can bus "
             "INTERFACE:CHANNEL[@BITRATE], e.g. slcan:/tmp/ttyCAN@1000000")] = None,
    servo_id: Annotated[int, typer.Option("--id", help="dynamixel, feetech: the servo's ID")] = 1,
    node: Annotated[int | None, typer.Option(help="canopen: the eRob's node ID")] = None,
    device: Annotated[int, typer.Option(help="etherban: the eRob's device index")] = 0,
    baud: Annotated[int, typer.Option(help="dynamixel, feetech: bus baud rate [bit/s]")] = 1_000_000,
    kp: Annotated[list[float] | None, typer.Option(
        help="gains to sweep (repeatable): dynamixel Position P Gain (integer, default 400); feetech P "
             "Coefficient (integer, default 32); eRob host PD [A/rad] (default 25)")] = None,
    damping: Annotated[float | None, typer.Option(
        help="eRob: the PD's damping, D = damping·√kp (default bam's: 2.0 for erob80_100, 1.0 for erob80_50)")] = None,
    kt: Annotated[float | None, typer.Option(
        help="canopen: kt [N·m/A] to turn the PD's amps into CST torque (default: the drive's 0x6076/0x6075)")] = None,
    offset: Annotated[float, typer.Option(help="eRob: the drive position of the pendulum hanging down [rad]")] = 0.0,
    trajectory: Annotated[list[str] | None, typer.Option(
        help="sin_sin, lift_and_drop, up_and_down, sin_time_square (repeatable; default: all four)")] = None,
    duration: Annotated[float, typer.Option(help="seconds of each trajectory (bam: 6)")] = 6.0,
    arm_mass: Annotated[float, typer.Option(help="uniform arm mass [kg]")] = 0.0,
) -> None:
    """Identification run on a real servo: drive it (Dynamixel, Feetech, or an eRob through Etherban or CANopen with
    bam's host PD) through bam's excitation trajectories at each gain and record bam's raw and processed JSON logs
    (for `replay`, `report`, `identify` and bam's own fitting)."""
    from servo_hil.record.excitation import TRAJECTORIES
    from servo_hil.record.sweep import check_trajectories

    trajectories = trajectory or list(TRAJECTORIES)
    check_trajectories(trajectories)
    if not duration > 0:
        raise ConfigError(f"--duration {duration}: must be > 0 s")
    header = {"mass": mass, "length": length, "arm_mass": arm_mass, "motor": motor}
    if protocol == "dynamixel":
        from servo_hil.record.dynamixel import record as run

        if port is None:
            raise ConfigError("--port: give the Dynamixel bus's serial port")
        gains = kp or [400]
        if any(k != int(k) for k in gains):
            raise ConfigError(f"--kp {next(k for k in gains if k != int(k))}: a Position P Gain is an integer")
        files = run(port, servo_id, baud, trajectories, [int(k) for k in gains], header, out, duration)
    elif protocol == "feetech":
        from servo_hil.record.feetech import BAM_KP
        from servo_hil.record.feetech import record as run

        if port is None:
            raise ConfigError("--port: give the Feetech bus's serial port")
        gains = kp or [BAM_KP]
        if any(k != int(k) or not 0 <= k <= 255 for k in gains):
            bad = next(k for k in gains if k != int(k) or not 0 <= k <= 255)
            raise ConfigError(f"--kp {bad:g}: a P Coefficient is an integer 0..255 (one byte)")
        files = run(port, servo_id, baud, trajectories, [int(k) for k in gains], header, out, duration)
    else:
        from drivers.hosts.erob_link import open_link
        from servo_hil.record.erob import BAM_DAMPING
        from servo_hil.record.erob import record as run

        if damping is None:
            if motor not in BAM_DAMPING:
                raise ConfigError(f"--damping: give it for motor {motor!r} (bam's defaults: {BAM_DAMPING})")
            damping = BAM_DAMPING[motor]
        link = open_link(protocol, endpoint, device, node, kt)
        files = run(link, trajectories, kp or [25.0], damping, header, out, offset, duration)
    print(f"{len(files) // 2} runs → {out}/raw, {out}/processed")


@app.command()
@one_line_errors
def status(
    command: Annotated[str, typer.Option(help="the daemon's command endpoint, tcp://HOST:PORT")] = "tcp://127.0.0.1:9873",
    check: Annotated[bool, typer.Option("--check", help="exit 0 if the loop runs, 1 if not (health check)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the raw status as JSON")] = False,
    watch: Annotated[float | None, typer.Option(
        "--watch", min=0.1, help="refresh every this many seconds until Ctrl-C")] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the daemon")] = 2.0,
) -> None:
    """Live status of a running daemon (loop timing, steal, actuators, faults)."""
    import json
    import time

    from rich.console import Group
    from rich.live import Live

    from servo_hil.daemon.zmq_io import request
    from servo_hil.rig import check_endpoint

    try:
        check_endpoint(command)
    except ValueError as exc:
        raise ConfigError(f"--command: {exc}") from None
    if not timeout > 0:
        raise ConfigError(f"--timeout {timeout:g}: must be > 0 s")

    def ask() -> dict:
        try:
            return request(command, {"cmd": "status"}, timeout)
        except TimeoutError as exc:
            print(f"servo-hil: error: {exc}", file=sys.stderr)
            raise typer.Exit(1) from None

    reply = ask()
    st = reply.get("status", {})
    if check:
        # alive, and ticking unless it waits for `step` (lock-step) or was paused on purpose
        healthy = bool(reply.get("ok") and st.get("loop_alive")
                       and (st.get("tick", 0) > 0 or st.get("lockstep") or st.get("paused")))
        print("healthy" if healthy else f"unhealthy: {reply.get('error', st)}")
        raise typer.Exit(0 if healthy else 1)
    if as_json:
        print(json.dumps(st, indent=1))
        return
    if watch is None:
        console.print(*_status_tables(st))
        return
    try:
        with Live(Group(*_status_tables(st)), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(watch)
                live.update(Group(*_status_tables(ask().get("status", {}))), refresh=True)
    except KeyboardInterrupt:
        pass


# a latched shutdown turns the torque off whatever the controller's Torque Enable says
_LATCHED = ("overheat", "overload")


def _status_tables(st: dict) -> tuple[Table, Table]:
    """The loop's table and the actuators' table of a daemon's status."""
    def us(x):
        return "-" if x is None else f"{x:.0f} µs"

    t = Table(title=f"servo-hil rig {st['rig']!r} (pid {st['pid']})")
    t.add_column("loop")
    t.add_column("value", justify="right")
    for k, v in (("rate", f"{st['rate_hz']:g} Hz{' lock-step' if st['lockstep'] else ''}"),
                 ("scheduling", st["rt_mode"]), ("simulated time", f"{st['t']:.3f} s"),
                 ("paused", str(st["paused"])),
                 ("lateness p50 / p99 / p99.9", f"{us(st['lateness_p50_us'])} / {us(st['lateness_p99_us'])} / "
                                                f"{us(st['lateness_p999_us'])}"),
                 ("overruns", f"{st['overruns']} ({100 * st['overrun_fraction']:.3f} %)"),
                 ("hypervisor steal", f"{100 * st['steal_fraction']:.2f} %"), ("CPU", f"{st['cpu_percent']:.1f} %"),
                 ("sample drops", str(st["sample_drops"]))):
        t.add_row(k, v)
    a = Table()
    for col in map(escape, ("actuator", "mode", "torque", "position [rad]", "temperature [°C]", "faults")):
        a.add_column(col, no_wrap=col in ("torque", "faults"))
    for name, s in st["actuators"].items():
        temp = "-" if s["temperature"] is None else f"{s['temperature']:.1f}"
        latched = [f for f in s["faults"] if f in _LATCHED]
        torque = "off" if not s["enable"] else f"off ({', '.join(latched)})" if latched else "on"
        a.add_row(name, s["mode"], torque, f"{s['position']:.4f}", temp, ", ".join(s["faults"]) or "-")
    return t, a


@actuator_app.command("list")
def actuator_list() -> None:
    """The catalog's actuators and their identified models."""
    from hil.params import catalog

    table = Table()
    for col in ("name", "title", "models"):
        table.add_column(col)
    for name in catalog.names():
        e = catalog.entry(name)
        table.add_row(name, e.title, " ".join(sorted(e.models)) or "-")
    console.print(table)


@actuator_app.command("show")
@one_line_errors
def actuator_show(
    name: Annotated[str, typer.Argument(help="catalog actuator")],
    model: Annotated[Model | None, typer.Option(help="use bam's identified set mN")] = None,
    voltage: Annotated[float | None, typer.Option(help="[V]; default: the datasheet voltage")] = None,
) -> None:
    """The motor quantities a datasheet lists (stall torque, no-load speed, time constants, as the MuJoCo DC motor
    model derives them) at the output shaft, beside the datasheet's, with why they differ."""
    from hil.params import catalog
    from servo_hil.offline.actuator_plots import supply_voltage

    entry = catalog.entry(name)
    spec = entry.actuator(model)
    v = voltage or entry.datasheet.voltage_v or supply_voltage(spec)
    d = spec.motor.derived(v)
    ds = entry.datasheet
    table = Table(title=f"{entry.title}{' — bam ' + model if model else ''} at {v:g} V (output shaft)")
    for col in ("quantity", "model", "datasheet"):
        table.add_column(col, justify="right" if col != "quantity" else "left")

    def fmt(x: float | None, unit: str = "") -> str:
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4g}{unit}"

    same_v = ds.voltage_v == v
    rpm = 60 / (2 * math.pi)
    rows = [
        ("stall torque τ0 = kt·v/R", fmt(d["stall_torque_nm"], " N·m"),
         fmt(ds.stall_torque_nm if same_v else None, " N·m")),
        ("stall current v/R", fmt(d["stall_current_a"], " A"), fmt(ds.stall_current_a if same_v else None, " A")),
        ("no-load speed v·kt/(kt²+RB)", fmt(d["no_load_speed_rad_s"] * rpm, " rpm"),
         fmt(ds.no_load_speed_rpm if same_v else None, " rpm")),
        ("gradient −R/kt²", fmt(d["gradient_rad_s_per_nm"] * rpm, " rpm/(N·m)"), "-"),
        ("mechanical time constant RJ/kt²", fmt(d["mechanical_time_constant_s"] * 1e3, " ms"), "-"),
        ("electrical time constant L/R", fmt(d["electrical_time_constant_s"] * 1e3, " ms"), "-"),
        # imax is the current limit the firmware (or bam's host PD) enforces, not MuJoCo's nominal (continuous)
        # current, so kt·imax is a ceiling, not the rated torque (MuJoCo DC motor model §3 Table 19: τn = kt·imax)
        ("torque at the current limit kt·imax", fmt(d["nominal_torque_nm"], " N·m"), "-"),
        ("rated (continuous) torque", "-", fmt(ds.rated_torque_nm, " N·m")),
        (f"torque constant kt ({'motor' if spec.motor.gear != 1 else 'output'} side)",
         fmt(d["kt_nm_per_a"], " N·m/A"), "-"),
        ("resistance R", fmt(d["resistance_ohm"], " Ω"), "-"),
        ("gear ratio (model)", fmt(spec.motor.gear), fmt(ds.gear_ratio)),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for line in _model_vs_datasheet(spec.motor.gear, ds.gear_ratio, d["stall_torque_nm"],
                                    ds.stall_torque_nm if same_v else None, model):
        console.print(line)
    for line in _torque_limit_notes(d["nominal_torque_nm"], d["stall_torque_nm"], v, ds.rated_torque_nm):
        console.print(line)


def _torque_limit_notes(limit_nm: float, stall_nm: float, volts: float, rated_nm: float | None) -> list[str]:
    """What the current limit's torque means beside the stall torque and the datasheet's rated torque."""
    if math.isnan(limit_nm):
        return []
    lines = [f"kt·imax {limit_nm:.4g} N·m: imax is the current limit the firmware (or bam's host PD) "
             "enforces, the catalog's saturation, not a continuous rating"
             + (f"; above the stall torque {stall_nm:.4g} N·m it never binds at {volts:g} V (the winding draws "
                "at most v/R), the supply caps the torque" if limit_nm > stall_nm else "") + "."]
    if rated_nm:
        lines.append(f"rated torque {rated_nm:.4g} N·m: the datasheet's continuous (thermal) rating, which the model "
                     "meets through its winding temperature, not as a torque limit.")
    return lines


def _model_vs_datasheet(gear: float, datasheet_gear: float | None, stall_nm: float, datasheet_stall_nm: float | None,
                        model: str | None) -> list[str]:
    """Why the model's column differs from the datasheet's, one line each."""
    lines = []
    if gear == 1 and datasheet_gear and datasheet_gear > 1:
        lines.append(f"gear 1 vs {datasheet_gear:g}: the model lumps motor and gearbox at the output shaft, so kt, R "
                     "and the armature are output-side equivalents (as bam identifies them), not the motor's own.")
    if datasheet_stall_nm and abs(stall_nm / datasheet_stall_nm - 1) > 0.1:
        source = f"bam's {model} constants fitted to motion logs" if model else "the catalog's constants"
        lines.append(f"stall torque {stall_nm:.3g} vs {datasheet_stall_nm:.3g} N·m: kt·v/R of {source}; the "
                     "datasheet's figure is a measured stall, which the firmware's current limit and the "
                     "gearbox efficiency cap.")
    return lines


@actuator_app.command("plot")
@one_line_errors
def actuator_plot(
    name: Annotated[str, typer.Argument(help="catalog actuator")],
    out: Annotated[Path, typer.Option(help="PNG file (the drive/backdrive diagram goes next to it, *_drive.png)")],
    model: Annotated[Model | None, typer.Option(help="bam identified set; adds its drive/backdrive diagram")] = None,
    voltage: Annotated[float | None, typer.Option(help="[V]; default: the firmware's maximum output voltage")] = None,
) -> None:
    """Torque–speed envelope and, with --model, the drive/backdrive diagram, as PNG."""
    from hil.params import catalog
    from servo_hil.offline.actuator_plots import drive_backdrive_figure, torque_speed_figure

    spec = catalog.entry(name).actuator(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    torque_speed_figure(spec, voltage).savefig(out, dpi=120)
    console.print(f"torque–speed envelope → {out}")
    if model:
        drive = out.with_name(out.stem + "_drive" + out.suffix)
        drive_backdrive_figure(spec).savefig(drive, dpi=120)
        console.print(f"drive/backdrive diagram → {drive}")


@actuator_app.command("export")
@one_line_errors
def actuator_export(
    name: Annotated[str, typer.Argument(help="catalog actuator")],
    model: Annotated[Model | None, typer.Option(help="bam identified set")] = None,
    mjcf: Annotated[Path | None, typer.Option(help="OUT.xml: the closest MuJoCo <dcmotor> and its joint's damping, "
                                                   "frictionloss and armature (MuJoCo 3.7-3.11)")] = None,
    isaaclab: Annotated[Path | None, typer.Option(help="OUT.json or OUT.yaml: Isaac Lab DCMotorCfg parameters")] = None,
    dt: Annotated[float, typer.Option(help="the MJCF's <option timestep> [s]: the step the model runs at (the "
                                           "daemon's 1 kHz loop by default)")] = 0.001,
    eds: Annotated[Path | None, typer.Option(help="OUT.eds: a CANopen drive's object dictionary as an EDS, for "
                                                  "python-canopen's BaseNode402 (eRobs only)")] = None,
) -> None:
    """The actuator for another simulator: MuJoCo MJCF and / or Isaac Lab DCMotor parameters, each followed by
    what the target cannot represent; for an eRob, the EDS a CANopen controller loads."""
    from servo_hil.offline.actuator_export import export

    targets = {"mjcf": ("MuJoCo <dcmotor>", mjcf), "isaaclab": ("Isaac Lab DCMotor", isaaclab),
               "eds": ("CANopen EDS", eds)}
    for target, lost in export(name, model, mjcf, isaaclab, eds, timestep=dt).items():
        title, path = targets[target]
        console.print(f"{title} → {escape(str(path))}")
        if target == "eds":
            continue
        console.print(f"  not represented ({len(lost)}):" if lost else "  not represented: nothing")
        for line in lost:
            console.print(f"  - {escape(line)}", soft_wrap=True)


def _plain_metavars(typer_app: typer.Typer) -> None:
    """Help shows RIG, PATH, TEXT, NUMBER rather than the Python types (`<list[str]>`, `{rig}`): every argument
    and option without its own metavar gets one from its name or its type."""
    import inspect
    import types
    import typing

    words = {Path: "PATH", str: "TEXT", float: "NUMBER", int: "INTEGER"}
    for info in typer_app.registered_commands:
        if info.cls in (None, typer.core.TyperCommand):
            info.cls = _PlainCommand
        hints = typing.get_type_hints(info.callback, include_extras=True)
        for name, hint in hints.items():
            if typing.get_origin(hint) is not Annotated:
                continue
            base, *extras = typing.get_args(hint)
            for param in extras:
                if isinstance(param, typer.models.ArgumentInfo) and param.metavar is None:
                    param.metavar = name.upper()
                elif isinstance(param, typer.models.OptionInfo) and param.metavar is None:
                    kind = base
                    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:   # X | None
                        kind = next(a for a in typing.get_args(kind) if a is not type(None))
                    if typing.get_origin(kind) is list:
                        kind = typing.get_args(kind)[0]
                    if typing.get_origin(kind) is Literal:
                        param.metavar = "|".join(str(c) for c in typing.get_args(kind))
                    elif isinstance(kind, type) and issubclass(kind, enum.Enum):
                        param.metavar = "|".join(str(c.value) for c in kind)
                    elif kind in words:
                        param.metavar = words[kind]
        # evaluated once: typer reads these objects (through any wrapper), not fresh copies of the strings
        info.callback.__annotations__ = inspect.unwrap(info.callback).__annotations__ = hints
    for group in typer_app.registered_groups:
        _plain_metavars(group.typer_instance)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"servo-hil {version('servo-hil')}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.", is_eager=True, callback=_print_version)] = False) -> None:
    """Real-time hardware-in-the-loop servo emulator."""


_plain_metavars(app)

if __name__ == "__main__":
    app()
