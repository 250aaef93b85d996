"""Incremental fetch sessions (KIP-227), the broker's side: sessions, their cache, the rules.

    cache = FetchSessionCache(max_entries=1000, new_session_id=random.Random().randrange)
    context = new_context(cache, FetchMetadata(session_id, epoch), requested, forgotten,
                          replica_id=req.replica_id, now_ms=now)
    # SessionError -> top-level error; Sessionless / Full -> read every requested partition
    # (Full: cache.maybe_create_session(...) once answered); Incremental -> read what the
    # request names plus the session's changed partitions, answer only what must_respond says.

Kafka's FetchSession.scala (CachedPartition, FetchSession, FetchSessionCache, FetchManager.
newContext) in one module as there, without locks and with the clock passed in; the
asyncio shell that marks changes and parks fetches is `broker.fetch_sessions`.

A new session takes a free slot of the cache, or evicts: first a stale session (unused for
`eviction_ms`); else the least valuable evictable one — ordered by (privileged, size, id) —
when the newcomer is worth more: a follower evicts any consumer session, and any session
older than `eviction_ms` is evictable by a larger one.

One addition for the broker's idle cost: a session keeps the partitions that may have
something to report (`changed`), marked by the shell when a partition's log, high
watermark or role changes, so an incremental fetch reads those and the ones its request
names, never the whole session. The cache indexes sessions by partition so that marking
costs O(sessions holding it). A partition stays changed after a read while it has data
past the session's fetch offset or answered an error: Kafka would answer it again on the
next fetch, and so do we.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from common.topic_partition import TopicPartition
from common.config import default_int
from common.errors import ErrorCode
from common.protocol.fetch import FetchPartition, FetchPartitionResponse
from common.units import INT_MAX, MINUTE_MS

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

log = logging.getLogger(__name__)

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0  # a full fetch that asks for a new session
FINAL_EPOCH: Final = -1  # a full fetch without a session (closes the one it names)
MAX_SESSION_ID: Final = INT_MAX
DEFAULT_MAX_CACHE_SLOTS: Final = default_int("max.incremental.fetch.session.cache.slots")
# Kafka's min.incremental.fetch.session.eviction.ms (an internal constant there): a session
# unused this long is stale, and a younger one cannot be evicted by a larger newcomer.
DEFAULT_EVICTION_MS: Final = 2 * MINUTE_MS
# Bounds the id draw: with at most `max_entries` ids taken out of 2^31 - 1, a free one is
# found in a few tries; the bound only turns a broken generator into an error.
MAX_ID_DRAWS: Final = 1000


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: after the final epoch nothing; wraps to 1, never 0."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_SESSION_ID else epoch + 1


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


@dataclass(slots=True, eq=False)
class CachedPartition:
    """One partition of a session: the fetcher's last request for it, and what we last told it."""

    max_bytes: int
    fetch_offset: int
    fetcher_log_start_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int = -1
    high_watermark: int = -1
    local_log_start_offset: int = -1
    # The request the fields above were taken from (`of`, `update_request`; its replica
    # directory id is never read here), handed back by `request` for every read of the
    # partition: a follower's session partition is read on its fetch and again when woken,
    # and a FetchPartition built per read was ~58 bytecodes (bench/leader_request_cpu.py).
    # None for one made from its fields (tests): `request` builds it once then.
    _request: FetchPartition | None = field(default=None, repr=False)

    @classmethod
    def of(cls, request: FetchPartition) -> CachedPartition:
        return cls(request.partition_max_bytes, request.fetch_offset, request.log_start_offset,
                   request.current_leader_epoch, request.last_fetched_epoch, _request=request)

    def update_request(self, request: FetchPartition) -> None:
        """The only change of the request's fields: they and `request` stay one."""
        self.max_bytes, self.fetch_offset = request.partition_max_bytes, request.fetch_offset
        self.fetcher_log_start_offset = request.log_start_offset
        self.current_leader_epoch = request.current_leader_epoch
        self.last_fetched_epoch = request.last_fetched_epoch
        self._request = request

    def request(self, partition: int) -> FetchPartition:
        """The fetcher's last request for this partition (number `partition`)."""
        request = self._request
        if request is None or request.partition != partition:
            request = self._request = FetchPartition(
                partition, self.fetch_offset, self.max_bytes, self.fetcher_log_start_offset,
                self.current_leader_epoch, self.last_fetched_epoch)
        return request

    def must_respond(self, answer: FetchPartitionResponse, *, update: bool) -> bool:
        """Kafka's maybeUpdateResponseData: new records, a HW or log start change, a
        preferred read replica or an error must be answered; the rest is left out."""
        respond = answer.records is not None and _length(answer.records) > 0
        if self.high_watermark != answer.high_watermark:
            respond = True
            if update:
                self.high_watermark = answer.high_watermark
        if self.local_log_start_offset != answer.log_start_offset:
            respond = True
            if update:
                self.local_log_start_offset = answer.log_start_offset
        if answer.preferred_read_replica >= 0 or answer.diverging_epoch is not None:
            respond = True
        if answer.error_code:
            # Answered on every fetch while it lasts; the HW is forgotten so the partition is
            # answered again once the error goes away.
            respond = True
            if update:
                self.high_watermark = -1
        return respond


