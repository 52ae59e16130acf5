"""`servo-hil bench dynamixel`'s read4 floor (hil/benchmarks/dynamixel.py): computed from the echo peer's p50 of the
same run, against the target's slack, not hard-coded."""

from __future__ import annotations

from hil.benchmarks.dynamixel import _read4_floor, read_bound


def test_read4_floor_against_the_slack():
    bound = read_bound(4_000_000, 0.0, 2048)["bound_us"]          # 72.5 µs: the slack is 50 µs
    assert _read4_floor({"bound_us": bound}, {"p50_us": 46.0}) == {
        "client_floor_us": 46.0, "target_slack_us": 50.0, "attainable": True}
    assert _read4_floor({"bound_us": bound}, {"p50_us": 74.0})["attainable"] is False
    slow = read_bound(1_000_000, 500e-6, 2048)["bound_us"]         # 790 µs: the slack is 10 % of it
    assert _read4_floor({"bound_us": slow}, {"p50_us": 74.0})["target_slack_us"] == 0.1 * slow
    assert _read4_floor({"bound_us": slow}, {"p50_us": None})["attainable"] is None
