"""`servo-hil actuator show` says what K·imax is: the torque at the current limit, which can exceed the stall
torque (MX-64, XM430 at 12 V: the supply caps the torque first), and not the datasheet's rated (continuous)
torque, which gets its own row (eRob80:100)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hil.params import catalog
from servo_hil.cli.main import app


def _show(name: str) -> str:
    res = CliRunner().invoke(app, ["actuator", "show", name], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    return res.stdout


def _row(text: str, label: str) -> list[str]:
    line = next(line for line in text.splitlines() if label in line)
    return [cell.strip() for cell in line.split("│")[1:-1]]


@pytest.mark.parametrize("name", ["mx64", "xm430_w350"])
def test_a_limit_above_the_stall_torque_is_explained(name):
    text = _show(name)
    d = catalog.entry(name).actuator().motor.derived(catalog.entry(name).datasheet.voltage_v)
    assert d["nominal_torque_nm"] > d["stall_torque_nm"]
    assert _row(text, "torque at the current limit kt·imax")[1:] == [f"{d['nominal_torque_nm']:.4g} N·m", "-"]
    assert "nominal torque" not in text
    assert f"above the stall torque {d['stall_torque_nm']:.4g} N·m it never binds" in text


def test_the_rated_torque_is_its_own_row():
    text = _show("erob80_100")
    rated = catalog.entry("erob80_100").datasheet.rated_torque_nm
    assert _row(text, "rated (continuous) torque")[1:] == ["-", f"{rated:.4g} N·m"]
    assert _row(text, "torque at the current limit kt·imax")[2] == "-"
    assert f"rated torque {rated:.4g} N·m: the datasheet's continuous (thermal) rating" in text
