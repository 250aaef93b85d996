"""DeleteRecords (key 21), v0–v2: move partitions' log start offsets up (Kafka 3.9's range).

v1 is v0 (it only changed throttling); v2 is the first flexible version. An offset of -1
(`HIGH_WATERMARK`) means "up to the high watermark". The response's low_watermark is the
lowest log start offset among the partition's live replicas once the request completed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

HIGH_WATERMARK: Final = -1  # DeleteRecordsRequest.HIGH_WATERMARK
INVALID_LOW_WATERMARK: Final = -1  # DeleteRecordsResponse.INVALID_LOW_WATERMARK


@dataclass(frozen=True, slots=True)
class DeleteRecordsPartition:
    partition_index: int
    offset: int  # the new log start offset, or HIGH_WATERMARK


@dataclass(frozen=True, slots=True)
class DeleteRecordsTopic:
    name: str
    partitions: tuple[DeleteRecordsPartition, ...]


@dataclass(frozen=True, slots=True)
class DeleteRecordsRequest:
    topics: tuple[DeleteRecordsTopic, ...]
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsPartitionResult:
    partition_index: int
    low_watermark: int
    error_code: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsTopicResult:
    name: str
    partitions: tuple[DeleteRecordsPartitionResult, ...]


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse:
    throttle_time_ms: int
    topics: tuple[DeleteRecordsTopicResult, ...]


# ---- request --------------------------------------------------------------------------


def _read_partition(r: Reader) -> DeleteRecordsPartition:
    p = DeleteRecordsPartition(r.int32(), r.int64())
    r.tagged_fields()
    return p


def _read_topic(r: Reader) -> DeleteRecordsTopic:
    name = r.string()
    partitions = r.array(_read_partition, 12)
    r.tagged_fields()
    return DeleteRecordsTopic(name, partitions)


def decode_delete_records_request(body: memoryview, version: int) -> DeleteRecordsRequest:
    r = reader_for(ApiKey.DELETE_RECORDS, version, body)
    topics = r.array(_read_topic, 3)
    timeout_ms = r.int32()
    r.tagged_fields()
    return DeleteRecordsRequest(topics, timeout_ms)


def _write_partition(w: Writer, p: DeleteRecordsPartition) -> None:
    w.int32(p.partition_index)
    w.int64(p.offset)
    w.tagged_fields()


def _write_topic(w: Writer, t: DeleteRecordsTopic) -> None:
    w.string(t.name)
    w.array(t.partitions, _write_partition)
    w.tagged_fields()


def encode_delete_records_request(req: DeleteRecordsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_delete_records_request`."""
    w = writer_for(ApiKey.DELETE_RECORDS, version)
    w.array(req.topics, _write_topic)
    w.int32(req.timeout_ms)
    w.tagged_fields()
    return [w.to_bytes()]


# ---- response -------------------------------------------------------------------------


def _write_partition_result(w: Writer, p: DeleteRecordsPartitionResult) -> None:
    w.int32(p.partition_index)
    w.int64(p.low_watermark)
    w.int16(p.error_code)
    w.tagged_fields()


def _write_topic_result(w: Writer, t: DeleteRecordsTopicResult) -> None:
    w.string(t.name)
    w.array(t.partitions, _write_partition_result)
    w.tagged_fields()


def encode_delete_records_response(resp: DeleteRecordsResponse, version: int) -> list[Chunk]:
    w = writer_for(ApiKey.DELETE_RECORDS, version)
    w.int32(resp.throttle_time_ms)
    w.array(resp.topics, _write_topic_result)
    w.tagged_fields()
    return [w.to_bytes()]


def _read_partition_result(r: Reader) -> DeleteRecordsPartitionResult:
    p = DeleteRecordsPartitionResult(r.int32(), r.int64(), r.int16())
    r.tagged_fields()
    return p


def _read_topic_result(r: Reader) -> DeleteRecordsTopicResult:
    name = r.string()
    partitions = r.array(_read_partition_result, 14)
    r.tagged_fields()
    return DeleteRecordsTopicResult(name, partitions)


def decode_delete_records_response(body: memoryview, version: int) -> DeleteRecordsResponse:
    """Client side (tests, tools): the inverse of `encode_delete_records_response`."""
    r = reader_for(ApiKey.DELETE_RECORDS, version, body)
    throttle = r.int32()
    topics = r.array(_read_topic_result, 3)
    r.tagged_fields()
    return DeleteRecordsResponse(throttle, topics)
