"""`servo-hil bench`: the benchmarks as a typer sub-app. The `servo-hil` CLI loads this module only when a `bench`
command runs, so the CLI starts without bench/ and hil/ never imports it otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from hil.params.config_file import ConfigError
from servo_hil.command_errors import one_line_errors

bench_app = typer.Typer(help="Benchmarks that print JSON.", no_args_is_help=True, rich_markup_mode=None)


def _print_json(result: dict, out: Path | None) -> None:
    """Print a benchmark's result as JSON, and write the same text to `out` if given."""
    import json

    text = json.dumps(result, indent=2)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    print(text)


@bench_app.command("kernel")
@one_line_errors
def bench_kernel(
    quick: Annotated[bool, typer.Option("--quick", help="short samples (a smoke test)")] = False,
    min_time: Annotated[float | None, typer.Option(help="seconds per sample (default 0.5, --quick 0.03)")] = None,
    repeats: Annotated[int | None, typer.Option(help="samples per measurement (default 9, --quick 5)")] = None,
    bam: Annotated[bool, typer.Option("--bam/--no-bam", help="also time bam's step (the peer)")] = True,
    ablate: Annotated[bool, typer.Option("--ablate", help="add a per-feature cost breakdown at N = 1024")] = False,
    simd: Annotated[Literal["scalar", "avx2", "avx512"] | None, typer.Option(
        help="force the kernel's vector-math path (default: the best this CPU has)")] = None,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """Kernel actuator-steps per second against MuJoCo's mj_step and bam's step in the same run, as JSON."""
    from bench.kernel import run as bench

    _print_json(bench(quick, min_time, repeats, bam, ablate, simd), out)


@bench_app.command("identify")
@one_line_errors
def bench_identify(
    trials: Annotated[int, typer.Option(min=1, help="evaluations per fit, both tools (bam's --trials)")] = 2000,
    models: Annotated[str, typer.Option(help="models to fit, comma-separated")] = "m4,m6",
    seeds: Annotated[str, typer.Option(help="identify's seeds, comma-separated: one run of it per seed")] = "0",
    bam_runs: Annotated[int, typer.Option(min=1, help="runs of bam's fit per model (it has no seed option)")] = 1,
    bam: Annotated[bool, typer.Option("--bam/--no-bam", help="also run bam's fit (minutes per run)")] = True,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """`servo-hil identify` against bam's fit on the 12 XL330 logs at equal evaluations: wall and CPU time,
    training and validation MAE per run and their medians, as JSON."""
    from bench.identify import run as bench

    try:
        seed_list = [int(x) for x in seeds.split(",")]
    except ValueError:
        raise ConfigError(f"--seeds {seeds!r}: expected integers separated by commas") from None
    _print_json(bench(trials, models.split(","), seed_list, bam_runs, bam), out)


@bench_app.command("first-run")
def bench_first_run(
    no_cache: Annotated[bool, typer.Option("--no-cache", help="no pip cache, as on a new machine")] = False,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """A fresh clone of this checkout to a running daemon (`make run`), against pip installing the same
    runtime dependencies in the same run, as JSON."""
    from bench.first_run import run as bench

    _print_json(bench(no_cache), out)


@bench_app.command("robot")
@one_line_errors
def bench_robot(
    rig: Annotated[Path, typer.Option(help="a robot rig ([robot] mjcf = ...)")] = Path("config/rigs/desktop_arm.toml"),
    seconds: Annotated[float, typer.Option(help="simulated seconds per window")] = 2.0,
    repeats: Annotated[int, typer.Option(help="windows (the median is reported)")] = 3,
    peer: Annotated[bool, typer.Option(help="also time bam's MujocoController on the same model")] = True,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """A robot rig's physics steps per second and mj_step's share, against bam's MujocoController.update()
    + mj_step from Python on the same model in the same run, as JSON."""
    from bench.robot import run as bench

    _print_json(bench(rig, seconds, repeats, peer), out)


@bench_app.command("console")
@one_line_errors
def bench_console(
    seconds: Annotated[float, typer.Option(help="length of each window [s]")] = 5.0,
    rounds: Annotated[int, typer.Option(help="windows of each kind (no browser, three browsers), alternating")] = 3,
    actuators: Annotated[int, typer.Option(help="MX-64 pendulums on the rig's Dynamixel bus")] = 4,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """The loop's lateness p50/p99 with three headless Chromium browsers on the web console's live plot against
    none, in one run, as JSON (needs `make browser`)."""
    from bench.console import run as bench

    _print_json(bench(seconds, rounds, actuators), out)


@bench_app.command("loop")
@one_line_errors
def bench_loop(
    rate: Annotated[float, typer.Option(help="loop rate [Hz]")] = 1000.0,
    seconds: Annotated[float, typer.Option(help="measurement window [s]")] = 10.0,
    actuators: Annotated[int, typer.Option(help="MX-64 pendulums in the rig")] = 32,
    publish_every: Annotated[int, typer.Option(help="publish one tick in N")] = 1,
    rig: Annotated[Path | None, typer.Option(help="the actuators (and robot) of this rig instead of pendulums; "
                                                  "a robot rig adds its offline figures and bam's peer")] = None,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """The daemon's loop lateness, overruns, CPU, steal and ZeroMQ latency/drops, as JSON."""
    from bench.loop import run as bench

    _print_json(bench(rate, seconds, actuators, publish_every, rig_path=rig), out)


@bench_app.command("dynamixel")
def bench_dynamixel(
    reads: Annotated[int, typer.Option(min=1, help="timed 4-byte reads per configuration")] = 500,
    cycles: Annotated[int, typer.Option(
        min=1, help="timed Sync Read + Sync Write cycles, and as many Sync Reads alone, per configuration")] = 300,
    quick: Annotated[bool, typer.Option("--quick", help="short run: at most 100 reads and 50 cycles")] = False,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """dynamixel-sdk round trips (read, Sync Read + Sync Write, Sync Read alone) against 12 XM430 at 1 and
    4 Mbps vs the wire-time bound, paced and fast, with an echo peer as the SDK floor, as JSON (exit 0 even
    on a miss)."""
    from bench.dynamixel import run as bench

    _print_json(bench(reads, cycles, quick=quick), out)


@bench_app.command("feetech")
def bench_feetech(
    cycles: Annotated[int, typer.Option(min=1, help="timed Sync Reads per server")] = 1000,
    quick: Annotated[bool, typer.Option("--quick", help="short run: at most 100 Sync Reads per server")] = False,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """scservo_sdk's GroupSyncRead of Present_Position + Present_Speed from 6 STS3215 at 1 Mbit/s, paced, against
    the wire time plus an echo peer's floor measured in the same run, as JSON (exit 0 even on a miss)."""
    from bench.feetech import run as bench

    _print_json(bench(cycles, quick=quick), out)


@bench_app.command("dynamixel-timeline")
def bench_dynamixel_timeline(
    baud: Annotated[int, typer.Option(min=9600, help="line rate [bit/s] the SDK opens the port at")] = 1_000_000,
    rdt: Annotated[int, typer.Option(min=0, max=254, help="Return Delay Time register [2 µs units]")] = 0,
    n: Annotated[int, typer.Option(min=1, help="4-byte reads, then as many Sync Read + Sync Write cycles")] = 300,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """Where a paced round trip's time goes: the daemon's bus steps and the SDK's port calls stamped on one
    clock, medians relative to the request's write, against the wire bound, as JSON (a diagnostic)."""
    from bench.dynamixel_timeline import run as timeline

    _print_json(timeline(baud, rdt, n), out)


@bench_app.command("dynamixel-packets")
def bench_dynamixel_packets(
    kind: Annotated[str, typer.Argument(help="sync_read, sync_write (every goal changed), sync_write_same or read4")],
    n: Annotated[int, typer.Argument(min=1, help="packets to feed")],
) -> None:
    """Feed N packets of KIND through the bus of `bench dynamixel`'s rig in this process, as its thread does
    (for valgrind: instructions per packet = the difference of two N over their difference)."""
    from bench.dynamixel_packets import KINDS, run

    if kind not in KINDS:
        raise typer.BadParameter(f"{kind!r} is not one of {', '.join(KINDS)}", param_hint="KIND")
    print(f"{kind}: {n} packets, {run(kind, n)} replies")


@bench_app.command("erob")
def bench_erob(
    cycles: Annotated[int, typer.Option(min=1, help="timed 1 kHz cycles per phase")] = 5000,
    quick: Annotated[bool, typer.Option("--quick", help="short run: at most 300 cycles per phase")] = False,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """Two eRobs at 1 kHz: CANopen RPDO + SYNC → TPDO round trips over SLCAN (misses, p50/p99 vs the wire
    floor) and Etherban request/response (p50/p99, overruns), with echo peers as the client floor, as JSON
    (exit 0 even on a miss)."""
    from bench.erob import run as bench

    _print_json(bench(cycles, quick=quick), out)


@bench_app.command("lerobot")
@one_line_errors
def bench_lerobot(
    family: Annotated[Literal["koch", "so101"], typer.Option(help="the arms: Koch v1.1 or SO-101")] = "koch",
    seconds: Annotated[float, typer.Option(min=1.0, help="teleoperation time [s]")] = 10.0,
    hz: Annotated[float, typer.Option(min=1.0, max=200.0, help="LeRobot's loop rate [Hz]")] = 100.0,
    pair: Annotated[bool, typer.Option(help="both arms in one daemon (config/rigs/<family>_pair.toml)")] = False,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """LeRobot's own follower and leader classes on the emulated arms (needs `make lerobot`): calibrated with the
    daemon's hand, then teleoperated: the follower's tracking error per joint, the loops' lateness, LeRobot's Sync
    Read round trip against its wire time and steal, as JSON."""
    from bench.lerobot import run as bench

    _print_json(bench(family, seconds, hz, pair=pair), out)


@bench_app.command("lost-replies")
@one_line_errors
def bench_lost_replies(
    seconds: Annotated[float, typer.Option(min=1.0, max=600.0, help="Sync Reads for this long per phase [s]")] = 20.0,
    hz: Annotated[float, typer.Option(min=1.0, max=500.0, help="LeRobot's Sync Reads per second per arm")] = 100.0,
    load: Annotated[int | None, typer.Option(min=0, max=64, help="busy processes (default: two per core)")] = None,
    compare: Annotated[bool, typer.Option(help="first the daemon as it ran before its bus threads asked for "
                                                   "SCHED_FIFO, then as it is")] = False,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """LeRobot's Sync Read of the so101 and koch arms at 100 Hz while busy processes load every core (needs `make
    lerobot`): replies lost, the client's round trip against the wire time, and where the bus threads' time
    went, with steal, as JSON."""
    from bench.lost_replies import run as bench

    _print_json(bench(seconds, hz, load, compare=compare), out)


@bench_app.command("soak")
@one_line_errors
def bench_soak(
    seconds: Annotated[float, typer.Option(help="counted run per server [s]")] = 3600.0,
    baud: Annotated[int | None, typer.Option(help="line speed [bit/s]; default bench/soak.py's BAUD, 4 Mbit/s, at "
                                                  "which 12 Sync Read replies fit in the 1 ms slot")] = None,
    out: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """dynamixel-sdk Sync Read + Sync Write at 1 kHz on 12 XM430 for an hour (`--seconds`), then the same
    loop against the echo peer: failures by class, overruns, lateness, RSS and steal, as JSON (exit 0 even on a
    miss)."""
    from bench.soak import BAUD
    from bench.soak import run as bench

    if not seconds > 0:
        raise ConfigError(f"--seconds {seconds:g}: must be > 0")
    _print_json(bench(seconds, baud or BAUD), out)
