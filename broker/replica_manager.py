"""The partitions this broker hosts: their role, epochs and log, appends, reads, and waiting.

    replicas = ReplicaManager(broker_id, log_manager, now_ms=clock_ms)
    replicas.apply_changes(changes, image)        # from the metadata follower (on_changes)
    info = replicas.append(tp, records, acks=1)   # leader append; raises a KafkaError
    read = replicas.read(tp, offset, max_bytes)   # consumers: up to the high watermark
    await replicas.wait_for_data([tp, ...], timeout_s)   # a waiting fetch, woken by appends

Kafka's ReplicaManager and Partition, cut to what a single-replica leader needs; every
place the replication issue changes is a named seam: `on_become_follower` (start a
fetcher), `maybe_advance_high_watermark` (min LEO over the ISR) and the follower LEOs it
reads (`Partition.follower_end_offsets`). Idempotent producers are checked per partition
with `broker.producer_state` (header-only; rebuilt from the log's batch headers on open).

Everything runs on one event loop; no method blocks except on the local disk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from broker.errors import ErrorCode, KafkaError, KafkaStorageError
from broker.log.log_config import TOPIC_LOG_KEYS, with_topic_overrides
from broker.log.log_manager import LogManager
from broker.log.partition_log import LogAppendInfo, PartitionLog
from broker.log.segment import FileSlice
from broker.producer_state import AppendOutcome, ProducerStateManager
from broker.record_batch import RecordBatchHeader, read_batches
from broker.topic_partition import TopicPartition
from metadata.delta import LocalPartition, LocalReplicaChanges
from metadata.image import MetadataImage
from metadata.records import ConfigResourceType
from tidelog.config import ConfigError

log = logging.getLogger(__name__)

# Kafka error codes (org.apache.kafka.common.protocol.Errors) that broker/errors.py lacks.
LEADER_NOT_AVAILABLE: Final = ErrorCode.LEADER_NOT_AVAILABLE
NOT_LEADER_OR_FOLLOWER: Final = ErrorCode.NOT_LEADER_OR_FOLLOWER
REQUEST_TIMED_OUT: Final = ErrorCode.REQUEST_TIMED_OUT
NOT_ENOUGH_REPLICAS: Final = ErrorCode.NOT_ENOUGH_REPLICAS
INVALID_REQUIRED_ACKS: Final = ErrorCode.INVALID_REQUIRED_ACKS
FENCED_LEADER_EPOCH: Final = ErrorCode.FENCED_LEADER_EPOCH
UNKNOWN_LEADER_EPOCH: Final = ErrorCode.UNKNOWN_LEADER_EPOCH

VALID_ACKS: Final = frozenset((-1, 0, 1))
MIN_INSYNC_REPLICAS_KEY: Final = "min.insync.replicas"
DEFAULT_MIN_INSYNC_REPLICAS: Final = 1
_LOG_KEYS: Final = frozenset(key.name for key in TOPIC_LOG_KEYS)
# The batch header's producerId (int64 at byte 43): -1 for a producer that is not idempotent.


class ReplicaError(KafkaError):
    """A partition-level refusal carrying any Kafka error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def not_leader(tp: TopicPartition, why: str) -> ReplicaError:
    return ReplicaError(NOT_LEADER_OR_FOLLOWER, f"this broker is not the leader of {tp}: {why}")


@dataclass(slots=True, eq=False)
class Partition:
    """One hosted topic-partition: what the metadata log says about it, and its log."""

    tp: TopicPartition
    topic_id: str
    log: PartitionLog
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    min_insync_replicas: int = DEFAULT_MIN_INSYNC_REPLICAS
    # The replication issue fills this from follower fetches (replica id -> log end offset).
    follower_end_offsets: dict[int, int] = field(default_factory=dict)
    # Idempotent producers, rebuilt from the log's batch headers when the partition opens
    # (no producer snapshots yet, so the scan covers the whole log: one header per batch).
    producer_state: ProducerStateManager = field(default_factory=ProducerStateManager)

    def is_leader(self, broker_id: int) -> bool:
        return self.leader_id == broker_id


