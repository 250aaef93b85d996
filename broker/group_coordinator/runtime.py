"""The group coordinator: the `groups/` rules on the coordinator runtime (`broker.coordinator`).

    coordinator = GroupCoordinator(broker_id, replicas, image_provider, settings)
    partition = coordinator.partition_for(group_id)    # or CoordinatorError(NOT_COORDINATOR, ...)
    outcome, error = await coordinator.run(partition, group_id, lambda state: rule(state.groups.get(group_id)))
    await coordinator.runtime.idle()                   # tests: every write settled

The state of each `__consumer_offsets` partition led here is a `GroupsImage` (its groups,
committed offsets and pending transactional offsets) held by the runtime: a rule runs on the
current image at once (the event loop orders requests) and returns records; the image after
it is the replay of those records (`GroupShard`, the path loading takes), plus the one
memory-only change Kafka's classic groups make (`GroupsImage.with_group`: members during a
rebalance, heartbeat deadlines, pending syncs, never stored by Kafka either). It is pending
until its records commit (acks=all, batched with the partition's other writes) and the
answers (the request's and the parked JoinGroup/SyncGroup ones) are given only then; a write
that fails returns the partition to its committed image.

Transactions (KIP-98, KIP-447): a TxnOffsetCommit's records are appended as the producer's
transactional batch and replayed as pending offsets of that producer; the transaction
coordinator's WriteTxnMarkers for a `__consumer_offsets` partition reaches
`complete_transaction`, which appends the marker and replays it (commit: the pending offsets
become the committed ones; abort: they go). OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT for a partition with a pending offset. Each group's next deadline (sessions, the join phase, pending syncs,
new members' join timeout) is one timer of the broker's timer service, rescheduled after
every rule on the group: a session expires at its deadline, to the millisecond. The group
rules keep wall time (`now_ms`, as Kafka's records do); the timer service runs on the
broker's one monotonic clock, so a deadline is handed to it as a delay (Kafka's
CoordinatorTimer schedules by delay too). Leadership
changes reach the runtime from the replica manager's change listeners.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from broker.coordinator.errors import CoordinatorError, client_error
from broker.coordinator.runtime import CoordinatorResult, CoordinatorRuntime, Encoded, ShardStatus
from broker.group_coordinator.consumer_ops import ConsumerGroupOps
from broker.group_coordinator.shards import Parked
from broker.group_coordinator.txn_writer import TransactionalPartitionWriter
from broker.timers import TimerService, wall_ms
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.prometheus import Metric, counter, gauge, unlabelled
from common.units import MIB, SECOND_MS
from groups import consumer_records, share_records
from groups.share_records import ShareRecord, ShareStateRecord, MembershipRecord
from groups.consumer_group import ConsumerGroupConfig, ConsumerGroupState, MigrationPolicy
from groups.consumer_records import ConsumerRecord
from groups.group import ClassicGroup, GroupConfig
from groups.image import GroupsImage
from groups.join import sync_failed
from groups.membership import expire, next_deadline
from groups.offsets import FetchedOffset, delete_topic_offsets, expire_offsets, fetch_offsets
from groups.outcome import JoinResult, Outcome, SyncResult
from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition
from groups.records import CoordinatorRecord, OffsetCommitKey, decode_record, encode_record
from groups.txn_offsets import TxnCommitRequest, txn_commit_offsets
from groups.state import GroupState
from metadata.image import MetadataImage

log = logging.getLogger(__name__)

TOPICS_CHECK_INTERVAL_MS: Final = 1 * SECOND_MS  # offsets of deleted topics go within this at the latest
RETENTION_TIMER: Final = "offsets-retention"  # the broker-wide timers of the group coordinator
TOPICS_TIMER: Final = "deleted-topics"
MAX_ENCODED_KEPT: Final = 10_000  # records encoded and not replayed yet (one result's, normally)
E = ErrorCode
Rule = Callable[[GroupsImage], Outcome]
Producer = tuple[int, int]  # (producer id, producer epoch) of a transactional write
Memory = Callable[[GroupsImage], GroupsImage]

# What WriteTxnMarkers answers for a __consumer_offsets partition whose coordinator cannot take
# the marker now (Kafka's KafkaApis.handleWriteTxnMarkersRequest): the transaction
# coordinator retries NOT_LEADER_OR_FOLLOWER until the partition's new leader takes it.
_MARKER_ERRORS: Final[dict[int, ErrorCode]] = {
    E.NOT_COORDINATOR: E.NOT_LEADER_OR_FOLLOWER,
    E.COORDINATOR_NOT_AVAILABLE: E.NOT_LEADER_OR_FOLLOWER,
    E.COORDINATOR_LOAD_IN_PROGRESS: E.NOT_LEADER_OR_FOLLOWER,
}





@dataclass(frozen=True, slots=True)
class CoordinatorSettings:
    groups: GroupConfig = field(default_factory=GroupConfig)
    offsets_topic_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 100 * MIB
    commit_timeout_ms: int = 5 * SECOND_MS
    retention_check_interval_ms: int = 600 * SECOND_MS
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)  # KIP-848's group.consumer.*

    @classmethod
    def from_config(cls, config: Any) -> CoordinatorSettings:
        """From a broker's parsed config (common.config keys)."""
        def key(name: str) -> int:
            return int(config[name])

        groups = GroupConfig(
            min_session_timeout_ms=key("group.min.session.timeout.ms"),
            max_session_timeout_ms=key("group.max.session.timeout.ms"),
            initial_rebalance_delay_ms=key("group.initial.rebalance.delay.ms"),
            max_size=key("group.max.size"), offset_metadata_max_bytes=key("offset.metadata.max.bytes"),
            offsets_retention_ms=key("offsets.retention.minutes") * 60 * SECOND_MS)
        consumer = ConsumerGroupConfig(
            session_timeout_ms=key("group.consumer.session.timeout.ms"),
            min_session_timeout_ms=key("group.consumer.min.session.timeout.ms"),
            max_session_timeout_ms=key("group.consumer.max.session.timeout.ms"),
            heartbeat_interval_ms=key("group.consumer.heartbeat.interval.ms"),
            min_heartbeat_interval_ms=key("group.consumer.min.heartbeat.interval.ms"),
            max_heartbeat_interval_ms=key("group.consumer.max.heartbeat.interval.ms"),
            assignors=_names(config["group.consumer.assignors"]),
            max_size=key("group.consumer.max.size"),
            migration_policy=MigrationPolicy.parse(str(config["group.consumer.migration.policy"])))
        return cls(groups, key("offsets.topic.num.partitions"), key("offsets.topic.replication.factor"),
                   key("offsets.topic.segment.bytes"), key("offsets.commit.timeout.ms"),
                   key("offsets.retention.check.interval.ms"), consumer)


