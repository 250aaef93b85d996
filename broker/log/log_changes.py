"""What moved in a broker's logs since the periodic passes last looked.

An idle broker of 100,000 logs must not pay for them all every pass: the log manager's
checkpoint (every log.flush.offset.checkpoint.interval.ms) rewrites only the files whose entries
moved, and each replica fetcher looks for a moved log start only when one moved. The logs say
so here: `PartitionLog` calls `moved` where its recovery point, high watermark or log start
offset changes. Kafka walks every log in both passes; in Java that costs little, in Python a
walk of 100,000 logs a minute was a fifth of an idle broker's CPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the logs report to this; it never calls them
    from broker.log.partition_log import PartitionLog


class LogChanges:
    """The logs whose checkpointed offsets moved, and a count of log start moves."""

    __slots__ = ("_moved", "log_start_moves")

    def __init__(self) -> None:
        # Logs by identity (a set add per high-watermark move is the hot path's whole cost).
        # A log may be added from the I/O pool's threads (closing logs flushes them): set.add
        # is atomic under the GIL, and `take_moved` swaps the set instead of iterating it.
        self._moved: set[PartitionLog] = set()
        # Bumped at every log start move of any log (retention, DeleteRecords, truncation):
        # a fetcher compares it with the count it last saw before walking its partitions.
        self.log_start_moves = 0

    def moved(self, partition_log: PartitionLog, *, log_start: bool = False) -> None:
        """`partition_log`'s recovery point, high watermark or (`log_start`) log start moved."""
        self._moved.add(partition_log)
        if log_start:
            self.log_start_moves += 1

    def take_moved(self) -> set[PartitionLog]:
        """The logs that moved since the last call; the set starts empty again."""
        moved, self._moved = self._moved, set()
        return moved

    def put_back(self, logs: set[PartitionLog]) -> None:
        """A pass failed before writing what `logs` moved: the next pass takes them again."""
        self._moved |= logs
