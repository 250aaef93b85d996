"""Writes to a hosted partition's log: a leader's produce appends, a follower's appends and
truncations, and the acks=all wait (Kafka's DelayedProduce).

    info = append_as_leader(partition, records, acks=-1, now_ms=now)   # raises a KafkaError
    append_as_follower(partition, records, leader_high_watermark, now_ms=now)
    codes = await purgatory.wait(DelayedProduce(required, outcome), required, timeout_s)

The caller (ReplicaManager) finds the partition, moves the high watermark afterwards and
wakes the requests waiting on it. Idempotent producers are checked here with
`broker.producer_state`; leaders and followers both keep that state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Final

from broker.log.partition_log import LogAppendInfo
from broker.producer_state import AppendOutcome, ProducerStateManager
from broker.replica_reads import ReplicaError
from broker.replication.high_watermark import follower_high_watermark
from broker.replication.leader_rules import acks_all_refused
from broker.replication.partition import Partition
from common.topic_partition import TopicPartition
from common.errors import ErrorCode, KafkaStorageError
from common.record_batch import RecordBatchHeader, iter_batches, read_batches

log = logging.getLogger(__name__)

VALID_ACKS: Final = frozenset((-1, 0, 1))


def check_required_acks(acks: int) -> None:
    if acks not in VALID_ACKS:
        raise ReplicaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1 (all), 0 or 1, got {acks}")


def append_as_leader(partition: Partition, records: bytes | memoryview, *, acks: int,
                     now_ms: int) -> LogAppendInfo:
    """Append a producer's batches, stamped with the current leader epoch.

    Raises KafkaError: NOT_ENOUGH_REPLICAS (acks=-1 below min.insync.replicas),
    CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, KAFKA_STORAGE_ERROR, a
    producer-state refusal, ... Nothing is appended when it raises.
    """
    if acks == -1 and acks_all_refused(partition.isr, partition.min_insync_replicas):
        raise ReplicaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                           f"ISR {list(partition.isr)} of {partition.tp} is smaller than "
                           f"min.insync.replicas {partition.min_insync_replicas}")
    view = memoryview(records)
    batches = read_batches(view)  # once: the log appends these without reading them again
    idempotent = any(header.producer_id >= 0 for _, header in batches)
    if idempotent:
        duplicate = _check_producer_state(partition, batches)
        if duplicate is not None:
            return duplicate
    try:
        info = partition.log.append(view, now_ms=now_ms, leader_epoch=partition.leader_epoch,
                                    batches=batches)
    except OSError as e:
        raise KafkaStorageError(f"append to {partition.tp} failed: {e}") from e
    if idempotent:
        _update_producer_state(partition, batches, info.first_offset)
    return info


def _check_producer_state(partition: Partition, headers: list[tuple[int, RecordBatchHeader]]
                          ) -> LogAppendInfo | None:
    """Kafka's analyzeAndValidateProducerState: a rejected batch fails the append; a
    duplicate is acknowledged with its original offsets and nothing is appended."""
    for _, header in headers:
        verdict = partition.producer_state.check(header)
        if verdict.outcome is AppendOutcome.REJECT:
            raise ReplicaError(ErrorCode(verdict.error_code), verdict.message or
                               f"producer {header.producer_id} batch refused on {partition.tp}")
        if verdict.outcome is AppendOutcome.DUPLICATE and verdict.duplicate is not None:
            d = verdict.duplicate
            log.debug("Duplicate batch of producer %d on %s at offsets %d..%d",
                      header.producer_id, partition.tp, d.first_offset, d.last_offset)
            return LogAppendInfo(d.first_offset, d.last_offset, -1, d.timestamp, d.last_offset,
                                 partition.log.log_start_offset, 0, 0)
    return None


# ---- the follower side (the replica fetchers call these through the ReplicaManager) ---------


def append_as_follower(partition: Partition, records: memoryview, leader_high_watermark: int, *,
                       now_ms: int, leader_log_start_offset: int = -1) -> LogAppendInfo | None:
    """Append the leader's batches as they are (same offsets, same bytes); then the HW and
    the log start offset, which follows the leader's up to this replica's HW (Kafka's
    follower never moves its start past its HW)."""
    info = None
    # One pass, each batch framed and CRC-checked once; a fetch may end in a partial batch,
    # which stays for the next fetch.
    batches = list(iter_batches(records, allow_partial_tail=True))
    if batches:
        whole = records[:batches[-1][0] + batches[-1][1].size]
        try:
            info = partition.log.append(whole, now_ms=now_ms, assign_offsets=False, batches=batches)
        except OSError as e:
            raise KafkaStorageError(f"follower append to {partition.tp} failed: {e}") from e
        for _, header in batches:  # the leader's offsets: a compacted leader's log has gaps
            if header.producer_id >= 0:
                partition.producer_state.update(header, header.base_offset, header.last_offset)
    partition_log = partition.log
    partition_log.update_high_watermark(follower_high_watermark(
        leader_high_watermark=leader_high_watermark, log_end_offset=partition_log.log_end_offset))
    new_start = min(leader_log_start_offset, partition_log.high_watermark)
    before = partition_log.log_start_offset
    if partition_log.maybe_increment_log_start_offset(new_start):
        log.info("Follower %s moved its log start offset %d -> %d after the leader's", partition.tp,
                 before, new_start)
    return info


def truncate_follower(partition: Partition, offset: int, why: str, *, now_ms: int) -> None:
    """Truncate a follower's log to `offset` (and its producer state with it)."""
    partition_log = partition.log
    leo = partition_log.log_end_offset
    if partition_log.truncate_to(offset, now_ms=now_ms):
        log.warning("Truncated follower %s to offset %d (log end offset was %d: offsets "
                    "%d..%d dropped) %s", partition.tp, offset, leo, offset, leo - 1, why)
        rebuild_producer_state(partition)


