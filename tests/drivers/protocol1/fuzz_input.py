"""What the FF FF frame's fuzz tests feed a bus, for either dialect: mostly well-framed instructions aimed at the
control table, some with a bit flipped, and raw byte noise between them."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from drivers.emulated.protocol1.frame import BROADCAST_ID, encode_instruction


def random_input(rng: random.Random, n: int, instructions: Sequence[int], addresses: Sequence[int],
                 max_params: int, aim: float) -> Iterator[tuple[float, bytes]]:
    """`n` chunks (arrival time [s], 10 ms apart; bytes): 70 % an instruction to ID 1, 2, 3, broadcast or any ID
    with up to `max_params` - 1 random parameters whose first is one of `addresses` with probability `aim`, one in
    ten of them with a bit flipped; else 1 to 29 random bytes."""
    t = 0.0
    for _ in range(n):
        t += 0.01
        if rng.random() < 0.7:
            pid = rng.choice([1, 2, 3, BROADCAST_ID, rng.randrange(254)])
            params = bytes(rng.randrange(256) for _ in range(rng.randrange(0, max_params)))
            if params and rng.random() < aim:
                params = bytes([rng.choice(addresses)]) + params[1:]
            data = encode_instruction(pid, rng.choice(instructions), params)
            if rng.random() < 0.1:
                k = rng.randrange(len(data))
                data = data[:k] + bytes([data[k] ^ (1 << rng.randrange(8))]) + data[k + 1:]
        else:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 30)))
        yield t, data
