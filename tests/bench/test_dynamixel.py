"""`servo-hil bench dynamixel`'s read4 floor (bench/dynamixel.py): computed from the echo peer's p50 of the
same run, against the target's slack, not hard-coded."""

from __future__ import annotations

from bench.dynamixel import _read4_floor, read_bound


def test_read4_floor_against_the_slack():
    bound = read_bound(4_000_000, 0.0, 2048)["bound_us"]          # 72.5 µs: the slack is 50 µs
    assert _read4_floor({"bound_us": bound}, {"p50_us": 46.0}) == {
        "client_floor_us": 46.0, "target_slack_us": 50.0, "attainable": True}
    assert _read4_floor({"bound_us": bound}, {"p50_us": 74.0})["attainable"] is False
    slow = read_bound(1_000_000, 500e-6, 2048)["bound_us"]         # 790 µs: the slack is 10 % of it
    assert _read4_floor({"bound_us": slow}, {"p50_us": 74.0})["target_slack_us"] == 0.1 * slow
    assert _read4_floor({"bound_us": slow}, {"p50_us": None})["attainable"] is None


def test_packets_command_feeds_the_bus_and_checks_its_kind():
    """`servo-hil bench dynamixel-packets` (valgrind's harness) answers what it feeds: a Sync Read of the 12 servos
    gets 12 status packets, a Sync Write none; an unknown kind is refused naming KIND."""
    import subprocess

    from tests.daemon_process import SERVO_HIL

    for kind, n, replies in (("sync_read", 3, 36), ("sync_write", 2, 0), ("read4", 2, 2)):
        res = subprocess.run([*SERVO_HIL, "bench", "dynamixel-packets", kind, str(n)], capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0 and f"{kind}: {n} packets, {replies} replies" in res.stdout, res.stderr
    res = subprocess.run([*SERVO_HIL, "bench", "dynamixel-packets", "sync", "1"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and "KIND" in res.stderr, res.stderr
