"""DescribeProducers (key 61), v0 (flexible): the active idempotent/transactional producers of
partitions, as the leader's producer state holds them (KIP-664)."""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, is_flexible
from common.protocol.flexible_wire import WireReader, WireWriter
from common.protocol.primitives import Chunk


@dataclass(frozen=True, slots=True)
class DescribeProducersTopic:
    name: str
    partition_indexes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DescribeProducersRequest:
    topics: tuple[DescribeProducersTopic, ...]


@dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int = -1
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class DescribeProducersPartition:
    partition_index: int
    error_code: int
    error_message: str | None = None
    active_producers: tuple[ProducerState, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeProducersTopicResponse:
    name: str
    partitions: tuple[DescribeProducersPartition, ...]


@dataclass(frozen=True, slots=True)
class DescribeProducersResponse:
    throttle_time_ms: int
    topics: tuple[DescribeProducersTopicResponse, ...]


def _flexible(version: int) -> bool:
    check_version(ApiKey.DESCRIBE_PRODUCERS, version)
    return is_flexible(ApiKey.DESCRIBE_PRODUCERS, version)


# ---- request --------------------------------------------------------------------------


def _read_topic(r: WireReader) -> DescribeProducersTopic:
    topic = DescribeProducersTopic(r.string(), r.int32_array())
    r.tags()
    return topic


def decode_describe_producers_request(body: memoryview, version: int) -> DescribeProducersRequest:
    r = WireReader(body, flexible=_flexible(version))
    topics = r.array(_read_topic, 3)
    r.tags()
    return DescribeProducersRequest(topics)


def _write_topic(w: WireWriter, t: DescribeProducersTopic) -> None:
    w.string(t.name)
    w.int32_array(t.partition_indexes)
    w.tags()


def encode_describe_producers_request(req: DescribeProducersRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_describe_producers_request`."""
    w = WireWriter(flexible=_flexible(version))
    w.array(req.topics, _write_topic)
    w.tags()
    return [w.to_bytes()]


# ---- response -------------------------------------------------------------------------


def _write_producer(w: WireWriter, p: ProducerState) -> None:
    w.int64(p.producer_id)
    w.int32(p.producer_epoch)
    w.int32(p.last_sequence)
    w.int64(p.last_timestamp)
    w.int32(p.coordinator_epoch)
    w.int64(p.current_txn_start_offset)
    w.tags()


def _write_partition(w: WireWriter, p: DescribeProducersPartition) -> None:
    w.int32(p.partition_index)
    w.int16(p.error_code)
    w.nullable_string(p.error_message)
    w.array(p.active_producers, _write_producer)
    w.tags()


def _write_topic_response(w: WireWriter, t: DescribeProducersTopicResponse) -> None:
    w.string(t.name)
    w.array(t.partitions, _write_partition)
    w.tags()


def encode_describe_producers_response(resp: DescribeProducersResponse, version: int) -> list[Chunk]:
    w = WireWriter(flexible=_flexible(version))
    w.int32(resp.throttle_time_ms)
    w.array(resp.topics, _write_topic_response)
    w.tags()
    return [w.to_bytes()]


def _read_producer(r: WireReader) -> ProducerState:
    p = ProducerState(r.int64(), r.int32(), r.int32(), r.int64(), r.int32(), r.int64())
    r.tags()
    return p


def _read_partition(r: WireReader) -> DescribeProducersPartition:
    index, code, message = r.int32(), r.int16(), r.nullable_string()
    producers = r.array(_read_producer, 33)
    r.tags()
    return DescribeProducersPartition(index, code, message, producers)


def _read_topic_response(r: WireReader) -> DescribeProducersTopicResponse:
    name = r.string()
    partitions = r.array(_read_partition, 9)
    r.tags()
    return DescribeProducersTopicResponse(name, partitions)


def decode_describe_producers_response(body: memoryview, version: int) -> DescribeProducersResponse:
    """Client side (tests, tools): the inverse of `encode_describe_producers_response`."""
    r = WireReader(body, flexible=_flexible(version))
    throttle = r.int32()
    topics = r.array(_read_topic_response, 3)
    r.tags()
    return DescribeProducersResponse(throttle, topics)
