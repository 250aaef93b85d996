"""ElectLeaders (key 43), v0–v2 (KIP-183, KIP-460): preferred or unclean leader elections
for the named partitions, or for every partition that needs one when the list is null.
v1 adds the election type and a top-level error code; v2 is the first flexible version."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer


class ElectionType(IntEnum):
    """Kafka's org.apache.kafka.common.ElectionType ids."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ElectLeadersRequest:
    topic_partitions: tuple[TopicPartitions, ...] | None  # None: every partition that needs one
    timeout_ms: int = 60_000
    election_type: int = ElectionType.PREFERRED  # v1+; v0 is always preferred


@dataclass(frozen=True, slots=True)
class PartitionResult:
    partition_id: int
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicaElectionResult:
    topic: str
    partition_result: tuple[PartitionResult, ...]


@dataclass(frozen=True, slots=True)
class ElectLeadersResponse:
    replica_election_results: tuple[ReplicaElectionResult, ...]
    error_code: int = 0  # v1+
    throttle_time_ms: int = 0


def decode_elect_leaders_request(body: memoryview, version: int) -> ElectLeadersRequest:
    check_version(ApiKey.ELECT_LEADERS, version)
    r = reader_for(ApiKey.ELECT_LEADERS, version, body)
    election_type = r.int8() if version >= 1 else ElectionType.PREFERRED

    def topic(r: Reader) -> TopicPartitions:
        t = TopicPartitions(r.string(), r.int32_array())
        r.tagged_fields()
        return t

    topics = r.nullable_array(topic, 2)
    timeout_ms = r.int32()
    r.tagged_fields()
    return ElectLeadersRequest(topics, timeout_ms, election_type)


def encode_elect_leaders_request(req: ElectLeadersRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_elect_leaders_request`."""
    check_version(ApiKey.ELECT_LEADERS, version)
    w = writer_for(ApiKey.ELECT_LEADERS, version)
    if version >= 1:
        w.int8(req.election_type)

    def topic(w: Writer, t: TopicPartitions) -> None:
        w.string(t.topic)
        w.int32_array(t.partitions)
        w.tagged_fields()

    w.nullable_array(req.topic_partitions, topic)
    w.int32(req.timeout_ms)
    w.tagged_fields()
    return w.chunks()


def encode_elect_leaders_response(resp: ElectLeadersResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.ELECT_LEADERS, version)
    w = writer_for(ApiKey.ELECT_LEADERS, version)
    w.int32(resp.throttle_time_ms)
    if version >= 1:
        w.int16(resp.error_code)

    def partition(w: Writer, p: PartitionResult) -> None:
        w.int32(p.partition_id)
        w.int16(p.error_code)
        w.nullable_string(p.error_message)
        w.tagged_fields()

    def topic(w: Writer, t: ReplicaElectionResult) -> None:
        w.string(t.topic)
        w.array(t.partition_result, partition)
        w.tagged_fields()

    w.array(resp.replica_election_results, topic)
    w.tagged_fields()
    return w.chunks()


def decode_elect_leaders_response(body: memoryview, version: int) -> ElectLeadersResponse:
    """Client side (tests, tools): the inverse of `encode_elect_leaders_response`."""
    check_version(ApiKey.ELECT_LEADERS, version)
    r = reader_for(ApiKey.ELECT_LEADERS, version, body)
    throttle = r.int32()
    error_code = r.int16() if version >= 1 else 0

    def partition(r: Reader) -> PartitionResult:
        p = PartitionResult(r.int32(), r.int16(), r.nullable_string())
        r.tagged_fields()
        return p

    def topic(r: Reader) -> ReplicaElectionResult:
        t = ReplicaElectionResult(r.string(), r.array(partition, 7))
        r.tagged_fields()
        return t

    results = r.array(topic, 2)
    r.tagged_fields()
    return ElectLeadersResponse(results, error_code, throttle)
