"""`exact_bam` (servo_hil/rig.py exact_bam_spec): a rig whose actuator runs bam's simulator exactly, as `replay` does,
follows replay's rollout of one of bam's recorded XL330 logs to round-off — offline (`simulate`) and in the daemon
(lock-step, the log's goals and torque enable sent tick by tick on the command socket); without the switch the
catalog actuator's extra physics (R(T), the encoder, …) leaves it."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np
import pytest

from hil.params import catalog
from hil.params.config_file import ConfigError
from servo_hil.offline.replay import load_log, replay_log
from servo_hil.offline.simulate import simulate
from servo_hil.rig import load_offline_rig

from . import ok, rig_head

LOG = "2026-01-15_10h29m21.json"   # lift_and_drop at kp 400: torque on, then off (the arm falls)


def rig_text(log, exact: str, extra: str = "") -> str:
    """A one-actuator rig of the catalog XL330 with bam's m6 set, on the log's pendulum, gain and supply, at the
    log's step, starting from its first state."""
    e0 = log.entries[0]
    return (f"[loop]\nrate_hz = {1.0 / log.dt:g}\nlockstep = true\nmlockall = false\n{exact}\n"
            f'[[actuators]]\njoint = "xl"\ncatalog = "xl330_m288"\nmodel = "m6"\n'
            f"firmware = {{ kp = {log.kp:g}, supply_v = {log.vin:g} }}\n"
            f"load = {{ mass = {log.mass:g}, length = {log.length:g} }}\n"
            f"initial = {{ theta = {e0.position!r}, omega = {e0.speed!r} }}\n{extra}")


def simulated(tmp_path: Path, log, rig: str) -> np.ndarray:
    path, inputs, out = tmp_path / "rig.toml", tmp_path / "in.csv", tmp_path / "out.csv"
    path.write_text(rig)
    with inputs.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("t", "u", "enable"))
        for k, e in enumerate(log.entries):
            w.writerow((repr(k * log.dt), repr(e.goal_position), int(e.torque_enable)))
    return simulate(path, inputs, out)["theta"]


def test_a_rig_with_exact_bam_follows_replay(tmp_path, xl330_logs):
    log = load_log(xl330_logs / LOG)
    reference = replay_log(log, catalog.entry("xl330_m288").actuator("m6").bam_only(), "bam", LOG).q
    exact = simulated(tmp_path, log, rig_text(log, "", "exact_bam = true\n"))
    rig_wide = simulated(tmp_path, log, rig_text(log, "", "").replace("[loop]", "exact_bam = true\n[loop]"))
    plain = simulated(tmp_path, log, rig_text(log, ""))
    err = float(np.max(np.abs(exact - reference)))
    print(f"exact_bam vs replay: max |Δq| = {err:.2e} rad; without: {np.max(np.abs(plain - reference)):.2e} rad")
    assert err <= 1e-12
    assert np.array_equal(rig_wide, exact)
    assert float(np.max(np.abs(plain - reference))) > 1e-4, "the switch makes no difference"


def test_the_daemon_with_exact_bam_follows_replay(tmp_path, xl330_logs, start_daemon):
    from .conftest import RigFile

    log = load_log(xl330_logs / LOG)
    reference = replay_log(log, catalog.entry("xl330_m288").actuator("m6").bam_only(), "bam", LOG).q
    head = rig_head("exact-bam")
    path = tmp_path / "exact.toml"
    path.write_text("exact_bam = true\n" + head + rig_text(log, ""))   # the rig-wide switch
    pub, cmd = (line.split('"')[1] for line in head.splitlines() if line.startswith(("pub", "command")))
    rig = start_daemon(RigFile(path, "exact-bam", pub, cmd, None, ["xl"])).rig
    q, enabled = [], True
    started = time.monotonic()
    for e in log.entries:
        q.append(ok(rig.cmd, "state", actuator="xl")["state"]["xl"]["position"])
        if e.torque_enable != enabled:
            enabled = e.torque_enable
            ok(rig.cmd, "set_enable", actuator="xl", value=enabled)
        ok(rig.cmd, "set_goal", actuator="xl", value=e.goal_position)
        ok(rig.cmd, "step", n=1)
    err = float(np.max(np.abs(np.array(q) - reference)))
    print(f"daemon exact_bam vs replay over {len(q)} ticks ({time.monotonic() - started:.1f} s): "
          f"max |Δq| = {err:.2e} rad")
    assert err <= 1e-12


@pytest.mark.parametrize(("actuator", "needle"), [
    ('catalog = "xl330_m288"\nmodel = "m6"\n[encoder]\nencoder_counts = 4096\n', "no encoder"),
    ('resistance = 2.0\nkt = 0.05\n', "bam parameter set"),
])
def test_exact_bam_refuses_what_bams_model_has_not(tmp_path, actuator, needle):
    path = tmp_path / "rig.toml"
    path.write_text(f"[actuator]\nexact_bam = true\n{actuator}")
    with pytest.raises(ConfigError) as err:
        load_offline_rig(path)
    assert needle in str(err.value) and "exact_bam" in str(err.value) and "\n" not in str(err.value)
