"""Reads: Fetch (consumers and followers). ListOffsets and OffsetForLeaderEpoch are in
broker/handlers/offset_lookups.py.

Fetch follows KIP-227 (`broker.fetch_session`): a full fetch reads every partition it names
and may open a session; an incremental one reads the partitions it names plus those its
session saw change, and answers only those with something to report. A full fetch that
finds fewer than min_bytes waits in the ReplicaManager's fetch purgatory until one of its
partitions changes; an incremental one waits on its session's change event. Either reads
again then; the whole request has one deadline, max_wait_ms. A follower's fetch (replica id >= 0) reads up to the log end offset and tells
the leader where the follower is (ReplicaManager.read).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from broker.fetch_session import (
    FINAL_EPOCH,
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
from broker.handlers.fetch_partitions import (
    FOLLOWER_FETCH_VERSION,
    LEADER_HINTS_VERSION,
    TOPIC_IDS_VERSION,
    by_topic,
    name_partitions,
    read_partition,
    size_of,
    with_leader_hints,
)
from broker.topic_metrics import count_fetch
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol import fetch
from common.units import SECOND_MS



async def handle_fetch(ctx: BrokerContext, req: fetch.FetchRequest, version: int, client: ClientInfo) -> fetch.FetchResponse:
    image = ctx.image()
    named = name_partitions(req, version, image)
    requested = named.requested
    uses_topic_ids = version >= TOPIC_IDS_VERSION
    sessions = ctx.fetch_sessions
    if sessions is None or version < 7:  # no sessions before v7 (KIP-227)
        context: FetchContext = Sessionless() if version < 7 or req.session_epoch == FINAL_EPOCH \
            or req.session_id == 0 else SessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    else:
        context = sessions.new_context(FetchMetadata(req.session_id, req.session_epoch), requested,
                                       named.forgotten, replica_id=req.replica_id,
                                       uses_topic_ids=uses_topic_ids)
    if isinstance(context, SessionError):
        return fetch.FetchResponse(0, (), int(context.error), 0)
    if isinstance(context, IncrementalFetch):
        assert sessions is not None
        answers = await _fetch_incremental(ctx, sessions, req, context.session, requested,
                                           follower_reads=version >= FOLLOWER_FETCH_VERSION)
        session_id = context.session.id
    else:
        answers, changed = await _fetch_full(ctx, req, requested, follower_reads=version >= FOLLOWER_FETCH_VERSION)
        session_id = 0
        if isinstance(context, FullFetch) and sessions is not None:
            cached = {}
            for tp, p in requested.items():
                cached[tp] = CachedPartition.of(p)
                cached[tp].must_respond(answers[tp], update=True)
            session_id = sessions.create(req.replica_id, cached, _carry_order(changed, (), answers),
                                         uses_topic_ids=uses_topic_ids)
    # Kafka's per-topic BytesOutPerSec: consumers' fetches only, one add per partition answered
    count_fetch(ctx.topic_stats, ((tp.topic, size_of(a)) for tp, a in answers.items()), replica_id=req.replica_id)
    endpoints = with_leader_hints(ctx, answers, image) if version >= LEADER_HINTS_VERSION else ()
    return fetch.FetchResponse(0, by_topic(answers, version, image, named.topic_ids, named.unknown), 0, session_id,
                               endpoints)


async def _fetch_full(ctx: BrokerContext, req: fetch.FetchRequest,
                      requested: dict[TopicPartition, fetch.FetchPartition], *, follower_reads: bool
                      ) -> tuple[dict[TopicPartition, fetch.FetchPartitionResponse], list[TopicPartition]]:
    """Every requested partition, waiting (bounded by max_wait_ms) for min_bytes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(req.max_wait_ms, 0) / SECOND_MS
    while True:  # bounded by max_wait_ms: each pass waits for a change or the deadline
        answers: dict[TopicPartition, fetch.FetchPartitionResponse] = {}
        changed: list[TopicPartition] = []
        total, failed = 0, False
        for tp, p in requested.items():
            answer, more = read_partition(ctx, tp, p, req, req.max_bytes - total, first=total == 0,
                                          follower_reads=follower_reads)
            answers[tp] = answer
            total += size_of(answer)
            # a preferred read replica is answered at once, as Kafka's fetchMessages does
            failed = failed or answer.error_code != 0 or answer.diverging_epoch is not None \
                or answer.preferred_read_replica >= 0
            if more or answer.error_code:
                changed.append(tp)
        remaining = deadline - loop.time()
        if total >= req.min_bytes or failed or remaining <= 0 or not requested:
            return answers, changed
        await ctx.replicas.wait_for_data(requested, remaining)


async def _fetch_incremental(ctx: BrokerContext, sessions: FetchSessions, req: fetch.FetchRequest,
                             session: FetchSession, requested: dict[TopicPartition, fetch.FetchPartition], *,
                             follower_reads: bool) -> dict[TopicPartition, fetch.FetchPartitionResponse]:
    """The partitions the request names and those the session saw change; only what must be
    answered is. An idle session parks on one event: no work per partition.

    Reading order is the round robin of Kafka's sessions (answered partitions move to the end,
    so a response size limit cannot starve one): the changed partitions come first, in the
    order the last fetch left them (`_carry_order`: those it could not answer with records
    first), then the ones the request names, which are the ones the fetcher just took
    records of. Named first, a busy partition's new fetch offset would win the budget every
    time, and a small partition behind it (the acks=all canary beside bulk load) would wait
    until the bulk drained."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(req.max_wait_ms, 0) / SECOND_MS
    to_read = list(dict.fromkeys([*sessions.take_changed(session), *requested]))
    report: dict[TopicPartition, fetch.FetchPartitionResponse] = {}
    carry: dict[TopicPartition, None] = {}  # still to answer on the next fetch (Kafka would)
    total, failed = 0, False
    while True:  # bounded by max_wait_ms: each pass reads what changed, then waits
        for tp in to_read:
            cached = session.partitions.get(tp)
            if cached is None:
                continue
            earlier = report.pop(tp, None)
            if earlier is not None:
                total -= size_of(earlier)
            answer, more = read_partition(ctx, tp, cached.request(tp.partition), req,
                                          req.max_bytes - total, first=total == 0, follower_reads=follower_reads)
            if more or answer.error_code:
                carry[tp] = None
            if cached.must_respond(answer, update=True) or earlier is not None:
                report[tp] = answer
                total += size_of(answer)
                failed = failed or answer.error_code != 0 or answer.diverging_epoch is not None \
                    or answer.preferred_read_replica >= 0
                session.answered(tp)
        remaining = deadline - loop.time()
        if total >= req.min_bytes or failed or remaining <= 0:
            break
        if not session.changed:
            await sessions.wait(session, remaining)
        to_read = sessions.take_changed(session)
    session.requeue(_carry_order(carry, session.changed, report), sessions.now_ms())
    return report


def _carry_order(carry: Iterable[TopicPartition], marked: Iterable[TopicPartition],
                 report: Mapping[TopicPartition, fetch.FetchPartitionResponse]) -> list[TopicPartition]:
    """What the next fetch reads, in order: partitions left with data that this one did not
    answer with records (the size limit cut them), then those marked changed meanwhile, then
    those it answered with records, last (Kafka moves answered partitions to the end of the
    session), even when this fetch's own reads marked them (a follower's fetch moves the HW)."""
    def answered(tp: TopicPartition) -> bool:
        answer = report.get(tp)
        return answer is not None and size_of(answer) > 0

    pending = list(dict.fromkeys([*carry, *marked]))
    return [*(tp for tp in pending if not answered(tp)), *(tp for tp in pending if answered(tp))]
