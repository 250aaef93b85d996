"""Reads: Fetch (consumers and followers), ListOffsets, OffsetForLeaderEpoch.

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
from broker.replica_reads import ReplicaError
from broker.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol import fetch
from common.protocol import list_offsets as lo
from common.protocol import offset_for_leader_epoch as ofle
from common.protocol.primitives import RecordsPlaceholder
from common.units import SECOND_MS


async def handle_fetch(ctx: BrokerContext, req: fetch.FetchRequest, version: int, client: ClientInfo) -> fetch.FetchResponse:
    requested = {TopicPartition(t.topic, p.partition): p for t in req.topics for p in t.partitions}
    sessions = ctx.fetch_sessions
    if sessions is None or version < 7:  # no sessions before v7 (KIP-227)
        context: FetchContext = Sessionless() if version < 7 or req.session_epoch == FINAL_EPOCH \
            or req.session_id == 0 else SessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    else:
        forgotten = [TopicPartition(f.topic, i) for f in req.forgotten_topics_data for i in f.partitions]
        context = sessions.new_context(FetchMetadata(req.session_id, req.session_epoch), requested,
                                       forgotten, replica_id=req.replica_id)
    if isinstance(context, SessionError):
        return fetch.FetchResponse(0, (), int(context.error), 0)
    if isinstance(context, IncrementalFetch):
        assert sessions is not None
        return await _fetch_incremental(ctx, sessions, req, context.session)
    answers, changed = await _fetch_full(ctx, req, requested)
    session_id = 0
    if isinstance(context, FullFetch) and sessions is not None:
        cached = {}
        for tp, p in requested.items():
            cached[tp] = CachedPartition.of(p)
            cached[tp].must_respond(answers[tp], update=True)
        session_id = sessions.create(req.replica_id, cached, changed)
    return fetch.FetchResponse(0, _by_topic(answers), 0, session_id)


async def _fetch_full(ctx: BrokerContext, req: fetch.FetchRequest,
                      requested: dict[TopicPartition, fetch.FetchPartition]
                      ) -> tuple[dict[TopicPartition, fetch.FetchPartitionResponse], list[TopicPartition]]:
    """Every requested partition, waiting (bounded by max_wait_ms) for min_bytes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(req.max_wait_ms, 0) / SECOND_MS
    while True:  # bounded by max_wait_ms: each pass waits for a change or the deadline
        answers: dict[TopicPartition, fetch.FetchPartitionResponse] = {}
        changed: list[TopicPartition] = []
        total, failed = 0, False
        for tp, p in requested.items():
            answer, more = _read_partition(ctx, tp, p, req, req.max_bytes - total, first=total == 0)
            answers[tp] = answer
            total += _size(answer)
            failed = failed or answer.error_code != 0
            if more or answer.error_code:
                changed.append(tp)
        remaining = deadline - loop.time()
        if total >= req.min_bytes or failed or remaining <= 0 or not requested:
            return answers, changed
        await ctx.replicas.wait_for_data(requested, remaining)


