"""A blocking Kafka protocol client for one partition: its leader, Fetch, ListOffsets.

A Spark task reads one offset range of one partition. confluent-kafka hands each record to
Python as an object; this client instead gets the Fetch response's record batches as bytes
so `fetch_columns` can turn them into Arrow columns in bulk. The reader uses it on PLAINTEXT
only (`supports`); any other security setting keeps the task on confluent-kafka. The
exactly-once sink reads its commit log through it with the sink's own security settings
(security.sasl_client.client_security of the kafka.* options, librdkafka's names).

Fixed API versions every Kafka since 2.1 (and tidelog) answers: Metadata v8, Fetch v11,
ListOffsets v5 — all non-flexible, so responses have no header tags to skip. One socket
(`common.broker_connection`), one request in flight, every wait bounded by a socket timeout.
A broker that cannot be reached or answers garbage raises `BrokerUnavailable`; the caller
finds the leader again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Final, TypeVar

from common.broker_connection import BrokerConnection, BrokerUnavailable
from common.client_security import ClientSecurity
from common.config import KAFKA_PORT
from common.errors import ErrorCode
from common.limits import CLIENT_CONNECT_TIMEOUT, CLIENT_REQUEST_TIMEOUT
from common.protocol import fetch, list_offsets, metadata
from common.protocol.api_keys import ApiKey
from common.protocol.primitives import Chunk
from common.request_versions import FETCH_VERSION, LIST_OFFSETS_VERSION, METADATA_VERSION
from common.units import MIB

MAX_RESPONSE_BYTES: Final = 256 * MIB
EARLIEST: Final = list_offsets.EARLIEST_TIMESTAMP
LATEST: Final = list_offsets.LATEST_TIMESTAMP


T = TypeVar("T")


def supports(kafka: Mapping[str, str]) -> bool:
    """Whether this client can talk to the cluster the kafka.* options describe (no TLS, no SASL)."""
    protocol = kafka.get("security.protocol", "plaintext").strip().lower()
    return protocol == "plaintext" and not any(key.startswith(("ssl.", "sasl.")) for key in kafka)


def bootstrap_addresses(servers: str) -> list[tuple[str, int]]:
    """`host:port,host:port` (IPv6 hosts in brackets) as addresses; Kafka's port (9092) when a
    port is left out."""
    addresses = []
    for entry in (part.strip() for part in servers.split(",")):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or host.endswith(":") or (":" in host and not host.startswith("[")):
            host, port = entry, str(KAFKA_PORT)
        addresses.append((host.strip("[]"), int(port)))
    return addresses


class PartitionClient:
    """Requests about one topic-partition, sent to its leader."""

    def __init__(self, bootstrap: list[tuple[str, int]], topic: str, partition: int, client_id: str, *,
                 security: ClientSecurity | None = None) -> None:
        if not bootstrap:
            raise ValueError("kafka.bootstrap.servers names no server")
        self.bootstrap, self.topic, self.partition = bootstrap, topic, partition
        self._client_id, self._security = client_id, security
        self._connection: BrokerConnection | None = None
        self.leader: tuple[str, int] | None = None

    def __enter__(self) -> PartitionClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def find_leader(self) -> None:
        """Ask the bootstrap servers (then the last leader) who leads the partition."""
        self.close()
        body = metadata.encode_metadata_request(metadata.MetadataRequest((self.topic,), False), METADATA_VERSION)
        failures = []
        for address in dict.fromkeys([*self.bootstrap, *([self.leader] if self.leader else [])]):  # each once
            try:
                connection = self._connect(address)
                raw = self._request(ApiKey.METADATA, METADATA_VERSION, body, CLIENT_REQUEST_TIMEOUT)
                answer = connection.decode(metadata.decode_metadata_response, raw, METADATA_VERSION)
            except BrokerUnavailable as exc:
                failures.append(f"{address[0]}:{address[1]}: {exc}")
                continue
            finally:
                self.close()
            brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
            for topic in answer.topics:
                for p in topic.partitions if topic.name == self.topic else ():
                    if p.partition_index == self.partition and p.leader_id in brokers:
                        self.leader = brokers[p.leader_id]
                        return
            failures.append(f"{address[0]}:{address[1]}: no leader known for {self.topic}-{self.partition}")
        raise BrokerUnavailable("; ".join(failures))

    def fetch(self, position: int, *, isolation_level: int, max_bytes: int,
              max_wait_ms: int) -> fetch.FetchPartitionResponse:
        """One sessionless Fetch of the partition from `position` (records as a view of the response)."""
        request = fetch.FetchRequest(fetch.CONSUMER_REPLICA_ID, max_wait_ms, 1, max_bytes, isolation_level, (
            fetch.FetchTopic(self.topic, (fetch.FetchPartition(self.partition, position, max_bytes),)),))
        raw = self._leader_request(ApiKey.FETCH, FETCH_VERSION, fetch.encode_fetch_request(request, FETCH_VERSION),
                                   max_wait_ms / 1000 + CLIENT_REQUEST_TIMEOUT)
        answer = self._decode(fetch.decode_fetch_response, raw, FETCH_VERSION)
        if answer.error_code != ErrorCode.NONE:
            return fetch.FetchPartitionResponse(self.partition, answer.error_code, -1, None)
        for topic in answer.responses:
            for p in topic.partitions if topic.topic == self.topic else ():
                if p.partition_index == self.partition:
                    return p
        raise BrokerUnavailable(f"the Fetch response does not mention {self.topic}-{self.partition}")

    def list_offset(self, timestamp: int, isolation_level: int) -> int:
        """The partition's offset for EARLIEST / LATEST (the log start / high watermark or LSO)."""
        request = list_offsets.request(LIST_OFFSETS_VERSION, fetch.CONSUMER_REPLICA_ID, [
            (self.topic, self.partition, timestamp, list_offsets.NO_LEADER_EPOCH)], isolation_level=isolation_level)
        raw = self._leader_request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION,
                                   list_offsets.encode_request(request, LIST_OFFSETS_VERSION),
                                   CLIENT_REQUEST_TIMEOUT)
        answer = self._decode(list_offsets.decode_response, raw, LIST_OFFSETS_VERSION)
        for topic in answer.topics:
            for p in topic.partitions if topic.name == self.topic else ():
                if p.partition_index == self.partition:
                    if p.error_code != ErrorCode.NONE:
                        raise BrokerUnavailable(f"ListOffsets of {self.topic}-{self.partition}: "
                                                f"{ErrorCode(p.error_code).name}")
                    return int(p.offset)
        raise BrokerUnavailable(f"the ListOffsets response does not mention {self.topic}-{self.partition}")

    # -- the socket --------------------------------------------------------------------------

    def _leader_request(self, api_key: ApiKey, version: int, body: list[Chunk], timeout: float) -> memoryview:
        if self.leader is None:
            self.find_leader()
        assert self.leader is not None
        if self._connection is None:
            self._connect(self.leader)
        return self._request(api_key, version, body, timeout)

    def _connect(self, address: tuple[str, int]) -> BrokerConnection:
        self._connection = BrokerConnection(address, self._client_id, connect_timeout=CLIENT_CONNECT_TIMEOUT,
                                            max_response_bytes=MAX_RESPONSE_BYTES, security=self._security)
        return self._connection

    def _request(self, api_key: ApiKey, version: int, body: list[Chunk], timeout: float) -> memoryview:
        assert self._connection is not None
        try:
            raw = self._connection.request(api_key, version, body, timeout=timeout)
        except BrokerUnavailable as exc:
            self._connection = None  # closed by the failure
            raise BrokerUnavailable(f"{self.topic}-{self.partition}: {exc}") from None
        assert raw is not None
        return raw

    def _decode(self, decode: Callable[[memoryview, int], T], raw: memoryview, version: int) -> T:
        assert self._connection is not None
        try:
            return self._connection.decode(decode, raw, version)
        except BrokerUnavailable as exc:
            self._connection = None
            raise BrokerUnavailable(f"{self.topic}-{self.partition}: {exc}") from None
