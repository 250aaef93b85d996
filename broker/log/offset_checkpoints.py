"""The per-directory offset checkpoints of a broker's logs, rewritten only when an entry moved.

Each log directory holds Kafka's `recovery-point-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks) and `log-start-offset-checkpoint`, one
`topic partition offset` line per log (`checkpoint_file`'s format). Kafka rewrites all three
every log.flush.offset.checkpoint.interval.ms; here a file is rewritten (whole, atomically, as
Kafka's) only when one of its entries moved since it was last written: at 100,000 partitions
sorting and formatting every entry of an idle broker each minute was a fifth of its CPU. What
moved is told by the logs (`log_changes.LogChanges`); what each file holds is kept here, with
each dir's logs in file order, kept by topic: a log that comes or goes re-sorts its topic's
lines only, and a new log's line is made when it is noted (a pass notes 2,000 logs per turn of
the event loop), not in the turn that writes the files. Building the order of 100,000 new logs
at once (after a create or a start) blocked the loop ~120-330 ms in that turn.

The files are written on `CheckpointWriter`'s thread, as Kafka writes them on its scheduler
thread: after every log's offsets moved (a broker taking over a third of 100,000 leaderships),
rendering and writing the three files on the event loop stalled it 0.3-1.1 s. The caller's
thread keeps only the snapshot each write renders from: per dir, its logs' offsets in file
order (tuples of ints; the thread never reads a log, nor what this class goes on changing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from functools import partial
from itertools import chain
from operator import add, itemgetter
from pathlib import Path

from broker.log.checkpoint_file import CheckpointWriter, all_done, checkpoint_data
from broker.log.partition_log import PartitionLog

Offsets = tuple[int, int, int]  # recovery point, high watermark, log start offset: the names' order
FileKey = tuple[Path, int]  # a log dir, and which of its three files (an index into the names)
LOG_START = 2  # the log start offset's index in Offsets and in the files' names
Row = tuple[int, PartitionLog, str]  # a log's partition, the log, and its lines up to the offset


def file_data(prefixes: Sequence[str], rows: Sequence[Offsets], index: int) -> bytes:
    """A file's content from a snapshot: each log's line up to the offset, and the offset,
    its `index`th. On the writer's thread; maps, not a Python loop, so that the thread holds
    the GIL the event loop also needs as briefly as it can."""
    return checkpoint_data(list(map(add, prefixes, map(str, map(itemgetter(index), rows)))))


class OffsetCheckpoints:
    """What the three offset checkpoint files of each log directory hold, and which owe a write."""

    def __init__(self, log_dirs: Sequence[Path], names: tuple[str, str, str],
                 writer: CheckpointWriter | None = None) -> None:
        """`names`: the files of the recovery point, the high watermark and the log start.
        `writer`: the thread the files are written on (tests stand in for the disk)."""
        self._names = names
        # By dir, the offsets each log's lines hold in its files' latest writes (started or
        # queued; keyed by the log itself: its identity hash is C's, a TopicPartition's is a
        # Python call).
        self._written: dict[Path, dict[PartitionLog, Offsets]] = {d: {} for d in log_dirs}
        # By dir, by topic (sorted by partition): its logs and their lines up to the offset.
        self._topics: dict[Path, dict[str, tuple[tuple[PartitionLog, ...], tuple[str, ...]]]] = {
            d: {} for d in log_dirs}
        # By dir, by topic: the rows of logs new to the files since its lines were sorted (made
        # when noted, a pass's slice at a time), and the topics that lost a log since (`forget`).
        self._added: dict[Path, dict[str, list[Row]]] = {d: {} for d in log_dirs}
        self._lost: dict[Path, set[str]] = {d: set() for d in log_dirs}
        # by dir, its logs in file order, and their lines up to the offset (the topics' joined)
        self._order: dict[Path, tuple[tuple[PartitionLog, ...], tuple[str, ...]]] = {}
        self._only_dir = log_dirs[0] if len(log_dirs) == 1 else None  # most brokers: no lookup
        self._stale: set[FileKey] = set()  # the files owing a write
        # Each file's latest write, until seen ended: a waiter for entries it holds waits for
        # it, and if it failed the file owes the write again.
        self._writes: dict[FileKey, Future[None]] = {}
        self._writer = writer if writer is not None else CheckpointWriter()

    def note(self, logs: Iterable[PartitionLog], dir_of: Callable[[PartitionLog], Path]) -> None:
        """Compare the logs that moved with what their files hold; the files that differ now
        owe a write. (Inlined per log: under load every log's high watermark moves.)"""
        new_in: set[PartitionLog] = set()
        only = self._only_dir
        directory = only if only is not None else next(iter(self._written))
        written = self._written[directory]
        # By dir, which of its files' entries moved: indexes, not (dir, index) keys, whose Path
        # hash is a Python call (once per file, not once per moved entry).
        changed: dict[Path, set[int]] = {directory: (files := set())}
        for partition_log in logs:  # bounded by the logs that moved
            if only is None:  # one dir needs no lookup
                directory = dir_of(partition_log)
                written = self._written[directory]
                files = changed.setdefault(directory, set())
            now: Offsets = partition_log.recovery_point, partition_log.high_watermark, partition_log.log_start_offset
            before = written.get(partition_log)
            if before == now:
                continue
            written[partition_log] = now
            if before is None:
                new_in.add(partition_log)
                continue
            if before[0] != now[0]:  # the three files, unrolled
                files.add(0)
            if before[1] != now[1]:
                files.add(1)
            if before[2] != now[2]:
                files.add(2)
        self._stale.update((directory, i) for directory, files in changed.items() for i in files)
        if not new_in:
            return
        if only is not None:
            self._add(only, new_in)
        else:
            by_dir: dict[Path, list[PartitionLog]] = {}
            for partition_log in new_in:  # bounded by the logs that moved
                by_dir.setdefault(dir_of(partition_log), []).append(partition_log)
            for directory, logs_in in by_dir.items():  # bounded by the log dirs
                self._add(directory, logs_in)

    def note_log_starts(self, logs: Iterable[PartitionLog], dir_of: Callable[[PartitionLog], Path]) -> None:
        """Note only the log start offsets of `logs` (`write_log_starts`); their
        recovery points and high watermarks wait for a pass, which notes them after their
        leader-epoch syncs (one noted here would reach a recovery-point write that a pass running
        across the loop's turns makes before it synced that log). A log new to the files gets
        0 in those two, what its load takes without an entry (a rescan, not a lost offset),
        until that pass (it is still among the moved logs)."""
        for partition_log in logs:  # bounded by the logs asked for
            directory = dir_of(partition_log)
            written = self._written[directory]
            before = written.get(partition_log)
            log_start = partition_log.log_start_offset
            if before is None:
                written[partition_log] = (0, 0, log_start)
                self._add(directory, (partition_log,))
            elif before[LOG_START] != log_start:
                written[partition_log] = (before[0], before[1], log_start)
                self._stale.add((directory, LOG_START))

    def _add(self, directory: Path, logs: Iterable[PartitionLog]) -> None:
        """Logs new to the dir's files: their lines (`entry_line`'s format, one f-string each),
        a new order, and every file owes a write."""
        added = self._added[directory]
        for partition_log in logs:  # bounded by the logs noted
            topic, partition = partition_log.topic_partition
            added.setdefault(topic, []).append((partition, partition_log, f"{topic} {partition} "))
        self._order.pop(directory, None)
        self._stale.update((directory, i) for i in range(len(self._names)))

    def noted(self, directory: Path) -> int:
        """How many of the dir's logs have lines in its files (noted, not forgotten since)."""
        return len(self._written[directory])

    def forget(self, partition_log: PartitionLog, directory: Path) -> None:
        """The log was deleted: its dir's files are written again without it."""
        if self._written[directory].pop(partition_log, None) is not None:
            self._lost[directory].add(partition_log.topic_partition.topic)
            self._order.pop(directory, None)
            self._stale.update((directory, i) for i in range(len(self._names)))

    def write_log_starts(self, logs: Sequence[PartitionLog], dir_of: Callable[[PartitionLog], Path]) -> Future[None]:
        """Note the log starts of `logs` and write their dirs' log-start file (`names[LOG_START]`) now
        if it owes a write; a future that ends once those files hold the logs' entries (a write
        started or queued before with them counts). Costs a snapshot of the dirs' offsets, not
        a sort of their logs (kept in file order unless one came or went)."""
        self.note_log_starts(logs, dir_of)
        return self.write(only={(dir_of(partition_log), LOG_START) for partition_log in logs})

    def write(self, only: set[FileKey] | None = None) -> Future[None]:
        """Start the write of every file that owes one (or of those in `only` that do) on the
        writer's thread, from a snapshot of its dir's offsets taken here; a future that ends
        once every file (in `only`) holds what was noted so far: when the writes started here
        and those still running have ended, with the first failed one's error. A file whose
        write failed owes it again (seen at the next call)."""
        self._reap()
        files = self._stale | self._writes.keys() if only is None else only
        snapshots: dict[Path, tuple[tuple[str, ...], list[Offsets]]] = {}
        for key in sorted(files & self._stale):  # bounded: three files per log dir
            directory, i = key
            if directory not in snapshots:
                logs, prefixes = self._file_order(directory)
                snapshots[directory] = prefixes, list(map(self._written[directory].__getitem__, logs))
            prefixes, rows = snapshots[directory]
            self._stale.discard(key)  # before its write starts: a failure makes it stale again
            self._writes[key] = self._writer.submit(directory / self._names[i],
                                                    partial(file_data, prefixes, rows, i))
        return all_done([self._writes[key] for key in sorted(files) if key in self._writes])

    def _file_order(self, directory: Path) -> tuple[tuple[PartitionLog, ...], tuple[str, ...]]:
        """The dir's logs in file order and their lines up to the offset: by topic, each topic's
        partitions as ints. The topics whose logs came or went are sorted again first (all that
        `sort_new_lines` left); the others' sorted lines are joined as they are (in C)."""
        order = self._order.get(directory)
        if order is None:
            self.sort_new_lines()
            topics = self._topics[directory]
            names = sorted(topics)  # bounded by the dir's topics
            order = self._order[directory] = (tuple(chain.from_iterable(topics[t][0] for t in names)),
                                              tuple(chain.from_iterable(topics[t][1] for t in names)))
        return order

    def sort_new_lines(self, most: int | None = None) -> bool:
        """Sort the lines of logs that came or went since into their topics', topic by topic,
        until about `most` lines were sorted (None: all); whether none is left. A pass running on
        the event loop calls it once per turn before its writes: sorting 100,000 new logs' lines
        at once was most of a 120-330 ms turn after a create or a start."""
        for directory, added in self._added.items():  # bounded: the log dirs
            lost = self._lost[directory]
            for topic in added.keys() | lost:  # bounded by the dir's topics
                if most is not None and most <= 0:
                    return False
                sorted_lines = self._sort_topic(directory, topic)
                if most is not None:
                    most -= sorted_lines
        return True

    def _sort_topic(self, directory: Path, topic: str) -> int:
        """Merge the topic's new lines into its sorted ones, without those of logs forgotten
        since; how many lines it holds now."""
        topics, written = self._topics[directory], self._written[directory]
        logs, prefixes = topics.pop(topic, ((), ()))
        rows: list[Row] = [(lg.topic_partition.partition, lg, prefix) for lg, prefix in zip(logs, prefixes)]
        rows += self._added[directory].pop(topic, ())
        lost = self._lost[directory]
        if topic in lost:  # a log forgotten since: its line goes
            lost.discard(topic)
            rows = [row for row in rows if row[1] in written]
        if rows:
            rows.sort(key=itemgetter(0))  # one log per partition: never compares the logs
            topics[topic] = tuple(map(itemgetter(1), rows)), tuple(map(itemgetter(2), rows))
        return len(rows)

    def _reap(self) -> None:
        """Forget the writes that ended; a file whose latest write failed owes it again."""
        for key, future in list(self._writes.items()):  # bounded: three files per log dir
            if future.done():
                del self._writes[key]
                if future.exception() is not None:  # logged by the writer
                    self._stale.add(key)

    def close(self, *, wait: bool = True) -> None:
        """Stop the writer's thread (`CheckpointWriter.close`)."""
        self._writer.close(wait=wait)
