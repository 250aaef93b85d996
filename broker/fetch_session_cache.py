"""The broker's bounded cache of fetch sessions, and which context a Fetch request gets.

    cache = FetchSessionCache(max_entries=1000, new_session_id=rng.randrange)
    context = new_context(cache, FetchMetadata(id, epoch), requested, forgotten,
                          replica_id=-1, now_ms=now)
    session_id = cache.maybe_create_session(now, replica_id, partitions)   # FullFetch answered

Kafka's FetchSessionCache and FetchManager.newContext (KIP-227). A new session takes a free
slot, or evicts: first a stale session (unused for `eviction_ms`); else the least valuable
evictable one — ordered by (privileged, size, id) — when the newcomer is worth more: a
follower evicts any consumer session, and any session older than `eviction_ms` is
evictable by a larger one. The cache also indexes sessions by partition, so the shell can
mark a partition changed in every session that holds it (O(sessions holding it)).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from broker.fetch_session import (
    DEFAULT_EVICTION_MS,
    DEFAULT_MAX_CACHE_SLOTS,
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    MAX_SESSION_ID,
    CachedPartition,
    FetchContext,
    FetchMetadata,
    FetchSession,
    FullFetch,
    IncrementalFetch,
    SessionError,
    Sessionless,
    next_epoch,
)
from broker.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol.fetch import FetchPartition

log = logging.getLogger(__name__)

# Bounds the id draw: with at most `max_entries` ids taken out of 2^31 - 1, a free one is
# found in a few tries; the bound only turns a broken generator into an error.
MAX_ID_DRAWS: Final = 1000


def _evictable_key(session: FetchSession) -> tuple[bool, int, int]:
    return session.privileged, session.cached_size, session.id


class FetchSessionCache:
    """Sessions by id, bounded by `max_entries` (max.incremental.fetch.session.cache.slots)."""

    def __init__(self, *, new_session_id: Callable[[int, int], int],
                 max_entries: int = DEFAULT_MAX_CACHE_SLOTS,
                 eviction_ms: int = DEFAULT_EVICTION_MS) -> None:
        """`new_session_id(1, 2**31 - 1)` draws a candidate id (random.Random.randrange)."""
        self.max_entries, self.eviction_ms = max_entries, eviction_ms
        self._new_session_id = new_session_id
        self._sessions: dict[int, FetchSession] = {}
        self._by_partition: dict[TopicPartition, dict[int, None]] = {}
        self.total_partitions = 0  # Kafka's NumIncrementalFetchPartitionsCached
        self.evictions = 0  # Kafka's IncrementalFetchSessionEvictionsPerSec, as a count

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def sessions_of(self, tp: TopicPartition) -> list[FetchSession]:
        """The sessions holding `tp` (the shell marks it changed in each)."""
        ids = self._by_partition.get(tp)
        return [self._sessions[i] for i in ids] if ids else []

    def maybe_create_session(self, now_ms: int, replica_id: int,
                             partitions: dict[TopicPartition, CachedPartition], *,
                             uses_topic_ids: bool = False) -> int:
        """A new session over `partitions` (its epoch 1); INVALID_SESSION_ID when no room."""
        privileged = replica_id >= 0
        if len(self._sessions) >= self.max_entries \
                and not self._try_evict(privileged, (privileged, len(partitions), 0), now_ms):
            log.debug("No fetch session created for %s with %d partitions: the cache is full",
                      _who(replica_id), len(partitions))
            return INVALID_SESSION_ID
        session = FetchSession(self._draw_id(), replica_id, now_ms, now_ms, next_epoch(0), partitions,
                               uses_topic_ids=uses_topic_ids)
        self._sessions[session.id] = session
        for tp in partitions:
            self._by_partition.setdefault(tp, {})[session.id] = None
        self.touch(session, now_ms)
        log.debug("Created fetch session %d for %s with %d partitions", session.id, _who(replica_id),
                  len(partitions))
        return session.id

    def _draw_id(self) -> int:
        for _ in range(MAX_ID_DRAWS):
            candidate = self._new_session_id(1, MAX_SESSION_ID)
            if candidate != INVALID_SESSION_ID and candidate not in self._sessions:
                return candidate
        raise RuntimeError(f"no free fetch session id after {MAX_ID_DRAWS} draws")

    def _try_evict(self, privileged: bool, key: tuple[bool, int, int], now_ms: int) -> bool:
        """Kafka's tryEvict: a stale session first, else a less valuable evictable one."""
        if not self._sessions:
            return False
        oldest = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest, "stale")
            return True
        candidates = [s for s in self._sessions.values()
                      if self._evictable(s, by_privileged=privileged, now_ms=now_ms)]
        if not candidates:
            return False
        least = min(candidates, key=_evictable_key)
        if key < _evictable_key(least):
            return False
        self._evict(least, f"less valuable than a new {'follower' if privileged else 'consumer'} "
                           f"session of {key[1]} partitions")
        return True

    def _evictable(self, session: FetchSession, *, by_privileged: bool, now_ms: int) -> bool:
        # Kafka files a session under evictableByPrivileged when it is a consumer's or old
        # enough, and under evictableByAll when old enough; "old" is judged at its last touch.
        old = session.last_used_ms - session.creation_ms > self.eviction_ms
        return old or (by_privileged and not session.privileged)

    def _evict(self, session: FetchSession, why: str) -> None:
        self.remove(session.id)
        self.evictions += 1
        log.info("Evicted fetch session %d of %s (%d partitions, last used %d ms before): %s",
                 session.id, _who(session.replica_id), session.cached_size,
                 max(0, session.last_used_ms - session.creation_ms), why)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return None
        for tp in session.partitions:
            self._unindex(tp, session_id)
        if session.cached_size >= 0:
            self.total_partitions -= session.cached_size
        session.cached_size = -1
        return session

    def _unindex(self, tp: TopicPartition, session_id: int) -> None:
        ids = self._by_partition.get(tp)
        if ids is not None:
            ids.pop(session_id, None)
            if not ids:
                del self._by_partition[tp]

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """The session was used now; its size is accounted again."""
        session.last_used_ms = now_ms
        if session.cached_size >= 0:
            self.total_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self.total_partitions += session.cached_size

    def update(self, session: FetchSession, requested: Mapping[TopicPartition, FetchPartition],
               forgotten: Iterable[TopicPartition]) -> tuple[list[TopicPartition], list[TopicPartition],
                                                            list[TopicPartition]]:
        """`session.update`, keeping the partition index in step."""
        added, updated, removed = session.update(requested, forgotten)
        for tp in added:
            self._by_partition.setdefault(tp, {})[session.id] = None
        for tp in removed:
            self._unindex(tp, session.id)
        return added, updated, removed


