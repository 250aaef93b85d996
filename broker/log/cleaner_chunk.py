"""One chunk of whole batches through the cleaner, in bulk: map its keys, or decide and
build what of it survives. No I/O: the shell (`log_cleaner`) reads chunks and writes the
pieces returned.

Both halves work on `record_columns.scan_chunk` columns and apply the rule of
`compaction` (`retained_records`, `batch_retention`) to every record of the chunk at once;
Python runs once per batch, never per record, except for the rare rewrites that change a
batch's delete horizon or empty it (rebuilt record by record by `rebuild_batch`).
Batches that keep every record are copied as whole byte ranges of the chunk, consecutive
ones as one range; batches that lose records get their kept records' bytes spliced
unchanged under a new header.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from broker.log.compaction import (
    BatchRetention,
    OffsetMap,
    batch_retention,
    is_last_of_producer,
    rebuild_batch,
    retained_records,
    splice_batch,
)
from broker.log.record_columns import I64, U64, RecordColumns, hash_keys, scan_chunk
from broker.log.record_scan import scan_batch
from common.record_batch import RecordBatchHeader

Batches = Sequence[tuple[int, RecordBatchHeader]]


@dataclass(frozen=True, slots=True)
class MapResult:
    """How far a chunk was mapped: one past the last offset mapped (None: no batch of the
    chunk was), whether the map is full (a dirty batch did not fit) and whether mapping
    must stop (full, or the dirty section's end reached)."""

    end_offset: int | None
    full: bool
    stop: bool
    scan: ChunkScan | None = None


@dataclass(slots=True)
class FilterResult:
    """What of a chunk survives: the pieces to write in order, and counts."""

    pieces: list[bytes | memoryview] = field(default_factory=list)
    records_read: int = 0
    records_kept: int = 0
    earliest_delete_horizon: int | None = None

    def note_horizon(self, horizon: int | None) -> None:
        if horizon is not None and (self.earliest_delete_horizon is None
                                    or horizon < self.earliest_delete_horizon):
            self.earliest_delete_horizon = horizon


@dataclass(frozen=True, slots=True)
class ChunkScan:
    """A chunk's data batches (every batch but control batches, whose records hold no key
    of the topic) scanned once, with their keys hashed: the map pass makes it and the
    filter pass reuses it, so a dirty chunk is read, walked and hashed once.
    `scanned_at[c]` is the index in the chunk's batches of column batch c; `keyed` the
    records with a key, `h1`/`h2` their hashes."""

    columns: RecordColumns
    scanned_at: I64
    keyed: I64
    h1: U64
    h2: U64

    @property
    def nbytes(self) -> int:
        """Memory held (the chunk's buffer included), for the shell's cache budget."""
        c = self.columns
        return int(sum(a.nbytes for a in (
            c.buf, c.first, c.section_start, c.section_end, c.offset, c.timestamp,
            c.key_start, c.key_length, c.is_tombstone, c.start, c.end, self.scanned_at,
            self.keyed, self.h1, self.h2)))


def scan_for_cleaning(data: bytes | memoryview, batches: Batches, seed: int) -> ChunkScan:
    """Scan and hash the chunk's data batches (both passes' input)."""
    scanned_at = np.array([i for i, (_, h) in enumerate(batches) if not h.is_control],
                          np.int64)
    columns = scan_chunk(data, [batches[i] for i in scanned_at.tolist()])
    keyed = np.flatnonzero(columns.key_length >= 0)
    h1, h2 = hash_keys(columns.buf, columns.key_start[keyed], columns.key_length[keyed], seed)
    return ChunkScan(columns, scanned_at, keyed, h1, h2)


def map_chunk(offset_map: OffsetMap, data: bytes | memoryview, batches: Batches, *,
              first_dirty: int, first_uncleanable: int,
              scan: ChunkScan | None = None) -> MapResult:
    """Put the keys of the chunk's dirty batches in `offset_map`, as Kafka's
    buildOffsetMap: a batch is mapped only while the map has room for all its records
    (an upper bound: some keys may be present); the map covers whole batches. The
    result carries the chunk's scan (`scan`, or made here) for the filter pass."""
    # batches are in offset order: the dirty ones are the range [lo, hi)
    lo = next((i for i, (_, h) in enumerate(batches) if h.last_offset >= first_dirty),
              len(batches))
    hi = next((i for i in range(lo, len(batches))
               if batches[i][1].base_offset >= first_uncleanable), len(batches))
    reached_end = bool(batches) and batches[-1][1].next_offset >= first_uncleanable
    if lo >= hi:
        return MapResult(None, False, reached_end, scan)
    if scan is None:
        scan = scan_for_cleaning(data, batches, offset_map.seed)
    keyed, h1, h2 = scan.keyed, scan.h1, scan.h2
    batch_of_keyed = scan.scanned_at[scan.columns.batch_of_record[keyed]]
    dirty_keyed = (batch_of_keyed >= lo) & (batch_of_keyed < hi)
    counts = np.array([h.record_count for _, h in batches[lo:hi]], np.int64)
    mapped = hi - lo
    if not offset_map.room_for(int(counts.sum())):  # else every dirty batch fits
        # the distinct keys the map would hold before each dirty batch
        new_per_record = offset_map.new_keys(h1[dirty_keyed], h2[dirty_keyed])
        new_per_batch = np.bincount(batch_of_keyed[dirty_keyed] - lo, weights=new_per_record,
                                    minlength=hi - lo).astype(np.int64)
        before = len(offset_map) + np.concatenate(([0], np.cumsum(new_per_batch)[:-1]))
        over = np.flatnonzero(before + counts > offset_map.capacity)
        mapped = int(over[0]) if len(over) else hi - lo
    if mapped:
        take = dirty_keyed & (batch_of_keyed < lo + mapped)
        offset_map.put_hashes(h1[take], h2[take], scan.columns.offset[keyed[take]])
    end = batches[lo + mapped - 1][1].next_offset if mapped else None
    full = mapped < hi - lo
    return MapResult(end, full, reached_end or full, scan)


def filter_chunk(data: bytes | memoryview, batches: Batches, *, offset_map: OffsetMap,
                 map_end_offset: int, now_ms: int, delete_retention_ms: int,
                 lag_horizon_ms: int, last_offsets_of_producers: Mapping[int, int],
                 group_next_offset: int | None,
                 scan: ChunkScan | None = None) -> FilterResult:
    """What of the chunk's batches survives. A batch reaching `group_next_offset` (the end
    of the segment group being cleaned) stays at least as an empty header, so that the
    cleaned segment covers exactly the offsets of the segments it replaces."""
    result = FilterResult()
    view = memoryview(data)
    if scan is None:
        scan = scan_for_cleaning(data, batches, offset_map.seed)
    columns, keyed = scan.columns, scan.keyed
    scanned_at: list[int] = scan.scanned_at.tolist()
    latest = np.full(len(columns.offset), -1, np.int64)
    latest[keyed] = offset_map.lookup(scan.h1, scan.h2)
    batch_of = columns.batch_of_record
    retain_deletes = np.array([not batches[i][1].has_delete_horizon
                               or now_ms < batches[i][1].base_timestamp
                               for i in scanned_at], np.bool_)
    keep = retained_records(
        offset=columns.offset, timestamp=columns.timestamp, has_key=columns.key_length >= 0,
        is_tombstone=columns.is_tombstone, latest=latest, map_end_offset=map_end_offset,
        retain_deletes=retain_deletes[batch_of], lag_horizon_ms=lag_horizon_ms)
    n = len(scanned_at)
    kept = np.bincount(batch_of, weights=keep, minlength=n).astype(np.int64)
    kept_tombstones = np.bincount(batch_of, weights=keep & columns.is_tombstone, minlength=n)
    max_ts = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(max_ts, batch_of[keep], columns.timestamp[keep])
    payloads, payload_first = _kept_bytes(columns, keep, batch_of, n)
    column_of = dict(zip(scanned_at, range(n)))
    copy_from = copy_to = 0  # a run of batches copied whole: view[copy_from:copy_to]
    for i, (pos, header) in enumerate(batches):  # per batch, not per record
        result.records_read += header.record_count
        c = column_of.get(i)
        if c is None or header.is_transactional:  # left whole: control, transactional
            retention, horizon = BatchRetention.KEEP, None
        else:
            retention, horizon = batch_retention(
                records=header.record_count, kept=int(kept[c]),
                kept_tombstone=bool(kept_tombstones[c]),
                horizon=header.base_timestamp if header.has_delete_horizon else None,
                is_producer_last=is_last_of_producer(header, last_offsets_of_producers),
                now_ms=now_ms, delete_retention_ms=delete_retention_ms)
        if (retention is BatchRetention.DELETE and group_next_offset is not None
                and header.next_offset >= group_next_offset):
            retention = BatchRetention.RETAIN_EMPTY
        if retention is BatchRetention.KEEP:
            result.records_kept += header.record_count
            result.note_horizon(header.base_timestamp if header.has_delete_horizon else None)
            if copy_to != pos:
                if copy_to > copy_from:
                    result.pieces.append(view[copy_from:copy_to])
                copy_from = pos
            copy_to = pos + header.size
            continue
        if retention is BatchRetention.DELETE:
            continue
        result.records_kept += int(kept[c]) if c is not None else 0
        result.note_horizon(horizon)
        batch = view[pos : pos + header.size]
        old_horizon = header.base_timestamp if header.has_delete_horizon else None
        if c is not None and kept[c] and horizon == old_horizon:
            rebuilt = splice_batch(header, payloads[payload_first[c]:payload_first[c + 1]],
                                   int(kept[c]), int(max_ts[c]))
        else:  # a new delete horizon, or no record left: rebuilt record by record (rare)
            scanned = scan_batch(batch, header)
            survivors = [r for r, k in zip(scanned.records, _kept_of(keep, columns, c)) if k]
            rebuilt = rebuild_batch(header, batch, scanned, survivors, horizon)
        if copy_to > copy_from:
            result.pieces.append(view[copy_from:copy_to])
        copy_from = copy_to = 0
        result.pieces.append(rebuilt)
    if copy_to > copy_from:
        result.pieces.append(view[copy_from:copy_to])
    return result


def _kept_of(keep: np.ndarray, columns: RecordColumns, c: int | None) -> list[bool]:
    if c is None:
        return []
    return [bool(k) for k in keep[columns.first[c] : columns.first[c + 1]]]


def _kept_bytes(columns: RecordColumns, keep: np.ndarray, batch_of: I64,
                n: int) -> tuple[bytes, I64]:
    """The bytes of every kept record, batch after batch, gathered at once; and where each
    batch's part starts (`first[-1]`: the total)."""
    starts, ends = columns.start[keep], columns.end[keep]
    lengths = ends - starts
    per_batch = np.bincount(batch_of[keep], weights=lengths, minlength=n).astype(np.int64)
    first = np.zeros(n + 1, np.int64)
    np.cumsum(per_batch, out=first[1:])
    out_at = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=out_at[1:])
    index = np.arange(int(first[-1]), dtype=np.int64) + np.repeat(starts - out_at, lengths)
    return columns.buf[index].tobytes(), first
