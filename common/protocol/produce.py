"""Produce (key 0), v3–v8. Records stay a memoryview slice of the request, never parsed here.

With acks=0 the broker sends no response at all; that decision belongs to the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version
from common.protocol.primitives import Chunk, Reader, Writer


@dataclass(frozen=True, slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | bytes | None  # record batches exactly as sent


@dataclass(frozen=True, slots=True)
class TopicProduceData:
    name: str
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


@dataclass(frozen=True, slots=True)
class BatchIndexAndErrorMessage:
    batch_index: int
    batch_index_error_message: str | None


@dataclass(frozen=True, slots=True)
class PartitionProduceResponse:
    partition_index: int
    error_code: int
    base_offset: int
    log_append_time_ms: int = -1
    log_start_offset: int = -1  # v5+
    record_errors: tuple[BatchIndexAndErrorMessage, ...] = ()  # v8+
    error_message: str | None = None  # v8+


@dataclass(frozen=True, slots=True)
class TopicProduceResponse:
    name: str
    partitions: tuple[PartitionProduceResponse, ...]


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    responses: tuple[TopicProduceResponse, ...]
    throttle_time_ms: int = 0


def _read_partition(r: Reader) -> PartitionProduceData:
    return PartitionProduceData(r.int32(), r.nullable_bytes())


def _read_topic(r: Reader) -> TopicProduceData:
    return TopicProduceData(r.string(), r.array(_read_partition, 8))


def decode_produce_request(body: memoryview, version: int) -> ProduceRequest:
    check_version(ApiKey.PRODUCE, version)
    r = Reader(body)
    transactional_id = r.nullable_string()
    acks = r.int16()
    timeout_ms = r.int32()
    topic_data = r.array(_read_topic, 6)
    return ProduceRequest(transactional_id, acks, timeout_ms, topic_data)


def encode_produce_request(req: ProduceRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_produce_request`."""
    check_version(ApiKey.PRODUCE, version)
    w = Writer()
    w.nullable_string(req.transactional_id)
    w.int16(req.acks)
    w.int32(req.timeout_ms)

    def partition(w: Writer, p: PartitionProduceData) -> None:
        w.int32(p.index)
        w.nullable_bytes(p.records)

    def topic(w: Writer, t: TopicProduceData) -> None:
        w.string(t.name)
        w.array(t.partition_data, partition)

    w.array(req.topic_data, topic)
    return w.chunks()


def encode_produce_response(resp: ProduceResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.PRODUCE, version)
    w = Writer()

    def record_error(w: Writer, e: BatchIndexAndErrorMessage) -> None:
        w.int32(e.batch_index)
        w.nullable_string(e.batch_index_error_message)

    def partition(w: Writer, p: PartitionProduceResponse) -> None:
        w.int32(p.partition_index)
        w.int16(p.error_code)
        w.int64(p.base_offset)
        w.int64(p.log_append_time_ms)
        if version >= 5:
            w.int64(p.log_start_offset)
        if version >= 8:
            w.array(p.record_errors, record_error)
            w.nullable_string(p.error_message)

    def topic(w: Writer, t: TopicProduceResponse) -> None:
        w.string(t.name)
        w.array(t.partitions, partition)

    w.array(resp.responses, topic)
    w.int32(resp.throttle_time_ms)
    return w.chunks()


def decode_produce_response(body: memoryview, version: int) -> ProduceResponse:
    """Client side (tests, tools): the inverse of `encode_produce_response`."""
    check_version(ApiKey.PRODUCE, version)
    r = Reader(body)

    def record_error(r: Reader) -> BatchIndexAndErrorMessage:
        return BatchIndexAndErrorMessage(r.int32(), r.nullable_string())

    def partition(r: Reader) -> PartitionProduceResponse:
        index, error_code, base_offset, append_time = r.int32(), r.int16(), r.int64(), r.int64()
        log_start = r.int64() if version >= 5 else -1
        errors: tuple[BatchIndexAndErrorMessage, ...] = ()
        message = None
        if version >= 8:
            errors = r.array(record_error, 6)
            message = r.nullable_string()
        return PartitionProduceResponse(index, error_code, base_offset, append_time, log_start,
                                        errors, message)

    def topic(r: Reader) -> TopicProduceResponse:
        return TopicProduceResponse(r.string(), r.array(partition, 22))

    responses = r.array(topic, 6)
    return ProduceResponse(responses, r.int32())
