"""Which compacted log to clean next, and the cleaner workers (Kafka's LogCleanerManager and
CleanerThread): dirty ratios, the cleaner-offset-checkpoint, metrics, one log line per
cleaned partition.

Each worker picks the filthiest log whose `cleanup.policy` holds compact - read on every
pass, so changing the policy of a live topic takes effect at the next pass - maps and
rewrites it in a cleaner process (`Cleaner.prepare` over a snapshot of the segment files:
per-record Python work there does not take the broker's GIL), then swaps the result in on
the event loop (`Cleaner.commit`), which owns every log mutation.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.pool import Pool
from typing import Any, Protocol

from broker.log.cleaner_checkpoint import read_cleaner_offsets, write_cleaner_offsets
from broker.log.cleaner_worker import Throttle, init_cleaner_process, prepare_in_worker
from broker.log.compaction import OffsetMap
from broker.log.log_cleaner import (
    Cleaner,
    CleaningAbortedError,
    PreparedClean,
    abort,
    snapshot_log,
)
from broker.log.log_manager import LogManager
from broker.log.partition_log import PartitionLog
from broker.log.segment import LogSegment
from broker.timers import TimerService
from common.topic_partition import TopicPartition
from common.config_schema import Config
from common.prometheus import Metric, counter, gauge, unlabelled
from common.units import MIB

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's `log.cleaner.*` settings."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * MIB
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = float("inf")
    backoff_ms: int = 15_000

    @classmethod
    def from_config(cls, config: Config) -> CleanerConfig:
        return cls(enable=bool(config["log.cleaner.enable"]),
                   threads=config.get_int("log.cleaner.threads"),
                   dedupe_buffer_size=config.get_int("log.cleaner.dedupe.buffer.size"),
                   io_buffer_load_factor=config.get_double("log.cleaner.io.buffer.load.factor"),
                   io_max_bytes_per_second=config.get_double("log.cleaner.io.max.bytes.per.second"),
                   backoff_ms=config.get_int("log.cleaner.backoff.ms"))


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A compacted log's dirty section and why it is (or is not) due (Kafka's LogToClean)."""

    tp: TopicPartition
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool  # max.compaction.lag.ms passed for a dirty record
    tombstones_due: bool  # a delete horizon passed in the clean section

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(slots=True)
class CleanerStats:
    """What /metrics shows (Kafka's LogCleaner metrics, in our names)."""

    runs: int = 0
    bytes_cleaned: int = 0  # bytes of log read by cleanings
    bytes_written: int = 0
    last_clean_time_ms: float = 0.0
    max_clean_time_ms: float = 0.0
    aborted: int = 0
    failed: int = 0
    dirty_ratio: dict[TopicPartition, float] = field(default_factory=dict)
    uncleanable: set[TopicPartition] = field(default_factory=set)


class _HostsPartitions(Protocol):
    """The broker's partitions (ReplicaManager), as the cleaner asks about them."""

    def get_partition(self, tp: TopicPartition) -> Any: ...


def last_stable_offset_of(partitions: _HostsPartitions, tp: TopicPartition) -> int:
    """The partition's last stable offset (its producer state's, with its high watermark),
    for `LogCleanerManager(last_stable_offset=...)`; 0 (nothing cleanable) while the broker
    has not opened the partition, whose open transactions are not known yet."""
    partition = partitions.get_partition(tp)
    return 0 if partition is None else int(partition.last_stable_offset)


