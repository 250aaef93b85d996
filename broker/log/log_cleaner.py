"""Cleaning one partition log: the I/O shell around the keep/drop rule of `compaction`.

Kafka's `Cleaner.doClean` in two halves. `prepare` reads the log's inactive segments and
writes the cleaned copies with their indexes (`cleaner_index`); it touches no state of the log, so it may run on a worker
thread while the broker appends (appends only ever touch the active segment). `commit`
runs on the log's owner (the event loop) and swaps each cleaned group in with Kafka's
steps `.cleaned` -> `.swap` -> old segments `.deleted` -> live
(`cleaner_swap`: a crash at any step recovers the old or the new log, never a mix).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from broker.log.cleaner_io import BufferPool, batch_size_at, whole_batches_length, write_all
from broker.log.cleaner_chunk import ChunkScan, filter_chunk, map_chunk
from broker.log.cleaner_txn import (
    CleanedTransactions,
    LastRecord,
    aborted_batches,
    aborted_from_markers,
    aborted_in,
    in_first_offset_order,
    last_records_of,
)
from broker.log.cleaner_index import CleanedIndexes, write_fsynced
from broker.log.cleaner_swap import CleanedGroup, remove_cleaned, swap_in
from broker.log.cleaner_snapshot import (
    CleaningAbortedError,
    LogSnapshot,
    SegmentFile,
    snapshot_log,
)
from broker.log.compaction import OffsetMap, last_batch_of_producers
from broker.log.log_loader import CLEANED_SUFFIX
from broker.log.partition_log import PartitionLog
from broker.log.record_columns import U8
from broker.log.txn_index import AbortedTxn, encode_entries
from broker.log.segment import (
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    LogSegment,
    segment_file_name,
)
from common.control_records import ControlType
from common.errors import KafkaStorageError
from common.limits import SCAN_PADDING
from common.record_batch import TRANSACTIONAL_MASK, RecordBatchHeader, read_batches
from common.units import MIB

if TYPE_CHECKING:  # cleaner_worker imports this module
    from broker.log.cleaner_worker import Throttle

log = logging.getLogger(__name__)

# Kafka reads and writes through 512 KiB log.cleaner.io.buffer.size buffers; the scan is
# column-wise over a chunk's batches, so wider chunks mean fewer numpy steps per byte, but
# past a few MiB its arrays leave the cache (and crowd the broker's, on a shared machine).
SCAN_CHUNK_BYTES = 4 * MIB
WRITE_BUFFER_BYTES = 4 * MIB
# The map pass keeps the scans of whole dirty segments (chunk bytes, record columns, key
# hashes: ~1.7x the segment at 100-byte records) for the filter pass up to this much, so a
# dirty section this size is read, walked and hashed once; past it, segments are scanned
# again in the filter pass (Kafka always reads the dirty section twice).
SCAN_CACHE_BYTES = 128 * MIB
# A cleaning reads its first chunks into buffers of the process's pool, given back when it
# ends (a cleaning holds at most this much of them; later chunks take fresh buffers)
POOLED_READ_BYTES = SCAN_CACHE_BYTES // 2 + SCAN_CHUNK_BYTES
READ_BUFFERS = BufferPool(max_bytes=POOLED_READ_BYTES + SCAN_CHUNK_BYTES + SCAN_PADDING,
                          min_buffer_bytes=SCAN_CHUNK_BYTES + SCAN_PADDING)


Chunk = tuple[memoryview, list[tuple[int, RecordBatchHeader]], ChunkScan]


@dataclass(slots=True)
class PreparedClean:
    """What `prepare` wrote: the cleaned groups, the offset the log is clean up to
    afterwards, and what it counted on the way."""

    first_dirty: int
    end_offset: int
    delete_retention_ms: int
    groups: list[CleanedGroup] = field(default_factory=list)
    bytes_read: int = 0
    records_read: int = 0
    records_kept: int = 0
    earliest_delete_horizon: int | None = None


class Cleaner:
    """Compacts one log at a time with a reused, bounded offset map."""

    def __init__(self, offset_map: OffsetMap, *, throttle: Throttle | None = None,
                 fail_point: Callable[[str], None] | None = None,
                 scan_cache_bytes: int = SCAN_CACHE_BYTES) -> None:
        self.offset_map = offset_map
        self.throttle = throttle
        self.scan_cache_bytes = scan_cache_bytes
        self.fail_point = fail_point or (lambda step: None)
        self.stopping = False  # set from the owner's thread: `prepare` gives up soon
        # segment base offset -> its chunks as the map pass scanned them (one `prepare`)
        self._scans: dict[int, list[Chunk]] = {}
        self._scans_bytes = 0
        self._taken: list[U8] = []  # pooled read buffers of the running `prepare`

    def request_stop(self) -> None:
        """Make a running `prepare` stop at its next batch (broker shutdown)."""
        self.stopping = True

    # ---- prepare: off the event loop ---------------------------------------------------

    def prepare(self, snap: LogSnapshot, *, first_dirty: int, first_uncleanable: int,
                now_ms: int, tombstones_due: bool = False) -> PreparedClean | None:
        """Map the dirty section [first_dirty, first_uncleanable) (as far as the map holds)
        and write the cleaned groups; None when there is nothing to clean. With
        `tombstones_due` the clean section is rewritten even without dirty records, to
        drop tombstones whose delete horizon has passed. Reads only files: runs on a
        worker thread or process while the owner appends."""
        files: list[SegmentFile] = []
        try:
            for segment in snap.segments:
                files.append(SegmentFile(segment))
            return self._prepare(snap, files, first_dirty=first_dirty,
                                 first_uncleanable=first_uncleanable, now_ms=now_ms,
                                 tombstones_due=tombstones_due)
        finally:
            self._scans.clear()
            self._scans_bytes = 0
            for f in files:
                f.close()
            READ_BUFFERS.give_back(self._taken)  # nothing reads them any more
            self._taken.clear()

    def _prepare(self, snap: LogSnapshot, files: list[SegmentFile], *, first_dirty: int,
                 first_uncleanable: int, now_ms: int,
                 tombstones_due: bool) -> PreparedClean | None:
        config = snap.config
        segments = files[:-1]  # never the active segment
        self.offset_map.clear()
        prepared = PreparedClean(first_dirty, first_dirty, config.delete_retention_ms)
        aborted = aborted_transactions(snap, files)
        # the map pass keeps the data of aborted transactions out (Kafka's buildOffsetMap)
        map_txn = CleanedTransactions()
        map_txn.add_aborted(aborted_in(aborted, first_dirty, first_uncleanable))
        end = self._build_offset_map(segments, first_dirty, first_uncleanable, prepared, map_txn)
        if end <= first_dirty and not tombstones_due:
            return None
        prepared.end_offset = max(end, first_dirty)
        headers = [h for f in files for h in self._headers(f)]
        producers = last_batch_of_producers(headers)
        txn, last_records = None, {}
        if any(h.attributes & TRANSACTIONAL_MASK for h in headers):
            txn = CleanedTransactions()  # one walk over every group, as Kafka's doClean
            last_records = last_records_of(headers)
        cleanable = [s for s in segments if s.base_offset < prepared.end_offset]
        lag_horizon = now_ms - config.min_compaction_lag_ms
        try:
            first = 0
            for group in _group_by_size(cleanable, config.segment_bytes,
                                        config.segment_index_bytes):
                prepared.groups.append(self._clean_group(
                    Path(snap.directory), first, group, prepared,
                    index_interval_bytes=config.index_interval_bytes, now_ms=now_ms,
                    lag_horizon_ms=lag_horizon, producers=producers,
                    aborted=aborted, txn=txn, last_records=last_records, files=files))
                first += len(group)
        except BaseException:
            abort(prepared)
            raise
        return prepared

    def _build_offset_map(self, segments: list[SegmentFile], first_dirty: int,
                          first_uncleanable: int, prepared: PreparedClean,
                          txn: CleanedTransactions) -> int:
        """Put the dirty keys in the map; return one past the last offset mapped. Stops
        at a batch that would overflow the map (cleaned later: Kafka's partial map).
        Whole segments' scans are kept for the filter pass within SCAN_CACHE_BYTES.
        Batches of the aborted transactions `txn` knows are not mapped."""
        end = first_dirty
        for segment in segments:
            if segment.next_offset <= first_dirty:
                continue
            if segment.base_offset >= first_uncleanable:
                break
            kept: list[Chunk] | None = []
            kept_bytes, stop = 0, False
            for data, batches in self._chunks(segment):
                skip = None
                if any(h.attributes & TRANSACTIONAL_MASK for _, h in batches):
                    skip = aborted_batches(txn, data, batches)
                mapped = map_chunk(self.offset_map, data, batches, first_dirty=first_dirty,
                                   first_uncleanable=first_uncleanable, skip=skip)
                if kept is not None and mapped.scan is not None:
                    kept_bytes += mapped.scan.nbytes
                    if self._scans_bytes + kept_bytes <= self.scan_cache_bytes:
                        # the scan's buffer starts with the chunk's bytes (a copy of them
                        # when it holds decompressed sections too): the chunk is not kept
                        kept.append((mapped.scan.columns.buf.data, batches, mapped.scan))
                    else:
                        kept = None
                else:
                    kept = None  # a chunk not scanned: the filter pass scans the segment
                if mapped.end_offset is not None:
                    end = mapped.end_offset
                if mapped.stop:
                    if mapped.full and end == first_dirty:
                        raise KafkaStorageError(
                            f"log.cleaner.dedupe.buffer.size holds {self.offset_map.capacity} "
                            f"keys, too few for one batch of the log")
                    if batches[-1][1].next_offset < segment.next_offset:
                        kept = None  # the segment's later chunks were not scanned
                    stop = True
                    break
            if kept is not None:
                self._scans[segment.base_offset] = kept
                self._scans_bytes += kept_bytes
            if stop:
                return end
        return end

    def _clean_group(self, directory: Path, first: int, group: list[SegmentFile],
                     prepared: PreparedClean, *, index_interval_bytes: int, now_ms: int,
                     lag_horizon_ms: int, producers: dict[int, int],
                     aborted: list[AbortedTxn], txn: CleanedTransactions | None,
                     last_records: dict[int, LastRecord],
                     files: list[SegmentFile]) -> CleanedGroup:
        path = directory / (segment_file_name(group[0].base_offset, LOG_SUFFIX) + CLEANED_SUFFIX)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        out = bytearray()
        written = 0
        indexes = CleanedIndexes(group[0].base_offset, index_interval_bytes)
        last_segment = group[-1]
        try:
            for segment in group:
                prepared.bytes_read += segment.size
                if txn is not None:
                    # the whole segment's range: its cleaned `.txnindex` is rebuilt from it
                    after = files.index(segment) + 1
                    upper = files[after].base_offset if after < len(files) else segment.next_offset
                    txn.add_aborted(aborted_in(aborted, segment.base_offset, upper))
                for data, batches, scan in self._scanned_chunks(segment):
                    kept = filter_chunk(
                        data, batches, offset_map=self.offset_map,
                        map_end_offset=prepared.end_offset, now_ms=now_ms,
                        delete_retention_ms=prepared.delete_retention_ms,
                        lag_horizon_ms=lag_horizon_ms, last_offsets_of_producers=producers,
                        group_next_offset=(segment.next_offset if segment is last_segment
                                           else None), scan=scan, txn=txn,
                        last_records=last_records)
                    prepared.records_read += kept.records_read
                    prepared.records_kept += kept.records_kept
                    prepared.earliest_delete_horizon = min(
                        (h for h in (prepared.earliest_delete_horizon,
                                     kept.earliest_delete_horizon) if h is not None), default=None)
                    for piece in kept.pieces:
                        out += piece
                    if len(out) >= WRITE_BUFFER_BYTES:
                        written += self._write(fd, out, indexes)
                        out.clear()
            written += self._write(fd, out, indexes)
            os.fsync(fd)
        finally:
            os.close(fd)
        indexes.finish()
        cleaned = CleanedGroup(first, len(group), str(path), sum(s.size for s in group),
                               written, indexes,
                               tuple(txn.take_retained()) if txn is not None else ())
        indexes.write(*cleaned.index_paths())  # fsynced, as Kafka flushes a cleaned segment
        if cleaned.aborted:  # Kafka's cleaned txnIndex: the aborted transactions it keeps
            write_fsynced(cleaned.txn_index_path(), encode_entries(cleaned.aborted))
        return cleaned

    def _write(self, fd: int, data: bytearray, indexes: CleanedIndexes) -> int:
        if self.throttle is not None:
            self.throttle.account(len(data))
        indexes.add(data)  # whole batches: entries as Kafka's cleaner appends them
        return write_all(fd, data)

    def _headers(self, segment: SegmentFile) -> Iterator[RecordBatchHeader]:
        """The segment's batch headers: from the map pass's scans, or read."""
        cached = self._scans.get(segment.base_offset)
        if cached is None:
            yield from segment.headers()
            return
        for _, batches, _ in cached:
            for _, header in batches:
                yield header

    def _scanned_chunks(self, segment: SegmentFile) -> Iterator[tuple[
            memoryview, list[tuple[int, RecordBatchHeader]], ChunkScan | None]]:
        """The segment's chunks with the map pass's scans, or read afresh (scan None)."""
        cached = self._scans.pop(segment.base_offset, None)
        if cached is None:
            for data, batches in self._chunks(segment):
                yield data, batches, None
            return
        for data, batches, scan in cached:
            if self.stopping:
                raise CleaningAbortedError(f"{segment.log_path}: the cleaner is stopping")
            yield data, batches, scan

    def _chunks(self, segment: SegmentFile) -> Iterator[tuple[memoryview,
                                                              list[tuple[int, RecordBatchHeader]]]]:
        """The whole batches of an inactive segment, CRC-checked, read SCAN_CHUNK_BYTES at
        a time (at least one batch) into a buffer with SCAN_PADDING spare bytes after them."""
        position, size = 0, segment.size
        while position < size:  # bounded: each chunk moves `position` forward
            if self.stopping:
                raise CleaningAbortedError(f"{segment.log_path}: the cleaner is stopping")
            want = max(min(SCAN_CHUNK_BYTES, size - position),
                       batch_size_at(segment.fd, position))
            # not zeroed: the scan never depends on the bytes after the whole batches
            if sum(b.nbytes for b in self._taken) < POOLED_READ_BYTES:
                self._taken.append(READ_BUFFERS.take(want + SCAN_PADDING))  # back when prepared
                buffer = self._taken[-1][: want + SCAN_PADDING].data
            else:  # past the pooled bytes: a buffer freed with its last reference
                buffer = np.empty(want + SCAN_PADDING, np.uint8).data
            got = os.preadv(segment.fd, [buffer[:want]], position)
            if self.throttle is not None:
                self.throttle.account(got)
            usable = whole_batches_length(buffer[:got])
            if not usable:
                raise KafkaStorageError(f"{segment.log_path}: a batch at byte {position} "
                                        f"runs past the segment's end")
            yield buffer, read_batches(buffer[:usable])
            position += usable

    # ---- commit: on the log's owner -----------------------------------------------------

    def clean(self, plog: PartitionLog, *, first_dirty: int, first_uncleanable: int,
              now_ms: int, tombstones_due: bool = False) -> PreparedClean | None:
        """prepare + commit in one call (tests, benchmarks, a single-threaded owner)."""
        snap, segments = snapshot_log(plog)
        prepared = self.prepare(snap, first_dirty=first_dirty,
                                first_uncleanable=first_uncleanable, now_ms=now_ms,
                                tombstones_due=tombstones_due)
        if prepared is not None:
            self.commit(plog, segments, prepared, now_ms)
        return prepared

    def commit(self, plog: PartitionLog, segments: tuple[LogSegment, ...],
               prepared: PreparedClean, now_ms: int) -> None:
        """Swap every cleaned group into `plog` (`segments`: the snapshot's); raises
        CleaningAbortedError (with the rest of the `.cleaned` files removed) when the log
        no longer holds a group's segments."""
        for i, group in enumerate(prepared.groups):
            old = list(segments[group.first : group.first + group.count])
            if not plog.holds_segments(old):
                abort(prepared, start=i)
                raise CleaningAbortedError(
                    f"{plog.topic_partition}: segments changed while cleaning")
            swap_in(plog, old, group, now_ms, self.fail_point)


def aborted_transactions(snap: LogSnapshot, files: list[SegmentFile]) -> list[AbortedTxn]:
    """The log's aborted transactions in first-offset order: its segments' `.txnindex`
    entries (Kafka's collectAbortedTransactions), or, when an index is being rebuilt after
    recovery, the same entries from one pass over the log's headers and markers."""
    if all(s.aborted is not None for s in snap.segments):
        return in_first_offset_order(t for s in snap.segments for t in s.aborted or ())

    def with_markers() -> Iterator[tuple[RecordBatchHeader, ControlType | None]]:
        for f in files:
            for position, header in f.positioned_headers():
                yield header, (f.marker(position, header) if header.is_control else None)
    return aborted_from_markers(with_markers())


def abort(prepared: PreparedClean, start: int = 0) -> None:
    """Remove the files of the groups not swapped in."""
    remove_cleaned(prepared.groups[start:])

def _group_by_size(segments: list[SegmentFile], max_bytes: int,
                   max_index_bytes: int) -> Iterator[list[SegmentFile]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose cleaned copy fits one
    segment (bytes, index entries, int32 relative offsets)."""
    max_entries = max(1, max_index_bytes // 8)
    group: list[SegmentFile] = []
    size = entries = 0
    for segment in segments:
        if group and (size + segment.size > max_bytes
                      or entries + segment.index_entries > max_entries
                      or segment.next_offset - 1 - group[0].base_offset > MAX_RELATIVE_OFFSET):
            yield group
            group, size, entries = [], 0, 0
        group.append(segment)
        size += segment.size
        entries += segment.index_entries
    if group:
        yield group
