"""`servo-hil report` on bam's real XL330 logs (../shared/reference/bam_logs), and on side-by-side MCAP logs.

The replay path must report exactly `servo-hil replay`'s MAE; the PNGs are read back and checked for
shape. Three 6 s logs (lift_and_drop kp 100, sin_sin kp 400, up_and_down kp 800) with m1 and m5.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import numpy as np
import pytest
from typer.testing import CliRunner

from hil.params.config_file import ConfigError
from servo_hil.cli.main import app
from servo_hil.offline.replay import replay, write_report
from servo_hil.offline.report import compare_side_by_side, figure

LOGS = ["2026-01-15_10h28m17.json", "2026-01-15_10h29m14.json", "2026-01-15_10h30m02.json"]
MODELS = ["m1", "m5"]
HAVE_RECORDER = importlib.util.find_spec("servo_hil.logs.mcap") is not None


@pytest.fixture(scope="module")
def logdir(xl330_logs, tmp_path_factory):
    src = xl330_logs
    d = tmp_path_factory.mktemp("logs")
    for name in LOGS:
        shutil.copyfile(src / name, d / name)
    return d


@pytest.fixture(scope="module")
def made(logdir, tmp_path_factory):
    """One `servo-hil report DIR --model m1 --model m5` run: (CLI result, output folder, report.json)."""
    out = tmp_path_factory.mktemp("report") / "out"
    res = CliRunner().invoke(app, ["report", str(logdir), "--actuator", "xl330_m288", "--model", "m1",
                                   "--model", "m5", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return res, out, json.loads((out / "report.json").read_text())


def check_png(path: Path) -> np.ndarray:
    assert path.stat().st_size > 30_000, path
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[2] in (3, 4)
    assert img.shape[0] >= 600 and img.shape[1] >= 900, img.shape
    assert img[..., :3].std() > 0.05  # not a blank canvas
    return img


def test_pngs_one_per_log(made):
    _, out, doc = made
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == [Path(name).stem + "_xl330.png" for name in LOGS]
    assert {r["plot"] for r in doc["rows"]} == set(pngs)
    for p in pngs:
        check_png(out / p)


def test_json_equals_replay(made, logdir, tmp_path):
    _, _, doc = made
    assert doc["kind"] == "replay" and doc["actuator"] == "xl330_m288" and doc["models"] == MODELS
    assert [(r["log"], r["model"]) for r in doc["rows"]] == [(f, m) for f in LOGS for m in MODELS]
    rows = {(r["log"], r["model"]): r for r in doc["rows"]}
    for m in MODELS:
        results = replay(logdir, "xl330_m288", model=m)
        for res in results:
            row = rows[(res.file, m)]
            assert row["mae_rad"] == res.mae  # the same function, the same float
            err = res.q - res.q_log
            assert row["rmse_rad"] == pytest.approx(np.sqrt(np.mean(err**2)), rel=1e-12)
            assert row["max_abs_err_rad"] == pytest.approx(np.max(np.abs(err)), rel=1e-12)
            assert row["samples"] == len(res.t) and row["joint"] == "xl330"
            assert 0 < row["mae_rad"] <= row["rmse_rad"] <= row["max_abs_err_rad"]
        summary = next(s for s in doc["model_summary"] if s["model"] == m)
        assert summary["mean_mae_rad"] == write_report(results, tmp_path / f"{m}.json")["mae"]
        assert summary["logs"] == len(LOGS)


def test_json_equals_replay_cli(made, logdir, tmp_path):
    """The command-line `servo-hil replay` prints and writes the very numbers of report.json."""
    _, _, doc = made
    out = tmp_path / "replay.json"
    res = CliRunner().invoke(app, ["replay", str(logdir), "--actuator", "xl330_m288", "--model", "m5",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    assert {e["file"]: e["mae"] for e in rep["logs"]} == {r["log"]: r["mae_rad"] for r in doc["rows"]
                                                          if r["model"] == "m5"}
    assert rep["mae"] == next(s["mean_mae_rad"] for s in doc["model_summary"] if s["model"] == "m5")


def test_models_ranked_by_mean_mae(made):
    _, out, doc = made
    summary = doc["model_summary"]
    assert [s["rank"] for s in summary] == [1, 2]
    means = [s["mean_mae_rad"] for s in summary]
    assert means == sorted(means)
    assert [s["model"] for s in summary] == ["m5", "m1"]  # bam: m5 fits the XL330 far better than m1
    assert sum(s["best_on"] for s in summary) == len(LOGS)
    md = (out / "report.md").read_text()
    assert md.index("| 1 | m5 |") < md.index("| 2 | m1 |")


def test_markdown_rows(made):
    res, out, doc = made
    md = (out / "report.md").read_text()
    assert "## Position error per log and joint" in md and "## Models ranked by mean MAE over 3 logs" in md
    for r in doc["rows"]:
        row = (f"| {r['log']} | xl330 | {r['model']} | {r['samples']} | {1e3 * r['mae_rad']:.2f} "
               f"| {1e3 * r['rmse_rad']:.2f} | {1e3 * r['max_abs_err_rad']:.2f} |")
        assert row in md, row
        assert f"{1e3 * r['mae_rad']:.2f}" in res.stdout  # the terminal table too
    for s in doc["model_summary"]:
        assert f"| {s['rank']} | {s['model']} | {1e3 * s['mean_mae_rad']:.2f} |" in md


def test_all_models_one_log(logdir, tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["report", str(logdir / LOGS[1]), "--actuator", "xl330_m288", "--all-models",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text())
    assert [r["model"] for r in doc["rows"]] == ["m1", "m2", "m3", "m4", "m5", "m6"]
    assert sorted(s["model"] for s in doc["model_summary"]) == doc["models"]
    means = [s["mean_mae_rad"] for s in doc["model_summary"]]
    assert means == sorted(means) and means[0] == min(r["mae_rad"] for r in doc["rows"])
    check_png(out / "2026-01-15_10h29m14_xl330.png")


# -- bad input: one line, exit 2, nothing written -----------------------------------------------------


@pytest.fixture()
def bad_files(tmp_path):
    (tmp_path / "notjson.json").write_text("{this is not json")
    (tmp_path / "binary.json").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    (tmp_path / "empty").mkdir()
    (tmp_path / "log.mcap").write_bytes(b"not an mcap")
    (tmp_path / "a_file").write_text("x")
    return tmp_path


@pytest.mark.parametrize(("args", "needle"), [
    (["{tmp}/missing.json", "--actuator", "xl330_m288", "--model", "m1"], "no such file or folder"),
    (["{log}", "--actuator", "xl330_m288", "--model", "m9"], "no identified model 'm9'"),
    (["{log}", "--actuator", "nosuchservo", "--model", "m1"], "unknown actuator 'nosuchservo'"),
    (["{tmp}/notjson.json", "--actuator", "xl330_m288", "--model", "m1"], "not JSON"),
    (["{tmp}/binary.json", "--actuator", "xl330_m288", "--model", "m1"], "not JSON"),
    (["{tmp}/empty", "--actuator", "xl330_m288", "--model", "m1"], "no *.json or *.mcap logs"),
    (["{log}", "--actuator", "xl330_m288"], "--all-models"),
    (["{log}", "--actuator", "xl330_m288", "--model", "m1", "--all-models"], "not both"),
    (["{log}", "--model", "m1"], "--actuator"),
    (["{log}", "--actuator", "xl330_m288", "--model", "m1", "--integrator", "rk4"], "integrator"),
    (["{tmp}/log.mcap", "--actuator", "xl330_m288", "--model", "m1"], "apply to bam JSON logs only"),
])
def test_bad_input_one_line(bad_files, logdir, args, needle):
    out = bad_files / "out"
    args = [a.format(tmp=bad_files, log=logdir / LOGS[0]) for a in args]
    res = CliRunner().invoke(app, ["report", *args, "--out", str(out)])
    assert res.exit_code == 2, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("servo-hil: error: "), res.stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in res.output
    assert not out.exists()  # nothing written


def test_out_is_a_file(bad_files, logdir):
    res = CliRunner().invoke(app, ["report", str(logdir / LOGS[0]), "--actuator", "xl330_m288", "--model", "m1",
                                   "--out", str(bad_files / "a_file")])
    assert res.exit_code == 2
    assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith("servo-hil: error: ")


# -- side-by-side pairing (the MCAP path without the MCAP reader) ------------------------------------


def state(t_ns: int, **fields) -> dict:
    return {"log_time_ns": t_ns, "t": t_ns * 1e-9, "torque": None, "goal": None} | fields


def test_pairing_reproduces_replay_mae(logdir):
    """A 'recording' of the log as /real and the m5 replay as /sim on the same clock gives replay's MAE."""
    (r,) = replay(logdir / LOGS[1], "xl330_m288", model="m5")
    raw = json.loads((logdir / LOGS[1]).read_text())["entries"]
    t0 = 1_700_000_000_000_000_000  # MCAP log times are ns since the epoch
    ns = t0 + np.round(r.t * 1e9).astype(np.int64)
    topics = {
        "/real/xl330/state": [state(int(n), position=e["position"], velocity=e["speed"], current=None,
                                    goal=e["goal_position"]) for n, e in zip(ns, raw, strict=True)],
        "/sim/xl330/state": [state(int(n), position=float(q), velocity=float(v), current=None)
                             for n, q, v in zip(ns, r.q, r.dq, strict=True)],
        "/sim/other/state": [state(t0, position=0.0)],
        "/clock": [{"log_time_ns": t0}],
    }
    (c,), unpaired = compare_side_by_side(topics, "run.mcap")
    assert unpaired == ["/sim/other/state"]
    assert c.joint == "xl330" and c.effort_kind is None
    assert c.mae["sim"] == pytest.approx(r.mae, rel=1e-12)
    np.testing.assert_allclose(c.t, r.t, atol=1e-9)


