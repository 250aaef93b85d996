"""All partition logs of a broker across its `log.dirs`, and the per-directory files.

Each log directory holds, beside the `topic-N` partition directories, Kafka's files:
`recovery-point-offset-checkpoint`, `replication-offset-checkpoint` (high watermarks),
`log-start-offset-checkpoint`, the `.kafka_cleanshutdown` marker written on a clean stop,
and a `.lock` that keeps a second process out.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import partial
from pathlib import Path
from typing import Final, Generic, TypeVar

from broker.log.checkpoint_file import (
    CheckpointFile,
    CorruptCheckpointError,
    fsync_directory,
)
from broker.log.flusher import FlushWork, SegmentFlusher
from broker.log.log_changes import LogChanges
from broker.log.offset_checkpoints import OffsetCheckpoints
from broker.log.partition_log import PartitionLog
from broker.log.segment_files import SegmentFileCache
from common.topic_partition import TopicPartition
from common.config import LOG_OPEN_FILES_MAX_DEFAULT
from common.errors import KafkaStorageError
from common.file_limits import (
    current_open_file_limit,
    open_files_warning,
    segment_files_allowed,
)
from common.log_config import LogConfig

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
# per partition, the offset below which the cleaner has rewritten its log (broker/log/cleaner_checkpoint.py)
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
DELETE_DIR_SUFFIX = "-delete"
_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT)
# Threads of the one pool that creates logs (a topic of thousands of partitions), writes new
# leaders' epoch checkpoints and closes logs on shutdown: file creation and fsync release the
# GIL, so a broker with thousands of partitions does these in a fraction of the serial time
# (Kafka closes logs on a thread pool too). One long-lived pool: a pool per 64-partition slice
# of a metadata change started and joined ~2,500 threads for a 10,000-partition topic.
IO_THREADS: Final = 8
# Jobs (partitions) from which a batch goes to the I/O pool (log creation, new leaderships,
# owed leader-epoch fsyncs); fewer stay on the caller's thread.
PARALLEL_MIN: Final = 16
# How long a caller that must see the offset checkpoints on disk waits for their writer (local
# files, whole in well under a second at 100,000 partitions): a close, before it gives up on the
# clean-shutdown marker; a follower whose log start moved, before it goes on fetching.
CHECKPOINT_WAIT_S: Final = 60
# Moved logs a checkpoint pass running on an event loop notes per turn of the loop (each one's
# owed leader-epoch sync checked, its offsets compared: ~2 us a log, so ~4 ms a turn); the
# next turn comes after the loop has served what arrived meanwhile. A pass over the 100,000
# logs a broker moves when it takes over a third of 100,000 leaderships held the loop 200-300 ms
# in one go.
CHECKPOINT_SLICE_LOGS: Final = 2_000
# Lines of logs new to the offset checkpoint files (or of their topics) a pass sorts into file
# order per turn of the loop before its writes (~0.2-0.4 us a line: a few ms a turn). The first
# pass after a create or a start sorted 100,000 at once, in the turn that wrote the files.
CHECKPOINT_SORT_LINES: Final = 20_000
# Later than any wall clock in ms: "no log is ever due" (flush.ms at its Long.MAX default).
NEVER_MS: Final = 2**63 - 1

T = TypeVar("T")
R = TypeVar("R")


def offset_checkpoint(path: Path) -> CheckpointFile[tuple[TopicPartition, int]]:
    """A per-directory checkpoint of `topic partition offset` lines."""
    return CheckpointFile(
        path,
        lambda e: (e[0].topic, e[0].partition, e[1]),
        lambda f: (TopicPartition(f[0], int(f[1])), int(f[2])) if len(f) == 3 else _bad(f),
    )


def _partition_order(tp: TopicPartition) -> tuple[str, int]:
    """TopicPartition's order as a plain tuple (compared in C, not by the dataclass's __lt__)."""
    return tp.topic, tp.partition


def _bad(fields: list[str]) -> tuple[TopicPartition, int]:
    raise ValueError(f"expected 3 fields, got {len(fields)}")


def _entries_synced(directory: Path, synced: Future[None]) -> None:
    """On the flusher's thread: say when new logs' entries in `directory` could not be synced."""
    error = synced.exception()
    if error is not None:
        log.error("%s; logs created in %s since its last fsync may be lost to a power loss until "
                  "the next offset-checkpoint write syncs it", error, directory)


def _copy_outcome(future: Future[None], *, to: Future[None]) -> None:
    """`future`'s outcome onto `to` (a checkpoint pass's, from its writes')."""
    error = future.exception()
    if error is not None:
        to.set_exception(error)
    else:
        to.set_result(None)


