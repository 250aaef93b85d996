"""Storage-side admin APIs: DeleteRecords, DescribeLogDirs, AlterReplicaLogDirs,
DescribeProducers.

DeleteRecords moves each partition's log start offset on its leader and waits, bounded by
the request's timeout_ms, until every live replica has followed (ReplicaManager's
DeleteRecords purgatory). DescribeLogDirs reports each of this broker's `log.dirs`, the
size of every partition log in it and the volume's total and usable bytes (v4+).
DescribeProducers lists the producer state of partitions this broker hosts (leader or
follower, as Kafka answers from the local log). AlterReplicaLogDirs (served on kio's
generated messages, no codec of ours) answers as Kafka's ReplicaManager.alterReplicaLogDirs
for what tidelog can do: a replica already in the requested directory is a success, a
directory not in `log.dirs` is LOG_DIR_NOT_FOUND, a partition this broker does not host is
REPLICA_NOT_AVAILABLE; moving a replica to another of this broker's directories (Kafka's
future-log copy) is not implemented and answers KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from broker.handlers.context import BrokerContext, ClientInfo
from broker.log.partition_log import PartitionLog
from broker.replica_deletes import DeleteRecordsResult
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol import delete_records as dr
from common.units import SECOND_MS

log = logging.getLogger(__name__)


# ---- DeleteRecords ------------------------------------------------------------------------


async def handle_delete_records(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's DeleteRecordsRequest of `version`; the answer its response."""
    image = ctx.image()
    results: dict[TopicPartition, DeleteRecordsResult] = {}
    required: dict[TopicPartition, int] = {}
    initial_low: dict[TopicPartition, int] = {}
    for t in req.topics:
        topic = image.topic(t.name)
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if topic is None or p.partition_index not in topic.partitions:
                results[tp] = DeleteRecordsResult(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                                  dr.INVALID_LOW_WATERMARK)
                continue
            try:
                required[tp], initial_low[tp] = ctx.replicas.deletes.delete_records(tp, p.offset)
            except Exception as e:  # noqa: BLE001 - a failure answers this partition only
                results[tp] = DeleteRecordsResult(ctx.partition_error(tp, e, image), dr.INVALID_LOW_WATERMARK)
    if required:
        # Kafka waits only when some partition was applied; the request has one deadline.
        timeout_s = max(messages.milliseconds(req.timeout), 0) / SECOND_MS
        results.update(await ctx.replicas.deletes.wait(required, initial_low, timeout_s))
    m = messages.response_module(ApiKey.DELETE_RECORDS, version)
    return m.DeleteRecordsResponse(throttle_time=messages.NO_THROTTLE, topics=tuple(
        m.DeleteRecordsTopicResult(name=t.name, partitions=tuple(
            _delete_result(m, p.partition_index, results[TopicPartition(t.name, p.partition_index)])
            for p in t.partitions))
        for t in req.topics))


def _delete_result(m: ModuleType, partition: int, result: DeleteRecordsResult) -> Any:
    return m.DeleteRecordsPartitionResult(partition_index=partition, low_watermark=result.low_watermark,
                                          error_code=messages.error_code(result.error_code))


# ---- DescribeLogDirs ----------------------------------------------------------------------


