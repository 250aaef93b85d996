"""Which records survive log compaction: a pure function of the records, the key map and
the horizons (Kafka's `LogCleaner.shouldRetainRecord` and `MemoryRecords.filterTo`).

No files, no clocks: the cleaner shell (`broker.log.log_cleaner`) reads batches, asks
`filter_batch` what to keep, and writes what it is told. Kafka's rules kept here:

- a keyed record survives when no later record of its key is in the offset map (the map
  covers the dirty section up to `map_end_offset`; records at or past it always survive);
- a tombstone (null value) that is the latest of its key survives until its batch's delete
  horizon (KIP-534): the first cleaning that keeps it stamps the batch with
  `now + delete.retention.ms`, a cleaning after that horizon drops it;
- keyless records cannot be compacted and are dropped (produce rejects them, so only a
  log written before `cleanup.policy=compact` holds any);
- records younger than `min.compaction.lag.ms` are kept (the shell also never maps or
  cleans a segment within the lag, as Kafka does; this is the record-level safety net);
- transactions (`cleaner_txn`): batches of aborted transactions are discarded whole,
  committed transactional data is compacted like any data, and a commit or abort marker
  stays while data of its transaction remains before it, then until its delete horizon;
- the last batch of each producer is kept, empty if all its records go, so that its
  producer id, epoch and last sequence survive for idempotent producers;
- a rewritten batch keeps its base offset, last offset delta, producer fields, leader
  epoch and codec: offsets never move, gaps are legal.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt
from crc32c import crc32c

from broker.log.offset_map import OffsetMap
from broker.log.record_columns import BOOL, I64, hash_key_bytes
from broker.log.record_scan import ScannedBatch, ScannedRecord
from common.compression import compress
from common.record_batch import (
    ATTRIBUTES_POS,
    CRC_POS,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_POS,
    LOG_OVERHEAD,
    MAGIC_V2,
    MAX_TIMESTAMP_POS,
    NO_PRODUCER_ID,
    CompressionType,
    RecordBatchHeader,
    TimestampType,
    compute_crc,
    parse_header,
)
from common.records import build_batch, decode_records

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

_INT16, _INT32, _INT64, _UINT32 = (struct.Struct(f) for f in (">h", ">i", ">q", ">I"))
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # the v2 header, as common.record_batch


class BatchRetention(Enum):
    """What happens to one batch (Kafka's `BatchRetention` plus the rewrite case)."""

    KEEP = "keep"  # every record stays: the original bytes are copied unchanged
    REWRITE = "rewrite"  # some records (or the delete horizon) change: rebuild the batch
    RETAIN_EMPTY = "retain_empty"  # no record stays, but the header must (producer state)
    DELETE = "delete"  # nothing stays


@dataclass(frozen=True, slots=True)
class BatchFilterResult:
    """The decision for one batch: its fate, the records kept (in offset order) and the
    delete horizon the rewritten batch must carry (None: none)."""

    retention: BatchRetention
    kept: tuple[ScannedRecord, ...]
    delete_horizon_ms: int | None


def map_batch(offset_map: OffsetMap, header: RecordBatchHeader,
              records: Iterable[ScannedRecord]) -> None:
    """Record the keys of one dirty batch in `offset_map` (control batches hold no keys
    of the topic; keyless records cannot be mapped)."""
    if header.is_control:
        return
    keyed = [(record.key, record.offset) for record in records if record.key is not None]
    if keyed:
        h1, h2 = hash_key_bytes([key for key, _ in keyed], offset_map.seed)
        offset_map.put_hashes(h1, h2, np.array([offset for _, offset in keyed], np.int64))


def last_batch_of_producers(headers: Iterable[RecordBatchHeader]) -> dict[int, int]:
    """Producer id -> last offset of its last batch in the log, for the batches that must
    stay (Kafka keeps the batch holding each active producer's last data offset)."""
    last: dict[int, int] = {}
    for header in headers:
        if header.producer_id != NO_PRODUCER_ID and not header.is_control:
            last[header.producer_id] = header.last_offset
    return last


def retained_records(*, offset: I64, timestamp: I64, has_key: BOOL, is_tombstone: BOOL,
                     latest: I64, map_end_offset: int, retain_deletes: BOOL | bool,
                     lag_horizon_ms: int) -> BOOL:
    """Which records of cleanable batches survive, all at once (Kafka's
    shouldRetainRecord). Per record: its offset and timestamp, whether it has a key and a
    null value, its key's latest offset in the map (-1: absent), whether its batch's
    tombstones are still retained; `lag_horizon_ms` is `now - min.compaction.lag.ms`."""
    too_new = (offset >= map_end_offset) | (timestamp > lag_horizon_ms)
    # a keyless record cannot be compacted: dropped; a key's older record: dropped
    latest_of_key = has_key & (offset >= latest)
    return too_new | (latest_of_key & (~is_tombstone | retain_deletes))


def batch_retention(*, records: int, kept: int, kept_tombstone: bool, horizon: int | None,
                    is_producer_last: bool, now_ms: int,
                    delete_retention_ms: int) -> tuple[BatchRetention, int | None]:
    """The fate of one batch from its kept records, and the delete horizon it carries."""
    if not kept:
        return (BatchRetention.RETAIN_EMPTY if is_producer_last else BatchRetention.DELETE), None
    new_horizon = horizon
    if kept_tombstone and horizon is None:
        new_horizon = now_ms + delete_retention_ms
    if kept == records and new_horizon == horizon:
        return BatchRetention.KEEP, horizon
    return BatchRetention.REWRITE, new_horizon


# `batch_retentions` codes, as BatchRetention (an array cannot hold enum members)
KEEP, REWRITE, RETAIN_EMPTY, DELETE = 0, 1, 2, 3
RETENTION_OF_CODE = (BatchRetention.KEEP, BatchRetention.REWRITE, BatchRetention.RETAIN_EMPTY,
                     BatchRetention.DELETE)


def batch_retentions(*, records: I64, kept: I64, kept_tombstone: BOOL, has_horizon: BOOL,
                     horizon: I64, is_producer_last: BOOL, now_ms: int,
                     delete_retention_ms: int) -> tuple[npt.NDArray[np.int8], BOOL, I64]:
    """`batch_retention` of many batches at once: per batch its code (KEEP, REWRITE,
    RETAIN_EMPTY, DELETE), whether it carries a delete horizon afterwards, and that
    horizon (meaningful only where it carries one)."""
    stamped = (kept > 0) & kept_tombstone & ~has_horizon  # its first tombstone-keeping cleaning
    new_has = (kept > 0) & (has_horizon | stamped)
    new_horizon = np.where(stamped, now_ms + delete_retention_ms, horizon)
    code = np.where(kept == 0, np.where(is_producer_last, RETAIN_EMPTY, DELETE),
                    np.where((kept == records) & ~stamped, KEEP, REWRITE)).astype(np.int8)
    return code, new_has, new_horizon


def retains_deletes(header: RecordBatchHeader, now_ms: int) -> bool:
    """Whether the batch's tombstones stay: no delete horizon yet, or not reached."""
    return not header.has_delete_horizon or now_ms < header.base_timestamp


def is_last_of_producer(header: RecordBatchHeader,
                        last_offsets_of_producers: Mapping[int, int]) -> bool:
    return (header.producer_id != NO_PRODUCER_ID
            and last_offsets_of_producers.get(header.producer_id) == header.last_offset)


def filter_batch(header: RecordBatchHeader, records: Sequence[ScannedRecord], *,
                 offset_map: OffsetMap, map_end_offset: int, now_ms: int,
                 delete_retention_ms: int, lag_horizon_ms: int,
                 last_offsets_of_producers: Mapping[int, int],
                 aborted: bool = False) -> BatchFilterResult:
    """Decide which records of one cleanable data batch survive (`retained_records` and
    `batch_retention` for one batch; the shell applies them to many at once).

    `map_end_offset` is one past the last offset the map covers; `lag_horizon_ms` is
    `now - min.compaction.lag.ms` (a record stamped later is too young to drop); `aborted`:
    the batch belongs to an aborted transaction (`cleaner_txn`), no record of it stays.
    Control batches are the shell's (`cleaner_chunk`): kept whole here.
    """
    if header.is_control:
        return BatchFilterResult(BatchRetention.KEEP, (), None)
    has_key = np.array([r.key is not None for r in records], np.bool_)
    latest = np.full(len(records), -1, np.int64)
    if has_key.any():
        h1, h2 = hash_key_bytes([r.key for r in records if r.key is not None], offset_map.seed)
        latest[has_key] = offset_map.lookup(h1, h2)
    keep = retained_records(
        offset=np.array([r.offset for r in records], np.int64),
        timestamp=np.array([r.timestamp for r in records], np.int64), has_key=has_key,
        is_tombstone=np.array([r.is_tombstone for r in records], np.bool_), latest=latest,
        map_end_offset=map_end_offset, retain_deletes=retains_deletes(header, now_ms),
        lag_horizon_ms=lag_horizon_ms) & (not aborted)
    kept = tuple(r for r, k in zip(records, keep.tolist()) if k)
    retention, new_horizon = batch_retention(
        records=len(records), kept=len(kept), kept_tombstone=any(r.is_tombstone for r in kept),
        horizon=header.base_timestamp if header.has_delete_horizon else None,
        is_producer_last=is_last_of_producer(header, last_offsets_of_producers),
        now_ms=now_ms, delete_retention_ms=delete_retention_ms)
    return BatchFilterResult(retention, kept, new_horizon)


def rebuild_batch(header: RecordBatchHeader, batch: bytes | bytearray | memoryview,
                  scanned: ScannedBatch, kept: Sequence[ScannedRecord],
                  delete_horizon_ms: int | None) -> bytes:
    """The batch `header` (bytes `batch`, scanned as `scanned`) rewritten to hold only
    `kept`, as Kafka's cleaner writes it.

    Base offset, last offset delta (so the producer's last sequence stays derivable),
    producer id/epoch/base sequence, leader epoch, timestamp type and codec are the
    original's; records keep their offsets and timestamps; the CRC is recomputed. With a
    new delete horizon the base timestamp holds it (KIP-534) and record timestamp deltas
    are taken from it. No record: Kafka's empty batch header (no codec, max timestamp kept).
    """
    old_horizon = header.base_timestamp if header.has_delete_horizon else None
    if kept and delete_horizon_ms == old_horizon:
        return _splice(header, scanned, kept)
    wanted = {record.offset for record in kept}
    full = [r for r in decode_records(batch, 0, header) if r.offset in wanted]
    codec = header.compression if kept else CompressionType.NONE
    base_timestamp = delete_horizon_ms if delete_horizon_ms is not None else (
        None if kept else header.max_timestamp)
    buf = bytearray(build_batch(
        full, base_offset=header.base_offset, base_timestamp=base_timestamp,
        compression=codec, timestamp_type=header.timestamp_type,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, partition_leader_epoch=header.partition_leader_epoch,
        is_transactional=header.is_transactional, is_control=header.is_control))
    attributes = _INT16.unpack_from(buf, ATTRIBUTES_POS)[0]
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    _INT16.pack_into(buf, ATTRIBUTES_POS, attributes)
    _INT32.pack_into(buf, LAST_OFFSET_DELTA_POS, header.last_offset_delta)
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME or not kept:
        _INT64.pack_into(buf, MAX_TIMESTAMP_POS, header.max_timestamp)
    rebuilt = parse_header(buf)
    _UINT32.pack_into(buf, CRC_POS, compute_crc(buf, 0, rebuilt))
    return bytes(buf)


def _splice(header: RecordBatchHeader, scanned: ScannedBatch,
            kept: Sequence[ScannedRecord]) -> bytes:
    section = scanned.section
    max_timestamp = max(r.timestamp for r in kept)
    return splice_batch(header, b"".join(section[r.start : r.end] for r in kept), len(kept),
                        max_timestamp)


def splice_batch(header: RecordBatchHeader, records: bytes | bytearray | memoryview,
                 count: int, max_timestamp: int) -> bytes:
    """The common rewrite: `count` kept records' bytes unchanged (their deltas stay valid,
    as base offset and base timestamp do), recompressed with the batch's codec, under the
    original header with the new count, max timestamp (of the kept records; Kafka keeps it
    for LOG_APPEND_TIME) and CRC."""
    payload = compress(header.compression, bytes(records))
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    buf = bytearray(_BATCH_HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload),
        header.partition_leader_epoch, MAGIC_V2, 0, header.attributes, header.last_offset_delta,
        header.base_timestamp, max_timestamp, header.producer_id, header.producer_epoch,
        header.base_sequence, count) + payload)
    with memoryview(buf) as view:  # the whole buffer is the batch: no header parse needed
        _UINT32.pack_into(buf, CRC_POS, crc32c(view[ATTRIBUTES_POS:]))
    return bytes(buf)
