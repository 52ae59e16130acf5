"""One bus protocol, one name: every protocol a rig may name has an opener in the wiring, and no opener is for a
protocol the rig schema refuses."""

from __future__ import annotations

import importlib

import pytest

from drivers.emulated import PROTOCOLS
from servo_hil.rig import BusConfig
from servo_hil.wiring import OPENERS


def test_every_protocol_has_one_opener():
    assert list(OPENERS) == list(PROTOCOLS)
    for module, function in OPENERS.values():
        assert callable(getattr(importlib.import_module(module), function))


def test_an_unknown_protocol_names_the_known_ones():
    with pytest.raises(ValueError, match="one of dynamixel, dynamixel1, feetech, canopen, etherban, got 'modbus'"):
        BusConfig(name="x", protocol="modbus")
