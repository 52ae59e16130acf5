"""A `servo-hil mirror --record DIR` that fails to start (the real port does not open) leaves no DIR behind, and
an existing folder is kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.daemon_process import SERVO_HIL, assert_one_cli_line
from tests.servo_hil.daemon import rig_head


def _rig(tmp_path: Path, record: str = "") -> Path:
    path = tmp_path / "mirror.toml"
    path.write_text(rig_head("m") + f"""[loop]
mlockall = false
fifo_priority = 0
[[buses]]
name = "dxl"
protocol = "dynamixel"
port = "{tmp_path / 'ttyMIRROR'}"
real = "{tmp_path / 'no-such-adapter'}"
{record}
[[actuators]]
joint = "a"
catalog = "mx64"
bus = "dxl"
id = 1
""")
    return path


def test_failed_mirror_leaves_no_record_folder(tmp_path):
    logs = tmp_path / "logs" / "mirror-demo"
    r = subprocess.run([*SERVO_HIL, "mirror", str(_rig(tmp_path)), "--record", str(logs)], capture_output=True,
                       text=True, timeout=60)
    assert_one_cli_line(r, "no-such-adapter")
    assert not (tmp_path / "logs").exists()


def test_failed_mirror_keeps_a_folder_that_was_there(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "notes.txt").write_text("kept\n")
    r = subprocess.run([*SERVO_HIL, "mirror", str(_rig(tmp_path, f'record = "{tmp_path / "old" / "new"}"'))],
                       capture_output=True, text=True, timeout=60)
    assert_one_cli_line(r, "no-such-adapter")
    assert (tmp_path / "old" / "notes.txt").read_text() == "kept\n" and not (tmp_path / "old" / "new").exists()
