"""The log of one topic-partition: an ordered run of segments in one directory.

It assigns offsets, rolls segments, serves reads as file slices, truncates (for
replication), keeps the leader-epoch cache, and applies retention. Time comes in as
`now_ms` arguments; the caller (one event loop) serializes every call.

The rules live beside it and return decisions this class applies: `append_rules` (offsets a
leader assigns or a replica keeps, when a segment rolls), `retention` (which segments go),
`log_read` (the slice a fetch sends), `timestamp_lookup` (ListOffsets by time).
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

from broker.log.append_rules import (
    LogAppendInfo,
    check_replica_offsets,
    derived_rules,
    require_keys,
    roll_reason,
)
from broker.log.append_rules import assign_offsets as assign_offsets_of
from broker.log.flush_rules import (
    MAX_FLUSHES_IN_FLIGHT,
    plan_flush,
    recovery_point_after,
    still_valid,
)
from broker.log.flusher import FlushWork, SegmentFlusher
from broker.log.leader_epoch_cache import LeaderEpochCache, checkpoint_file
from broker.log.leader_epochs import EpochEndOffset
from broker.log.log_changes import LogChanges
from broker.log.log_loader import load_segments, make_new_directory, open_segment
from broker.log.log_read import read_slice
from broker.log.log_validator import validate_produced
from broker.log.retention import retention_steps
from broker.log.segment import FileSlice, LogSegment
from broker.log.segment_files import SegmentFileCache
from broker.log.producer_snapshot import (
    delete_snapshots_from,
    prune_snapshots,
    snapshot_offsets,
    write_snapshot,
)
from broker.log.txn_index import AbortedTxn
from broker.log.writeback import NO_WRITEBACK
from broker.log.timestamp_lookup import (
    TimestampAndOffset,
    offset_for_timestamp,
)
from common.topic_partition import TopicPartition
from common.errors import (
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from common.record_batch import (
    NO_TIMESTAMP,
    RecordBatchHeader,
    read_batches,
)
from common.log_config import LogConfig

log = logging.getLogger(__name__)

# A log made without a broker's cache (tools, tests) keeps this many segment files open.
MAX_OPEN_FILES_OF_ONE_LOG: Final = 64


@dataclass(frozen=True, slots=True)
class PendingFlush:
    """A roll's flush on the flusher's thread: the recovery point moves to `target` when it
    returns; `segments` (with the sizes it covers) are then known to be on disk."""

    target: int
    segments: tuple[tuple[LogSegment, int], ...]
    future: Future[None]
    directory: bool  # it fsyncs the log's directory after the segments


class PartitionLog:
    """Segments of one partition plus its offsets: log start, log end, high watermark and
    recovery point."""

    def __init__(self, directory: Path, config: LogConfig, *, now_ms: int,
                 recovery_point: int = 0, log_start_offset: int = 0, high_watermark: int = 0,
                 had_clean_shutdown: bool = False, new: bool = False,
                 files: SegmentFileCache | None = None, cleaned_below: int = 0,
                 flusher: SegmentFlusher | None = None) -> None:
        """Open (creating if needed) the partition directory `directory` (named `topic-N`).

        `new`: the log is being created (a partition new to this broker). When its directory did
        not exist, there is nothing to read or recover in it, and the directory scans and the
        checkpoint read are skipped (a 10,000-partition topic creates 10,000 logs per broker).
        `files`: the broker's bounded cache of open segment files (LogManager's; None: one for
        this log alone, holding at most MAX_OPEN_FILES_OF_ONE_LOG). `cleaned_below`: the log's
        cleaner checkpoint (0: never cleaned); below it recovery allows the cleaner's gaps.
        `flusher`: the broker's background flusher, which fsyncs a rolled segment off the event
        loop (None: a roll flushes on the caller's thread, for tools and tests)."""
        self.directory = directory
        self._flusher = flusher
        # Roll flushes in flight on the flusher, oldest first (at most MAX_FLUSHES_IN_FLIGHT; a
        # list, not a deque: 56 bytes per log, not 760, at 100,000 logs per broker).
        self._flushes: list[PendingFlush] = []
        # A background flush that failed, raised to the next append (then retried by the next
        # flush: the recovery point did not move).
        self._flush_error: KafkaStorageError | None = None
        self.files = SegmentFileCache(MAX_OPEN_FILES_OF_ONE_LOG) if files is None else files
        # Told where the recovery point, high watermark or log start moves (the log manager's,
        # set when it registers the log; None: a log of its own, for tools and tests).
        self.changes: LogChanges | None = None
        self.topic_partition = TopicPartition.from_dir_name(directory.name)
        self.config = config
        self._name = f"[Log partition={self.topic_partition}, dir={directory.parent}] "
        fresh = new and make_new_directory(directory)
        if not fresh:
            directory.mkdir(parents=True, exist_ok=True)
        # This log made its directory: it holds only what this log wrote since (no producer
        # snapshot or batch of an earlier life to read back).
        self.created_directory = fresh
        self.leader_epoch_cache = LeaderEpochCache(checkpoint_file(directory), [] if fresh else None,
                                                   name=self._name)
        loaded = load_segments(
            directory, config, now_ms=now_ms, recovery_point=recovery_point,
            log_start_offset=log_start_offset, had_clean_shutdown=had_clean_shutdown,
            name=self._name, fresh=fresh, files=self.files, cleaned_below=cleaned_below,
            epoch_for=self.leader_epoch_cache.epoch_for if self.leader_epoch_cache.entries
            else None)
        self._segments: list[LogSegment] = loaded.segments
        # The active segment's next offset, copied here by each change of it (append, roll,
        # truncations; read it, never set it): an attribute, not a property, because the
        # produce and fetch paths read it ~30 times per acks=all produce at RF=3
        # (bench/leader_request_cpu.py), each read a Python frame.
        self.log_end_offset = self._segments[-1].next_offset
        self._bases = [s.base_offset for s in self._segments]
        # Segments this log rolled since it opened: an append's caller compares it before and
        # after to learn whether the append rolled (an attribute, where the active_segment
        # property asked twice was two frames per partition of every produce).
        self.rolls = 0
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        # What the append rules derive from the config for the active segment (its roll age,
        # whether keys are required), for the (segment, config) pair they were derived for: a
        # produce appends to one partition after another, and these were a fifth of its Python
        # work per partition. A new segment or config object derives them again.
        self._segment_rules: tuple[object, object, int, bool] = (None, None, 0, False)
        leo = self.log_end_offset
        # The load's cuts stay in memory: loading repeats them from the same files after any
        # crash before the next write, and every later change (assign, truncation) writes the
        # whole cache. Writing them (two fsyncs each) was most of a restart: every leader of an
        # empty log holds an entry at its log end offset (0), which this cut drops each time.
        self.leader_epoch_cache.truncate_from_end(leo, write=False)
        self.log_start_offset = min(max(log_start_offset, self._bases[0]), leo)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset, write=False)
        self._recovery_point = min(recovery_point, leo)
        self.high_watermark = min(max(high_watermark, self.log_start_offset), leo)
        self._last_flush_ms = now_ms
        # Early writeback of the active segment (`writeback`): its bytes below `_writeback_from`
        # were handed to the kernel; the next hand-off is due when the segment reaches
        # `_writeback_due` bytes (one compare per append); the last one's future.
        self._writeback_pending: Future[None] | None = None
        self._reset_writeback(-1)
        # The producer state's snapshot bytes, written at a clean close (the partition sets it).
        self.snapshot_source: Callable[[], bytes] | None = None
        if not had_clean_shutdown and leo > self._recovery_point:
            self.flush()  # recovery validated [recovery point, LEO); make that durable
        # An empty log (every partition of a new topic) says so at DEBUG: 10,000 of these lines
        # cost a broker creating a topic more than the files do; LogManager logs the creation.
        level = logging.INFO if leo > 0 or loaded.recovered_bytes_truncated else logging.DEBUG
        log.log(level, "%sLoaded log with %d segments, log start offset %d, log end offset %d, "
                 "high watermark %d%s", self._name, len(self._segments), self.log_start_offset,
                 leo, self.high_watermark,
                 f", {loaded.recovered_bytes_truncated} bytes truncated by recovery"
                 if loaded.recovered_bytes_truncated else "")

    # ---- offsets -----------------------------------------------------------------------

    @property
    def recovery_point(self) -> int:
        """Every offset below it is on disk (fsynced): recovery after a crash rescans only from
        here. Reading it first applies the background flushes that have returned."""
        if self._flushes and self._flushes[0].future.done():
            self._finish_flushes()
        return self._recovery_point

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log start offset, log end offset]."""
        # Two compares, not min(max()): a leader asks once per partition of each produce, a
        # follower once per fetch answer.
        if offset < self.log_start_offset:
            offset = self.log_start_offset
        if offset > self.log_end_offset:
            offset = self.log_end_offset
        if offset != self.high_watermark:
            self.high_watermark = offset
            if self.changes is not None:  # _moved(), without its frame: most appends move the HW
                self.changes.moved(self)
        return offset

    # ---- append ------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, *, now_ms: int,
               leader_epoch: int | None = None, assign_offsets: bool = True,
               batches: list[tuple[int, RecordBatchHeader]] | None = None,
               validate: bool = True) -> LogAppendInfo:
        """Append concatenated v2 batches; a leader assigns offsets, a follower keeps them.

        Every batch is CRC-checked; nothing is written unless all are valid. As leader
        (`assign_offsets`), batches must be producer-shaped, fit `max.message.bytes`, and
        are stamped with `leader_epoch` (default: the log's latest epoch). `batches` is
        `read_batches(records)` when the caller already has it, so nothing is checked twice.
        `validate=False`: a leader's own transaction markers, which Kafka's LogValidator keeps as
        written (a control batch is never recompressed into the topic's codec).
        """
        if self._flushes and self._flushes[0].future.done():
            self._finish_flushes()
        if self._flush_error is not None:
            error, self._flush_error = self._flush_error, None
            raise KafkaStorageError(f"append to {self.topic_partition} refused: the background "
                                    f"flush of its last roll failed ({error}); the next flush "
                                    f"retries it") from error
        view = memoryview(records)
        if view.format != "B":
            view = view.cast("B")
        if batches is None:
            batches = read_batches(view)
        if not batches:
            raise InvalidRecordError(f"append to {self.topic_partition} holds no record batch")
        config = self.config
        tp = self.topic_partition
        log_append_time = NO_TIMESTAMP
        if assign_offsets and validate and not config.plain_produce:  # timestamp rules, compression.type
            view, batches, log_append_time = validate_produced(
                view, batches, config, now_ms=now_ms, topic_partition=tp)
        total = len(view)  # read_batches consumed every byte
        if total > config.segment_bytes:
            raise RecordListTooLargeError(
                f"append of {total} bytes to {tp} exceeds segment.bytes {config.segment_bytes}")
        segment = self._segments[-1]
        rules = self._segment_rules
        if rules[0] is not segment or rules[1] is not config:
            rules = self._segment_rules = (segment, config, *derived_rules(config, tp, segment))
        _, _, age_limit, compact = rules
        cache = self.leader_epoch_cache
        if assign_offsets:
            bases, max_ts, max_ts_offset, last_offset = assign_offsets_of(
                batches, segment.next_offset, max_message_bytes=config.max_message_bytes, tp=tp)
            # no epoch given: the log's current one, so that every batch's epoch is the one
            # the leader-epoch cache records for its offsets (recovery checks that)
            epoch = cache.latest_epoch if leader_epoch is None else leader_epoch
            if compact:
                require_keys(view, batches, tp)
        else:
            bases, max_ts, max_ts_offset, last_offset = check_replica_offsets(
                batches, segment.next_offset, tp=tp)
            epoch = None
        reason = roll_reason(segment, config, tp, incoming=total, max_timestamp=max_ts,
                             last_offset=last_offset, now_ms=now_ms, age_limit=age_limit)
        if reason is not None:
            # at the log end, not `first`: a replica's batch may start past it (a gap the
            # leader's cleaner made), and segments must stay contiguous for recovery
            self.roll(now_ms, segment.next_offset, reason)
            segment = self._segments[-1]
        # A new leadership's entry is in memory only until the first append of its epoch: in
        # the file before any batch of that epoch is in the segment (recovery checks each one).
        if cache.owes_write:
            cache.write_owed()
        segment.append(view, batches, bases, epoch, total)
        self.log_end_offset = segment.next_offset
        if segment.size >= self._writeback_due:
            self._start_writeback(segment)
        if epoch is None:
            # A replica keeps its batches' epochs; one new to the cache starts at its batch.
            # Tested here, without a call: a follower's batches are nearly always of the epoch
            # it holds already, and _record_epochs assigns the rare new one.
            latest = cache.latest_epoch
            for _, header in batches:
                if header.partition_leader_epoch != latest:
                    self._record_epochs(batches, bases, None)
                    break
        elif epoch != cache.latest_epoch:
            self._record_epochs(batches, bases, epoch)
        if last_offset + 1 - self._recovery_point >= config.flush_messages:
            self.flush()
        # tuple.__new__: a C call, where the NamedTuple's own __new__ is a Python frame (per partition)
        return tuple.__new__(LogAppendInfo, (bases[0], last_offset, log_append_time, max_ts, max_ts_offset,
                                             self.log_start_offset, total, len(batches)))

    def _record_epochs(self, batches: list[tuple[int, RecordBatchHeader]], bases: list[int],
                       leader_epoch: int | None) -> None:
        cache = self.leader_epoch_cache
        if leader_epoch is not None:
            if leader_epoch >= 0 and leader_epoch != cache.latest_epoch:
                cache.assign(leader_epoch, bases[0])
            return
        for (_, header), base in zip(batches, bases):
            if header.partition_leader_epoch >= 0 and \
                    header.partition_leader_epoch != cache.latest_epoch:
                cache.assign(header.partition_leader_epoch, base)

    def roll(self, now_ms: int, base_offset: int | None = None, reason: str = "requested") -> None:
        """Start a new active segment at `base_offset` (default: the log end offset)."""
        old = self._segments[-1]
        base = self.log_end_offset if base_offset is None else base_offset
        if old.size == 0 and old.base_offset == base:
            return
        old.on_become_inactive()
        segment = open_segment(self.directory, base, self.config, now_ms, create=True, files=self.files)
        self._segments.append(segment)
        self._bases.append(base)
        self.rolls += 1
        self.log_end_offset = segment.next_offset
        self._reset_writeback(-1)
        log.info("%sRolled new log segment at offset %d (%s)", self._name, base, reason)
        # As Kafka does, so recovery after a crash scans one segment; off the loop when there
        # is a flusher (Kafka's scheduleOnce("flush-log")).
        if self._flusher is None:
            self.flush(base)
        else:
            self._flush_in_background(base)
        # Room for the producer snapshot the appender writes at `base` now (replica_appends):
        # the older ones go on the removal thread (an unlink may wait for the disk's discards).
        # One queued there may yet remove a snapshot a truncation and a new roll wrote at the
        # same offset meanwhile: then the next open replays from an older one.
        if self._flusher is None:
            prune_snapshots(self.directory, base, self._name)
        else:
            self._flusher.remover.submit(partial(prune_snapshots, self.directory, base, self._name),
                                         what=f"{self._name}pruning producer snapshots below {base}")

    # ---- read --------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> FileSlice:
        """File slice of batches from the one holding `offset`, below `max_offset` (e.g. the
        high watermark for consumers); empty at the end. Offsets outside the log raise."""
        leo = self.log_end_offset
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic_partition}: log start "
                f"offset {self.log_start_offset}, log end offset {leo}")
        return read_slice(self._segments, self._bases, offset, max_bytes, log_end_offset=leo,
                          max_offset=max_offset, min_one_batch=min_one_batch)

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets by time: the first offset whose record timestamp is >= `timestamp`;
        -2 earliest, -1 latest, -3 the record with the largest timestamp."""
        return offset_for_timestamp(self._segments, timestamp, log_start_offset=self.log_start_offset,
                                    log_end_offset=self.log_end_offset, epochs=self.leader_epoch_cache)

    def batch_headers(self) -> Iterator[RecordBatchHeader]:
        """Every batch header from the log start on, with its stored offsets (for rebuilding
        per-batch state such as idempotent producers; one small read per batch)."""
        for i, segment in enumerate(self._segments):
            if i + 1 < len(self._bases) and self._bases[i + 1] <= self.log_start_offset:
                continue
            for _, header in segment.headers_from(0):
                if header.last_offset >= self.log_start_offset:
                    yield header

    def batches(self, start: int = 0) -> Iterator[tuple[LogSegment, int, RecordBatchHeader]]:
        """(segment, position, header) of every batch from `start` (at least the log start) on:
        the producer-state replay from a snapshot, which also reads the markers of control
        batches and rebuilds stale `.txnindex`. The first segment is entered by its offset index."""
        begin = max(start, self.log_start_offset)
        first = max(bisect_right(self._bases, begin) - 1, 0)
        for segment in self._segments[first:]:
            position = segment.offset_index.lookup(begin).position if segment.base_offset <= begin else 0
            for position, header in segment.headers_from(position):
                if header.last_offset >= begin:
                    yield segment, position, header

    # ---- transactions ------------------------------------------------------------------

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        """Index an aborted transaction whose ABORT marker was just appended (it is in the
        active segment: one append never spans a roll)."""
        self._segments[-1].txn_index.append(txn)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound) (Kafka's
        collectAbortedTransactions): from the segment holding `fetch_offset` on, until an
        entry's LSO shows that later segments cannot hold one that overlaps."""
        found: list[AbortedTxn] = []
        i = max(bisect_right(self._bases, fetch_offset) - 1, 0)
        for segment in self._segments[i:]:  # bounded by the segment count
            entries, complete = segment.txn_index.collect(fetch_offset, upper_bound)
            found.extend(entries)
            if complete:
                break
        return found

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        """OffsetForLeaderEpoch: the end offset of `leader_epoch` in this log."""
        return self.leader_epoch_cache.end_offset_for(leader_epoch, self.log_end_offset)

    # ---- truncation --------------------------------------------------------------------

    def truncate_to(self, offset: int, *, now_ms: int = 0) -> bool:
        """Remove every offset >= `offset` (whole batches: a batch holding it goes entirely).

        Returns False when there was nothing to remove.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate {self.topic_partition} to offset {offset}")
        leo = self.log_end_offset
        if offset >= leo:
            # Kafka's truncateTo trims the epoch cache even then: a former leader may hold the
            # entry its become-leader assigned at the log end with nothing appended after it,
            # which would contradict the new leader's epochs once this log follows it.
            self.leader_epoch_cache.truncate_from_end(leo)
            return False
        if offset < self._bases[0]:
            self.truncate_fully_and_start_at(offset, now_ms=now_ms)
            return True
        keep = bisect_right(self._bases, offset)  # segments starting after `offset` go
        active_kept = keep == len(self._segments)
        removed = self._segments[keep:]
        del self._segments[keep:], self._bases[keep:]
        self._schedule_delete(removed, now_ms, "truncation")
        try:
            removed_bytes = self._segments[-1].truncate_to(offset)
        finally:  # the log end is the active segment's, wherever a failed truncation left it
            new_leo = self.log_end_offset = self._segments[-1].next_offset
            self._reset_writeback(self._writeback_from if active_kept else -1)
        log.info("%sTruncated to offset %d (log end offset %d -> %d, %d bytes and %d segments "
                 "removed)", self._name, offset, leo, new_leo,
                 removed_bytes + sum(s.size for s in removed), len(removed))
        self.leader_epoch_cache.truncate_from_end(new_leo)
        delete_snapshots_from(self.directory, new_leo + 1)  # they describe batches now gone
        self.log_start_offset = min(self.log_start_offset, new_leo)
        self._void_flushes(new_leo)
        self._recovery_point = min(self._recovery_point, new_leo)
        self.high_watermark = min(self.high_watermark, new_leo)
        self._moved(log_start=True)  # a truncation may lower the log start too
        return True

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int = 0) -> None:
        """Delete every segment and restart the log empty at `offset`."""
        removed, self._segments, self._bases = self._segments, [], []
        self._schedule_delete(removed, now_ms, "full truncation", delay=False)
        self._segments.append(open_segment(self.directory, offset, self.config, now_ms,
                                           create=True, files=self.files))
        self._bases.append(offset)
        self.log_end_offset = self._segments[-1].next_offset
        self._reset_writeback(-1)
        self.leader_epoch_cache.clear()
        delete_snapshots_from(self.directory, 0)
        self._void_flushes(-1)  # every offset they synced is gone
        self.log_start_offset = self._recovery_point = self.high_watermark = offset
        self._moved(log_start=True)
        log.info("%sTruncated fully; log restarts empty at offset %d", self._name, offset)

    # ---- retention ---------------------------------------------------------------------

    def delete_old_segments(self, now_ms: int) -> int:
        """Apply retention (log start offset, retention.ms, retention.bytes); return the number
        of segments deleted. Never the active segment, never data above the high watermark."""
        deleted = 0
        for count, reason in retention_steps(self._segments, log_start_offset=self.log_start_offset,
                                             high_watermark=self.high_watermark, config=self.config,
                                             now_ms=now_ms):
            removed = self._segments[:count]
            del self._segments[:count], self._bases[:count]
            self._schedule_delete(removed, now_ms, reason)
            self.log_start_offset = max(self.log_start_offset, self._bases[0])
            self._moved(log_start=True)
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
            log.info("%sLog start offset is now %d after deleting %d segments (%s)",
                     self._name, self.log_start_offset, count, reason)
            deleted += count
        self.reap_deleted_segments(now_ms)
        return deleted

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up (DeleteRecords); segments below go at retention."""
        if offset <= self.log_start_offset:
            return False
        if offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self.topic_partition} to {offset}, "
                f"above the high watermark {self.high_watermark}")
        self.log_start_offset = offset
        self._moved(log_start=True)
        self.leader_epoch_cache.truncate_from_start(offset)
        log.info("%sIncremented log start offset to %d", self._name, offset)
        return True

    def _schedule_delete(self, segments: list[LogSegment], now_ms: int, reason: str,
                         *, delay: bool = True) -> None:
        # Renamed now, removed later: a slice read before may still be sent (from the renamed
        # file) until file.delete.delay.ms, as in Kafka.
        for segment in segments:
            log.info("%sDeleting segment %s (base offset %d, %d bytes, largest timestamp %d) "
                     "due to %s", self._name, segment.log_path.name, segment.base_offset,
                     segment.size, segment.max_timestamp, reason)
            segment.mark_deleted()
            deadline = now_ms + (self.config.file_delete_delay_ms if delay else 0)
            self._pending_deletes.append((deadline, segment))

    def reap_deleted_segments(self, now_ms: int) -> None:
        """Close and remove segments whose `file.delete.delay.ms` has passed: on the flusher's
        removal thread when there is one (an unlink may wait for the disk's discards, ~0.35 ms
        per MiB here), else on the caller's."""
        keep = []
        for deadline, segment in self._pending_deletes:
            if deadline > now_ms:
                keep.append((deadline, segment))
            elif self._flusher is not None:
                self._flusher.remover.remove(segment.removal(), self._name)
            else:
                segment.delete()
        self._pending_deletes = keep

    # ---- compaction --------------------------------------------------------------------

    def replace_segments(self, old: list[LogSegment], new: LogSegment, now_ms: int) -> None:
        """Put the cleaner's `new` segment where the consecutive segments `old` were (they
        were renamed `.deleted` by the cleaner and close after `file.delete.delay.ms`, as
        reads may still use them). The caller checked `holds_segments(old)`."""
        i = self._segments.index(old[0])
        self._segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]
        deadline = now_ms + self.config.file_delete_delay_ms
        self._pending_deletes.extend((deadline, segment) for segment in old)

    def holds_segments(self, segments: list[LogSegment]) -> bool:
        """Whether `segments` are still consecutive inactive segments of this log (retention
        or truncation may have removed them while the cleaner worked)."""
        try:
            i = self._segments.index(segments[0])
        except ValueError:
            return False
        return (i + len(segments) < len(self._segments)
                and self._segments[i : i + len(segments)] == segments)

    # ---- durability and lifecycle ------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets below `up_to` (default: all) and move the
        recovery point there."""
        target = self.log_end_offset if up_to is None else up_to
        plan = plan_flush(self._bases, recovery_point=self.recovery_point, target=target)
        if plan is None:
            return
        # Durable data must never outlive its epoch's entry: recovery cuts batches of an epoch
        # the checkpoint does not hold, so an owed epoch rewrite is made durable first.
        if self.leader_epoch_cache.needs_sync:
            self.leader_epoch_cache.sync()
        for segment in self._segments[plan.first : plan.stop]:
            segment.flush()
        self._recovery_point = target
        self._moved()

    # ---- early writeback of the active segment (on the flusher's writeback thread) -------

    def _reset_writeback(self, started_to: int) -> None:
        """The active segment is new or reopened (`started_to` -1) or was cut."""
        self._writeback_from, self._writeback_due = (0, NO_WRITEBACK) if self._flusher is None else \
            self._flusher.writeback.restart(self._segments[-1].size, started_to=started_to)

    def _start_writeback(self, segment: LogSegment) -> None:
        assert self._flusher is not None  # else _writeback_due is NO_WRITEBACK
        self._writeback_from, self._writeback_due, self._writeback_pending = \
            self._flusher.writeback.hand_off(segment, started_to=self._writeback_from,
                                             pending=self._writeback_pending, name=self._name)

    # ---- background flushes (a roll's, on the flusher's thread) ------------------------

    def _moved(self, *, log_start: bool = False) -> None:
        """Tell the log manager that a checkpointed offset (`log_start`: the log start) moved."""
        if self.changes is not None:
            self.changes.moved(self, log_start=log_start)

    def _flush_in_background(self, target: int) -> None:
        """Hand the fsyncs up to `target` to the flusher; the recovery point moves when they
        return (`_finish_flushes`). Everything read from this log's state is read here, on the
        loop: the thread gets pinned descriptors and paths only."""
        assert self._flusher is not None
        if len(self._flushes) >= MAX_FLUSHES_IN_FLIGHT:
            # bounded: local fsyncs; the disk is that far behind and the loop waits for it
            wait([self._flushes[0].future], return_when=FIRST_COMPLETED)
            self._finish_flushes()
        # From the last target in flight: those segments are being synced already.
        start = self._flushes[-1].target if self._flushes else self.recovery_point
        plan = plan_flush(self._bases, recovery_point=start, target=target)
        if plan is None:
            return
        segments = self._segments[plan.first : plan.stop]
        syncs = tuple(segment.prepare_sync() for segment in segments)
        cache = self.leader_epoch_cache
        # the directory by Kafka's rule (a segment new since the last flush), or for a file a
        # segment made since (a `.txnindex` at its first ABORT marker): before the recovery point
        # claims that file's entries, its directory entry is durable
        directory = plan.sync_directory or any(sync.directory_owed for sync in syncs)
        work = FlushWork(syncs, self.directory if directory else None,
                         cache.sync if cache.needs_sync else None)
        self._flushes.append(PendingFlush(
            plan.target, tuple((s, sync.size) for s, sync in zip(segments, syncs)),
            self._flusher.submit(work), work.directory is not None))

    def _finish_flushes(self) -> None:
        """Apply the background flushes that returned, oldest first: each moves the recovery
        point to its target; a failure is logged and raised to the next append, and voids the
        flushes after it (the recovery point cannot skip the range it failed to sync)."""
        while self._flushes and self._flushes[0].future.done():  # bounded: MAX_FLUSHES_IN_FLIGHT
            pending = self._flushes.pop(0)
            error = pending.future.exception()
            if error is None:
                for segment, size in pending.segments:
                    segment.mark_synced(size, directory=pending.directory)
                before = self._recovery_point
                self._recovery_point = recovery_point_after(
                    before, pending.target, log_end_offset=self.log_end_offset)
                self._moved()
                log.debug("%sFlushed up to offset %d in the background (recovery point %d -> %d)",
                          self._name, pending.target, before, self._recovery_point)
                continue
            log.error("%sBackground flush up to offset %d failed, recovery point stays at %d: %s",
                      self._name, pending.target, self._recovery_point, error)
            if self._recovery_point < pending.target:
                self._flush_error = (error if isinstance(error, KafkaStorageError)
                                     else KafkaStorageError(str(error)))
            self._flushes.clear()  # later ones cannot move the recovery point past this gap

    def _void_flushes(self, truncated_to: int) -> None:
        """The log was cut at `truncated_to`: flushes in flight that synced bytes at or past it
        no longer speak for the log (their threads finish unobserved)."""
        while self._flushes and not still_valid(self._flushes[-1].target, truncated_to=truncated_to):
            self._flushes.pop()  # bounded: MAX_FLUSHES_IN_FLIGHT

    def wait_for_flushes(self) -> None:
        """Block until the background flushes in flight return, and apply them (a clean close;
        tests). Bounded: local fsyncs."""
        if self._flushes:  # most logs have none: a clean stop closes 100,000 of them
            wait([pending.future for pending in self._flushes])
            self._finish_flushes()

    @property
    def flush_due_ms(self) -> int:
        """When `flush.ms` next asks for a flush (wall ms; past Long.MAX with its default)."""
        return self._last_flush_ms + self.config.flush_ms

    def flush_if_due(self, now_ms: int) -> bool:
        """Apply `flush.ms`: flush when that long has passed since the last flush."""
        if now_ms - self._last_flush_ms < self.config.flush_ms:
            return False
        self._last_flush_ms = now_ms
        if self.log_end_offset <= self.recovery_point:
            return False
        self.flush()
        return True

    @property
    def owes_close(self) -> bool:
        """Whether a clean close has anything to write or sync: false for an empty log (one
        empty segment, synced, no index entry, no flush in flight, no deletion pending, no
        producer snapshot to write), which `release` then lets go of instead. At 100,000 logs,
        closing each one (its index flushes, the existence checks of their files) was most of a
        clean stop."""
        return (bool(self._flushes or self._pending_deletes) or len(self._segments) != 1
                or not self._segments[0].owes_nothing
                or (self.snapshot_source is not None and self.log_end_offset > 0))

    def release(self) -> None:
        """Close a log that does not `owes_close`: its files are let go of, nothing is written."""
        for segment in self._segments:
            segment.release()

    def close(self) -> None:
        """Flush everything and close all files (clean shutdown), with a producer snapshot at the
        log end so the next open replays nothing (none for an empty log: nothing to replay)."""
        self.wait_for_flushes()
        self.flush()
        leo = self.log_end_offset
        if self.snapshot_source is not None and leo > 0 and leo not in snapshot_offsets(self.directory):
            try:
                write_snapshot(self.directory, leo, self.snapshot_source(), durable=False)
            except KafkaStorageError as e:  # the next open replays from an older one
                log.warning("%sNo producer snapshot at close: %s", self._name, e)
            prune_snapshots(self.directory, leo, self._name)
        for segment in self._segments:
            segment.flush()
            segment.close()
        for _, segment in self._pending_deletes:
            segment.delete()
        self._pending_deletes.clear()
