"""A bad bus section of a rig stops `servo-hil run` with one line naming the key, exit status 2."""

from __future__ import annotations

import subprocess

import pytest

from hil.params import ConfigError
from servo_hil.rig import load_rig
from tests.daemon_process import SERVO_HIL
from tests.servo_hil.daemon import rig_head


def rig_text(bus: str = "", actuator: str = "bus = \"dxl\"\nid = 1\n", catalog: str = "xm430_w350") -> str:
    return rig_head("cfg") + f"""[[buses]]
name = "dxl"
protocol = "dynamixel"
{bus}
[[actuators]]
joint = "j1"
catalog = "{catalog}"
load = {{ mass = 0.1, length = 0.1 }}
{actuator}"""


@pytest.mark.parametrize("bus, actuator, catalog, message", [
    ("", 'bus = "other"\nid = 1\n', "xm430_w350", "bus 'other' is not among buses (dxl)"),
    ("", 'bus = "dxl"\n', "xm430_w350", "an actuator on a bus needs id"),
    ("", 'id = 3\n', "xm430_w350", "id / registers need bus"),
    ("", 'bus = "dxl"\nid = 253\n', "xm430_w350", "actuators.0.id"),
    ('port = "/tmp/a"\ndevice = "/dev/ttyUSB0"', 'bus = "dxl"\nid = 1\n', "xm430_w350", "not both"),
    ("protocl = 1", 'bus = "dxl"\nid = 1\n', "xm430_w350", "buses.0.protocl"),
])
def test_rig_errors_name_the_key(tmp_path, bus, actuator, catalog, message):
    path = tmp_path / "rig.toml"
    path.write_text(rig_text(bus, actuator, catalog))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_rig(path)


@pytest.mark.parametrize("bus, actuator, catalog, extra, message", [
    ("baud = 1234", 'bus = "dxl"\nid = 1\n', "xm430_w350", [], "baud 1234 is not a xm430_w350 Baud Rate"),
    ("", 'bus = "dxl"\nid = 1\nregisters = { "Retrun Delay Time" = 0 }\n', "xm430_w350", [],
     "registers: xm430_w350 has no item 'Retrun Delay Time'"),
    ("", 'bus = "dxl"\nid = 1\nregisters = { "Return Delay Time" = 300 }\n', "xm430_w350", [],
     "registers.Return Delay Time: 300 is outside 0..254"),
    ("", 'bus = "dxl"\nid = 1\n', "erob80_100", [], "a Dynamixel bus needs catalog = one of"),
    ("", 'bus = "dxl"\nid = 1\n', "xm430_w350", ["--port", "nobus=/tmp/x"], "no bus named 'nobus'"),
])
def test_run_stops_with_one_line(tmp_path, bus, actuator, catalog, extra, message):
    path = tmp_path / "rig.toml"
    path.write_text(rig_text(bus, actuator, catalog))
    port = tmp_path / "tty"
    proc = subprocess.run([*SERVO_HIL, "run", str(path), "--port", f"dxl={port}", *extra],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("servo-hil: error:")]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not port.exists(), "a refused rig leaves no port behind"


@pytest.mark.parametrize("firmware, registers, warned", [
    ("", "", True),                                   # bam's 7.5 V over the XL330's 7.0 V Max Voltage Limit
    ("firmware = { supply_v = 5.0 }\n", "", False),   # the e-manual's recommended supply
    ("", 'registers = { "Max Voltage Limit" = 70, "Shutdown" = 52 }\n', True),   # warned, torque kept
])
def test_a_supply_outside_the_voltage_limits_is_said_at_start(tmp_path, caplog, firmware, registers, warned):
    """An XL330 whose supply is outside its Min/Max Voltage Limit reports an Input Voltage Error at once, as the real
    servo would, and switches torque off where its Shutdown has the bit (the XL330's default 53 has it): the daemon
    says so once at start, naming the actuator and what to set, rather than leaving a silent torque-off."""
    import logging

    from servo_hil.wiring import open_buses
    from tests.servo_hil.daemon import running_rig

    text = rig_text('port = "' + str(tmp_path / "tty") + '"',
                    f'bus = "dxl"\nid = 1\nmodel = "m6"\n{firmware}{registers}', "xl330_m288")
    with caplog.at_level(logging.WARNING, logger="servo-hil"), running_rig(tmp_path / "rig.toml", text) as live:
        (server,) = open_buses(live)
        server.close()
    lines = [r.getMessage() for r in caplog.records if "Voltage Limit" in r.getMessage()]
    if not warned:
        assert lines == []
        return
    (line,) = lines
    assert line.startswith("actuators[0] (j1): supply 7.5 V is outside Min/Max Voltage Limit 3.5–7.0 V")
    assert ("switches torque off" in line) == (not registers) and "supply_v" in line
