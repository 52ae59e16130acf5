"""`servo-hil report` on the side-by-side MCAP of `servo-hil mirror --record`: the twin is named by its model
(m1), not "sim", and the position plot carries the controller's goal, as report.md says."""

from __future__ import annotations

import json
import time

from typer.testing import CliRunner

from servo_hil.cli.main import app
from servo_hil.logs.mcap import read_side_by_side
from tests.daemon_process import start_cli, stop_cli
from tests.drivers.dynamixel.conftest import DEFAULT_SLACK_MS, SlackPortHandler, mx64_pendulum_rig


def test_mirror_report_names_the_twin_and_plots_the_goal(tmp_path, monkeypatch):
    from dynamixel_sdk import GroupSyncRead, PacketHandler

    (real_rig, _), (twin_rig, _) = mx64_pendulum_rig(tmp_path, "real", "m6"), mx64_pendulum_rig(tmp_path, "twin", "m1")
    real = start_cli(["run", str(real_rig), "--port", str(tmp_path / "real")],
                     "at " + str(tmp_path / "real"))
    try:
        mirror = start_cli(["mirror", str(twin_rig), "--real", str(tmp_path / "real"),
                            "--port", str(tmp_path / "ctl"), "--record", str(tmp_path / "logs")], "mirroring")
        try:
            port = SlackPortHandler(str(tmp_path / "ctl"), DEFAULT_SLACK_MS)
            assert port.openPort() and port.setBaudRate(1_000_000)
            ph = PacketHandler(2.0)
            assert ph.write1ByteTxRx(port, 1, 64, 1) == (0, 0)
            assert ph.write4ByteTxRx(port, 1, 116, 2048 + 600) == (0, 0)
            g = GroupSyncRead(port, ph, 132, 4)          # Present Position only: the goal is never read back
            g.addParam(1)
            for _ in range(20):
                assert g.txRxPacket() == 0
                time.sleep(0.03)
            port.closePort()
        finally:
            stop_cli(mirror)
    finally:
        stop_cli(real)
    goal = 600 * 2 * 3.141592653589793 / 4096
    sim = read_side_by_side(tmp_path / "logs")["/sim/mx64/state"]
    assert abs(sim[-1]["goal"] - goal) < 1e-9

    captured = {}
    import servo_hil.offline.report as report_module

    figure = report_module.figure

    def keep(c):
        fig = figure(c)
        captured["labels"] = [line.get_label() for line in fig.axes[0].get_lines()]
        captured["goal"] = [line.get_ydata() for line in fig.axes[0].get_lines() if line.get_label() == "goal"]
        return fig

    monkeypatch.setattr(report_module, "figure", keep)
    res = CliRunner().invoke(app, ["report", str(tmp_path / "logs"), "--out", str(tmp_path / "rep")],
                             env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.stderr
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert {r["model"] for r in doc["rows"]} == {"m1"}
    assert "│ m1 " in res.stdout and "│ sim " not in res.stdout
    assert captured["labels"][:1] == ["goal"] and "m1" in captured["labels"] and "real" in captured["labels"]
    assert abs(captured["goal"][0][-1] - goal) < 1e-9
