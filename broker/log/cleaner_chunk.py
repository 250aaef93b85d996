"""One chunk of whole batches through the cleaner, in bulk: map its keys, or decide and
build what of it survives. No I/O: the shell (`log_cleaner`) reads chunks and writes the
pieces returned.

A chunk is scanned once (`scan_for_cleaning`: record columns and key hashes); the map
pass hands its scan to the filter pass. Both halves apply the rule of `compaction`
(`retained_records`, `batch_retentions`) to every record and batch of the chunk at once.
Batches that keep every record are copied as whole byte ranges, consecutive ones as one
range; uncompressed batches that lose records are rebuilt all together
(`cleaner_splice`); Python runs once per batch only for compressed rewrites
(`splice_batch`) and the rare ones that change a batch's delete horizon or empty it
(`rebuild_batch`), and otherwise once per run of batches written alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from broker.log.cleaner_splice import gather_ranges, splice_batches
from broker.log.cleaner_txn import (
    CleanedTransactions,
    LastRecord,
    control_fate,
    read_transactions,
)
from common.control_records import ControlType
from broker.log.compaction import (
    DELETE,
    KEEP,
    REWRITE,
    RETAIN_EMPTY,
    OffsetMap,
    batch_retentions,
    rebuild_batch,
    retained_records,
    splice_batch,
)
from broker.log.record_columns import BOOL, I64, U64, RecordColumns, hash_keys, scan_chunk
from broker.log.record_scan import scan_batch
from common.record_batch import (
    COMPRESSION_MASK,
    DELETE_HORIZON_MASK,
    NO_PRODUCER_ID,
    TRANSACTIONAL_MASK,
    RecordBatchHeader,
)

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

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


@dataclass(frozen=True, slots=True)
class ChunkScan:
    """A chunk's data batches (every batch but control batches, whose records hold no key
    of the topic) scanned once, with their keys hashed: the map pass makes it and the
    filter pass reuses it, so a dirty chunk is read, walked and hashed once.
    `scanned_at[c]` is the index in the chunk's batches of column batch c; `keyed` the
    records with a key, `h1`/`h2` their hashes; `slots` each keyed record's slot in the
    offset map where the map pass put it (-1: not put), valid while the map's layout is
    `layout`, so that the filter pass reads those keys' latest offsets without probing."""

    columns: RecordColumns
    scanned_at: I64
    keyed: I64
    h1: U64
    h2: U64
    slots: I64 | None = None
    layout: int = -1

    @property
    def nbytes(self) -> int:
        """Memory held (the chunk's buffer included), for the shell's cache budget."""
        c = self.columns
        return int(sum(a.nbytes for a in (
            c.buf, c.first, c.section_start, c.section_end, c.offset, c.timestamp,
            c.key_start, c.key_length, c.is_tombstone, c.start, c.end, self.scanned_at,
            self.keyed, self.h1, self.h2))) + (0 if self.slots is None else self.slots.nbytes)


def scan_for_cleaning(data: bytes | memoryview, batches: Batches, seed: int) -> ChunkScan:
    """Scan and hash the chunk's data batches (both passes' input)."""
    scanned_at = np.array([i for i, (_, h) in enumerate(batches) if not h.is_control],
                          np.int64)
    last_pos, last = batches[-1]
    columns = scan_chunk(data, batches if len(scanned_at) == len(batches)
                         else [batches[i] for i in scanned_at.tolist()],
                         chunk_end=last_pos + last.size)  # control batches read from it too
    has_key = columns.key_length >= 0
    if has_key.all():  # a compacted topic's records all have keys: no copies
        keyed = np.arange(len(has_key), dtype=np.int64)
        h1, h2 = hash_keys(columns.buf, columns.key_start, columns.key_length, seed)
    else:
        keyed = np.flatnonzero(has_key)
        h1, h2 = hash_keys(columns.buf, columns.key_start[keyed], columns.key_length[keyed],
                           seed)
    return ChunkScan(columns, scanned_at, keyed, h1, h2)


