"""broker/handlers/fetch.py `fetch_now`: a fetch whose first read settles it is answered at once
(no task, no loop pass: a consumer reading a backlog), one that must wait returns `Later`, which
completes when its partitions change or at max_wait_ms; the answers are those `handle_fetch`
gives.

A real ReplicaManager and FetchSessions on one broker that leads t-0 and t-1; the fetches are a
consumer's (replica id -1), sessionless and in a KIP-227 session."""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest

from broker.fetch_session import FINAL_EPOCH
from broker.fetch_sessions import FetchSessions
from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers import fetch as fetch_handler
from broker.handlers import fetch_partitions
from broker.handlers.fetch import fetch_now, handle_fetch
from broker.handlers.fetch_partitions import size_of
from broker.purgatory import AnswerFuture
from broker.server import Later
from common.errors import ErrorCode
from common.protocol import fetch
from common.protocol.leader_discovery import LeaderIdAndEpoch
from common.protocol.metadata import wire_topic_id
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, Partition, RegisterBroker, Topic
from tests.handler_context import replica_context
from tests.log_helpers import batch

VERSION = 11  # sessions (v7+), topics by name (before v13)
CONSUMER = -1
IMAGE = apply(EMPTY_IMAGE, enumerate((
    BeginEpoch(1),
    RegisterBroker(1, "inc-1", (Listener("PLAINTEXT", "127.0.0.1", 9092),), None),
    BrokerRegistrationChange(1, 1, fenced=False),
    Topic("t", "T"), *(Partition("T", i, (1,), (1,), leader=1, leader_epoch=3) for i in range(2)),
), start=EMPTY_IMAGE.offset + 1))
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
CLIENT = ClientInfo("consumer", "/127.0.0.9")
WAIT_MS = 5_000  # far longer than any test waits: a Later that is not woken fails by timing out
TEST_TIMEOUT_S = 2.0


@pytest.fixture
def ctx(tmp_path):
    with replica_context(tmp_path, IMAGE) as context:
        context.fetch_sessions = FetchSessions(context.replicas, max_entries=10, rng=random.Random(5))
        yield context


def request(offsets: dict[int, int], *, max_wait_ms: int = WAIT_MS, session: tuple[int, int] = (0, FINAL_EPOCH),
            partitions_named: tuple[int, ...] | None = None) -> fetch.FetchRequest:
    named = tuple(offsets) if partitions_named is None else partitions_named
    parts = tuple(fetch.FetchPartition(p, offsets[p], 1 << 20, 0, 3) for p in named)
    return fetch.FetchRequest(CONSUMER, max_wait_ms, 1, 1 << 20, fetch.READ_UNCOMMITTED,
                              (fetch.FetchTopic("t", parts),) if parts else (), *session)


def sizes(response: fetch.FetchResponse) -> dict[int, tuple[int, int]]:
    """partition -> (error code, bytes of records) of a response."""
    return {a.partition_index: (a.error_code, size_of(a)) for t in response.responses for a in t.partitions}


def test_a_fetch_with_data_is_answered_at_once_as_handle_fetch_answers(ctx: BrokerContext) -> None:
    ctx.replicas.append(T0, batch(3), acks=1)
    req = request({0: 0, 1: 0})

    async def both() -> tuple[object, fetch.FetchResponse]:
        return fetch_now(ctx, req, VERSION, CLIENT), await handle_fetch(ctx, req, VERSION, CLIENT)
    now, awaited = asyncio.run(both())
    assert isinstance(now, fetch.FetchResponse)
    assert sizes(now) == sizes(awaited) == {0: (0, len(batch(3))), 1: (0, 0)}


# 200 ms, not 1: fetch_now reads the clock twice, and a request whose wait is already over by the
# second read is rightly answered at once (a 1 ms wait was, once, on a loaded box)
@pytest.mark.parametrize("max_wait_ms", [0, 200])
def test_nothing_to_read_and_no_time_to_wait_is_answered_empty(ctx: BrokerContext, max_wait_ms: int) -> None:
    async def run() -> fetch.FetchResponse:
        answer = fetch_now(ctx, request({0: 0}, max_wait_ms=max_wait_ms), VERSION, CLIENT)
        if max_wait_ms == 0:
            assert isinstance(answer, fetch.FetchResponse)
            return answer
        assert isinstance(answer, Later)  # time to wait: it waits, then answers empty
        return await asyncio.wait_for(answer.answer, TEST_TIMEOUT_S)
    assert sizes(asyncio.run(run())) == {0: (0, 0)}


