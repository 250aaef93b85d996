"""Incremental fetch sessions (KIP-227), the broker's side: sessions, their cache, the rules.

    cache = FetchSessionCache(max_entries=1000, new_session_id=random.Random().randrange)
    context = new_context(cache, FetchMetadata(session_id, epoch), requested, forgotten,
                          replica_id=req.replica_id, now_ms=now)
    # SessionError -> top-level error; Sessionless / Full -> read every requested partition
    # (Full: cache.maybe_create_session(...) once answered); Incremental -> read what the
    # request names plus the session's changed partitions, answer only what must_respond says.

Kafka's FetchSession.scala (CachedPartition, FetchSession, FetchSessionCache, FetchManager.
newContext), without locks and with the clock passed in. One addition for the broker's
idle cost: a session keeps the partitions that may have something to report (`changed`),
marked by the shell when a partition's log, high watermark or role changes, so an
incremental fetch reads those and the ones its request names, never the whole session.
A partition stays changed after a read while it has data past the session's fetch offset
or answered an error: Kafka would answer it again on the next fetch, and so do we.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from broker.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol.fetch import FetchPartition, FetchPartitionResponse
from common.units import MINUTE_MS

log = logging.getLogger(__name__)

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0  # a full fetch that asks for a new session
FINAL_EPOCH: Final = -1  # a full fetch without a session (closes the one it names)
MAX_SESSION_ID: Final = 2**31 - 1
DEFAULT_MAX_CACHE_SLOTS: Final = 1000  # max.incremental.fetch.session.cache.slots
# Kafka's min.incremental.fetch.session.eviction.ms (an internal constant there): a session
# unused this long is stale, and a younger one cannot be evicted by a larger newcomer.
DEFAULT_EVICTION_MS: Final = 2 * MINUTE_MS


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

    @classmethod
    def of(cls, request: FetchPartition) -> CachedPartition:
        return cls(request.partition_max_bytes, request.fetch_offset, request.log_start_offset,
                   request.current_leader_epoch, request.last_fetched_epoch)

    def update_request(self, request: FetchPartition) -> None:
        self.max_bytes, self.fetch_offset = request.partition_max_bytes, request.fetch_offset
        self.fetcher_log_start_offset = request.log_start_offset
        self.current_leader_epoch = request.current_leader_epoch
        self.last_fetched_epoch = request.last_fetched_epoch

    def request(self, partition: int) -> FetchPartition:
        return FetchPartition(partition, self.fetch_offset, self.max_bytes, self.fetcher_log_start_offset,
                              self.current_leader_epoch, self.last_fetched_epoch)

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
        return out

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
