"""Reads: Fetch (consumers and followers). ListOffsets and OffsetForLeaderEpoch are in
broker/handlers/offset_lookups.py.

Fetch follows KIP-227 (`broker.fetch_session`): a full fetch reads every partition it names
and may open a session; an incremental one reads the partitions it names plus those its
session saw change, and answers only those with something to report. A full fetch that
finds fewer than min_bytes waits in the ReplicaManager's fetch purgatory until one of its
partitions changes; an incremental one is parked on its session (FetchSessions.park). Either
reads again then; the whole request has one deadline, max_wait_ms, a timer of the broker's
timer service (the fetch purgatory's, or FetchSessions', each one timer for all its fetches). A waiting fetch is a future
the server awaits, set where it completes: no task, coroutine, event or timeout per fetch
(issue 35: an acks=all produce makes its leader answer two follower fetches that waited).
A follower's fetch (replica id >= 0) reads up to the log end offset and tells the leader
where the follower is (ReplicaManager.read), on its first read only: read again after it
waited, it records nothing more (Kafka's DelayedFetch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from broker.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchContext,
    FetchMetadata,
    FetchSession,
    FullFetch,
    IncrementalFetch,
    SessionError,
    Sessionless,
)
from broker.fetch_sessions import FetchSessions
from broker.handlers.context import BrokerContext, ClientInfo
from broker.server import Later
from broker.handlers.fetch_partitions import (
    FOLLOWER_FETCH_VERSION,
    LEADER_HINTS_VERSION,
    TOPIC_IDS_VERSION,
    by_topic,
    name_partitions,
    new_topic_answer,
    new_tp,
    read_partition,
    size_of,
    topic_name,
    with_leader_hints,
)
from broker.purgatory import AnswerFuture
from broker.replica_reads import delayed_fetch
from broker.topic_metrics import count_fetch
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol import fetch
from common.protocol.leader_discovery import NodeEndpoint
from common.slotted import instance_builder
from common.units import SECOND_MS
from metadata.image import MetadataImage


async def handle_fetch(ctx: BrokerContext, req: fetch.FetchRequest, version: int, client: ClientInfo) -> fetch.FetchResponse:
    """`fetch_now` as one awaitable."""
    answer = fetch_now(ctx, req, version, client)
    return await answer.answer if isinstance(answer, Later) else answer


def fetch_now(ctx: BrokerContext, req: fetch.FetchRequest, version: int,
              client: ClientInfo) -> fetch.FetchResponse | Later[fetch.FetchResponse]:
    """The answer now when the first read settles it (min_bytes found, an error, no time to
    wait): a consumer reading a backlog costs no task and no extra loop pass per fetch.
    Otherwise `Later`, which waits (bounded by max_wait_ms) and reads again.

    A consumer's sessionless fetch of one partition (what librdkafka sends a bulk consumer,
    every fetch) takes `_fetch_one`, which answers it with the same bytes and no naming,
    session or per-topic grouping machinery; any other fetch takes `fetch_any`."""
    topics = req.topics
    if len(topics) == 1 and req.session_id == INVALID_SESSION_ID and req.session_epoch == FINAL_EPOCH \
            and req.replica_id < 0 and not req.forgotten_topics_data and len(topics[0].partitions) == 1:
        return _fetch_one(ctx, req, version, client, topics[0])
    return fetch_any(ctx, req, version, client)


def _fetch_one(ctx: BrokerContext, req: fetch.FetchRequest, version: int, client: ClientInfo,
               topic: fetch.FetchTopic) -> fetch.FetchResponse | Later[fetch.FetchResponse]:
    """`fetch_any`'s answer to a consumer's sessionless fetch of one partition of `topic`,
    with less Python per fetch (bench/fetch_path.py --opcodes): the one read is
    `read_partition`, as there, and only what a single partition leaves of the rest runs -
    its name, the read's verdict, one topic's answer. Sessionless (id 0, epoch -1) is what
    every branch of `fetch_any`'s context decides for it, with or without sessions, at any
    version; it keeps nothing between fetches, so nothing can go stale. An unknown topic id
    goes to `fetch_any`, before any read."""
    image = ctx.image()
    by_id = version >= TOPIC_IDS_VERSION
    name = topic_name(image, topic.topic_id) if by_id else topic.topic
    if name is None:
        return fetch_any(ctx, req, version, client)
    p = topic.partitions[0]
    tp = new_tp(TopicPartition, (name, p.partition))
    now_ms = ctx.replicas.timers.now_ms  # the clock of the broker's timers, which hold the deadline
    deadline_ms = now_ms() + max(req.max_wait_ms, 0)
    follower_reads = version >= FOLLOWER_FETCH_VERSION
    answer, _more = read_partition(ctx, tp, p, req, req.max_bytes, first=True, follower_reads=follower_reads)
    size = size_of(answer)
    failed = answer.error_code != 0 or answer.diverging_epoch is not None or answer.preferred_read_replica >= 0
    # as `_FullPass.settled` decides for one partition (its left time read only when it matters)
    if size >= req.min_bytes or failed or deadline_ms - now_ms() <= 0:
        return _one_response(ctx, req, version, image, tp, topic, answer, size, failed)
    requested = {tp: p}

    def full_response(full: _FullPass) -> fetch.FetchResponse:
        answer = full.answers[tp]
        return _one_response(ctx, req, version, image, tp, topic, answer, size_of(answer), full.failed)
    return Later(_FullWait(ctx, req, requested, follower_reads, deadline_ms, full_response).watch())


def _one_response(ctx: BrokerContext, req: fetch.FetchRequest, version: int, image: MetadataImage,
                  tp: TopicPartition, topic: fetch.FetchTopic, answer: fetch.FetchPartitionResponse,
                  size: int, failed: bool) -> fetch.FetchResponse:
    """`fetch_any`'s `respond` for one partition answered, with no session: its bytes counted,
    its leader hint (v16+, on an error), and its topic named as the request named it (by id
    from v13: a UUID is always true, so `by_topic` takes the request's id too)."""
    count_fetch(ctx.topic_stats, ((tp.topic, size),), replica_id=req.replica_id)
    endpoints: tuple[NodeEndpoint, ...] = ()
    if failed and version >= LEADER_HINTS_VERSION:
        answers = {tp: answer}
        endpoints = with_leader_hints(ctx, answers, image)
        answer = answers[tp]
    named = new_topic_answer(("", (answer,), topic.topic_id) if version >= TOPIC_IDS_VERSION
                       else (tp.topic, (answer,), fetch.ZERO_UUID))
    return _new_response((0, (named,), 0, 0, endpoints))


def fetch_any(ctx: BrokerContext, req: fetch.FetchRequest, version: int,
              client: ClientInfo) -> fetch.FetchResponse | Later[fetch.FetchResponse]:
    """`fetch_now` for any fetch: every shape, sessions, versions (the tests compare
    `_fetch_one`'s answers with this one's)."""
    image = ctx.image()
    named = name_partitions(req, version, image)
    requested = named.requested
    uses_topic_ids = version >= TOPIC_IDS_VERSION
    follower_reads = version >= FOLLOWER_FETCH_VERSION
    sessions = ctx.fetch_sessions
    if sessions is None or version < 7:  # no sessions before v7 (KIP-227)
        context: FetchContext = Sessionless() if version < 7 or req.session_epoch == FINAL_EPOCH \
            or req.session_id == 0 else SessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    elif req.session_id == INVALID_SESSION_ID and req.session_epoch == FINAL_EPOCH:
        # what new_context answers for it (no session named, none asked for), without its
        # FetchMetadata and clock read: librdkafka sends every fetch this way
        context = _SESSIONLESS
    else:
        context = sessions.new_context(FetchMetadata(req.session_id, req.session_epoch), requested,
                                       named.forgotten, replica_id=req.replica_id,
                                       uses_topic_ids=uses_topic_ids)
    if isinstance(context, SessionError):
        return fetch.FetchResponse(0, (), int(context.error), 0)
    now_ms = ctx.replicas.timers.now_ms  # the clock of the broker's timers, which hold the deadline
    deadline_ms = now_ms() + max(req.max_wait_ms, 0)

    def respond(answers: dict[TopicPartition, fetch.FetchPartitionResponse], session_id: int,
                failed: bool) -> fetch.FetchResponse:
        # Kafka's per-topic BytesOutPerSec: consumers' fetches only, one add per partition answered
        count_fetch(ctx.topic_stats, ((tp.topic, size_of(a)) for tp, a in answers.items()),
                    replica_id=req.replica_id)
        # leader hints go on errors only: an answer without one (`failed`: any error, diverging
        # epoch or preferred replica) skips the walk - nearly every v16 fetch (librdkafka 2.5+)
        endpoints = with_leader_hints(ctx, answers, image) if failed and version >= LEADER_HINTS_VERSION else ()
        return _new_response((0, by_topic(answers, version, image, named.topic_ids, named.unknown), 0,
                              session_id, endpoints))

    if isinstance(context, IncrementalFetch):
        assert sessions is not None
        session = context.session
        pass_ = _IncrementalPass(ctx, sessions, session, req, follower_reads, deadline_ms)
        pass_.read([*sessions.take_changed(session), *requested])
        if pass_.settled():
            return respond(pass_.finish(), session.id, pass_.failed)
        return Later(pass_.park(respond))

    def full_response(full: _FullPass) -> fetch.FetchResponse:
        session_id = 0
        if isinstance(context, FullFetch) and sessions is not None:
            cached = {}
            for tp, p in requested.items():
                cached[tp] = CachedPartition.of(p)
                cached[tp].must_respond(full.answers[tp], update=True)
            session_id = sessions.create(req.replica_id, cached, _carry_order(full.changed, (), full.answers),
                                         uses_topic_ids=uses_topic_ids)
        return respond(full.answers, session_id, full.failed)

    first = _read_full(ctx, req, requested, follower_reads=follower_reads)
    # min_bytes found (a consumer reading a backlog): settled with no second clock read
    if first.total >= req.min_bytes or first.settled(req, requested, deadline_ms - now_ms()):
        return full_response(first)
    return Later(_FullWait(ctx, req, requested, follower_reads, deadline_ms, full_response).watch())


_SESSIONLESS: Final = Sessionless()
# every fetch's answer: its fields are ours (common.slotted), not worth the frozen __init__'s setattrs
_new_response: Final = instance_builder(fetch.FetchResponse, tuple(fetch.FetchResponse.__dataclass_fields__))


@dataclass(slots=True)
class _FullPass:
    """One read of every requested partition: the answers, those with more to read or failed,
    the bytes found, and whether an answer must go out at once (an error, a diverging epoch,
    a preferred read replica: as Kafka's fetchMessages)."""

    answers: dict[TopicPartition, fetch.FetchPartitionResponse]
    changed: list[TopicPartition]
    total: int
    failed: bool

    def settled(self, req: fetch.FetchRequest, requested: Mapping[TopicPartition, object], left_ms: int) -> bool:
        return self.total >= req.min_bytes or self.failed or not requested or left_ms <= 0


def _read_full(ctx: BrokerContext, req: fetch.FetchRequest, requested: dict[TopicPartition, fetch.FetchPartition],
               *, follower_reads: bool, record: bool = True) -> _FullPass:
    """Every requested partition read; a follower's fetch recorded (`record`: its first read only)."""
    read = _FullPass({}, [], 0, False)
    for tp, p in requested.items():
        answer, more = read_partition(ctx, tp, p, req, req.max_bytes - read.total, first=read.total == 0,
                                      follower_reads=follower_reads, record=record)
        read.answers[tp] = answer
        read.total += size_of(answer)
        read.failed = read.failed or answer.error_code != 0 or answer.diverging_epoch is not None \
            or answer.preferred_read_replica >= 0
        if more or answer.error_code:
            read.changed.append(tp)
    return read


class _FullWait:
    """A full fetch that found too little: watched in the fetch purgatory until one of its
    partitions changes, then all read again, until min_bytes or the deadline (max_wait_ms).
    The purgatory's future wakes `_woken` in the loop pass after the change (its done
    callback), so a produce's other partitions are appended by then, as the task that awaited
    it would have found them."""

    __slots__ = ("_ctx", "_req", "_requested", "_follower_reads", "_deadline_ms", "_answer", "future")

    def __init__(self, ctx: BrokerContext, req: fetch.FetchRequest, requested: dict[TopicPartition, fetch.FetchPartition],
                 follower_reads: bool, deadline_ms: int, answer: Callable[[_FullPass], fetch.FetchResponse]) -> None:
        self._ctx, self._req, self._requested = ctx, req, requested
        self._follower_reads, self._deadline_ms, self._answer = follower_reads, deadline_ms, answer

    def watch(self) -> asyncio.Future[fetch.FetchResponse]:
        """The answer to come (the server awaits it): watched from now (the first read found too little)."""
        watched = self._watch()
        # the server hears it in the turn that sets it (AnswerFuture): no handle, no loop pass more.
        # On the purgatory future's loop (get_loop), not asyncio.get_running_loop()'s: that makes a
        # getpid(2) per call in CPython 3.11
        self.future: asyncio.Future[fetch.FetchResponse] = AnswerFuture(loop=watched.get_loop())
        return self.future

    def _watch(self) -> asyncio.Future[bool]:
        """Watched in the fetch purgatory until a partition changes (`_woken`) or the deadline."""
        replicas = self._ctx.replicas
        operation = delayed_fetch(replicas.partitions, self._requested, self._req.replica_id)
        left_s = (self._deadline_ms - replicas.timers.now_ms()) / SECOND_MS
        watched = replicas.fetch_purgatory.watch(operation, self._requested, left_s, _same)
        watched.add_done_callback(self._woken)  # in a later loop pass, even when decided already
        return watched

    def _woken(self, _changed: asyncio.Future[bool]) -> None:
        if self.future.done():  # cancelled: the connection closed meanwhile
            return
        try:
            # read again, not recorded again: a follower's fetch counted on arrival (Kafka's
            # DelayedFetch.onComplete reads with updateFetchState off)
            read = _read_full(self._ctx, self._req, self._requested, follower_reads=self._follower_reads,
                              record=False)
            if read.settled(self._req, self._requested, self._deadline_ms - self._ctx.replicas.timers.now_ms()):
                self.future.set_result(self._answer(read))
            else:
                self._watch()
        except Exception as exc:  # noqa: BLE001 - the request's failure, answered as a task's would be
            self.future.set_exception(exc)


def _same(changed: bool) -> bool:
    return changed


class _IncrementalPass:
    """An incremental fetch's reads: the partitions the request names and those its session saw
    change; only what must be answered is. An idle session parks on one event: no work per
    partition.

    Reading order is the round robin of Kafka's sessions (answered partitions move to the end,
    so a response size limit cannot starve one): the changed partitions come first, in the
    order the last fetch left them (`_carry_order`: those it could not answer with records
    first), then the ones the request names, which are the ones the fetcher just took
    records of. Named first, a busy partition's new fetch offset would win the budget every
    time, and a small partition behind it (the acks=all canary beside bulk load) would wait
    until the bulk drained."""

    __slots__ = ("_ctx", "sessions", "session", "_req", "_follower_reads", "_deadline_ms", "report", "carry",
                 "total", "failed", "future", "_respond")

    def __init__(self, ctx: BrokerContext, sessions: FetchSessions, session: FetchSession,
                 req: fetch.FetchRequest, follower_reads: bool, deadline_ms: int) -> None:
        self._ctx, self.sessions, self.session, self._req = ctx, sessions, session, req
        self._follower_reads, self._deadline_ms = follower_reads, deadline_ms
        self.report: dict[TopicPartition, fetch.FetchPartitionResponse] = {}
        self.carry: dict[TopicPartition, None] = {}  # still to answer on the next fetch (Kafka would)
        self.total = 0
        self.failed = False
        self.future: asyncio.Future[fetch.FetchResponse] | None = None  # set by `park`
        self._respond: _Respond | None = None

    def read(self, to_read: Iterable[TopicPartition], record: bool = True) -> None:
        """Read `to_read` (the session's partitions among them) into the report. `record`: on
        arrival only; a woken or expired fetch reads again without recording the follower's
        fetch a second time (Kafka's DelayedFetch). A partition first read then, idle when the
        fetch arrived, was recorded at the fetch's arrival when it first changed
        (`broker.fetch_sessions`, `replica_reads.record_session_fetch`), as Kafka's read of
        every session partition on arrival would have."""
        session, req, report = self.session, self._req, self.report
        for tp in dict.fromkeys(to_read):
            cached = session.partitions.get(tp)
            if cached is None:
                continue
            earlier = report.pop(tp, None)
            if earlier is not None:
                self.total -= size_of(earlier)
            answer, more = read_partition(self._ctx, tp, cached.request(tp.partition), req,
                                          req.max_bytes - self.total, first=self.total == 0,
                                          follower_reads=self._follower_reads, record=record)
            if more or answer.error_code:
                self.carry[tp] = None
            if cached.must_respond(answer, update=True) or earlier is not None:
                report[tp] = answer
                self.total += size_of(answer)
                self.failed = self.failed or answer.error_code != 0 or answer.diverging_epoch is not None \
                    or answer.preferred_read_replica >= 0
                session.answered(tp)

    def settled(self) -> bool:
        return self.total >= self._req.min_bytes or self.failed \
            or self._deadline_ms - self._ctx.replicas.timers.now_ms() <= 0

    def finish(self) -> dict[TopicPartition, fetch.FetchPartitionResponse]:
        # carried partitions have data left or an error: due; marks meanwhile keep theirs
        self.session.requeue(_carry_order(self.carry, self.session.changed, self.report), self.sessions.now_ms(),
                             due=bool(self.carry))
        return self.report

    def park(self, respond: _Respond) -> asyncio.Future[fetch.FetchResponse]:
        """This fetch found too little: parked on its session until a partition of it changes
        and is due (`wake`: read what changed, answer or park again), or its deadline
        (`expire`). A mark that is not due (a follower's HW move, its own fetch's included)
        waits too: it is read at the next due change or at the deadline. The answer to come,
        `respond(report, session id, failed)`, is the future returned (the server awaits it)."""
        # the server hears it in the turn that sets it (AnswerFuture): a woken fetch's answer is
        # written in the pass that reads it, with no handle and no loop pass more
        future: asyncio.Future[fetch.FetchResponse] = AnswerFuture(loop=asyncio.get_running_loop())
        self.future, self._respond = future, respond
        self.sessions.expire_at(self.session, self, self._deadline_ms)
        self.sessions.park(self.session, self)
        return future

    def wake(self) -> None:
        future = self.future
        assert future is not None
        if future.done():  # cancelled (the connection closed): its deadline forgets it
            return
        try:
            self.read(self.sessions.take_changed(self.session), record=False)
            if not self.settled():
                self.sessions.park(self.session, self)
                return
            self._answer(future)  # its deadline's entry is dropped when the sessions' timer next fires
        except Exception as exc:  # noqa: BLE001 - the request's failure, answered as a task's would be
            future.set_exception(exc)

    def done(self) -> bool:
        return self.future is not None and self.future.done()

    def expire(self) -> None:
        """The deadline (max_wait_ms): what changed meanwhile is read, and answered."""
        future = self.future
        assert future is not None
        if future.done():
            return
        try:
            self.read(self.sessions.take_changed(self.session), record=False)
            self._answer(future)
        except Exception as exc:  # noqa: BLE001 - the request's failure, answered as a task's would be
            future.set_exception(exc)

    def _answer(self, future: asyncio.Future[fetch.FetchResponse]) -> None:
        assert self._respond is not None
        future.set_result(self._respond(self.finish(), self.session.id, self.failed))


# respond(answers, session id, failed): the FetchResponse of an incremental fetch's answers
_Respond = Callable[[dict[TopicPartition, fetch.FetchPartitionResponse], int, bool], fetch.FetchResponse]


def _carry_order(carry: Iterable[TopicPartition], marked: Iterable[TopicPartition],
                 report: Mapping[TopicPartition, fetch.FetchPartitionResponse]) -> list[TopicPartition]:
    """What the next fetch reads, in order: partitions left with data that this one did not
    answer with records (the size limit cut them), then those marked changed meanwhile, then
    those it answered with records, last (Kafka moves answered partitions to the end of the
    session), even when this fetch's own reads marked them (a follower's fetch moves the HW)."""
    pending = list(dict.fromkeys([*carry, *marked]))
    if len(pending) < 2:  # nothing to order (a follower of one partition: every fetch)
        return pending

    def answered(tp: TopicPartition) -> bool:
        answer = report.get(tp)
        return answer is not None and size_of(answer) > 0

    return [*(tp for tp in pending if not answered(tp)), *(tp for tp in pending if answered(tp))]
