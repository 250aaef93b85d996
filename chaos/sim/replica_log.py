"""A partition log in memory, with the real leader-epoch cache, for the replication rules.

It offers what `broker.replication.partition.Partition` reads of `PartitionLog` (the log end
offset, the high watermark, the epoch cache) and the two writes replication makes (append,
truncate). Entries are (leader epoch, value): the offset is the index. What a crash keeps is
explicit: the entries and the epoch cache (the log and `leader-epoch-checkpoint`) and the
HW as last checkpointed (`replication-offset-checkpoint`), never the in-memory HW.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.log.leader_epoch_cache import LeaderEpochCache
from chaos.sim.messages import Entry


class SimLog:
    __slots__ = ("checkpointed_high_watermark", "entries", "flushed_offset", "high_watermark", "leader_epoch_cache",
                 "version")

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.leader_epoch_cache = LeaderEpochCache(None)
        self.high_watermark = 0
        self.checkpointed_high_watermark = 0
        self.flushed_offset = 0  # what the OS has written back: the rest is lost in a power failure
        self.version = 0  # bumped on every change of entries or HW: lets the invariants skip unchanged logs

    @property
    def log_end_offset(self) -> int:
        return len(self.entries)

    def append(self, entries: Iterable[Entry]) -> None:
        for epoch, value in entries:
            # the broker assigns each batch's partition leader epoch at its base offset
            self.leader_epoch_cache.assign(epoch, len(self.entries))
            self.entries.append((epoch, value))
        self.version += 1

    def truncate(self, offset: int) -> None:
        del self.entries[offset:]
        self.leader_epoch_cache.truncate_from_end(offset)
        self.high_watermark = min(self.high_watermark, offset)
        self.version += 1

    def update_high_watermark(self, offset: int) -> None:
        self.high_watermark = offset
        self.version += 1

    def checkpoint(self) -> None:
        """The periodic HW checkpoint; the page cache is written back about as often."""
        self.checkpointed_high_watermark = self.high_watermark
        self.flushed_offset = self.log_end_offset

    def lose_unflushed(self) -> None:
        """A power failure: the tail never written back is gone (tidelog, as Kafka, does not
        fsync each append: acks=all relies on replicas, not on the disk). The epoch cache
        follows the log, as Kafka's recovery truncates it to the recovered end."""
        self.entries = self.entries[:self.flushed_offset]
        self.leader_epoch_cache.truncate_from_end(self.flushed_offset)
        self.high_watermark = min(self.high_watermark, self.flushed_offset)
        self.version += 1

    def recover(self) -> None:
        """After a crash: the HW from the checkpoint, capped by the log (Kafka's log load)."""
        self.high_watermark = min(self.checkpointed_high_watermark, self.log_end_offset)
        self.version += 1