def truncate_follower_fully(partition: Partition, start_offset: int, why: str, *,
                            now_ms: int) -> None:
    """Drop a follower's whole log; it restarts empty at the leader's `start_offset`."""
    leo = partition.log.log_end_offset
    partition.log.truncate_fully_and_start_at(start_offset, now_ms=now_ms)
    log.warning("Truncated follower %s fully to start at offset %d (log end offset was %d) %s",
                partition.tp, start_offset, leo, why)
    partition.producer_state = ProducerStateManager()


def _update_producer_state(partition: Partition, batches: list[tuple[int, RecordBatchHeader]],
                           first_offset: int) -> None:
    base = first_offset
    for _, header in batches:
        if header.producer_id >= 0:
            partition.producer_state.update(header, base, base + header.last_offset_delta)
        base += header.last_offset_delta + 1


def rebuild_producer_state(partition: Partition) -> None:
    # No producer snapshots yet: one pass over the log's batch headers.
    partition.producer_state = ProducerStateManager()
    partition.producer_state.rebuild(h for h in partition.log.batch_headers() if h.producer_id >= 0)


# ---- acks=all ----------------------------------------------------------------------------


ProduceOutcome = Callable[[TopicPartition, int], "int | None"]


class DelayedProduce:
    """One acks=all request waiting for its partitions' high watermarks (Kafka's DelayedProduce).

    `required[tp]` is the offset tp's HW must reach; `outcome(tp, offset)` is that
    partition's error code once it is decided (0: replicated) or None while it must wait.
    A decided partition stays decided; the request completes when all are, or at its one
    deadline, where the undecided ones answer REQUEST_TIMED_OUT.
    """

    __slots__ = ("_codes", "_outcome", "required")

    def __init__(self, required: Mapping[TopicPartition, int], outcome: ProduceOutcome) -> None:
        self.required = dict(required)
        self._outcome = outcome
        self._codes: dict[TopicPartition, int] = {}

    def try_complete(self) -> dict[TopicPartition, int] | None:
        for tp, offset in self.required.items():
            if tp not in self._codes:
                code = self._outcome(tp, offset)
                if code is not None:
                    self._codes[tp] = code
        return dict(self._codes) if len(self._codes) == len(self.required) else None

    def on_expiration(self) -> dict[TopicPartition, int]:
        return {tp: self._codes.get(tp, int(ErrorCode.REQUEST_TIMED_OUT)) for tp in self.required}
