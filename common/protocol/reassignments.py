"""AlterPartitionReassignments (key 45) and ListPartitionReassignments (key 46), v0, both
flexible from v0 (KIP-455). A ReassignablePartition with null replicas cancels."""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

ALTER = ApiKey.ALTER_PARTITION_REASSIGNMENTS
LIST = ApiKey.LIST_PARTITION_REASSIGNMENTS


@dataclass(frozen=True, slots=True)
class ReassignablePartition:
    partition_index: int
    replicas: tuple[int, ...] | None  # None: cancel the partition's reassignment


@dataclass(frozen=True, slots=True)
class ReassignableTopic:
    name: str
    partitions: tuple[ReassignablePartition, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionReassignmentsRequest:
    topics: tuple[ReassignableTopic, ...]
    timeout_ms: int = 60_000


@dataclass(frozen=True, slots=True)
class ReassignablePartitionResponse:
    partition_index: int
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ReassignableTopicResponse:
    name: str
    partitions: tuple[ReassignablePartitionResponse, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionReassignmentsResponse:
    responses: tuple[ReassignableTopicResponse, ...]
    error_code: int = 0
    error_message: str | None = None
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class ListPartitionReassignmentsTopics:
    name: str
    partition_indexes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ListPartitionReassignmentsRequest:
    topics: tuple[ListPartitionReassignmentsTopics, ...] | None  # None: every ongoing one
    timeout_ms: int = 60_000


@dataclass(frozen=True, slots=True)
class OngoingPartitionReassignment:
    partition_index: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OngoingTopicReassignment:
    name: str
    partitions: tuple[OngoingPartitionReassignment, ...]


@dataclass(frozen=True, slots=True)
class ListPartitionReassignmentsResponse:
    topics: tuple[OngoingTopicReassignment, ...]
    error_code: int = 0
    error_message: str | None = None
    throttle_time_ms: int = 0


def _nullable_ids(r: Reader) -> tuple[int, ...] | None:
    return r.nullable_array(lambda r: r.int32(), 4)


def _write_nullable_ids(w: Writer, ids: tuple[int, ...] | None) -> None:
    w.nullable_array(ids, lambda w, i: w.int32(i))


# -- AlterPartitionReassignments ---------------------------------------------------------


def decode_alter_partition_reassignments_request(body: memoryview, version: int) -> AlterPartitionReassignmentsRequest:
    check_version(ALTER, version)
    r = reader_for(ALTER, version, body)
    timeout_ms = r.int32()

    def partition(r: Reader) -> ReassignablePartition:
        p = ReassignablePartition(r.int32(), _nullable_ids(r))
        r.tagged_fields()
        return p

    def topic(r: Reader) -> ReassignableTopic:
        t = ReassignableTopic(r.string(), r.array(partition, 5))
        r.tagged_fields()
        return t

    topics = r.array(topic, 2)
    r.tagged_fields()
    return AlterPartitionReassignmentsRequest(topics, timeout_ms)


def encode_alter_partition_reassignments_request(req: AlterPartitionReassignmentsRequest,
                                                 version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of the decoder."""
    check_version(ALTER, version)
    w = writer_for(ALTER, version)
    w.int32(req.timeout_ms)

    def partition(w: Writer, p: ReassignablePartition) -> None:
        w.int32(p.partition_index)
        _write_nullable_ids(w, p.replicas)
        w.tagged_fields()

    def topic(w: Writer, t: ReassignableTopic) -> None:
        w.string(t.name)
        w.array(t.partitions, partition)
        w.tagged_fields()

    w.array(req.topics, topic)
    w.tagged_fields()
    return w.chunks()


def encode_alter_partition_reassignments_response(resp: AlterPartitionReassignmentsResponse,
                                                  version: int) -> list[Chunk]:
    check_version(ALTER, version)
    w = writer_for(ALTER, version)
    w.int32(resp.throttle_time_ms)
    w.int16(resp.error_code)
    w.nullable_string(resp.error_message)

    def partition(w: Writer, p: ReassignablePartitionResponse) -> None:
        w.int32(p.partition_index)
        w.int16(p.error_code)
        w.nullable_string(p.error_message)
        w.tagged_fields()

    def topic(w: Writer, t: ReassignableTopicResponse) -> None:
        w.string(t.name)
        w.array(t.partitions, partition)
        w.tagged_fields()

    w.array(resp.responses, topic)
    w.tagged_fields()
    return w.chunks()


def decode_alter_partition_reassignments_response(body: memoryview, version: int
                                                  ) -> AlterPartitionReassignmentsResponse:
    """Client side (tests, tools): the inverse of the encoder."""
    check_version(ALTER, version)
    r = reader_for(ALTER, version, body)
    throttle, error_code, error_message = r.int32(), r.int16(), r.nullable_string()

    def partition(r: Reader) -> ReassignablePartitionResponse:
        p = ReassignablePartitionResponse(r.int32(), r.int16(), r.nullable_string())
        r.tagged_fields()
        return p

    def topic(r: Reader) -> ReassignableTopicResponse:
        t = ReassignableTopicResponse(r.string(), r.array(partition, 7))
        r.tagged_fields()
        return t

    responses = r.array(topic, 2)
    r.tagged_fields()
    return AlterPartitionReassignmentsResponse(responses, error_code, error_message, throttle)


# -- ListPartitionReassignments ----------------------------------------------------------


def decode_list_partition_reassignments_request(body: memoryview, version: int) -> ListPartitionReassignmentsRequest:
    check_version(LIST, version)
    r = reader_for(LIST, version, body)
    timeout_ms = r.int32()

    def topic(r: Reader) -> ListPartitionReassignmentsTopics:
        t = ListPartitionReassignmentsTopics(r.string(), r.int32_array())
        r.tagged_fields()
        return t

    topics = r.nullable_array(topic, 2)
    r.tagged_fields()
    return ListPartitionReassignmentsRequest(topics, timeout_ms)


def encode_list_partition_reassignments_request(req: ListPartitionReassignmentsRequest,
                                                version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of the decoder."""
    check_version(LIST, version)
    w = writer_for(LIST, version)
    w.int32(req.timeout_ms)

    def topic(w: Writer, t: ListPartitionReassignmentsTopics) -> None:
        w.string(t.name)
        w.int32_array(t.partition_indexes)
        w.tagged_fields()

    w.nullable_array(req.topics, topic)
    w.tagged_fields()
    return w.chunks()


def encode_list_partition_reassignments_response(resp: ListPartitionReassignmentsResponse,
                                                 version: int) -> list[Chunk]:
    check_version(LIST, version)
    w = writer_for(LIST, version)
    w.int32(resp.throttle_time_ms)
    w.int16(resp.error_code)
    w.nullable_string(resp.error_message)

    def partition(w: Writer, p: OngoingPartitionReassignment) -> None:
        w.int32(p.partition_index)
        w.int32_array(p.replicas)
        w.int32_array(p.adding_replicas)
        w.int32_array(p.removing_replicas)
        w.tagged_fields()

    def topic(w: Writer, t: OngoingTopicReassignment) -> None:
        w.string(t.name)
        w.array(t.partitions, partition)
        w.tagged_fields()

    w.array(resp.topics, topic)
    w.tagged_fields()
    return w.chunks()


def decode_list_partition_reassignments_response(body: memoryview, version: int
                                                 ) -> ListPartitionReassignmentsResponse:
    """Client side (tests, tools): the inverse of the encoder."""
    check_version(LIST, version)
    r = reader_for(LIST, version, body)
    throttle, error_code, error_message = r.int32(), r.int16(), r.nullable_string()

    def partition(r: Reader) -> OngoingPartitionReassignment:
        p = OngoingPartitionReassignment(r.int32(), r.int32_array(), r.int32_array(), r.int32_array())
        r.tagged_fields()
        return p

    def topic(r: Reader) -> OngoingTopicReassignment:
        t = OngoingTopicReassignment(r.string(), r.array(partition, 7))
        r.tagged_fields()
        return t

    topics = r.array(topic, 2)
    r.tagged_fields()
    return ListPartitionReassignmentsResponse(topics, error_code, error_message, throttle)
