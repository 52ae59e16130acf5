"""`servo-hil actuator list|show|plot`."""

import re

import pytest
from typer.testing import CliRunner

from hil.params import catalog
from servo_hil.cli.main import app


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def test_list_names_every_entry():
    res = invoke("actuator", "list")
    assert res.exit_code == 0
    for name in catalog.names():
        assert name in res.output
    assert len(catalog.names()) >= 7


def test_show_prints_table19_quantities_consistent_with_the_model():
    res = invoke("actuator", "show", "mx64")
    assert res.exit_code == 0, res.output
    d = catalog.entry("mx64").actuator().motor.derived(12.0)
    row = next(line for line in res.output.splitlines() if "stall torque" in line)
    assert f"{d['stall_torque_nm']:.4g} N·m" in row
    for label in ("no-load speed", "mechanical time constant", "gradient", "torque at the current limit",
                  "electrical time constant"):
        assert label in res.output


def test_show_with_model_uses_the_identified_constants():
    res = invoke("actuator", "show", "mx64", "--model", "m6", "--voltage", "15")
    assert res.exit_code == 0, res.output
    m6 = catalog.entry("mx64").models["m6"]
    stall = m6.kt * 15 / m6.R
    row = next(line for line in res.output.splitlines() if "stall torque" in line)
    assert re.search(rf"{stall:.4g} N·m", row), row


def test_show_unknown_actuator_is_one_line_error():
    res = invoke("actuator", "show", "mx65")
    assert res.exit_code == 2
    assert "unknown actuator 'mx65'" in res.output and "mx64" in res.output


@pytest.mark.parametrize(("name", "model"), [("mx64", "m6"), ("erob80_100", "m6"), ("xm430_w350", None)])
def test_plot_writes_pngs(tmp_path, name, model):
    out = tmp_path / f"{name}.png"
    args = ["actuator", "plot", name, "--out", out] + (["--model", model] if model else [])
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    drive = tmp_path / f"{name}_drive.png"
    assert drive.exists() == bool(model)
