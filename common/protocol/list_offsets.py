"""ListOffsets (key 2), v1–v5: the offset for a timestamp, or earliest (-2) / latest (-1)."""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version
from common.protocol.primitives import Chunk, Reader, Writer

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True, slots=True)
class ListOffsetsPartition:
    partition_index: int
    timestamp: int
    current_leader_epoch: int = -1  # v4+


@dataclass(frozen=True, slots=True)
class ListOffsetsTopic:
    name: str
    partitions: tuple[ListOffsetsPartition, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    replica_id: int
    topics: tuple[ListOffsetsTopic, ...]
    isolation_level: int = 0  # v2+


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionResponse:
    partition_index: int
    error_code: int
    timestamp: int
    offset: int
    leader_epoch: int = -1  # v4+


@dataclass(frozen=True, slots=True)
class ListOffsetsTopicResponse:
    name: str
    partitions: tuple[ListOffsetsPartitionResponse, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    topics: tuple[ListOffsetsTopicResponse, ...]
    throttle_time_ms: int = 0  # v2+


def decode_list_offsets_request(body: memoryview, version: int) -> ListOffsetsRequest:
    check_version(ApiKey.LIST_OFFSETS, version)
    r = Reader(body)
    replica_id = r.int32()
    isolation_level = r.int8() if version >= 2 else 0

    def partition(r: Reader) -> ListOffsetsPartition:
        index = r.int32()
        epoch = r.int32() if version >= 4 else -1
        return ListOffsetsPartition(index, r.int64(), epoch)

    def topic(r: Reader) -> ListOffsetsTopic:
        return ListOffsetsTopic(r.string(), r.array(partition, 12))

    return ListOffsetsRequest(replica_id, r.array(topic, 6), isolation_level)


def encode_list_offsets_request(req: ListOffsetsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_list_offsets_request`."""
    check_version(ApiKey.LIST_OFFSETS, version)
    w = Writer()
    w.int32(req.replica_id)
    if version >= 2:
        w.int8(req.isolation_level)

    def partition(w: Writer, p: ListOffsetsPartition) -> None:
        w.int32(p.partition_index)
        if version >= 4:
            w.int32(p.current_leader_epoch)
        w.int64(p.timestamp)

    def topic(w: Writer, t: ListOffsetsTopic) -> None:
        w.string(t.name)
        w.array(t.partitions, partition)

    w.array(req.topics, topic)
    return w.chunks()


def encode_list_offsets_response(resp: ListOffsetsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.LIST_OFFSETS, version)
    w = Writer()
    if version >= 2:
        w.int32(resp.throttle_time_ms)

    def partition(w: Writer, p: ListOffsetsPartitionResponse) -> None:
        w.int32(p.partition_index)
        w.int16(p.error_code)
        w.int64(p.timestamp)
        w.int64(p.offset)
        if version >= 4:
            w.int32(p.leader_epoch)

    def topic(w: Writer, t: ListOffsetsTopicResponse) -> None:
        w.string(t.name)
        w.array(t.partitions, partition)

    w.array(resp.topics, topic)
    return w.chunks()


def decode_list_offsets_response(body: memoryview, version: int) -> ListOffsetsResponse:
    """Client side (tests, tools): the inverse of `encode_list_offsets_response`."""
    check_version(ApiKey.LIST_OFFSETS, version)
    r = Reader(body)
    throttle = r.int32() if version >= 2 else 0

    def partition(r: Reader) -> ListOffsetsPartitionResponse:
        index, error, timestamp, offset = r.int32(), r.int16(), r.int64(), r.int64()
        epoch = r.int32() if version >= 4 else -1
        return ListOffsetsPartitionResponse(index, error, timestamp, offset, epoch)

    def topic(r: Reader) -> ListOffsetsTopicResponse:
        return ListOffsetsTopicResponse(r.string(), r.array(partition, 22))

    return ListOffsetsResponse(r.array(topic, 6), throttle)
