"""The group coordinator runtime: shards of `__consumer_offsets`, appends, timers.

    coordinator = GroupCoordinator(broker_id, replicas, image_provider, settings)
    await coordinator.start()          # the timer task (shard scan, session/rebalance expiry)
    shard = coordinator.shard_for(group_id)   # or CoordinatorError(NOT_COORDINATOR, ...)
    result = await coordinator.run(shard, group_id, rule)   # rule(group) -> Outcome

A rule runs synchronously on the group's current value (the event loop orders requests), its
new group value is kept at once, its records are appended with acks=all and its answers
(the request's and the parked JoinGroup/SyncGroup ones) are given only once the records are
committed. Timers: one task every `TICK` reads the clock, loads or drops shards as this
broker's leaderships of the offsets partitions change, and runs `groups.membership.expire`
on every group whose next deadline passed. The purgatory coming with the replica manager
split can replace this loop (one deadline per group) behind the same methods.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from broker.group_coordinator.shards import Shard, ShardState
from broker.topic_partition import TopicPartition
from common.errors import ErrorCode, KafkaError
from common.prometheus import Metric, counter, gauge, unlabelled
from common.record_batch import iter_batches
from common.records import build_batch, decode_records
from common.units import MIB, SECOND_MS, SECONDS
from groups.group import ClassicGroup, GroupConfig
from groups.image import GroupsImage, replay_offsets
from groups.join import sync_failed
from groups.membership import expire, next_deadline
from groups.offsets import delete_topic_offsets, expire_offsets
from groups.outcome import Outcome
from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition
from groups.records import (
    CoordinatorRecord,
    OffsetCommitKey,
    decode_record,
    encode_record,
)
from groups.state import GroupState
from metadata.image import MetadataImage

log = logging.getLogger(__name__)

TICK: Final = 0.05 * SECONDS  # timer resolution: sessions and rebalances expire within this
LOAD_READ_BYTES: Final = 1 * MIB
E = ErrorCode

# Kafka's GroupMetadataManager mapping of append errors to what a group client understands.
_APPEND_ERRORS: Final[dict[int, ErrorCode]] = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
}


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class CoordinatorError(Exception):
    """This broker cannot serve the group now (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE) or the group id is empty (INVALID_GROUP_ID)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class CoordinatorSettings:
    groups: GroupConfig = field(default_factory=GroupConfig)
    offsets_topic_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 100 * MIB
    commit_timeout_ms: int = 5 * SECOND_MS
    retention_check_interval_ms: int = 600 * SECOND_MS

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
        return cls(groups, key("offsets.topic.num.partitions"), key("offsets.topic.replication.factor"),
                   key("offsets.topic.segment.bytes"), key("offsets.commit.timeout.ms"),
                   key("offsets.retention.check.interval.ms"))