def _length(records: object) -> int:
    length = getattr(records, "length", None)
    if length is not None:
        return int(length)
    return len(records)  # type: ignore[arg-type]


@dataclass(slots=True, eq=False)
class FetchSession:
    """One fetcher's session. `partitions` keeps Kafka's order: answered ones move to the end."""

    id: int
    replica_id: int  # the follower's broker id; -1 for a consumer
    creation_ms: int
    last_used_ms: int
    epoch: int
    partitions: dict[TopicPartition, CachedPartition]
    changed: dict[TopicPartition, None] = field(default_factory=dict)
    # Whether a partition in `changed` has something to answer now (records past the fetch
    # offset, an error, a new log start): a parked fetch wakes and reads only then. A mark
    # that is not due (a follower's partition whose HW alone moved: Kafka's DelayedFetch for a
    # follower completes on bytes past its fetch offset, not on the HW) is read at the next
    # fetch or its deadline, so the answer still carries the HW.
    due: bool = False
    # When the oldest due change was marked (the shell's clock, ms); -1 while none is due.
    # A follower's next fetch reads it: the wait between is the fetch schedule's (issue 35).
    changed_since_ms: int = -1
    cached_size: int = -1  # the size the cache accounts for; -1: not in the cache
    # Opened by a v13+ fetch (topics by id): then only v13+ fetches may use it, and the
    # reverse (Kafka's FETCH_SESSION_TOPIC_ID_ERROR).
    uses_topic_ids: bool = False

    @property
    def privileged(self) -> bool:
        """Followers' sessions are privileged: a consumer's cannot evict them (KIP-227)."""
        return self.replica_id >= 0

    def update(self, requested: Mapping[TopicPartition, FetchPartition],
               forgotten: Iterable[TopicPartition]) -> tuple[list[TopicPartition], list[TopicPartition],
                                                            list[TopicPartition]]:
        """Take an incremental request: (added, updated, removed) partitions."""
        added, updated, removed = [], [], []
        for tp, request in requested.items():
            cached = self.partitions.get(tp)
            if cached is None:
                self.partitions[tp] = CachedPartition.of(request)
                added.append(tp)
            else:
                cached.update_request(request)
                updated.append(tp)
        for tp in forgotten:
            if self.partitions.pop(tp, None) is not None:
                self.changed.pop(tp, None)
                removed.append(tp)
        return added, updated, removed

    def take_changed(self) -> list[TopicPartition]:
        """The partitions marked changed since the last read; they are read now."""
        out = list(self.changed)
        self.changed.clear()
        self.due = False
        self.changed_since_ms = -1
        return out

    def mark(self, tp: TopicPartition, now_ms: int, *, due: bool = True) -> None:
        """`tp` has something to report on the next fetch (an event, or data left unread);
        `due`: now, so a parked fetch should wake (see `due`)."""
        if due and not self.due:
            self.due = True
            self.changed_since_ms = now_ms
        self.changed[tp] = None

    def mark_changed(self, tps: Iterable[TopicPartition], now_ms: int, *, due: bool = True) -> None:
        """`mark` each of `tps`."""
        for tp in tps:  # bounded by the session's partitions
            self.mark(tp, now_ms, due=due)

    def requeue(self, order: list[TopicPartition], now_ms: int, *, due: bool = True) -> None:
        """Replace the changed partitions with `order` (the same ones, or more, reordered for
        the next fetch; `due`: some have something to answer now); a due change already
        waiting keeps its time."""
        if due and not self.due:
            self.changed_since_ms = now_ms
        self.changed = dict.fromkeys(order)
        self.due = (self.due or due) and bool(self.changed)
        if not self.due:
            self.changed_since_ms = -1

    def answered(self, tp: TopicPartition) -> None:
        """Move an answered partition to the end, so the next fetch starts with the others
        (Kafka's round robin when the response size limit cuts a fetch short)."""
        cached = self.partitions.pop(tp, None)
        if cached is not None:
            self.partitions[tp] = cached


@dataclass(frozen=True, slots=True)
class SessionError:
    """Answer the error alone (no partitions, session id 0)."""

    error: ErrorCode


@dataclass(frozen=True, slots=True)
class Sessionless:
    """A full fetch that creates no session (epoch -1, pre-v7, or a session emptied)."""


@dataclass(frozen=True, slots=True)
class FullFetch:
    """A full fetch asking for a new session: created when answered, if the cache has room."""

    privileged: bool
    uses_topic_ids: bool = False


@dataclass(frozen=True, slots=True)
class IncrementalFetch:
    session: FetchSession


FetchContext = SessionError | Sessionless | FullFetch | IncrementalFetch


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
