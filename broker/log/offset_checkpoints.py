"""The per-directory offset checkpoints of a broker's logs, rewritten only when an entry moved.

Each log directory holds Kafka's `recovery-point-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks) and `log-start-offset-checkpoint`, one
`topic partition offset` line per log (`checkpoint_file`'s format). Kafka rewrites all three
every log.flush.offset.checkpoint.interval.ms; here a file is rewritten (whole, atomically, as
Kafka's) only when one of its entries moved since it was last written: at 100,000 partitions
sorting and formatting every entry of an idle broker each minute was a fifth of its CPU. What
moved is told by the logs (`log_changes.LogChanges`); what each file holds is kept here, with
each dir's logs in file order until one comes or goes.

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
from operator import add, itemgetter
from pathlib import Path

from broker.log.checkpoint_file import CheckpointWriter, all_done, checkpoint_data
from broker.log.partition_log import PartitionLog

Offsets = tuple[int, int, int]  # recovery point, high watermark, log start offset: the names' order
FileKey = tuple[Path, int]  # a log dir, and which of its three files (an index into the names)
LOG_START = 2  # the log start offset's index in Offsets and in the files' names


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
        # by dir, its logs in file order, and their lines up to the offset
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
        for directory in {only if only is not None else dir_of(lg) for lg in new_in}:
            self._order.pop(directory, None)  # logs new to the dir's files: every file, a new order
            self._stale.update((directory, i) for i in range(3))

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
                self._order.pop(directory, None)  # new to the dir's files: every file, a new order
                self._stale.update((directory, i) for i in range(len(self._names)))
            elif before[LOG_START] != log_start:
                written[partition_log] = (before[0], before[1], log_start)
                self._stale.add((directory, LOG_START))

    def noted(self, directory: Path) -> int:
        """How many of the dir's logs have lines in its files (noted, not forgotten since)."""
        return len(self._written[directory])

    def forget(self, partition_log: PartitionLog, directory: Path) -> None:
        """The log was deleted: its dir's files are written again without it."""
        if self._written[directory].pop(partition_log, None) is not None:
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
        """The dir's logs in file order and their lines up to the offset (sorted again only
        after a log came or went)."""
        order = self._order.get(directory)
        if order is None:
            # Grouped by topic, then each topic's partitions sorted as ints: a sort of 100,000
            # (topic, partition) tuples in the noted (hash) order was 0.3 s of the first pass
            # after a create or a start, on the event loop; this is about half of it.
            by_topic: dict[str, list[tuple[int, PartitionLog]]] = {}
            for partition_log in self._written[directory]:  # bounded by the dir's logs
                tp = partition_log.topic_partition
                by_topic.setdefault(tp.topic, []).append((tp.partition, partition_log))
            logs: list[PartitionLog] = []
            prefixes: list[str] = []
            for topic in sorted(by_topic):  # bounded by the dir's topics
                members = by_topic[topic]
                members.sort(key=itemgetter(0))
                logs.extend(map(itemgetter(1), members))
                # `entry_line`'s format, one f-string a line
                prefixes.extend([f"{topic} {partition} " for partition, _ in members])
            order = self._order[directory] = tuple(logs), tuple(prefixes)
        return order

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
