"""Offset lookups: ListOffsets (an offset for a timestamp or a special position) and
OffsetForLeaderEpoch (where a leader epoch ends, for follower truncation).

Both are served on kio's generated messages (common/protocol/list_offsets.py and
offset_for_leader_epoch.py hold the old versions kio lacks): a handler reads the request of
the version the client sent and answers that version's response, except ListOffsets v0,
whose own small classes carry a list of segment start offsets.
"""

from __future__ import annotations

import time
from typing import Any

from broker.handlers.context import BrokerContext, ClientInfo
from broker.log.legacy_offsets import SegmentTime, legacy_offsets_before
from broker.replica_reads import READ_COMMITTED, ReplicaError
from common.errors import ErrorCode
from common.protocol import fetch, messages
from common.protocol import list_offsets as lo
from common.protocol import offset_for_leader_epoch as ofle
from common.protocol.api_keys import ApiKey
from common.topic_partition import TopicPartition
from common.units import SECOND_MS

NO_TIMESTAMP = -1
NO_OFFSET = -1
NO_EPOCH = -1


# ---- ListOffsets --------------------------------------------------------------------------


async def handle_list_offsets(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's ListOffsetsRequest of `version` (lo.V0Request at v0); the answer that
    version's response."""
    if version == 0:
        return _handle_v0(ctx, req)
    image = ctx.image()
    m = messages.response_module(ApiKey.LIST_OFFSETS, version)
    # v2+: a read_committed consumer is answered up to the last stable offset (`_offset_for`)
    isolation_level: int = req.isolation_level if version >= 2 else lo.READ_UNCOMMITTED
    consumer = req.replica_id < 0
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            current_epoch = getattr(p, "current_leader_epoch", lo.NO_LEADER_EPOCH)  # v4+
            if version < lo.MIN_VERSION_OF_TIMESTAMP.get(p.timestamp, 0):
                answer = (ErrorCode.UNSUPPORTED_VERSION, NO_TIMESTAMP, NO_OFFSET, NO_EPOCH)
            else:
                try:
                    answer = _offset_for(ctx, tp, p.timestamp, current_epoch, consumer=consumer,
                                         isolation_level=isolation_level)
                except Exception as e:  # noqa: BLE001 - a failure answers this partition only
                    answer = (messages.error_code(ctx.partition_error(tp, e, image)), NO_TIMESTAMP, NO_OFFSET,
                              NO_EPOCH)
            error, timestamp, offset, epoch = answer
            parts.append(messages.build(m.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                                        error_code=error, timestamp=timestamp, offset=offset, leader_epoch=epoch))
        topics.append(m.ListOffsetsTopicResponse(name=t.name, partitions=tuple(parts)))
    return messages.build(m.ListOffsetsResponse, throttle_time=messages.NO_THROTTLE, topics=tuple(topics))


def _handle_v0(ctx: BrokerContext, req: lo.V0Request) -> lo.V0Response:
    image = ctx.image()
    consumer = req.replica_id == fetch.CONSUMER_REPLICA_ID
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if lo.MIN_VERSION_OF_TIMESTAMP.get(p.timestamp, 0) > 0:
                parts.append(lo.V0PartitionResponse(p.partition_index, ErrorCode.UNSUPPORTED_VERSION, ()))
                continue
            try:
                parts.append(_legacy_offsets(ctx, tp, p, consumer=consumer))
            except Exception as e:  # noqa: BLE001 - a failure answers this partition only
                parts.append(lo.V0PartitionResponse(p.partition_index, ctx.partition_error(tp, e, image), ()))
        topics.append(lo.V0TopicResponse(t.name, tuple(parts)))
    return lo.V0Response(tuple(topics))


def _legacy_offsets(ctx: BrokerContext, tp: TopicPartition, p: lo.V0Partition, *,
                    consumer: bool) -> lo.V0PartitionResponse:
    """v0: segment start offsets (legacy_offsets_before) from the segment files' mtimes, as Kafka."""
    log = ctx.replicas.leader_partition(tp, lo.NO_LEADER_EPOCH).log
    segments = log.segments
    times = [SegmentTime(s.base_offset, s.modified_ms()) for s in segments]
    offsets = legacy_offsets_before(
        times, log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset, active_segment_has_data=segments[-1].size > 0,
        now_ms=int(time.time() * SECOND_MS), timestamp=p.timestamp, max_num_offsets=p.max_num_offsets,
        high_watermark=log.high_watermark if consumer else None)
    return lo.V0PartitionResponse(p.partition_index, 0, offsets)


def _offset_for(ctx: BrokerContext, tp: TopicPartition, timestamp: int, current_leader_epoch: int, *,
                consumer: bool, isolation_level: int) -> tuple[ErrorCode, int, int, int]:
    """(error, timestamp, offset, leader_epoch) for one partition (v1+)."""
    partition = ctx.replicas.leader_partition(tp, current_leader_epoch)
    partition_log = partition.log
    if consumer and partition_log.high_watermark < partition.leader_epoch_start_offset:
        # KIP-207: a new leader's HW may still be its follower-time one, behind what the
        # previous leader had exposed; answering it would move a client's view backwards.
        raise ReplicaError(ErrorCode.OFFSET_NOT_AVAILABLE,
                           f"the high watermark of {tp} has not reached the start of leader "
                           f"epoch {partition.leader_epoch} yet")
    # Kafka's lastFetchableOffset: read_committed consumers see up to the last stable offset,
    # read_uncommitted ones up to the HW, followers (and tools) up to the log end.
    if not consumer:
        fetchable = partition_log.log_end_offset
    elif isolation_level == READ_COMMITTED:
        fetchable = partition.last_stable_offset
    else:
        fetchable = partition_log.high_watermark
    if timestamp == lo.LATEST_TIMESTAMP:
        return ErrorCode.NONE, NO_TIMESTAMP, fetchable, partition.leader_epoch
    if timestamp == lo.LATEST_TIERED_TIMESTAMP:  # no tiered storage: nothing tiered yet
        return ErrorCode.NONE, NO_TIMESTAMP, NO_OFFSET, NO_EPOCH
    # Without tiered storage the local log start is the log start (KIP-405's -4).
    if timestamp == lo.EARLIEST_LOCAL_TIMESTAMP:
        timestamp = lo.EARLIEST_TIMESTAMP
    found = partition_log.offset_for_timestamp(timestamp)
    if found is None or found.offset >= fetchable and timestamp != lo.EARLIEST_TIMESTAMP:
        return ErrorCode.NONE, NO_TIMESTAMP, NO_OFFSET, NO_EPOCH
    return ErrorCode.NONE, found.timestamp, found.offset, found.leader_epoch


# ---- OffsetForLeaderEpoch -----------------------------------------------------------------


async def handle_offset_for_leader_epoch(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's OffsetForLeaderEpochRequest of `ofle.schema_version(version)`; the
    answer that version's response."""
    image = ctx.image()
    m = messages.response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, ofle.schema_version(version))
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            tp = TopicPartition(t.topic, p.partition)
            try:
                partition = ctx.replicas.leader_partition(tp, p.current_leader_epoch)
                end = partition.log.end_offset_for_epoch(p.leader_epoch)
                parts.append(m.EpochEndOffset(error_code=ErrorCode.NONE, partition=p.partition,
                                              leader_epoch=end.leader_epoch, end_offset=end.end_offset))
            except Exception as e:  # noqa: BLE001 - a failure answers this partition only
                parts.append(m.EpochEndOffset(error_code=messages.error_code(ctx.partition_error(tp, e, image)),
                                              partition=p.partition, leader_epoch=ofle.UNDEFINED_EPOCH,
                                              end_offset=ofle.UNDEFINED_EPOCH_OFFSET))
        topics.append(m.OffsetForLeaderTopicResult(topic=t.topic, partitions=tuple(parts)))
    return m.OffsetForLeaderEpochResponse(throttle_time=messages.NO_THROTTLE, topics=tuple(topics))
