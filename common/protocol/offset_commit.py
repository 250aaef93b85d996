"""OffsetCommit (key 8) v0–v9 and OffsetDelete (key 47) v0 (OffsetFetch: offset_fetch.py).

OffsetCommit (Kafka 3.9's OffsetCommitRequest.json): v0 carries only the group id and the
offsets, v1 adds generation_id, member_id and a per-partition commit_timestamp, v2–v4
retention_time_ms instead, v3+ throttle_time_ms in the response, v6+ committed_leader_epoch,
v7+ group_instance_id, v8 is flexible, v9 is v8's layout with KIP-848's answers (an unknown
group committing with a generation is GROUP_ID_NOT_FOUND, not ILLEGAL_GENERATION).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

DEFAULT_RETENTION_TIME_MS = -1
DEFAULT_COMMIT_TIMESTAMP = -1  # v1: "use the broker's time"

# ---- OffsetCommit -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitRequestPartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = -1  # v6+
    committed_metadata: str | None = None
    commit_timestamp: int = DEFAULT_COMMIT_TIMESTAMP  # v1 only


@dataclass(frozen=True, slots=True)
class OffsetCommitRequestTopic:
    name: str
    partitions: tuple[OffsetCommitRequestPartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    topics: tuple[OffsetCommitRequestTopic, ...]
    group_instance_id: str | None = None  # v7+
    retention_time_ms: int = DEFAULT_RETENTION_TIME_MS  # v2-v4


@dataclass(frozen=True, slots=True)
class PartitionError:
    partition_index: int
    error_code: int


@dataclass(frozen=True, slots=True)
class TopicErrors:
    name: str
    partitions: tuple[PartitionError, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    topics: tuple[TopicErrors, ...]
    throttle_time_ms: int = 0  # v3+


def decode_offset_commit_request(body: memoryview, version: int) -> OffsetCommitRequest:
    check_version(ApiKey.OFFSET_COMMIT, version)
    r = reader_for(ApiKey.OFFSET_COMMIT, version, body)
    group_id = r.string()
    # v0: no group membership; Kafka's defaults (generation -1, no member) stand for it
    generation, member_id = (r.int32(), r.string()) if version >= 1 else (-1, "")
    instance = r.nullable_string() if version >= 7 else None
    retention = r.int64() if 2 <= version <= 4 else DEFAULT_RETENTION_TIME_MS

    def partition(rr: Reader) -> OffsetCommitRequestPartition:
        index, offset = rr.int32(), rr.int64()
        epoch = rr.int32() if version >= 6 else -1
        stamp = rr.int64() if version == 1 else DEFAULT_COMMIT_TIMESTAMP
        p = OffsetCommitRequestPartition(index, offset, epoch, rr.nullable_string(), stamp)
        rr.tagged_fields()
        return p

    def topic(rr: Reader) -> OffsetCommitRequestTopic:
        t = OffsetCommitRequestTopic(rr.string(), rr.array(partition, 14))
        rr.tagged_fields()
        return t

    request = OffsetCommitRequest(group_id, generation, member_id, r.array(topic, 2), instance, retention)
    r.tagged_fields()
    return request


def encode_offset_commit_request(req: OffsetCommitRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_offset_commit_request`."""
    check_version(ApiKey.OFFSET_COMMIT, version)
    w = writer_for(ApiKey.OFFSET_COMMIT, version)
    w.string(req.group_id)
    if version >= 1:
        w.int32(req.generation_id)
        w.string(req.member_id)
    if version >= 7:
        w.nullable_string(req.group_instance_id)
    if 2 <= version <= 4:
        w.int64(req.retention_time_ms)

    def partition(ww: Writer, p: OffsetCommitRequestPartition) -> None:
        ww.int32(p.partition_index)
        ww.int64(p.committed_offset)
        if version >= 6:
            ww.int32(p.committed_leader_epoch)
        if version == 1:
            ww.int64(p.commit_timestamp)
        ww.nullable_string(p.committed_metadata)
        ww.tagged_fields()

    def topic(ww: Writer, t: OffsetCommitRequestTopic) -> None:
        ww.string(t.name)
        ww.array(t.partitions, partition)
        ww.tagged_fields()

    w.array(req.topics, topic)
    w.tagged_fields()
    return w.chunks()


