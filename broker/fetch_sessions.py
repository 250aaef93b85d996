"""The asyncio shell over `broker.fetch_session`'s cache: change marks and the session's long poll.

    sessions = FetchSessions(replicas, max_entries=1000)     # registers with the ReplicaManager
    context = sessions.new_context(metadata, requested, forgotten, replica_id=r)
    sessions.park(session, fetch)        # fetch.wake() once a partition of it changes and is due
    sessions.run_pending()               # the request handler, when a request's synchronous part ends

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

A fetch made due is not woken inside the change: the rest of the request (a produce's other
partitions) must be appended before it reads. It goes on a list of pending wakes that
`run_pending` drains, as Kafka's ReplicaManager puts the delayed-operation checks of an
append on its `actionQueue` and KafkaApis.handle's `finally` runs `tryCompleteActions()`
once the request is handled: the request handler calls it when a request's synchronous part
ends (`in_request` is set while it runs), in that request's own turn, so a
follower's fetch woken by an acks=all produce reads the produce's appends with no loop pass,
handle or `get_running_loop()` (a getpid(2) in CPython 3.11) in between. A change outside
any request (a timer: ISR expiry, a deadline; the replica fetcher's appends on a follower,
which wake KIP-392 consumers; a role change from the metadata log; a handler's task after
an await) schedules one drain with `call_soon` on the loop captured once: one per loop
pass, and none while a request or a drain runs, which drains it itself.

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
from typing import Final, Protocol

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

# Rounds of one drain (`run_pending`): round n wakes the fetches round n-1's reads made due. A
# follower's read moves a HW, which is due only for consumers (KAFKA-9952), and a consumer's
# read changes nothing, so an acks=all produce takes two (its followers, then consumers of the
# HW their reads moved). Past the bound the rest waits for the next loop pass, so no chain of
# wakes holds the loop.
MAX_WAKE_ROUNDS: Final = 8


class ParkedFetch(Protocol):
    """An incremental fetch waiting on its session (broker.handlers.fetch)."""

    def wake(self) -> None:
        """A partition of its session changed and is due: read what changed, then answer or
        park again. Called by `FetchSessions.run_pending`, never inside the change: after the
        request that made it due has appended all it appends (in that request's own turn), or
        in the next loop pass for a change outside any request. It may be done already (its
        connection closed): it then does nothing."""

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
        # Fetches made due and not yet woken, in the order they became due (`run_pending`). A
        # fetch is here or parked, never both.
        self.pending_wakes: list[ParkedFetch] = []
        # A request's synchronous part (the request handler's `start`) or a drain is running: a
        # fetch made due then waits for the drain at its end; otherwise a change schedules one
        # (`_schedule_drain`). A flag, not a count: `start` is never entered again from inside
        # itself or a drain (a wake answers fetches; it starts no request), and setting a bool
        # is the cheapest thing to do per request (~13 bytecodes a request, drain test included).
        self.in_request = False
        self._loop: asyncio.AbstractEventLoop | None = None  # captured at the first drain scheduled
        self._drain_scheduled = False
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
                    # woken once the request making this change has appended all it appends
                    # (a produce's other partitions): at its end, or a loop pass later
                    self.pending_wakes.append(parked)
                    if not self.in_request:
                        self._schedule_drain()

    def take_changed(self, session: FetchSession) -> list[TopicPartition]:
        """The session's changed partitions, to read now. For a follower's session, how long
        the oldest of them waited for this fetch goes to `follower_fetch_wait`."""
        if session.privileged and session.due:
            self.follower_fetch_wait.observe(max(0, self.now_ms() - session.changed_since_ms))
        return session.take_changed()

    def park(self, session: FetchSession, fetch: ParkedFetch) -> None:
        """`fetch.wake()` once a partition of `session` is marked changed and due (when one is
        already, at the next `run_pending`: the end of this request, or of this drain). One
        fetch per session: a newer one takes the place of an older, which then waits for its
        own deadline (`expire_at`)."""
        if session.due:
            self.pending_wakes.append(fetch)
            if not self.in_request:
                self._schedule_drain()
            return
        self._parked[session.id] = fetch

    def run_pending(self) -> None:
        """Wake the fetches made due, in order, and those their reads make due (a follower's
        read moves a HW a consumer's fetch waits for), until none is left: Kafka's
        tryCompleteActions. The request handler calls it when a request's synchronous part
        ends (`in_request` cleared); a change outside any request has it scheduled. A wake's
        failure is logged, as the loop logs a callback's, and the rest are woken.

        The loop ends: a fetch is pending or parked, never both (a session parks one), so a
        round wakes each fetch at most once, and a round's reads make due only what a HW move
        wakes (reads append nothing and move no log start or epoch; a follower is not due on
        a HW move), so the chain is two rounds long; `MAX_WAKE_ROUNDS` bounds it anyway, and
        what is left then goes to the next loop pass."""
        pending = self.pending_wakes
        self.in_request = True  # what the wakes make due is drained here, not scheduled
        try:
            woken = 0
            for _ in range(MAX_WAKE_ROUNDS):
                end = len(pending)
                while woken < end:  # this round: bounded by the fetches pending at its start
                    fetch = pending[woken]
                    woken += 1
                    try:
                        self._wake(fetch)
                    except Exception:  # noqa: BLE001 - one fetch's bug: the others still wake
                        log.exception("Waking a parked fetch failed")
                if len(pending) == end:
                    break
            del pending[:woken]
        finally:
            self.in_request = False
        if pending:  # past MAX_WAKE_ROUNDS
            self._schedule_drain()

    def _schedule_drain(self) -> None:
        """One `run_pending` in the next loop pass, unless one is scheduled (a change outside
        any request). The loop is captured once (asyncio.get_running_loop() makes a getpid(2)
        in CPython 3.11), again only when it is closed (a test's next asyncio.run)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
            self._drain_scheduled = False  # one scheduled on a loop now closed never runs
        if not self._drain_scheduled:
            self._drain_scheduled = True
            loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        if self.pending_wakes:  # a request's end may have drained them first
            self.run_pending()

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
        """A pending fetch's wake (`run_pending`): once it is answered (or given up) rather
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
