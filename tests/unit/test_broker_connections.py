"""broker/broker_connections.py with fake connections: one connection per broker reused, a failed
request drops (and aborts) its connection so the next one reconnects, a broker without an
endpoint fails before connecting, and one request in flight per broker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.broker_connections import BrokerConnections
from broker.replication.kafka_connection import BrokerConnectionError
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from metadata.image import EMPTY_IMAGE, MetadataImage

IMAGE = EMPTY_IMAGE
API = ApiKey.API_VERSIONS
REQUEST = messages.request_module(API, 0).ApiVersionsRequest()


class Conn:
    def __init__(self, peers: Peers, address: tuple[str, int]) -> None:
        self.peers, self.address, self.closed = peers, address, False

    async def request(self, api_key: ApiKey, version: int, body: list[Any], decode: Any) -> Any:
        self.peers.in_flight += 1
        self.peers.most_in_flight = max(self.peers.most_in_flight, self.peers.in_flight)
        try:
            await asyncio.sleep(0)  # let a concurrent request to the same broker try to overlap
            if self.peers.fail:
                raise BrokerConnectionError("reset by peer")
            return (self.address, api_key, version)
        finally:
            self.peers.in_flight -= 1

    def abort(self) -> None:
        self.closed = True


class Peers:
    def __init__(self) -> None:
        self.opened: list[Conn] = []
        self.fail = False
        self.in_flight = self.most_in_flight = 0

    def endpoint(self, image: MetadataImage, broker: int) -> tuple[str, int] | None:
        return None if broker == 9 else (f"127.0.0.{broker}", 9092)

    async def connect(self, host: str, port: int) -> Any:
        conn = Conn(self, (host, port))
        self.opened.append(conn)
        return conn


async def test_one_connection_per_broker_is_reused() -> None:
    peers = Peers()
    connections = BrokerConnections(peers.endpoint, peers.connect)
    assert await connections.request(IMAGE, 1, API, 0, REQUEST) == (("127.0.0.1", 9092), API, 0)
    await connections.request(IMAGE, 1, API, 0, REQUEST)
    await connections.request(IMAGE, 2, API, 0, REQUEST)
    assert [c.address for c in peers.opened] == [("127.0.0.1", 9092), ("127.0.0.2", 9092)]
    connections.close()
    assert all(c.closed for c in peers.opened)


async def test_a_failed_request_drops_its_connection_and_the_next_reconnects() -> None:
    peers = Peers()
    connections = BrokerConnections(peers.endpoint, peers.connect)
    await connections.request(IMAGE, 1, API, 0, REQUEST)
    peers.fail = True
    with pytest.raises(BrokerConnectionError):
        await connections.request(IMAGE, 1, API, 0, REQUEST)
    assert peers.opened[0].closed
    peers.fail = False
    await connections.request(IMAGE, 1, API, 0, REQUEST)
    assert len(peers.opened) == 2 and not peers.opened[1].closed


async def test_a_broker_without_an_endpoint_fails_before_connecting() -> None:
    peers = Peers()
    with pytest.raises(BrokerConnectionError, match="broker 9 has no endpoint"):
        await BrokerConnections(peers.endpoint, peers.connect).request(IMAGE, 9, API, 0, REQUEST)
    assert peers.opened == []


async def test_one_request_in_flight_per_broker() -> None:
    peers = Peers()
    connections = BrokerConnections(peers.endpoint, peers.connect)
    await asyncio.gather(*(connections.request(IMAGE, 1, API, 0, REQUEST) for _ in range(5)))
    assert peers.most_in_flight == 1 and len(peers.opened) == 1
