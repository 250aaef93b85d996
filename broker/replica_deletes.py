"""DeleteRecords on a hosted partition: the leader moves its log start offset, then waits until
every live replica's log start offset has followed (Kafka's deleteRecordsOnLeader and
DelayedDeleteRecords).

    deletes = RecordDeletes(broker_id, partitions, is_alive, checkpoint=..., wake=...)
    required, low = deletes.delete_records(tp, offset)          # raises a KafkaError
    results = await deletes.wait({tp: required}, {tp: low}, timeout_s)

Followers learn the new log start offset from the leader's fetch responses and report
their own in their next fetch; the leader's `Partition.low_watermark` is the lowest of
them. The segments below the new start go at the next retention pass, as in Kafka.

The leader's log-start checkpoint is written once per request and log dir, not once per
partition: `wait` starts that write (on the checkpoint writer's thread) and answers only after
it ended, so an answer never promises a start a crash could take back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, MutableMapping
from concurrent.futures import Future
from typing import Final, NamedTuple, Protocol

from broker.purgatory import Purgatory
from broker.replica_reads import ReplicaError, leader_partition
from broker.replication.partition import Partition
from common.topic_partition import TopicPartition
from common.errors import ErrorCode, OffsetOutOfRangeError
from common.protocol.delete_records import HIGH_WATERMARK, INVALID_LOW_WATERMARK
from groups.partitioner import GROUP_METADATA_TOPIC_NAME

log = logging.getLogger(__name__)

# Kafka's Topic.isInternal: records of these topics cannot be deleted through the protocol.
INTERNAL_TOPICS: Final = frozenset((GROUP_METADATA_TOPIC_NAME, "__transaction_state"))


class DeleteRecordsResult(NamedTuple):
    """One partition's answer: error code and low watermark (-1 on error)."""

    error_code: int
    low_watermark: int


def delete_records_on_leader(partition: Partition, offset: int) -> int:
    """Move the leader's log start offset to `offset` (-1: the high watermark); the offset
    the partition's replicas must reach. Nothing changes when it raises:
    INVALID_TOPIC_EXCEPTION (internal topic), POLICY_VIOLATION (cleanup.policy without
    delete), OFFSET_OUT_OF_RANGE (negative, or above the high watermark)."""
    tp, partition_log = partition.tp, partition.log
    if tp.topic in INTERNAL_TOPICS:
        raise ReplicaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete data of internal topic {tp}")
    if "delete" not in partition_log.config.cleanup_policy:
        raise ReplicaError(ErrorCode.POLICY_VIOLATION,
                           f"Records of partition {tp} can not be deleted due to the configured policy")
    requested = partition_log.high_watermark if offset == HIGH_WATERMARK else offset
    if requested < 0:
        raise OffsetOutOfRangeError(f"The offset {requested} for partition {tp} is not valid")
    before = partition_log.log_start_offset
    if partition_log.maybe_increment_log_start_offset(requested):  # raises above the HW
        log.info("Deleted records of %s below offset %d on request (log start offset %d -> %d, "
                 "leader epoch %d)", tp, requested, before, partition_log.log_start_offset,
                 partition.leader_epoch)
    return requested


def delete_records_outcome(partition: Partition | None, broker_id: int, required: int,
                           is_alive: Callable[[int], bool]) -> DeleteRecordsResult | None:
    """One partition of a waiting DeleteRecords: its answer once the low watermark reached
    `required` (or the leadership is gone), None while it must wait."""
    if partition is None:
        return DeleteRecordsResult(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), INVALID_LOW_WATERMARK)
    if not partition.is_leader(broker_id):
        return DeleteRecordsResult(int(ErrorCode.NOT_LEADER_OR_FOLLOWER), INVALID_LOW_WATERMARK)
    low = partition.low_watermark(is_alive)
    return DeleteRecordsResult(0, low) if low >= required else None


DeleteOutcome = Callable[[TopicPartition, int], "DeleteRecordsResult | None"]