def _write_topic_errors(w: Writer, topics: tuple[TopicErrors, ...]) -> None:
    """OffsetCommit's and OffsetDelete's per-partition errors (tagged sections when flexible)."""
    def partition(ww: Writer, p: PartitionError) -> None:
        ww.int32(p.partition_index)
        ww.int16(p.error_code)
        ww.tagged_fields()

    def topic(ww: Writer, t: TopicErrors) -> None:
        ww.string(t.name)
        ww.array(t.partitions, partition)
        ww.tagged_fields()

    w.array(topics, topic)


def _read_topic_errors(r: Reader) -> tuple[TopicErrors, ...]:
    def partition(rr: Reader) -> PartitionError:
        p = PartitionError(rr.int32(), rr.int16())
        rr.tagged_fields()
        return p

    def topic(rr: Reader) -> TopicErrors:
        t = TopicErrors(rr.string(), rr.array(partition, 6))
        rr.tagged_fields()
        return t

    return r.array(topic, 2)


def encode_offset_commit_response(resp: OffsetCommitResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.OFFSET_COMMIT, version)
    w = writer_for(ApiKey.OFFSET_COMMIT, version)
    if version >= 3:
        w.int32(resp.throttle_time_ms)
    _write_topic_errors(w, resp.topics)
    w.tagged_fields()
    return w.chunks()


def decode_offset_commit_response(body: memoryview, version: int) -> OffsetCommitResponse:
    """Client side (tests, tools): the inverse of `encode_offset_commit_response`."""
    check_version(ApiKey.OFFSET_COMMIT, version)
    r = reader_for(ApiKey.OFFSET_COMMIT, version, body)
    throttle = r.int32() if version >= 3 else 0
    response = OffsetCommitResponse(_read_topic_errors(r), throttle)
    r.tagged_fields()
    return response


# ---- OffsetDelete -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequestTopic:
    name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    group_id: str
    topics: tuple[OffsetDeleteRequestTopic, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    error_code: int
    topics: tuple[TopicErrors, ...] = ()
    throttle_time_ms: int = 0


def decode_offset_delete_request(body: memoryview, version: int) -> OffsetDeleteRequest:
    check_version(ApiKey.OFFSET_DELETE, version)
    r = Reader(body)
    group_id = r.string()

    def topic(rr: Reader) -> OffsetDeleteRequestTopic:
        name = rr.string()
        return OffsetDeleteRequestTopic(name, rr.array(Reader.int32, 4))

    return OffsetDeleteRequest(group_id, r.array(topic, 6))


def encode_offset_delete_request(req: OffsetDeleteRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_offset_delete_request`."""
    check_version(ApiKey.OFFSET_DELETE, version)
    w = Writer()
    w.string(req.group_id)

    def topic(ww: Writer, t: OffsetDeleteRequestTopic) -> None:
        ww.string(t.name)
        ww.array(t.partitions, Writer.int32)

    w.array(req.topics, topic)
    return w.chunks()


def encode_offset_delete_response(resp: OffsetDeleteResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.OFFSET_DELETE, version)
    w = Writer()
    w.int16(resp.error_code)
    w.int32(resp.throttle_time_ms)
    _write_topic_errors(w, resp.topics)
    return w.chunks()


def decode_offset_delete_response(body: memoryview, version: int) -> OffsetDeleteResponse:
    """Client side (tests, tools): the inverse of `encode_offset_delete_response`."""
    check_version(ApiKey.OFFSET_DELETE, version)
    r = Reader(body)
    error, throttle = r.int16(), r.int32()
    return OffsetDeleteResponse(error, _read_topic_errors(r), throttle)
