"""The transaction coordinator: the `transactions/` rules on the coordinator runtime.

    coordinator = TransactionCoordinator(broker_id, replicas, image, settings, producer_ids, timers=timers)
    partition = coordinator.partition_for("tx-1")          # or CoordinatorError(NOT_COORDINATOR, ...)
    decision = await coordinator.run(partition, lambda image: rules.end_txn(image, ...))
    await coordinator.runtime.idle()                         # tests: every write settled

Kafka's TransactionCoordinator and TransactionStateManager: the state of each
`__transaction_state` partition led here is a `TransactionsImage` held by the runtime; a rule
runs on the current image at once (the event loop orders requests), its one record is
appended with acks=all and its answer given once it commits; a write that fails returns the
partition to its committed image. A commit of PrepareCommit/PrepareAbort hands the
transaction to the marker sender (`markers.py`), which writes CompleteCommit/CompleteAbort
once every partition acknowledged its marker; loading a partition resumes the markers of
its prepared transactions. Two periodic timers on the broker's timer service: the timeout
abort (`transaction.abort.timed.out.transaction.cleanup.interval.ms`) and transactional-id
expiration (`transaction.remove.expired.transaction.cleanup.interval.ms`). Every committed
state change logs one line: transactional id, producer id and epoch, old -> new state, why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from broker.coordinator.errors import CoordinatorError, client_error
from broker.coordinator.replica_writer import ReplicaPartitionWriter
from broker.coordinator.runtime import CoordinatorResult, CoordinatorRuntime
from broker.timers import TimerService, wall_ms
from common.errors import ErrorCode
from common.prometheus import Metric, counter, gauge, unlabelled
from common.topic_partition import TopicPartition
from common.units import MIB, SECOND_MS
from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition
from metadata.image import MetadataImage
from transactions import rules
from transactions.image import TransactionsImage
from transactions.partitioner import TRANSACTION_STATE_TOPIC_NAME, partition_for
from transactions.records import TransactionMetadata, encode_record
from transactions.rules import Decision, TxnConfig
from transactions.state import PREPARED, TransactionState

log = logging.getLogger(__name__)

E = ErrorCode
S = TransactionState
ABORT_TIMER: Final = "txn-abort-timed-out"
EXPIRE_TIMER: Final = "txn-expire-ids"
TOPICS_TIMER: Final = "txn-leadership-scan"
LEADERSHIP_SCAN_INTERVAL_MS: Final = 1 * SECOND_MS  # partitions led here are loaded within this at the latest
Rule = Callable[[TransactionsImage], Decision]




@dataclass(frozen=True, slots=True)
class TxnSettings:
    """The transaction coordinator's configs (common.config keys, Kafka's defaults)."""

    partitions: int = 50
    replication_factor: int = 3
    min_isr: int = 2
    segment_bytes: int = 100 * MIB
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000
    abort_interval_ms: int = 10_000
    expiration_interval_ms: int = 3_600_000
    commit_timeout_ms: int = 5 * SECOND_MS  # Kafka: transaction.state.log's appends wait request.timeout.ms

    @classmethod
    def from_config(cls, config: Any) -> TxnSettings:
        def key(name: str) -> int:
            return int(config[name])

        return cls(key("transaction.state.log.num.partitions"), key("transaction.state.log.replication.factor"),
                   key("transaction.state.log.min.isr"), key("transaction.state.log.segment.bytes"),
                   key("transaction.max.timeout.ms"), key("transactional.id.expiration.ms"),
                   key("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
                   key("transaction.remove.expired.transaction.cleanup.interval.ms"))

    @property
    def rules(self) -> TxnConfig:
        return TxnConfig(self.max_timeout_ms, self.id_expiration_ms)


class TransactionShard:
    """The runtime's view of one `__transaction_state` partition."""

    def empty(self) -> TransactionsImage:
        return TransactionsImage.EMPTY

    def replay(self, state: TransactionsImage, key: bytes, value: bytes | None) -> TransactionsImage:
        return state.replay(key, value)