def test_pairing_interpolates_sim_onto_real_times():
    """Sim at 1 kHz, real at an irregular ~200 Hz inside and beyond the sim's span; linear signals
    interpolate exactly, real samples outside the sim span are dropped."""
    t0 = 5_000_000_000
    sim_ns = t0 + np.arange(0, 2_000_000_001, 1_000_000)  # 0 … 2 s
    rng = np.random.default_rng(1)
    real_ns = np.sort(t0 - 50_000_000 + np.cumsum(rng.integers(3_000_000, 7_000_000, 450)))

    def q_sim(t):  # s → rad
        return 0.3 + 0.5 * t

    topics = {
        "/sim/arm_1/state": [state(int(n), position=q_sim((n - t0) * 1e-9), velocity=0.5, current=0.2 * (n - t0) * 1e-9,
                                   torque=0.1) for n in sim_ns],
        "/real/arm_1/state": [state(int(n), position=q_sim((n - t0) * 1e-9) + 0.01, velocity=0.4, current=0.0)
                              for n in real_ns][::-1],  # out of order on purpose
    }
    (c,), unpaired = compare_side_by_side(topics, "x.mcap")
    assert unpaired == []
    inside = real_ns[(real_ns >= sim_ns[0]) & (real_ns <= sim_ns[-1])]
    assert len(c.t) == len(inside) < len(real_ns)
    assert c.t[0] == 0.0 and np.all(np.diff(c.t) > 0)
    np.testing.assert_allclose(c.sims["sim"].position - c.real.position, -0.01, atol=1e-12)
    assert c.mae["sim"] == pytest.approx(0.01, rel=1e-9)
    assert c.effort_kind == "current"
    np.testing.assert_allclose(c.sims["sim"].effort, 0.2 * (inside - t0) * 1e-9, atol=1e-12)
    m = c.metrics("sim")
    assert m["model"] is None and m["velocity_mae_rad_s"] == pytest.approx(0.1)
    assert m["max_abs_err_rad"] == pytest.approx(0.01) and m["plot"] == "x_arm_1.png"


