"""The offline tools refuse what does not fit in one line: a log recorded on another motor than the actuator
asked for, a file that is not JSON (its path said once)."""

from __future__ import annotations

from typer.testing import CliRunner

from servo_hil.cli.main import app


def _one_line(res) -> str:
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("servo-hil: error: "), res.stderr
    return lines[0]


def test_replay_refuses_a_log_of_another_motor(xl330_logs, tmp_path):
    """Regression: XL330 logs replayed as an MX-64 ran silently to an MAE of 406 mrad."""
    log = next(iter(sorted(xl330_logs.glob("*.json"))))
    res = CliRunner().invoke(app, ["replay", str(log), "--actuator", "mx64", "--model", "m6",
                                   "--out", str(tmp_path / "r.json")])
    line = _one_line(res)
    assert "motor 'xl330'" in line and "--actuator 'mx64'" in line and log.name in line
    assert not (tmp_path / "r.json").exists()
    ok = CliRunner().invoke(app, ["replay", str(log), "--actuator", "xl330_m288", "--model", "m6",
                                  "--out", str(tmp_path / "r.json")])
    assert ok.exit_code == 0, ok.stderr


def test_identify_refuses_a_log_of_another_motor(xl330_logs, tmp_path):
    res = CliRunner().invoke(app, ["identify", str(xl330_logs), "--actuator", "mx106", "--out", str(tmp_path / "f")])
    line = _one_line(res)
    assert "motor 'xl330'" in line and "--actuator 'mx106'" in line


def test_replay_of_a_non_json_file_names_it_once(tmp_path):
    bad = tmp_path / "notes.json"
    bad.write_text("not json\n")
    res = CliRunner().invoke(app, ["replay", str(bad), "--actuator", "xl330_m288", "--model", "m6",
                                   "--out", str(tmp_path / "r.json")])
    line = _one_line(res)
    assert line.count(str(bad)) == 1 and "not JSON" in line, line
