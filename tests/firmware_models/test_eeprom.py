"""The EEPROM state file: what a client writes to a servo's EEPROM comes back at the next start, written atomically,
and a damaged or mismatching file is refused in one line naming it."""

from __future__ import annotations

import pytest

from firmware_models.dynamixel.control_table import load_model
from firmware_models.dynamixel.servo import DynamixelServo
from firmware_models.eeprom import EepromFile, EepromFileError, SavedServo
from hil.joint import KernelJoint
from hil.kernel import Kernel
from hil.params.catalog import entry
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params
from tests.firmware_models.dynamixel.registers import read, write, write_ok


def xm430(registers: dict[str, int] | None = None) -> DynamixelServo:
    kernel = Kernel(1, 1e-3)
    kernel.set_params(0, kernel_params(entry("xm430_w350").actuator(), LoadConfig(), EncoderConfig(),
                                       FaultConfig(), "euler"))
    return DynamixelServo(load_model("xm430_w350"), KernelJoint(kernel), registers)


def test_round_trip_is_atomic(tmp_path):
    f = EepromFile(tmp_path / "state" / "dxl.toml", "koch", "dxl")
    assert f.load() == {}                                   # no file yet: the rig's values
    saved = {"shoulder_pan": SavedServo(1060, {"ID": 7, "Homing Offset": -1024})}
    f.save(saved)
    assert f.load() == saved
    f.save({"shoulder_pan": SavedServo(1060, {"ID": 8})})
    assert f.load()["shoulder_pan"].items == {"ID": 8}
    assert [p.name for p in f.path.parent.iterdir()] == ["dxl.toml"]   # no temporary file left beside it


@pytest.mark.parametrize(("text", "why"), [
    ("format = 1\nrig = 'koch'\nbus = [", "damaged, not TOML"),
    ("format = 2\nrig = 'koch'\nbus = 'dxl'\n", "format 2, this servo-hil reads format 1"),
    ("format = 1\nrig = 'so101'\nbus = 'dxl'\n", "written for rig 'so101' bus 'dxl', not rig 'koch' bus 'dxl'"),
    ("format = 1\nrig = 'koch'\nbus = 'dxl'\n[servos.a]\nmodel_number = 1060\neeprom = { ID = 'x' }\n",
     "damaged: servos.a needs model_number and an eeprom table of integers"),
])
def test_a_bad_file_is_refused_in_one_line(tmp_path, text, why):
    path = tmp_path / "dxl.toml"
    path.write_text(text)
    with pytest.raises(EepromFileError) as exc:
        EepromFile(path, "koch", "dxl").load()
    message = str(exc.value)
    assert "\n" not in message and str(path) in message and why in message
    assert message.endswith("delete it to start from the rig's values")
    assert path.read_text() == text                         # a refused file is left as it was


def test_a_servo_of_another_model_is_refused(tmp_path):
    f = EepromFile(tmp_path / "dxl.toml", "koch", "dxl")
    with pytest.raises(EepromFileError, match="written by model 1060, the rig's servo is model 1200"):
        f.check_servo("gripper", SavedServo(1060, {"ID": 6}), 1200, {"ID"})
    with pytest.raises(EepromFileError, match="no EEPROM item 'Torque Enable' in model 1200"):
        f.check_servo("gripper", SavedServo(1200, {"Torque Enable": 1}), 1200, {"ID"})


def test_dynamixel_eeprom_writes_are_handed_over_and_come_back():
    servo = xm430({"ID": 1})
    seen = []
    servo.on_eeprom_change = lambda s: seen.append(s.eeprom_items())
    write_ok(servo, "Homing Offset", 300)                   # EEPROM (e-manual §Homing Offset(20))
    write_ok(servo, "ID", 5)
    write_ok(servo, "ID", 5)                                # the same value again: nothing new to keep
    write_ok(servo, "Profile Velocity", 10)                 # RAM: not kept
    assert [(s["Homing Offset"], s["ID"]) for s in seen] == [(300, 1), (300, 5)]
    assert "Profile Velocity" not in seen[-1] and "Model Number" not in seen[-1]   # RAM and read-only items
    write_ok(servo, "Torque Enable", 1)
    assert write(servo, "ID", 9) == 7                       # EEPROM locked while torque is on: Access Error
    assert len(seen) == 2
    again = xm430(seen[-1])                                 # the next start, from the saved items
    assert again.eeprom_items() == seen[-1] and again.id == 5 and read(again, "Homing Offset") == 300
