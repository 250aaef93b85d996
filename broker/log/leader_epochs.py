"""Leader-epoch entries and Kafka's endOffsetFor over them: the pure half of the epoch cache.

Replication's truncation rules (`broker/replication/truncation.py`) need the lookup but
not the checkpoint file that `leader_epoch_cache.LeaderEpochCache` keeps, so it lives here.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import NamedTuple

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class EpochEndOffset(NamedTuple):
    """OffsetForLeaderEpoch's answer: the largest epoch <= the one asked, and where it ends."""

    leader_epoch: int
    end_offset: int


def end_offset_for(epochs: Sequence[int], offsets: Sequence[int], requested_epoch: int,
                   log_end_offset: int) -> EpochEndOffset:
    """Kafka's endOffsetFor: the end offset of `requested_epoch` or of the epoch below it.

    `epochs` and `offsets` are the entries' strictly increasing columns. The latest epoch
    ends at the log end offset; an older epoch ends where the next higher epoch starts; an
    epoch older than every entry gets the first entry's start offset; an unknown epoch above
    all entries gets (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
    """
    if requested_epoch == UNDEFINED_EPOCH or not epochs:
        return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    if requested_epoch == epochs[-1]:
        return EpochEndOffset(requested_epoch, log_end_offset)
    higher = bisect_right(epochs, requested_epoch)
    if higher == len(epochs):
        return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    if higher == 0:
        return EpochEndOffset(requested_epoch, offsets[0])
    return EpochEndOffset(epochs[higher - 1], offsets[higher])


def entries_end_offset_for(entries: Sequence[EpochEntry], requested_epoch: int,
                           log_end_offset: int) -> EpochEndOffset:
    """`end_offset_for` over a list of entries."""
    return end_offset_for([e.epoch for e in entries], [e.start_offset for e in entries],
                          requested_epoch, log_end_offset)
