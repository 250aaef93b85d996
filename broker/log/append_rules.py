"""The rules of an append to a partition log, apart from the log that applies them: which
offsets a leader assigns and which a replica must keep, when the active segment rolls (Kafka's
LogSegment.shouldRoll), and the key rule of compacted topics.

Pure functions of batch headers, the log's config and the active segment's counters; the
PartitionLog writes what they decide. Per batch, never per record: a produce of 1 MB batches
of 100 B records must not cost Python work per record.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final, NamedTuple

from common.topic_partition import TopicPartition
from common.errors import (
    ErrorCode,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    OffsetsOutOfOrderError,
    RecordError,
    RecordTooLargeError,
)
from common.record_batch import (
    COMPRESSION_MASK,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    CompressionType,
    RecordBatchHeader,
    check_producer_batch,
)
from common.log_config import LogConfig
from common.units import INT_MAX

if TYPE_CHECKING:  # the rules read a segment's counters; the segment's files stay the shell's
    from broker.log.segment import LogSegment

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# An index entry stores `offset - base_offset` as an int32 (Kafka's LogSegment.canConvertToRelativeOffset)
MAX_RELATIVE_OFFSET: Final = INT_MAX

Batches = list[tuple[int, RecordBatchHeader]]  # (position in the appended bytes, header)


class LogAppendInfo(NamedTuple):
    """What an append did: the offsets it assigned and the timestamps it saw.

    A NamedTuple because one is built per append, where a frozen dataclass's slower
    constructor shows up in the benchmark.
    """

    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic stamps LogAppendTime
    max_timestamp: int
    offset_of_max_timestamp: int
    log_start_offset: int
    valid_bytes: int
    batch_count: int


class Offsets(NamedTuple):
    """Base offsets of an append's batches, its largest timestamp with that record's offset, and
    its last offset (the log end offset after it, less one)."""

    bases: list[int]
    max_timestamp: int
    offset_of_max_timestamp: int
    last_offset: int


def assign_offsets(batches: Batches, next_offset: int, *, max_message_bytes: int,
                   tp: TopicPartition) -> Offsets:
    """A leader's append: new base offsets from `next_offset`, each batch producer-shaped and
    within max.message.bytes."""
    bases = []
    max_ts, max_ts_offset = NO_TIMESTAMP, next_offset
    for _, header in batches:
        count = header.record_count
        if (count <= 0 or header.last_offset_delta + 1 != count
                or header.attributes & COMPRESSION_MASK > CompressionType.ZSTD):
            check_producer_batch(header)  # raises, naming the rule
        if header.batch_length + LOG_OVERHEAD > max_message_bytes:
            raise RecordTooLargeError(
                f"record batch of {header.size} bytes to {tp} exceeds max.message.bytes {max_message_bytes}")
        bases.append(next_offset)
        next_offset += count
        if header.max_timestamp > max_ts:
            max_ts, max_ts_offset = header.max_timestamp, next_offset - 1
    return tuple.__new__(Offsets, (bases, max_ts, max_ts_offset, next_offset - 1))  # C, not the NamedTuple's Python __new__


def check_replica_offsets(batches: Batches, log_end_offset: int, *, tp: TopicPartition) -> Offsets:
    """A replica's append keeps the batches' own base offsets, which must increase from the log
    end (a compacted leader's log has gaps)."""
    bases = []
    expected = log_end_offset
    max_ts, max_ts_offset = NO_TIMESTAMP, expected
    for _, header in batches:  # one pass: a follower's round appends one batch or a few
        base = header.base_offset
        if base < expected or (delta := header.last_offset_delta) < 0:
            raise OffsetsOutOfOrderError(
                f"replica append to {tp}: batch at offset {base} does not follow "
                f"offset {expected - 1}")
        bases.append(base)
        expected = base + delta + 1  # header.next_offset without its property frame
        if header.max_timestamp > max_ts:
            max_ts, max_ts_offset = header.max_timestamp, expected - 1
    return tuple.__new__(Offsets, (bases, max_ts, max_ts_offset, expected - 1))


def roll_age_ms(config: LogConfig, tp: TopicPartition, segment_base_offset: int) -> int:
    """Age past which a segment rolls: max_segment_ms less its segment.jitter.ms share.

    Kafka draws each segment's jitter at random in [0, min(segment.jitter.ms, segment.ms)); a
    CRC of partition and base offset spreads the rolls of many partitions the same way and
    gives the same answer after a restart."""
    if config.segment_jitter_ms <= 0:
        return config.max_segment_ms
    seed = zlib.crc32(f"{tp}@{segment_base_offset}".encode())
    return config.max_segment_ms - seed % min(config.segment_jitter_ms, config.segment_ms)


def derived_rules(config: LogConfig, tp: TopicPartition, segment: LogSegment) -> tuple[int, bool]:
    """What an append to `segment` under `config` needs of the config beyond plain fields: the
    segment's roll age (`roll_age_ms`) and whether every record must carry a key (compaction).
    Both change only with the config or the segment: a log keeps them between appends."""
    return roll_age_ms(config, tp, segment.base_offset), config.compact


def roll_reason(segment: LogSegment, config: LogConfig, tp: TopicPartition, *, incoming: int,
                max_timestamp: int, last_offset: int, now_ms: int,
                age_limit: int | None = None) -> str | None:
    """Why the active `segment` must roll before an append of `incoming` bytes ending at
    `last_offset` (Kafka's shouldRoll), or None. An empty segment never rolls. `age_limit`:
    `roll_age_ms(config, tp, segment.base_offset)` when the caller keeps it (it changes only
    with the segment or the config, and a produce asks once per partition). Every append asks:
    its common path makes no call (the indexes' is_full are attributes)."""
    size = segment.size
    if not size:
        return None
    if size > config.segment_bytes - incoming:
        return f"segment.bytes {config.segment_bytes}"
    if age_limit is None:
        age_limit = roll_age_ms(config, tp, segment.base_offset)
    # Kafka measures a segment's age in message time when messages carry timestamps, falling
    # back to the wall clock since the segment was created.
    first_ts = segment.first_batch_timestamp
    if first_ts is not None and first_ts >= 0:
        age = max_timestamp - first_ts
    else:
        age = now_ms - segment.created_ms
    if age > age_limit:
        reason = (f"segment.ms {config.segment_ms}" if config.max_segment_ms == config.segment_ms
                  else f"max.compaction.lag.ms {config.max_compaction_lag_ms}")
        if config.segment_jitter_ms:
            reason += f" less {config.max_segment_ms - age_limit} ms segment.jitter.ms"
        return reason
    if segment.offset_index.is_full or segment.time_index.is_full:
        return f"segment.index.bytes {config.segment_index_bytes}"
    if last_offset - segment.base_offset > MAX_RELATIVE_OFFSET:
        return "relative offsets would overflow int32"
    return None


KEY_REQUIRED: Final = "Compacted topic cannot accept message without key in topic partition {tp}"
MAX_LISTED_RECORD_ERRORS: Final = 3  # records Kafka's INVALID_RECORD message names (all go in record_errors)

ApiRecordError = tuple[ErrorCode, RecordError]  # Kafka's LogValidator.ApiRecordError


def rejected(errors: Sequence[ApiRecordError]) -> KafkaError:
    """Kafka's processRecordErrors: the batch fails as a whole, INVALID_TIMESTAMP if any record's
    timestamp is out of range, else INVALID_RECORD; `record_errors` names every bad record."""
    found = tuple(error for _, error in errors)
    exc: KafkaError
    if any(code == ErrorCode.INVALID_TIMESTAMP for code, _ in errors):
        exc = InvalidTimestampError("One or more records have been rejected due to invalid timestamp")
    else:
        listed = ", ".join(str(e) for e in found[:MAX_LISTED_RECORD_ERRORS])
        exc = InvalidRecordError(
            f"One or more records have been rejected due to {len(found)} record errors in total, "
            f"and only showing the first three errors at most: [{listed}]")
    exc.record_errors = found
    return exc


def keyless_records(view: memoryview, batches: Batches) -> list[list[int]]:
    """Per batch (control batches have no records to check), the indexes of its records with a
    null key; one vectorised scan of every batch (no per-record Python on the produce path)."""
    from broker.log.record_columns import scan_chunk

    out: list[list[int]] = [[] for _ in batches]
    data = [i for i, (_, header) in enumerate(batches) if not header.is_control]
    if not data:
        return out
    columns = scan_chunk(view, [batches[i] for i in data])
    for record in (columns.key_length < 0).nonzero()[0].tolist():  # only the keyless ones
        scanned = int(columns.batch_of_record[record])
        out[data[scanned]].append(record - int(columns.first[scanned]))
    return out


def key_errors(indexes: Iterable[int], tp: object) -> list[ApiRecordError]:
    message = KEY_REQUIRED.format(tp=tp)
    return [(ErrorCode.INVALID_RECORD, RecordError(index, message)) for index in indexes]


def require_keys(view: memoryview, batches: Batches, tp: TopicPartition) -> None:
    """Kafka's LogValidator rule for compacted topics: every record carries a key. The first
    batch holding a keyless record fails (Kafka validates batch by batch) with INVALID_RECORD
    and each such record's index in it; nothing of the append is written."""
    for indexes in keyless_records(view, batches):
        if indexes:
            raise rejected(key_errors(indexes, tp))