def cut_offsets(plog: PartitionLog, checkpoint: int | None, now_ms: int,
                delete_horizon: int | None, last_stable_offset: int | None = None) -> LogToClean:
    """Kafka's cutOffsetsForLog + LogToClean: where the dirty section starts and ends.
    The first uncleanable offset is the least of the active segment's base, the high
    watermark, the last stable offset (`last_stable_offset`, None: no transaction open; a
    transaction's data is never cleaned before its fate is known) and the first segment
    within min.compaction.lag.ms."""
    start = plog.log_start_offset
    first_dirty = checkpoint if checkpoint is not None else start
    if not start <= first_dirty <= plog.log_end_offset:
        first_dirty = start  # truncated or moved: clean from the start again
    config = plog.config
    segments = plog.segments[:-1]
    uncleanable = min(plog.active_segment.base_offset, plog.high_watermark)
    if last_stable_offset is not None:
        uncleanable = min(uncleanable, last_stable_offset)
    if config.min_compaction_lag_ms > 0:
        lag_horizon = now_ms - config.min_compaction_lag_ms
        young = next((s.base_offset for s in segments if s.largest_timestamp > lag_horizon), None)
        if young is not None:
            uncleanable = min(uncleanable, young)
    uncleanable = max(uncleanable, first_dirty)
    clean_bytes = dirty_bytes = 0
    needs_now = False
    for segment in segments:
        if segment.next_offset <= first_dirty:
            clean_bytes += segment.size
        elif segment.base_offset < uncleanable and first_dirty < uncleanable:
            dirty_bytes += segment.size
            first_ts = segment.first_batch_timestamp
            if (first_ts is not None and 0 <= first_ts
                    and now_ms - first_ts > config.max_compaction_lag_ms):
                needs_now = True
    return LogToClean(plog.topic_partition, first_dirty, uncleanable, clean_bytes, dirty_bytes,
                      needs_now, delete_horizon is not None and delete_horizon <= now_ms)


