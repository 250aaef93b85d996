"""ListOffsets (key 2), v0–v9: the offset for a timestamp, or a special position.

v0 asks for up to max_num_offsets offsets per partition and is answered with a list of them
(old_style_offsets: segment starts, broker/log/legacy_offsets.py); v1 onwards one offset and
its timestamp.

Special timestamps: -1 latest, -2 earliest, -3 the record with the largest timestamp (v7+,
KIP-734), -4 the local log start offset (v8+, KIP-405: without tiered storage it is the log
start offset), -5 the last offset moved to tiered storage (v9+, KIP-1005: without tiered
storage there is none, offset -1). v6 is the first flexible version; v7, v8 and v9 change no
field, only which special timestamps the client may send (`MIN_VERSION_OF_TIMESTAMP`).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
# The first version allowed to ask for each special timestamp (Kafka's ReplicaManager
# timestampMinSupportedVersion); an older request asking for one gets UNSUPPORTED_VERSION.
MIN_VERSION_OF_TIMESTAMP: dict[int, int] = {
    MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9,
}


@dataclass(frozen=True, slots=True)
class ListOffsetsPartition:
    partition_index: int
    timestamp: int
    current_leader_epoch: int = -1  # v4+
    max_num_offsets: int = 1  # v0 only


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
    old_style_offsets: tuple[int, ...] = ()  # v0 only (which has no timestamp or offset)


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
    r = reader_for(ApiKey.LIST_OFFSETS, version, body)
    replica_id = r.int32()
    isolation_level = r.int8() if version >= 2 else 0

    def partition(r: Reader) -> ListOffsetsPartition:
        index = r.int32()
        epoch = r.int32() if version >= 4 else -1
        timestamp = r.int64()
        p = ListOffsetsPartition(index, timestamp, epoch, r.int32() if version == 0 else 1)
        r.tagged_fields()
        return p

    def topic(r: Reader) -> ListOffsetsTopic:
        t = ListOffsetsTopic(r.string(), r.array(partition, 12))
        r.tagged_fields()
        return t

    request = ListOffsetsRequest(replica_id, r.array(topic, 2), isolation_level)
    r.tagged_fields()
    return request


def encode_list_offsets_request(req: ListOffsetsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_list_offsets_request`."""
    check_version(ApiKey.LIST_OFFSETS, version)
    w = writer_for(ApiKey.LIST_OFFSETS, version)
    w.int32(req.replica_id)
    if version >= 2:
        w.int8(req.isolation_level)

    def partition(w: Writer, p: ListOffsetsPartition) -> None:
        w.int32(p.partition_index)
        if version >= 4:
            w.int32(p.current_leader_epoch)
        w.int64(p.timestamp)
        if version == 0:
            w.int32(p.max_num_offsets)
        w.tagged_fields()

    def topic(w: Writer, t: ListOffsetsTopic) -> None:
        w.string(t.name)
        w.array(t.partitions, partition)
        w.tagged_fields()

    w.array(req.topics, topic)
    w.tagged_fields()
    return w.chunks()


def encode_list_offsets_response(resp: ListOffsetsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.LIST_OFFSETS, version)
    w = writer_for(ApiKey.LIST_OFFSETS, version)
    if version >= 2:
        w.int32(resp.throttle_time_ms)

    def partition(w: Writer, p: ListOffsetsPartitionResponse) -> None:
        w.int32(p.partition_index)
        w.int16(p.error_code)
        if version == 0:
            w.array(p.old_style_offsets, Writer.int64)
            return
        w.int64(p.timestamp)
        w.int64(p.offset)
        if version >= 4:
            w.int32(p.leader_epoch)
        w.tagged_fields()

    def topic(w: Writer, t: ListOffsetsTopicResponse) -> None:
        w.string(t.name)
        w.array(t.partitions, partition)
        w.tagged_fields()

    w.array(resp.topics, topic)
    w.tagged_fields()
    return w.chunks()


def decode_list_offsets_response(body: memoryview, version: int) -> ListOffsetsResponse:
    """Client side (tests, tools): the inverse of `encode_list_offsets_response`."""
    check_version(ApiKey.LIST_OFFSETS, version)
    r = reader_for(ApiKey.LIST_OFFSETS, version, body)
    throttle = r.int32() if version >= 2 else 0

    def partition(r: Reader) -> ListOffsetsPartitionResponse:
        if version == 0:
            index, error = r.int32(), r.int16()
            return ListOffsetsPartitionResponse(index, error, -1, -1, -1, r.array(Reader.int64, 8))
        index, error, timestamp, offset = r.int32(), r.int16(), r.int64(), r.int64()
        epoch = r.int32() if version >= 4 else -1
        r.tagged_fields()
        return ListOffsetsPartitionResponse(index, error, timestamp, offset, epoch)

    def topic(r: Reader) -> ListOffsetsTopicResponse:
        t = ListOffsetsTopicResponse(r.string(), r.array(partition, 10 if version == 0 else 22))
        r.tagged_fields()
        return t

    response = ListOffsetsResponse(r.array(topic, 2), throttle)
    r.tagged_fields()
    return response