class GroupCoordinator:
    def __init__(self, broker_id: int, replicas: Any, image: Callable[[], MetadataImage],
                 settings: CoordinatorSettings, *, now_ms: Callable[[], int] = wall_ms) -> None:
        self.broker_id = broker_id
        self.replicas = replicas
        self._image = image
        self.settings = settings
        self.config = settings.groups
        self.now_ms = now_ms
        self.shards: dict[int, Shard] = {}
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._last_retention_check = now_ms()
        self._seen_topics: object | None = None  # the topics image of the last deleted-topics pass
        self._seen_topic_ids: dict[str, str] = {}
        self.rebalances_total = 0  # completed join phases (a new generation)
        self.offset_commits_total = 0  # committed partition offsets

    # ---- lifecycle ------------------------------------------------------------------------

    def ensure_started(self) -> None:
        """Start the timer task (leadership scan, expiry) once, when an event loop runs."""
        if self._task is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # built outside the loop (tests): the first request starts it
            return
        self._task = loop.create_task(self._timers(), name="group-coordinator")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for shard in self.shards.values():
            shard.close(E.NOT_COORDINATOR)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*([self._task] if self._task else []), *self._tasks, return_exceptions=True)
        self.shards.clear()

    def image(self) -> MetadataImage:
        return self._image()

    def new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4()}"

    # ---- which shard ---------------------------------------------------------------------

    def partition_count(self) -> int | None:
        topic = self._image().topic(GROUP_METADATA_TOPIC_NAME)
        return None if topic is None or not topic.partitions else len(topic.partitions)

    def shard_for(self, group_id: str) -> Shard:
        """The ACTIVE shard coordinating `group_id` here; CoordinatorError otherwise."""
        self.ensure_started()
        if not group_id:  # Kafka checks this before routing: any broker answers it
            raise CoordinatorError(E.INVALID_GROUP_ID, "the group id is empty")
        count = self.partition_count()
        if count is None:
            raise CoordinatorError(E.COORDINATOR_NOT_AVAILABLE, f"{GROUP_METADATA_TOPIC_NAME} does not exist yet")
        partition = coordinator_partition(group_id, count)
        epoch = self._leader_epoch(partition)
        if epoch is None:
            raise CoordinatorError(E.NOT_COORDINATOR,
                                   f"broker {self.broker_id} does not lead {GROUP_METADATA_TOPIC_NAME}-{partition}")
        shard = self.shards.get(partition)
        if shard is None or shard.leader_epoch != epoch:
            self._load(partition, epoch)
            raise CoordinatorError(E.COORDINATOR_LOAD_IN_PROGRESS, f"loading {GROUP_METADATA_TOPIC_NAME}-{partition}")
        if shard.state is ShardState.LOADING:
            raise CoordinatorError(E.COORDINATOR_LOAD_IN_PROGRESS, f"loading {GROUP_METADATA_TOPIC_NAME}-{partition}")
        return shard

    def active_shards(self) -> list[Shard]:
        return [s for s in self.shards.values() if s.state is ShardState.ACTIVE]

    def loading(self) -> bool:
        return any(s.state is ShardState.LOADING for s in self.shards.values())

    def _leader_epoch(self, partition: int) -> int | None:
        p = self.replicas.get_partition(TopicPartition(GROUP_METADATA_TOPIC_NAME, partition))
        if p is None or not p.is_leader(self.broker_id):
            return None
        return int(p.leader_epoch)

    # ---- rules ---------------------------------------------------------------------------

    async def run(self, shard: Shard, group_id: str, outcome: Outcome) -> ErrorCode:
        """Apply a rule's outcome to `shard`: keep the group, append its records, answer the
        parked requests once committed. The append's error (NONE when committed)."""
        before = shard.groups.get(group_id)
        self._keep(shard, group_id, before, outcome)
        error = E.NONE
        if outcome.records:
            error = await self._append(shard, outcome.records)
            if error is not E.NONE:
                log.warning("Group %s: writing %d record(s) to %s-%d failed: %s", group_id,
                            len(outcome.records), GROUP_METADATA_TOPIC_NAME, shard.partition, error.name)
                if outcome.syncs:
                    self._sync_failed(shard, group_id, error)
                    return error
            else:
                for record in outcome.records:
                    if isinstance(record.key, OffsetCommitKey):
                        shard.offsets = replay_offsets(shard.offsets, record)
                        self.offset_commits_total += record.value is not None
        for member_id, join in outcome.joins:
            shard.answer_join(group_id, member_id, join)
        for member_id, sync in outcome.syncs:
            shard.answer_sync(group_id, member_id, sync)
        return error

    def _keep(self, shard: Shard, group_id: str, before: ClassicGroup | None, outcome: Outcome) -> None:
        group = outcome.group
        if group is None or group.state is GroupState.DEAD:
            shard.groups.pop(group_id, None)
        else:
            shard.groups[group_id] = group
        old_state = None if before is None else before.state
        new_state = None if group is None else group.state
        if group is not None and before is not None and group.generation_id > before.generation_id:
            self.rebalances_total += 1
        if old_state != new_state or outcome.reason:
            log.info("Group %s (%s-%d) %s -> %s, generation %s: %s", group_id, GROUP_METADATA_TOPIC_NAME,
                     shard.partition, "absent" if old_state is None else old_state.value,
                     "absent" if new_state is None else new_state.value,
                     -1 if group is None else group.generation_id, outcome.reason or "-")

    def _sync_failed(self, shard: Shard, group_id: str, error: ErrorCode) -> None:
        group = shard.groups.get(group_id)
        if group is None:
            return
        failed = sync_failed(group, group.generation_id, error, self.now_ms(), self.config)
        self._keep(shard, group_id, group, failed)
        for member_id, sync in failed.syncs:
            shard.answer_sync(group_id, member_id, sync)

    async def _append(self, shard: Shard, records: tuple[CoordinatorRecord, ...]) -> ErrorCode:
        tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, shard.partition)
        batch = build_batch([encode_record(r) for r in records], base_timestamp=self.now_ms())
        try:
            info = self.replicas.append(tp, batch, acks=-1)
        except KafkaError as e:
            return _APPEND_ERRORS.get(int(e.code), ErrorCode(int(e.code)))
        codes = await self.replicas.wait_for_replication(
            {tp: info.last_offset + 1}, self.settings.commit_timeout_ms / SECOND_MS)
        code = codes[tp]
        return _APPEND_ERRORS.get(code, ErrorCode(code)) if code else E.NONE

    # ---- metrics -------------------------------------------------------------------------

    def metric_families(self, prefix: str) -> list[Metric]:
        """Groups by state, rebalances, committed offsets (rate() gives commits/s)."""
        by_state: dict[GroupState, int] = {state: 0 for state in GroupState if state is not GroupState.DEAD}
        for shard in self.active_shards():
            for group in shard.groups.values():
                by_state[group.state] = by_state.get(group.state, 0) + 1
        p = prefix
        return [
            gauge(f"{p}groups", "Consumer groups this broker coordinates, by state.",
                  [({"state": state.value}, count) for state, count in by_state.items()]),
            counter(f"{p}group_rebalances_total", "Rebalances completed (new generations) here.",
                    unlabelled(self.rebalances_total)),
            counter(f"{p}offset_commits_total", f"Partition offsets committed to {GROUP_METADATA_TOPIC_NAME}.",
                    unlabelled(self.offset_commits_total)),
            gauge(f"{p}coordinator_partitions", f"Partitions of {GROUP_METADATA_TOPIC_NAME} served here.",
                  unlabelled(len(self.active_shards()))),
        ]

    # ---- loading -------------------------------------------------------------------------

    def _load(self, partition: int, leader_epoch: int) -> None:
        old = self.shards.get(partition)
        if old is not None:
            if old.leader_epoch == leader_epoch:
                return
            old.close(E.NOT_COORDINATOR)
        shard = Shard(partition, leader_epoch)
        self.shards[partition] = shard
        shard.load_task = asyncio.get_running_loop().create_task(
            self._replay(shard), name=f"load-{GROUP_METADATA_TOPIC_NAME}-{partition}")
        log.info("Loading groups of %s-%d (leader epoch %d)", GROUP_METADATA_TOPIC_NAME, partition, leader_epoch)

    async def _replay(self, shard: Shard) -> None:
        tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, shard.partition)
        started = self.now_ms()
        image, count = GroupsImage.EMPTY, 0
        try:
            partition = self.replicas.get_partition(tp)
            offset, end = partition.log.log_start_offset, partition.log.log_end_offset
            while offset < end:  # bounded: each pass reads at least one batch or stops
                read = self.replicas.read(tp, offset, LOAD_READ_BYTES, up_to_high_watermark=False,
                                          current_leader_epoch=shard.leader_epoch)
                data = read.records.read_bytes() if hasattr(read.records, "read_bytes") else bytes(read.records)
                if not data:
                    break
                for pos, header in iter_batches(data, allow_partial_tail=True):
                    offset = header.base_offset + header.last_offset_delta + 1
                    if header.is_control:
                        continue
                    for rec in decode_records(data, pos, header):
                        if rec.key is None:
                            continue
                        image = image.replay(decode_record(rec.key, rec.value), self.now_ms())
                        count += 1
                await asyncio.sleep(0)  # let requests of the loaded shards in between
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a bad partition must not stop the broker
            log.exception("Loading %s failed; it stays unavailable here until leadership changes", tp)
            return
        if self.shards.get(shard.partition) is not shard:
            return
        shard.activate(image)
        self._seen_topics = None  # its offsets of topics deleted meanwhile go at the next pass
        log.info("Loaded %d group(s) and offsets of %d group(s) from %s (leader epoch %d, %d records) in %d ms",
                 len(image.groups), len(image.offsets), tp, shard.leader_epoch, count,
                 self.now_ms() - started)

    # ---- timers --------------------------------------------------------------------------

    async def _timers(self) -> None:
        while True:  # until cancelled; one pass per TICK
            await asyncio.sleep(TICK)
            try:
                self._scan_leadership()
                self._forget_deleted_topics()
                self._expire(self.now_ms())
            except Exception:  # noqa: BLE001 - a bug in one pass must not stop every later one
                log.exception("Group coordinator timer pass failed")

    def _scan_leadership(self) -> None:
        count = self.partition_count()
        if count is None:
            return
        for partition in range(count):
            epoch = self._leader_epoch(partition)
            shard = self.shards.get(partition)
            if epoch is not None and (shard is None or shard.leader_epoch != epoch):
                self._load(partition, epoch)
            elif epoch is None and shard is not None:
                shard.close(E.NOT_COORDINATOR)
                del self.shards[partition]
                log.info("Unloaded groups of %s-%d: no longer its leader", GROUP_METADATA_TOPIC_NAME, partition)

    def _expire(self, now: int) -> None:
        retention_due = now - self._last_retention_check >= self.settings.retention_check_interval_ms
        if retention_due:
            self._last_retention_check = now
        for shard in self.active_shards():
            for group_id, group in list(shard.groups.items()):
                deadline = next_deadline(group)
                if 0 <= deadline <= now:
                    self._spawn(self.run(shard, group_id, expire(group, now, self.config)))
            if retention_due:
                for group_id in sorted(set(shard.groups) | set(shard.offsets)):
                    group = shard.groups.get(group_id) or ClassicGroup(group_id)
                    outcome = expire_offsets(group, shard.offsets.get(group_id), now, self.config)
                    if outcome.records:
                        self._spawn(self.run(shard, group_id, outcome))

    def _forget_deleted_topics(self) -> None:
        """Remove the offsets of topics deleted since the last pass: a name gone, or now another
        topic's (deleted and recreated in between). A shard loaded since rescans its offsets."""
        topics = self._image().topics
        if topics is self._seen_topics:
            return
        ids = {name: topic.topic_id for name, topic in topics.by_name.items()}
        deleted = {name for name, topic_id in self._seen_topic_ids.items() if ids.get(name) != topic_id}
        self._seen_topics, self._seen_topic_ids = topics, ids
        for shard in self.active_shards():
            for group_id, offsets in list(shard.offsets.items()):
                stale = {t for t, _ in offsets if t in deleted or t not in ids}
                if stale:
                    group = shard.groups.get(group_id) or ClassicGroup(group_id)
                    self._spawn(self.run(shard, group_id, delete_topic_offsets(group, offsets, stale, self.now_ms())))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
