"""broker/fetch_sessions.py's pending wakes, drained where a request's synchronous part ends
(broker/request_handler.py `start`, Kafka's KafkaApis.handle `finally tryCompleteActions`):
a parked session fetch made due by a request reads after all the request's appends, before
the request's turn ends; one made due outside any request (a timer) is woken one loop pass
later, by one drain however many fetches it wakes.

A real ReplicaManager, RequestHandler and FetchSessions on the leader of pair-0 and pair-1
(replicas 1 and 2); the fetches are follower 2's and a consumer's, sent as encoded requests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.fetch_sessions import MAX_WAKE_ROUNDS, FetchSessions
from broker.handlers.fetch_partitions import size_of
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.request_handler import RequestHandler
from broker.server import Encoding, Later
from common.log_config import LogConfig
from common.protocol import fetch, produce
from common.protocol.api_keys import ApiKey
from common.protocol.frame import RequestHeader, encode_request_header, parse_request_header
from common.protocol.primitives import Chunk
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from tests.log_helpers import NOW, batch
from tests.unit.test_produce_replicated import PAIR, PAIR_0, PAIR_1
from tests.unit.test_request_handler import ADVERTISED, ME, flatten, produce_request

FOLLOWER = 2
CONSUMER = -1
FETCH_VERSION = 11  # sessions, topics by name
PRODUCE_VERSION = 8
WAIT_MS = 5_000  # far longer than any test waits: a fetch not woken fails the test by staying undone


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[tuple[RequestHandler, ReplicaManager, FetchSessions]]:
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, PAIR, ME), PAIR)
    handler = RequestHandler(ME, replicas, lambda: PAIR, ADVERTISED, None)
    assert handler.context.fetch_sessions is not None
    yield handler, replicas, handler.context.fetch_sessions
    log_manager.shutdown()


def start(handler: RequestHandler, api: ApiKey, version: int, request: Any,
          encode: Callable[[Any, int], list[Chunk]]) -> list[Chunk] | None | Later[list[Chunk] | None]:
    """The request's synchronous part, as the server runs it in the receiver's turn."""
    frame = encode_request_header(RequestHeader(api, version, 7, "test")) + flatten(encode(request, version))
    header, body = parse_request_header(frame)
    return handler.start(header, body)


def fetch_request(replica_id: int, offsets: dict[int, int], session: tuple[int, int], *,
                  max_wait_ms: int = WAIT_MS, min_bytes: int = 1) -> fetch.FetchRequest:
    parts = tuple(fetch.FetchPartition(p, o, 1 << 20, 0, -1) for p, o in offsets.items())
    return fetch.FetchRequest(replica_id, max_wait_ms, min_bytes, 1 << 20, fetch.READ_UNCOMMITTED,
                              (fetch.FetchTopic("pair", parts),) if parts else (), *session)


def send_fetch(handler: RequestHandler, request: fetch.FetchRequest) -> Any:
    return start(handler, ApiKey.FETCH, FETCH_VERSION, request, fetch.encode_fetch_request)


def decoded(chunks: list[Chunk] | None) -> fetch.FetchResponse:
    assert chunks is not None
    return fetch.decode_fetch_response(memoryview(flatten(chunks)), FETCH_VERSION)


def open_session(handler: RequestHandler, replica_id: int, offsets: dict[int, int]) -> int:
    """A full fetch answered at once (max_wait 0): the session's id."""
    answer = send_fetch(handler, fetch_request(replica_id, offsets, (0, 0), max_wait_ms=0, min_bytes=0))
    assert not isinstance(answer, Later)
    session_id = decoded(answer).session_id
    assert session_id != 0
    return session_id


