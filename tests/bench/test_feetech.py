"""`servo-hil bench feetech` (bench/feetech.py): its wire time from the packets, its echo peer answering the very
request scservo_sdk sends, and the JSON of a short run. Timings are not judged here (docs/performance.md)."""

from __future__ import annotations

import json
import subprocess

import pytest
import scservo_sdk as scs

from bench.feetech import IDS, PRESENT_POSITION, _peer_replies, echo_peer, sync_read_wire_us
from bench.host import PeerProcess
from tests.daemon_process import SERVO_HIL


def test_wire_time_of_the_sync_read_of_six():
    # request FF FF FE LEN 82 38 04 + 6 IDs + CHK = 14 bytes; each reply FF FF ID LEN ERR + 4 data + CHK = 10 bytes
    assert sync_read_wire_us(1_000_000) == {"wire_us": 740.0, "request_bytes": 14, "status_bytes": 60}
    assert sync_read_wire_us(500_000, 10e-6)["wire_us"] == pytest.approx(2 * 740.0 + 6 * 10.0)


def test_the_echo_peer_answers_scservo_sdks_group_sync_read():
    with PeerProcess(echo_peer, _peer_replies(), "test-feetech-echo-peer") as peer:
        port = scs.PortHandler(peer.address)
        assert port.openPort() and port.setBaudRate(1_000_000)
        try:
            reader = scs.GroupSyncRead(port, scs.PacketHandler(0), PRESENT_POSITION, 4)
            for i in IDS:
                assert reader.addParam(i)
            for _ in range(3):
                assert reader.txRxPacket() == scs.COMM_SUCCESS
            assert [reader.getData(i, PRESENT_POSITION, 2) for i in IDS] == [2048] * 6
        finally:
            port.closePort()


def test_a_quick_run_prints_its_json():
    res = subprocess.run([*SERVO_HIL, "bench", "feetech", "--quick", "--cycles", "30"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert [r["server"] for r in doc["runs"]] == ["echo_peer", "servo-hil paced", "servo-hil fast"]
    assert all(r["samples"] == 30 and not r["failures"] for r in doc["runs"])
    # every servo reported its position: the peer's canned 2048, the daemon's pendulums hanging at rest near 2048
    assert all(abs(v - 2048) < 20 for r in doc["runs"] for v in r["present"].values())
    t = doc["target"]
    assert t["wire_plus_floor_us"] == 740.0 + doc["runs"][0]["p50_us"] and t["ratio"] == t["p50_us"] / (
        t["wire_plus_floor_us"])