def test_pairing_needs_a_pair():
    with pytest.raises(ConfigError, match="no /real/<joint>/state channel with a matching"):
        compare_side_by_side({"/real/a/state": [state(1, position=0.0)], "/sim/b/state": [state(1, position=0.0)]},
                             "y.mcap")
    with pytest.raises(ConfigError, match="do not overlap"):
        compare_side_by_side({"/real/a/state": [state(10, position=0.0), state(11, position=0.0)],
                              "/sim/a/state": [state(1, position=0.0), state(2, position=0.0)]}, "y.mcap")


def test_figure_with_current_panel(tmp_path):
    t = np.arange(0, 3_000_000_001, 5_000_000)
    topics = {
        "/real/j/state": [state(int(n), position=np.sin(n * 1e-9), velocity=np.cos(n * 1e-9),
                                current=0.3 * np.cos(n * 1e-9), goal=np.sin(n * 1e-9 + 0.1)) for n in t],
        "/sim/j/state": [state(int(n), position=np.sin(n * 1e-9) + 0.002, velocity=np.cos(n * 1e-9),
                               current=0.28 * np.cos(n * 1e-9), torque=0.1) for n in t],
    }
    (c,), _ = compare_side_by_side(topics, "z.mcap")
    fig = figure(c)
    assert len(fig.axes) == 4 and fig.axes[2].get_ylabel() == "current [A]"
    fig.savefig(tmp_path / "z.png", dpi=100)
    plt.close(fig)
    check_png(tmp_path / "z.png")


