"""The daemon's embedded MQTT broker: amqtt's, with the rig's credentials and a largest packet size."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass

from amqtt.adapters import StreamReaderAdapter, StreamWriterAdapter
from amqtt.broker import Broker
from amqtt.plugins.base import BaseAuthPlugin

from servo_hil.daemon.arguments import shown

log = logging.getLogger("servo-hil")


class RigCredentials(BaseAuthPlugin):
    """amqtt authentication plugin of the embedded broker: a client is admitted with the rig's username and
    password only (compared in constant time); anonymous clients and other credentials are refused."""

    @dataclass
    class Config:
        username: str = ""
        password: str = ""

    async def authenticate(self, *, session) -> bool:
        def same(given, expected: str) -> bool:
            given = given.encode() if isinstance(given, str) else bytes(given or b"")
            return hmac.compare_digest(given, expected.encode())

        ok = session.username is not None and same(session.username, self.config.username) \
            and same(session.password, self.config.password)
        if not ok:
            log.warning("embedded MQTT broker: refused client %s (username %s): wrong or no credentials",
                        shown(session.client_id), shown(session.username))
        return ok


class _BoundedReader(StreamReaderAdapter):
    """A broker connection's reader that drops the client instead of reading a packet body over `limit`
    bytes (amqtt reads a packet's body with one read of its remaining length, MQTT 3.1.1 §2.2.3)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int,
                 on_drop: Callable[[int], None]) -> None:
        super().__init__(reader)
        self._writer, self._limit, self._on_drop = writer, limit, on_drop
        self._dropped = False

    async def read(self, n: int = -1) -> bytes:
        if self._dropped:
            return b""   # end of stream: what is buffered of the dropped packet is never parsed as packets
        if n > self._limit:
            self._dropped = True
            self._writer.transport.abort()   # the body is never read whole
            self._on_drop(n)
            raise ConnectionResetError(f"MQTT packet of {n} bytes (limit {self._limit})")
        return await super().read(n)


class EmbeddedBroker(Broker):
    """amqtt's broker with a largest packet size (amqtt has no such setting)."""

    def __init__(self, config: dict, max_packet: int, on_oversize: Callable[[int], None]) -> None:
        super().__init__(config)
        self._max_packet = max_packet     # [bytes]
        self._on_oversize = on_oversize

    async def stream_connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                               listener_name: str) -> None:
        await self._client_connected(listener_name, _BoundedReader(reader, writer, self._max_packet, self._on_oversize),
                                     StreamWriterAdapter(writer))
