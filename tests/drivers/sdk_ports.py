"""The vendors' own PortHandlers with a longer packet timeout, for the bus tests that run a client against a daemon.

dynamixel-sdk and scservo_sdk (feetech-servo-sdk) share the port handler's shape: `setPacketTimeout(packet_length)`
sets `packet_timeout` [ms] from the packet's wire time plus a fixed ~34 ms (port_handler.py of each). On 2 shared
cores, with the SDK spinning on one, a daemon starved of CPU for a few hundred ms is the host's stall, not a lost
reply; the slack keeps a test from taking it for one. Expected timeouts then take `slack_ms` longer.
"""

from __future__ import annotations

import dynamixel_sdk as sdk


class SlackTimeout:
    """Mixin before an SDK's PortHandler: `slack_ms` [ms] added to every packet timeout. The broadcast-ping window
    (setPacketTimeoutMillis) is left alone."""

    slack_ms = 0.0

    def setPacketTimeout(self, packet_length):
        super().setPacketTimeout(packet_length)
        self.packet_timeout += self.slack_ms


class SlackPortHandler(SlackTimeout, sdk.PortHandler):
    """dynamixel-sdk's PortHandler waiting `slack_ms` [ms] longer per packet (timing tests use 0)."""

    def __init__(self, path: str, slack_ms: float = 0.0):
        super().__init__(path)
        self.slack_ms = slack_ms
