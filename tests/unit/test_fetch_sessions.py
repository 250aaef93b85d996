"""broker/fetch_sessions.py over a real ReplicaManager: change marks, wake-ups, and idle
follower session fetches counted for the follower's lag."""

from __future__ import annotations

import asyncio
import random

import pytest

from broker.fetch_session import CachedPartition, FetchMetadata, FetchSession, IncrementalFetch
from broker.fetch_sessions import FetchSessions
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from common.topic_partition import TopicPartition
from common.protocol.fetch import FetchPartition
from common.log_config import LogConfig
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from tests.log_helpers import NOW, batch
from tests.unit.test_replica_manager import ME, TOPICS, TRIPLE_0

LAG_MS = 30_000
FOLLOWER = 2


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def setup(tmp_path):
    clock = Clock()
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    manager = ReplicaManager(ME, log_manager, now_ms=clock, replica_lag_time_max_ms=LAG_MS)
    manager.apply_changes(changes_for_broker(EMPTY_IMAGE, TOPICS, ME), TOPICS)
    sessions = FetchSessions(manager, max_entries=10, rng=random.Random(7))
    yield clock, manager, sessions
    log_manager.shutdown()


async def wait(sessions: FetchSessions, session: FetchSession, timeout_s: float) -> None:
    """A fetch parked on `session` until woken, or `timeout_s` (the handler's deadline timer)."""
    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    class Parked:
        def wake(self) -> None:
            if not woken.done():
                woken.set_result(None)

    parked = Parked()
    sessions.park(session, parked)
    try:
        await asyncio.wait_for(woken, timeout_s)
    except TimeoutError:
        pass
    finally:
        sessions.unpark(session, parked)


def open_follower_session(manager: ReplicaManager, sessions: FetchSessions, offset: int) -> int:
    """A full fetch of TRIPLE_0 by the follower at `offset` (read, then the session created)."""
    request = FetchPartition(0, offset, 1 << 20, 0, -1)
    context = sessions.new_context(FetchMetadata(0, 0), {TRIPLE_0: request}, [], replica_id=FOLLOWER, uses_topic_ids=False)
    assert not isinstance(context, IncrementalFetch)
    read = manager.read(TRIPLE_0, offset, 1 << 20, replica_id=FOLLOWER, replica_log_start_offset=0)
    cached = CachedPartition.of(request)  # with what the answer told it (the handler's must_respond)
    cached.high_watermark, cached.local_log_start_offset = read.high_watermark, read.log_start_offset
    return sessions.create(FOLLOWER, {TRIPLE_0: cached}, [], uses_topic_ids=False)


def idle_fetch(sessions: FetchSessions, session_id: int, epoch: int) -> None:
    context = sessions.new_context(FetchMetadata(session_id, epoch), {}, [], replica_id=FOLLOWER, uses_topic_ids=False)
    assert isinstance(context, IncrementalFetch)


def shrink(manager: ReplicaManager, now: int) -> tuple[int, ...] | None:
    return manager.partitions[TRIPLE_0].isr_to_shrink(ME, now, LAG_MS)


def test_idle_session_fetches_count_for_the_followers_lag(setup) -> None:
    clock, manager, sessions = setup
    session_id = open_follower_session(manager, sessions, 0)
    clock.now += 2 * LAG_MS
    idle_fetch(sessions, session_id, 1)  # names nothing: the follower is still at the log end
    clock.now += 1
    manager.append(TRIPLE_0, batch(2), acks=1)  # the log end moves past the follower
    clock.now += 1
    # Follower 3 never fetched: out. Follower 2 fetched (idly) 2 ms ago: in.
    assert shrink(manager, clock.now) == (ME, FOLLOWER)
    session = sessions.cache.get(session_id)
    assert session is not None and list(session.changed) == [TRIPLE_0]


def test_a_stuck_follower_still_leaves_the_isr(setup) -> None:
    """Its idle fetches go on, but once the partition is marked changed (data it does not
    take), they no longer count: it is out after the lag, as in Kafka."""
    clock, manager, sessions = setup
    session_id = open_follower_session(manager, sessions, 0)
    manager.append(TRIPLE_0, batch(2), acks=1)
    for epoch in range(1, 5):
        clock.now += LAG_MS // 2
        idle_fetch(sessions, session_id, epoch)
    assert FOLLOWER not in (shrink(manager, clock.now) or (ME, FOLLOWER))


def test_a_change_wakes_the_parked_fetch(setup) -> None:
    _clock, manager, sessions = setup
    session_id = open_follower_session(manager, sessions, 0)
    session = sessions.cache.get(session_id)
    assert session is not None

    async def run() -> float:
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, lambda: manager.append(TRIPLE_0, batch(1), acks=1))
        started = loop.time()
        await wait(sessions, session, 5.0)
        return loop.time() - started

    assert asyncio.run(run()) < 2.0
    assert session.take_changed() == [TRIPLE_0]


def test_a_wait_without_changes_ends_at_its_timeout(setup) -> None:
    _clock, manager, sessions = setup
    session = sessions.cache.get(open_follower_session(manager, sessions, 0))
    assert session is not None
    asyncio.run(wait(sessions, session, 0.05))
    assert not session.changed


def test_other_partitions_do_not_mark_the_session(setup) -> None:
    _clock, manager, sessions = setup
    session = sessions.cache.get(open_follower_session(manager, sessions, 0))
    assert session is not None
    manager.append(TopicPartition("orders", 0), batch(1), acks=1)
    assert not session.changed