class LogStartCheckpoint(Protocol):
    """`LogManager.checkpoint_log_start_offsets`: the log-start files of the partitions' dirs
    written; the future ends once they hold the partitions' entries (or with the error), and
    `wait=False` returns it at once."""

    def __call__(self, *tps: TopicPartition, wait: bool = ...) -> Future[None]: ...


class DelayedDeleteRecords:
    """A DeleteRecords waiting for every live replica's log start offset (Kafka's
    DelayedDeleteRecords): a decided partition stays decided; at the request's one deadline
    the others answer REQUEST_TIMED_OUT with the low watermark seen when it was applied."""

    __slots__ = ("_done", "_initial", "_outcome", "required")

    def __init__(self, required: Mapping[TopicPartition, int], initial_low: Mapping[TopicPartition, int],
                 outcome: DeleteOutcome) -> None:
        self.required = dict(required)
        self._initial = dict(initial_low)
        self._outcome = outcome
        self._done: dict[TopicPartition, DeleteRecordsResult] = {}

    def try_complete(self) -> dict[TopicPartition, DeleteRecordsResult] | None:
        for tp, offset in self.required.items():
            if tp not in self._done:
                result = self._outcome(tp, offset)
                if result is not None:
                    self._done[tp] = result
        return dict(self._done) if len(self._done) == len(self.required) else None

    def on_expiration(self) -> dict[TopicPartition, DeleteRecordsResult]:
        timed_out = int(ErrorCode.REQUEST_TIMED_OUT)
        return {tp: self._done.get(tp) or DeleteRecordsResult(timed_out, self._initial.get(tp, INVALID_LOW_WATERMARK))
                for tp in self.required}


class RecordDeletes:
    """The leader's DeleteRecords: apply on the local log, then wait in its own purgatory,
    which the ReplicaManager checks after every follower fetch and every change of a
    partition (`purgatory.check_and_complete(tp)`)."""

    def __init__(self, broker_id: int, partitions: MutableMapping[TopicPartition, Partition],
                 is_alive: Callable[[int], bool], *, checkpoint: LogStartCheckpoint,
                 wake: Callable[[TopicPartition], None]) -> None:
        self._broker_id, self._partitions, self._is_alive = broker_id, partitions, is_alive
        self._checkpoint, self._wake = checkpoint, wake
        self.purgatory: Purgatory[TopicPartition, dict[TopicPartition, DeleteRecordsResult]] = \
            Purgatory("DeleteRecords")

    def delete_records(self, tp: TopicPartition, offset: int) -> tuple[int, int]:
        """Move the leader's log start offset (`delete_records_on_leader`); (the offset every
        live replica must reach, the low watermark now). Raises KafkaError. The request's
        `wait` writes the moved starts to the log-start checkpoint."""
        partition = leader_partition(self._partitions, self._broker_id, tp)
        before = partition.log.log_start_offset
        required = delete_records_on_leader(partition, offset)
        if partition.log.log_start_offset != before:
            self._wake(tp)  # waiting follower fetches answer with the new log start offset
        return required, partition.low_watermark(self._is_alive)

    async def wait(self, required: Mapping[TopicPartition, int], initial_low: Mapping[TopicPartition, int],
                   timeout_s: float) -> dict[TopicPartition, DeleteRecordsResult]:
        """Each partition's answer once every live replica's log start offset reached
        `required[tp]`, or REQUEST_TIMED_OUT at the request's one deadline; and in either case
        once the log-start checkpoints hold the partitions' starts (one write per log dir,
        beside the wait for the replicas)."""
        written = self._checkpoint(*required, wait=False)
        operation = DelayedDeleteRecords(required, initial_low, lambda tp, offset: delete_records_outcome(
            self._partitions.get(tp), self._broker_id, offset, self._is_alive))
        results = await self.purgatory.wait(operation, required, timeout_s)
        try:  # not bounded by the timeout: a local write, and an answer before it would promise
            await asyncio.wrap_future(written)  # a start a crash could take back
        except Exception:  # noqa: BLE001 - logged by the writer, owed to the next pass; the starts
            pass  # moved all the same (as when the write was synchronous), and the answer says so
        return results
