"""The `servo-hil` command itself: --version, and a checkout whose extensions are not built."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from tests.daemon_process import SERVO_HIL

REPO = Path(__file__).resolve().parents[2]


def test_version():
    r = subprocess.run([*SERVO_HIL, "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"servo-hil {version('servo-hil')}"


def test_unbuilt_checkout_is_one_line(tmp_path):
    """Sources without their compiled extensions (a fresh clone before `make run`): one line naming the module
    and what to run, exit 2, no traceback."""
    for package in ("hil", "firmware_models", "drivers", "bench"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); sys.argv = ['servo-hil', *sys.argv[2:]]; "
            "from servo_hil.cli import servo_hil; servo_hil()")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path), "actuator", "show", "mx64"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not built: run `make run`" in lines[0] and "hil." in lines[0], r.stderr


def test_every_benchmark_is_a_bench_command():
    """Each benchmark of bench/ that users run is behind `servo-hil bench` (the kernel's and the soak's pass their
    options on)."""
    r = subprocess.run([*SERVO_HIL, "bench", "--help"], capture_output=True, text=True, timeout=60)
    for name in ("kernel", "loop", "dynamixel", "erob", "soak"):
        assert f" {name} " in r.stdout, r.stdout
    r = subprocess.run([*SERVO_HIL, "bench", "kernel", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--quick" in r.stdout and "--no-bam" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([*SERVO_HIL, "bench", "soak", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--seconds" in r.stdout and "--out" in r.stdout, r.stdout + r.stderr


def test_help_speaks_plainly():
    """No Python types or private references in any command's --help."""
    commands = [[], ["run"], ["mirror"], ["record"], ["report"], ["replay"], ["simulate"], ["status"],
                ["actuator", "show"], ["bench", "loop"]]
    for argv in commands:
        r = subprocess.run([*SERVO_HIL, *argv, "--help"], capture_output=True, text=True, timeout=60,
                           env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"})
        assert r.returncode == 0, r.stderr
        options = "\n".join(line for line in r.stdout.splitlines() if line.lstrip().startswith("--"))
        for jargon in ("<list[", "seed 0", "Active mirror"):
            assert jargon not in r.stdout, f"servo-hil {' '.join(argv)} --help shows {jargon!r}:\n{r.stdout}"
        assert "<" not in options, f"servo-hil {' '.join(argv)} --help: an option shows a Python type:\n{options}"


def test_actuator_show_explains_the_model_against_the_datasheet():
    r = subprocess.run([*SERVO_HIL, "actuator", "show", "mx64", "--model", "m6"], capture_output=True, text=True,
                       timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "torque constant kt (output side)" in r.stdout
    assert "gear 1 vs 200: the model lumps motor and gearbox at the output shaft" in r.stdout
    assert "stall torque 8.3 vs 6 N·m" in r.stdout


def test_report_table_keeps_log_names_apart_in_80_columns(xl330_logs, tmp_path):
    logs = xl330_logs
    r = subprocess.run([*SERVO_HIL, "report", str(logs), "--actuator", "xl330_m288", "--model", "m6",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=120,
                       env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if " m6 " in line]
    assert len(rows) == 12 and all(len(line) <= 80 for line in r.stdout.splitlines())
    assert len({row.split("│")[1].strip() for row in rows}) == 12, "log names collapsed into one:\n" + r.stdout
