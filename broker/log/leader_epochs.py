"""Leader-epoch vocabulary and Kafka's endOffsetFor rule, without the checkpoint file.

The follower's truncation rules (`broker.replication.truncation`) need these and must stay
pure: importing this module loads no file I/O (`leader_epoch_cache` adds the checkpointed
cache on top).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Final, NamedTuple

UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class EpochEndOffset(NamedTuple):
    """OffsetForLeaderEpoch's answer: the largest epoch <= the one asked, and where it ends."""

    leader_epoch: int
    end_offset: int


def epoch_end_offset(epochs: Sequence[int], start_offsets: Sequence[int], requested_epoch: int,
                     log_end_offset: int) -> EpochEndOffset:
    """Kafka's endOffsetFor over ascending (epoch, start offset) columns: the end offset of
    `requested_epoch` or of the epoch below it.

    The latest epoch ends at the log end offset; an older epoch ends where the next higher
    epoch starts; an epoch older than every entry gets the first entry's start offset; an
    unknown epoch above all entries gets (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
    """
    if requested_epoch == UNDEFINED_EPOCH or not epochs:
        return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    if requested_epoch == epochs[-1]:
        return EpochEndOffset(requested_epoch, log_end_offset)
    higher = bisect_right(epochs, requested_epoch)
    if higher == len(epochs):
        return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    if higher == 0:
        return EpochEndOffset(requested_epoch, start_offsets[0])
    return EpochEndOffset(epochs[higher - 1], start_offsets[higher])
