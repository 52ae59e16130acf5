"""EEPROM that survives a restart, through the real SDK: what dynamixel-sdk writes to a servo's EEPROM on a bus
with an `eeprom` state file is there again when the daemon starts anew, as a servo's flash keeps it; a damaged
state file stops the start with one line naming it."""

from __future__ import annotations

import subprocess

import dynamixel_sdk as sdk

from tests.daemon_process import SERVO_HIL

from .conftest import MODEL, A, open_dxl, write_dxl_rig

OK = sdk.COMM_SUCCESS


def eeprom_rig(directory, name):
    rig = write_dxl_rig(directory, name, fast=True, lockstep=True)
    text = rig.path.read_text()
    rig.path.write_text(text.replace('protocol = "dynamixel"\n',
                                     f'protocol = "dynamixel"\neeprom = "{directory / "state.toml"}"\n', 1))
    return rig


def test_eeprom_writes_come_back_after_a_restart(launcher):
    rig = eeprom_rig(launcher.dir, "sdk-eeprom")
    d = launcher.start(rig)
    with open_dxl(rig.port) as x:
        x.write(3, A.HOMING_OFFSET, -1024)      # EEPROM: kept
        x.write(3, A.RETURN_DELAY, 10)
        x.try_write(3, A.ID, 9)                 # an ID change is kept under the joint's name
        x.write(9, A.LED, 1)                    # RAM: gone at power-up
        assert x.ping(9)[:2] == (MODEL[3], OK)
    assert d.terminate() == 0
    saved = (launcher.dir / "state.toml").read_text()
    assert "[servos.xm430]" in saved and "ID = 9" in saved and '"Homing Offset" = -1024' in saved

    d = launcher.start(rig)
    with open_dxl(rig.port) as x:
        assert x.ping(3)[1] == sdk.COMM_RX_TIMEOUT
        assert x.ping(9)[:2] == (MODEL[3], OK)
        assert x.read(9, A.HOMING_OFFSET) == -1024 & 0xFFFFFFFF      # the SDK reads it unsigned
        assert x.read(9, A.RETURN_DELAY) == 10
        assert x.read(9, A.LED) == 0
        assert x.ping(1)[:2] == (MODEL[1], OK), "the other servos as the rig gives them"


def test_a_damaged_state_file_stops_the_start_in_one_line(tmp_path):
    rig = eeprom_rig(tmp_path, "sdk-eeprom-bad")
    (tmp_path / "state.toml").write_text("format = 1\nrig = 'sdk-eeprom-bad'\nbus = 'dxl'\n[servos.xm430]\n"
                                         "model_number = 1200\neeprom = { ID = 3 }\n")
    res = subprocess.run([*SERVO_HIL, "run", str(rig.path), "--port", rig.port], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert f"EEPROM state file {tmp_path / 'state.toml'}" in lines[0]
    assert "written by model 1200, the rig's servo is model 1020" in lines[0]
