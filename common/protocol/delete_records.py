"""DeleteRecords (key 21), v0–v2: move partitions' log start offsets up (Kafka 3.9's range).

v1 is v0 (it only changed throttling); v2 is the first flexible version. An offset of -1
(`HIGH_WATERMARK`) means "up to the high watermark". The response's low_watermark is the
lowest log start offset among the partition's live replicas once the request completed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.protocol.api_keys import ApiKey, check_version, is_flexible
from common.protocol.flexible_wire import WireReader, WireWriter
from common.protocol.primitives import Chunk

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


def _flexible(version: int) -> bool:
    check_version(ApiKey.DELETE_RECORDS, version)
    return is_flexible(ApiKey.DELETE_RECORDS, version)


# ---- request --------------------------------------------------------------------------


def _read_partition(r: WireReader) -> DeleteRecordsPartition:
    p = DeleteRecordsPartition(r.int32(), r.int64())
    r.tags()
    return p


def _read_topic(r: WireReader) -> DeleteRecordsTopic:
    name = r.string()
    partitions = r.array(_read_partition, 12)
    r.tags()
    return DeleteRecordsTopic(name, partitions)


def decode_delete_records_request(body: memoryview, version: int) -> DeleteRecordsRequest:
    r = WireReader(body, flexible=_flexible(version))
    topics = r.array(_read_topic, 3)
    timeout_ms = r.int32()
    r.tags()
    return DeleteRecordsRequest(topics, timeout_ms)


def _write_partition(w: WireWriter, p: DeleteRecordsPartition) -> None:
    w.int32(p.partition_index)
    w.int64(p.offset)
    w.tags()


def _write_topic(w: WireWriter, t: DeleteRecordsTopic) -> None:
    w.string(t.name)
    w.array(t.partitions, _write_partition)
    w.tags()


def encode_delete_records_request(req: DeleteRecordsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_delete_records_request`."""
    w = WireWriter(flexible=_flexible(version))
    w.array(req.topics, _write_topic)
    w.int32(req.timeout_ms)
    w.tags()
    return [w.to_bytes()]


# ---- response -------------------------------------------------------------------------


def _write_partition_result(w: WireWriter, p: DeleteRecordsPartitionResult) -> None:
    w.int32(p.partition_index)
    w.int64(p.low_watermark)
    w.int16(p.error_code)
    w.tags()


def _write_topic_result(w: WireWriter, t: DeleteRecordsTopicResult) -> None:
    w.string(t.name)
    w.array(t.partitions, _write_partition_result)
    w.tags()


def encode_delete_records_response(resp: DeleteRecordsResponse, version: int) -> list[Chunk]:
    w = WireWriter(flexible=_flexible(version))
    w.int32(resp.throttle_time_ms)
    w.array(resp.topics, _write_topic_result)
    w.tags()
    return [w.to_bytes()]


def _read_partition_result(r: WireReader) -> DeleteRecordsPartitionResult:
    p = DeleteRecordsPartitionResult(r.int32(), r.int64(), r.int16())
    r.tags()
    return p


def _read_topic_result(r: WireReader) -> DeleteRecordsTopicResult:
    name = r.string()
    partitions = r.array(_read_partition_result, 14)
    r.tags()
    return DeleteRecordsTopicResult(name, partitions)


def decode_delete_records_response(body: memoryview, version: int) -> DeleteRecordsResponse:
    """Client side (tests, tools): the inverse of `encode_delete_records_response`."""
    r = WireReader(body, flexible=_flexible(version))
    throttle = r.int32()
    topics = r.array(_read_topic_result, 3)
    r.tags()
    return DeleteRecordsResponse(throttle, topics)