class ReadResult(NamedTuple):
    records: FileSlice
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class ReplicaManager:
    """Hosted partitions by TopicPartition, and the fetches waiting on them."""

    def __init__(self, broker_id: int, log_manager: LogManager, *,
                 now_ms: Callable[[], int]) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self._now_ms = now_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        self._topic_overrides: dict[str, dict[str, str]] = {}
        # A small purgatory: futures of waiting fetches (and acks=-1 produces) per partition.
        # Each waiter registers one future under each partition it reads and removes it
        # when done, so the sets hold at most (waiting requests x their partitions).
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    # ---- metadata --------------------------------------------------------------------

    def apply_changes(self, changes: LocalReplicaChanges, image: MetadataImage) -> None:
        """Act on this broker's LocalReplicaChanges: delete, lead, follow (Kafka's order)."""
        for local in changes.deletes:
            self._delete(TopicPartition(local.topic_name, local.partition_id))
        self._refresh_topic_configs(image)
        elected = {(p.topic_name, p.partition_id) for p in changes.elected_leaders}
        for local in changes.leaders:
            self._become_leader(local, image, (local.topic_name, local.partition_id) in elected)
        for local in changes.followers:
            self._become_follower(local, image)

    def _refresh_topic_configs(self, image: MetadataImage) -> None:
        # Config records do not show up in LocalReplicaChanges: compare every hosted topic.
        for topic in sorted({tp.topic for tp in self.partitions}):
            self._apply_topic_config(topic, image)

    def _apply_topic_config(self, topic: str, image: MetadataImage) -> None:
        overrides = dict(image.config(ConfigResourceType.TOPIC, topic))
        if topic in self._topic_overrides and self._topic_overrides[topic] == overrides:
            return
        self._topic_overrides[topic] = overrides
        min_isr = _int_or(overrides.get(MIN_INSYNC_REPLICAS_KEY), DEFAULT_MIN_INSYNC_REPLICAS)
        for tp, partition in self.partitions.items():
            if tp.topic == topic:
                partition.min_insync_replicas = min_isr
        log_overrides = {k: v for k, v in overrides.items() if k in _LOG_KEYS}
        try:
            config = with_topic_overrides(self.log_manager.default_config, log_overrides)
        except ConfigError as e:
            log.error("Ignoring invalid configs of topic %s (using the broker defaults): %s",
                      topic, "; ".join(e.problems))
            config = self.log_manager.default_config
        self.log_manager.update_topic_config(topic, config)

    def _hosted(self, local: LocalPartition, image: MetadataImage) -> Partition | None:
        tp = TopicPartition(local.topic_name, local.partition_id)
        registration = local.partition
        partition = self.partitions.get(tp)
        if partition is None or partition.topic_id != local.topic_id:
            if tp.topic not in self._topic_overrides:
                self._apply_topic_config(tp.topic, image)
            try:
                partition_log = self.log_manager.get_or_create_log(tp, now_ms=self._now_ms())
            except (KafkaStorageError, OSError) as e:
                log.error("Cannot open the log of %s; the partition stays offline here: %s", tp, e)
                return None
            partition = Partition(tp, local.topic_id, partition_log, registration.leader,
                                  registration.leader_epoch, registration.partition_epoch,
                                  registration.replicas, registration.isr)
            partition.producer_state.rebuild(
                h for h in partition_log.batch_headers() if h.producer_id >= 0)
            partition.min_insync_replicas = _int_or(
                self._topic_overrides.get(tp.topic, {}).get(MIN_INSYNC_REPLICAS_KEY),
                DEFAULT_MIN_INSYNC_REPLICAS)
            self.partitions[tp] = partition
        partition.leader_id = registration.leader
        partition.leader_epoch = registration.leader_epoch
        partition.partition_epoch = registration.partition_epoch
        partition.replicas, partition.isr = registration.replicas, registration.isr
        return partition

    def _become_leader(self, local: LocalPartition, image: MetadataImage, elected: bool) -> None:
        previous = self.partitions.get(TopicPartition(local.topic_name, local.partition_id))
        was_leader_epoch = None if previous is None else previous.leader_epoch
        partition = self._hosted(local, image)
        if partition is None:
            return
        partition_log = partition.log
        if elected or was_leader_epoch != partition.leader_epoch:
            partition_log.leader_epoch_cache.assign(partition.leader_epoch,
                                                    partition_log.log_end_offset)
            partition.follower_end_offsets.clear()
            log.info("Leader %s with leader epoch %d starting at offset %d (high watermark %d, "
                     "ISR %s)", partition.tp, partition.leader_epoch, partition_log.log_end_offset,
                     partition_log.high_watermark, list(partition.isr))
        self.maybe_advance_high_watermark(partition)
        self._wake(partition.tp)

    def _become_follower(self, local: LocalPartition, image: MetadataImage) -> None:
        partition = self._hosted(local, image)
        if partition is None:
            return
        partition.follower_end_offsets.clear()
        self._wake(partition.tp)  # waiting fetches answer NOT_LEADER_OR_FOLLOWER now
        self.on_become_follower(partition)

    def on_become_follower(self, partition: Partition) -> None:
        """Seam for replication: truncate by leader epoch and start fetching from the leader.

        Until then a follower only hosts its log and refuses produce and fetch requests.
        """
        log.info("Follower %s of leader %d with leader epoch %d (replication is not "
                 "implemented yet: not fetching)", partition.tp, partition.leader_id,
                 partition.leader_epoch)

    def _delete(self, tp: TopicPartition) -> None:
        partition = self.partitions.pop(tp, None)
        self._wake(tp)
        try:
            self.log_manager.delete_log(tp)
        except (KafkaStorageError, OSError) as e:
            log.error("Cannot delete the log of removed partition %s: %s", tp, e)
        if partition is not None:
            log.info("Stopped hosting %s (removed from its replicas or topic deleted)", tp)
        if not any(p.topic == tp.topic for p in self.partitions):
            self._topic_overrides.pop(tp.topic, None)

    # ---- lookups ---------------------------------------------------------------------

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def leader_partition(self, tp: TopicPartition, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it; KafkaError otherwise (Kafka's
        getPartitionOrException plus the current-leader-epoch check of KIP-320)."""
        partition = self.partitions.get(tp)
        if partition is None:
            # Kafka: a partition this broker does not host at all is unknown here; the
            # handler answers NOT_LEADER_OR_FOLLOWER when the topic exists in the image.
            raise ReplicaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this broker does not host {tp}")
        if current_leader_epoch >= 0:
            if current_leader_epoch < partition.leader_epoch:
                raise ReplicaError(FENCED_LEADER_EPOCH,
                                   f"leader epoch {current_leader_epoch} of {tp} is older than "
                                   f"the current {partition.leader_epoch}")
            if current_leader_epoch > partition.leader_epoch:
                raise ReplicaError(UNKNOWN_LEADER_EPOCH,
                                   f"leader epoch {current_leader_epoch} of {tp} is newer than "
                                   f"this broker's {partition.leader_epoch}")
        if not partition.is_leader(self.broker_id):
            raise not_leader(tp, f"the leader is broker {partition.leader_id}")
        return partition

    # ---- append ----------------------------------------------------------------------

    @staticmethod
    def check_required_acks(acks: int) -> None:
        if acks not in VALID_ACKS:
            raise ReplicaError(INVALID_REQUIRED_ACKS,
                               f"acks must be -1 (all), 0 or 1, got {acks}")

    def append(self, tp: TopicPartition, records: bytes | memoryview, *, acks: int
               ) -> LogAppendInfo:
        """Append a producer's batches as leader, stamped with the current leader epoch.

        Raises KafkaError: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
        NOT_ENOUGH_REPLICAS (acks=-1), CORRUPT_MESSAGE, MESSAGE_TOO_LARGE,
        RECORD_LIST_TOO_LARGE, KAFKA_STORAGE_ERROR, ...
        """
        self.check_required_acks(acks)
        partition = self.leader_partition(tp)
        if acks == -1 and len(partition.isr) < partition.min_insync_replicas:
            raise ReplicaError(NOT_ENOUGH_REPLICAS,
                               f"ISR {list(partition.isr)} of {tp} is smaller than "
                               f"min.insync.replicas {partition.min_insync_replicas}")
        view = memoryview(records)
        batches = read_batches(view)  # once: the log appends these without reading them again
        idempotent = any(header.producer_id >= 0 for _, header in batches)
        if idempotent:
            duplicate = self._check_producer_state(partition, batches)
            if duplicate is not None:
                return duplicate
        try:
            info = partition.log.append(view, now_ms=self._now_ms(),
                                        leader_epoch=partition.leader_epoch, batches=batches)
        except OSError as e:
            raise KafkaStorageError(f"append to {tp} failed: {e}") from e
        if idempotent:
            base = info.first_offset
            for _, header in batches:
                if header.producer_id >= 0:
                    partition.producer_state.update(header, base, base + header.last_offset_delta)
                base += header.last_offset_delta + 1
        self.maybe_advance_high_watermark(partition)
        self._wake(tp)
        return info

    @staticmethod
    def _check_producer_state(partition: Partition, headers: list[tuple[int, RecordBatchHeader]]
                              ) -> LogAppendInfo | None:
        """Kafka's analyzeAndValidateProducerState: a rejected batch fails the append; a
        duplicate is acknowledged with its original offsets and nothing is appended."""
        for _, header in headers:
            verdict = partition.producer_state.check(header)
            if verdict.outcome is AppendOutcome.REJECT:
                raise ReplicaError(verdict.error_code, verdict.message or
                                   f"producer {header.producer_id} batch refused on {partition.tp}")
            if verdict.outcome is AppendOutcome.DUPLICATE and verdict.duplicate is not None:
                d = verdict.duplicate
                log.debug("Duplicate batch of producer %d on %s at offsets %d..%d",
                          header.producer_id, partition.tp, d.first_offset, d.last_offset)
                return LogAppendInfo(d.first_offset, d.last_offset, -1, d.timestamp, d.last_offset,
                                     partition.log.log_start_offset, 0, 0)
        return None

    def maybe_advance_high_watermark(self, partition: Partition) -> bool:
        """HW = min log end offset over the ISR (Kafka's maybeIncrementLeaderHW).

        Until replication lands, follower LEOs are unknown, so only an ISR of this broker
        alone (RF=1, or an ISR shrunk to the leader) advances: HW = the log end offset.
        """
        partition_log = partition.log
        end_offsets = [partition_log.log_end_offset if replica == self.broker_id
                       else partition.follower_end_offsets.get(replica, -1)
                       for replica in partition.isr]
        new_hw = min(end_offsets, default=partition_log.log_end_offset)
        if new_hw > partition_log.high_watermark:
            partition_log.update_high_watermark(new_hw)
            return True
        return False

    async def wait_for_high_watermark(self, tp: TopicPartition, offset: int,
                                      timeout_s: float) -> int:
        """acks=-1: wait until the high watermark reaches `offset` (error code, 0 if it did)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:  # bounded by the deadline: each pass waits for a wake-up or the timeout
            partition = self.partitions.get(tp)
            if partition is None or not partition.is_leader(self.broker_id):
                return NOT_LEADER_OR_FOLLOWER
            if partition.log.high_watermark >= offset:
                return 0
            remaining = deadline - loop.time()
            if remaining <= 0:
                return REQUEST_TIMED_OUT
            await self.wait_for_data((tp,), remaining)

    # ---- read ------------------------------------------------------------------------

    def read(self, tp: TopicPartition, offset: int, max_bytes: int, *,
             current_leader_epoch: int = -1, up_to_high_watermark: bool = True,
             min_one_batch: bool = True) -> ReadResult:
        """Batches from `offset` as a file slice; consumers never read past the HW."""
        partition = self.leader_partition(tp, current_leader_epoch)
        partition_log = partition.log
        high_watermark = partition_log.high_watermark
        try:
            data = partition_log.read(
                offset, max_bytes, max_offset=high_watermark if up_to_high_watermark else None,
                min_one_batch=min_one_batch)
        except OSError as e:
            raise KafkaStorageError(f"read of {tp} at offset {offset} failed: {e}") from e
        return ReadResult(data, high_watermark, partition_log.log_start_offset,
                          partition_log.log_end_offset)

    # ---- waiting fetches ---------------------------------------------------------------

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout_s: float) -> bool:
        """Wait until an append (or a leadership change) touches one of `tps`, or the
        timeout passes; True when woken. The caller re-reads and decides."""
        if timeout_s <= 0:
            return False
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(dict.fromkeys(tps))
        for tp in keys:
            self._waiters.setdefault(tp, set()).add(future)
        try:
            await asyncio.wait_for(future, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            for tp in keys:
                waiting = self._waiters.get(tp)
                if waiting is not None:
                    waiting.discard(future)
                    if not waiting:
                        del self._waiters[tp]

    def _wake(self, tp: TopicPartition) -> None:
        for future in self._waiters.pop(tp, ()):
            if not future.done():
                future.set_result(None)

    def waiting_count(self, tp: TopicPartition) -> int:
        """How many requests wait on `tp` (tests, metrics)."""
        return len(self._waiters.get(tp, ()))


def _int_or(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default
