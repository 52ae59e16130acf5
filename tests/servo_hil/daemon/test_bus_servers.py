"""Every bus a rig can declare is opened as a `drivers.wire.server.BusServer` (servo_hil/wiring `open_buses`): the
daemon starts it, prints its `path` and `summary`, watches `error` and stops it, whatever its protocol. The eRob
buses of one rig share one drive set, made once by `open_buses` and handed to each."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
import zmq

from drivers.wire.server import BusServer
from servo_hil.wiring import open_buses
from tests.servo_hil.daemon import free_port, running_rig


def _rig(tmp_path, name: str = "servers", real_dxl: str | None = None, real_can: str | None = None,
         etherban: bool = True) -> str:
    """A rig with a Dynamixel bus (one XM430) and a CANopen bus (one eRob), each a mirror of `real_*` when
    given, and an Etherban bus over the eRob when `etherban`."""
    dxl_real = f'real = "{real_dxl}"\n' if real_dxl else ""
    can_real = f'real = "{real_can}"\n' if real_can else ""
    ether = (f'[[buses]]\nname = "ethercat"\nprotocol = "etherban"\nbind = "tcp://127.0.0.1:{free_port()}"\n'
             f'joints = ["e100"]\n') if etherban else ""
    return f"""name = "{name}"
[loop]
lockstep = true
[mqtt]
enabled = false
[[buses]]
name = "dxl"
protocol = "dynamixel"
port = "{tmp_path / 'tty-dxl'}"
baud = 1000000
{dxl_real}[[buses]]
name = "can"
protocol = "canopen"
port = "{tmp_path / 'tty-can'}"
baud = 1000000
{can_real}{ether}[[actuators]]
joint = "x"
catalog = "xm430_w350"
load = {{ mass = 0.3, length = 0.1 }}
bus = "dxl"
id = 1
[[actuators]]
joint = "e100"
catalog = "erob80_100"
load = {{ mass = 2.0, length = 0.2 }}
bus = "can"
id = 2
"""


@contextlib.contextmanager
def _serving(live) -> Iterator[list[BusServer]]:
    """Every bus of the rig opened and started (each must be a `BusServer`), all stopped on leaving."""
    servers = list(open_buses(live))
    try:
        for server in servers:
            assert isinstance(server, BusServer), type(server).__name__
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def live(tmp_path):
    with running_rig(tmp_path / "rig.toml", _rig(tmp_path)) as live:
        yield live


def test_every_protocol_opens_a_bus_server(live, tmp_path):
    with _serving(live) as servers:
        dxl, can, ether = servers
        assert os.path.realpath(dxl.path) == os.path.realpath(tmp_path / "tty-dxl") and "IDs 1" in dxl.summary
        assert os.path.realpath(can.path) == os.path.realpath(tmp_path / "tty-can") and "nodes 2" in can.summary
        assert ether.path == live.rig.buses[2].bind and "devices 0: " in ether.summary
        assert [s.error for s in servers] == [None, None, None]
    assert not os.path.lexists(tmp_path / "tty-dxl") and not os.path.lexists(tmp_path / "tty-can")
    with zmq.Context() as ctx, ctx.socket(zmq.REP) as sock:     # the Etherban endpoint is free again
        sock.bind(live.rig.buses[2].bind)


def test_the_erob_buses_share_one_drive_set_with_one_reset_hook(live):
    hooks = len(live.reset_hooks)
    dxl, can, ether = open_buses(live)
    try:
        assert can.drives is ether.drives
        # one power-up of the drive set and one of the Dynamixel servos per `reset`
        assert live.reset_hooks[hooks:].count(can.drives.power_cycle) == 1 and len(live.reset_hooks) == hooks + 2
        assert ether.devices[0] is can.nodes[0].drive     # one simulated drive, reached both ways
    finally:
        for server in (dxl, can, ether):
            server.stop()


def test_a_rig_without_an_erob_bus_makes_no_drive_set(tmp_path):
    """A Dynamixel-only rig: `reset` power-cycles its servos and nothing else (no drive set, no 1 kHz thread)."""
    text = f"""name = "dxl-only"
[loop]
lockstep = true
[mqtt]
enabled = false
[[buses]]
name = "dxl"
protocol = "dynamixel"
port = "{tmp_path / "tty-dxl"}"
baud = 1000000
[[actuators]]
joint = "x"
catalog = "xm430_w350"
load = {{ mass = 0.3, length = 0.1 }}
bus = "dxl"
id = 1
"""
    with running_rig(tmp_path / "rig.toml", text) as live:
        hooks = len(live.reset_hooks)
        (dxl,) = open_buses(live)
        try:
            assert len(live.reset_hooks) == hooks + 1 and not hasattr(dxl, "drives")
        finally:
            dxl.stop()


def test_the_mirrors_are_bus_servers_too(tmp_path):
    """A Dynamixel mirror in front of a serial device (a pty's far end here) and a CAN mirror in front of a
    python-can bus (its `virtual` interface here)."""
    master, slave = os.openpty()
    rig = _rig(tmp_path, "mirrors", real_dxl=os.ttyname(slave), real_can="virtual:servo-hil-test-mirrors",
               etherban=False)
    try:
        with running_rig(tmp_path / "rig.toml", rig) as live:
            with _serving(live) as servers:
                dxl, can = servers
                assert "mirroring " + os.ttyname(slave) in dxl.summary
                assert "mirroring virtual:servo-hil-test-mirrors" in can.summary
                assert [s.error for s in servers] == [None, None]
            assert [s.error for s in servers] == [None, None]
    finally:
        os.close(master)
        os.close(slave)
