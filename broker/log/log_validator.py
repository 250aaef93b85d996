"""What a leader does to produced batches before it assigns offsets (Kafka's LogValidator),
driven by the topic's configs:

    validated = validate_produced(view, batches, config, now_ms=now, topic_partition=tp)
    # validated.records / .batches are what to append; .log_append_time is -1 or now

- message.timestamp.before.max.ms / after.max.ms (KIP-937; difference.max.ms where unset):
  a CreateTime topic refuses a batch holding a record timestamp outside
  [now - before, now + after] with INVALID_TIMESTAMP, naming the timestamp and the window.
- compression.type other than `producer`: a batch in another codec is rewritten in the
  topic's codec (common.compression.recompress_batch: one decompress + one compress per
  batch); a batch already in it is kept byte for byte. max.message.bytes is checked on the
  batch as produced here (and on the stored batch by PartitionLog, as Kafka checks both).
- message.timestamp.type=LogAppendTime: each batch's maxTimestamp becomes `now_ms`, with the
  timestamp-type attribute bit set and the CRC re-signed.

Pure: buffers in, buffers out, `now_ms` passed in. Followers never call this: they copy the
leader's bytes. With Kafka's defaults (producer, CreateTime, no limits) it returns at once.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from common.compression import recompress_batch
from common.errors import InvalidTimestampError, RecordTooLargeError
from common.record_batch import (
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    CompressionType,
    RecordBatchHeader,
    check_producer_batch,
    read_batches,
    set_log_append_time,
)
from common.topic_config import LogConfig, TimestampPolicy
from common.units import LONG_MAX

Batches = list[tuple[int, RecordBatchHeader]]

# compression.type -> the codec stored; `producer` (absent) keeps each batch's own.
TARGET_CODECS: Final = {
    "uncompressed": CompressionType.NONE, "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY, "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD,
}


class Validated(NamedTuple):
    records: memoryview
    batches: Batches
    log_append_time: int  # NO_TIMESTAMP unless the topic stamps LogAppendTime


def target_codec(config: LogConfig) -> CompressionType | None:
    """The codec the topic stores, or None for `producer` (each batch as produced)."""
    return TARGET_CODECS.get(config.compression_type)


def codec_level(config: LogConfig, codec: CompressionType) -> int | None:
    """compression.<codec>.level for `codec` (KIP-390); None where the codec has no levels."""
    return {CompressionType.GZIP: config.compression_gzip_level,
            CompressionType.LZ4: config.compression_lz4_level,
            CompressionType.ZSTD: config.compression_zstd_level}.get(codec)


def validate_produced(view: memoryview, batches: Batches, config: LogConfig, *, now_ms: int,
                      topic_partition: object) -> Validated:
    """The batches to append for a produce to a topic with `config`; raises
    InvalidTimestampError, RecordTooLargeError, CorruptRecordError (a batch that does not
    decompress), InvalidRecordError: nothing is half-converted, the caller appends nothing."""
    stamp = config.message_timestamp_type is TimestampPolicy.LOG_APPEND_TIME
    if not stamp:
        _check_timestamps(view, batches, config, now_ms, topic_partition)
    codec = target_codec(config)
    if codec is not None and any(h.compression is not codec for _, h in batches):
        view, batches = _recompress(view, batches, config, codec, topic_partition)
    if not stamp:
        return Validated(view, batches, NO_TIMESTAMP)
    buf = bytearray(view)  # the stamp rewrites the header in place: never the request's bytes
    stamped = [(pos, set_log_append_time(buf, pos, header, now_ms)) for pos, header in batches]
    return Validated(memoryview(buf), stamped, now_ms)


def _check_timestamps(view: memoryview, batches: Batches, config: LogConfig, now_ms: int,
                      topic_partition: object) -> None:
    before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
    if before == LONG_MAX and after == LONG_MAX:
        return  # Kafka's default: no window
    for index, (pos, header) in enumerate(batches):
        # maxTimestamp bounds every record from above: the after-limit is one compare
        if header.max_timestamp != NO_TIMESTAMP and header.max_timestamp - now_ms > after:
            _refuse(header.max_timestamp, index, now_ms, before, after, topic_partition)
        if before == LONG_MAX:
            continue
        if header.base_timestamp != NO_TIMESTAMP and now_ms - header.base_timestamp > before:
            _refuse(header.base_timestamp, index, now_ms, before, after, topic_partition)
        # A record may be older than the first one (a negative timestamp delta): only the
        # records tell, so a topic with a before-limit pays a record scan, as Kafka does.
        for timestamp in _record_timestamps(view, pos, header):
            if timestamp != NO_TIMESTAMP and now_ms - timestamp > before:
                _refuse(timestamp, index, now_ms, before, after, topic_partition)


def _record_timestamps(view: memoryview, pos: int, header: RecordBatchHeader) -> list[int]:
    from common.records import decode_records  # per-record decoding: here only

    return [record.timestamp for record in decode_records(view, pos, header)]


def _refuse(timestamp: int, batch_index: int, now_ms: int, before: int, after: int,
            topic_partition: object) -> None:
    low = now_ms - before if before != LONG_MAX else "-inf"
    high = now_ms + after if after != LONG_MAX else "+inf"
    raise InvalidTimestampError(
        f"Timestamp {timestamp} of a record in batch {batch_index} to {topic_partition} is out of "
        f"range. The timestamp should be within [{low}, {high}]")


def _recompress(view: memoryview, batches: Batches, config: LogConfig, codec: CompressionType,
                topic_partition: object) -> tuple[memoryview, Batches]:
    limit = config.max_message_bytes
    level = codec_level(config, codec)
    parts: list[bytes | bytearray | memoryview] = []
    for pos, header in batches:
        if header.batch_length + LOG_OVERHEAD > limit:  # as produced, before any conversion
            raise RecordTooLargeError(
                f"record batch of {header.size} bytes to {topic_partition} exceeds "
                f"max.message.bytes {limit}")
        if header.compression is codec:
            parts.append(view[pos : pos + header.size])
            continue
        check_producer_batch(header)
        parts.append(recompress_batch(view, pos, header, codec, level))
    out = memoryview(b"".join(parts))
    return out, read_batches(out)  # re-framed and CRC-checked: one C call per batch
