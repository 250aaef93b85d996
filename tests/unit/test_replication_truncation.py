"""Tables for broker/replication/truncation.py (Kafka's AbstractFetcherThreadTest cases of
KIP-101/279), and a driver that runs the ask-again loop against a leader's entries."""

from __future__ import annotations

import pytest

from broker.log.leader_epochs import EpochEndOffset, EpochEntry
from broker.replication.truncation import (
    AskLeader,
    TruncateFully,
    TruncateTo,
    end_offset_for,
    on_epoch_end_offset,
    start_truncation,
)


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(e, o) for e, o in pairs]


@pytest.mark.parametrize(("given", "leo", "expected"), [
    (entries((0, 0), (2, 5)), 8, AskLeader(2)),
    (entries(), 0, TruncateTo(0)),
    (entries(), 3, TruncateFully()),
])
def test_start_truncation(given, leo, expected):
    assert start_truncation(given, leo) == expected


# (follower entries, follower LEO, asked epoch, leader answer) -> step
@pytest.mark.parametrize(("given", "leo", "asked", "answer", "expected"), [
    # same epoch, leader ends later: nothing to cut
    (entries((0, 0), (1, 5)), 8, 1, (1, 10), TruncateTo(8)),
    # same epoch, leader ends earlier: cut the follower's extra tail (classic loss case)
    (entries((0, 0), (1, 5)), 8, 1, (1, 6), TruncateTo(6)),
    # leader answers a lower epoch the follower has: end of that epoch on both sides
    (entries((0, 0), (1, 5)), 8, 1, (0, 3), TruncateTo(3)),
    (entries((0, 0), (1, 5)), 8, 1, (0, 7), TruncateTo(5)),
    # leader answers epoch 2 the follower lacks: cut at the end of its epoch 1, ask for 1
    (entries((0, 0), (1, 4), (3, 6)), 9, 3, (2, 8), AskLeader(1, 6)),
    # UNDEFINED: the leader knows nothing of our epochs
    (entries((0, 0)), 4, 0, (-1, -1), TruncateFully()),
    # every follower epoch is newer than the answer: cut to the first entry's start
    (entries((3, 2), (4, 6)), 9, 4, (1, 5), TruncateTo(2)),
    # OffsetForLeaderEpoch v0 answer (no epoch)
    (entries((0, 0)), 4, 0, (-1, 2), TruncateTo(2)),
])
def test_on_epoch_end_offset(given, leo, asked, answer, expected):
    assert on_epoch_end_offset(given, leo, asked_epoch=asked,
                               answer=EpochEndOffset(*answer)) == expected


def test_an_answer_newer_than_asked_is_a_bug():
    with pytest.raises(ValueError):
        on_epoch_end_offset(entries((0, 0)), 3, asked_epoch=0, answer=EpochEndOffset(1, 3))


def truncate(follower: list[EpochEntry], follower_leo: int, leader: list[EpochEntry],
             leader_leo: int) -> int:
    """Run the rule to completion the way the fetcher will; returns the offset kept."""
    step = start_truncation(follower, follower_leo)
    for _ in range(len(follower) + 1):  # every AskLeader asks for a strictly older epoch
        if not isinstance(step, AskLeader):
            break
        if step.truncate_to is not None:
            follower_leo = min(follower_leo, step.truncate_to)
            follower = [e for e in follower if e.start_offset < follower_leo]
        answer = end_offset_for(leader, step.epoch, leader_leo)
        step = on_epoch_end_offset(follower, follower_leo, asked_epoch=step.epoch, answer=answer)
    else:
        raise AssertionError("truncation did not converge")
    return 0 if isinstance(step, TruncateFully) else step.offset


# (follower entries, follower LEO, leader entries, leader LEO) -> offset kept
@pytest.mark.parametrize(("follower", "f_leo", "leader", "l_leo", "expected"), [
    (entries((0, 0)), 5, entries((0, 0), (1, 5)), 9, 5),                  # plain lag
    (entries((0, 0)), 2, entries((0, 0), (1, 1)), 3, 1),                  # divergence at 1
    (entries((0, 0), (1, 4), (3, 6)), 9, entries((0, 0), (2, 3), (4, 7)), 9, 3),  # two hops
    (entries((0, 0), (2, 4)), 9, entries((0, 0), (1, 6), (3, 8)), 10, 4),
    (entries((5, 0)), 4, entries(), 0, 0),                                  # leader empty
])
def test_truncation_loop(follower, f_leo, leader, l_leo, expected):
    assert truncate(follower, f_leo, leader, l_leo) == expected
