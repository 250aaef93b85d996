"""The partitions this broker hosts: their role, epochs and log, appends, reads, and waiting.

    replicas = ReplicaManager(broker_id, log_manager, now_ms=clock_ms)
    replicas.apply_changes(changes, image)        # from the metadata follower (on_changes)
    info = replicas.append(tp, records, acks=1)   # leader append; raises a KafkaError
    read = replicas.read(tp, offset, max_bytes)   # consumers: up to the high watermark
    read = replicas.read(tp, offset, max_bytes, replica_id=2)   # a follower: up to the LEO
    await replicas.wait_for_data([tp, ...], timeout_s)   # a waiting fetch, woken by appends

Kafka's ReplicaManager. As leader it records each follower's fetches, moves the high
watermark (min LEO over the ISR), and proposes ISR changes to the controller through the
AlterPartitionManager — applied only when the committed metadata comes back. As follower
it hands the partition to the replica fetchers (`fetchers`), which truncate by leader
epoch, fetch and append through `append_as_follower`. Idempotent producers are checked per
partition with `broker.producer_state` (leaders and followers both keep it).

Everything runs on one event loop; no method blocks except on the local disk.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
import logging
from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple, Protocol

from broker.replication.alter_partition_manager import AlterPartitionItem, AlterPartitionManager
from broker.log.log_manager import LogManager
from broker.log.partition_log import LogAppendInfo
from broker.log.segment import FileSlice
from broker.replication.partition import DEFAULT_MIN_INSYNC_REPLICAS, Partition, PendingIsrChange
from broker.producer_state import AppendOutcome, ProducerStateManager
from broker.replication.high_watermark import follower_high_watermark
from broker.replication.isr_policy import DEFAULT_REPLICA_LAG_TIME_MAX_MS
from broker.topic_partition import TopicPartition
from common.config import ConfigError
from common.errors import (
    ErrorCode,
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
)
from common.record_batch import RecordBatchHeader, iter_batches, read_batches
from common.topic_config import TOPIC_LOG_KEYS, with_topic_overrides
from metadata.delta import LocalPartition, LocalReplicaChanges
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import ConfigResourceType, LeaderRecoveryState

log = logging.getLogger(__name__)

LEADER_NOT_AVAILABLE: Final = ErrorCode.LEADER_NOT_AVAILABLE
NOT_LEADER_OR_FOLLOWER: Final = ErrorCode.NOT_LEADER_OR_FOLLOWER
REQUEST_TIMED_OUT: Final = ErrorCode.REQUEST_TIMED_OUT
NOT_ENOUGH_REPLICAS: Final = ErrorCode.NOT_ENOUGH_REPLICAS
NOT_ENOUGH_REPLICAS_AFTER_APPEND: Final = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
INVALID_REQUIRED_ACKS: Final = ErrorCode.INVALID_REQUIRED_ACKS
FENCED_LEADER_EPOCH: Final = ErrorCode.FENCED_LEADER_EPOCH
UNKNOWN_LEADER_EPOCH: Final = ErrorCode.UNKNOWN_LEADER_EPOCH

VALID_ACKS: Final = frozenset((-1, 0, 1))
MIN_INSYNC_REPLICAS_KEY: Final = "min.insync.replicas"
_LOG_KEYS: Final = frozenset(key.name for key in TOPIC_LOG_KEYS)
NO_BROKER_EPOCH: Final = -1  # an ISR member whose broker epoch the controller need not check


class ReplicaError(KafkaError):
    """A partition-level refusal carrying any Kafka error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def not_leader(tp: TopicPartition, why: str) -> ReplicaError:
    return ReplicaError(NOT_LEADER_OR_FOLLOWER, f"this broker is not the leader of {tp}: {why}")


