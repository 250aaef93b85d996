"""The leader-epoch cache (KIP-101/279): for each leader epoch, the first offset it wrote.

This is what replication truncates by. A follower asks the leader for the end offset of
its latest epoch (OffsetForLeaderEpoch) and cuts its log there, instead of trusting its
high watermark, which loses or diverges data across two quick leader changes. Stored in
the partition directory as `leader-epoch-checkpoint` (lines of `epoch start_offset`),
rewritten atomically on every change but one: a new leadership's entry (`assign(write=False)`)
is written by the log's first append in that epoch (`write_owed`, before the batch reaches the
segment). Kafka's makeLeader assigns and writes it at once; we keep the entry in memory at once
(OffsetsForLeaderEpoch answers need it: a follower may hold a later epoch than any of this
log's), and defer only the file: a controlled shutdown at 100,000 partitions moved 33,000
leaderships whose checkpoint rewrites were two thirds of the survivors' CPU per role change.
Until the append nothing on disk depends on the entry, and a restart drops an entry at the
log end anyway (`PartitionLog` loads with a cut there); a restarted broker leads only through
a new become-leader, which assigns again.

The rewrite is a rename without fsync (`needs_sync` says one is owed); a log's flush makes it
durable (`sync`) before the recovery point can pass offsets written in a new epoch, and the log
manager syncs those holding data in their latest epoch before its recovery-point checkpoint and
the clean-shutdown marker. A process crash loses nothing (the page cache outlives it); a power
loss can only lose an entry whose epoch's data lies past the on-disk recovery point, data
recovery rescans and cuts as an unflushed tail (the followers hold it), or an entry with no
data after it (a new leadership not written to yet), which nothing reads: a follower truncates
by the epochs of the data it has, and the next leadership assigns a new epoch. Kafka
fsyncs at every `assign` and defers only truncations (KAFKA-15046); done per
partition, that was most of a controlled shutdown at 10,000 partitions (two fsyncs for each of
the ~3,300 leaderships the other brokers take), on the path the controller waits on.
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING

from broker.log.leader_epochs import (
    UNDEFINED_EPOCH,
    EpochEndOffset,
    EpochEntry,
    end_offset_for,
)

if TYPE_CHECKING:  # the file is the shell's: the cache itself stays pure (chaos.sim runs it in memory)
    from pathlib import Path

    from broker.log.checkpoint_file import CheckpointFile

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

log = logging.getLogger(__name__)

FILE_NAME = "leader-epoch-checkpoint"


def checkpoint_file(directory: Path) -> CheckpointFile[EpochEntry]:
    """The `leader-epoch-checkpoint` file of a partition directory."""
    from broker.log.checkpoint_file import CheckpointFile  # file I/O only for a cache that has a file

    return CheckpointFile(
        directory / FILE_NAME,
        lambda e: (e.epoch, e.start_offset),
        _parse_entry,
        in_place=True,  # a new partition's first entry: no temporary file and rename
    )


def _parse_entry(fields: list[str]) -> EpochEntry:
    if len(fields) != 2:
        raise ValueError(f"expected 2 fields, got {len(fields)}")
    return EpochEntry(int(fields[0]), int(fields[1]))


class LeaderEpochCache:
    """Epoch → start offset entries, both strictly increasing."""

    def __init__(self, checkpoint: CheckpointFile[EpochEntry] | None,
                 entries: list[EpochEntry] | None = None, name: str = "") -> None:
        self._checkpoint = checkpoint
        self._name = name
        # The checkpoint was rewritten since it was last made durable (read it, never set it):
        # an attribute, not a property, as the log manager's checkpoint pass reads it for every
        # moved log (100,000 in a broker's takeover of a third of 100,000 leaderships).
        self.needs_sync = False
        self._writes = 0  # rewrites so far: a sync on an I/O thread clears only what it covered
        # Memory holds an entry the file does not (`assign(write=False)`; read it, never set it):
        # an attribute, as `latest_epoch` is, because every append asks (`PartitionLog.append`).
        self.owes_write = False
        if entries is None and checkpoint is not None:
            entries = checkpoint.read()
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        for entry in entries or ():
            self._epochs.append(entry.epoch)
            self._offsets.append(entry.start_offset)
        # The last entry's epoch (UNDEFINED_EPOCH when there is none; read it, never set it): an
        # attribute that each change of the entries sets (`_latest_changed`), not a property,
        # as every append reads it (a property read is a Python frame per partition).
        self.latest_epoch = UNDEFINED_EPOCH
        self._latest_changed()

    def _latest_changed(self) -> None:
        self.latest_epoch = self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, o) for e, o in zip(self._epochs, self._offsets)]

    @property
    def latest_start_offset(self) -> int:
        """Where the latest epoch starts (-1 when there is none)."""
        return self._offsets[-1] if self._offsets else -1

    def epoch_for(self, offset: int) -> int:
        """The epoch that wrote `offset` (the last entry starting at or before it)."""
        i = bisect_right(self._offsets, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, *, write: bool = True) -> None:
        """Record that `epoch` starts at `start_offset`.

        A no-op for the latest epoch at the same or a later offset. Entries that the new
        one contradicts (an epoch >= it, or a start offset >= its) are removed, as Kafka
        does when a new leader's epoch starts at a lower offset after truncation.
        `write=False`: in memory only, the file owes it (`write_owed`): a new leadership, see
        the module docstring.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid epoch entry ({epoch}, {start_offset})")
        if self._epochs and self._epochs[-1] == epoch and start_offset >= self._offsets[-1]:
            return
        removed = []
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            removed.append(EpochEntry(self._epochs.pop(), self._offsets.pop()))
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            log.warning("%sNew epoch entry (%d, %d) caused truncation of conflicting entries %s",
                        self._name, epoch, start_offset, removed[::-1])
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self.latest_epoch = epoch
        if write:
            self._flush()
        else:
            self.owes_write = True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """Kafka's endOffsetFor (`leader_epochs.end_offset_for`) over this cache's entries."""
        return end_offset_for(self._epochs, self._offsets, requested_epoch, log_end_offset)

    def truncate_from_end(self, end_offset: int, *, write: bool = True) -> None:
        """Drop entries starting at or after `end_offset` (the log was truncated there).
        `write=False`: in memory only (a log being loaded, see `PartitionLog`)."""
        if end_offset < 0:  # UNDEFINED_EPOCH_OFFSET: nothing to cut, as in Kafka
            return
        keep = bisect_left(self._offsets, end_offset)
        if keep < len(self._offsets):
            del self._epochs[keep:], self._offsets[keep:]
            self._latest_changed()
            if write:
                self._flush()

    def truncate_from_start(self, start_offset: int, *, write: bool = True) -> None:
        """Forget entries below a new log start offset, keeping the epoch that spans it.
        `write=False`: in memory only (a log being loaded, see `PartitionLog`)."""
        i = bisect_right(self._offsets, start_offset) - 1
        if i < 0 or (i == 0 and self._offsets[0] == start_offset):
            return
        del self._epochs[:i], self._offsets[:i]
        self._offsets[0] = start_offset
        if write:
            self._flush()

    def clear(self) -> None:
        """Forget every entry (the log was emptied)."""
        if self._epochs:
            self._epochs.clear()
            self._offsets.clear()
            self._latest_changed()
            self._flush()

    def write_owed(self) -> None:
        """Write the entries the file lacks (`assign(write=False)`): the log calls this before it
        appends, so that no batch reaches the segment before its epoch's entry is in the file."""
        if self.owes_write:
            self._flush()

    def sync(self) -> None:
        """Make the last rewrite durable (the log manager's shell calls this, possibly on an I/O
        thread while the event loop rewrites: a rewrite during the sync stays owed). Raises
        KafkaStorageError when the file cannot be synced; it then stays owed."""
        writes = self._writes
        if self.needs_sync and self._checkpoint is not None:
            self._checkpoint.sync()
        if self._writes == writes:
            self.needs_sync = False

    def _flush(self) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write(self.entries, sync=False)
            self.needs_sync = True
            self._writes += 1
        self.owes_write = False  # every write is of the whole cache (a failed one stays owed)