async def handle_describe_log_dirs(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's DescribeLogDirsRequest of `version`; the answer its response (v0 is
    v1 on the wire; total and usable bytes exist from v4, `build` drops them before)."""
    log_manager = ctx.replicas.log_manager
    if req.topics is None:
        wanted = set(log_manager.partitions())
    else:
        wanted = {TopicPartition(t.topic, p) for t in req.topics for p in t.partitions}
    by_dir: dict[Path, list[tuple[TopicPartition, PartitionLog]]] = {d: [] for d in log_manager.log_dirs}
    for tp, partition_log in sorted(log_manager.logs.items()):
        by_dir.setdefault(log_manager.log_dir_of(tp), []).append((tp, partition_log))
    m = messages.response_module(ApiKey.DESCRIBE_LOG_DIRS, version)
    results = tuple(_describe_dir(m, directory, logs, wanted) for directory, logs in by_dir.items())
    return messages.build(m.DescribeLogDirsResponse, throttle_time=messages.NO_THROTTLE,
                          error_code=ErrorCode.NONE, results=results)


def _describe_dir(m: ModuleType, directory: Path, logs: list[tuple[TopicPartition, PartitionLog]],
                  wanted: set[TopicPartition]) -> Any:
    path = os.path.abspath(directory)
    try:
        stat = os.statvfs(directory)
    except OSError as e:
        log.error("Cannot describe log directory %s: %s", path, e)
        return m.DescribeLogDirsResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=path, topics=())
    # Java's FileStore: total space is every block, usable space what this user may write.
    total, usable = stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize
    return messages.build(m.DescribeLogDirsResult, error_code=ErrorCode.NONE, log_dir=path,
                          topics=tuple(_topics(m, logs, wanted)), total_bytes=total, usable_bytes=usable)


def _topics(m: ModuleType, logs: list[tuple[TopicPartition, PartitionLog]], wanted: set[TopicPartition]
            ) -> Iterable[Any]:
    # As Kafka groups a directory's logs by topic before filtering the partitions, a topic
    # in the directory appears even when none of its partitions was asked for.
    topics: dict[str, list[Any]] = {}
    for tp, partition_log in logs:
        parts = topics.setdefault(tp.topic, [])
        if tp in wanted:
            parts.append(m.DescribeLogDirsPartition(
                partition_index=tp.partition, partition_size=partition_log.size_in_bytes,
                offset_lag=_offset_lag(partition_log), is_future_key=False))
    return (m.DescribeLogDirsTopic(name=name, partitions=tuple(parts)) for name, parts in topics.items())


def _offset_lag(partition_log: PartitionLog) -> int:
    """Kafka's getLogEndOffsetLag for a current (not future) log: how far its log end offset
    is below its high watermark, never negative (0 on a leader, and on a follower whose HW
    follows its own LEO)."""
    return max(partition_log.high_watermark - partition_log.log_end_offset, 0)


# ---- AlterReplicaLogDirs -----------------------------------------------------------------

# Kafka's UnifiedLog.logFutureDirName, "<topic>-<partition>.<uuid>-future", must fit a file
# name (KAFKA-4893): 1 + 32 + 7 bytes around "<topic>-<partition>", 255 at most.
MAX_FUTURE_DIR_NAME_BYTES = 255
FUTURE_DIR_NAME_EXTRA_BYTES = len(".") + 32 + len("-future")


def alter_replica_log_dir_error(tp: TopicPartition, destination: str, *, log_dirs: Iterable[str],
                                current_dir: str | None) -> ErrorCode:
    """Kafka's answer for moving `tp`'s replica on this broker to `destination` (a path as
    the client sent it; Kafka compares it with each log dir's absolute path), given the
    broker's absolute `log_dirs` and the replica's directory (None: not hosted here)."""
    if len(str(tp).encode()) + FUTURE_DIR_NAME_EXTRA_BYTES > MAX_FUTURE_DIR_NAME_BYTES:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if destination not in log_dirs:  # checked before the partition, as Kafka does
        return ErrorCode.LOG_DIR_NOT_FOUND
    if current_dir is None:  # Kafka's NotLeaderOrFollower, answered as REPLICA_NOT_AVAILABLE here
        return ErrorCode.REPLICA_NOT_AVAILABLE
    if current_dir == destination:
        return ErrorCode.NONE
    return ErrorCode.KAFKA_STORAGE_ERROR  # no future-log copy between directories yet


async def handle_alter_replica_log_dirs(ctx: BrokerContext, req: Any, version: int,
                                        client: ClientInfo) -> Any:
    """`req` is kio's AlterReplicaLogDirsRequest of `version` (v1-v2 share their fields)."""
    log_manager = ctx.replicas.log_manager
    log_dirs = [os.path.abspath(d) for d in log_manager.log_dirs]
    # Kafka keys the request by partition (the last directory named for it wins) and
    # answers grouped by topic.
    destinations: dict[TopicPartition, str] = {}
    for log_dir in req.dirs:
        for topic in log_dir.topics:
            for index in topic.partitions:
                destinations[TopicPartition(topic.name, index)] = log_dir.path
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
    for tp, destination in destinations.items():
        hosted = tp in log_manager.logs
        current = os.path.abspath(log_manager.log_dir_of(tp)) if hosted else None
        error = alter_replica_log_dir_error(tp, destination, log_dirs=log_dirs, current_dir=current)
        if error == ErrorCode.KAFKA_STORAGE_ERROR:
            log.warning("Cannot move replica %s from %s to %s for client %s: moving a replica between"
                        " log directories is not implemented", tp, current, destination, client.client_id)
        elif error != ErrorCode.NONE:
            log.info("Refused moving replica %s to log dir %s for client %s: %s",
                     tp, destination, client.client_id, error.name)
        by_topic.setdefault(tp.topic, []).append((tp.partition, error))
    m = messages.response_module(ApiKey.ALTER_REPLICA_LOG_DIRS, version)
    return messages.build(m.AlterReplicaLogDirsResponse, throttle_time=messages.NO_THROTTLE, results=tuple(
        m.AlterReplicaLogDirTopicResult(topic_name=name, partitions=tuple(
            m.AlterReplicaLogDirPartitionResult(partition_index=index, error_code=error)
            for index, error in parts))
        for name, parts in by_topic.items()))


# ---- DescribeProducers --------------------------------------------------------------------


async def handle_describe_producers(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's DescribeProducersRequest (v0); the answer its response."""
    image = ctx.image()
    m = messages.response_module(ApiKey.DESCRIBE_PRODUCERS, version)
    topics = []
    for t in req.topics:
        topic = image.topic(t.name)
        parts = []
        for index in t.partition_indexes:
            partition = ctx.replicas.get_partition(TopicPartition(t.name, index))
            if partition is None:
                # Kafka's getPartitionOrError: known but not hosted here, or unknown.
                known = topic is not None and index in topic.partitions
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(m.PartitionResponse(partition_index=index, error_code=code, active_producers=()))
                continue
            # coordinator_epoch: of the last marker seen (-1: none); current_txn_start_offset:
            # the open transaction's first offset (-1: none), as kafka-transactions.sh shows them
            producers = tuple(
                m.ProducerState(producer_id=entry.producer_id, producer_epoch=entry.producer_epoch,
                                last_sequence=entry.last_seq, last_timestamp=entry.last_timestamp,
                                coordinator_epoch=entry.coordinator_epoch,
                                current_txn_start_offset=entry.current_txn_first_offset)
                for _, entry in sorted(partition.producer_state.entries.items()))
            parts.append(m.PartitionResponse(partition_index=index, error_code=ErrorCode.NONE,
                                             active_producers=producers))
        topics.append(m.TopicResponse(name=t.name, partitions=tuple(parts)))
    return m.DescribeProducersResponse(throttle_time=messages.NO_THROTTLE, topics=tuple(topics))
