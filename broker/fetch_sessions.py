"""The asyncio shell over `broker.fetch_session`'s cache: change marks and the session's long poll.

    sessions = FetchSessions(replicas, max_entries=1000)     # registers with the ReplicaManager
    context = sessions.new_context(metadata, requested, forgotten, replica_id=r)
    sessions.park(session, fetch)        # fetch.wake() in a later loop pass, once a partition of it changes

The ReplicaManager calls `on_partition_change(tp)` after every append, high watermark move,
log start move and role change of `tp`. The cache knows the sessions holding `tp`; each
gets `tp` in its changed set, and a fetch of that session parked with `park` wakes. An idle
incremental fetch therefore costs the leader nothing per partition, and no task, event or
timeout of its own: it is one entry here, its answer a future the server awaits, and its
deadline a timer of the broker's (issue 35: two follower fetches wait per acks=all produce).
A parked fetch wakes only on a change that gives it something to answer (Kafka's
DelayedFetch.tryComplete: bytes past the fetch offset up to the fetch's end, a role or epoch
change). A follower reads to the log end, so since KAFKA-9952 a HW move alone does not wake
it: the HW that each acks=all produce's second follower fetch moves would otherwise wake the
first follower's fetch to read nothing. A consumer reads to the HW, so an append below it
does not. The partition is still marked, not due, so the next answer carries what changed
(`FetchSession.due`).
A follower's fetch that arrives while changes wait (it was busy with the previous answer)
reads them at once; how long they waited is `follower_fetch_wait` (issue 35).

A follower's idle session fetches still count as fetches for its lag (Kafka reads every
session partition on every fetch and so calls updateFollowerFetchState for each): when a
partition with nothing to report first changes, the follower's state is brought to the
session's last fetch, at the fetch offset the session holds, which was then the leader's
log end offset (else the partition would have been marked changed already).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Protocol

from broker.fetch_session import (
    CachedPartition,
    FetchContext,
    FetchMetadata,
    FetchSession,
    FetchSessionCache,
    new_context,
)
from broker.loop_stalls import PauseHistogram
from broker.replica_manager import ReplicaManager
from broker.replication.partition import Partition
from broker.replica_reads import record_session_fetch
from common.topic_partition import TopicPartition
from common.protocol.fetch import FetchPartition

log = logging.getLogger(__name__)


class ParkedFetch(Protocol):
    """An incremental fetch waiting on its session (broker.handlers.fetch)."""

    def wake(self) -> None:
        """A partition of its session changed and is due: read what changed, then answer or
        park again. Called in a loop pass of its own, never inside the change."""

    def expire(self) -> None:
        """Its deadline (max_wait_ms): read what changed, and answer."""

    def done(self) -> bool:
        """Answered (or given up: its connection closed)."""

    def __hash__(self) -> int:
        """By identity (object's): the fetch is its deadline's key in the broker's timers."""


class FetchSessions:
    """One broker's fetch sessions (KIP-227), kept in step with its partitions."""

    def __init__(self, replicas: ReplicaManager, *, max_entries: int,
                 rng: random.Random | None = None) -> None:
        self._replicas = replicas
        self.cache = FetchSessionCache(new_session_id=(rng or random.Random()).randrange,
                                       max_entries=max_entries)
        self._parked: dict[int, ParkedFetch] = {}  # session id -> its parked fetch
        # Each waiting fetch's deadline is a timer of the broker's keyed by the fetch itself
        # (`expire_at`), cancelled when a wake answers it (`_wake`): a heap push and a dict pop
        # in `broker.timers`, whose one loop timer serves them all.
        self._timers = replicas.timers
        # The replica manager's clock itself, not a method around it (read ~6 times per
        # acks=all produce at the leader: each follower fetch's context, change and mark)
        self.now_ms: Callable[[], int] = replicas.now_ms
        # How long a change on a partition led here waited for a follower's fetch to read it
        # (an append the follower must copy before an acks=all produce completes): /metrics.
        self.follower_fetch_wait = PauseHistogram()
        replicas.change_listeners.append(self.on_partition_change)

    def new_context(self, metadata: FetchMetadata, requested: Mapping[TopicPartition, FetchPartition],
                    forgotten: Iterable[TopicPartition], *, replica_id: int,
                    uses_topic_ids: bool) -> FetchContext:
        return new_context(self.cache, metadata, requested, forgotten, replica_id=replica_id,
                           now_ms=self.now_ms(), uses_topic_ids=uses_topic_ids)

    def create(self, replica_id: int, partitions: dict[TopicPartition, CachedPartition],
               changed: Iterable[TopicPartition], *, uses_topic_ids: bool) -> int:
        """A session for an answered full fetch (its id, or 0 when the cache has no room)."""
        session_id = self.cache.maybe_create_session(self.now_ms(), replica_id, partitions,
                                                     uses_topic_ids=uses_topic_ids)
        session = self.cache.get(session_id)
        if session is not None:
            session.mark_changed(changed, self.now_ms())
        return session_id

    def on_partition_change(self, tp: TopicPartition) -> None:
        sessions = self.cache.sessions_of(tp)
        if not sessions:
            return
        # Looked up once per change, not per session (twice per acks=all produce per follower)
        replicas = self._replicas
        partition = replicas.partitions.get(tp)
        if partition is not None and not partition.is_leader(replicas.broker_id):
            partition = None  # not led here: every change is due (a role change, a follower's HW for KIP-392)
        now = self.now_ms()
        for session in sessions:
            marked = tp in session.changed
            if marked and session.due:
                continue
            due = True
            if partition is not None:
                cached = session.partitions[tp]
                if not session.privileged:
                    due = _consumer_must_answer(partition, cached)
                else:
                    if not marked:
                        record_session_fetch(partition, session.replica_id, cached.fetch_offset,
                                             session.last_used_ms)
                    due = _follower_must_answer(partition, cached)
            session.mark(tp, now, due=due)
            if due:
                parked = self._parked.pop(session.id, None)
                if parked is not None:
                    # in the next loop pass, as the task of an awaited event would resume: the
                    # rest of this request (a produce's other partitions) is appended by then
                    asyncio.get_running_loop().call_soon(self._wake, parked)

    def take_changed(self, session: FetchSession) -> list[TopicPartition]:
        """The session's changed partitions, to read now. For a follower's session, how long
        the oldest of them waited for this fetch goes to `follower_fetch_wait`."""
        if session.privileged and session.due:
            self.follower_fetch_wait.observe(max(0, self.now_ms() - session.changed_since_ms))
        return session.take_changed()

    def park(self, session: FetchSession, fetch: ParkedFetch) -> None:
        """`fetch.wake()` in a later loop pass once a partition of `session` is marked changed
        and due (at once when one is). One fetch per session: a newer one takes the place of
        an older, which then waits for its own deadline (`expire_at`)."""
        if session.due:
            asyncio.get_running_loop().call_soon(self._wake, fetch)
            return
        self._parked[session.id] = fetch

    def expire_at(self, session: FetchSession, fetch: ParkedFetch, deadline_ms: int) -> None:
        """`fetch.expire()` at `deadline_ms` (the broker timers' clock), unless it is done by then."""
        self._timers.schedule(fetch, deadline_ms, partial(self._expire, session, fetch))

    def _expire(self, session: FetchSession, fetch: ParkedFetch, _now_ms: int) -> None:
        """`fetch`'s deadline: unparked (it may be done: its connection closed while it was
        parked), and expired unless done."""
        if self._parked.get(session.id) is fetch:
            del self._parked[session.id]
        if not fetch.done():
            fetch.expire()

    def _wake(self, fetch: ParkedFetch) -> None:
        """A parked fetch's turn after a due change: once it is answered (or given up) rather
        than parked again, its deadline goes."""
        fetch.wake()
        if fetch.done():
            self._timers.cancel(fetch)

    def unpark(self, session: FetchSession, fetch: ParkedFetch) -> None:
        """Forget `fetch` if it is still parked on `session` (its deadline came, or it is done)."""
        if self._parked.get(session.id) is fetch:
            del self._parked[session.id]

    def parked(self, session: FetchSession) -> ParkedFetch | None:
        """The fetch parked on `session` (tests, metrics)."""
        return self._parked.get(session.id)


def _consumer_must_answer(partition: Partition, cached: CachedPartition) -> bool:
    """Whether a consumer's session partition led here has something to answer now: a HW
    other than the one it was told (its records end there; read_committed's LSO moves only
    with it), a log start it was not told, or another leader epoch. Not an append alone,
    which acks=all leaves below the HW until the followers have it."""
    partition_log = partition.log
    return partition_log.high_watermark != cached.high_watermark \
        or partition_log.log_start_offset != cached.local_log_start_offset \
        or 0 <= cached.current_leader_epoch != partition.leader_epoch


def _follower_must_answer(partition: Partition, cached: CachedPartition) -> bool:
    """Whether a follower's session partition led here has something to answer now: records
    past its fetch offset (or a log end below it: truncated), a log start it was not told,
    or a leader epoch other than the one it fetches at. Not a HW move alone."""
    partition_log = partition.log
    return partition_log.log_end_offset != cached.fetch_offset \
        or partition_log.log_start_offset != cached.local_log_start_offset \
        or 0 <= cached.current_leader_epoch != partition.leader_epoch
