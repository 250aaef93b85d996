"""The partitions this broker hosts: their role, epochs and log; the entry point for appends,
reads and the requests waiting on them.

    replicas = ReplicaManager(broker_id, log_manager, now_ms=clock_ms, timers=broker_timers)
    replicas.start_isr_expiration()               # every replica.lag.time.max.ms / 2, on the timers
    replicas.apply_changes(changes, image)        # from the metadata follower (on_changes)
    info = replicas.append(tp, records, acks=1)   # leader append; raises a KafkaError
    append = replicas.leader_appender(acks=1)     # a Produce's: acks and clock once, then
    info = append(tp, records)                    # per partition, in request order
    read = replicas.read(tp, offset, max_bytes)   # consumers: up to the high watermark
    read = replicas.read(tp, offset, max_bytes, replica_id=2)   # a follower: up to the LEO, recorded
    read = replicas.read(tp, offset, max_bytes, replica_id=2, record=False)   # its wait's re-read
    codes = await replicas.wait_for_replication({tp: end_offset, ...}, timeout_s)  # acks=-1
    answer = replicas.watch_replication({tp: end_offset, ...}, timeout_s, then=respond)  # a future
    await replicas.wait_for_data([tp, ...], timeout_s)   # a waiting fetch, woken by changes
    await replicas.wait_for_data([tp, ...], timeout_s, replica_id=-1)   # a consumer's: by what it may read

Kafka's ReplicaManager, split by concern: this module hosts partitions and is the entry
point for requests on them; `broker.replica_roles` changes their roles from the committed
metadata; `broker.replica_appends` writes (leader and follower),
`broker.replica_reads` reads, `broker.replica_deletes` serves DeleteRecords,
`broker.hosted_topic_configs` applies topic configs,
`broker.replication.isr_manager` moves the high watermark and
proposes ISR changes, and `broker.purgatory` holds the waiting produces and fetches, each
request with one deadline in the broker's timer service (`broker.timers`, which also runs
the isr-expiration task). As follower a partition goes to the replica fetchers
(`fetchers`), which truncate by leader epoch, fetch and append through `append_as_follower`.

Everything runs on one event loop; no method blocks except on the local disk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Final, NoReturn, Protocol, TypeVar

from broker.hosted_topic_configs import HostedTopicConfigs
from broker.log.log_manager import LogManager
from broker.log.partition_log import LogAppendInfo
from broker.purgatory import Purgatory
from broker.replica_appends import (
    VALID_ACKS,
    DelayedProduce,
    append_as_leader,
    append_marker_as_leader,
    invalid_required_acks,
)
from broker.replica_appends import append_as_follower as _append_as_follower
from broker.replica_appends import truncate_follower as _truncate_follower
from broker.replica_appends import truncate_follower_fully as _truncate_follower_fully
from broker.replica_deletes import RecordDeletes
from broker.replica_reads import (
    ReadResult,
    ReplicaError,
    check_follower_fetch,
    delayed_fetch,
    leader_partition,
    not_leader,
    read_log,
    serving_partition,
)
from broker.replica_roles import ReplicaRoles
from broker.replication.alter_partition_manager import AlterPartitionManager
from broker.replication.isr_manager import IsrManager
from broker.replication.isr_policy import DEFAULT_REPLICA_LAG_TIME_MAX_MS
from broker.replication.leader_rules import produce_outcome
from broker.replication.partition import DEFAULT_MIN_INSYNC_REPLICAS, Partition
from broker.replication.replication_quota import ReplicationThrottles
from broker.timers import TimerService
from common.topic_partition import TopicPartition
from common.errors import KafkaStorageError
from common.log_config import LogConfig
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import LocalReplicaChanges
from metadata.records import LeaderRecoveryState

log = logging.getLogger(__name__)

R = TypeVar("R")

ISR_EXPIRATION_TIMER: Final = ("replica-manager", "isr-expiration")  # its key in the broker's timers
RECOVERED: Final = LeaderRecoveryState.RECOVERED

__all__ = ["ReplicaManager"]


class FollowerFetchers(Protocol):
    """The replica fetchers (broker.replication.fetcher_manager): which partitions to fetch from whom."""

    def add_partitions(self, partitions: Iterable[tuple[TopicPartition, int, int]]) -> None:
        """Start fetching each (tp, leader id, leader epoch), truncating first."""

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching these."""

    def registrations_changed(self, tps: Iterable[TopicPartition]) -> None:
        """This broker joined or left the ISR of these followed partitions (same leader and
        leader epoch): the fetchers build their entries again."""


