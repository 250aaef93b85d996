"""DescribeProducers (key 61), v0 (flexible): the active idempotent/transactional producers of
partitions, as the leader's producer state holds them (KIP-664)."""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer


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


# ---- request --------------------------------------------------------------------------


def _read_topic(r: Reader) -> DescribeProducersTopic:
    topic = DescribeProducersTopic(r.string(), r.int32_array())
    r.tagged_fields()
    return topic


def decode_describe_producers_request(body: memoryview, version: int) -> DescribeProducersRequest:
    r = reader_for(ApiKey.DESCRIBE_PRODUCERS, version, body)
    topics = r.array(_read_topic, 3)
    r.tagged_fields()
    return DescribeProducersRequest(topics)


def _write_topic(w: Writer, t: DescribeProducersTopic) -> None:
    w.string(t.name)
    w.int32_array(t.partition_indexes)
    w.tagged_fields()


def encode_describe_producers_request(req: DescribeProducersRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_describe_producers_request`."""
    w = writer_for(ApiKey.DESCRIBE_PRODUCERS, version)
    w.array(req.topics, _write_topic)
    w.tagged_fields()
    return [w.to_bytes()]


# ---- response -------------------------------------------------------------------------


def _write_producer(w: Writer, p: ProducerState) -> None:
    w.int64(p.producer_id)
    w.int32(p.producer_epoch)
    w.int32(p.last_sequence)
    w.int64(p.last_timestamp)
    w.int32(p.coordinator_epoch)
    w.int64(p.current_txn_start_offset)
    w.tagged_fields()


def _write_partition(w: Writer, p: DescribeProducersPartition) -> None:
    w.int32(p.partition_index)
    w.int16(p.error_code)
    w.nullable_string(p.error_message)
    w.array(p.active_producers, _write_producer)
    w.tagged_fields()


def _write_topic_response(w: Writer, t: DescribeProducersTopicResponse) -> None:
    w.string(t.name)
    w.array(t.partitions, _write_partition)
    w.tagged_fields()


def encode_describe_producers_response(resp: DescribeProducersResponse, version: int) -> list[Chunk]:
    w = writer_for(ApiKey.DESCRIBE_PRODUCERS, version)
    w.int32(resp.throttle_time_ms)
    w.array(resp.topics, _write_topic_response)
    w.tagged_fields()
    return [w.to_bytes()]


def _read_producer(r: Reader) -> ProducerState:
    p = ProducerState(r.int64(), r.int32(), r.int32(), r.int64(), r.int32(), r.int64())
    r.tagged_fields()
    return p


def _read_partition(r: Reader) -> DescribeProducersPartition:
    index, code, message = r.int32(), r.int16(), r.nullable_string()
    producers = r.array(_read_producer, 33)
    r.tagged_fields()
    return DescribeProducersPartition(index, code, message, producers)


def _read_topic_response(r: Reader) -> DescribeProducersTopicResponse:
    name = r.string()
    partitions = r.array(_read_partition, 9)
    r.tagged_fields()
    return DescribeProducersTopicResponse(name, partitions)


def decode_describe_producers_response(body: memoryview, version: int) -> DescribeProducersResponse:
    """Client side (tests, tools): the inverse of `encode_describe_producers_response`."""
    r = reader_for(ApiKey.DESCRIBE_PRODUCERS, version, body)
    throttle = r.int32()
    topics = r.array(_read_topic_response, 3)
    r.tagged_fields()
    return DescribeProducersResponse(throttle, topics)