def test_a_change_s_wait_for_the_followers_next_fetch_is_counted(setup) -> None:
    """An append marked at t waits for the follower's fetch at t + 40 ms: 40 ms, observed once
    (the next take finds nothing), bucketed in the histogram /metrics shows."""
    clock, manager, sessions = setup
    session = sessions.cache.get(open_follower_session(manager, sessions, 0))
    assert session is not None
    manager.append(TRIPLE_0, batch(1), acks=1)
    assert session.changed_since_ms == clock.now
    clock.now += 40
    manager.append(TRIPLE_0, batch(1), acks=1)  # a later change: the oldest one's wait counts
    clock.now += 1
    assert sessions.take_changed(session) == [TRIPLE_0]
    assert session.changed_since_ms == -1
    assert sessions.take_changed(session) == []
    waits = sessions.follower_fetch_wait
    assert (sum(waits.counts), waits.longest_ms) == (1, 41)


def test_a_consumer_session_s_waits_are_not_counted(setup) -> None:
    _clock, manager, sessions = setup
    request = FetchPartition(0, 0, 1 << 20, 0, -1)
    session = sessions.cache.get(sessions.create(-1, {TRIPLE_0: CachedPartition.of(request)}, [TRIPLE_0],
                                                 uses_topic_ids=False))
    assert session is not None
    assert sessions.take_changed(session) == [TRIPLE_0]
    assert sum(sessions.follower_fetch_wait.counts) == 0


def test_a_high_watermark_move_wakes_a_consumers_parked_fetch_not_a_followers(setup) -> None:
    """Kafka's DelayedFetch for a follower completes on bytes past its fetch offset, not on a
    HW move (KAFKA-9952); a consumer reads up to the HW, so the move is its bytes. The
    follower's partition is still marked, not due: read at its fetch's deadline or the next
    append, so its answer carries the HW; its wait is not counted as a change waiting."""
    _clock, manager, sessions = setup
    follower_id = open_follower_session(manager, sessions, 0)
    follower = sessions.cache.get(follower_id)
    consumer = sessions.cache.get(sessions.create(-1, {TRIPLE_0: CachedPartition.of(FetchPartition(0, 0, 1 << 20, 0, -1))},
                                                  [], uses_topic_ids=False))
    assert follower is not None and consumer is not None
    manager.append(TRIPLE_0, batch(1), acks=1)
    assert sessions.take_changed(follower) == [TRIPLE_0] and sessions.take_changed(consumer) == [TRIPLE_0]
    # the follower's next fetch, at the log end: its session now holds offset 1
    context = sessions.new_context(FetchMetadata(follower_id, 1), {TRIPLE_0: FetchPartition(0, 1, 1 << 20, 0, -1)},
                                   [], replica_id=FOLLOWER, uses_topic_ids=False)
    assert isinstance(context, IncrementalFetch)

    def move_high_watermark() -> None:
        for replica in (FOLLOWER, 3):
            manager.read(TRIPLE_0, 1, 1 << 20, replica_id=replica, replica_log_start_offset=0)
        assert manager.partitions[TRIPLE_0].log.high_watermark == 1

    async def run() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        loop.call_later(0.01, move_high_watermark)
        consumer_woken, _ = await asyncio.gather(_timed(wait(sessions, consumer, 5.0)),
                                                 wait(sessions, follower, 0.3))
        follower_waited = loop.time() - started
        loop.call_later(0.01, lambda: manager.append(TRIPLE_0, batch(1), acks=1))
        follower_woken = await _timed(wait(sessions, follower, 5.0))
        return consumer_woken, follower_waited, follower_woken

    consumer_woken, follower_waited, follower_woken = asyncio.run(run())
    assert consumer_woken < 0.25 <= follower_waited and follower_woken < 2.0
    assert sessions.take_changed(follower) == [TRIPLE_0]
    waits = sessions.follower_fetch_wait
    assert sum(waits.counts) == 2 and waits.longest_ms < 100  # the appends' waits, not the HW's


async def _timed(waiting) -> float:
    loop = asyncio.get_running_loop()
    started = loop.time()
    await waiting
    return loop.time() - started


def test_an_append_below_the_high_watermark_does_not_wake_a_consumers_parked_fetch(setup) -> None:
    """A consumer reads to the HW: an acks=all append the followers do not have yet gives it
    no bytes; the HW move that follows does (it is marked, not due, until then)."""
    _clock, manager, sessions = setup
    cached = CachedPartition.of(FetchPartition(0, 0, 1 << 20, 0, -1))
    cached.high_watermark, cached.local_log_start_offset = 0, 0  # what its full fetch told it
    consumer = sessions.cache.get(sessions.create(-1, {TRIPLE_0: cached}, [], uses_topic_ids=False))
    assert consumer is not None

    def move_high_watermark() -> None:
        for replica in (FOLLOWER, 3):
            manager.read(TRIPLE_0, 1, 1 << 20, replica_id=replica, replica_log_start_offset=0)

    async def run() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, lambda: manager.append(TRIPLE_0, batch(1), acks=-1))
        appended = await _timed(wait(sessions, consumer, 0.3))
        assert list(consumer.changed) == [TRIPLE_0] and not consumer.due
        loop.call_later(0.01, move_high_watermark)
        return appended, await _timed(wait(sessions, consumer, 5.0))

    appended, moved = asyncio.run(run())
    assert appended >= 0.25 and moved < 2.0
    assert sessions.take_changed(consumer) == [TRIPLE_0]