class FollowerFetchers(Protocol):
    """The replica fetchers (broker.replication.replica_fetcher): which partitions to fetch from whom."""

    def add_partitions(self, partitions: Iterable[tuple[TopicPartition, int, int]]) -> None:
        """Start fetching each (tp, leader id, leader epoch), truncating first."""

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching these."""


class ReadResult(NamedTuple):
    records: FileSlice
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class ReplicaManager:
    """Hosted partitions by TopicPartition, and the requests waiting on them."""

    def __init__(self, broker_id: int, log_manager: LogManager, *, now_ms: Callable[[], int],
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                 default_min_insync_replicas: int = DEFAULT_MIN_INSYNC_REPLICAS,
                 alter_partition: AlterPartitionManager | None = None) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self._now_ms = now_ms
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.default_min_insync_replicas = default_min_insync_replicas
        self.alter_partition = alter_partition
        self.fetchers: FollowerFetchers | None = None
        self.partitions: dict[TopicPartition, Partition] = {}
        self._image = EMPTY_IMAGE
        self._topic_overrides: dict[str, dict[str, str]] = {}
        # The purgatory: futures of waiting fetches and acks=-1 produces per partition, woken
        # by appends, high-watermark moves and role changes. Each waiter registers one future
        # under each partition it reads and removes it when done, so the sets hold at most
        # (waiting requests x their partitions).
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        # acks=-1 produces (Kafka's DelayedProduce): per partition, a heap of (offset the HW
        # must reach, arrival order, future of the error code), completed when the HW passes.
        self._produce_waiters: dict[TopicPartition, list[tuple[int, int, asyncio.Future[int]]]] = {}
        self._produce_order = itertools.count()

    # ---- metadata --------------------------------------------------------------------

    def apply_changes(self, changes: LocalReplicaChanges, image: MetadataImage) -> None:
        """Act on this broker's LocalReplicaChanges: delete, lead, follow (Kafka's order)."""
        self._image = image
        stop_fetching: list[TopicPartition] = []
        start_fetching: list[tuple[TopicPartition, int, int]] = []
        for local in changes.deletes:
            tp = TopicPartition(local.topic_name, local.partition_id)
            stop_fetching.append(tp)
            self._delete(tp)
        self._refresh_topic_configs(image)
        elected = {(p.topic_name, p.partition_id) for p in changes.elected_leaders}
        for local in changes.leaders:
            if self._become_leader(local, image, (local.topic_name, local.partition_id) in elected):
                stop_fetching.append(TopicPartition(local.topic_name, local.partition_id))
        for local in changes.followers:
            self._become_follower(local, image, start_fetching, stop_fetching)
        if self.fetchers is not None:
            if stop_fetching:
                self.fetchers.remove_partitions(stop_fetching)
            if start_fetching:
                self.fetchers.add_partitions(start_fetching)

    def _refresh_topic_configs(self, image: MetadataImage) -> None:
        # Config records do not show up in LocalReplicaChanges: compare every hosted topic.
        for topic in sorted({tp.topic for tp in self.partitions}):
            self._apply_topic_config(topic, image)

    def _min_insync_replicas(self, overrides: dict[str, str]) -> int:
        return _int_or(overrides.get(MIN_INSYNC_REPLICAS_KEY), self.default_min_insync_replicas)

    def _apply_topic_config(self, topic: str, image: MetadataImage) -> None:
        overrides = dict(image.config(ConfigResourceType.TOPIC, topic))
        if topic in self._topic_overrides and self._topic_overrides[topic] == overrides:
            return
        self._topic_overrides[topic] = overrides
        min_isr = self._min_insync_replicas(overrides)
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
            _rebuild_producer_state(partition)
            partition.min_insync_replicas = self._min_insync_replicas(
                self._topic_overrides.get(tp.topic, {}))
            self.partitions[tp] = partition
        partition.update_registration(registration)
        return partition

    def _become_leader(self, local: LocalPartition, image: MetadataImage, elected: bool) -> bool:
        """Lead `local`; True when this is a new leadership (stop fetching it)."""
        previous = self.partitions.get(TopicPartition(local.topic_name, local.partition_id))
        was = None if previous is None else (previous.leader_id, previous.leader_epoch)
        partition = self._hosted(local, image)
        if partition is None:
            return False
        new_leadership = elected or was != (self.broker_id, partition.leader_epoch)
        if new_leadership:
            partition.become_leader(self.broker_id, self._now_ms())
            partition_log = partition.log
            log.info("Leader %s with leader epoch %d starting at offset %d (high watermark %d, "
                     "ISR %s, partition epoch %d%s)", partition.tp, partition.leader_epoch,
                     partition_log.log_end_offset, partition_log.high_watermark, list(partition.isr),
                     partition.partition_epoch,
                     ", elected uncleanly: RECOVERING" if partition.is_recovering else "")
        if partition.is_recovering and partition.pending_isr is None:
            # KIP-704: an unclean leader serves once the controller has recorded RECOVERED.
            self._propose(partition, partition.isr, LeaderRecoveryState.RECOVERED)
        self._maybe_advance_high_watermark(partition)
        self._wake(partition.tp)
        return new_leadership

    def _become_follower(self, local: LocalPartition, image: MetadataImage,
                         start_fetching: list[tuple[TopicPartition, int, int]],
                         stop_fetching: list[TopicPartition]) -> None:
        tp = TopicPartition(local.topic_name, local.partition_id)
        previous = self.partitions.get(tp)
        was = None if previous is None else (previous.leader_id, previous.leader_epoch)
        partition = self._hosted(local, image)
        if partition is None:
            return
        if was == (partition.leader_id, partition.leader_epoch):
            return  # same leader and epoch (an ISR change): keep fetching as before
        partition.become_follower()
        self._wake(tp)  # waiting fetches and produces answer NOT_LEADER_OR_FOLLOWER now
        if partition.leader_id < 0:
            stop_fetching.append(tp)
            log.info("Follower %s has no leader (leader epoch %d): partition offline",
                     tp, partition.leader_epoch)
            return
        start_fetching.append((tp, partition.leader_id, partition.leader_epoch))
        log.info("Follower %s of leader %d with leader epoch %d (log end offset %d, high "
                 "watermark %d)", tp, partition.leader_id, partition.leader_epoch,
                 partition.log.log_end_offset, partition.log.high_watermark)

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

    def _serving_partition(self, tp: TopicPartition, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it and may serve clients (not RECOVERING)."""
        partition = self.leader_partition(tp, current_leader_epoch)
        if partition.is_recovering:
            raise not_leader(tp, "elected uncleanly and not yet recovered")
        return partition

    def _is_eligible(self, replica_id: int) -> bool:
        """May join an ISR: registered, unfenced, not shutting down (isReplicaIsrEligible)."""
        registration = self._image.broker(replica_id)
        return registration is not None and registration.is_active

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
        partition = self._serving_partition(tp)
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
            _update_producer_state(partition, batches, info.first_offset)
        self._maybe_advance_high_watermark(partition)
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

    def _maybe_advance_high_watermark(self, partition: Partition) -> bool:
        """Leader: HW = min LEO over the (maximal) ISR, never backwards; wakes waiters."""
        hw = partition.next_high_watermark(self.broker_id, self._now_ms(),
                                           self.replica_lag_time_max_ms, self._is_eligible)
        if not hw.advanced:
            return False
        partition.log.update_high_watermark(hw.offset)
        self._wake(partition.tp)
        return True

    def _produce_outcome(self, tp: TopicPartition, offset: int) -> int | None:
        """The answer of an acks=-1 produce waiting for `offset`, or None while it must wait.

        Kafka's DelayedProduce: once replicated, an ISR that shrank below
        min.insync.replicas meanwhile answers NOT_ENOUGH_REPLICAS_AFTER_APPEND.
        """
        partition = self.partitions.get(tp)
        if partition is None or not partition.is_leader(self.broker_id):
            return NOT_LEADER_OR_FOLLOWER
        if partition.log.high_watermark < offset:
            return None
        if len(partition.isr) < partition.min_insync_replicas:
            return NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return 0

    def _complete_produces(self, tp: TopicPartition) -> None:
        """Answer every waiting produce of `tp` that can be answered now (HW moved, role changed)."""
        heap = self._produce_waiters.get(tp)
        while heap:  # bounded by the heap: each pass pops one waiter or stops
            offset, _, future = heap[0]
            code = self._produce_outcome(tp, offset)
            if code is None and not future.done():
                break
            heapq.heappop(heap)
            if not future.done():
                future.set_result(code)  # type: ignore[arg-type]
        if heap is not None and not heap:
            del self._produce_waiters[tp]

    async def wait_for_high_watermark(self, tp: TopicPartition, offset: int,
                                      timeout_s: float) -> int:
        """acks=-1: wait until the high watermark reaches `offset`; the error code (0: it did),
        REQUEST_TIMED_OUT after `timeout_s`. One future and one timer per request."""
        code = self._produce_outcome(tp, offset)
        if code is not None:
            return code
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._produce_waiters.setdefault(tp, []), (offset, next(self._produce_order), future))
        try:
            return await asyncio.wait_for(future, max(timeout_s, 0))
        except TimeoutError:
            return REQUEST_TIMED_OUT
        finally:
            if not future.done():
                future.cancel()  # popped when the heap next reaches it

    # ---- read ------------------------------------------------------------------------

    def read(self, tp: TopicPartition, offset: int, max_bytes: int, *,
             current_leader_epoch: int = -1, up_to_high_watermark: bool = True,
             min_one_batch: bool = True, replica_id: int = -1) -> ReadResult:
        """Batches from `offset` as a file slice; consumers never read past the HW.

        A follower's read (`replica_id` >= 0) goes up to the log end offset and records
        where the follower is, which may move the HW and grow the ISR.
        """
        if replica_id >= 0:
            partition = self.leader_partition(tp, current_leader_epoch)
            if replica_id not in partition.replicas:
                raise ReplicaError(NOT_LEADER_OR_FOLLOWER,
                                   f"broker {replica_id} is not a replica of {tp}")
            partition_log = partition.log
            if not partition_log.log_start_offset <= offset <= partition_log.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"follower {replica_id} fetched {tp} at offset {offset}, outside "
                    f"[{partition_log.log_start_offset}, {partition_log.log_end_offset}]")
            up_to_high_watermark = False
        else:
            partition = self._serving_partition(tp, current_leader_epoch)
            partition_log = partition.log
        high_watermark = partition_log.high_watermark
        try:
            data = partition_log.read(
                offset, max_bytes, max_offset=high_watermark if up_to_high_watermark else None,
                min_one_batch=min_one_batch)
        except OSError as e:
            raise KafkaStorageError(f"read of {tp} at offset {offset} failed: {e}") from e
        if replica_id >= 0:
            partition.record_follower_fetch(replica_id, offset, self._now_ms())
            self._maybe_advance_high_watermark(partition)
            self._maybe_expand_isr(partition)
            high_watermark = partition_log.high_watermark
        return ReadResult(data, high_watermark, partition_log.log_start_offset,
                          partition_log.log_end_offset)

    # ---- ISR changes (leader) -----------------------------------------------------------

    def _maybe_expand_isr(self, partition: Partition) -> None:
        proposed = partition.isr_to_expand(self._is_eligible)
        if proposed is not None:
            self._propose(partition, proposed, partition.leader_recovery_state)

    def maybe_shrink_isr(self) -> int:
        """Propose removing lagging followers from every ISR this broker leads (Kafka's
        isr-expiration task); the number of proposals sent."""
        now = self._now_ms()
        sent = 0
        for partition in self.partitions.values():
            if not partition.is_leader(self.broker_id):
                continue
            proposed = partition.isr_to_shrink(self.broker_id, now, self.replica_lag_time_max_ms)
            if proposed is not None and self._propose(partition, proposed,
                                                      partition.leader_recovery_state):
                sent += 1
        return sent

    def _propose(self, partition: Partition, new_isr: Iterable[int],
                 recovery: LeaderRecoveryState) -> bool:
        """Send AlterPartition for `partition`; nothing changes locally until it commits."""
        registration = self._image.broker(self.broker_id)
        if self.alter_partition is None or registration is None:
            return False
        new_isr = tuple(new_isr)
        members = tuple((r, self._image_broker_epoch(r) if r not in partition.isr else NO_BROKER_EPOCH)
                        for r in new_isr)
        item = AlterPartitionItem(partition.tp, partition.topic_id, partition.leader_epoch,
                                  partition.partition_epoch, members, int(recovery))
        pending = PendingIsrChange(new_isr, recovery)
        if not self.alter_partition.submit(item, lambda code, reply: self._on_alter_result(
                partition, pending, item, code, reply)):
            return False
        partition.pending_isr = pending
        log.info("Proposing %s%s (was ISR %s)", item.describe(),
                 ", leader recovery RECOVERED" if partition.is_recovering else "", list(partition.isr))
        return True

    def _image_broker_epoch(self, broker_id: int) -> int:
        registration = self._image.broker(broker_id)
        return NO_BROKER_EPOCH if registration is None else registration.broker_epoch

    def _on_alter_result(self, partition: Partition, pending: PendingIsrChange,
                         item: AlterPartitionItem, code: int, reply: dict[str, Any] | None) -> None:
        if self.partitions.get(partition.tp) is not partition or partition.pending_isr is not pending:
            return  # the partition moved on (new leader epoch, deleted): the answer is stale
        if code != 0 or reply is None:
            partition.pending_isr = None
            log.warning("AlterPartition %s failed: %s", item.describe(), _error_name(code))
            return
        committed = int(reply.get("partition_epoch", partition.partition_epoch))
        if partition.partition_epoch >= committed:
            partition.pending_isr = None  # the metadata got here first
        else:
            partition.pending_isr = dataclasses.replace(pending, committed_partition_epoch=committed)
        log.info("AlterPartition %s committed: ISR %s, partition epoch %d", item.describe(),
                 reply.get("isr"), committed)

    # ---- follower side (the replica fetchers call these) ------------------------------------

    def follower_partition(self, tp: TopicPartition, leader_epoch: int) -> Partition | None:
        """The partition if this broker still follows it in `leader_epoch`."""
        partition = self.partitions.get(tp)
        if partition is None or partition.is_leader(self.broker_id) \
                or partition.leader_epoch != leader_epoch:
            return None
        return partition

    def append_as_follower(self, partition: Partition, records: memoryview,
                           leader_high_watermark: int) -> LogAppendInfo | None:
        """Append the leader's batches as they are (same offsets, same bytes); then the HW."""
        info = None
        # One pass, each batch framed and CRC-checked once; a fetch may end in a partial batch,
        # which stays for the next fetch.
        batches = list(iter_batches(records, allow_partial_tail=True))
        if batches:
            whole = records[:batches[-1][0] + batches[-1][1].size]
            try:
                info = partition.log.append(whole, now_ms=self._now_ms(), assign_offsets=False,
                                            batches=batches)
            except OSError as e:
                raise KafkaStorageError(f"follower append to {partition.tp} failed: {e}") from e
            if any(h.producer_id >= 0 for _, h in batches):
                _update_producer_state(partition, batches, info.first_offset)
        partition.log.update_high_watermark(follower_high_watermark(
            leader_high_watermark=leader_high_watermark, log_end_offset=partition.log.log_end_offset))
        return info

    def truncate_follower(self, partition: Partition, offset: int, why: str) -> None:
        """Truncate a follower's log to `offset` (and its producer state with it)."""
        partition_log = partition.log
        leo = partition_log.log_end_offset
        if partition_log.truncate_to(offset, now_ms=self._now_ms()):
            log.warning("Truncated follower %s to offset %d (log end offset was %d: offsets "
                        "%d..%d dropped) %s", partition.tp, offset, leo, offset, leo - 1, why)
            _rebuild_producer_state(partition)

    def truncate_follower_fully(self, partition: Partition, start_offset: int, why: str) -> None:
        """Drop a follower's whole log; it restarts empty at the leader's `start_offset`."""
        leo = partition.log.log_end_offset
        partition.log.truncate_fully_and_start_at(start_offset, now_ms=self._now_ms())
        log.warning("Truncated follower %s fully to start at offset %d (log end offset was %d) %s",
                    partition.tp, start_offset, leo, why)
        partition.producer_state = ProducerStateManager()

    # ---- waiting fetches ---------------------------------------------------------------

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout_s: float) -> bool:
        """Wait until an append, a HW move or a role change touches one of `tps`, or the
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
        if tp in self._produce_waiters:
            self._complete_produces(tp)  # a role change or a committed ISR change answers them

    def waiting_count(self, tp: TopicPartition) -> int:
        """How many requests wait on `tp` (tests, metrics)."""
        return len(self._waiters.get(tp, ()))

    # ---- gauges ------------------------------------------------------------------------

    def replication_gauges(self) -> dict[str, int]:
        """Kafka's ReplicaManager gauges over the partitions this broker leads."""
        led = [p for p in self.partitions.values() if p.is_leader(self.broker_id)]
        return {
            "partitions_led": len(led),
            "partitions_hosted": len(self.partitions),
            "under_replicated": sum(len(p.isr) < len(p.replicas) for p in led),
            "under_min_isr": sum(len(p.isr) < p.min_insync_replicas for p in led),
            "at_min_isr": sum(len(p.isr) == p.min_insync_replicas for p in led),
            "offline": sum(p.leader_id < 0 for p in self.partitions.values()),
        }


def _update_producer_state(partition: Partition, batches: list[tuple[int, RecordBatchHeader]],
                           first_offset: int) -> None:
    base = first_offset
    for _, header in batches:
        if header.producer_id >= 0:
            partition.producer_state.update(header, base, base + header.last_offset_delta)
        base += header.last_offset_delta + 1


def _rebuild_producer_state(partition: Partition) -> None:
    # No producer snapshots yet: one pass over the log's batch headers.
    partition.producer_state = ProducerStateManager()
    partition.producer_state.rebuild(h for h in partition.log.batch_headers() if h.producer_id >= 0)


def _error_name(code: int) -> str:
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return f"error {code}"


def _int_or(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default
