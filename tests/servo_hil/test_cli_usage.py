"""Misused options end in one `servo-hil: error:` line (exit 2) naming the option and what it takes, and every
command's --help shows plain metavars and the choices an option has."""

from __future__ import annotations

import subprocess

import pytest
from typer.testing import CliRunner

from servo_hil.cli.main import app
from tests.daemon_process import SERVO_HIL, assert_one_cli_line


@pytest.mark.parametrize(("argv", "needles"), [
    (["status", "--command", "localhost:9873"], ("--command", "'localhost:9873' is not a ZeroMQ endpoint",
                                                 "tcp://HOST:PORT")),
    (["status", "--timeout", "-1"], ("--timeout -1", "must be > 0")),
    (["run", "config/rigs/default.toml", "--log-level", "LOUD"], ("--log-level", "'LOUD' is not one of", "'DEBUG'",
                                                                  "'WARNING'")),
    (["actuator", "show", "mx64", "--model", "m9"], ("--model", "'m9' is not one of 'm1'", "actuator show --help")),
    (["simulate", "r.toml", "--input", "i.csv", "--out", "o.csv", "--integrator", "rk4"],
     ("--integrator", "'rk4' is not one of 'euler', 'bam', 'implicitfast'")),
    (["identify", "logs", "--actuator", "mx64", "--out", "x", "--model", "m0"], ("--model", "'all'")),
    (["actuator", "show"], ("Missing argument 'NAME'",)),
])
def test_misuse_is_one_line(argv, needles):
    r = subprocess.run([*SERVO_HIL, *argv], capture_output=True, text=True, timeout=60)
    line = assert_one_cli_line(r, *needles)
    assert "Value error" not in line and "Traceback" not in r.stderr


def test_in_process_misuse_is_one_line_too():
    res = CliRunner().invoke(app, ["actuator", "show", "mx64", "--model", "m9"])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and res.stderr.startswith("servo-hil: error: --model")


COMMANDS = [[], ["run"], ["mirror"], ["record"], ["recover"], ["report"], ["replay"], ["simulate"], ["status"],
            ["identify"], ["actuator"], ["actuator", "list"], ["actuator", "show"], ["actuator", "plot"],
            ["actuator", "export"], ["bench"], ["bench", "kernel"], ["bench", "identify"], ["bench", "first-run"],
            ["bench", "robot"], ["bench", "loop"], ["bench", "dynamixel"], ["bench", "dynamixel-timeline"],
            ["bench", "dynamixel-packets"], ["bench", "erob"], ["bench", "soak"]]


def _help(argv: list[str]) -> str:
    r = subprocess.run([*SERVO_HIL, *argv, "--help"], capture_output=True, text=True, timeout=60,
                       env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_every_help_has_plain_metavars():
    """No `{RIG}` in a usage line, no `<str>`, `<path>`, `<int range>` or `<list[...]>` beside a name."""
    for argv in COMMANDS:
        text = _help(argv)
        usage = text.splitlines()[0]
        assert "{" not in usage, usage
        for jargon in ("<str>", "<path>", "<int", "<float", "<list[", "<m1"):
            assert jargon not in text, f"servo-hil {' '.join(argv)} --help shows {jargon!r}:\n{text}"


def test_help_lists_choices_and_types():
    assert "--integrator euler|bam|implicitfast" in _help(["simulate"])
    assert "--model m1|m2|m3|m4|m5|m6 " in _help(["report"])
    assert "--log-level DEBUG|INFO|WARNING|ERROR" in _help(["run"])
    assert "--record DIRECTORY" in _help(["mirror"])
    identify = " ".join(_help(["identify"]).split())
    assert "--model m1|m2|m3|m4|m5|m6|all" in identify
    assert "mass [kg], length [m]" in identify and "vin [V]" in identify