class LogCleanerManager:
    """Picks logs to clean, runs the workers, keeps checkpoints and metrics."""

    def __init__(self, log_manager: LogManager, config: CleanerConfig, *,
                 now_ms: Callable[[], int], timers: TimerService | None = None,
                 fail_point: Callable[[str], None] | None = None,
                 last_stable_offset: Callable[[TopicPartition], int | None] | None = None,
                 ) -> None:
        self.log_manager = log_manager
        # a partition's last stable offset (its producer state's, kept beside the log by
        # the partition): None, or no callable, while no transaction is open in it
        self._last_stable_offset = last_stable_offset or (lambda tp: None)
        self.config = config
        self._now_ms = now_ms
        # The broker's timer service holds the backoff deadlines (its own when built alone).
        self.timers = timers if timers is not None else TimerService(name="log cleaner")
        self._fail_point = fail_point
        self.stats = CleanerStats()
        self._checkpoints: dict[TopicPartition, int] = {}
        for directory in log_manager.log_dirs:
            self._checkpoints.update(read_cleaner_offsets(directory))
        self._delete_horizons: dict[TopicPartition, int] = {}
        self._in_progress: set[TopicPartition] = set()
        self._cleaners: list[Cleaner] = []
        self._pool: Pool | None = None
        self._backoffs: dict[str, asyncio.Future[None]] = {}  # idle workers by name, woken by `reconfigure`

    def new_cleaner(self) -> Cleaner:
        """A worker's cleaner, its map sized from the dedupe buffer shared by the workers."""
        config = self.config
        throttle = None
        if config.io_max_bytes_per_second < float("inf"):
            throttle = Throttle(config.io_max_bytes_per_second, monotonic=time.monotonic,
                                sleep=time.sleep)
        offset_map = OffsetMap.for_buffer(config.dedupe_buffer_size,
                                          threads=max(1, config.threads),
                                          load_factor=config.io_buffer_load_factor)
        cleaner = Cleaner(offset_map, throttle=throttle, fail_point=self._fail_point)
        self._cleaners.append(cleaner)
        return cleaner

    def stop(self) -> None:
        """Make every running cleaning give up (the worker tasks are cancelled apart):
        cleaner processes are terminated; their `.cleaned` files go at the next load."""
        for cleaner in self._cleaners:
            cleaner.request_stop()
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def _worker_pool(self) -> Pool:
        if self._pool is None:
            # spawn, not fork: the broker has threads and an event loop
            self._pool = multiprocessing.get_context("spawn").Pool(
                max(1, self.config.threads), initializer=init_cleaner_process)
        return self._pool

    async def _prepare_in_pool(self, cleaner: Cleaner, ltc: LogToClean,
                               snap: Any, now_ms: int) -> PreparedClean | None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[PreparedClean | None] = loop.create_future()

        def settle(result: Any, *, failed: bool) -> None:
            if done.done():
                return
            if failed:
                done.set_exception(result)
            else:
                done.set_result(result)

        self._worker_pool().apply_async(
            partial(prepare_in_worker, snap, first_dirty=ltc.first_dirty,
                    first_uncleanable=ltc.first_uncleanable, now_ms=now_ms,
                    tombstones_due=ltc.tombstones_due, map_capacity=cleaner.offset_map.capacity,
                    max_bytes_per_second=self.config.io_max_bytes_per_second),
            callback=lambda r: loop.call_soon_threadsafe(partial(settle, r, failed=False)),
            error_callback=lambda e: loop.call_soon_threadsafe(partial(settle, e, failed=True)))
        return await done

    # ---- choosing ----------------------------------------------------------------------

    def compacted_logs(self) -> list[tuple[TopicPartition, PartitionLog]]:
        """Every log whose cleanup.policy holds compact, in partition order. The walk is over
        topics (the log manager's index by topic, which a deleted log leaves), and a topic's
        logs only when compacted: a topic's config is its logs' (`update_topic_config` sets it
        on each, so a policy altered at runtime counts at the next pass). Sorting every log of
        the broker to keep the compacted few was a pass of 100,000 logs per backoff."""
        found = []
        for topic, logs in sorted(self.log_manager.logs_by_topic().items()):  # bounded by the topics
            first = next(iter(logs.values()), None)
            if first is not None and first.config.compact:
                found.extend(sorted(((tp, plog) for tp, plog in logs.items() if plog.config.compact),
                                    key=_partition_of))
        return found

    def dirty_logs(self, now_ms: int) -> list[LogToClean]:
        """Every compacted log with its dirty section (updates the dirty-ratio gauges)."""
        result = []
        ratios: dict[TopicPartition, float] = {}
        for tp, plog in self.compacted_logs():
            ltc = cut_offsets(plog, self._checkpoints.get(tp), now_ms,
                              self._delete_horizons.get(tp), self._last_stable_offset(tp))
            ratios[tp] = ltc.dirty_ratio
            result.append(ltc)
        self.stats.dirty_ratio = ratios
        return result

    def grab_filthiest(self, now_ms: int) -> LogToClean | None:
        """Kafka's grabFilthiestCompactedLog: the due log with the highest dirty ratio,
        marked in progress (release it with `done`)."""
        due = []
        for ltc in self.dirty_logs(now_ms):
            if ltc.tp in self._in_progress or ltc.tp in self.stats.uncleanable:
                continue
            ratio = self.log_manager.logs[ltc.tp].config.min_cleanable_dirty_ratio
            if ((ltc.needs_compaction_now and ltc.dirty_bytes > 0)
                    or (ltc.dirty_bytes > 0 and ltc.dirty_ratio > ratio) or ltc.tombstones_due):
                due.append(ltc)
        if not due:
            return None
        chosen = max(due, key=lambda ltc: (ltc.needs_compaction_now, ltc.dirty_ratio))
        self._in_progress.add(chosen.tp)
        return chosen

    def done(self, tp: TopicPartition) -> None:
        self._in_progress.discard(tp)

    # ---- cleaning ----------------------------------------------------------------------

    def clean_once(self, cleaner: Cleaner, now_ms: int) -> TopicPartition | None:
        """One synchronous pass on the caller's thread (tests, benchmarks)."""
        ltc = self.grab_filthiest(now_ms)
        if ltc is None:
            return None
        try:
            plog = self.log_manager.logs[ltc.tp]
            started = time.monotonic()
            snap, segments = snapshot_log(plog)
            prepared = cleaner.prepare(snap, first_dirty=ltc.first_dirty,
                                       first_uncleanable=ltc.first_uncleanable, now_ms=now_ms,
                                       tombstones_due=ltc.tombstones_due)
            self._finish(cleaner, plog, segments, ltc, prepared, now_ms, started)
        finally:
            self.done(ltc.tp)
        return ltc.tp

    async def run_worker(self, name: str, *, processes: bool = True) -> None:
        """A cleaner thread's loop, until cancelled: prepare in a cleaner process (or, with
        `processes` False, on a thread), commit here."""
        cleaner = self.new_cleaner()
        while True:  # until cancelled
            ltc = self.grab_filthiest(self._now_ms())
            if ltc is None:
                await self._pause(name)
                continue
            try:
                plog = self.log_manager.logs.get(ltc.tp)
                if plog is None:
                    continue
                started = time.monotonic()
                now = self._now_ms()
                snap, segments = snapshot_log(plog)
                if processes:
                    prepared = await self._prepare_in_pool(cleaner, ltc, snap, now)
                else:
                    prepared = await asyncio.to_thread(
                        cleaner.prepare, snap, first_dirty=ltc.first_dirty,
                        first_uncleanable=ltc.first_uncleanable, now_ms=now,
                        tombstones_due=ltc.tombstones_due)
                if prepared is None or self.log_manager.logs.get(ltc.tp) is not plog:
                    if prepared is not None:
                        abort(prepared)
                    await self._pause(name)  # nothing to do: not again at once
                    continue
                self._finish(cleaner, plog, segments, ltc, prepared, self._now_ms(), started)
            except CleaningAbortedError as e:
                self.stats.aborted += 1
                log.info("[%s] Cleaning of %s aborted: %s", name, ltc.tp, e)
            except Exception:
                self.stats.failed += 1
                self.stats.uncleanable.add(ltc.tp)
                log.exception("[%s] Cleaning of %s failed; the partition is marked "
                              "uncleanable until restart", name, ltc.tp)
            finally:
                self.done(ltc.tp)

    def reconfigure(self, config: CleanerConfig) -> None:
        """A dynamic change (log.cleaner.backoff.ms): idle workers wake and go on with it at
        once, as Kafka restarts its cleaner threads on one."""
        self.config = config
        for backoff in self._backoffs.values():
            _settle(backoff)

    async def _pause(self, name: str) -> None:
        """The backoff between passes (log.cleaner.backoff.ms), cut short by a reconfiguration.
        Its deadline is a timer of the broker's timer service: a worker is a task on the event
        loop (only its cleaning runs in a process or thread), so it can await one."""
        backoff: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = ("log-cleaner-backoff", name)
        self._backoffs[name] = backoff
        self.timers.schedule_in(key, self.config.backoff_ms, lambda _now_ms: _settle(backoff))
        try:
            await backoff
        finally:
            self._backoffs.pop(name, None)
            self.timers.cancel(key)

    def _finish(self, cleaner: Cleaner, plog: PartitionLog, segments: tuple[LogSegment, ...],
                ltc: LogToClean, prepared: PreparedClean | None, now_ms: int,
                started: float) -> None:
        if prepared is None:
            return
        try:
            cleaner.commit(plog, segments, prepared, now_ms)
        except CleaningAbortedError as e:
            self.stats.aborted += 1
            log.info("Cleaning of %s aborted: %s", ltc.tp, e)
            return
        tp = ltc.tp
        self._checkpoints[tp] = prepared.end_offset
        if prepared.earliest_delete_horizon is None:
            self._delete_horizons.pop(tp, None)
        else:
            self._delete_horizons[tp] = prepared.earliest_delete_horizon
        self.write_checkpoints()
        stats = self.stats
        stats.dirty_ratio[tp] = cut_offsets(plog, prepared.end_offset, now_ms, None).dirty_ratio
        elapsed_ms = (time.monotonic() - started) * 1000
        stats.runs += 1
        stats.bytes_cleaned += prepared.bytes_read
        written = sum(g.bytes_after for g in prepared.groups)
        stats.bytes_written += written
        stats.last_clean_time_ms = elapsed_ms
        stats.max_clean_time_ms = max(stats.max_clean_time_ms, elapsed_ms)
        before = prepared.bytes_read
        mb_per_s = before / MIB / max(elapsed_ms / 1000, 1e-9)
        log.info("Cleaned log %s (dirty section = [%d, %d)): %d segments, %d -> %d bytes "
                 "(%.1f%% size reduction), %d -> %d records, in %.1f ms (%.1f MB/s); "
                 "cleaner checkpoint %d", tp, prepared.first_dirty, prepared.end_offset,
                 sum(g.count for g in prepared.groups), before, written,
                 100.0 * (before - written) / before if before else 0.0,
                 prepared.records_read, prepared.records_kept, elapsed_ms, mb_per_s,
                 prepared.end_offset)

    def write_checkpoints(self) -> None:
        """Write each log directory's cleaner-offset-checkpoint (hosted partitions only)."""
        manager = self.log_manager
        hosted = {tp: off for tp, off in self._checkpoints.items() if tp in manager.logs}
        self._checkpoints = hosted
        for directory in manager.log_dirs:
            write_cleaner_offsets(directory, {tp: off for tp, off in hosted.items()
                                              if manager.log_dir_of(tp) == directory})

    def first_dirty_offset(self, tp: TopicPartition) -> int | None:
        return self._checkpoints.get(tp)