def map_chunk(offset_map: OffsetMap, data: bytes | memoryview, batches: Batches, *,
              first_dirty: int, first_uncleanable: int,
              scan: ChunkScan | None = None, skip: BOOL | None = None) -> MapResult:
    """Put the keys of the chunk's dirty batches in `offset_map`, as Kafka's
    buildOffsetMap: a batch is mapped only while the map has room for all its records
    (an upper bound: some keys may be present); the map covers whole batches. `skip`
    flags batches whose keys stay out (of aborted transactions: `cleaner_txn`). The
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
    counts = np.array([h.record_count for _, h in batches[lo:hi]], np.int64)
    if skip is not None and not skip[lo:hi].any():
        skip = None
    if hi - lo == len(batches) and skip is None and offset_map.room_for(int(counts.sum())):
        # every batch dirty and fitting (the usual case): all keys put, no copies
        scan = replace(scan, slots=offset_map.put_hashes(h1, h2, scan.columns.offset[keyed]),
                       layout=offset_map.layout)
        return MapResult(batches[-1][1].next_offset, False, reached_end, scan)
    batch_of_keyed = scan.scanned_at[scan.columns.batch_of_record[keyed]]
    dirty_keyed = (batch_of_keyed >= lo) & (batch_of_keyed < hi)
    if skip is not None:
        dirty_keyed &= ~skip[batch_of_keyed]
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
        slots = np.full(len(keyed), -1, np.int64)
        slots[take] = offset_map.put_hashes(h1[take], h2[take], scan.columns.offset[keyed[take]])
        scan = replace(scan, slots=slots, layout=offset_map.layout)
    end = batches[lo + mapped - 1][1].next_offset if mapped else None
    full = mapped < hi - lo
    return MapResult(end, full, reached_end or full, scan)


def filter_chunk(data: bytes | memoryview, batches: Batches, *, offset_map: OffsetMap,
                 map_end_offset: int, now_ms: int, delete_retention_ms: int,
                 lag_horizon_ms: int, last_offsets_of_producers: Mapping[int, int],
                 group_next_offset: int | None,
                 scan: ChunkScan | None = None, txn: CleanedTransactions | None = None,
                 last_records: Mapping[int, LastRecord] | None = None) -> FilterResult:
    """What of the chunk's batches survives. A batch reaching `group_next_offset` (the end
    of the segment group being cleaned) stays at least as an empty header, so that the
    cleaned segment covers exactly the offsets of the segments it replaces.

    `txn` is the walk's transaction state (None: the log holds no transactional batch, or
    its transactional data is compacted as committed and markers kept); it is fed the
    chunk's transactional batches, in a slower per-batch step run only where a chunk holds
    some; `last_records` the producers' last records (for markers, `cleaner_txn`)."""
    if not batches:
        return FilterResult()
    if scan is None:
        scan = scan_for_cleaning(data, batches, offset_map.seed)
    columns, at = scan.columns, scan.scanned_at
    n, total = len(at), len(batches)
    chunk_headers = _HeaderColumns.of(batches)
    # per chunk batch: data of an aborted transaction / a marker free to go (cleaner_txn)
    discard: BOOL | None = None
    markers: dict[int, ControlType | None] = {}
    if txn is not None and (chunk_headers.attributes & TRANSACTIONAL_MASK).any():
        discard = read_transactions(txn, data, batches, markers)
    headers = chunk_headers.take(at)
    has_horizon = (headers.attributes & DELETE_HORIZON_MASK) != 0
    base_ts = headers.base_timestamp
    if len(scan.keyed) == len(columns.offset):  # every record keyed
        latest = _latest_of_keys(offset_map, scan)
    else:
        latest = np.full(len(columns.offset), -1, np.int64)
        latest[scan.keyed] = _latest_of_keys(offset_map, scan)
    batch_of = columns.batch_of_record
    retain_deletes = ~has_horizon | (now_ms < base_ts)
    keep = retained_records(
        offset=columns.offset, timestamp=columns.timestamp, has_key=columns.key_length >= 0,
        is_tombstone=columns.is_tombstone, latest=latest, map_end_offset=map_end_offset,
        retain_deletes=True if retain_deletes.all() else retain_deletes[batch_of],
        lag_horizon_ms=lag_horizon_ms)
    if discard is not None and discard[at].any():  # an aborted batch keeps no record
        keep &= ~discard[at][batch_of]
    records = np.diff(columns.first)
    kept = _per_batch(keep, columns.first)
    kept_tombstone = (_per_batch(keep & columns.is_tombstone, columns.first) > 0
                      if columns.is_tombstone.any() else np.zeros(n, np.bool_))
    code, new_has, new_horizon = batch_retentions(
        records=records, kept=kept, kept_tombstone=kept_tombstone,
        has_horizon=has_horizon, horizon=base_ts,
        is_producer_last=headers.is_producer_last(last_offsets_of_producers),
        now_ms=now_ms, delete_retention_ms=delete_retention_ms)
    # per batch of the chunk (control batches: kept whole, or as `_control_fate` says)
    fate = np.full(total, KEEP, np.int8)
    fate[at] = code
    counts = chunk_headers.record_count
    chunk_has = (chunk_headers.attributes & DELETE_HORIZON_MASK) != 0
    chunk_horizon = chunk_headers.base_timestamp.copy()
    if discard is not None:
        for i in markers:  # few: one per transaction ended
            fate[i], stamped = control_fate(batches[i][1], bool(discard[i]), now_ms=now_ms,
                                             delete_retention_ms=delete_retention_ms,
                                             last_records=last_records or {})
            if stamped is not None:
                chunk_has[i], chunk_horizon[i] = True, stamped
    if group_next_offset is not None:
        fate[(fate == DELETE) & (chunk_headers.next_offset >= group_next_offset)] = RETAIN_EMPTY
    code = fate[at]
    chunk_has[at] = np.where(code == KEEP, has_horizon, new_has)
    chunk_horizon[at] = new_horizon
    chunk_kept = counts.copy()
    chunk_kept[at] = np.where(code == KEEP, records, kept)
    emptied = fate == RETAIN_EMPTY  # control batches emptied carry no horizon
    chunk_kept[emptied], chunk_has[emptied] = 0, False
    live = fate != DELETE
    horizons = chunk_horizon[live & chunk_has]
    result = FilterResult(records_read=int(counts.sum()), records_kept=int(chunk_kept[live].sum()),
                          earliest_delete_horizon=int(horizons.min()) if len(horizons) else None)
    # REWRITE without a new horizon splices kept records' bytes: in bulk when uncompressed
    compressed = (headers.attributes & COMPRESSION_MASK) != 0
    splice = (code == REWRITE) & (new_has == has_horizon)
    bulk = splice & ~compressed
    kind = np.full(total, _COPY, np.int8)
    kind[at[code != KEEP]] = _ONE_BY_ONE
    kind[at[bulk]] = _BULK
    kind[fate == DELETE] = _SKIP
    if markers:
        rows = np.fromiter(markers, np.int64)
        kind[rows[(fate[rows] == REWRITE) | (fate[rows] == RETAIN_EMPTY)]] = _CONTROL
    max_ts = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(max_ts, batch_of[keep], columns.timestamp[keep])
    spliced = _splice_in_bulk(columns, chunk_headers.position[at], bulk, keep, kept, max_ts)
    bulk_rank = np.cumsum(kind == _BULK) - 1
    column_of = np.full(total, -1, np.int64)
    column_of[at] = np.arange(n, dtype=np.int64)
    recompress = splice & compressed
    payloads, payload_first = (_kept_bytes(columns, keep & recompress[batch_of], batch_of, n)
                               if recompress.any() else (b"", np.zeros(n + 1, np.int64)))
    view = memoryview(data)
    change = np.flatnonzero(kind[1:] != kind[:-1]) + 1
    for s, e in zip([0, *change.tolist()], [*change.tolist(), total]):  # per run of batches
        run_kind = int(kind[s])
        if run_kind == _COPY:
            last_pos, last = batches[e - 1]
            result.pieces.append(view[batches[s][0] : last_pos + last.size])
        elif run_kind == _BULK:
            result.pieces.append(spliced[int(bulk_rank[s]) : int(bulk_rank[e - 1]) + 1])
        elif run_kind == _ONE_BY_ONE:
            for i in range(s, e):  # compressed rewrites, new horizons, empties: few
                c = int(column_of[i])
                pos, header = batches[i]
                if splice[c]:
                    result.pieces.append(splice_batch(
                        header, payloads[payload_first[c]:payload_first[c + 1]],
                        int(kept[c]), int(max_ts[c])))
                    continue
                batch = view[pos : pos + header.size]
                scanned = scan_batch(batch, header)
                survivors = [r for r, k in zip(scanned.records, _kept_of(keep, columns, c)) if k]
                result.pieces.append(rebuild_batch(
                    header, batch, scanned, survivors,
                    int(new_horizon[c]) if new_has[c] else None))
        elif run_kind == _CONTROL:
            for i in range(s, e):  # markers stamped with a delete horizon, or emptied
                pos, header = batches[i]
                batch = view[pos : pos + header.size]
                scanned = scan_batch(batch, header)
                if fate[i] == REWRITE:
                    result.pieces.append(rebuild_batch(header, batch, scanned, scanned.records,
                                                       int(chunk_horizon[i])))
                else:
                    result.pieces.append(rebuild_batch(header, batch, scanned, [], None))
    return result


