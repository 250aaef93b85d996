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
import time

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
    LEADER_HINTS_VERSION,
    TOPIC_IDS_VERSION,
    by_topic,
    name_partitions,
    read_partition,
    size_of,
    with_leader_hints,
)
from broker.log.legacy_offsets import SegmentTime, legacy_offsets_before
from broker.replica_reads import ReplicaError
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol import fetch
from common.protocol import list_offsets as lo
from common.protocol import offset_for_leader_epoch as ofle
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
        answers = await _fetch_incremental(ctx, sessions, req, context.session, requested)
        session_id = context.session.id
    else:
        answers, changed = await _fetch_full(ctx, req, requested)
        session_id = 0
        if isinstance(context, FullFetch) and sessions is not None:
            cached = {}
            for tp, p in requested.items():
                cached[tp] = CachedPartition.of(p)
                cached[tp].must_respond(answers[tp], update=True)
            session_id = sessions.create(req.replica_id, cached, changed, uses_topic_ids=uses_topic_ids)
    endpoints = with_leader_hints(ctx, answers, image) if version >= LEADER_HINTS_VERSION else ()
    return fetch.FetchResponse(0, by_topic(answers, version, image, named.topic_ids, named.unknown), 0, session_id,
                               endpoints)


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
            answer, more = read_partition(ctx, tp, p, req, req.max_bytes - total, first=total == 0)
            answers[tp] = answer
            total += size_of(answer)
            failed = failed or answer.error_code != 0 or answer.diverging_epoch is not None
            if more or answer.error_code:
                changed.append(tp)
        remaining = deadline - loop.time()
        if total >= req.min_bytes or failed or remaining <= 0 or not requested:
            return answers, changed
        await ctx.replicas.wait_for_data(requested, remaining)


async def _fetch_incremental(ctx: BrokerContext, sessions: FetchSessions, req: fetch.FetchRequest,
                             session: FetchSession, requested: dict[TopicPartition, fetch.FetchPartition]
                             ) -> dict[TopicPartition, fetch.FetchPartitionResponse]:
    """The partitions the request names and those the session saw change; only what must be
    answered is. An idle session parks on one event: no work per partition."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(req.max_wait_ms, 0) / SECOND_MS
    to_read = list(dict.fromkeys([*requested, *session.take_changed()]))
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
                                          req.max_bytes - total, first=total == 0)
            if more or answer.error_code:
                carry[tp] = None
            if cached.must_respond(answer, update=True) or earlier is not None:
                report[tp] = answer
                total += size_of(answer)
                failed = failed or answer.error_code != 0 or answer.diverging_epoch is not None
                session.answered(tp)
        remaining = deadline - loop.time()
        if total >= req.min_bytes or failed or remaining <= 0:
            break
        if not session.changed:
            await sessions.wait(session, remaining)
        to_read = session.take_changed()
    session.changed.update(carry)
    return report


async def handle_list_offsets(ctx: BrokerContext, req: lo.ListOffsetsRequest,
                              version: int, client: ClientInfo) -> lo.ListOffsetsResponse:
    image = ctx.image()
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if version < lo.MIN_VERSION_OF_TIMESTAMP.get(p.timestamp, 0):
                parts.append(lo.ListOffsetsPartitionResponse(
                    p.partition_index, ErrorCode.UNSUPPORTED_VERSION, -1, -1, -1))
                continue
            try:
                if version == 0:
                    parts.append(_legacy_offsets(ctx, tp, p, consumer=req.replica_id == fetch.CONSUMER_REPLICA_ID))
                    continue
                parts.append(_offset_for(ctx, tp, p, consumer=req.replica_id < 0))
            except Exception as e:  # noqa: BLE001 - a failure answers this partition only
                parts.append(lo.ListOffsetsPartitionResponse(
                    p.partition_index, ctx.partition_error(tp, e, image), -1, -1, -1))
        topics.append(lo.ListOffsetsTopicResponse(t.name, tuple(parts)))
    return lo.ListOffsetsResponse(tuple(topics))


def _legacy_offsets(ctx: BrokerContext, tp: TopicPartition, p: lo.ListOffsetsPartition, *,
                    consumer: bool) -> lo.ListOffsetsPartitionResponse:
    """v0: segment start offsets (legacy_offsets_before) from the segment files' mtimes, as Kafka."""
    log = ctx.replicas.leader_partition(tp, -1).log
    segments = log.segments
    times = [SegmentTime(s.base_offset, s.modified_ms()) for s in segments]
    offsets = legacy_offsets_before(
        times, log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset, active_segment_has_data=segments[-1].size > 0,
        now_ms=int(time.time() * SECOND_MS), timestamp=p.timestamp, max_num_offsets=p.max_num_offsets,
        high_watermark=log.high_watermark if consumer else None)
    return lo.ListOffsetsPartitionResponse(p.partition_index, 0, -1, -1, -1, offsets)


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
    if p.timestamp == lo.LATEST_TIERED_TIMESTAMP:  # no tiered storage: nothing tiered yet
        return lo.ListOffsetsPartitionResponse(p.partition_index, 0, -1, -1, -1)
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