def new_context(cache: FetchSessionCache, metadata: FetchMetadata,
                requested: Mapping[TopicPartition, FetchPartition], forgotten: Iterable[TopicPartition],
                *, replica_id: int, now_ms: int, uses_topic_ids: bool = False) -> FetchContext:
    """Kafka's FetchManager.newContext: what kind of fetch this request is.

    A full request closes the session it names; epoch 0 then asks for a new one, epoch -1
    does not. An incremental request needs its session (FETCH_SESSION_ID_NOT_FOUND) at the
    epoch it expects (INVALID_FETCH_SESSION_EPOCH), naming topics as the session's first
    fetch did (FETCH_SESSION_TOPIC_ID_ERROR: ids from v13); it updates the session, whose epoch
    moves on, and a session left without partitions is closed (a sessionless answer).
    """
    if metadata.is_full:
        if metadata.session_id != INVALID_SESSION_ID and cache.remove(metadata.session_id) is not None:
            log.debug("Closed fetch session %d (full fetch, epoch %d)", metadata.session_id, metadata.epoch)
        if metadata.epoch == FINAL_EPOCH:
            return Sessionless()
        return FullFetch(privileged=replica_id >= 0, uses_topic_ids=uses_topic_ids)
    session = cache.get(metadata.session_id)
    if session is None:
        return SessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != metadata.epoch:
        log.debug("Fetch session %d expected epoch %d, got %d", session.id, session.epoch, metadata.epoch)
        return SessionError(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    if session.uses_topic_ids != uses_topic_ids:
        return SessionError(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
    cache.update(session, requested, forgotten)
    if not session.partitions:
        cache.remove(session.id)
        log.debug("Closed fetch session %d: no partitions left", session.id)
        return Sessionless()
    cache.touch(session, now_ms)
    session.epoch = next_epoch(session.epoch)
    return IncrementalFetch(session)


def _who(replica_id: int) -> str:
    return f"follower {replica_id}" if replica_id >= 0 else "a consumer"