def epoch_sync_owed(partition_log: PartitionLog) -> bool:
    """Whether the log's leader-epoch checkpoint owes an fsync before a recovery-point
    checkpoint: rewritten without one, and the log holds data in its latest epoch. A new
    leadership of a log with no data in that epoch (every leader of a new topic: a third of a
    100,000-partition creation per broker) owes none yet. Nothing on disk depends on its entry:
    data becomes durable only through the log's flush, which syncs the checkpoint first, and an
    entry lost with no data after it is one nothing reads (`broker.log.leader_epoch_cache`)."""
    cache = partition_log.leader_epoch_cache
    return cache.needs_sync and partition_log.log_end_offset > cache.latest_start_offset


class Outcome(Generic[R]):
    """One item's call on the I/O pool (`LogManager.run_parallel`): its value, or its error."""

    __slots__ = ("value", "error")

    def __init__(self) -> None:
        self.value: R | None = None
        self.error: BaseException | None = None

    def result(self) -> R:
        """The value; raises the call's error."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # set: the call returned


class LogManager:
    """Opens, creates, checkpoints, cleans and closes every partition log of a broker."""

    def __init__(self, log_dirs: Sequence[str | Path], default_config: LogConfig, *,
                 now_ms: int, topic_configs: Mapping[str, LogConfig] | None = None,
                 open_files_max: int = LOG_OPEN_FILES_MAX_DEFAULT,
                 open_file_limit: int | None = None) -> None:
        """`open_files_max` (log.open.files.max) bounds the segment files kept open, and so
        does half of `open_file_limit` (default: this process's RLIMIT_NOFILE)."""
        self.log_dirs = [Path(d) for d in log_dirs]
        self._open_files_max = open_files_max
        self._open_file_limit = current_open_file_limit() if open_file_limit is None else open_file_limit
        # One bounded cache of segment descriptors shared by every log of the broker: the
        # partition count is limited by memory and disk, not by the open-file limit.
        self.files = SegmentFileCache(segment_files_allowed(configured=open_files_max,
                                                            limit=self._open_file_limit))
        self._warned_files = False
        # fsyncs each rolled segment off the event loop (Kafka's "flush-log" task); its thread
        # starts at the first roll. Its second thread starts writeback of each MiB appended.
        self.flusher = SegmentFlusher()
        if not self.flusher.writeback.available:
            log.info("No sync_file_range on this platform: segments are written back on the "
                     "kernel's own schedule (a burst can stall appends behind it)")
        log.info("Keeping at most %d segment files open (log.open.files.max %d, open-file limit %d)",
                 self.files.max_open, open_files_max, self._open_file_limit)
        self.default_config = default_config
        self._topic_configs = dict(topic_configs or {})
        self.logs: dict[TopicPartition, PartitionLog] = {}
        # The same logs by topic: a topic's config change touches its own logs, not a scan of
        # every log (per topic of a 1,000-topic creation, that scan was quadratic).
        self._by_topic: dict[str, dict[TopicPartition, PartitionLog]] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        # No log's flush.ms is due before this (wall ms): `flush_due` skips its scan of every log
        # until then (with Kafka's default flush.ms, never: a scan a second of 100,000 logs was
        # an idle broker's largest cost).
        self._flush_check_ms = 0
        self._count: dict[Path, int] = dict.fromkeys(self.log_dirs, 0)  # logs per dir, for placement
        self._locks: list[int] = []
        self._pool: ThreadPoolExecutor | None = None  # started at the first parallel job
        # The logs report where their checkpointed offsets move (`checkpoint` writes only the
        # files whose entries moved; fetchers read `log_start_moves`).
        self.changes = LogChanges()
        self._offset_checkpoints = OffsetCheckpoints(self.log_dirs, _CHECKPOINTS)
        # The checkpoint pass running across turns of the event loop, if one is: its moved logs
        # (noted up to `_pass_next`) and the future its callers hold (`checkpoint`).
        self._pass_logs: list[PartitionLog] = []
        self._pass_next = 0
        self._pass_done: Future[None] | None = None
        # By dir, its latest fsync for entries of new logs, on the flusher's thread (`_sync_new_entries`).
        self._entry_syncs: dict[Path, Future[None]] = {}
        try:
            for directory in self.log_dirs:
                self._load_dir(directory, now_ms)
            self._warn_if_files_short()
        except BaseException:
            # a refused start must not keep the directories it already locked
            for partition_log in self.logs.values():
                partition_log.close()
            self._stop_pool()
            self._release_locks()
            raise

    def _load_dir(self, directory: Path, now_ms: int) -> None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise KafkaStorageError(f"cannot create log directory {directory}: {e}") from e
        self._lock(directory)
        marker = directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        offsets = {name: self._read_offsets(directory / name) for name in _CHECKPOINTS}
        # Below its cleaner checkpoint a log was compacted, so it may have offset gaps whatever
        # its config is now (the metadata checkpoint may predate cleanup.policy=compact, or the
        # topic may have gone back to delete): recovery must not take them for damage.
        cleaned = self._read_offsets(directory / CLEANER_OFFSET_CHECKPOINT)
        log.info("Loading logs from %s (%s)", directory,
                 "clean shutdown" if clean else "no clean-shutdown marker: unflushed data is rescanned")
        found: list[tuple[TopicPartition, str]] = []
        # Names sorted as strings (Path's __lt__ is Python code: 100,000 logs made it count).
        for name in sorted(entry.name for entry in os.scandir(directory) if entry.is_dir()):
            if name.endswith(DELETE_DIR_SUFFIX):
                log.info("Removing partially deleted log directory %s", directory / name)
                shutil.rmtree(directory / name, ignore_errors=True)
                continue
            try:
                tp = TopicPartition.from_dir_name(name)
            except ValueError:
                log.warning("Ignoring directory %s: not a topic-partition", directory / name)
                continue
            if tp in self.logs:
                raise KafkaStorageError(
                    f"partition {tp} exists in both {self._dir_of[tp]} and {directory}")
            found.append((tp, name))

        def open_one(item: tuple[TopicPartition, str]) -> PartitionLog:
            tp, name = item
            return PartitionLog(
                directory / name, self.config_for(tp.topic), now_ms=now_ms,
                recovery_point=offsets[RECOVERY_POINT_CHECKPOINT].get(tp, 0),
                log_start_offset=offsets[LOG_START_OFFSET_CHECKPOINT].get(tp, 0),
                high_watermark=offsets[HIGH_WATERMARK_CHECKPOINT].get(tp, 0),
                had_clean_shutdown=clean, files=self.files, cleaned_below=cleaned.get(tp, 0),
                flusher=self.flusher)
        # On the I/O pool, as Kafka loads each data dir's logs on num.recovery.threads.per.data.dir
        # threads: after a crash each recovered log ends with an fsync of its rescanned tail, and
        # one thread waited for 100,000 of them in turn (33 s to the listener after a SIGKILL).
        outcomes = self.run_parallel(open_one, found)
        for (tp, _), outcome in zip(found, outcomes):  # every log opened is registered: a failure closes them
            if outcome.error is None:
                self.logs[tp] = self._by_topic.setdefault(tp.topic, {})[tp] = outcome.result()
                self._watch(self.logs[tp])
                self._dir_of[tp] = directory
                self._count[directory] += 1
        for outcome in outcomes:
            outcome.result()  # the first failure refuses the start (the constructor closes the others)
        if clean:
            marker.unlink()  # from here on, a crash must be detected as unclean
            fsync_directory(directory)

    def _lock(self, directory: Path) -> None:
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise KafkaStorageError(
                f"log directory {directory} is in use by another process") from None
        self._locks.append(fd)

    @staticmethod
    def _read_offsets(path: Path) -> dict[TopicPartition, int]:
        try:
            return dict(offset_checkpoint(path).read())
        except CorruptCheckpointError as e:
            # Falling back to 0 is safe: the loader clamps each offset to the log's range,
            # and recovery then rescans everything.
            log.error("%s; treating every offset in it as 0", e)
            return {}

    def config_for(self, topic: str) -> LogConfig:
        """The topic's LogConfig (its overrides over the broker defaults)."""
        return self._topic_configs.get(topic, self.default_config)

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        """Apply new topic settings to the topic's open logs."""
        self._topic_configs[topic] = config
        for partition_log in self._by_topic.get(topic, {}).values():  # bounded by the topic's logs
            partition_log.config = config
            # its flush.ms may have shortened: the next check comes as far forward as these logs
            # need, no further (a new topic has no logs yet; each config of a 100-topic create
            # set off a scan of every log, ~6 % of a creating broker's loop at 100,000)
            self._flush_check_ms = min(self._flush_check_ms, partition_log.flush_due_ms)

    def logs_by_topic(self) -> Mapping[str, Mapping[TopicPartition, PartitionLog]]:
        """Every log by topic (`_add` and `delete_log` keep it; read it, never change it)."""
        return self._by_topic

    def has_logs_of(self, topic: str) -> bool:
        """Whether any partition of `topic` has a log here (its per-topic index: no scan)."""
        return topic in self._by_topic

    def log_dir_of(self, tp: TopicPartition) -> Path:
        """The log directory (one of `log.dirs`) holding the partition's log."""
        return self._dir_of[tp]

    def get_log(self, tp: TopicPartition) -> PartitionLog | None:
        return self.logs.get(tp)

    def get_or_create_log(self, tp: TopicPartition, *, now_ms: int) -> PartitionLog:
        """The partition's log, created in the directory holding the fewest logs if new."""
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        directory = self._place()
        partition_log = PartitionLog(directory / tp.dir_name, self.config_for(tp.topic),
                                     now_ms=now_ms, had_clean_shutdown=True, new=True,
                                     files=self.files, flusher=self.flusher)
        self._add(tp, partition_log, directory)
        self._sync_new_entries((directory,))
        return partition_log

    def _place(self) -> Path:
        return min(self.log_dirs, key=lambda d: self._count[d])

    def _add(self, tp: TopicPartition, partition_log: PartitionLog, directory: Path, *,
             level: int = logging.INFO) -> None:
        self.logs[tp], self._dir_of[tp] = partition_log, directory
        self._by_topic.setdefault(tp.topic, {})[tp] = partition_log
        self._watch(partition_log)
        self._flush_check_ms = min(self._flush_check_ms, partition_log.flush_due_ms)
        self._count[directory] += 1
        log.log(level, "Created log for partition %s in %s", tp, directory)
        if len(self.logs) > self.files.max_open:
            self._warn_if_files_short()

    def _warn_if_files_short(self) -> None:
        """Once per process: more logs than segment files kept open (they all still serve)."""
        warning = open_files_warning(partitions=len(self.logs), configured=self._open_files_max,
                                     limit=self._open_file_limit)
        if warning is not None and not self._warned_files:
            self._warned_files = True
            log.warning("This broker %s", warning)

    def create_logs(self, tps: Iterable[TopicPartition], *, now_ms: int) -> dict[TopicPartition, Exception]:
        """Create the logs of `tps` that do not exist yet (on the I/O pool from PARALLEL_MIN of
        them, on this thread below) and make their directories durable with one fsync per log
        dir instead of one per log (a 10,000-partition topic is 10,000 directory entries, 1,000
        topics of 10 are 1,000 batches of 10). Returns the partitions that failed, with why;
        the others are created (`get_or_create_log` then finds them)."""
        new = sorted({tp for tp in tps if tp not in self.logs}, key=_partition_order)
        if not new:
            return {}
        placed: list[tuple[TopicPartition, Path]] = []
        for tp in new:  # placement is sequential: it counts what was placed before
            directory = self._place()
            self._count[directory] += 1
            placed.append((tp, directory))

        def open_one(item: tuple[TopicPartition, Path]) -> PartitionLog:
            tp, directory = item
            return PartitionLog(directory / tp.dir_name, self.config_for(tp.topic), now_ms=now_ms,
                                had_clean_shutdown=True, new=True, files=self.files,
                                flusher=self.flusher)

        opened: list[PartitionLog | BaseException] = []
        if len(placed) < PARALLEL_MIN:  # a few: the pool's hand-offs would cost more than they save
            for item in placed:
                try:
                    opened.append(open_one(item))
                except Exception as e:  # noqa: BLE001 - each failure is its own partition's, said below
                    opened.append(e)
        else:
            opened = [o.error if o.error is not None else o.result() for o in self.run_parallel(open_one, placed)]
        failed: dict[TopicPartition, Exception] = {}
        created: set[Path] = set()
        for (tp, directory), result in zip(placed, opened):
            self._count[directory] -= 1  # _add counts it again when it opened
            if isinstance(result, PartitionLog):  # one line for the batch below, each log at DEBUG
                self._add(tp, result, directory, level=logging.DEBUG)
                created.add(directory)
            elif isinstance(result, Exception):
                failed[tp] = result
            else:
                raise result
        self._sync_new_entries(sorted(created))
        log.info("Created %d logs (%s .. %s) in %s", len(new) - len(failed), new[0], new[-1],
                 ", ".join(str(d) for d in sorted(created)) or "-")
        return failed

    def _sync_new_entries(self, directories: Iterable[Path]) -> None:
        """Make the entries of logs just created in `directories` durable: an fsync of each dir
        on the flusher's thread, not here (the event loop: at 100,000 new logs a broker ran ~780
        of them, 0.2-5.6 ms each on this VM, every request waiting). That thread runs its work
        in order, so the background flush of a new log's first segment still comes after its
        directory's entry is durable; each offset-checkpoint write fsyncs the dir too, and a close
        fsyncs it before its marker. A sync queued and not started yet covers these logs as
        well: no second one is queued behind it."""
        for directory in directories:  # bounded: the log dirs
            queued = self._entry_syncs.get(directory)
            if queued is not None and not queued.running() and not queued.done():
                continue  # it starts after these entries were made: it covers them
            synced = self._entry_syncs[directory] = self.flusher.submit(FlushWork((), directory))
            synced.add_done_callback(partial(_entries_synced, directory))

    def run_parallel(self, fn: Callable[[T], R], items: Sequence[T]) -> list[Outcome[R]]:
        """`fn` on every item on the broker's I/O pool; returns once every call ended, with
        each call's outcome (its result or exception) in the order of `items`. The items go to
        the pool in at most IO_THREADS runs, not one task each: a Future per partition (its lock,
        condition and queue hand-off) cost a 128-partition slice more than its mkdirs."""
        if not items:
            return []
        outcomes: list[Outcome[R]] = [Outcome() for _ in items]

        def run(start: int, stop: int) -> None:
            for i in range(start, stop):  # bounded by the run's items
                outcome = outcomes[i]
                try:
                    outcome.value = fn(items[i])
                except BaseException as e:  # noqa: BLE001 - the caller reads each item's error
                    outcome.error = e
        wait(self._submit_runs(run, len(items)))  # bounded: each call is local file work
        return outcomes

    def _submit_runs(self, run: Callable[[int, int], None], count: int) -> list[Future[None]]:
        """`run(start, stop)` over [0, count) cut into at most IO_THREADS contiguous runs, each a
        task on the I/O pool (started at its first use); their futures."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="log-io")
        runs = min(IO_THREADS, count)
        bounds = [count * i // runs for i in range(runs + 1)]
        return [self._pool.submit(run, bounds[i], bounds[i + 1]) for i in range(runs)]

    def delete_log(self, tp: TopicPartition) -> None:
        """Remove a partition's log: rename its directory away atomically (the name is free at
        once), then delete it on the flusher's removal thread (`segment_removal`: the unlinks
        wait for the disk's discards); the shutdown waits for it."""
        partition_log = self.logs.pop(tp, None)
        if partition_log is None:
            return
        of_topic = self._by_topic[tp.topic]
        del of_topic[tp]
        if not of_topic:
            del self._by_topic[tp.topic]
        directory = self._dir_of.pop(tp)
        self._count[directory] -= 1
        partition_log.changes = None
        self._offset_checkpoints.forget(partition_log, directory)
        # Nothing of a deleted log is written any more (Kafka flushes none either): a close
        # fsynced each active segment on this thread (the event loop), only for it to be
        # removed. Its `.deleted` segments' handles go to the removal thread, the others' are
        # let go of; a flush in flight finds the renamed files gone and owes nothing for them.
        partition_log.reap_deleted_segments(now_ms=NEVER_MS)
        partition_log.release()
        doomed = directory / f"{tp.dir_name}.{os.urandom(8).hex()}{DELETE_DIR_SUFFIX}"
        os.replace(partition_log.directory, doomed)
        self.flusher.remover.remove_directory(doomed)  # reports its own failure
        log.debug("Deleted log for partition %s", tp)  # the replica manager says it, or counts it

    def _watch(self, partition_log: PartitionLog) -> None:
        """Hear the log's offset moves; its entries are new to the next checkpoint."""
        partition_log.changes = self.changes
        self.changes.moved(partition_log)

    def checkpoint(self, *, whole: bool = False) -> Future[None]:
        """Write the recovery point, high watermark and log start offset files of each dir whose
        entries moved since the last pass (whole, in Kafka's format; a pass where nothing moved
        writes nothing), after making durable the leader-epoch checkpoints that the logs that
        moved owe: a recovery point on disk must never cover offsets of an epoch whose entry a
        power loss could still take (recovery trusts the log below it, and the cache with it).
        A log that did not move keeps its entry on disk, which covers no offset of an epoch
        begun since: a new epoch starts at the log end, at or above it, and a truncation below
        it moves it (that log is synced and rewritten here).

        The syncs end here; the files are written on the checkpoint writer's thread, from the
        offsets noted after them (`OffsetCheckpoints`), so the recovery-point file still follows
        the syncs its entries owe. Returns a future that ends once every file holds what was
        noted, with the first failed write's error (logged by the writer; that file is written
        again at the next pass). A failed sync raises here, and nothing is written.

        On a running event loop, more than CHECKPOINT_SLICE_LOGS moved logs are synced and noted
        a slice per turn of the loop, and the files written after the last slice: the future
        then also ends with a failed sync's error (logged here; the logs not noted yet go back
        to the next pass). A pass asked for while one runs joins it (its logs are noted by its
        later slices, its future is that pass's). `whole`: note every moved log now, those of a
        running pass included (a close, before the clean-shutdown marker)."""
        moved = list(self.changes.take_moved())
        done = self._pass_done
        if done is not None and not whole:  # a pass running on the loop: it takes these too
            self._pass_logs.extend(moved)
            return done
        if done is not None:  # its remaining logs are noted here, and its callers hear this write
            moved = list({*moved, *self._pass_logs[self._pass_next:]})
            self._end_pass()
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # a close after the loop, a test, a bench: nothing to share the thread with
            loop = None
        if whole or loop is None or len(moved) <= CHECKPOINT_SLICE_LOGS:
            try:
                self._note_moved(moved)
            except BaseException as e:
                if done is not None:
                    done.set_exception(e)
                raise
            written = self._offset_checkpoints.write()
            if done is not None:
                written.add_done_callback(partial(_copy_outcome, to=done))
            return written
        self._pass_logs, self._pass_next = moved, 0
        done = self._pass_done = Future()
        done.set_running_or_notify_cancel()  # as the writer's: one waiter's cancel is its own
        loop.call_soon(self._checkpoint_slice, loop, done)
        return done

    def _checkpoint_slice(self, loop: asyncio.AbstractEventLoop, done: Future[None]) -> None:
        """Sync and note the running pass's next CHECKPOINT_SLICE_LOGS logs, then the next slice
        on the loop's next turn; once none is left, the new logs' lines sorted into file order
        CHECKPOINT_SORT_LINES per turn, then the pass's writes (a turn of their own: the
        snapshot of 100,000 offsets is a slice's cost again)."""
        if self._pass_done is not done:  # ended by a whole pass (a close) meanwhile
            return
        start = self._pass_next
        if start >= len(self._pass_logs):
            if not self._offset_checkpoints.sort_new_lines(CHECKPOINT_SORT_LINES):
                loop.call_soon(self._checkpoint_slice, loop, done)
                return
            self._end_pass()
            self._offset_checkpoints.write().add_done_callback(partial(_copy_outcome, to=done))
            return
        stop = self._pass_next = start + CHECKPOINT_SLICE_LOGS
        try:
            self._note_moved(self._pass_logs[start:stop])
        except BaseException as e:  # noqa: BLE001 - a storage error or not, the pass's callers hear it
            self.changes.put_back(set(self._pass_logs[stop:]))  # not noted: the next pass's
            self._end_pass()
            log.error("The offset checkpoint pass failed: %s; its logs are synced and written by the "
                      "next pass", e)
            done.set_exception(e)
            return
        loop.call_soon(self._checkpoint_slice, loop, done)

    def _end_pass(self) -> None:
        self._pass_logs, self._pass_next, self._pass_done = [], 0, None

    def _note_moved(self, moved: Iterable[PartitionLog]) -> None:
        """Sync the leader-epoch checkpoints `moved` owe, then note their offsets for the files
        (`checkpoint`); a failed sync puts them back for the next pass and raises."""
        changes = self.changes
        logs = [lg for lg in moved if lg.changes is changes]  # not deleted since they moved
        try:
            self.sync_epoch_checkpoints(logs)
        except BaseException:
            changes.put_back(set(logs))  # the next pass syncs and writes them again
            raise
        self._offset_checkpoints.note(logs, lambda lg: self._dir_of[lg.topic_partition])

    def sync_epoch_checkpoints(self, logs: Iterable[PartitionLog] | None = None) -> int:
        """fsync the leader-epoch checkpoints written without one since the last pass (new
        leaderships, truncations) that `epoch_sync_owed`, of `logs` (default: every log), on the
        I/O pool when there are many; how many. Raises the first KafkaStorageError after trying
        them all (those stay owed to the next pass)."""
        candidates = self.logs.values() if logs is None else logs
        # bounded by the logs (the attribute first: most owe nothing, and a call each was half the cost)
        owed = [lg for lg in candidates if lg.leader_epoch_cache.needs_sync and epoch_sync_owed(lg)]
        if len(owed) < PARALLEL_MIN:
            errors: list[BaseException | None] = []
            for partition_log in owed:
                try:
                    partition_log.leader_epoch_cache.sync()
                    errors.append(None)
                except KafkaStorageError as e:
                    errors.append(e)
        else:
            errors = [o.error for o in self.run_parallel(lambda lg: lg.leader_epoch_cache.sync(), owed)]
        failed = [e for e in errors if e is not None]
        if failed:
            raise failed[0]
        if owed:
            log.debug("Synced %d leader-epoch checkpoints", len(owed))
        return len(owed)

    def checkpoint_log_start_offsets(self, *tps: TopicPartition, wait: bool = True) -> Future[None]:
        """Write the log start offset file of each directory holding one of `tps` now (their
        log start moved: DeleteRecords, a follower following its leader's). Kafka waits for the
        next periodic checkpoint; records deleted on request coming back after a crash within
        that minute would surprise an operator. One write per directory however many of `tps`
        it holds, on the checkpoint writer's thread; the future ends once each file holds their
        entries, with the write's error if it failed (logged by the writer; the file stays owed
        to the next pass). `wait`: return only then, bounded by CHECKPOINT_WAIT_S (a follower:
        its next fetch reports the new start, and the leader's DeleteRecords answer counts on
        every replica's being on disk); the leader's own DeleteRecords awaits the future off
        the event loop instead (`wait=False`)."""
        logs = [partition_log for partition_log in map(self.logs.get, tps) if partition_log is not None]
        checkpoints = self._offset_checkpoints
        if logs and any(checkpoints.noted(d) < self._count[d] for d in self.log_dirs):
            # Logs no pass has noted yet (every log, until the first pass after a start): a file
            # holding only `tps` would lose their starts to a crash before that pass.
            logs = list(self.logs.values())
        written = checkpoints.write_log_starts(logs, lambda lg: self._dir_of[lg.topic_partition])
        if wait:
            try:
                written.exception(timeout=CHECKPOINT_WAIT_S)  # a failed write: logged by the writer
            except TimeoutError:
                log.error("The %s of %s is not written after %d s; replicas may learn of a log start "
                          "a crash would take back", LOG_START_OFFSET_CHECKPOINT,
                          ", ".join(str(d) for d in self.log_dirs), CHECKPOINT_WAIT_S)
        return written

    def flush_due(self, now_ms: int) -> int:
        """Apply each log's `flush.ms`; return how many logs were flushed. The scan is skipped
        until the earliest log can be due (a log added or a topic config changed brings it
        forward; a flush in between only delays a log, so checking early is harmless)."""
        if now_ms < self._flush_check_ms:
            return 0
        flushed, earliest = 0, NEVER_MS
        for partition_log in self.logs.values():  # bounded by the logs
            flushed += partition_log.flush_if_due(now_ms)
            earliest = min(earliest, partition_log.flush_due_ms)
        self._flush_check_ms = earliest
        return flushed

    def cleanup(self, now_ms: int) -> int:
        """Apply retention to every log; return the number of segments deleted."""
        return sum(lg.delete_old_segments(now_ms) for lg in self.logs.values())

    def shutdown(self, *, clean: bool = True) -> None:
        """Orderly stop: close every log, checkpoint, and (when `clean`) write each dir's clean
        marker; without it the next start recovers the logs as after a crash."""
        # Only the logs that owe a write or an fsync are closed on the pool (Kafka's
        # LogManager.shutdown flushes each log, writes its producer snapshot, then the
        # checkpoints and the marker); an empty log owes none and only lets go of its file.
        logs = []
        for partition_log in self.logs.values():  # bounded by the logs
            if partition_log.owes_close:
                logs.append(partition_log)
            else:
                partition_log.release()
        try:
            closed = zip(logs, self.run_parallel(PartitionLog.close, logs))
            failures = [(partition_log, o.error) for partition_log, o in closed if o.error is not None]
            for partition_log, error in failures:
                log.error("Closing the log of %s failed: %s", partition_log.topic_partition, error)
            if failures:  # no clean-shutdown marker: the next start recovers these logs
                raise failures[0][1]
            self._final_checkpoint()
            for directory in self.log_dirs:
                if clean:
                    (directory / CLEAN_SHUTDOWN_FILE).touch()
                fsync_directory(directory)
        finally:
            done = self._pass_done
            if done is not None:  # a close failed before its whole pass: no slice may follow it
                self._end_pass()
                done.set_exception(KafkaStorageError("the logs were closed before this offset checkpoint "
                                                     "pass ended"))
            self.flusher.shutdown()  # every log waited for its own flushes when it closed
            self._stop_pool()
            self._offset_checkpoints.close(wait=False)  # the writes were waited for (bounded)
            self._release_locks()
        log.info("Shut down %d logs %s in %s (%d flushed and closed, the others empty)", len(self.logs),
                 "cleanly" if clean else "without the clean-shutdown marker (exiting dirty)",
                 ", ".join(str(d) for d in self.log_dirs), len(logs))

    def _final_checkpoint(self) -> None:
        """The last pass, before the clean-shutdown marker: every offset checkpoint written,
        the writes of earlier passes still running included. The wait is bounded: past
        CHECKPOINT_WAIT_S (a disk that stopped answering) the close fails, and with no
        marker the next start rescans what the recovery points on disk do not cover."""
        written = self.checkpoint(whole=True)
        try:
            written.result(timeout=CHECKPOINT_WAIT_S)
        except TimeoutError:
            raise KafkaStorageError(f"offset checkpoints of {', '.join(str(d) for d in self.log_dirs)} "
                                    f"not written after {CHECKPOINT_WAIT_S} s") from None

    def _stop_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _release_locks(self) -> None:
        for fd in self._locks:
            os.close(fd)
        self._locks.clear()

    def partitions(self) -> Iterable[TopicPartition]:
        return self.logs.keys()
