"""What a leader does to produced batches before it assigns offsets (Kafka's LogValidator),
driven by the topic's configs:

    validated = validate_produced(view, batches, config, now_ms=now, topic_partition=tp)
    # validated.records / .batches are what to append; .log_append_time is -1 or now

- message.timestamp.before.max.ms / after.max.ms (KIP-937; difference.max.ms where unset):
  a CreateTime topic refuses a batch holding a record timestamp outside
  [now - before, now + after] with INVALID_TIMESTAMP; as Kafka's, the error's `record_errors`
  (KIP-467) name each such record's index in its batch, the timestamp and the window (and, on
  a compacted topic, its keyless records). The whole batch fails: nothing of it is appended.
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

from broker.log.append_rules import ApiRecordError, key_errors, keyless_records, rejected
from common.compression import recompress_batch
from common.errors import ErrorCode, RecordError, RecordTooLargeError
from common.record_batch import (
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    CompressionType,
    RecordBatchHeader,
    check_producer_batch,
    read_batches,
    set_log_append_time,
)
from common.log_config import LogConfig, TimestampPolicy
from common.units import LONG_MAX

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

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
    for pos, header in batches:
        # maxTimestamp bounds every record from above: with no before-limit, one compare clears
        # the batch. A record may be older than the first one (a negative timestamp delta): only
        # the records tell, so a topic with a before-limit pays a record scan, as Kafka does.
        if before == LONG_MAX and (header.max_timestamp == NO_TIMESTAMP
                                   or header.max_timestamp - now_ms <= after):
            continue
        errors = _timestamp_errors(view, pos, header, now_ms, before, after)
        if errors:
            raise rejected(_with_key_errors(errors, view, pos, header, config, topic_partition))


def _timestamp_errors(view: memoryview, pos: int, header: RecordBatchHeader, now_ms: int,
                      before: int, after: int) -> list[ApiRecordError]:
    """Kafka's validateTimestamp for each record of the batch at `pos` (index in the batch)."""
    from common.records import decode_records  # per-record decoding: here only

    low = now_ms - before if before != LONG_MAX else "-inf"
    high = now_ms + after if after != LONG_MAX else "+inf"
    return [(ErrorCode.INVALID_TIMESTAMP, RecordError(
                index, f"Timestamp {record.timestamp} of message with offset {record.offset} is out of "
                       f"range. The timestamp should be within [{low}, {high}]"))
            for index, record in enumerate(decode_records(view, pos, header))
            if record.timestamp != NO_TIMESTAMP
            and (now_ms - record.timestamp > before or record.timestamp - now_ms > after)]


def _with_key_errors(errors: list[ApiRecordError], view: memoryview, pos: int, header: RecordBatchHeader,
                     config: LogConfig, topic_partition: object) -> list[ApiRecordError]:
    """A compacted topic's keyless records join the batch's errors: Kafka checks a record's key
    before its timestamp and reports one error per record."""
    if not config.compact or header.is_control:
        return errors
    (keyless,) = keyless_records(view, [(pos, header)])
    if not keyless:
        return errors
    by_index = {error.batch_index: (code, error) for code, error in errors}
    by_index.update((error.batch_index, (code, error)) for code, error in key_errors(keyless, topic_partition))
    return [by_index[index] for index in sorted(by_index)]


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
