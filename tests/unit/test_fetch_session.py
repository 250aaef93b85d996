"""broker.fetch_session: KIP-227's rules (sessions, their cache, new_context), as tables."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    MAX_SESSION_ID,
    CachedPartition,
    FetchMetadata,
    FetchSessionCache,
    FullFetch,
    IncrementalFetch,
    SessionError,
    Sessionless,
    new_context,
    next_epoch,
)
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol.fetch import EpochEndOffset, FetchPartition, FetchPartitionResponse

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
P0 = FetchPartition(0, fetch_offset=10, partition_max_bytes=1000, log_start_offset=0, current_leader_epoch=3)
P1 = FetchPartition(1, fetch_offset=20, partition_max_bytes=1000)
EVICTION_MS = 120_000
FOLLOWER, CONSUMER = 5, -1


def sequential_ids() -> Callable[[int, int], int]:
    counter = itertools.count(1)
    return lambda low, high: next(counter)


def cache(max_entries: int = 3) -> FetchSessionCache:
    return FetchSessionCache(new_session_id=sequential_ids(), max_entries=max_entries, eviction_ms=EVICTION_MS)


def parts(n: int) -> dict[TopicPartition, CachedPartition]:
    return {TopicPartition("t", i): CachedPartition(1000, 0, -1, -1) for i in range(n)}


@pytest.mark.parametrize(("epoch", "expected"), [
    (0, 1), (1, 2), (MAX_SESSION_ID, 1), (FINAL_EPOCH, FINAL_EPOCH), (-5, FINAL_EPOCH)])
def test_next_epoch(epoch: int, expected: int) -> None:
    assert next_epoch(epoch) == expected


def answer(hw: int = 5, log_start: int = 0, error: int = 0, records: bytes = b"",
           preferred: int = -1) -> FetchPartitionResponse:
    return FetchPartitionResponse(0, error, hw, records, hw, log_start, None, preferred)


# (cached (hw, local log start), answer, must respond, cached hw after)
MUST_RESPOND = [
    ((5, 0), answer(), False, 5),
    ((5, 0), answer(records=b"x"), True, 5),  # new records
    ((4, 0), answer(), True, 5),  # HW moved
    ((5, 1), answer(), True, 5),  # log start moved
    ((5, 0), answer(preferred=2), True, 5),  # a preferred read replica
    ((5, 0), answer(error=int(ErrorCode.NOT_LEADER_OR_FOLLOWER)), True, -1),  # errors: HW forgotten
    ((5, 0), FetchPartitionResponse(0, 0, 5, b"", 5, 0, diverging_epoch=EpochEndOffset(2, 3)), True, 5),
]


@pytest.mark.parametrize(("cached", "given", "respond", "hw_after"), MUST_RESPOND)
def test_must_respond(cached: tuple[int, int], given: FetchPartitionResponse, respond: bool, hw_after: int) -> None:
    partition = CachedPartition(1000, 0, -1, -1, high_watermark=cached[0], local_log_start_offset=cached[1])
    assert partition.must_respond(given, update=False) is respond
    assert partition.high_watermark == cached[0]  # update=False changes nothing
    assert partition.must_respond(given, update=True) is respond
    assert partition.high_watermark == hw_after
    if not given.error_code:
        assert partition.must_respond(given, update=True) is (len(given.records or b"") > 0
                                                              or given.preferred_read_replica >= 0
                                                              or given.diverging_epoch is not None)


# (metadata, existing session epoch or None, expected context type or error)
CONTEXTS = [
    (FetchMetadata(0, INITIAL_EPOCH), None, FullFetch),
    (FetchMetadata(0, FINAL_EPOCH), None, Sessionless),
    (FetchMetadata(1, INITIAL_EPOCH), 1, FullFetch),  # closes session 1, asks for a new one
    (FetchMetadata(1, FINAL_EPOCH), 1, Sessionless),  # closes session 1
    (FetchMetadata(1, 1), 1, IncrementalFetch),
    (FetchMetadata(1, 2), 1, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
    (FetchMetadata(9, 1), 1, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
    (FetchMetadata(9, 1), None, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
]


@pytest.mark.parametrize(("metadata", "session_epoch", "expected"), CONTEXTS)
def test_new_context(metadata: FetchMetadata, session_epoch: int | None, expected: object) -> None:
    sessions = cache()
    if session_epoch is not None:
        assert sessions.maybe_create_session(0, CONSUMER, parts(2)) == 1
    context = new_context(sessions, metadata, {}, [], replica_id=CONSUMER, now_ms=10)
    if isinstance(expected, ErrorCode):
        assert context == SessionError(expected)
    else:
        assert isinstance(context, expected)  # type: ignore[arg-type]
    if metadata.is_full and metadata.session_id:
        assert sessions.get(metadata.session_id) is None and sessions.total_partitions == 0


def test_incremental_fetch_updates_the_session_and_moves_its_epoch() -> None:
    sessions = cache()
    session_id = sessions.maybe_create_session(0, FOLLOWER, {T0: CachedPartition.of(P0)})
    context = new_context(sessions, FetchMetadata(session_id, 1), {T1: P1}, [], replica_id=FOLLOWER, now_ms=5)
    assert isinstance(context, IncrementalFetch)
    session = context.session
    assert session.epoch == 2 and session.last_used_ms == 5 and list(session.partitions) == [T0, T1]
    assert sessions.total_partitions == 2 and [s.id for s in sessions.sessions_of(T1)] == [session_id]
    moved = FetchPartition(0, 11, 1000, 0, 3)
    context = new_context(sessions, FetchMetadata(session_id, 2), {T0: moved}, [T1], replica_id=FOLLOWER, now_ms=6)
    assert isinstance(context, IncrementalFetch)
    assert session.partitions[T0].fetch_offset == 11 and T1 not in session.partitions
    assert sessions.sessions_of(T1) == [] and sessions.total_partitions == 1
    # The same epoch again (a duplicate request) is refused; the session stays.
    again = new_context(sessions, FetchMetadata(session_id, 2), {}, [], replica_id=FOLLOWER, now_ms=7)
    assert again == SessionError(ErrorCode.INVALID_FETCH_SESSION_EPOCH) and sessions.get(session_id) is session


def test_a_session_left_without_partitions_is_closed() -> None:
    sessions = cache()
    session_id = sessions.maybe_create_session(0, CONSUMER, {T0: CachedPartition.of(P0)})
    context = new_context(sessions, FetchMetadata(session_id, 1), {}, [T0], replica_id=CONSUMER, now_ms=1)
    assert isinstance(context, Sessionless) and sessions.get(session_id) is None and len(sessions) == 0


# Eviction: (existing sessions as (replica id, size, created/last used ms), newcomer
# (replica id, size, now ms), evicted index or None when no session is created).
EVICTIONS = [
    # A follower evicts the smallest consumer session, however recent.
    ([(CONSUMER, 5, 0), (CONSUMER, 2, 0), (FOLLOWER, 1, 0)], (FOLLOWER, 1, 10), 1),
    # A consumer cannot evict recent sessions, even smaller ones.
    ([(CONSUMER, 5, 0), (CONSUMER, 2, 0), (FOLLOWER, 1, 0)], (CONSUMER, 50, 10), None),
    # A follower cannot evict recent followers' sessions.
    ([(FOLLOWER, 5, 0), (FOLLOWER, 2, 0), (FOLLOWER, 1, 0)], (FOLLOWER, 50, 10), None),
    # A stale session (unused longer than the eviction time) goes first, whoever asks.
    ([(FOLLOWER, 5, 0), (FOLLOWER, 2, 100_000), (FOLLOWER, 1, 100_000)], (CONSUMER, 1, EVICTION_MS + 1), 0),
]


@pytest.mark.parametrize(("existing", "newcomer", "evicted"), EVICTIONS)
def test_eviction(existing: list[tuple[int, int, int]], newcomer: tuple[int, int, int],
                  evicted: int | None) -> None:
    sessions = cache(max_entries=len(existing))
    ids = [sessions.maybe_create_session(at, replica, parts(size)) for replica, size, at in existing]
    replica, size, now = newcomer
    new_id = sessions.maybe_create_session(now, replica, parts(size))
    if evicted is None:
        assert new_id == INVALID_SESSION_ID and len(sessions) == len(existing)
        return
    assert new_id != INVALID_SESSION_ID and sessions.get(ids[evicted]) is None and sessions.evictions == 1
    assert sessions.total_partitions == sum(s for _, s, _ in existing) - existing[evicted][1] + size


def test_old_sessions_are_evictable_by_a_larger_one() -> None:
    sessions = cache(max_entries=2)
    small = sessions.maybe_create_session(0, CONSUMER, parts(1))
    big = sessions.maybe_create_session(0, CONSUMER, parts(9))
    for session_id in (small, big):  # both used again after the eviction time: not stale, but old
        session = sessions.get(session_id)
        assert session is not None
        sessions.touch(session, EVICTION_MS + 10)
    assert sessions.maybe_create_session(EVICTION_MS + 20, CONSUMER, parts(1)) == INVALID_SESSION_ID  # not larger
    newcomer = sessions.maybe_create_session(EVICTION_MS + 20, CONSUMER, parts(5))
    assert newcomer != INVALID_SESSION_ID and sessions.get(small) is None and sessions.get(big) is not None


def test_session_ids_are_unique_and_never_zero() -> None:
    draws = iter([0, 7, 7, 8])
    sessions = FetchSessionCache(new_session_id=lambda low, high: next(draws), max_entries=5)
    assert sessions.maybe_create_session(0, CONSUMER, parts(1)) == 7
    assert sessions.maybe_create_session(0, CONSUMER, parts(1)) == 8


def test_zero_slots_means_no_sessions() -> None:
    sessions = cache(max_entries=0)
    assert sessions.maybe_create_session(0, FOLLOWER, parts(3)) == INVALID_SESSION_ID


def test_answered_partitions_move_to_the_end() -> None:
    sessions = cache()
    session_id = sessions.maybe_create_session(0, CONSUMER, parts(3))
    session = sessions.get(session_id)
    assert session is not None
    session.answered(TopicPartition("t", 0))
    assert list(session.partitions) == [TopicPartition("t", 1), TopicPartition("t", 2), TopicPartition("t", 0)]
    session.changed[TopicPartition("t", 2)] = None
    assert session.take_changed() == [TopicPartition("t", 2)] and not session.changed


@pytest.mark.parametrize(("opened_with_ids", "fetch_with_ids", "ok"), [
    (True, True, True), (False, False, True), (True, False, False), (False, True, False)])
def test_a_session_keeps_the_topic_naming_it_was_opened_with(opened_with_ids: bool, fetch_with_ids: bool,
                                                            ok: bool) -> None:
    sessions = cache()
    session_id = sessions.maybe_create_session(0, CONSUMER, parts(1), uses_topic_ids=opened_with_ids)
    context = new_context(sessions, FetchMetadata(session_id, 1), {}, [], replica_id=CONSUMER, now_ms=1,
                          uses_topic_ids=fetch_with_ids)
    if ok:
        assert isinstance(context, IncrementalFetch)
    else:
        assert context == SessionError(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        assert sessions.get(session_id) is not None  # the session stays for the right fetcher


def test_a_cached_partition_hands_back_the_request_it_holds_until_the_next_one() -> None:
    """A session partition is read with the fetcher's last request itself (no FetchPartition
    built per read: a follower's partition is read on its fetch and again when woken); an
    incremental request replaces it, and one made from its fields builds it once."""
    cached = CachedPartition.of(P0)
    assert cached.request(0) is P0 and cached.request(0) is P0
    moved = FetchPartition(0, fetch_offset=15, partition_max_bytes=500, log_start_offset=2, current_leader_epoch=4,
                           last_fetched_epoch=3)
    cached.update_request(moved)
    assert cached.request(0) is moved
    assert (cached.fetch_offset, cached.max_bytes, cached.fetcher_log_start_offset, cached.current_leader_epoch,
            cached.last_fetched_epoch) == (15, 500, 2, 4, 3)
    by_hand = CachedPartition(1000, 20, -1, -1)
    built = by_hand.request(1)
    assert built == P1 and by_hand.request(1) is built
