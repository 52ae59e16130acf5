"""LeRobot's own arm classes against the emulated arms (docs/lerobot.md).

LeRobot runs in its own venv as a subprocess (bench/peers/lerobot_arm.py), and every test runs once per venv:
`make lerobot` (lerobot 0.4.4 on Python 3.11, .venv-lerobot or $SERVO_HIL_LEROBOT_VENV) and `make lerobot-next`
(the newest LeRobot on Python 3.12, .venv-lerobot-next or $SERVO_HIL_LEROBOT_NEXT_VENV). pytest stays in the
project's venv and starts the arms' daemons (config/rigs/{koch,koch_leader,so101,so101_leader}.toml copied onto free
ports, each bus with an EEPROM state file). Where a venv is absent its tests skip with the one line `needs LeRobot's
venv: make lerobot` (or `make lerobot-next`).

`pair` (per module, once per family): a follower's and its leader's daemons. `pair.calibrate(role)` plays a person
through LeRobot's calibrate flow once (bench/lerobot.py `calibrate_by_hand`) and keeps what it saw.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import lerobot as lr

# make target: (the variable naming its venv, the venv the target builds)
VENVS = {"lerobot": ("SERVO_HIL_LEROBOT_VENV", ".venv-lerobot"),
         "lerobot-next": ("SERVO_HIL_LEROBOT_NEXT_VENV", ".venv-lerobot-next")}


def venv_python(target: str) -> Path | None:
    """The Python of `make <target>`'s venv if LeRobot is installed there (as bench/lerobot.py lerobot_python)."""
    variable, default = VENVS[target]
    venv = Path(os.environ.get(variable, lr.ROOT / default))
    python = venv / "bin" / "python"
    if python.exists() and any(venv.glob("lib/python3*/site-packages/lerobot/__init__.py")):
        return python
    return None


@pytest.fixture(scope="session", params=list(VENVS))
def lerobot_python(request) -> Path:
    python = venv_python(request.param)
    if python is None:
        pytest.skip(f"needs LeRobot's venv: make {request.param}")
    return python


class Pair:
    """A family's follower and leader daemons, their calibration folder and what calibrating them saw."""

    def __init__(self, python: Path, family: str, directory: Path):
        self.python, self.family, self.dir = python, family, directory
        self.cal_dir = directory / "calibration"
        self.arms: dict[str, lr.Arm] = {}
        self.calibrations: dict[str, dict] = {}
        self.stopped: list[lr.Arm] = []
        for role in ("follower", "leader"):
            self.start(role)

    def rig(self, role: str) -> str:
        return self.family if role == "follower" else f"{self.family}_leader"

    def start(self, role: str) -> lr.Arm:
        self.arms[role] = lr.start_arm(self.rig(role), self.dir)
        return self.arms[role]

    def restart(self, role: str) -> lr.Arm:
        """SIGTERM the daemon (it must exit 0) and start it again on the same rig copy and EEPROM file."""
        arm = self.arms[role]
        rc = arm.stop()
        assert rc == 0, f"{arm.name}: exit {rc} after SIGTERM\n{arm.err_path.read_text()[-3000:]}"
        self.stopped.append(arm)
        return self.start(role)

    def calibrate(self, role: str) -> dict:
        if role not in self.calibrations:
            self.calibrations[role] = lr.calibrate_arm(self.python, self.family, role, self.arms[role],
                                                       self.cal_dir, self.dir)
        return self.calibrations[role]

    def session(self, role: str, action: str | None = None) -> dict[str, dict]:
        """A LeRobot session with no keyboard (stdin at EOF: a calibration prompt would end it with EOFError)."""
        args = ["session", f"{self.family}_{role}", self.arms[role].port, str(self.cal_dir)]
        return lr.again_after_lost_reply(
            lambda: lr.LeRobotPeer(self.python, [*args, action] if action else args, self.dir, stdin=False),
            lambda peer: peer.finish(60.0), f"{self.family}_{role}: a session")

    def finish(self) -> list[str]:
        problems = []
        for arm in self.arms.values():
            rc = arm.stop()
            if rc != 0:
                problems.append(f"{arm.name}: exit {rc} after SIGTERM\n{arm.err_path.read_text()[-3000:]}")
        for arm in [*self.arms.values(), *self.stopped]:
            if "Traceback" in arm.err_path.read_text(errors="replace"):
                problems.append(f"{arm.name}: a traceback in the daemon's log\n{arm.err_path.read_text()[-3000:]}")
        return problems


@pytest.fixture(scope="module", params=["koch", "so101"])
def pair(request, lerobot_python, tmp_path_factory):
    p = Pair(lerobot_python, request.param, tmp_path_factory.mktemp(request.param))
    yield p
    problems = p.finish()
    if problems:
        pytest.fail("\n".join(problems))
