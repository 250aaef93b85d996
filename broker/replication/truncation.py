"""Follower truncation by leader epoch (KIP-101, KIP-279): never by the high watermark.

    step = start_truncation(entries, log_end_offset)
    while isinstance(step, AskLeader):                 # bounded: epochs strictly decrease
        truncate to step.truncate_to (if any); answer = OffsetForLeaderEpoch(step.epoch)
        step = on_epoch_end_offset(entries, log_end_offset, asked_epoch=step.epoch,
                                   answer=answer)      # with the entries/LEO after truncating
    TruncateTo(offset) -> truncate the log and the epoch cache there, fetch from offset
    TruncateFully()    -> empty the log, fetch from the leader's log start offset

`entries` are the follower's leader-epoch cache entries (epoch, start offset), ascending.
The leader answers with the largest epoch <= the one asked and where it ends
(`LeaderEpochCache.end_offset_for`). Kafka's AbstractFetcherThread.getOffsetTruncationState.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from broker.log.leader_epochs import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    EpochEntry,
    entries_end_offset_for,
)

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


@dataclass(frozen=True, slots=True)
class AskLeader:
    """Send OffsetForLeaderEpoch for `epoch`, after truncating to `truncate_to` if set."""

    epoch: int
    truncate_to: int | None = None

    def __post_init__(self) -> None:
        if self.epoch < 0 or (self.truncate_to is not None and self.truncate_to < 0):
            raise ValueError(f"invalid request for epoch {self.epoch} at {self.truncate_to}")


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Done: truncate to `offset` (a no-op at the LEO) and fetch from there."""

    offset: int

    def __post_init__(self) -> None:
        if self.offset < 0:
            raise ValueError(f"invalid truncation offset {self.offset}")


@dataclass(frozen=True, slots=True)
class TruncateFully:
    """Done: the leader knows no epoch of ours (UNDEFINED); drop the whole log and fetch
    from the leader's log start offset."""


TruncationStep = AskLeader | TruncateTo | TruncateFully


def end_offset_for(entries: Sequence[EpochEntry], epoch: int,
                   log_end_offset: int) -> EpochEndOffset:
    """The largest epoch <= `epoch` in `entries` and where it ends (either side's view)."""
    return entries_end_offset_for(entries, epoch, log_end_offset)


def start_truncation(entries: Sequence[EpochEntry], log_end_offset: int) -> TruncationStep:
    """On becoming a follower (or restarting as one): ask for the latest epoch's end.

    A log without any epoch entry cannot be matched against the leader: it is dropped
    (empty already: nothing to do).
    """
    if entries:
        return AskLeader(entries[-1].epoch)
    return TruncateTo(0) if log_end_offset == 0 else TruncateFully()


def on_epoch_end_offset(entries: Sequence[EpochEntry], log_end_offset: int, *,
                        asked_epoch: int, answer: EpochEndOffset) -> TruncationStep:
    """The leader answered `answer` for `asked_epoch`: truncate, or ask for an older epoch.

    The answer's epoch is <= the one asked. When the follower has that epoch too, the logs
    agree up to the smaller of the two ends. When it does not, the follower truncates to the
    end of its largest epoch below the answer's and asks again for that one.
    """
    if answer.leader_epoch > asked_epoch:
        raise ValueError(f"leader answered epoch {answer.leader_epoch} for {asked_epoch}")
    if answer.end_offset == UNDEFINED_EPOCH_OFFSET:
        return TruncateFully()
    if answer.leader_epoch == UNDEFINED_EPOCH:
        # OffsetForLeaderEpoch v0 (no epoch in the answer): trust the offset alone.
        return TruncateTo(min(answer.end_offset, log_end_offset))
    ours = end_offset_for(entries, answer.leader_epoch, log_end_offset)
    if ours.leader_epoch == UNDEFINED_EPOCH:
        # No entry of ours at or below the answer's epoch: the answer bounds the log.
        return TruncateTo(min(answer.end_offset, log_end_offset))
    if ours.leader_epoch != answer.leader_epoch:
        return AskLeader(ours.leader_epoch, min(ours.end_offset, log_end_offset))
    return TruncateTo(min(ours.end_offset, answer.end_offset, log_end_offset))