def _latest_of_keys(offset_map: OffsetMap, scan: ChunkScan) -> I64:
    """The map's latest offset of each keyed record of the chunk: read at the slots the
    map pass put them (keys never move while the map's layout lasts), looked up else."""
    if scan.slots is None or scan.layout != offset_map.layout:
        return offset_map.lookup(scan.h1, scan.h2)
    put = scan.slots >= 0
    if put.all():
        return offset_map.at_slots(scan.slots)
    latest = np.empty(len(scan.slots), np.int64)
    latest[put] = offset_map.at_slots(scan.slots[put])
    latest[~put] = offset_map.lookup(scan.h1[~put], scan.h2[~put])
    return latest


# how filter_chunk writes a batch
_COPY, _BULK, _ONE_BY_ONE, _SKIP, _CONTROL = 0, 1, 2, 3, 4


class _Spliced:
    """The bulk-spliced batches; `[a:b]` is batches a..b-1 as one view."""

    def __init__(self, data: np.ndarray, start: I64) -> None:
        self._view, self._start = data.data, start.tolist()

    def __getitem__(self, run: slice) -> memoryview:
        return self._view[self._start[run.start] : self._start[run.stop]]


def _splice_in_bulk(columns: RecordColumns, header_at: I64, bulk: BOOL, keep: BOOL, kept: I64,
                    max_ts: I64) -> _Spliced:
    selected = np.flatnonzero(bulk)
    rank = np.cumsum(bulk) - 1
    records = keep if bulk.all() else keep & bulk[columns.batch_of_record]
    result = splice_batches(columns.buf, header_at[selected], columns.start[records],
                            columns.end[records], rank[columns.batch_of_record[records]],
                            kept[selected], max_ts[selected])
    return _Spliced(result.data, result.start)


