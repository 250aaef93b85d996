"""broker/replication/fetch_rounds.py: a fetcher's round looks only at what changed (issue 35)."""

from __future__ import annotations

from broker.replication.fetch_rounds import FetchRounds
from broker.replication.fetcher_state import PartitionFetchState
from broker.replication.truncation import AskLeader
from common.protocol.fetch import FetchPartition
from common.topic_partition import TopicPartition

EPOCH = 3
FOLLOWED = 1000  # partitions a fetcher holds already


def tp(i: int) -> TopicPartition:
    return TopicPartition("t", i)


def entry(i: int, offset: int = 0) -> FetchPartition:
    return FetchPartition(i, offset, 1000, 0, EPOCH)


def round_(rounds: FetchRounds, now: float = 0.0, *, offsets: dict[int, int] | None = None,
           out_of_isr: frozenset[int] = frozenset()) -> list[int]:
    """One round as the fetcher runs it: refresh what `to_refresh` yields (at `offsets`, log end
    offset 0 otherwise), build and have the leader answer; the partitions refreshed."""
    rounds.due(now)
    refreshed = []
    for p, state in rounds.to_refresh(now):
        offset = (offsets or {}).get(p.partition, 0)
        request = state.request
        if request is None or request.fetch_offset != offset:
            request = state.request = entry(p.partition, offset)
        rounds.fetching(p, request, in_isr=p.partition not in out_of_isr)
        refreshed.append(p.partition)
    rounds.build()
    assert rounds.session.handle_response(0, 42)
    return refreshed


def followed(n: int = FOLLOWED) -> FetchRounds:
    rounds = FetchRounds()
    for i in range(n):
        rounds.add(tp(i), PartitionFetchState(EPOCH, None))
    assert len(round_(rounds)) == n  # the first round builds every entry (a full fetch)
    return rounds


def test_an_unchanged_round_refreshes_and_names_nothing() -> None:
    rounds = followed()
    assert round_(rounds) == []
    plan = rounds.build()
    assert (dict(plan.to_send), plan.to_forget, plan.is_full) == ({}, (), False)


def test_a_round_after_changes_refreshes_and_names_only_those() -> None:
    rounds = followed()
    for i in (FOLLOWED, FOLLOWED + 1):  # a metadata slice: two new partitions
        rounds.add(tp(i), PartitionFetchState(EPOCH, None))
    rounds.touch(tp(7))  # records appended to partition 7
    rounds.touch(tp(8))  # an ISR change that moves no offset
    rounds.touch(tp(FOLLOWED * 2))  # not ours: ignored
    rounds.remove(tp(9))
    rounds.due(0.0)
    refreshed = [p.partition for p, _ in rounds.to_refresh(0.0)]
    assert refreshed == [FOLLOWED, FOLLOWED + 1, 7, 8]
    for i in refreshed:
        state = rounds.partitions[tp(i)]
        state.request = entry(i, 5) if i == 7 else (state.request or entry(i))
        rounds.fetching(tp(i), state.request, in_isr=True)
    plan = rounds.build()
    assert set(plan.to_send) == {tp(FOLLOWED), tp(FOLLOWED + 1), tp(7)} and plan.to_forget == (tp(9),)


def test_partitions_outside_the_isr_are_refreshed_and_named_every_round() -> None:
    rounds = followed(10)
    rounds.touch(tp(4))
    assert round_(rounds, out_of_isr=frozenset({4})) == [4]
    for _ in range(3):
        assert round_(rounds, out_of_isr=frozenset({4})) == [4]
        assert rounds.session.handle_response(0, 42) and set(rounds.build().to_send) == {tp(4)}
    assert round_(rounds) == [4]  # back in the ISR: this refresh sees it
    assert round_(rounds) == []
    assert set(rounds.build().to_send) == set()


def test_a_backed_off_partition_leaves_the_session_until_its_time() -> None:
    rounds = followed(10)
    state = rounds.partitions[tp(2)]
    rounds.back_off(tp(2), state, 1.0)
    assert rounds.next_retry() == 1.0
    rounds.due(0.5)
    assert list(rounds.to_refresh(0.5)) == []
    plan = rounds.build()
    assert plan.to_forget == (tp(2),)
    assert rounds.session.handle_response(0, 42)
    rounds.touch(tp(2))  # an ISR change while backing off: still left alone
    assert round_(rounds, 0.9) == []
    rounds.due(1.0)
    assert [p.partition for p, _ in rounds.to_refresh(1.0)] == [2] and rounds.next_retry() is None
    request = state.request
    assert request is not None
    rounds.fetching(tp(2), request, in_isr=True)
    assert set(rounds.build().to_send) == {tp(2)}  # named again (it was forgotten)


def test_a_back_off_of_a_replaced_state_is_stale() -> None:
    rounds = followed(10)
    old = rounds.partitions[tp(3)]
    rounds.back_off(tp(3), old, 1.0)
    new = PartitionFetchState(EPOCH + 1, None)
    rounds.add(tp(3), new)  # a new leader epoch while backing off
    assert round_(rounds, 0.0) == [3]
    assert round_(rounds, 1.0) == []  # the old back-off's time came: nothing to do
    rounds.back_off(tp(3), old, 2.0)  # the old state answered late: ignored
    assert rounds.next_retry() is None and tp(3) in rounds.session.wanted


def test_truncating_partitions_fetch_once_truncated() -> None:
    rounds = followed(2)
    state = PartitionFetchState(EPOCH, AskLeader(EPOCH - 1))
    rounds.add(tp(5), state)
    assert round_(rounds) == [] and set(rounds.truncating()) == {tp(5)}
    rounds.back_off(tp(5), state, 1.0)  # the leader is not ready: ask again later
    assert rounds.truncating() == {}
    rounds.due(1.0)
    assert set(rounds.truncating()) == {tp(5)}
    state.truncation = None
    rounds.truncated(tp(5), state)
    assert rounds.truncating() == {} and round_(rounds, 1.0) == [5]
    assert rounds.has_fetch_work()  # fetching partitions: a fetch every round


def test_removing_everything_leaves_no_work() -> None:
    rounds = followed(3)
    for i in range(3):
        rounds.remove(tp(i))
    assert rounds.partitions == {} and rounds.session.wanted == {}
    assert set(rounds.build().to_forget) == {tp(0), tp(1), tp(2)}
    assert not rounds.has_fetch_work()