async def _fetch_incremental(ctx: BrokerContext, sessions: FetchSessions, req: fetch.FetchRequest,
                             session: FetchSession) -> fetch.FetchResponse:
    """The partitions the request names and those the session saw change; only what must be
    answered is. An idle session parks on one event: no work per partition."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(req.max_wait_ms, 0) / SECOND_MS
    named = [TopicPartition(t.topic, p.partition) for t in req.topics for p in t.partitions]
    to_read = list(dict.fromkeys([*named, *session.take_changed()]))
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
                total -= _size(earlier)
            answer, more = _read_partition(ctx, tp, cached.request(tp.partition), req,
                                           req.max_bytes - total, first=total == 0)
            if more or answer.error_code:
                carry[tp] = None
            if cached.must_respond(answer, update=True) or earlier is not None:
                report[tp] = answer
                total += _size(answer)
                failed = failed or answer.error_code != 0
                session.answered(tp)
        remaining = deadline - loop.time()
        if total >= req.min_bytes or failed or remaining <= 0:
            break
        if not session.changed:
            await sessions.wait(session, remaining)
        to_read = session.take_changed()
    session.changed.update(carry)
    return fetch.FetchResponse(0, _by_topic(report), 0, session.id)


def _read_partition(ctx: BrokerContext, tp: TopicPartition, p: fetch.FetchPartition, req: fetch.FetchRequest,
                    budget: int, *, first: bool) -> tuple[fetch.FetchPartitionResponse, bool]:
    """One partition's answer, and whether data is left past its fetch offset (the one
    place a per-partition byte limit applies)."""
    limit = max(min(p.partition_max_bytes, budget), 0)
    try:
        read = ctx.replicas.read(tp, p.fetch_offset, limit,
                                 current_leader_epoch=p.current_leader_epoch,
                                 min_one_batch=first,  # Kafka: progress first
                                 replica_id=req.replica_id,
                                 replica_log_start_offset=p.log_start_offset)
    except Exception as e:  # noqa: BLE001 - a failure answers this partition only
        return fetch.FetchPartitionResponse(p.partition, ctx.partition_error(tp, e, ctx.image()),
                                            -1, b"", -1, -1), False
    size = read.records.length
    readable_end = read.log_end_offset if req.replica_id >= 0 else read.high_watermark
    return fetch.FetchPartitionResponse(
        p.partition, 0, read.high_watermark, read.records if size else b"",
        last_stable_offset=read.high_watermark, log_start_offset=read.log_start_offset
    ), readable_end > p.fetch_offset


def _size(answer: fetch.FetchPartitionResponse) -> int:
    records = answer.records
    if records is None:
        return 0
    return records.length if isinstance(records, RecordsPlaceholder) else len(records)


def _by_topic(answers: dict[TopicPartition, fetch.FetchPartitionResponse]) -> tuple[fetch.FetchTopicResponse, ...]:
    topics: dict[str, list[fetch.FetchPartitionResponse]] = {}
    for tp, answer in answers.items():
        topics.setdefault(tp.topic, []).append(answer)
    return tuple(fetch.FetchTopicResponse(topic, tuple(parts)) for topic, parts in topics.items())


async def handle_list_offsets(ctx: BrokerContext, req: lo.ListOffsetsRequest,
                              version: int, client: ClientInfo) -> lo.ListOffsetsResponse:
    image = ctx.image()
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            try:
                parts.append(_offset_for(ctx, tp, p, consumer=req.replica_id < 0))
            except Exception as e:  # noqa: BLE001 - a failure answers this partition only
                parts.append(lo.ListOffsetsPartitionResponse(
                    p.partition_index, ctx.partition_error(tp, e, image), -1, -1, -1))
        topics.append(lo.ListOffsetsTopicResponse(t.name, tuple(parts)))
    return lo.ListOffsetsResponse(tuple(topics))


def _offset_for(ctx: BrokerContext, tp: TopicPartition, p: lo.ListOffsetsPartition, *,
                consumer: bool) -> lo.ListOffsetsPartitionResponse:
    partition = ctx.replicas.leader_partition(tp, p.current_leader_epoch)
    partition_log = partition.log
    if consumer and partition_log.high_watermark < partition.leader_epoch_start_offset:
        # KIP-207: a new leader's HW may still be its follower-time one, behind what the
        # previous leader had exposed; answering it would move a client's view backwards.
        raise ReplicaError(ErrorCode.OFFSET_NOT_AVAILABLE,
                           f"the high watermark of {tp} has not reached the start of leader "
                           f"epoch {partition.leader_epoch} yet")
    # Consumers never see past the HW; last_stable_offset == HW (no transactions).
    fetchable = partition_log.high_watermark if consumer else partition_log.log_end_offset
    if p.timestamp == lo.LATEST_TIMESTAMP:
        return lo.ListOffsetsPartitionResponse(p.partition_index, 0, -1, fetchable,
                                               partition.leader_epoch)
    # Without tiered storage the local log start is the log start (KIP-405's -4).
    timestamp = lo.EARLIEST_TIMESTAMP if p.timestamp == lo.EARLIEST_LOCAL_TIMESTAMP else p.timestamp
    found = partition_log.offset_for_timestamp(timestamp)
    if found is None or found.offset >= fetchable and timestamp != lo.EARLIEST_TIMESTAMP:
        return lo.ListOffsetsPartitionResponse(p.partition_index, 0, -1, -1, -1)
    return lo.ListOffsetsPartitionResponse(p.partition_index, 0, found.timestamp, found.offset,
                                           found.leader_epoch)


async def handle_offset_for_leader_epoch(ctx: BrokerContext, req: ofle.OffsetForLeaderEpochRequest,
                                         version: int, client: ClientInfo) -> ofle.OffsetForLeaderEpochResponse:
    image = ctx.image()
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            tp = TopicPartition(t.topic, p.partition)
            try:
                partition = ctx.replicas.leader_partition(tp, p.current_leader_epoch)
                end = partition.log.end_offset_for_epoch(p.leader_epoch)
                parts.append(ofle.EpochEndOffset(0, p.partition, end.leader_epoch, end.end_offset))
            except Exception as e:  # noqa: BLE001 - a failure answers this partition only
                parts.append(ofle.EpochEndOffset(ctx.partition_error(tp, e, image), p.partition,
                                                 ofle.UNDEFINED_EPOCH, ofle.UNDEFINED_EPOCH_OFFSET))
        topics.append(ofle.OffsetForLeaderTopicResult(t.topic, tuple(parts)))
    return ofle.OffsetForLeaderEpochResponse(tuple(topics))