def park(handler: RequestHandler, replica_id: int, session_id: int, epoch: int,
         offsets: dict[int, int] | None = None, *, max_wait_ms: int = WAIT_MS, min_bytes: int = 1
         ) -> Encoding[Any, list[Chunk]]:
    """An incremental fetch that finds nothing and waits (parked on its session)."""
    answer = send_fetch(handler, fetch_request(replica_id, offsets or {}, (session_id, epoch),
                                               max_wait_ms=max_wait_ms, min_bytes=min_bytes))
    assert isinstance(answer, Later) and isinstance(answer.answer, Encoding)
    assert not answer_of(answer.answer).done()
    return answer.answer


def answer_of(encoding: Encoding[Any, list[Chunk]]) -> asyncio.Future[Any]:
    future = encoding.pending
    assert isinstance(future, asyncio.Future)
    return future


def records(encoding: Encoding[Any, list[Chunk]]) -> dict[int, int]:
    """partition -> bytes of records in the (done) fetch's answer."""
    response = decoded(encoding.encoded(answer_of(encoding).result()))
    return {p.partition_index: size_of(p) for t in response.responses for p in t.partitions}


def send_produce(handler: RequestHandler, acks: int) -> Any:
    return start(handler, ApiKey.PRODUCE, PRODUCE_VERSION,
                 produce_request(acks, ("pair", 0, batch(2)), ("pair", 1, batch(3))), produce.encode_produce_request)


BOTH = {0: len(batch(2)), 1: len(batch(3))}  # what a produce of both partitions appends


async def test_a_produce_wakes_its_followers_fetch_in_its_own_turn_after_all_its_appends(leader) -> None:
    """The follower's fetch is answered when the produce's `start` returns (no loop pass), with
    both partitions' batches: woken after the request's last append, not inside its first."""
    handler, _, sessions = leader
    session_id = open_session(handler, FOLLOWER, {0: 0, 1: 0})
    parked = park(handler, FOLLOWER, session_id, 1)
    assert send_produce(handler, 1) is not None  # acks=1: answered at once
    assert answer_of(parked).done()
    assert records(parked) == BOTH
    assert sessions.pending_wakes == []


async def test_the_followers_next_fetch_wakes_a_consumer_in_its_own_turn(leader) -> None:
    """acks=all: the follower's next fetch moves the high watermark; the consumer's parked fetch
    it makes due reads in that fetch request's turn, as the produce's answer completes there."""
    handler, _, _ = leader
    consumer_session = open_session(handler, CONSUMER, {0: 0, 1: 0})
    consumer = park(handler, CONSUMER, consumer_session, 1)
    follower_session = open_session(handler, FOLLOWER, {0: 0, 1: 0})
    follower = park(handler, FOLLOWER, follower_session, 1)
    produced = send_produce(handler, -1)
    assert isinstance(produced, Later)  # waits for the follower
    assert answer_of(follower).done() and records(follower) == BOTH
    assert not answer_of(consumer).done()  # below the high watermark: nothing to answer yet
    park(handler, FOLLOWER, follower_session, 2, {0: 2, 1: 3})  # it has both: the HW moves
    assert answer_of(consumer).done()
    assert records(consumer) == BOTH
    produce_answer = produced.answer
    assert isinstance(produce_answer, Encoding) and answer_of(produce_answer).done()


async def test_a_fetch_its_wake_parks_again_stays_parked(leader) -> None:
    """A woken fetch that still has too little (min_bytes) parks again in the produce's turn,
    and answers what it read at its deadline."""
    handler, _, sessions = leader
    session_id = open_session(handler, FOLLOWER, {0: 0, 1: 0})
    parked = park(handler, FOLLOWER, session_id, 1, max_wait_ms=50, min_bytes=1 << 20)
    send_produce(handler, 1)
    session = sessions.cache.get(session_id)
    assert session is not None
    assert sessions.parked(session) is not None and sessions.pending_wakes == []
    assert not answer_of(parked).done()
    await asyncio.wait_for(asyncio.shield(answer_of(parked)), 5.0)
    assert records(parked) == BOTH