class ReplicaManager:
    """Hosted partitions by TopicPartition, and the requests waiting on them."""

    def __init__(self, broker_id: int, log_manager: LogManager, *, now_ms: Callable[[], int],
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                 default_min_insync_replicas: int = DEFAULT_MIN_INSYNC_REPLICAS,
                 alter_partition: AlterPartitionManager | None = None,
                 timers: TimerService | None = None) -> None:
        self.broker_id = broker_id
        # The broker's one timer service (the node's); a manager built alone (tests) has its own.
        self.timers = timers if timers is not None else TimerService(name=f"broker {broker_id}")
        self.log_manager = log_manager
        self._now_ms = now_ms
        # The replica manager's clock (the fetch sessions read it ~5 times per fetch): the clock
        # itself, not a method around it
        self.now_ms: Callable[[], int] = now_ms
        self.fetchers: FollowerFetchers | None = None
        self.partitions: dict[TopicPartition, Partition] = {}
        self.topic_configs = HostedTopicConfigs(log_manager, self.partitions,
                                                default_min_insync_replicas=default_min_insync_replicas)
        # reassignment throttles; the node sets their quotas (none: unthrottled)
        self.throttles = ReplicationThrottles(broker_id, self.topic_configs.overrides)
        self._image = EMPTY_IMAGE
        self.isr = IsrManager(broker_id, now_ms=now_ms, replica_lag_time_max_ms=replica_lag_time_max_ms,
                              alter_partition=alter_partition, image=lambda: self._image,
                              is_current=lambda p: self.partitions.get(p.tp) is p,
                              on_change=self._wake)
        # Kafka keeps one purgatory per kind of request; both are keyed by topic-partition.
        self.produce_purgatory: Purgatory[TopicPartition, dict[TopicPartition, int]] = Purgatory(
            "Produce", self.timers)
        self.fetch_purgatory: Purgatory[TopicPartition, bool] = Purgatory("Fetch", self.timers)
        # Called after every event `_wake` reports (the fetch sessions mark the partition changed).
        self.change_listeners: list[Callable[[TopicPartition], None]] = []
        self.deletes = RecordDeletes(broker_id, self.partitions, self.is_alive,  # DeleteRecords
                                     checkpoint=log_manager.checkpoint_log_start_offsets, wake=self._wake)
        self.roles = ReplicaRoles(broker_id, log_manager, self.partitions, self.topic_configs, self.isr,
                                  now_ms=now_ms, wake=self._wake)
        # what `_wake` tests per partition event (most find nothing waiting: no call then)
        self._fetch_waiting = self.fetch_purgatory.watched_keys
        self._produce_waiting = self.produce_purgatory.watched_keys
        self._deletes_waiting = self.deletes.purgatory.watched_keys

    @property
    def replica_lag_time_max_ms(self) -> int:
        return self.isr.replica_lag_time_max_ms

    @property
    def alter_partition(self) -> AlterPartitionManager | None:
        return self.isr.alter_partition

    # ---- metadata --------------------------------------------------------------------

    def apply_changes(self, changes: LocalReplicaChanges, image: MetadataImage) -> None:
        """Act on this broker's LocalReplicaChanges (`ReplicaRoles.apply`), then tell the
        replica fetchers which partitions to stop and start fetching."""
        self._image = image
        expiration = self.isr.expiration
        for gone in (*changes.followers, *changes.deletes):  # no longer led: out of the schedule
            partition = self.partitions.get(TopicPartition(gone.topic_name, gone.partition_id))
            if partition is not None:
                expiration.forget(partition)
        fetching = self.roles.apply(changes, image)
        now = self._now_ms()
        for led in changes.leaders:  # a new leadership or a changed ISR: when it can shrink now
            partition = self.partitions.get(TopicPartition(led.topic_name, led.partition_id))
            if partition is not None and partition.is_leader(self.broker_id):
                self.isr.schedule_shrink_check(partition, now)
        if self.fetchers is not None:
            if fetching.stop:
                self.fetchers.remove_partitions(fetching.stop)
            if fetching.start:
                self.fetchers.add_partitions(fetching.start)
            if fetching.seat_changed:  # the fetchers look again only at what changed (issue 35)
                self.fetchers.registrations_changed(fetching.seat_changed)

    def set_broker_defaults(self, default_config: LogConfig, min_insync_replicas: int) -> None:
        """New broker-wide log defaults (a dynamic broker config changed): see
        `HostedTopicConfigs.set_broker_defaults`."""
        self.topic_configs.set_broker_defaults(default_config, min_insync_replicas, self._image)

    # ---- lookups ---------------------------------------------------------------------

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def leader_partition(self, tp: TopicPartition, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it; KafkaError otherwise (KIP-320's epoch check)."""
        self._check_not_failed(tp)
        return leader_partition(self.partitions, self.broker_id, tp, current_leader_epoch)

    def _check_not_failed(self, tp: TopicPartition) -> None:
        """KAFKA_STORAGE_ERROR for a failed replica (Kafka's answer for an offline replica): the
        client refreshes its metadata and finds the leader the controller elected elsewhere."""
        failure = self.roles.failed.get(tp)
        if failure is not None:
            raise KafkaStorageError(f"the replica of {tp} on broker {self.broker_id} is offline: {failure.reason}")

    @property
    def failed_replicas(self) -> list[tuple[str, int]]:
        """(topic_id, partition) of the replicas that failed here: reported in every heartbeat."""
        return self.roles.failed_replicas()

    # ---- append (leader) ------------------------------------------------------------------

    def append(self, tp: TopicPartition, records: bytes | memoryview, *, acks: int) -> LogAppendInfo:
        """Append a producer's batches to one partition as leader (`leader_appender`'s, for one).

        Raises KafkaError: INVALID_REQUIRED_ACKS, NOT_LEADER_OR_FOLLOWER,
        UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS (acks=-1), CORRUPT_MESSAGE, ...
        """
        return self.leader_appender(acks)(tp, records)

    def leader_appender(self, acks: int) -> Callable[[TopicPartition, bytes | memoryview], LogAppendInfo]:
        """A Produce's appends as leader: the function to call once per partition, in request
        order, within the request's turn. Each call appends (`replica_appends.append_as_leader`),
        moves the partition's high watermark and wakes what waits on it, as a lone append does;
        what belongs to the request is done once, here, as Kafka's
        ReplicaManager.appendRecords does: the acks checked (invalid acks: every call raises
        INVALID_REQUIRED_ACKS) and the clock read (the request's appends share its reading,
        for their append time and the ISR's lag).

        A call raises KafkaError for its own partition only (NOT_LEADER_OR_FOLLOWER,
        UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS at acks=-1, CORRUPT_MESSAGE, ...);
        the calls after it go on as if it had not been made.
        """
        if acks not in VALID_ACKS:
            def refuse(tp: TopicPartition, records: bytes | memoryview) -> LogAppendInfo:
                raise invalid_required_acks(acks)
            return refuse
        # bound once: what every call reads on its way (the rest through self: binding it too
        # cost a one-partition request more bytecodes than its one call saved)
        partitions, isr = self.partitions, self.isr
        now = self._now_ms()

        def append(tp: TopicPartition, records: bytes | memoryview) -> LogAppendInfo:
            partition = partitions.get(tp)
            if partition is None or partition.leader_id != self.broker_id or self.roles.failed \
                    or partition.leader_recovery_state is not RECOVERED:  # refused below, with the reason
                self._check_not_failed(tp)
                partition = serving_partition(partitions, self.broker_id, tp)
            info = append_as_leader(partition, records, acks=acks, now_ms=now)
            isr.expiration.moved(partition, now)  # the leader's LEO moved
            # a moved HW wakes `tp`'s waiters (the ISR manager's on_change); otherwise they are
            # woken here (new data for fetches): once, not twice (`_advance_or_wake`, inline)
            if not isr.maybe_advance_high_watermark(partition, now):
                self._wake(partition.tp)
            return info
        return append

    def append_marker(self, tp: TopicPartition, *, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, committed: bool) -> LogAppendInfo:
        """Append a transaction's COMMIT or ABORT marker as leader, as Kafka appends with origin
        COORDINATOR (`replica_appends.append_marker_as_leader`: no sequence check, fenced by
        the producer and coordinator epochs), then wake what waits on `tp` as any append does.
        Raises KafkaError: NOT_LEADER_OR_FOLLOWER (also while an unclean leader recovers),
        UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR, INVALID_PRODUCER_EPOCH, ..."""
        partition = self.leader_partition(tp)
        if partition.is_recovering:
            raise not_leader(tp, "elected uncleanly and not yet recovered")
        now = self._now_ms()
        info = append_marker_as_leader(partition, producer_id=producer_id, producer_epoch=producer_epoch,
                                       coordinator_epoch=coordinator_epoch, committed=committed,
                                       now_ms=now)
        self.isr.expiration.moved(partition, now)  # the leader's LEO moved
        self._advance_or_wake(partition, now)
        return info

    async def wait_for_replication(self, required: Mapping[TopicPartition, int],
                                   timeout_s: float) -> dict[TopicPartition, int]:
        """acks=-1: each partition's error code once its HW reaches `required[tp]` (0), it is
        refused, or the request's one deadline `timeout_s` passes (REQUEST_TIMED_OUT)."""
        return await self.produce_purgatory.wait(self._delayed_produce(required), required, timeout_s)

    def watch_replication(self, required: Mapping[TopicPartition, int], timeout_s: float,
                          then: Callable[[dict[TopicPartition, int]], R]) -> asyncio.Future[R]:
        """`wait_for_replication` as a future of `then(codes)`, set where the HW move (or the
        deadline) decides it: already done when decided on arrival. The produce handler's
        answer, with no task or coroutine per acks=all produce (`Purgatory.watch`)."""
        return self.produce_purgatory.watch(self._delayed_produce(required), required, timeout_s, then)

    def replicated_now(self, required: Mapping[TopicPartition, int]) -> dict[TopicPartition, int] | None:
        """acks=-1 decided without waiting (an ISR of the leader alone): the codes, else None."""
        return self._delayed_produce(required).try_complete()

    def _delayed_produce(self, required: Mapping[TopicPartition, int]) -> DelayedProduce:
        return DelayedProduce(required, lambda tp, offset: produce_outcome(
            self.partitions.get(tp), self.broker_id, offset))

    def is_alive(self, broker_id: int) -> bool:
        """Registered and not fenced (Kafka's metadataCache.hasAliveBroker)."""
        registration = self._image.broker(broker_id)
        return registration is not None and not registration.fenced

    # ---- read ------------------------------------------------------------------------

    def read(self, tp: TopicPartition, offset: int, max_bytes: int, *,
             current_leader_epoch: int = -1, up_to_high_watermark: bool = True,
             min_one_batch: bool = True, replica_id: int = -1,
             replica_log_start_offset: int = -1, record: bool = True) -> ReadResult:
        """Batches from `offset` as a file slice; consumers never read past the HW.

        A follower's read (`replica_id` >= 0) goes up to the log end offset and, with
        `record`, records where the follower is (its fetch offset and
        `replica_log_start_offset`, at this read's clock), which may move the HW, grow the
        ISR and complete a DeleteRecords. A fetch records once, on its first read (Kafka's
        fetchMessages, with the request's fetchTimeMs); reading it again after it waited
        (`record=False`: woken or expired) records nothing, as Kafka's DelayedFetch reads
        with updateFetchState off: the follower is where its request said, and when.
        """
        if replica_id < 0:
            self._check_not_failed(tp)
            partition = serving_partition(self.partitions, self.broker_id, tp, current_leader_epoch)
            return read_log(partition, offset, max_bytes, min_one_batch=min_one_batch,
                            up_to=partition.log.high_watermark if up_to_high_watermark else None)
        hosted = self.partitions.get(tp)
        if hosted is None or hosted.leader_id != self.broker_id or self.roles.failed \
                or 0 <= current_leader_epoch != hosted.leader_epoch:  # refused below, with the reason
            hosted = self.leader_partition(tp, current_leader_epoch)
        partition = hosted
        check_follower_fetch(partition, replica_id, offset)
        throttled = over = False
        throttles = self.throttles
        if throttles.leader is not None:  # a leader replication quota is set (reassignments)
            throttled, over = throttles.leader_throttle(tp, in_sync=replica_id in partition.isr)
        if over:
            max_bytes, min_one_batch = 0, False  # Kafka leaves a throttled partition's records out
        read = read_log(partition, offset, max_bytes, up_to=None, min_one_batch=min_one_batch)
        if throttled:
            throttles.record_leader(read.records.length)
        if not record:  # a waiting fetch read again: recorded on its first read; read's HW is current
            return read
        now = self._now_ms()
        partition.record_follower_fetch(replica_id, offset, now, replica_log_start_offset)
        isr = self.isr
        isr.expiration.moved(partition, now)  # the follower's LEO may have moved
        isr.maybe_advance_high_watermark(partition, now)
        isr.maybe_expand_isr(partition)
        if tp in self._deletes_waiting:
            self.deletes.purgatory.check_and_complete(tp)
        high_watermark = partition.log.high_watermark
        if high_watermark == read.high_watermark:  # most follower fetches: no NamedTuple._replace
            return read
        return ReadResult(read.records, high_watermark, read.log_start_offset, read.log_end_offset,
                          read.last_stable_offset, read.aborted_transactions)

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout_s: float, *,
                            replica_id: int | None = None) -> bool:
        """Wait until an append, a HW move or a role change touches one of `tps`, or the
        timeout passes; True when woken. The caller re-reads and decides. A Fetch's
        `replica_id` narrows the changes to those that may give it bytes, as Kafka's
        DelayedFetch: a follower's (>= 0) is not woken by a HW move, a consumer's (< 0) not
        by an append below the HW."""
        keys = list(dict.fromkeys(tps))
        return await self.fetch_purgatory.wait(delayed_fetch(self.partitions, keys, replica_id), keys, timeout_s)

    def waiting_count(self, tp: TopicPartition) -> int:
        """How many fetches wait on `tp` (tests, metrics)."""
        return self.fetch_purgatory.watched(tp)

    def _advance_or_wake(self, partition: Partition, now_ms: int | None = None) -> None:
        """After an append: a moved high watermark wakes `tp`'s waiters through the ISR
        manager's callback; otherwise wake them here (new data for fetches) - once, not twice."""
        if not self.isr.maybe_advance_high_watermark(partition, now_ms):
            self._wake(partition.tp)

    def _wake(self, tp: TopicPartition) -> None:
        """Something happened to `tp`: check the requests waiting on it."""
        if tp in self._fetch_waiting:
            self.fetch_purgatory.check_and_complete(tp)
        if tp in self._produce_waiting:
            self.produce_purgatory.check_and_complete(tp)
        if tp in self._deletes_waiting:
            self.deletes.purgatory.check_and_complete(tp)
        for listener in self.change_listeners:
            listener(tp)

    # ---- ISR (leader) --------------------------------------------------------------------

    def start_isr_expiration(self) -> None:
        """Kafka's isr-expiration task, a periodic timer: every half replica.lag.time.max.ms
        (ReplicaManager.startup schedules it at that period), until `stop_isr_expiration` or
        the timer service closes."""
        self.timers.schedule_every(ISR_EXPIRATION_TIMER, max(1, self.replica_lag_time_max_ms // 2), self._expire_isr)

    def stop_isr_expiration(self) -> None:
        self.timers.cancel(ISR_EXPIRATION_TIMER)

    def _expire_isr(self, _now_ms: int) -> None:
        try:
            self.maybe_shrink_isr()
        except Exception:  # noqa: BLE001 - a bug must not stop every later check
            log.exception("Broker %d: ISR expiration check failed", self.broker_id)

    def maybe_shrink_isr(self) -> int:
        """Propose removing lagging followers from every ISR this broker leads (Kafka's
        isr-expiration task), looking only at those that can shrink now
        (`IsrManager.maybe_shrink_due`); the number of proposals sent."""
        return self.isr.maybe_shrink_due()

    # ---- follower side (the replica fetchers call these) ------------------------------------

    def follower_partition(self, tp: TopicPartition, leader_epoch: int) -> Partition | None:
        """The partition if this broker still follows it in `leader_epoch`."""
        partition = self.partitions.get(tp)
        if partition is None or partition.leader_id == self.broker_id \
                or partition.leader_epoch != leader_epoch:  # (Partition.is_leader, inline: twice per fetch round)
            return None
        return partition

    def append_as_follower(self, partition: Partition, records: memoryview,
                           leader_high_watermark: int, leader_log_start_offset: int = -1
                           ) -> LogAppendInfo | None:
        """Append the leader's batches as they are (same offsets, same bytes); then the HW
        and the log start offset (the leader's DeleteRecords reach followers this way). A moved
        log start is the fetcher's to write before its next fetch reports it, once per answer
        (`ReplicaFetcher._write_moved_log_starts`), not once per partition here."""
        high_watermark = partition.log.high_watermark
        try:
            info = _append_as_follower(partition, records, leader_high_watermark, now_ms=self._now_ms(),
                                       leader_log_start_offset=leader_log_start_offset)
        except OSError as e:  # an append's own KafkaStorageError stays the fetcher's (it backs off)
            self._follower_failed(partition, "appending as follower", e)
        if partition.log.high_watermark != high_watermark:
            # KIP-392: consumers long-polling this follower see the new records now, not at their
            # max_wait_ms (Kafka's fetcher completes delayed fetches of partitions whose HW moved)
            self._wake(partition.tp)
        return info

    def truncate_follower(self, partition: Partition, offset: int, why: str) -> None:
        """Truncate a follower's log to `offset` (and its producer state with it)."""
        try:
            _truncate_follower(partition, offset, why, now_ms=self._now_ms())
        except (KafkaStorageError, OSError) as e:
            self._follower_failed(partition, f"truncating to offset {offset}", e)

    def truncate_follower_fully(self, partition: Partition, start_offset: int, why: str) -> None:
        """Drop a follower's whole log; it restarts empty at the leader's `start_offset`."""
        try:
            _truncate_follower_fully(partition, start_offset, why, now_ms=self._now_ms())
            self.log_manager.checkpoint_log_start_offsets(partition.tp)  # at once: rare (an answer's moves: the fetcher's)
        except (KafkaStorageError, OSError) as e:
            self._follower_failed(partition, "truncating fully", e)

    def _follower_failed(self, partition: Partition, during: str, exc: BaseException) -> NoReturn:
        """A follower's storage failed: its replica fails here (`ReplicaRoles.fail`), it stops
        fetching, and the fetcher hears KAFKA_STORAGE_ERROR (it logs and moves on)."""
        self.roles.fail(partition.tp, partition.topic_id, during, exc)
        if self.fetchers is not None:
            self.fetchers.remove_partitions([partition.tp])
        raise KafkaStorageError(f"replica {partition.tp} failed while {during}: {exc}") from exc

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
            "failed_replicas": len(self.roles.failed),
        }

