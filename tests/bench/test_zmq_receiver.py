"""The benchmark's C subscriber (bench/zmq_receiver.pyx) over a real PUB/SUB pair.

It must keep every well-formed [topic, payload, timestamp] message with the right fields, skip and count
messages of another shape without losing the next one, stamp receive times that are after the send
and close to it, and end on time when nothing comes.
"""

from __future__ import annotations

import threading
import time

import msgpack
import pytest
import zmq

from bench import loop, zmq_receiver


@pytest.fixture
def pair():
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVTIMEO, 50)
    sub.connect(f"tcp://127.0.0.1:{port}")
    deadline = time.monotonic() + 5
    while True:  # slow joiner: publish probes until one arrives
        pub.send_multipart([b"probe", b"", b"0"])
        if sub.poll(20):
            while sub.poll(20):
                sub.recv_multipart()
            break
        assert time.monotonic() < deadline, "subscription never settled"
    yield pub, sub
    pub.close(0)
    sub.close(0)
    ctx.term()


def _send_later(pub: zmq.Socket, messages: list[list[bytes]], delay_s: float = 0.1) -> threading.Thread:
    def send() -> None:
        time.sleep(delay_s)
        for frames in messages:
            pub.send_multipart(frames)
    t = threading.Thread(target=send)
    t.start()
    return t


def test_keeps_fields_and_skips_malformed(pair):
    pub, sub = pair
    payload = msgpack.packb({"seq": 7, "t": 0.5, "position": 1.25})
    long_topic = b"rig/" + b"x" * 100
    messages = [[b"rig/j0", payload, b"12.5"],
                [b"only-one-frame"],                                     # malformed: skipped
                [b"rig/j1", payload + b"\0" * 300, b"13.000000001"],
                [b"a", b"b", b"1.0", b"fourth frame"],                   # malformed: skipped, rest drained
                [long_topic, b"", b"14"]]
    sender = _send_later(pub, messages)
    t_before = time.time()
    rx = zmq_receiver.receive(sub.underlying, 0.5, 100)
    sender.join()
    assert rx["malformed"] == 2
    assert list(rx["topic"]) == [b"rig/j0", b"rig/j1", long_topic[:64]]
    assert list(rx["stamp"]) == [12.5, 13.000000001, 14.0]
    assert list(rx["payload_len"]) == [len(payload), len(payload) + 300, 0]
    assert bytes(rx["head"][0]) == payload[:32] and bytes(rx["head"][2]) == bytes(32)
    assert all(t_before < t < time.time() for t in rx["received"])
    assert list(rx["received"]) == sorted(rx["received"])
    assert loop._seq_gaps({"topic": rx["topic"][:2], "head": rx["head"][:2]}) == 0


def test_sequence_gaps_counted_per_topic(pair):
    pub, sub = pair
    seqs = [(b"r/a", 1), (b"r/b", 1), (b"r/a", 2), (b"r/a", 5), (b"r/b", 2), (b"r/b", 4)]
    sender = _send_later(pub, [[topic, msgpack.packb({"seq": s, "t": 0.0}), b"1"] for topic, s in seqs])
    rx = zmq_receiver.receive(sub.underlying, 0.4, 100)
    sender.join()
    assert len(rx["topic"]) == len(seqs)
    assert loop._seq_gaps(rx) == 2 + 1


def test_window_ends_without_messages_and_at_capacity(pair):
    pub, sub = pair
    t0 = time.monotonic()
    rx = zmq_receiver.receive(sub.underlying, 0.2, 10)
    # the window ends on time with nothing received (generous upper bounds: a loaded or stolen host wakes late)
    assert len(rx["received"]) == 0 and 0.2 <= rx["window_s"] < 0.2 + 0.8
    assert 0.2 <= time.monotonic() - t0 < 0.2 + 2.0
    sender = _send_later(pub, [[b"t", b"p", b"1"]] * 5, delay_s=0.05)
    rx = zmq_receiver.receive(sub.underlying, 5.0, 3)
    sender.join()
    assert len(rx["received"]) == 3 and rx["window_s"] < 2.0
