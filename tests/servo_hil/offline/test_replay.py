"""`servo-hil replay` on the real XL330 logs, against bam 1.0.2's own rollouts (tests/data/)."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from hil.params.bam import load_bam_params
from servo_hil.cli.main import app
from servo_hil.offline.replay import replay

BAM_MAE = json.loads((Path(__file__).parents[2] / "data" / "bam_1.0.2_xl330_mae.json").read_text())["mae_rad"]


@pytest.fixture(scope="module")
def logdir(xl330_logs):
    return xl330_logs


@pytest.mark.parametrize("model", ["m1", "m2", "m3", "m4", "m5", "m6"])
def test_replay_matches_bam_per_log(logdir, model):
    results = replay(logdir, "xl330_m288", model=model)
    assert len(results) == len(BAM_MAE[model]) == 12
    for r in results:
        assert abs(r.mae - BAM_MAE[model][r.file]) < 1e-9, (r.file, r.mae, BAM_MAE[model][r.file])
        assert 0.005 < r.mae < 0.5  # real data: the model is close but not exact


def test_replay_distinguishes_models(logdir):
    """The friction models give different errors on real data (bam: m5 best, m1 worst here)."""
    mean = {m: np.mean([r.mae for r in replay(logdir, "xl330_m288", model=m)]) for m in ("m1", "m5")}
    assert mean["m5"] < 0.85 * mean["m1"]


def test_replay_cli_contract(logdir, bam_params, tmp_path):
    out = tmp_path / "out.json"
    log = logdir / "2026-01-15_10h29m14.json"
    res = CliRunner().invoke(app, ["replay", str(log), "--actuator", "xl330_m288", "--model", "m6",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "2026-01-15_10h29m14.json" in res.output and "mean" in res.output
    doc = json.loads(out.read_text())
    assert set(doc) == {"logs", "mae"}
    (entry,) = doc["logs"]
    assert set(entry) == {"file", "t", "q", "dq", "mae"}
    raw = json.loads(log.read_text())
    n = len(raw["entries"])
    assert len(entry["t"]) == len(entry["q"]) == len(entry["dq"]) == n
    np.testing.assert_allclose(entry["t"], np.arange(n) * raw["dt"], rtol=0, atol=1e-12)
    assert entry["q"][0] == raw["entries"][0]["position"]  # initial state from the first entry
    assert abs(entry["mae"] - BAM_MAE["m6"][log.name]) < 1e-9
    assert doc["mae"] == entry["mae"]

    # --params with bam's own file gives the same result as --model
    out2 = tmp_path / "out2.json"
    params = bam_params / "xl330" / "m6.json"
    res = CliRunner().invoke(app, ["replay", str(log), "--actuator", "xl330_m288", "--params", str(params),
                                   "--out", str(out2)])
    assert res.exit_code == 0, res.output
    assert json.loads(out2.read_text())["mae"] == doc["mae"]


def test_replay_needs_one_parameter_source(logdir, tmp_path):
    res = CliRunner().invoke(app, ["replay", str(logdir), "--actuator", "xl330_m288", "--out",
                                   str(tmp_path / "o.json")])
    assert res.exit_code == 2
    assert "--model or --params" in res.output


def test_a_set_with_a_thermal_model_needs_logged_temperature(logdir, bam_params, tmp_path):
    """An identified set that ran the winding's thermal model (params.json's thermal_r, beyond bam's keys) replays
    from each log's first logged temperature: a log without one is refused in one line naming it; half a pair of
    thermal constants is refused naming both."""
    params = json.loads((bam_params / "xl330" / "m1.json").read_text())
    hot = tmp_path / "hot.json"
    hot.write_text(json.dumps(params | {"thermal_r": 142.5, "thermal_c": 2.8, "friction_tempcoef": -0.01}))
    log = json.loads((logdir / "2026-01-15_10h29m14.json").read_text())
    for e in log["entries"]:
        del e["temp"]
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "cold.json").write_text(json.dumps(log))
    res = CliRunner().invoke(app, ["replay", str(tmp_path / "logs"), "--actuator", "xl330_m288", "--params", str(hot),
                                   "--out", str(tmp_path / "o.json")])
    assert res.exit_code == 2 and "cold.json" in res.output and "logged temperature" in res.output, res.output
    (hot_only_r := tmp_path / "r.json").write_text(json.dumps(params | {"thermal_r": 142.5}))
    res = CliRunner().invoke(app, ["replay", str(logdir), "--actuator", "xl330_m288", "--params", str(hot_only_r),
                                   "--out", str(tmp_path / "o.json")])
    assert res.exit_code == 2 and "thermal_r and thermal_c" in res.output, res.output
    # with temperature, the set heats from 28 °C and its friction falls with it: another MAE than without
    cold = {r.file: r.mae for r in replay(logdir, "xl330_m288", model="m1")}
    warm = {r.file: r.mae for r in replay(logdir, "xl330_m288", params=load_bam_params(hot))}
    assert warm.keys() == cold.keys() and all(warm[k] != cold[k] for k in cold)
