"""`servo-hil identify` as a user sees it: progress bars that end where each fit ended, the summary naming every
file written, a convergence plot readable for any number of fits, and `--out` naming a folder."""

from __future__ import annotations

import json
import re

import numpy as np
from typer.testing import CliRunner

from servo_hil.cli.main import app
from servo_hil.offline.identify.fit import FitResult
from servo_hil.offline.identify.outputs import convergence_figure


def test_bars_end_full_and_summary_lists_the_plots(xl330_logs, tmp_path):
    """A fit that stops under its budget (200 evaluations asked, whole CMA-ES generations run) leaves its bar full
    (N/N), and the last line names the PNGs beside params.json."""
    logs = sorted(xl330_logs.glob("*.json"))[:2]
    out = tmp_path / "fit"
    res = CliRunner().invoke(app, ["identify", *map(str, logs), "--actuator", "xl330_m288", "--model", "m1",
                                   "--trials", "200", "--split", "0.5", "--repeats", "3", "--out", str(out)],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    bars = re.findall(r"m1 split \d+ .*? (\d+)/(\d+) generation", res.stdout)
    assert len(bars) >= 3 and all(done == total for done, total in bars), res.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["plots"] == ["validation_m1.png", "convergence.png"]
    last = res.stdout.strip().splitlines()[-1]
    for name in report["plots"]:
        assert (out / name).is_file() and name in last, last


def _fit(split: int) -> FitResult:
    return FitResult(model="m1", split=split, seed=0, params={}, train_mae={"a": 0.01}, validation_mae={},
                     evaluations=40, generations=4, restarts=0, seconds=0.0, interrupted=False,
                     history=[(10 * (k + 1), 0.02 / (k + 1 + split / 10)) for k in range(4)], free=[])


def test_convergence_colours_are_distinct_and_the_legend_is_beside_the_axes():
    fig = convergence_figure([_fit(i) for i in range(25)])
    ax = fig.axes[0]
    colours = {tuple(np.round(line.get_color(), 6)) for line in ax.get_lines()}
    assert len(ax.get_lines()) == 25 and len(colours) == 25
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend, axes = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.x0 >= axes.x1 and legend.x1 <= fig.bbox.x1, (legend, axes, fig.bbox)


def test_out_that_is_a_file_is_said_in_one_line(xl330_logs, tmp_path):
    out = tmp_path / "results.txt"
    out.write_text("kept\n")
    res = CliRunner().invoke(app, ["identify", str(next(xl330_logs.glob("*.json"))), "--actuator", "xl330_m288",
                                   "--out", str(out)])
    assert res.exit_code == 2
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and "--out" in lines[0] and "is a file" in lines[0] and "folder" in lines[0], res.stderr
    assert out.read_text() == "kept\n"
