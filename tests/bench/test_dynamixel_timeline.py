"""The paced-reply timeline (bench/dynamixel_timeline.py) against a real daemon and dynamixel-sdk.

Its stamps must come in the order the server works (wake, read, parse, execute, paced write), the reply may
not be due before the request could have ended on the wire (its write's start + its wire time), and the
last status byte must be written, and read by the SDK, no earlier than it is due. Medians only.
"""

from __future__ import annotations

import pytest

from bench.dynamixel_timeline import run

BAUD = 1_000_000
READ_REQUEST_US = 14 * 10 / BAUD * 1e6      # a 4-byte Read instruction: 14 bytes, 10 bit times each


@pytest.fixture(scope="module")
def timeline():
    return run(BAUD, return_delay=0, n=30)


def test_the_server_stamps_come_in_order(timeline):
    for kind in ("read4", "cycle"):
        t = timeline["stamps_us_after_request_write_start"][kind]
        steps = ["server_woke (read called)", "server_read_returned", "server_parsed", "server_execute_start",
                 "server_execute_end", "server_paced_write_called"]
        assert [t[s] for s in steps] == sorted(t[s] for s in steps), t
        assert t["server_first_write_returned"] <= t["server_last_write_returned"], t
    matched = timeline["stamps_us_after_request_write_start"]["transactions"]
    assert matched["of"] == {"read4": 30, "cycle": 30}, matched
    # under heavy load an SDK timeout leaves a late reply in the port for the next exchange to take, and such
    # exchanges lack stamps of their own: medians need only a good part of them
    assert matched["read4"] >= 10 and matched["cycle"] >= 10, matched


def test_a_read_reply_is_due_after_the_request_on_the_wire_and_never_early(timeline):
    t = timeline["stamps_us_after_request_write_start"]["read4"]
    assert t["server_woke (read called)"] >= 0.0, t      # the server sees the request after it was written
    assert t["reply_first_byte_start_due"] >= READ_REQUEST_US, t
    assert t["server_last_write_returned"] >= t["reply_last_byte_due"], t
    assert t["client_last_bytes_read"] >= t["reply_last_byte_due"], t
    assert t["client_call_returned"] >= timeline["read4_bound_us"], t


def test_a_cycle_reply_is_never_early(timeline):
    t = timeline["stamps_us_after_request_write_start"]["cycle"]
    assert t["server_last_write_returned"] >= t["reply_last_byte_due"], t
    assert t["client_last_bytes_read"] >= t["reply_last_byte_due"], t
    assert t["server_sync_write_woke"] >= t["client_sync_write_write_start"], t


def test_cli_command_checks_its_options():
    """`servo-hil bench dynamixel-timeline` is the way to run it: a Return Delay Time beyond the register's
    0-254 is refused naming the option, before any daemon starts; the module alone only serves the daemon."""
    import subprocess
    import sys

    from tests.daemon_process import SERVO_HIL

    res = subprocess.run([*SERVO_HIL, "bench", "dynamixel-timeline", "--rdt", "255"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "--rdt" in res.stderr, res.stderr
    res = subprocess.run([sys.executable, "-m", "bench.dynamixel_timeline"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 1 and "servo-hil bench dynamixel-timeline" in res.stderr, res.stderr