@pytest.mark.parametrize(("isolation_level", "session"), [
    (fetch.READ_UNCOMMITTED, (0, FINAL_EPOCH)),
    (fetch.READ_COMMITTED, (0, FINAL_EPOCH)),  # librdkafka's default fetch
    (fetch.READ_UNCOMMITTED, (0, 0)),  # a full fetch opening a session
])
def test_a_response_cut_by_partition_max_bytes_ends_on_a_batch_boundary(
        ctx: BrokerContext, isolation_level: int, session: tuple[int, int]) -> None:
    """Kafka would send the first batch and 7 bytes of the next, which the client drops and
    fetches again (broker.log.log_read.whole_batches)."""
    for _ in range(3):
        ctx.replicas.append(T0, batch(3), acks=1)
    one = len(batch(3))
    req = dataclasses.replace(request({0: 0}, session=session), isolation_level=isolation_level, topics=(
        fetch.FetchTopic("t", (fetch.FetchPartition(0, 0, one + 7, 0, 3),)),))

    async def run() -> object:
        return fetch_now(ctx, req, VERSION, CLIENT)
    answer = asyncio.run(run())
    assert isinstance(answer, fetch.FetchResponse)
    assert sizes(answer) == {0: (0, one)}


def test_an_error_answers_at_once(ctx: BrokerContext) -> None:
    async def run() -> object:
        return fetch_now(ctx, request({0: 0, 7: 0}), VERSION, CLIENT)
    answer = asyncio.run(run())
    assert isinstance(answer, fetch.FetchResponse)
    assert sizes(answer)[7][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_waiting_full_fetch_is_answered_when_data_arrives(ctx: BrokerContext) -> None:
    async def run() -> fetch.FetchResponse:
        answer = fetch_now(ctx, request({0: 0, 1: 0}), VERSION, CLIENT)
        assert isinstance(answer, Later)
        waiting = asyncio.ensure_future(answer.answer)
        await asyncio.sleep(0)  # the wait is parked on the partitions
        assert not waiting.done()
        ctx.replicas.append(T1, batch(2), acks=1)
        return await asyncio.wait_for(waiting, TEST_TIMEOUT_S)
    assert sizes(asyncio.run(run())) == {0: (0, 0), 1: (0, len(batch(2)))}


def test_a_session_fetch_answers_at_once_or_waits_for_a_change(ctx: BrokerContext) -> None:
    """The full fetch opens a session at once; an incremental one with nothing changed waits
    and answers only the partition that changed; the next one, with data, is direct again."""
    ctx.replicas.append(T0, batch(1), acks=1)

    async def run() -> None:
        opened = fetch_now(ctx, request({0: 0, 1: 0}, session=(0, 0)), VERSION, CLIENT)
        assert isinstance(opened, fetch.FetchResponse) and opened.session_id != 0
        assert sizes(opened) == {0: (0, len(batch(1))), 1: (0, 0)}
        session = (opened.session_id, 1)
        idle = fetch_now(ctx, request({0: 1}, session=session), VERSION, CLIENT)
        assert isinstance(idle, Later)
        waiting = asyncio.ensure_future(idle.answer)
        await asyncio.sleep(0)
        assert not waiting.done()
        ctx.replicas.append(T1, batch(2), acks=1)
        woken = await asyncio.wait_for(waiting, TEST_TIMEOUT_S)
        assert woken.session_id == opened.session_id and sizes(woken) == {1: (0, len(batch(2)))}
        ctx.replicas.append(T0, batch(1), acks=1)
        direct = fetch_now(ctx, request({0: 1, 1: 2}, session=(opened.session_id, 2)), VERSION, CLIENT)
        assert isinstance(direct, fetch.FetchResponse) and sizes(direct) == {0: (0, len(batch(1)))}
    asyncio.run(run())


def v16_request(offsets: dict[int, int], *, leader_epoch: int = 3) -> fetch.FetchRequest:
    """librdkafka's shape since 2.5: Fetch v16, topics by id, sessionless."""
    parts = tuple(fetch.FetchPartition(p, offsets[p], 1 << 20, 0, leader_epoch) for p in offsets)
    return fetch.FetchRequest(CONSUMER, WAIT_MS, 1, 1 << 20, fetch.READ_UNCOMMITTED,
                              (fetch.FetchTopic("", parts, wire_topic_id("T")),), 0, FINAL_EPOCH)


def test_v16_looks_leaders_up_only_for_an_answer_with_an_error(ctx: BrokerContext, monkeypatch) -> None:
    """KIP-951's hints go on NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH answers; a fetch
    without a failed partition (nearly every one) does not walk its answers for them."""
    looked_up: list[int] = []
    real = fetch_handler.with_leader_hints

    def counted(*args):
        looked_up.append(1)
        return real(*args)

    monkeypatch.setattr(fetch_handler, "with_leader_hints", counted)
    ctx.replicas.append(T0, batch(1), acks=1)

    async def run() -> tuple[object, object]:
        return fetch_now(ctx, v16_request({0: 0}), 16, CLIENT), fetch_now(ctx, v16_request({0: 0}, leader_epoch=2), 16, CLIENT)

    ok, fenced = asyncio.run(run())
    assert isinstance(ok, fetch.FetchResponse) and isinstance(fenced, fetch.FetchResponse)
    assert sizes(ok) == {0: (0, len(batch(1)))} and ok.node_endpoints == ()
    assert sizes(fenced) == {0: (int(ErrorCode.FENCED_LEADER_EPOCH), 0)}
    assert fenced.responses[0].partitions[0].current_leader == LeaderIdAndEpoch(1, 3)
    assert [e.node_id for e in fenced.node_endpoints] == [1]
    assert looked_up == [1]  # the fenced fetch's only


def test_a_hand_written_topic_id_is_named_without_a_walk_the_next_time(monkeypatch) -> None:
    """An id not minted as the controller mints them (test and bench images) is found by a
    walk over the image's topics once; then at once, as a minted one is."""
    walked: list[str] = []
    real = fetch_partitions.wire_topic_id

    def counted(topic_id: str):
        walked.append(topic_id)
        return real(topic_id)

    monkeypatch.setattr(fetch_partitions, "wire_topic_id", counted)
    monkeypatch.setattr(fetch_partitions, "_minted_ids", {})
    assert fetch_partitions.topic_name(IMAGE, real("T")) == "t"
    first = len(walked)
    assert fetch_partitions.topic_name(IMAGE, real("T")) == "t"
    assert first == 1 and len(walked) == first


@pytest.mark.parametrize("session", [(0, FINAL_EPOCH), "incremental"])
def test_a_waiting_fetch_is_a_future_with_no_task(ctx: BrokerContext, session: tuple[int, int] | str) -> None:
    """Issue 35: a fetch that must wait costs the broker no task, coroutine or asyncio timeout:
    its answer is a future the server awaits (broker.server takes a future as is), set where
    its partition changes; its deadline is one timer of the broker's timer service."""
    async def run() -> fetch.FetchResponse:
        if session == "incremental":
            opened = fetch_now(ctx, request({0: 0, 1: 0}, session=(0, 0), max_wait_ms=0), VERSION, CLIENT)
            assert isinstance(opened, fetch.FetchResponse)
            req = request({}, session=(opened.session_id, 1))
        else:
            req = request({0: 0, 1: 0})
        tasks = len(asyncio.all_tasks())
        timers = len(ctx.replicas.timers)
        answer = fetch_now(ctx, req, VERSION, CLIENT)
        assert isinstance(answer, Later) and isinstance(answer.answer, asyncio.Future)
        assert len(asyncio.all_tasks()) == tasks and len(ctx.replicas.timers) == timers + 1
        # woken in the next loop pass, not inside the append: a produce over both is read whole
        ctx.replicas.append(T0, batch(2), acks=1)
        ctx.replicas.append(T1, batch(1), acks=1)
        return await asyncio.wait_for(answer.answer, TEST_TIMEOUT_S)
    assert sizes(asyncio.run(run())) == {0: (0, len(batch(2))), 1: (0, len(batch(1)))}


@pytest.mark.parametrize("session", [(0, FINAL_EPOCH), "incremental"])
def test_a_waiting_fetch_whose_connection_closed_is_forgotten_at_its_deadline(
        ctx: BrokerContext, session: tuple[int, int] | str) -> None:
    """The server cancels the future of a closed connection's request: nothing answers it, and
    at its deadline the fetch leaves the session and the purgatory."""
    assert ctx.fetch_sessions is not None
    sessions = ctx.fetch_sessions

    async def run() -> None:
        parked_on = None
        if session == "incremental":
            opened = fetch_now(ctx, request({0: 0, 1: 0}, session=(0, 0), max_wait_ms=0), VERSION, CLIENT)
            assert isinstance(opened, fetch.FetchResponse)
            parked_on = sessions.cache.get(opened.session_id)
            req = request({}, session=(opened.session_id, 1), max_wait_ms=50)
        else:
            req = request({0: 0}, max_wait_ms=50)
        answer = fetch_now(ctx, req, VERSION, CLIENT)
        assert isinstance(answer, Later) and isinstance(answer.answer, asyncio.Future)
        if parked_on is not None:
            assert sessions.parked(parked_on) is not None
        else:
            assert ctx.replicas.waiting_count(T0) == 1
        answer.answer.cancel()
        await asyncio.sleep(0.2)
        assert len(ctx.replicas.timers) == 0 and ctx.replicas.waiting_count(T0) == 0
        if parked_on is not None:
            assert sessions.parked(parked_on) is None
    asyncio.run(run())



@pytest.mark.parametrize("session", [(0, FINAL_EPOCH), "incremental"])
def test_a_woken_fetch_s_answer_is_heard_in_the_pass_that_reads_it(ctx: BrokerContext,
                                                                    session: tuple[int, int] | str) -> None:
    """The server listens on an AnswerFuture (broker.purgatory) and writes the answer in the turn
    that sets it: a woken fetch's answer goes out in the loop pass after the change, not one later."""
    async def run() -> list[object]:
        if session == "incremental":
            opened = fetch_now(ctx, request({0: 0}, session=(0, 0), max_wait_ms=0), VERSION, CLIENT)
            assert isinstance(opened, fetch.FetchResponse)
            req = request({}, session=(opened.session_id, 1))
        else:
            req = request({0: 0})
        answer = fetch_now(ctx, req, VERSION, CLIENT)
        assert isinstance(answer, Later) and isinstance(answer.answer, AnswerFuture)
        heard: list[object] = []
        answer.answer.listener = heard.append
        ctx.replicas.append(T0, batch(1), acks=1)
        await asyncio.sleep(0)  # one loop pass
        return heard
    assert len(asyncio.run(run())) == 1


def test_each_waiting_session_fetch_has_its_own_deadline_which_its_answer_cancels(ctx: BrokerContext) -> None:
    """Every parked incremental fetch's deadline is a timer of the broker's keyed by the fetch
    (a schedule is a heap push, a cancel a dict pop: broker.timers): it runs at the deadline if
    the fetch still waits, and goes when a change answers the fetch first, not left to run."""
    async def run() -> None:
        timers = ctx.replicas.timers
        waiting = []
        for wait_ms in (50, 80):
            opened = fetch_now(ctx, request({0: 0}, session=(0, 0), max_wait_ms=0), VERSION, CLIENT)
            assert isinstance(opened, fetch.FetchResponse)
            answer = fetch_now(ctx, request({}, session=(opened.session_id, 1), max_wait_ms=wait_ms),
                               VERSION, CLIENT)
            assert isinstance(answer, Later)
            waiting.append(answer.answer)
        assert len(timers) == 2
        first = await asyncio.wait_for(waiting[0], TEST_TIMEOUT_S)  # its deadline: answered empty
        assert sizes(first) == {} and not waiting[1].done() and len(timers) == 1
        ctx.replicas.append(T0, batch(1), acks=1)
        assert sizes(await asyncio.wait_for(waiting[1], TEST_TIMEOUT_S)) == {0: (0, len(batch(1)))}
        assert len(timers) == 0  # answered before its deadline: cancelled in the pass that answered it
    asyncio.run(run())


T2 = TopicPartition("t", 2)


@pytest.mark.parametrize(("carry", "marked", "answered", "order"), [
    ((), (), (), []),
    ((T0,), (), (), [T0]),
    ((), (T0,), (T0,), [T0]),
    ((T0,), (T0,), (T0,), [T0]),  # a partition both carried and marked is read once
    ((T0, T1), (), (T0,), [T1, T0]),  # answered with records: last
    ((T1,), (T0, T1), (), [T1, T0]),  # carried first, then marked, in their order
    ((T0,), (T1, T2), (T0, T2), [T1, T0, T2]),
])
def test_the_next_fetch_reads_unanswered_partitions_first(carry, marked, answered, order) -> None:
    """`_carry_order`: what the next incremental fetch reads, in order (Kafka's round robin:
    partitions answered with records move to the end); an answer without records is not
    'answered' here."""
    report = {tp: fetch.FetchPartitionResponse(tp.partition, 0, 10, batch(1) if tp in answered else b"", 10, 0)
              for tp in (T0, T1, T2)}
    assert fetch_handler._carry_order(carry, marked, report) == order
