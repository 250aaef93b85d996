"""DescribeLogDirs (key 35), v0–v4: each log directory of a broker and the size and lag of the
partitions in it (Kafka 3.9's range).

v1 is v0 (throttling only); v2 is the first flexible version; v3 adds a top-level
error_code; v4 adds each directory's total_bytes and usable_bytes. A null topic list asks
for every partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

INVALID_OFFSET_LAG: Final = -1  # DescribeLogDirsResponse.INVALID_OFFSET_LAG
UNKNOWN_VOLUME_BYTES: Final = -1  # DescribeLogDirsResponse.UNKNOWN_VOLUME_BYTES


@dataclass(frozen=True, slots=True)
class DescribableLogDirTopic:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DescribeLogDirsRequest:
    topics: tuple[DescribableLogDirTopic, ...] | None  # None: every partition


@dataclass(frozen=True, slots=True)
class DescribeLogDirsPartition:
    partition_index: int
    partition_size: int
    offset_lag: int
    is_future_key: bool = False


@dataclass(frozen=True, slots=True)
class DescribeLogDirsTopic:
    name: str
    partitions: tuple[DescribeLogDirsPartition, ...]


@dataclass(frozen=True, slots=True)
class DescribeLogDirsResult:
    error_code: int
    log_dir: str
    topics: tuple[DescribeLogDirsTopic, ...]
    total_bytes: int = UNKNOWN_VOLUME_BYTES  # v4+
    usable_bytes: int = UNKNOWN_VOLUME_BYTES  # v4+


@dataclass(frozen=True, slots=True)
class DescribeLogDirsResponse:
    throttle_time_ms: int
    results: tuple[DescribeLogDirsResult, ...]
    error_code: int = 0  # v3+


# ---- request --------------------------------------------------------------------------


def _read_topic(r: Reader) -> DescribableLogDirTopic:
    topic = DescribableLogDirTopic(r.string(), r.int32_array())
    r.tagged_fields()
    return topic


def decode_describe_log_dirs_request(body: memoryview, version: int) -> DescribeLogDirsRequest:
    r = reader_for(ApiKey.DESCRIBE_LOG_DIRS, version, body)
    topics = r.nullable_array(_read_topic, 3)
    r.tagged_fields()
    return DescribeLogDirsRequest(topics)


def _write_topic(w: Writer, t: DescribableLogDirTopic) -> None:
    w.string(t.topic)
    w.int32_array(t.partitions)
    w.tagged_fields()


def encode_describe_log_dirs_request(req: DescribeLogDirsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_describe_log_dirs_request`."""
    w = writer_for(ApiKey.DESCRIBE_LOG_DIRS, version)
    w.nullable_array(req.topics, _write_topic)
    w.tagged_fields()
    return [w.to_bytes()]


# ---- response -------------------------------------------------------------------------


def _write_partition(w: Writer, p: DescribeLogDirsPartition) -> None:
    w.int32(p.partition_index)
    w.int64(p.partition_size)
    w.int64(p.offset_lag)
    w.boolean(p.is_future_key)
    w.tagged_fields()


def _write_topic_result(w: Writer, t: DescribeLogDirsTopic) -> None:
    w.string(t.name)
    w.array(t.partitions, _write_partition)
    w.tagged_fields()


def encode_describe_log_dirs_response(resp: DescribeLogDirsResponse, version: int) -> list[Chunk]:
    w = writer_for(ApiKey.DESCRIBE_LOG_DIRS, version)
    w.int32(resp.throttle_time_ms)
    if version >= 3:
        w.int16(resp.error_code)

    def write_result(w: Writer, d: DescribeLogDirsResult) -> None:
        w.int16(d.error_code)
        w.string(d.log_dir)
        w.array(d.topics, _write_topic_result)
        if version >= 4:
            w.int64(d.total_bytes)
            w.int64(d.usable_bytes)
        w.tagged_fields()

    w.array(resp.results, write_result)
    w.tagged_fields()
    return [w.to_bytes()]


def _read_partition(r: Reader) -> DescribeLogDirsPartition:
    p = DescribeLogDirsPartition(r.int32(), r.int64(), r.int64(), r.boolean())
    r.tagged_fields()
    return p


def _read_topic_result(r: Reader) -> DescribeLogDirsTopic:
    name = r.string()
    partitions = r.array(_read_partition, 21)
    r.tagged_fields()
    return DescribeLogDirsTopic(name, partitions)


def decode_describe_log_dirs_response(body: memoryview, version: int) -> DescribeLogDirsResponse:
    """Client side (tests, tools): the inverse of `encode_describe_log_dirs_response`."""
    r = reader_for(ApiKey.DESCRIBE_LOG_DIRS, version, body)
    throttle = r.int32()
    error_code = r.int16() if version >= 3 else 0

    def read_result(r: Reader) -> DescribeLogDirsResult:
        code, log_dir = r.int16(), r.string()
        topics = r.array(_read_topic_result, 3)
        total = usable = UNKNOWN_VOLUME_BYTES
        if version >= 4:
            total, usable = r.int64(), r.int64()
        r.tagged_fields()
        return DescribeLogDirsResult(code, log_dir, topics, total, usable)

    results = r.array(read_result, 5)
    r.tagged_fields()
    return DescribeLogDirsResponse(throttle, results, error_code)
