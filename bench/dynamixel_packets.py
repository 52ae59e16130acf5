"""Instructions per Dynamixel packet, for valgrind: the bus server's per-packet work in one process.

`servo-hil bench dynamixel-packets KIND N` feeds N packets of KIND through what the bus thread does for each;
run it under callgrind for two N and subtract (docs/benchmarks.md).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.dynamixel import IDS, _read_packets, _sync_read_request, _sync_write, rig_text

KINDS = ("sync_read", "sync_write", "sync_write_same", "read4")


def packets(kind: str, n: int) -> list[bytes]:
    if kind == "sync_read":
        return [_sync_read_request(IDS)] * n
    if kind == "sync_write":   # alternate two goal sets: every goal changes at every packet
        two = [_sync_write({i: 2048 + k for i in IDS}) for k in (0, 1)]
        return [two[k & 1] for k in range(n)]
    if kind == "sync_write_same":
        return [_sync_write({i: 2048 for i in IDS})] * n
    if kind == "read4":
        return [_read_packets(1, 0)[0]] * n
    raise ValueError(f"unknown kind {kind!r} ({', '.join(KINDS)})")


def run(kind: str, n: int) -> int:
    """Feed n packets of `kind` through the bus as its thread would; the number of replies sent."""
    from servo_hil.daemon.live_rig import LiveRig
    from servo_hil.rig import load_rig
    from servo_hil.wiring.dynamixel import open_dynamixel_bus

    data_in = packets(kind, n)
    with tempfile.TemporaryDirectory() as tmp:
        rig_path = Path(tmp) / "rig.toml"
        rig_path.write_text(rig_text(1_000_000, True, 0, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"))
        rig, specs, kernel = load_rig(rig_path)
        live = LiveRig(rig, specs, kernel)
        live.start()
        try:
            server = open_dynamixel_bus(rig.buses[0], live, port=str(Path(tmp) / "tty"))
            bus, parser, lock, batch = server.bus, server.parser, server.lock, server.batch
            replies = 0
            for data in data_in:
                for packet in parser.feed(data, time.monotonic()):
                    with lock, batch():
                        replies += len(bus.handle(packet, None))
            server.port.close()
        finally:
            live.stop()
    return replies
