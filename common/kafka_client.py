"""A small synchronous Kafka client for the CLI and the chaos engine's evidence, over tidelog's
own wire codecs (no dependency).

    with KafkaClient([("127.0.0.4", 9092)]) as client:
        cluster = client.metadata(["demo"])                # brokers and partition leaders
        client.produce(leader, "demo", {0: batch}, acks=-1)  # batch: common.records.build_batch
        client.list_offsets(leader, "demo", {0: EARLIEST_TIMESTAMP})
        client.fetch(leader, "demo", {0: 0}, max_wait_ms=500)

One blocking `common.broker_connection` per broker, one request in flight on it, fixed API versions that both
tidelog and Kafka 2.1+ answer (Metadata v8, Produce v8, ListOffsets v5, Fetch v11, all
classic). Every read is bounded by a timeout and every response by a size limit; a broker
that fails (refused, reset, timed out, malformed answer) is dropped and `BrokerUnavailable`
raised, so callers refresh metadata and retry. Deciding what an error code means is the
caller's job (`RETRIABLE`); the codes and the requests are Kafka's.

`security` (security.sasl_client.client_security of librdkafka's settings, None for PLAINTEXT)
makes every connection TLS and/or SASL as Kafka's clients do: SaslHandshake v1 then
SaslAuthenticate v2. A refused login raises `SaslRefused` at once: unlike an unreachable broker
it is not retried (another broker would refuse the same credentials).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, TypeVar

from common.broker_connection import BrokerConnection, shown
from common.broker_connection import BrokerUnavailable as BrokerUnavailable  # re-exported: callers catch it
from common.client_security import ClientSecurity
from common.client_security import SaslRefused as SaslRefused  # re-exported: callers catch it
from common.errors import ErrorCode
from common.limits import CLIENT_CONNECT_TIMEOUT, CLIENT_REQUEST_TIMEOUT
from common.protocol import fetch, list_offsets, metadata, produce
from common.protocol.api_keys import ApiKey
from common.protocol.frame import strip_response_header
from common.protocol.primitives import Chunk
from common.request_versions import FETCH_VERSION, LIST_OFFSETS_VERSION, METADATA_VERSION
from common.units import MIB

MAX_RESPONSE_BYTES: Final = 64 * MIB
PRODUCE_VERSION: Final = 8
CONSUMER: Final = fetch.CONSUMER_REPLICA_ID
NO_LEADER: Final = -1
EARLIEST_TIMESTAMP: Final = list_offsets.EARLIEST_TIMESTAMP
LATEST_TIMESTAMP: Final = list_offsets.LATEST_TIMESTAMP

T = TypeVar("T")

# Kafka's retriable errors a client meets when leadership moves or a topic is being created:
# refresh metadata and send again (Kafka's RetriableException subclasses).
RETRIABLE: Final = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.OFFSET_NOT_AVAILABLE,
})


def error_name(code: int) -> str:
    """Kafka's name of an error code (as the admin API and Kafka's tools print it)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_CODE_{code}"


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int  # NO_LEADER: offline
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    error_code: int
    partitions: Mapping[int, PartitionInfo]

    def available(self) -> tuple[int, ...]:
        """Partitions with a leader, in order (Kafka's availablePartitionsForTopic)."""
        return tuple(p for p, info in sorted(self.partitions.items()) if info.leader != NO_LEADER)


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    brokers: Mapping[int, tuple[str, int]]
    topics: Mapping[str, TopicInfo]


def cluster_info(response: metadata.MetadataResponse) -> ClusterInfo:
    """The parts of a Metadata response a producer or consumer routes by."""
    brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
    topics = {t.name: TopicInfo(t.name, t.error_code, {
        p.partition_index: PartitionInfo(p.partition_index, p.leader_id, p.leader_epoch, p.replica_nodes,
                                         p.isr_nodes, p.error_code) for p in t.partitions})
        for t in response.topics if t.name is not None}  # a null name answers an unknown topic id (v12+)
    return ClusterInfo(brokers, topics)


