"""A broker's own requests to the other brokers on the inter-broker listener: one KafkaConnection
per peer broker, opened on first use, reused while it stays open, dropped when a request on it
fails (the next request opens a new one), and one request in flight on it at a time.

    peers = BrokerConnections(endpoint, connect)
    response = await peers.request(image, broker, ApiKey.WRITE_TXN_MARKERS, 1, request)  # raises on failure
    peers.close()

Used by the transaction coordinator's marker sender, the partition leaders' transaction
verification and the share partition leaders' persister: each asks a different broker for a
different thing, and each turns a failure into the error its own caller expects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from broker.replication.kafka_connection import BrokerConnectionError, KafkaConnection
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from metadata.image import MetadataImage

Endpoint = Callable[[MetadataImage, int], "tuple[str, int] | None"]
Connect = Callable[[str, int], Awaitable[KafkaConnection]]


class BrokerConnections:
    def __init__(self, endpoint: Endpoint, connect: Connect) -> None:
        self._endpoint, self._connect = endpoint, connect
        # bounded by the cluster's brokers: one entry per peer this broker has asked something
        self._connections: dict[int, KafkaConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def request(self, image: MetadataImage, broker: int, api: ApiKey, version: int, request: Any) -> Any:
        """`request`'s decoded response from `broker`. Raises BrokerConnectionError or OSError when
        the broker has no endpoint, cannot be reached or the exchange fails; the connection is
        dropped then, so that the next request reconnects."""
        async with self._locks.setdefault(broker, asyncio.Lock()):
            try:
                conn = await self._connection(image, broker)
                return await conn.request(api, version, messages.encode_request(request, version),
                                          messages.response_decoder(api))
            except (BrokerConnectionError, OSError):
                dropped = self._connections.pop(broker, None)
                if dropped is not None:
                    dropped.abort()
                raise

    async def _connection(self, image: MetadataImage, broker: int) -> KafkaConnection:
        conn = self._connections.get(broker)
        if conn is not None and not conn.closed:
            return conn
        address = self._endpoint(image, broker)
        if address is None:
            raise BrokerConnectionError(f"broker {broker} has no endpoint on this listener")
        conn = self._connections[broker] = await self._connect(*address)
        return conn

    def close(self) -> None:
        for conn in self._connections.values():
            conn.abort()
        self._connections.clear()
