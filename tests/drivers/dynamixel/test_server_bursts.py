"""Paced replies that follow each other without a gap go out as one paced write (drivers/emulated/dynamixel/server.py,
grouped by bus.pyx's `bursts`): the byte schedule must be the one the separate replies had (each byte due at
its reply's start + its index × one byte time), only the syscalls and spins are fewer."""

from __future__ import annotations

from drivers.emulated.dynamixel.bus import Transmission
from drivers.emulated.dynamixel.bus import bursts as _bursts
from drivers.wire.ports import wire_time_s

BAUD = 1_000_000


def _schedule(parts: list[tuple[bytes, float]]) -> list[tuple[int, float]]:
    """(byte, due time of its last bit) for every byte, as PacedWriter releases them."""
    byte_s = wire_time_s(1, BAUD)
    return [(b, start + (k + 1) * byte_s) for data, start in parts for k, b in enumerate(data)]


def _back_to_back(sizes: list[int], first: float = 0.0) -> list[Transmission]:
    out, t = [], first
    for i, n in enumerate(sizes):
        out.append(Transmission(bytes([i]) * n, t, i))
        t += wire_time_s(n, BAUD)
    return out


def test_back_to_back_replies_become_one_write_with_the_same_byte_schedule():
    replies = _back_to_back([15] * 12)
    bursts = _bursts(replies, BAUD)
    assert len(bursts) == 1 and bursts[0][1] == 0.0
    want = _schedule([(tx.data, tx.offset_s) for tx in replies])
    got = _schedule(bursts)
    assert [b for b, _ in got] == [b for b, _ in want]
    assert max(abs(a - b) for (_, a), (_, b) in zip(got, want, strict=True)) < 1e-12


def test_gaps_keep_replies_apart():
    rdt = 500e-6   # Return Delay Time 250: each reply starts 500 µs after the previous one ends
    replies, t = [], 0.0
    for i in range(3):
        t += rdt
        replies.append(Transmission(bytes([i]) * 15, t, i))
        t += wire_time_s(15, BAUD)
    assert _bursts(replies, BAUD) == [(tx.data, tx.offset_s) for tx in replies]


def test_a_delayed_reply_splits_the_burst():
    replies = _back_to_back([15, 15, 15, 15])
    late = replies[2]._replace(offset_s=replies[2].offset_s + 0.01)   # an injected delay fault
    bursts = _bursts([replies[0], replies[1], late, replies[3]], BAUD)
    assert [(len(d), s) for d, s in bursts] == [(30, 0.0), (15, late.offset_s), (15, replies[3].offset_s)]
    assert _bursts([], BAUD) == []
