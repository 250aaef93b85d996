"""Reads: Fetch (consumers and followers), ListOffsets, OffsetForLeaderEpoch.

A fetch that finds fewer than min_bytes waits in the ReplicaManager's fetch purgatory until
one of its partitions changes, then reads again; the whole request has one deadline,
max_wait_ms. A follower's fetch (replica id >= 0) reads up to the log end offset and tells
the leader where the follower is (ReplicaManager.read).
"""

from __future__ import annotations

import asyncio
import os
import time

from broker.handlers.context import BrokerContext, ClientInfo
from broker.log.legacy_offsets import SegmentTime, legacy_offsets_before
from broker.replica_reads import ReplicaError
from broker.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol import fetch
from common.protocol import list_offsets as lo
from common.protocol import offset_for_leader_epoch as ofle
from common.units import SECOND_MS

CONSUMER_REPLICA_ID = -1  # ListOffsets v0: only a consumer is held to the high watermark


async def handle_fetch(ctx: BrokerContext, req: fetch.FetchRequest, version: int, client: ClientInfo) -> fetch.FetchResponse:
    if version >= 7 and req.session_id != 0:  # no fetch sessions: full fetches only
        return fetch.FetchResponse(0, (), int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND), 0)
    tps = [TopicPartition(t.topic, p.partition) for t in req.topics for p in t.partitions]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(req.max_wait_ms, 0) / SECOND_MS
    while True:  # bounded by max_wait_ms: each pass waits for a change or the deadline
        responses, total_bytes, failed = _read(ctx, req)
        remaining = deadline - loop.time()
        if total_bytes >= req.min_bytes or failed or remaining <= 0 or not tps:
            return fetch.FetchResponse(0, responses)
        await ctx.replicas.wait_for_data(tps, remaining)


def _read(ctx: BrokerContext, req: fetch.FetchRequest) -> tuple[tuple[fetch.FetchTopicResponse, ...], int, bool]:
    image = ctx.image()
    budget, total, failed = req.max_bytes, 0, False
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            tp = TopicPartition(t.topic, p.partition)
            limit = max(min(p.partition_max_bytes, budget), 0)
            try:
                read = ctx.replicas.read(tp, p.fetch_offset, limit,
                                         current_leader_epoch=p.current_leader_epoch,
                                         min_one_batch=total == 0,  # Kafka: progress first
                                         replica_id=req.replica_id,
                                         replica_log_start_offset=p.log_start_offset)
            except Exception as e:  # noqa: BLE001 - a failure answers this partition only
                failed = True
                parts.append(fetch.FetchPartitionResponse(
                    p.partition, ctx.partition_error(tp, e, image), -1, b"", -1, -1))
                continue
            size = read.records.length
            total += size
            budget -= size
            parts.append(fetch.FetchPartitionResponse(
                p.partition, 0, read.high_watermark, read.records if size else b"",
                last_stable_offset=read.high_watermark, log_start_offset=read.log_start_offset))
        topics.append(fetch.FetchTopicResponse(t.topic, tuple(parts)))
    return tuple(topics), total, failed


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
                    parts.append(_legacy_offsets(ctx, tp, p, consumer=req.replica_id == CONSUMER_REPLICA_ID))
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
    times = [SegmentTime(s.base_offset, int(os.fstat(s.fd).st_mtime * SECOND_MS)) for s in segments]
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
