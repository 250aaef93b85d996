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
- transactional and control batches are left whole (transactions are not cleaned yet);
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

from broker.log.record_scan import ScannedBatch, ScannedRecord
from common.compression import compress
from common.record_batch import (
    ATTRIBUTES_POS,
    CRC_POS,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
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

# Kafka sizes the dedupe buffer for 24 bytes per entry (a 16-byte MD5 of the key and an
# 8-byte offset) and fills it to `log.cleaner.io.buffer.load.factor`.
BYTES_PER_MAP_ENTRY = 24
DEFAULT_LOAD_FACTOR = 0.9
LAST_OFFSET_DELTA_POS = 23  # in the v2 batch header, inside the CRC
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


class OffsetMap:
    """Key -> latest offset over a dirty section, bounded by a number of entries.

    Kafka's SkimpyOffsetMap stores key hashes in a fixed buffer; a dict keyed by the key
    bytes keeps the same bound (`capacity` entries, from the dedupe buffer size) without
    hash collisions. `latest_offset` is the highest offset put (-1: empty).
    """

    __slots__ = ("_offsets", "capacity", "latest_offset")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"offset map capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    @classmethod
    def for_buffer(cls, dedupe_buffer_bytes: int, *, threads: int = 1,
                   load_factor: float = DEFAULT_LOAD_FACTOR) -> OffsetMap:
        """A map as big as Kafka's for `log.cleaner.dedupe.buffer.size` over `threads`."""
        per_thread = dedupe_buffer_bytes // max(1, threads)
        return cls(max(1, int(per_thread * load_factor) // BYTES_PER_MAP_ENTRY))

    def __len__(self) -> int:
        return len(self._offsets)

    def __contains__(self, key: object) -> bool:
        return key in self._offsets

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.capacity

    def room_for(self, keys: int) -> bool:
        """Whether `keys` new keys still fit (an upper bound: some may be present)."""
        return len(self._offsets) + keys <= self.capacity

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[key] = offset
        self.latest_offset = max(self.latest_offset, offset)

    def get(self, key: bytes) -> int:
        """The latest offset of `key`, or -1."""
        return self._offsets.get(key, -1)

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1


def map_batch(offset_map: OffsetMap, header: RecordBatchHeader,
              records: Iterable[ScannedRecord]) -> None:
    """Record the keys of one dirty batch in `offset_map` (control batches hold no keys
    of the topic; keyless records cannot be mapped)."""
    if header.is_control:
        return
    put = offset_map.put
    for record in records:
        if record.key is not None:
            put(record.key, record.offset)


def last_batch_of_producers(headers: Iterable[RecordBatchHeader]) -> dict[int, int]:
    """Producer id -> last offset of its last batch in the log, for the batches that must
    stay (Kafka keeps the batch holding each active producer's last data offset)."""
    last: dict[int, int] = {}
    for header in headers:
        if header.producer_id != NO_PRODUCER_ID and not header.is_control:
            last[header.producer_id] = header.last_offset
    return last


def filter_batch(header: RecordBatchHeader, records: Sequence[ScannedRecord], *,
                 offset_map: OffsetMap, map_end_offset: int, now_ms: int,
                 delete_retention_ms: int, lag_horizon_ms: int,
                 last_offsets_of_producers: Mapping[int, int]) -> BatchFilterResult:
    """Decide which records of one cleanable batch survive.

    `map_end_offset` is one past the last offset the map covers; `lag_horizon_ms` is
    `now - min.compaction.lag.ms` (a record stamped later is too young to drop).
    """
    if header.is_transactional or header.is_control:
        return BatchFilterResult(BatchRetention.KEEP, (), None)
    horizon = header.base_timestamp if header.has_delete_horizon else None
    retain_deletes = horizon is None or now_ms < horizon
    kept = [record for record in records
            if _retained(record, offset_map, map_end_offset, retain_deletes, lag_horizon_ms)]
    has_tombstone = any(record.is_tombstone for record in kept)
    is_producer_last = (header.producer_id != NO_PRODUCER_ID and
                        last_offsets_of_producers.get(header.producer_id) == header.last_offset)
    if not kept:
        if is_producer_last:
            return BatchFilterResult(BatchRetention.RETAIN_EMPTY, (), None)
        return BatchFilterResult(BatchRetention.DELETE, (), None)
    new_horizon = horizon
    if has_tombstone and horizon is None:
        new_horizon = now_ms + delete_retention_ms
    if len(kept) == len(records) and new_horizon == horizon:
        return BatchFilterResult(BatchRetention.KEEP, tuple(kept), horizon)
    return BatchFilterResult(BatchRetention.REWRITE, tuple(kept), new_horizon)


def _retained(record: ScannedRecord, offset_map: OffsetMap, map_end_offset: int,
              retain_deletes: bool, lag_horizon_ms: int) -> bool:
    if record.offset >= map_end_offset or record.timestamp > lag_horizon_ms:
        return True
    if record.key is None:
        return False
    if record.offset < offset_map.get(record.key):
        return False  # a later record of the key exists
    return not record.is_tombstone or retain_deletes


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
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch))
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
    """The common rewrite: the kept records' bytes unchanged (their deltas stay valid, as
    base offset and base timestamp do), recompressed with the batch's codec."""
    section = scanned.section
    payload = compress(header.compression, b"".join(section[r.start : r.end] for r in kept))
    max_timestamp = (header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME
                     else max(r.timestamp for r in kept))
    buf = bytearray(_BATCH_HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload),
        header.partition_leader_epoch, MAGIC_V2, 0, header.attributes, header.last_offset_delta,
        header.base_timestamp, max_timestamp, header.producer_id, header.producer_epoch,
        header.base_sequence, len(kept)) + payload)
    _UINT32.pack_into(buf, CRC_POS, compute_crc(buf, 0, parse_header(buf)))
    return bytes(buf)