FAIL_POINT_ENV = "TIDELOG_CLEANER_FAIL_POINT"


def kill_at_fail_point_from_env() -> Callable[[str], None] | None:
    """For crash tests: `TIDELOG_CLEANER_FAIL_POINT=<step>` SIGKILLs this process when the
    cleaner reaches that step of a swap (see `cleaner_swap.FAIL_POINTS`)."""
    wanted = os.environ.get(FAIL_POINT_ENV)
    if not wanted:
        return None

    def fail(step: str) -> None:
        if step == wanted:
            log.warning("Killing the broker at cleaner fail point %s (%s)", step, FAIL_POINT_ENV)
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)

    return fail


def cleaner_families(stats: CleanerStats, prefix: str) -> list[Metric]:
    """The cleaners' metrics (part of the broker's /metrics)."""
    p = prefix
    return [
        counter(f"{p}log_cleaner_runs_total", "Logs cleaned.", unlabelled(stats.runs)),
        counter(f"{p}log_cleaner_bytes_cleaned_total", "Bytes of log read by cleanings.",
                unlabelled(stats.bytes_cleaned)),
        counter(f"{p}log_cleaner_bytes_written_total", "Bytes of cleaned segments written.",
                unlabelled(stats.bytes_written)),
        gauge(f"{p}log_cleaner_max_clean_time_ms", "Longest cleaning of one log.", unlabelled(stats.max_clean_time_ms)),
        gauge(f"{p}log_cleaner_uncleanable_partitions", "Partitions whose cleaning failed (skipped until restart).",
              unlabelled(len(stats.uncleanable))),
        gauge(f"{p}log_cleaner_dirty_ratio", "Dirty share of each compacted log.",
              [({"topic": tp.topic, "partition": tp.partition}, ratio)
               for tp, ratio in sorted(stats.dirty_ratio.items())]),
    ]


def _partition_of(item: tuple[TopicPartition, PartitionLog]) -> int:
    return item[0].partition


def _settle(backoff: asyncio.Future[None]) -> None:
    if not backoff.done():
        backoff.set_result(None)