needs_recorder = pytest.mark.skipif(not HAVE_RECORDER,
                                    reason="servo_hil.logs.mcap (read_side_by_side) is not in this tree yet")


def record(folder: Path, seconds: float = 3.0, rotate_s: float = 600.0,
           joints: tuple[str, ...] = ("shoulder", "elbow")) -> list[Path]:
    """Joints through servo_hil.logs.mcap: real at 200 Hz, sim at 500 Hz offset by 3 mrad; torque off 1–1.5 s."""
    from servo_hil.logs.mcap import SideBySideRecorder

    t0 = 1_700_000_000_000_000_000
    with SideBySideRecorder(folder, prefix="run", rotate_s=rotate_s, compression="none") as rec:
        events = [(k * 5_000_000, "real") for k in range(int(seconds * 200))]
        events += [(k * 2_000_000, "sim") for k in range(int(seconds * 500))]
        for dn, side in sorted(events):
            ts = dn * 1e-9
            for joint, a in zip(joints, (1.0, 0.5), strict=False):
                rec.state(side, joint, t0 + dn, {
                    "position": a * np.sin(ts) + (0.003 if side == "sim" else 0.0), "velocity": a * np.cos(ts),
                    "current": 0.1 * np.cos(ts) * (0.9 if side == "sim" else 1.0),
                    "torque": 0.05 if side == "sim" else None, "goal": a * np.sin(ts + 0.05),
                    "enable": not 1.0 <= ts < 1.5})
        return rec.files


@needs_recorder
def test_report_on_mcap(tmp_path):
    (path,) = record(tmp_path / "rec")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["report", str(path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text())
    assert doc["kind"] == "mcap" and doc["model_summary"] == [] and doc["unpaired"] == []
    assert [(r["log"], r["joint"], r["model"]) for r in doc["rows"]] == [(path.name, "elbow", None),
                                                                          (path.name, "shoulder", None)]
    for r in doc["rows"]:
        assert r["samples"] == 600
        assert r["mae_rad"] == pytest.approx(0.003, rel=1e-3)  # sin interpolated at 2 ms: tiny extra error
        assert r["velocity_mae_rad_s"] < 1e-5
        img = check_png(out / r["plot"])
        assert img.shape[0] > 1000  # four panels: position, velocity, current, error
    md = (out / "report.md").read_text()
    assert f"| {path.name} | elbow | sim | 600 | 3.00 |" in md


@needs_recorder
def test_report_on_rotated_mcap_folder(tmp_path):
    files = record(tmp_path / "rec", seconds=2.0, rotate_s=1.0, joints=("shoulder",))
    assert len(files) == 2
    (tmp_path / "rec" / "killed.mcap").write_bytes(b"\x89MCAP")  # killed before the magic was complete
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["report", str(tmp_path / "rec"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text())
    assert [(r["log"], r["joint"], r["samples"]) for r in doc["rows"]] == [(f.name, "shoulder", 200) for f in files]
    assert doc["unpaired"] == ["killed.mcap: no /real–/sim pair"]
    assert len(list(out.glob("*.png"))) == 2


@needs_recorder
def test_bad_mcap_one_line(tmp_path):
    (tmp_path / "bad.mcap").write_bytes(b"this is not an mcap file at all")
    res = CliRunner().invoke(app, ["report", str(tmp_path / "bad.mcap"), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert len(res.stderr.splitlines()) == 1
    assert res.stderr.startswith("servo-hil: error: ") and "not a readable side-by-side MCAP log" in res.stderr
    assert not (tmp_path / "out").exists()