class KafkaClient:
    """Connections to the bootstrap servers and every broker metadata names, opened on demand."""

    def __init__(self, bootstrap: Sequence[tuple[str, int]], *, client_id: str = "tidelog-cli",
                 request_timeout: float = CLIENT_REQUEST_TIMEOUT, security: ClientSecurity | None = None) -> None:
        if not bootstrap:
            raise ValueError("at least one bootstrap server is needed")
        self.bootstrap = tuple(bootstrap)
        self._client_id, self._timeout, self._security = client_id, request_timeout, security
        self.brokers: dict[int, tuple[str, int]] = {}
        self._connections: dict[tuple[str, int], BrokerConnection] = {}

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def _call(self, address: tuple[str, int], api_key: ApiKey, version: int, body: list[Chunk], *,
              timeout: float, expect_response: bool = True) -> memoryview | None:
        connection = self._connections.get(address)
        try:
            if connection is None:
                connection = self._connections[address] = BrokerConnection(
                    address, self._client_id, connect_timeout=min(CLIENT_CONNECT_TIMEOUT, timeout),
                    max_response_bytes=MAX_RESPONSE_BYTES, security=self._security)
            return connection.request(api_key, version, body, timeout=timeout, expect_response=expect_response)
        except BrokerUnavailable:
            self._drop(address)
            raise

    def _drop(self, address: tuple[str, int]) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()

    def _address(self, broker_id: int) -> tuple[str, int]:
        try:
            return self.brokers[broker_id]
        except KeyError:
            raise BrokerUnavailable(f"broker {broker_id} is not in the last metadata") from None

    def _decode(self, address: tuple[str, int], decode: Callable[[memoryview, int], T], raw: memoryview,
                version: int) -> T:
        connection = self._connections.get(address)
        if connection is None:  # dropped by a failure in between: nothing to decode against
            raise BrokerUnavailable(f"the connection to {shown(address)} is closed")
        try:
            return connection.decode(decode, raw, version)
        except BrokerUnavailable:
            self._drop(address)
            raise

    # -- the APIs ---------------------------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None, *, allow_auto_topic_creation: bool = False) -> ClusterInfo:
        """Metadata from the first broker that answers: known brokers first, then the bootstrap servers."""
        request = metadata.MetadataRequest(None if topics is None else tuple(topics), allow_auto_topic_creation)
        body = metadata.encode_metadata_request(request, METADATA_VERSION)
        failures: list[str] = []
        for address in dict.fromkeys([*self.brokers.values(), *self.bootstrap]):  # bounded: each address once
            try:
                raw = self._call(address, ApiKey.METADATA, METADATA_VERSION, body, timeout=self._timeout)
                assert raw is not None
                info = cluster_info(self._decode(address, metadata.decode_metadata_response, raw, METADATA_VERSION))
            except BrokerUnavailable as exc:
                failures.append(str(exc))
                continue
            self.brokers = dict(info.brokers)
            return info
        raise BrokerUnavailable("no broker answered a metadata request: " + "; ".join(failures))

    def produce(self, leader: int, topic: str, batches: Mapping[int, bytes], *, acks: int,
                timeout_ms: int) -> dict[int, produce.PartitionProduceResponse]:
        """One Produce request with a batch per partition; {} when acks=0 (no response)."""
        request = produce.ProduceRequest(None, acks, timeout_ms, (produce.TopicProduceData(topic, tuple(
            produce.PartitionProduceData(p, batch) for p, batch in sorted(batches.items()))),))
        address = self._address(leader)
        raw = self._call(address, ApiKey.PRODUCE, PRODUCE_VERSION,
                         produce.encode_produce_request(request, PRODUCE_VERSION),
                         timeout=timeout_ms / 1000 + self._timeout, expect_response=acks != 0)
        if raw is None:
            return {}
        response = self._decode(address, produce.decode_produce_response, raw, PRODUCE_VERSION)
        return {p.partition_index: p for t in response.responses if t.name == topic for p in t.partitions}

    def list_offsets(self, leader: int, topic: str,
                     timestamps: Mapping[int, int]) -> dict[int, Any]:
        """ListOffsets for EARLIEST_TIMESTAMP / LATEST_TIMESTAMP (or a time) per partition: kio's
        ListOffsetsPartitionResponse (partition_index, error_code, timestamp, offset) per partition."""
        request = list_offsets.request(LIST_OFFSETS_VERSION, CONSUMER, [
            (topic, p, ts, list_offsets.NO_LEADER_EPOCH) for p, ts in sorted(timestamps.items())])
        address = self._address(leader)
        raw = self._call(address, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION,
                         list_offsets.encode_request(request, LIST_OFFSETS_VERSION), timeout=self._timeout)
        assert raw is not None
        response = self._decode(address, list_offsets.decode_response, raw, LIST_OFFSETS_VERSION)
        return {p.partition_index: p for t in response.topics if t.name == topic for p in t.partitions}

    def fetch(self, leader: int, topic: str, positions: Mapping[int, int], *, max_wait_ms: int,
              max_bytes: int = 1 * MIB) -> dict[int, fetch.FetchPartitionResponse]:
        """A sessionless Fetch of every partition from its position (records up to the high watermark)."""
        request = fetch.FetchRequest(CONSUMER, max_wait_ms, 1, max_bytes, fetch.READ_UNCOMMITTED, (fetch.FetchTopic(
            topic, tuple(fetch.FetchPartition(p, offset, max_bytes) for p, offset in sorted(positions.items()))),))
        address = self._address(leader)
        raw = self._call(address, ApiKey.FETCH, FETCH_VERSION, fetch.encode_fetch_request(request, FETCH_VERSION),
                         timeout=max_wait_ms / 1000 + self._timeout)
        assert raw is not None
        response = self._decode(address, fetch.decode_fetch_response, raw, FETCH_VERSION)
        return {p.partition_index: p for t in response.responses if t.topic == topic for p in t.partitions}


    def call(self, broker_id: int | None, api_key: ApiKey, version: int, request: Any, encode: Any,
             decode: Any) -> Any:
        """Any other API (the group tools): `request` encoded, sent to the broker (None: the
        first bootstrap server) and its response decoded."""
        address = self.bootstrap[0] if broker_id is None else self._address(broker_id)
        raw = self._call(address, api_key, version, encode(request, version), timeout=self._timeout)
        assert raw is not None
        # a flexible version's response header v1 ends with tagged fields the codecs do not read
        return self._decode(address, lambda body, v: decode(strip_response_header(api_key, v, body), v), raw,
                            version)