async def test_a_change_outside_any_request_wakes_in_the_next_loop_pass_by_one_drain(
        leader, monkeypatch) -> None:
    """A timer appends to both partitions (no request running): neither of the two parked
    fetches reads inside the timer's turn; one drain, scheduled once, wakes both in the next
    loop pass, each reading both appends."""
    handler, replicas, sessions = leader
    parked = [park(handler, FOLLOWER, open_session(handler, FOLLOWER, {0: 0, 1: 0}), 1) for _ in range(2)]
    loop = asyncio.get_running_loop()
    scheduled: list[object] = []
    call_soon = loop.call_soon

    def counted(callback: Callable[..., object], *args: Any, **kwargs: Any) -> asyncio.Handle:
        if getattr(callback, "__self__", None) is sessions:  # a wake or drain of the fetch sessions
            scheduled.append(callback)
        return call_soon(callback, *args, **kwargs)
    monkeypatch.setattr(loop, "call_soon", counted)
    seen: list[list[bool]] = []

    def woken() -> None:
        seen.append([answer_of(p).done() for p in parked])

    def timer() -> None:
        replicas.append(PAIR_0, batch(2), acks=1)
        woken()
        replicas.append(PAIR_1, batch(3), acks=1)
        woken()
        loop.call_soon(woken)  # the next loop pass, after what the appends scheduled
    done = loop.create_future()
    loop.call_soon(timer)
    loop.call_soon(lambda: loop.call_soon(done.set_result, None))  # two passes on
    await asyncio.wait_for(done, 5.0)
    assert seen == [[False, False], [False, False], [True, True]]
    assert len(scheduled) == 1
    assert [records(p) for p in parked] == [BOTH, BOTH]


class Restless:
    """A parked fetch whose wake parks it again on its session while the session is still due
    (the shape of a bug, or a change every read makes), until it has been woken `limit` times."""

    def __init__(self, sessions: FetchSessions, session_id: int, limit: int, *, fail: bool = False) -> None:
        session = sessions.cache.get(session_id)
        assert session is not None
        self.sessions, self.session, self.limit, self.fail = sessions, session, limit, fail
        self.wakes = 0

    def wake(self) -> None:
        self.wakes += 1
        if self.fail:
            raise RuntimeError("a parked fetch's bug")
        if self.wakes < self.limit:
            self.sessions.park(self.session, self)

    def expire(self) -> None:
        pass

    def done(self) -> bool:
        return self.wakes >= self.limit


async def test_a_chain_of_wakes_is_bounded_per_turn_and_the_rest_waits_a_loop_pass(leader) -> None:
    """A fetch its every wake makes due again is woken MAX_WAKE_ROUNDS times in the produce's
    turn, which then ends; the rest is woken in the next loop pass."""
    handler, _, sessions = leader
    restless = Restless(sessions, open_session(handler, FOLLOWER, {0: 0, 1: 0}), 3 * MAX_WAKE_ROUNDS)
    sessions.park(restless.session, restless)
    send_produce(handler, 1)
    assert restless.wakes == MAX_WAKE_ROUNDS and sessions.pending_wakes == [restless]
    await asyncio.sleep(0)  # the drain scheduled for the rest runs before this task resumes
    assert restless.wakes == 2 * MAX_WAKE_ROUNDS


async def test_a_wake_that_fails_is_logged_and_the_others_still_wake(leader, caplog) -> None:
    handler, _, sessions = leader
    failing = Restless(sessions, open_session(handler, FOLLOWER, {0: 0, 1: 0}), 1, fail=True)
    sessions.park(failing.session, failing)
    parked = park(handler, FOLLOWER, open_session(handler, FOLLOWER, {0: 0, 1: 0}), 1)
    assert send_produce(handler, 1) is not None  # the produce is answered: the failure is not its
    assert failing.wakes == 1 and answer_of(parked).done() and records(parked) == BOTH
    assert "Waking a parked fetch failed" in caplog.text