def _per_batch(flags: BOOL, first: I64) -> I64:
    """How many records of each batch (records first[k]..first[k + 1]) are flagged."""
    running = np.zeros(len(flags) + 1, np.int64)
    np.cumsum(flags, out=running[1:])
    return running[first[1:]] - running[first[:-1]]


@dataclass(frozen=True, slots=True)
class _HeaderColumns:
    """The headers of batches as columns, with their positions."""

    position: I64
    base_offset: I64
    attributes: I64
    last_offset: I64
    base_timestamp: I64
    producer_id: I64
    record_count: I64

    @classmethod
    def of(cls, batches: Batches) -> _HeaderColumns:
        headers = [header for _, header in batches]
        base_offset = np.array([h.base_offset for h in headers], np.int64)
        return cls(np.array([pos for pos, _ in batches], np.int64), base_offset,
                   np.array([h.attributes for h in headers], np.int64),
                   base_offset + np.array([h.last_offset_delta for h in headers], np.int64),
                   np.array([h.base_timestamp for h in headers], np.int64),
                   np.array([h.producer_id for h in headers], np.int64),
                   np.array([h.record_count for h in headers], np.int64))

    @property
    def next_offset(self) -> I64:
        return self.last_offset + 1

    def take(self, index: I64) -> _HeaderColumns:
        return _HeaderColumns(self.position[index], self.base_offset[index],
                              self.attributes[index], self.last_offset[index],
                              self.base_timestamp[index], self.producer_id[index],
                              self.record_count[index])

    def is_producer_last(self, last_offsets_of_producers: Mapping[int, int]) -> BOOL:
        """`compaction.is_last_of_producer` of each batch: its producer's last batch."""
        last = np.zeros(len(self.position), np.bool_)
        if last_offsets_of_producers:
            ids = np.fromiter(last_offsets_of_producers.keys(), np.int64)
            offsets = np.fromiter(last_offsets_of_producers.values(), np.int64)
            candidates = np.flatnonzero((self.producer_id != NO_PRODUCER_ID)
                                        & np.isin(self.last_offset, offsets))
            wanted = dict(zip(ids.tolist(), offsets.tolist()))
            for i in candidates.tolist():  # at most one batch per producer
                last[i] = wanted.get(int(self.producer_id[i])) == int(self.last_offset[i])
        return last


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
    return gather_ranges(columns.buf, starts, lengths).tobytes(), first
