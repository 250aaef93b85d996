"""The per-directory offset checkpoints of a broker's logs, rewritten only when an entry moved.

Each log directory holds Kafka's `recovery-point-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks) and `log-start-offset-checkpoint`, one
`topic partition offset` line per log (`checkpoint_file`'s format). Kafka rewrites all three
every log.flush.offset.checkpoint.interval.ms; here a file is rewritten (whole, atomically, as
Kafka's) only when one of its entries moved since it was last written: at 100,000 partitions
sorting and formatting every entry of an idle broker each minute was a fifth of its CPU. What
moved is told by the logs (`log_changes.LogChanges`); what each file holds is kept here, with
each dir's logs in file order until one comes or goes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from broker.log.checkpoint_file import checkpoint_data, entry_line, write_atomically
from broker.log.partition_log import PartitionLog

Offsets = tuple[int, int, int]  # recovery point, high watermark, log start offset


def offsets_of(partition_log: PartitionLog) -> Offsets:
    """The log's entries in the three files, in the order of `OffsetCheckpoints`' names."""
    return partition_log.recovery_point, partition_log.high_watermark, partition_log.log_start_offset


class OffsetCheckpoints:
    """What the three offset checkpoint files of each log directory hold, and which owe a write."""

    def __init__(self, log_dirs: Sequence[Path], names: tuple[str, str, str]) -> None:
        """`names`: the files of the recovery point, the high watermark and the log start."""
        self._names = names
        # By dir, the offsets each log's lines hold in its files (keyed by the log itself: its
        # identity hash is C's, a TopicPartition's is a Python call).
        self._written: dict[Path, dict[PartitionLog, Offsets]] = {d: {} for d in log_dirs}
        # by dir, its logs in file order: (topic, partition, the line up to the offset, log)
        self._order: dict[Path, list[tuple[str, int, str, PartitionLog]]] = {}
        self._only_dir = log_dirs[0] if len(log_dirs) == 1 else None  # most brokers: no lookup
        self._stale: set[tuple[Path, int]] = set()  # (dir, index into names) owing a write

    def note(self, logs: Iterable[PartitionLog], dir_of: Callable[[PartitionLog], Path]) -> None:
        """Compare the logs that moved with what their files hold; the files that differ now
        owe a write. (Inlined per log: under load every log's high watermark moves.)"""
        stale, new_in = self._stale, set()
        only = self._only_dir
        directory = only if only is not None else next(iter(self._written))
        written = self._written[directory]
        for partition_log in logs:  # bounded by the logs that moved
            if only is None:  # a Path's hash is a Python call: one dir needs none
                directory = dir_of(partition_log)
                written = self._written[directory]
            now = offsets_of(partition_log)
            before = written.get(partition_log)
            if before == now:
                continue
            written[partition_log] = now
            if before is None:
                new_in.add(partition_log)
                continue
            for i in range(3):  # the three files
                if before[i] != now[i]:
                    stale.add((directory, i))
        for directory in {only if only is not None else dir_of(lg) for lg in new_in}:
            self._order.pop(directory, None)  # logs new to the dir's files: every file, a new order
            stale.update((directory, i) for i in range(3))

    def forget(self, partition_log: PartitionLog, directory: Path) -> None:
        """The log was deleted: its dir's files are written again without it."""
        if self._written[directory].pop(partition_log, None) is not None:
            self._order.pop(directory, None)
            self._stale.update((directory, i) for i in range(len(self._names)))

    def write_one_now(self, partition_log: PartitionLog, directory: Path, index: int) -> bool:
        """Note `partition_log` (in `directory`) and write its dir's file `names[index]` now if
        that file owes a write; whether it was written. The others written by the next `write`
        (the recovery point only after the caller's leader-epoch syncs). Costs the file's
        lines, not a sort of the dir's logs (kept in file order unless one came or went)."""
        self.note((partition_log,), lambda _log: directory)
        return self.write(only=(directory, index)) > 0

    def write(self, only: tuple[Path, int] | None = None) -> int:
        """Write every file that owes a write (or just `only`, if it owes one); how many. One
        that fails (KafkaStorageError) still owes it."""
        written = 0
        rows: dict[Path, list[Offsets]] = {}  # each dir's offsets in file order, this pass
        files = sorted(self._stale) if only is None else [only] if only in self._stale else []
        for directory, i in files:  # bounded: three files per log dir
            order = self._order.get(directory)
            if order is None:
                order = self._order[directory] = sorted(
                    (lg.topic_partition.topic, lg.topic_partition.partition,
                     entry_line((lg.topic_partition.topic, lg.topic_partition.partition, "")), lg)
                    for lg in self._written[directory])
            if directory not in rows:
                offsets = self._written[directory]
                rows[directory] = [offsets[entry[3]] for entry in order]
            lines = [entry[2] + str(row[i]) for entry, row in zip(order, rows[directory])]
            write_atomically(directory / self._names[i], checkpoint_data(lines))
            self._stale.discard((directory, i))
            written += 1
        return written
