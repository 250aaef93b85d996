"""OffsetForLeaderEpoch (key 23), v0–v3: where a leader epoch ends, for follower truncation."""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

DEBUG_REPLICA_ID = -2  # Kafka's default when v3's replica_id is absent
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class OffsetForLeaderPartition:
    partition: int
    leader_epoch: int
    current_leader_epoch: int = -1  # v2+


@dataclass(frozen=True, slots=True)
class OffsetForLeaderTopic:
    topic: str
    partitions: tuple[OffsetForLeaderPartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochRequest:
    topics: tuple[OffsetForLeaderTopic, ...]
    replica_id: int = DEBUG_REPLICA_ID  # v3+


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    error_code: int
    partition: int
    leader_epoch: int  # v1+
    end_offset: int


@dataclass(frozen=True, slots=True)
class OffsetForLeaderTopicResult:
    topic: str
    partitions: tuple[EpochEndOffset, ...]


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochResponse:
    topics: tuple[OffsetForLeaderTopicResult, ...]
    throttle_time_ms: int = 0  # v2+


def decode_offset_for_leader_epoch_request(
        body: memoryview, version: int) -> OffsetForLeaderEpochRequest:
    check_version(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    r = reader_for(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, body)
    replica_id = r.int32() if version >= 3 else DEBUG_REPLICA_ID

    def partition(r: Reader) -> OffsetForLeaderPartition:
        index = r.int32()
        current = r.int32() if version >= 2 else -1
        p = OffsetForLeaderPartition(index, r.int32(), current)
        r.tagged_fields()
        return p

    def topic(r: Reader) -> OffsetForLeaderTopic:
        t = OffsetForLeaderTopic(r.string(), r.array(partition, 8))
        r.tagged_fields()
        return t

    request = OffsetForLeaderEpochRequest(r.array(topic, 2), replica_id)
    r.tagged_fields()
    return request


def encode_offset_for_leader_epoch_request(
        req: OffsetForLeaderEpochRequest, version: int) -> list[Chunk]:
    """The follower's side: the inverse of `decode_offset_for_leader_epoch_request`."""
    check_version(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    w = writer_for(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    if version >= 3:
        w.int32(req.replica_id)

    def partition(w: Writer, p: OffsetForLeaderPartition) -> None:
        w.int32(p.partition)
        if version >= 2:
            w.int32(p.current_leader_epoch)
        w.int32(p.leader_epoch)
        w.tagged_fields()

    def topic(w: Writer, t: OffsetForLeaderTopic) -> None:
        w.string(t.topic)
        w.array(t.partitions, partition)
        w.tagged_fields()

    w.array(req.topics, topic)
    w.tagged_fields()
    return w.chunks()


def encode_offset_for_leader_epoch_response(
        resp: OffsetForLeaderEpochResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    w = writer_for(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    if version >= 2:
        w.int32(resp.throttle_time_ms)

    def partition(w: Writer, p: EpochEndOffset) -> None:
        w.int16(p.error_code)
        w.int32(p.partition)
        if version >= 1:
            w.int32(p.leader_epoch)
        w.int64(p.end_offset)
        w.tagged_fields()

    def topic(w: Writer, t: OffsetForLeaderTopicResult) -> None:
        w.string(t.topic)
        w.array(t.partitions, partition)
        w.tagged_fields()

    w.array(resp.topics, topic)
    w.tagged_fields()
    return w.chunks()


def decode_offset_for_leader_epoch_response(
        body: memoryview, version: int) -> OffsetForLeaderEpochResponse:
    """The follower's side: the inverse of `encode_offset_for_leader_epoch_response`."""
    check_version(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    r = reader_for(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, body)
    throttle = r.int32() if version >= 2 else 0

    def partition(r: Reader) -> EpochEndOffset:
        error, index = r.int16(), r.int32()
        epoch = r.int32() if version >= 1 else UNDEFINED_EPOCH
        p = EpochEndOffset(error, index, epoch, r.int64())
        r.tagged_fields()
        return p

    def topic(r: Reader) -> OffsetForLeaderTopicResult:
        t = OffsetForLeaderTopicResult(r.string(), r.array(partition, 14))
        r.tagged_fields()
        return t

    response = OffsetForLeaderEpochResponse(r.array(topic, 2), throttle)
    r.tagged_fields()
    return response
