"""broker.replication.fetch_session_handler: what a follower's fetches carry, round by round."""

from __future__ import annotations

import pytest

from broker.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID
from broker.replication.fetch_session_handler import FetchSessionHandler
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol.fetch import FetchPartition

T0, T1, T2 = (TopicPartition("t", i) for i in range(3))


def entry(tp: TopicPartition, offset: int) -> FetchPartition:
    return FetchPartition(tp.partition, offset, 1000, 0, 1)


def want(handler: FetchSessionHandler, **offsets: int) -> FetchSessionHandler:
    """Make `handler.wanted` exactly `offsets` (p0=5: partition 0 from offset 5), entry by entry
    as a fetcher does: an unchanged offset keeps an equal (not identical) entry."""
    wanted = {TopicPartition("t", int(k[1:])): v for k, v in offsets.items()}
    for tp in [tp for tp in handler.wanted if tp not in wanted]:
        handler.remove(tp)
    for tp, offset in wanted.items():
        handler.set(tp, entry(tp, offset))
    return handler


def established(session_id: int = 42) -> FetchSessionHandler:
    handler = want(FetchSessionHandler(), p0=0, p1=0)
    handler.build()
    assert handler.handle_response(0, session_id)
    return handler


def test_first_fetch_is_full_and_opens_a_session() -> None:
    handler = want(FetchSessionHandler(), p0=0, p1=0)
    first = handler.build()
    assert (first.session_id, first.epoch, set(first.to_send), first.to_forget) == (0, INITIAL_EPOCH, {T0, T1}, ())
    assert handler.handle_response(0, 42)
    assert (handler.session_id, handler.epoch) == (42, 1)


def test_idle_round_names_nothing() -> None:
    handler = established()
    idle = want(handler, p0=0, p1=0).build()  # equal entries again: nothing to send
    assert (idle.session_id, idle.epoch, dict(idle.to_send), idle.to_forget) == (42, 1, {}, ())
    assert handler.handle_response(0, 42) and handler.epoch == 2


def test_changed_added_and_removed_partitions() -> None:
    handler = established()
    plan = want(handler, p0=5, p2=0).build()
    assert set(plan.to_send) == {T0, T2} and plan.to_forget == (T1,)
    assert set(handler.wanted) == {T0, T2}
    handler.handle_response(0, 42)
    assert dict(want(handler, p0=5, p2=0).build().to_send) == {}


def test_a_partition_removed_and_added_back_unchanged_is_not_sent() -> None:
    handler = established()
    handler.remove(T1)
    handler.set(T1, entry(T1, 0))
    plan = handler.build()
    assert (dict(plan.to_send), plan.to_forget) == ({}, ())


def test_a_partition_never_sent_is_not_forgotten() -> None:
    handler = established()
    handler.set(T2, entry(T2, 0))
    handler.remove(T2)
    assert handler.build().to_forget == ()


def test_changes_made_while_a_fetch_is_out_go_in_the_next() -> None:
    handler = established()
    first = want(handler, p0=1, p1=0).build()
    want(handler, p0=2, p1=0)  # appended again before the answer came
    assert handler.handle_response(0, 42)
    assert dict(first.to_send) == {T0: entry(T0, 1)}
    assert dict(handler.build().to_send) == {T0: entry(T0, 2)}


def test_always_partitions_are_named_every_round() -> None:
    handler = established()
    assert set(handler.build(always={T1}).to_send) == {T1}
    handler.handle_response(0, 42)
    assert set(handler.build(always={T1, T2}).to_send) == {T1}  # T2 is not fetched


# (error, session id after, a full fetch next)
ERRORS = [
    (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, INVALID_SESSION_ID),
    (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 42),  # the full fetch closes 42 and opens a new one
]


@pytest.mark.parametrize(("error", "session_after"), ERRORS)
def test_session_errors_fall_back_to_a_full_fetch(error: ErrorCode, session_after: int) -> None:
    handler = established()
    want(handler, p0=1, p1=0).build()
    assert not handler.handle_response(int(error), 0)
    plan = handler.build()
    assert (plan.session_id, plan.epoch, set(plan.to_send)) == (session_after, INITIAL_EPOCH, {T0, T1})


def test_a_lost_answer_starts_a_new_session() -> None:
    handler = established()
    want(handler, p0=1, p1=0).build()
    handler.handle_error()
    plan = handler.build()
    assert plan.is_full and plan.session_id == 42 and dict(plan.to_send) == {T0: entry(T0, 1), T1: entry(T1, 0)}


def test_the_session_after_a_full_fetch_is_what_it_named() -> None:
    handler = established()
    want(handler, p0=3, p1=0).build()
    handler.handle_error()
    handler.build()  # full, with p0 at 3
    assert handler.handle_response(0, 43)
    assert (handler.session_id, dict(want(handler, p0=3, p1=0).build().to_send)) == (43, {})


def test_no_session_granted_keeps_fetching_full() -> None:
    handler = want(FetchSessionHandler(), p0=0)
    handler.build()
    assert handler.handle_response(0, INVALID_SESSION_ID)
    plan = handler.build()
    assert plan.is_full and plan.session_id == INVALID_SESSION_ID and plan.epoch != FINAL_EPOCH


def test_a_session_closed_by_the_leader_restarts_full() -> None:
    handler = established()
    handler.build()
    assert handler.handle_response(0, INVALID_SESSION_ID)
    assert handler.build().is_full
