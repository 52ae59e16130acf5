"""Coverage-guided fuzz (hypothesis) of the SLCAN line codec through its Python API (`parse_frame`, `encode_frame`
and the C functions under them), against the Lawicel CANUSB command layout written out here (`oracle`): a line the
oracle accepts parses to its frame and encodes back to the same line in upper case; any other line raises
ValueError and nothing else."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drivers.emulated.slcan.adapter import CanFrame, encode_frame, parse_frame
from drivers.emulated.slcan.codec import encode_line

# >= 10^4 lines per property in the normal run: EXAMPLES hypothesis examples, each the drawn line and VARIANTS
# seeded random ones; 10^5 examples under -m soak
EXAMPLES = 1_000
SOAK_EXAMPLES = 100_000
VARIANTS = 9
_fuzz = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
_soak = settings(_fuzz, max_examples=SOAK_EXAMPLES)

_LINE = re.compile(rb"(?:(?P<kind>[tr])(?P<id>[0-9A-Fa-f]{3})|(?P<xkind>[TR])(?P<xid>[0-9A-Fa-f]{8}))"
                   rb"(?P<dlc>[0-8])(?P<data>(?:[0-9A-Fa-f]{2})*)", re.DOTALL)
_HEXCH = b"0123456789ABCDEFabcdef"


def oracle(line: bytes) -> CanFrame | None:
    """The frame of a well-formed transmit command, None for anything else: `tiiildd..` with an 11-bit id in 3 hex
    digits, `Tiiiiiiiildd..` with a 29-bit id in 8, `r`/`R` likewise without data, one DLC digit 0..8, exactly DLC
    data bytes as two hex digits each (Lawicel CANUSB manual)."""
    m = _LINE.fullmatch(line)
    if not m:
        return None
    kind, ident = (m["kind"], m["id"]) if m["kind"] else (m["xkind"], m["xid"])
    dlc, data = int(m["dlc"]), bytes.fromhex(m["data"].decode())
    extended = kind in b"TR"
    value = int(ident, 16)
    if value > (0x1FFFFFFF if extended else 0x7FF):
        return None
    if kind in b"rR":
        return None if data else CanFrame(value, b"", extended=extended, remote=True, dlc=dlc)
    return CanFrame(value, data, extended=extended) if len(data) == dlc else None


def _parsed(line: bytes) -> CanFrame | None:
    try:
        return parse_frame(line)
    except ValueError:
        return None


def check_line(line: bytes) -> None:
    want = oracle(line)
    assert _parsed(line) == want, line
    if want is not None:
        assert encode_frame(want) == line[:1] + line[1:].upper() + b"\r"   # hex digits out in upper case
        assert parse_frame(encode_frame(want)[:-1]) == want


# lines that are almost well formed: a letter, hex digits, a DLC, pairs of hex digits, one thing possibly off
_near = st.builds(
    lambda kind, ident, dlc, data, junk: kind + ident + dlc + data + junk,
    st.sampled_from([b"t", b"T", b"r", b"R", b"x", b""]),
    st.text("0123456789ABCDEFabcdefG", min_size=0, max_size=9).map(str.encode),
    st.sampled_from([b"0", b"1", b"4", b"8", b"9", b"", b"a"]),
    st.text("0123456789ABCDEFabcdef", max_size=18).map(str.encode),
    st.sampled_from([b"", b"", b"", b"0", b"\r", b" ", b"\x00"]),
)
lines = st.one_of(_near, st.binary(max_size=32))


def random_line(rng: random.Random) -> bytes:
    if rng.random() < 0.2:
        return rng.randbytes(rng.randint(0, 32))
    kind = rng.choice(b"tTrRx")
    width = rng.choice([3, 8, rng.randint(0, 9)])
    ident = bytes(rng.choice(_HEXCH) for _ in range(width))
    dlc = rng.choice([rng.randint(0, 8), 9])
    n = rng.choice([dlc, rng.randint(0, 9), 0])
    data = bytes(rng.choice(_HEXCH) for _ in range(2 * n + (rng.random() < 0.1)))
    return bytes([kind]) + ident + str(dlc).encode() + data


@_fuzz
@given(lines, st.randoms(use_true_random=False))
def test_parse_matches_the_lawicel_layout(line, rng):
    check_line(line)
    for _ in range(VARIANTS):
        check_line(random_line(rng))


@_fuzz
@given(st.booleans(), st.booleans(), st.integers(0, 0x1FFFFFFF), st.binary(max_size=8), st.integers(0, 8),
       st.one_of(st.none(), st.integers(0, 10**6)))
def test_encode_round_trips(extended, remote, ident, data, dlc, stamp):
    ident &= 0x1FFFFFFF if extended else 0x7FF
    frame = (CanFrame(ident, b"", extended=extended, remote=True, dlc=dlc) if remote
             else CanFrame(ident, data, extended=extended))
    line = encode_frame(frame, stamp)
    assert line.endswith(b"\r")
    body = line[:-1] if stamp is None else line[:-5]
    if stamp is not None:
        assert int(line[-5:-1], 16) == stamp % 60000
    assert parse_frame(body) == frame and oracle(body) == frame


@_fuzz
@given(st.integers(-(2**70), 2**70), st.binary(max_size=12), st.booleans(), st.booleans(), st.integers(-3, 12))
def test_encode_line_refuses_what_is_no_frame(ident, data, extended, remote, dlc):
    """The C encoder raises on impossible input (more than 8 bytes, DLC out of 0..8, an id no C long holds)
    instead of writing past its buffer; it never returns a line longer than a Lawicel line can be."""
    try:
        line = encode_line(ident, data, extended, remote, dlc)
    except (ValueError, OverflowError):
        return
    assert len(data) <= 8 and 0 <= dlc <= 8 and len(line) <= 1 + 8 + 1 + 16 + 4 + 1


@pytest.mark.soak
@_soak
@given(lines)
def test_parse_soak(line):
    check_line(line)