def _names(value: Any) -> tuple[str, ...]:
    """A list setting as parsed (a list), or as a comma-separated string."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(str(item).strip() for item in items if str(item).strip())


class GroupShard:
    """The runtime's view of one `__consumer_offsets` partition: a `GroupsImage`, rebuilt by
    replaying the partition's records (groups as Kafka loads them, their offsets, and the
    transactional offsets pending until their producer's marker).

    A rule's records are encoded here (`encode`) and replayed by the runtime within the same
    call: the record just encoded is kept until then, so a write replays it without decoding
    the bytes it was made from (decoding was a quarter of a commit's CPU); loading decodes."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self.now_ms = now_ms
        self._encoded: dict[Encoded, CoordinatorRecord | ConsumerRecord | ShareRecord] = {}

    def empty(self) -> GroupsImage:
        return GroupsImage.EMPTY

    def encode(self, records: tuple[CoordinatorRecord | ConsumerRecord | ShareRecord, ...]) -> tuple[Encoded, ...]:
        if len(self._encoded) > MAX_ENCODED_KEPT:  # replays that never came (a rule raised): forget them
            self._encoded.clear()
        out = []
        for record in records:
            if isinstance(record, (ShareStateRecord, MembershipRecord)):  # KIP-932: a share partition's or group's
                encoded = share_records.encode_record(record)
            else:
                encoded = consumer_records.encode_record(record) if isinstance(record, ConsumerRecord) \
                    else encode_record(record)
            self._encoded[encoded] = record
            out.append(encoded)
        return tuple(out)

    def _record(self, key: bytes, value: bytes | None) -> CoordinatorRecord | ConsumerRecord | ShareRecord:
        record = self._encoded.pop((key, value), None)
        if record is not None:
            return record
        if share_records.is_share_key(key):
            return share_records.decode_record(key, value)
        if len(key) >= 2 and int.from_bytes(key[:2], "big") in consumer_records.CONSUMER_KEY_VERSIONS:
            return consumer_records.decode_record(key, value)  # a KIP-848 group's
        return decode_record(key, value)

    def replay(self, state: GroupsImage, key: bytes, value: bytes | None) -> GroupsImage:
        return state.replay(self._record(key, value), self.now_ms())

    def replay_transactional(self, state: GroupsImage, producer_id: int, producer_epoch: int,
                             key: bytes, value: bytes | None) -> GroupsImage:
        return state.replay(self._record(key, value), self.now_ms(), producer_id)

    def replay_end_transaction(self, state: GroupsImage, producer_id: int, producer_epoch: int,
                               committed: bool) -> GroupsImage:
        return state.end_transaction(producer_id, committed)


class GroupCoordinator(ConsumerGroupOps):
    def __init__(self, broker_id: int, replicas: Any, image: Callable[[], MetadataImage],
                 settings: CoordinatorSettings, *, now_ms: Callable[[], int] = wall_ms,
                 timers: TimerService | None = None) -> None:
        self.broker_id = broker_id
        self.replicas = replicas
        self._image = image
        self.settings = settings
        self.config = settings.groups
        self.now_ms = now_ms
        # The broker's timer service (its own, on the monotonic clock, when built alone):
        # group deadlines, on `now_ms`, reach it as delays.
        self._own_timers = timers is None
        self.timers = timers if timers is not None else TimerService(name="group coordinator")
        self.writer = TransactionalPartitionWriter(replicas, GROUP_METADATA_TOPIC_NAME, now_ms)
        self.shard = GroupShard(now_ms)
        self.runtime: CoordinatorRuntime[GroupsImage] = CoordinatorRuntime(
            "group", self.shard, self.writer, self.timers, commit_timeout_ms=settings.commit_timeout_ms,
            on_loaded=self._loaded, on_unloaded=self._unloaded)
        self.parked: dict[int, Parked] = {}
        self._listeners: list[Callable[[TopicPartition], None]] = [
            self.writer.listener(self.runtime.on_partition_change), self._topic_changed]
        self._started = False
        self._seen_topics: object | None = None  # the topics image of the last deleted-topics pass
        self._seen_topic_ids: dict[str, str] = {}
        self.rebalances_total = 0  # completed join phases (a new generation)
        self.offset_commits_total = 0  # committed partition offsets

    # ---- lifecycle ------------------------------------------------------------------------

    def ensure_started(self) -> None:
        """Follow this broker's leaderships of the offsets partitions and start the periodic
        timers, once, when an event loop runs (built outside one in tests)."""
        if self._started:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # the first request starts it
            return
        self._started = True
        listeners = getattr(self.replicas, "change_listeners", None)
        if listeners is not None:
            listeners.extend(self._listeners)
        self._scan_leadership()
        self.timers.schedule_every((self, RETENTION_TIMER), self.settings.retention_check_interval_ms,
                                   self._retention_pass)
        self.timers.schedule_every((self, TOPICS_TIMER), TOPICS_CHECK_INTERVAL_MS, self._topics_pass)

    async def close(self) -> None:
        listeners = getattr(self.replicas, "change_listeners", None)
        for listener in self._listeners:
            if listeners is not None and listener in listeners:
                listeners.remove(listener)
        self.timers.cancel((self, RETENTION_TIMER))
        self.timers.cancel((self, TOPICS_TIMER))
        await self.runtime.close()
        if self._own_timers:
            self.timers.close()

    def image(self) -> MetadataImage:
        return self._image()

    def new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4()}"

    # ---- which partition -----------------------------------------------------------------

    def partition_count(self) -> int | None:
        topic = self._image().topic(GROUP_METADATA_TOPIC_NAME)
        return None if topic is None or not topic.partitions else len(topic.partitions)

    def partition_for(self, group_id: str) -> int:
        """The loaded `__consumer_offsets` partition coordinating `group_id` here;
        CoordinatorError otherwise."""
        self.ensure_started()
        if not group_id:  # Kafka checks this before routing: any broker answers it
            raise CoordinatorError(E.INVALID_GROUP_ID, "the group id is empty")
        count = self.partition_count()
        if count is None:
            raise CoordinatorError(E.COORDINATOR_NOT_AVAILABLE, f"{GROUP_METADATA_TOPIC_NAME} does not exist yet")
        partition = coordinator_partition(group_id, count)
        self.runtime.require_active(partition, GROUP_METADATA_TOPIC_NAME)
        return partition

    def groups(self, partition: int) -> GroupsImage:
        """The partition's groups and offsets with every write so far (what the next rule sees)."""
        return self.runtime.current(partition)

    def committed_offsets(self, partition: int) -> GroupsImage:
        """The partition's image of committed writes only: what OffsetFetch answers."""
        return self.runtime.committed(partition)

    def fetch_offsets(self, partition: int, group_id: str, wanted: tuple[tuple[str, tuple[int, ...]], ...] | None,
                      *, require_stable: bool = False) -> tuple[FetchedOffset, ...]:
        """OffsetFetch for one group, from the committed image (Kafka reads at the last
        committed offset); `require_stable` (v7+, KIP-447): a partition with a pending
        transactional offset answers UNSTABLE_OFFSET_COMMIT instead of the last committed one."""
        image = self.runtime.committed(partition)
        unstable = image.pending_partitions(group_id) if require_stable else frozenset()
        return fetch_offsets(image.offsets.get(group_id), wanted, unstable=unstable)

    def active_partitions(self) -> list[int]:
        return self.runtime.active()

    def loading(self) -> bool:
        return any(self.runtime.status(p) is ShardStatus.LOADING for p in self.runtime.shards)

    def park(self, partition: int) -> Parked:
        return self.parked.setdefault(partition, Parked())

    def park_join(self, partition: int, group_id: str, member_id: str, wait_ms: int) -> asyncio.Future[JoinResult]:
        """A JoinGroup waiting for the join phase; REBALANCE_IN_PROGRESS after `wait_ms` at most
        (a safety net: the group's own deadlines answer it first)."""
        future = self.park(partition).park_join(group_id, member_id)
        self._answer_by(future, wait_ms, JoinResult(E.REBALANCE_IN_PROGRESS, member_id=member_id))
        return future

    def park_sync(self, partition: int, group_id: str, member_id: str, wait_ms: int) -> asyncio.Future[SyncResult]:
        """A follower's SyncGroup waiting for the leader's assignment, as `park_join`."""
        future = self.park(partition).park_sync(group_id, member_id)
        self._answer_by(future, wait_ms, SyncResult(E.REBALANCE_IN_PROGRESS))
        return future

    def _answer_by(self, future: asyncio.Future[Any], wait_ms: int, answer: object) -> None:
        key = ("parked", id(future))

        def expire(now_ms: int) -> None:
            if not future.done():
                future.set_result(answer)

        self.timers.schedule_in(key, wait_ms, expire)
        future.add_done_callback(lambda _: self.timers.cancel(key))

    def _scan_leadership(self) -> None:
        count = self.partition_count()
        for partition in range(count or 0):
            self.runtime.on_partition_change(partition)

    # ---- rules ---------------------------------------------------------------------------

    async def run(self, partition: int, group_id: str, rule: Rule,
                  park: Callable[[Outcome], None] | None = None, *,
                  producer: Producer | None = None) -> tuple[Outcome, ErrorCode]:
        """Apply `rule` to the partition's current image now; its outcome and, once its records
        committed (or failed), the error (NONE when committed). `producer`: the records are
        that producer's transactional batch (TxnOffsetCommit)."""
        outcome, done = self.submit(partition, group_id, rule, park, producer=producer)
        return outcome, await done

    def submit(self, partition: int, group_id: str, rule: Rule, park: Callable[[Outcome], None] | None = None,
               *, producer: Producer | None = None) -> tuple[Outcome, asyncio.Future[ErrorCode]]:
        """`run` in two steps: the outcome now, the error once the write settled. `park(outcome)`
        runs as soon as the rule has decided, so a request parks before any answer is given
        (the parked requests are answered when the write settles, maybe within this call)."""
        decided: list[Outcome] = []
        done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def operation(state: GroupsImage) -> CoordinatorResult[GroupsImage, Outcome]:
            outcome = rule(state)
            decided.append(outcome)
            if park is not None:
                park(outcome)
            pid, epoch = producer if producer is not None else (-1, -1)
            return CoordinatorResult(self.shard.encode(outcome.records), outcome,
                                     memory=self._memory(partition, group_id, state, outcome),
                                     producer_id=pid, producer_epoch=epoch)

        def settle(answer: Any, failure: CoordinatorError | None) -> None:
            self._settled(partition, group_id, decided[0], failure, done)

        self.runtime.submit_settled(partition, operation, settle)
        return decided[0], done

    def _memory(self, partition: int, group_id: str, state: GroupsImage, outcome: Outcome) -> Memory:
        """What the runtime applies after replaying `outcome`'s records: the rule's group, with
        what only memory holds (`GroupsImage.with_group`); one log line per state change; the
        group's timer moved to its next deadline."""
        before = state.groups.get(group_id)
        group = outcome.group
        old_state = None if before is None else before.state
        new_state = None if group is None else group.state
        if group is not None and before is not None and group.generation_id > before.generation_id:
            self.rebalances_total += 1
        if old_state != new_state or outcome.reason:
            log.info("Group %s (%s-%d) %s -> %s, generation %s: %s", group_id, GROUP_METADATA_TOPIC_NAME,
                     partition, "absent" if old_state is None else old_state.value,
                     "absent" if new_state is None else new_state.value,
                     -1 if group is None else group.generation_id, outcome.reason or "-")
        kept = None if group is None or group.state is GroupState.DEAD else group
        self._schedule_expiry(partition, group_id, kept)
        return lambda replayed: replayed.with_group(group_id, kept)

    def _settled(self, partition: int, group_id: str, outcome: Outcome, failure: BaseException | None,
                 done: asyncio.Future[ErrorCode] | None) -> None:
        error = E.NONE
        if isinstance(failure, CoordinatorError):
            error = client_error(failure.code)
        elif failure is not None:
            log.error("Group %s (%s-%d): a rule failed", group_id, GROUP_METADATA_TOPIC_NAME, partition,
                      exc_info=failure)
            error = E.UNKNOWN_SERVER_ERROR
        if error is E.NONE:
            self.offset_commits_total += sum(
                1 for r in outcome.records if isinstance(r.key, OffsetCommitKey) and r.value is not None)
        else:
            log.warning("Group %s: writing %d record(s) to %s-%d failed: %s", group_id, len(outcome.records),
                        GROUP_METADATA_TOPIC_NAME, partition, error.name)
            if self.runtime.status(partition) is ShardStatus.ACTIVE:  # reverted: its deadline too
                self._schedule_expiry(partition, group_id, self.runtime.current(partition).groups.get(group_id))
        parked = self.parked.get(partition)
        if parked is not None:
            if error is not E.NONE and outcome.syncs:
                self._sync_failed(partition, group_id, error, parked)
            else:
                for member_id, join in outcome.joins:
                    parked.answer_join(group_id, member_id,
                                       join if error is E.NONE else JoinResult(error, member_id=member_id))
                for member_id, sync in outcome.syncs:
                    parked.answer_sync(group_id, member_id, sync)
        if done is not None and not done.done():
            done.set_result(error)

    def _sync_failed(self, partition: int, group_id: str, error: ErrorCode, parked: Parked) -> None:
        """Kafka: when the leader's assignment cannot be stored, every member waiting for it
        gets the error and the group rebalances."""
        if self.runtime.status(partition) is not ShardStatus.ACTIVE:
            return
        group = self.runtime.current(partition).groups.get(group_id)
        if group is None:
            return
        failed = sync_failed(group, group.generation_id, error, self.now_ms(), self.config)
        self.runtime.submit_settled(partition, lambda state: CoordinatorResult(
            self.shard.encode(failed.records), failed,
            memory=self._memory(partition, group_id, state, failed)), partial(_log_failure, group_id, partition))
        for member_id, sync in failed.syncs:
            parked.answer_sync(group_id, member_id, sync)

    # ---- transactions (KIP-98, KIP-447) --------------------------------------------------

    async def txn_commit_offsets(self, partition: int, req: TxnCommitRequest
                                 ) -> tuple[tuple[tuple[str, int, ErrorCode], ...], ErrorCode]:
        """TxnOffsetCommit: ((topic, partition, error), ...) and, once the producer's
        transactional batch committed (or failed), the write's error. The offsets stay
        pending until `complete_transaction`."""
        now_ms = self.now_ms()
        outcome, error = await self.run(partition, req.group_id, lambda state: txn_commit_offsets(
            state.groups.get(req.group_id), req, now_ms=now_ms, config=self.config),
            producer=(req.producer_id, req.producer_epoch))
        if outcome.records and error is E.NONE:
            log.info("Group %s (%s-%d): %d offset(s) pending in the transaction of producer %d (epoch %d)",
                     req.group_id, GROUP_METADATA_TOPIC_NAME, partition, len(outcome.records),
                     req.producer_id, req.producer_epoch)
        return outcome.response, error  # type: ignore[return-value]

    async def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, committed: bool) -> ErrorCode:
        """A WriteTxnMarkers entry for `__consumer_offsets`-`partition` (Kafka's
        GroupCoordinator.completeTransaction): the marker appended through the runtime and
        replayed, so the producer's pending offsets become the committed ones (commit) or go
        (abort) once it commits. The error for that partition's WriteTxnMarkers answer: NONE,
        NOT_LEADER_OR_FOLLOWER when this broker cannot coordinate the partition now (the
        transaction coordinator retries), or the append's error."""
        self.ensure_started()
        kind = "commit" if committed else "abort"
        try:
            if self.writer.leader_epoch(partition) is not None and partition not in self.runtime.shards:
                self.runtime.on_partition_change(partition)  # led but not loaded yet: start loading
            pending = self.runtime.current(partition).pending.get(producer_id, {})
            await self.runtime.complete_transaction(partition, producer_id, producer_epoch, coordinator_epoch,
                                                    committed)
        except CoordinatorError as e:
            error = _MARKER_ERRORS.get(int(e.code), e.code)  # an append's own error as it is (retriable ones stay)
            log.warning("The %s marker of producer %d (epoch %d) on %s-%d was not written: %s (%s)", kind,
                        producer_id, producer_epoch, GROUP_METADATA_TOPIC_NAME, partition, e, error.name)
            return error
        log.info("Transaction of producer %d (epoch %d, coordinator epoch %d) %s on %s-%d: %d group(s) with "
                 "pending offsets", producer_id, producer_epoch, coordinator_epoch,
                 "committed" if committed else "aborted", GROUP_METADATA_TOPIC_NAME, partition, len(pending))
        return E.NONE

    # ---- timers --------------------------------------------------------------------------

    def _schedule_expiry(self, partition: int, group_id: str, group: ClassicGroup | None) -> None:
        deadline = -1 if group is None else next_deadline(group)  # wall ms, on self.now_ms
        key = ("expire", group_id)
        if deadline < 0:
            self.runtime.cancel_timer(partition, key)
            return
        delay_ms = max(0, deadline - self.now_ms())
        if self.runtime.timer_deadline(partition, key) != self.timers.now_ms() + delay_ms:
            decided: list[Outcome] = []

            def operation(state: GroupsImage, _timer_ms: int) -> CoordinatorResult[GroupsImage, Any]:
                """The group's deadline came: `groups.membership.expire` as a write, at the
                deadline at least (the delay elapsed; the wall clock read now may lag it by
                its rounding)."""
                current = state.groups.get(group_id)
                if current is None:
                    return CoordinatorResult()
                outcome = expire(current, max(self.now_ms(), deadline), self.config)
                decided.append(outcome)
                return CoordinatorResult(self.shard.encode(outcome.records), outcome,
                                         memory=self._memory(partition, group_id, state, outcome))

            def settled(written: asyncio.Future[Any]) -> None:  # its answers, like a request's
                if decided:
                    failure = CoordinatorError(E.NOT_COORDINATOR, "cancelled") if written.cancelled() \
                        else written.exception()
                    self._settled(partition, group_id, decided[0], failure, None)

            self.runtime.schedule_timer(partition, key, delay_ms, operation, settled)

    def _loaded(self, partition: int, image: GroupsImage) -> None:
        self._seen_topics = None  # its offsets of topics deleted meanwhile go at the next pass
        shard = self.runtime.shards.get(partition)
        log.info("Loaded %d group(s) and offsets of %d group(s) from %s-%d (leader epoch %d), %d of them "
                 "consumer-protocol (KIP-848) groups", len(image.groups) + len(image.consumer_groups),
                 len(image.offsets), GROUP_METADATA_TOPIC_NAME, partition, -1 if shard is None else shard.leader_epoch,
                 len(image.consumer_groups))
        for group_id, group in image.groups.items():
            self._schedule_expiry(partition, group_id, group)
        if image.consumer_groups:
            self._arm_consumer_sessions(partition, image)
        self._topics_pass_soon()

    def _unloaded(self, partition: int) -> None:
        parked = self.parked.pop(partition, None)
        if parked is not None:
            parked.close(E.NOT_COORDINATOR)

    def _topic_changed(self, tp: TopicPartition) -> None:
        """A replica-manager change listener: a topic deleted or recreated shows as a new
        topics image; look at it on the next pass of the loop (the image is published then)."""
        if tp.topic != GROUP_METADATA_TOPIC_NAME and self._image().topics is not self._seen_topics:
            self._topics_pass_soon()

    def _topics_pass_soon(self) -> None:
        """The deleted-topics pass at once, then every TOPICS_CHECK_INTERVAL_MS again."""
        if not self.timers.run_soon((self, TOPICS_TIMER)):
            self.timers.schedule_every((self, TOPICS_TIMER), TOPICS_CHECK_INTERVAL_MS, self._topics_pass,
                                       first_delay_ms=0)

    def _topics_pass(self, _timer_ms: int) -> None:
        self._scan_leadership()
        self._forget_deleted_topics()

    def _retention_pass(self, _timer_ms: int) -> None:
        now_ms = self.now_ms()  # offsets expire on wall time, as they were committed
        for partition in self.active_partitions():
            image = self.runtime.current(partition)
            for group_id in sorted(set(image.groups) | set(image.offsets)):
                consumer = image.consumer_groups.get(group_id)
                if consumer is not None and consumer.members:
                    continue  # a KIP-848 group's offsets expire only once it is empty, as a classic one's
                group = image.groups.get(group_id) or ClassicGroup(group_id)
                outcome = expire_offsets(group, image.offsets.get(group_id), now_ms, self.config,
                                         pending=image.pending_partitions(group_id))
                if outcome.records:  # decided on the current image, submitted at once
                    self.submit(partition, group_id, _decided(outcome))

    def _forget_deleted_topics(self) -> None:
        """Remove the offsets of topics deleted since the last pass: a name gone, or now another
        topic's (deleted and recreated in between). A partition loaded since rescans its offsets."""
        topics = self._image().topics
        if topics is self._seen_topics:
            return
        ids = {name: topic.topic_id for name, topic in topics.by_name.items()}
        deleted = {name for name, topic_id in self._seen_topic_ids.items() if ids.get(name) != topic_id}
        self._seen_topics, self._seen_topic_ids = topics, ids
        for partition in self.active_partitions():
            for group_id, offsets in list(self.runtime.current(partition).offsets.items()):
                stale = {t for t, _ in offsets if t in deleted or t not in ids}
                if stale:
                    group = self.runtime.current(partition).groups.get(group_id) or ClassicGroup(group_id)
                    self.submit(partition, group_id, _decided(
                        delete_topic_offsets(group, offsets, stale, self.now_ms())))

    # ---- metrics -------------------------------------------------------------------------

    def metric_families(self, prefix: str) -> list[Metric]:
        """Groups by state, rebalances, committed offsets (rate() gives commits/s)."""
        by_state: dict[GroupState, int] = {state: 0 for state in GroupState if state is not GroupState.DEAD}
        consumer_by_state: dict[ConsumerGroupState, int] = {
            state: 0 for state in ConsumerGroupState if state is not ConsumerGroupState.DEAD}
        active = self.active_partitions()
        for partition in active:
            image = self.runtime.current(partition)
            for group in image.groups.values():
                by_state[group.state] = by_state.get(group.state, 0) + 1
            for consumer in image.consumer_groups.values():
                consumer_by_state[consumer.state] += 1
        p = prefix
        return [
            gauge(f"{p}groups", "Consumer groups this broker coordinates, by state.",
                  [({"state": state.value}, count) for state, count in by_state.items()]),
            gauge(f"{p}consumer_protocol_groups", "KIP-848 consumer groups this broker coordinates, by state.",
                  [({"state": state.value}, count) for state, count in consumer_by_state.items()]),
            counter(f"{p}group_rebalances_total", "Rebalances completed (new generations) here.",
                    unlabelled(self.rebalances_total)),
            counter(f"{p}offset_commits_total", f"Partition offsets committed to {GROUP_METADATA_TOPIC_NAME}.",
                    unlabelled(self.offset_commits_total)),
            gauge(f"{p}coordinator_partitions", f"Partitions of {GROUP_METADATA_TOPIC_NAME} served here.",
                  unlabelled(len(active))),
        ]


def _decided(outcome: Outcome) -> Rule:
    """A rule whose outcome was computed on the current image just before submitting it."""
    return lambda state: outcome


def _log_failure(group_id: str, partition: int, answer: Any, failure: CoordinatorError | None) -> None:
    if failure is not None:
        log.warning("Group %s: writing its rebalance after a failed SyncGroup to %s-%d failed too: %s",
                    group_id, GROUP_METADATA_TOPIC_NAME, partition, failure)
