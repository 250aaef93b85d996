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
from broker.log.record_columns import I64, RecordColumns, hash_keys, scan_chunk
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


def _keyed(columns: RecordColumns, seed: int) -> tuple[I64, tuple[np.ndarray, np.ndarray]]:
    """Indexes of the records with a key, and their key hashes."""
    keyed = np.flatnonzero(columns.key_length >= 0)
    return keyed, hash_keys(columns.buf, columns.key_start[keyed], columns.key_length[keyed],
                            seed)


def map_chunk(offset_map: OffsetMap, data: bytes | memoryview, batches: Batches, *,
              first_dirty: int, first_uncleanable: int) -> MapResult:
    """Put the keys of the chunk's dirty batches in `offset_map`, as Kafka's
    buildOffsetMap: a batch is mapped only while the map has room for all its records
    (an upper bound: some keys may be present); the map covers whole batches."""
    dirty = [(pos, h) for pos, h in batches
             if h.last_offset >= first_dirty and h.base_offset < first_uncleanable]
    reached_end = bool(batches) and batches[-1][1].next_offset >= first_uncleanable
    if not dirty:
        return MapResult(None, False, reached_end)
    data_batches = [(i, b) for i, b in enumerate(dirty) if not b[1].is_control]
    columns = scan_chunk(data, [b for _, b in data_batches])
    keyed, (h1, h2) = _keyed(columns, offset_map.seed)
    # the distinct keys the map would hold before each dirty batch
    new_per_record = offset_map.new_keys(h1, h2)
    batch_of_keyed = columns.batch_of_record[keyed]
    new_per_batch = np.zeros(len(dirty), np.int64)
    if len(data_batches):
        at = np.array([i for i, _ in data_batches], np.int64)
        new_per_batch[at] = np.bincount(batch_of_keyed, weights=new_per_record,
                                        minlength=len(data_batches)).astype(np.int64)
    before = len(offset_map) + np.concatenate(([0], np.cumsum(new_per_batch)[:-1]))
    counts = np.array([h.record_count for _, h in dirty], np.int64)
    over = np.flatnonzero(before + counts > offset_map.capacity)
    mapped = int(over[0]) if len(over) else len(dirty)
    if mapped:
        # the records of the data batches before the first that does not fit
        data_mapped = sum(1 for i, _ in data_batches if i < mapped)
        take = batch_of_keyed < data_mapped
        offset_map.put_hashes(h1[take], h2[take], columns.offset[keyed[take]])
    end = dirty[mapped - 1][1].next_offset if mapped else None
    return MapResult(end, mapped < len(dirty), reached_end or mapped < len(dirty))


def filter_chunk(data: bytes | memoryview, batches: Batches, *, offset_map: OffsetMap,
                 map_end_offset: int, now_ms: int, delete_retention_ms: int,
                 lag_horizon_ms: int, last_offsets_of_producers: Mapping[int, int],
                 group_next_offset: int | None) -> FilterResult:
    """What of the chunk's batches survives. A batch reaching `group_next_offset` (the end
    of the segment group being cleaned) stays at least as an empty header, so that the
    cleaned segment covers exactly the offsets of the segments it replaces."""
    result = FilterResult()
    view = memoryview(data)
    scanned_at = [i for i, (_, h) in enumerate(batches)
                  if not (h.is_control or h.is_transactional)]
    columns = scan_chunk(data, [batches[i] for i in scanned_at])
    keyed, (h1, h2) = _keyed(columns, offset_map.seed)
    latest = np.full(len(columns.offset), -1, np.int64)
    latest[keyed] = offset_map.lookup(h1, h2)
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
        if c is None:  # transactional and control batches are left whole
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
