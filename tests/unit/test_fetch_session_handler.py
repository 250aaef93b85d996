"""broker.replication.fetch_session_handler: what a follower's fetches carry, round by round."""

from __future__ import annotations

import pytest

from broker.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID
from broker.replication.fetch_session_handler import FetchSessionHandler
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol.fetch import FetchPartition

T0, T1, T2 = (TopicPartition("t", i) for i in range(3))


def want(**offsets: int) -> dict[TopicPartition, FetchPartition]:
    return {TopicPartition("t", int(k[1:])): FetchPartition(int(k[1:]), v, 1000, 0, 1) for k, v in offsets.items()}


def established(session_id: int = 42) -> FetchSessionHandler:
    handler = FetchSessionHandler()
    handler.build(want(p0=0, p1=0))
    assert handler.handle_response(0, session_id)
    return handler


def test_first_fetch_is_full_and_opens_a_session() -> None:
    handler = FetchSessionHandler()
    first = handler.build(want(p0=0, p1=0))
    assert (first.session_id, first.epoch, set(first.to_send), first.to_forget) == (0, INITIAL_EPOCH, {T0, T1}, ())
    assert handler.handle_response(0, 42)
    assert (handler.session_id, handler.epoch) == (42, 1)


def test_idle_round_names_nothing() -> None:
    handler = established()
    idle = handler.build(want(p0=0, p1=0))
    assert (idle.session_id, idle.epoch, dict(idle.to_send), idle.to_forget) == (42, 1, {}, ())
    assert handler.handle_response(0, 42) and handler.epoch == 2


def test_changed_added_and_removed_partitions() -> None:
    handler = established()
    plan = handler.build(want(p0=5, p2=0))
    assert set(plan.to_send) == {T0, T2} and plan.to_forget == (T1,)
    assert set(plan.wanted) == {T0, T2}
    handler.handle_response(0, 42)
    assert dict(handler.build(want(p0=5, p2=0)).to_send) == {}


def test_always_partitions_are_named_every_round() -> None:
    handler = established()
    assert set(handler.build(want(p0=0, p1=0), always={T1}).to_send) == {T1}


# (error, session id after, a full fetch next)
ERRORS = [
    (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, INVALID_SESSION_ID),
    (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 42),  # the full fetch closes 42 and opens a new one
]


@pytest.mark.parametrize(("error", "session_after"), ERRORS)
def test_session_errors_fall_back_to_a_full_fetch(error: ErrorCode, session_after: int) -> None:
    handler = established()
    handler.build(want(p0=1, p1=0))
    assert not handler.handle_response(int(error), 0)
    plan = handler.build(want(p0=1, p1=0))
    assert (plan.session_id, plan.epoch, set(plan.to_send)) == (session_after, INITIAL_EPOCH, {T0, T1})


def test_a_lost_answer_starts_a_new_session() -> None:
    handler = established()
    handler.build(want(p0=1, p1=0))
    handler.handle_error()
    plan = handler.build(want(p0=1, p1=0))
    assert plan.is_full and plan.session_id == 42 and set(plan.to_send) == {T0, T1}


def test_no_session_granted_keeps_fetching_full() -> None:
    handler = FetchSessionHandler()
    handler.build(want(p0=0))
    assert handler.handle_response(0, INVALID_SESSION_ID)
    plan = handler.build(want(p0=0))
    assert plan.is_full and plan.session_id == INVALID_SESSION_ID and plan.epoch != FINAL_EPOCH


def test_a_session_closed_by_the_leader_restarts_full() -> None:
    handler = established()
    handler.build(want(p0=0, p1=0))
    assert handler.handle_response(0, INVALID_SESSION_ID)
    assert handler.build(want(p0=0, p1=0)).is_full