class TransactionCoordinator:
    def __init__(self, broker_id: int, replicas: Any, image: Callable[[], MetadataImage], settings: TxnSettings,
                 *, now_ms: Callable[[], int] = wall_ms, timers: TimerService | None = None) -> None:
        self.broker_id = broker_id
        self.replicas = replicas
        self._image = image
        self.settings = settings
        self.now_ms = now_ms
        self._own_timers = timers is None
        self.timers = timers if timers is not None else TimerService(name="transaction coordinator")
        self.writer = ReplicaPartitionWriter(replicas, TRANSACTION_STATE_TOPIC_NAME, now_ms)
        self.runtime: CoordinatorRuntime[TransactionsImage] = CoordinatorRuntime(
            "transaction", TransactionShard(), self.writer, self.timers,
            commit_timeout_ms=settings.commit_timeout_ms, on_loaded=self._loaded, on_unloaded=self._unloaded)
        self.markers: Any = None  # the MarkerSender (markers.py), set by whoever builds the broker
        self._listener = self.writer.listener(self.runtime.on_partition_change)
        self._started = False
        # metrics (Kafka's transaction coordinator sensors): counted at commit
        self.committed_total = 0
        self.aborted_total = 0
        self.timed_out_total = 0

    # ---- lifecycle ------------------------------------------------------------------------

    def ensure_started(self) -> None:
        if self._started:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._started = True
        listeners = getattr(self.replicas, "change_listeners", None)
        if listeners is not None:
            listeners.append(self._listener)
        self._scan_leadership(0)
        self.timers.schedule_every((self, ABORT_TIMER), self.settings.abort_interval_ms, self._abort_timed_out)
        self.timers.schedule_every((self, EXPIRE_TIMER), self.settings.expiration_interval_ms, self._expire_ids)
        self.timers.schedule_every((self, TOPICS_TIMER), LEADERSHIP_SCAN_INTERVAL_MS, self._scan_leadership)

    async def close(self) -> None:
        listeners = getattr(self.replicas, "change_listeners", None)
        if listeners is not None and self._listener in listeners:
            listeners.remove(self._listener)
        for key in (ABORT_TIMER, EXPIRE_TIMER, TOPICS_TIMER):
            self.timers.cancel((self, key))
        if self.markers is not None:
            await self.markers.close()
        await self.runtime.close()
        if self._own_timers:
            self.timers.close()

    def image(self) -> MetadataImage:
        return self._image()

    def partition_count(self) -> int | None:
        topic = self._image().topic(TRANSACTION_STATE_TOPIC_NAME)
        return None if topic is None or not topic.partitions else len(topic.partitions)

    def _scan_leadership(self, _timer_ms: int) -> None:
        for partition in range(self.partition_count() or 0):
            self.runtime.on_partition_change(partition)

    # ---- which partition -----------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        """The loaded `__transaction_state` partition coordinating `transactional_id` here;
        CoordinatorError (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) otherwise."""
        self.ensure_started()
        count = self.partition_count()
        if count is None:
            raise CoordinatorError(E.NOT_COORDINATOR, f"{TRANSACTION_STATE_TOPIC_NAME} does not exist yet")
        partition = partition_for(transactional_id, count)
        self.runtime.require_active(partition, TRANSACTION_STATE_TOPIC_NAME)
        return partition

    def leader_epoch(self, partition: int) -> int | None:
        """The coordinator epoch of `partition` (its leader epoch here, as Kafka's)."""
        shard = self.runtime.shards.get(partition)
        return None if shard is None else shard.leader_epoch

    def current(self, partition: int) -> TransactionsImage:
        return self.runtime.current(partition)

    def committed(self, partition: int) -> TransactionsImage:
        return self.runtime.committed(partition)

    def active_partitions(self) -> list[int]:
        return self.runtime.active()

    # ---- rules ---------------------------------------------------------------------------

    async def run(self, partition: int, rule: Rule) -> Decision:
        """Apply `rule` on the partition's current image now; its decision once its record
        committed, with the append's error (as Kafka maps it) when it did not."""
        return await self.submit(partition, rule)

    def submit(self, partition: int, rule: Rule) -> asyncio.Future[Decision]:
        decided: list[Decision] = []
        done: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()

        def operation(state: TransactionsImage) -> CoordinatorResult[TransactionsImage, Decision]:
            decision = rule(state)
            decided.append(decision)
            if decision.write is None:
                return CoordinatorResult((), decision)
            return CoordinatorResult((encode_record(decision.write),), decision,
                                     memory=rules.remembered(decision))

        def settle(answer: Any, failure: CoordinatorError | None) -> None:
            decision = decided[0] if decided else Decision(E.UNKNOWN_SERVER_ERROR)
            if failure is not None:
                error = client_error(failure.code)
                if decision.write is not None:
                    log.warning("Transactional id %s: writing %s to %s-%d failed: %s (%s)",
                                decision.write.transactional_id, decision.write.state.label,
                                TRANSACTION_STATE_TOPIC_NAME, partition, error.name, failure)
                decision = Decision(error, before=decision.before, reason=str(failure))
            else:
                self._committed(partition, decision)
            if not done.done():
                done.set_result(decision)

        try:
            self.runtime.submit_settled(partition, operation, settle)
        except CoordinatorError as e:
            if not done.done():
                done.set_result(Decision(e.code, reason=str(e)))
        return done

    def _committed(self, partition: int, decision: Decision) -> None:
        """A decision's record committed: its log line, its metrics, its markers."""
        m = decision.write
        if m is None:
            return
        before = decision.before
        old = "absent" if before is None else before.state.label
        path = f"{old} -> {decision.via.label} -> {m.state.label}" if decision.via else f"{old} -> {m.state.label}"
        if before is None or before.state is not m.state or decision.via is not None \
                or before.producer_epoch != m.producer_epoch or before.producer_id != m.producer_id:
            log.info("Transactional id %s (%s-%d) producer id %d epoch %d: %s: %s", m.transactional_id,
                     TRANSACTION_STATE_TOPIC_NAME, partition, m.producer_id, m.producer_epoch, path,
                     decision.reason or "-")
        if m.state is S.COMPLETE_COMMIT:
            self.committed_total += 1
        elif m.state is S.COMPLETE_ABORT:
            self.aborted_total += 1
        if decision.via is S.PREPARE_EPOCH_FENCE and decision.reason.startswith("transaction timed out"):
            self.timed_out_total += 1
        if m.state in PREPARED and self.markers is not None:
            epoch = self.leader_epoch(partition)
            if epoch is not None:
                self.markers.send(partition, epoch, m)

    def complete(self, partition: int, coordinator_epoch: int, m: TransactionMetadata) -> asyncio.Future[Decision]:
        """The marker sender's end: every partition acknowledged `m`'s markers."""
        if self.leader_epoch(partition) != coordinator_epoch:
            future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
            future.set_result(Decision(E.NOT_COORDINATOR, reason="the coordinator moved"))
            return future
        return self.submit(partition, lambda image: rules.complete(
            image, m.transactional_id, m.producer_id, m.producer_epoch, now_ms=self.now_ms()))

    # ---- timers --------------------------------------------------------------------------

    def _abort_timed_out(self, _timer_ms: int) -> None:
        self._resume_markers()
        now_ms = self.now_ms()
        for partition in self.active_partitions():
            for m in rules.timed_out(self.runtime.current(partition), now_ms):
                self.submit(partition, partial(self._abort_rule, m.transactional_id, m.producer_id))

    def _expire_ids(self, _timer_ms: int) -> None:
        now_ms, config = self.now_ms(), self.settings.rules
        for partition in self.active_partitions():
            for m in rules.expired(self.runtime.current(partition), now_ms, config):
                self.submit(partition, partial(self._expire_rule, m.transactional_id))

    def _resume_markers(self) -> None:
        """Markers for every committed PrepareCommit/PrepareAbort not being sent: a prepare whose
        answer timed out (the runtime keeps such a write pending, and it may commit later)
        starts its markers here, at the next timeout-abort pass at the latest."""
        if self.markers is None:
            return
        for partition in self.active_partitions():
            epoch = self.leader_epoch(partition)
            for m in self.runtime.committed(partition):
                if epoch is not None and m.state in PREPARED and not self.markers.handles(m):
                    log.info("Transactional id %s (%s-%d) producer id %d epoch %d: %s committed without its "
                             "markers under way: sending them", m.transactional_id, TRANSACTION_STATE_TOPIC_NAME,
                             partition, m.producer_id, m.producer_epoch, m.state.label)
                    self.markers.send(partition, epoch, m)

    def _abort_rule(self, transactional_id: str, producer_id: int, image: TransactionsImage) -> Decision:
        return rules.abort_timed_out(image, transactional_id, producer_id, now_ms=self.now_ms())

    def _expire_rule(self, transactional_id: str, image: TransactionsImage) -> Decision:
        return rules.expire(image, transactional_id, now_ms=self.now_ms(), config=self.settings.rules)

    def _loaded(self, partition: int, image: TransactionsImage) -> None:
        prepared = [m for m in image if m.state in PREPARED]
        log.info("Loaded %d transactional id(s) from %s-%d, %d with markers to write", len(image),
                 TRANSACTION_STATE_TOPIC_NAME, partition, len(prepared))
        epoch = self.leader_epoch(partition)
        if self.markers is not None and epoch is not None:
            for m in sorted(prepared, key=lambda m: m.transactional_id):
                self.markers.send(partition, epoch, m)

    def _unloaded(self, partition: int) -> None:
        if self.markers is not None:
            self.markers.forget(partition)

    # ---- metrics -------------------------------------------------------------------------

    def metric_families(self, prefix: str) -> list[Metric]:
        # Dead and PrepareEpochFence are never held (a tombstone; a step inside one write)
        by_state: dict[TransactionState, int] = {
            state: 0 for state in S if state not in (S.DEAD, S.PREPARE_EPOCH_FENCE)}
        active = self.active_partitions()
        for partition in active:
            for m in self.runtime.current(partition):
                by_state[m.state] = by_state.get(m.state, 0) + 1
        p = prefix
        return [
            gauge(f"{p}transactions", "Transactional ids this broker coordinates, by transaction state.",
                  [({"state": state.label}, count) for state, count in by_state.items()]),
            gauge(f"{p}transactions_ongoing", "Transactions open (Ongoing) on this coordinator.",
                  unlabelled(by_state[S.ONGOING])),
            counter(f"{p}transactions_committed_total", "Transactions committed (markers written) here.",
                    unlabelled(self.committed_total)),
            counter(f"{p}transactions_aborted_total", "Transactions aborted (markers written) here.",
                    unlabelled(self.aborted_total)),
            counter(f"{p}transactions_timed_out_total", "Transactions aborted by transaction.timeout.ms here.",
                    unlabelled(self.timed_out_total)),
            gauge(f"{p}transaction_coordinator_partitions", f"Partitions of {TRANSACTION_STATE_TOPIC_NAME} "
                  "served here.", unlabelled(len(active))),
        ]


def offsets_partition(image: MetadataImage, group_id: str, configured_partitions: int) -> TopicPartition:
    """AddOffsetsToTxn: the `__consumer_offsets` partition of the group (Kafka's
    groupCoordinator.partitionFor), by the topic's partition count once it exists."""
    topic = image.topic(GROUP_METADATA_TOPIC_NAME)
    count = len(topic.partitions) if topic is not None and topic.partitions else configured_partitions
    return TopicPartition(GROUP_METADATA_TOPIC_NAME, coordinator_partition(group_id, count))
