"""The group coordinator's KIP-848 part: consumer group rules on the coordinator runtime.

`GroupCoordinator` (runtime.py) mixes this in. A rule (groups/consumer_heartbeat.py) runs on
the partition's current image and returns records and an answer; the members' deadlines it
sets are memory (`GroupsImage.with_consumer_timers`), and one runtime timer per group, at the
next of them, fences those past it (`groups.migration.expire_members`). After a load every
member gets a full session from then, as Kafka's onLoaded schedules them.

KIP-848's online migration runs here too: a classic member's JoinGroup, SyncGroup, Heartbeat
and LeaveGroup to a consumer group with members are consumer group rules
(`groups/migration_members.py`); an upgrade answers the classic group's parked JoinGroups and
SyncGroups with REBALANCE_IN_PROGRESS (they rejoin the consumer group), and a downgrade hands
the classic group it made to the classic side (`GroupsImage.with_group`, its expiry timer).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from broker.coordinator.errors import CoordinatorError, client_error
from broker.coordinator.runtime import CoordinatorResult
from common.errors import ErrorCode
from groups.assignors import NO_RACKS
from groups.consumer_group import ConsumerGroup, ConsumerTimers
from groups.consumer_heartbeat import HeartbeatOutcome, Topics
from groups.group import ClassicGroup, GroupConfig
from groups.image import GroupsImage
from groups.join import JoinRequest, SyncRequest
from groups.membership import LeaveResult, LeavingMember
from groups.migration import expire_members
from groups.migration_protocol import MalformedConsumerProtocol, decode_subscription
from groups.migration_members import ClassicMemberOutcome, classic_heartbeat, classic_join, classic_leave, classic_sync
from groups.outcome import JoinResult, SyncResult
from groups.partitioner import GROUP_METADATA_TOPIC_NAME
from groups.records import GroupMetadataKey
from metadata.image import MetadataImage

if TYPE_CHECKING:
    from broker.coordinator.runtime import CoordinatorRuntime
    from broker.group_coordinator.runtime import CoordinatorSettings, GroupShard
    from broker.group_coordinator.shards import Parked

log = logging.getLogger("broker.group_coordinator.runtime")  # one logger for the coordinator's lines
E = ErrorCode
Memory = Callable[[GroupsImage], GroupsImage]
O = TypeVar("O", HeartbeatOutcome, ClassicMemberOutcome)


def topics_of(image: MetadataImage) -> Topics:
    """Every topic as the consumer group rules read them: name -> (topic id, partition count)."""
    return {name: (t.topic_id, len(t.partitions)) for name, t in image.topics.by_name.items()}


def partition_racks(image: MetadataImage) -> dict[tuple[str, int], frozenset[str]]:
    """(topic id, partition) -> the broker.rack of its replicas (racked brokers only): the
    uniform assignor's rack-aware input, read only when a member names its rack."""
    racks = {b.broker_id: b.rack for b in image.cluster.brokers.values() if b.rack}
    if not racks:
        return {}
    return {(t.topic_id, p): frozenset(racks[r] for r in part.replicas if r in racks)
            for t in image.topics.by_id.values() for p, part in t.partitions.items()}


class ConsumerGroupOps:
    """KIP-848 groups on the runtime; needs the coordinator's runtime, shard, settings and clock."""

    runtime: CoordinatorRuntime[GroupsImage]
    shard: GroupShard
    settings: CoordinatorSettings
    config: GroupConfig
    parked: dict[int, Parked]
    now_ms: Callable[[], int]
    image: Callable[[], MetadataImage]
    _schedule_expiry: Callable[[int, str, ClassicGroup | None], None]

    async def run_consumer(self, partition: int, group_id: str,
                           rule: Callable[[GroupsImage], O]) -> tuple[O, ErrorCode]:
        """A consumer group rule on the partition's current image: its outcome and, once its
        records committed (or failed), the error. The members' deadlines it sets are memory
        (`GroupsImage.with_consumer_timers`); the group's timer moves to the next of them."""
        decided: list[O] = []
        done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def operation(state: GroupsImage) -> CoordinatorResult[GroupsImage, O]:
            outcome = rule(state)
            decided.append(outcome)
            return CoordinatorResult(self.shard.encode(outcome.records), outcome,
                                     memory=self._consumer_memory(partition, group_id, state, outcome))

        def settle(answer: Any, failure: CoordinatorError | None) -> None:
            error = E.NONE if failure is None else client_error(failure.code)
            if error is not E.NONE:
                log.warning("Consumer group %s: writing %d record(s) to %s-%d failed: %s", group_id,
                            len(decided[0].records) if decided else 0, GROUP_METADATA_TOPIC_NAME, partition,
                            error.name)
            elif decided and _upgrades(decided[0], group_id):
                self._rejoin_parked(partition, group_id)
            if not done.done():
                done.set_result(error)

        self.runtime.submit_settled(partition, operation, settle)
        return decided[0], await done

    def _rejoin_parked(self, partition: int, group_id: str) -> None:
        """Kafka's convertToConsumerGroup: the classic group's waiting JoinGroups and SyncGroups
        learn of the new rebalance (REBALANCE_IN_PROGRESS) and rejoin, now the consumer group."""
        parked = self.parked.get(partition)
        if parked is None:
            return
        for g, member_id in [key for key in parked.joins if key[0] == group_id]:
            parked.answer_join(g, member_id, JoinResult(E.REBALANCE_IN_PROGRESS, member_id=member_id))
        for g, member_id in [key for key in parked.syncs if key[0] == group_id]:
            parked.answer_sync(g, member_id, SyncResult(E.REBALANCE_IN_PROGRESS))

    def _consumer_memory(self, partition: int, group_id: str, state: GroupsImage,
                         outcome: HeartbeatOutcome | ClassicMemberOutcome) -> Memory:
        before = state.consumer_groups.get(group_id)

        def apply(replayed: GroupsImage) -> GroupsImage:
            image = replayed.with_consumer_timers(group_id, outcome.timers)
            if outcome.classic_group is not None:  # a downgrade: the classic group's memory state
                image = image.with_group(group_id, outcome.classic_group)
                self._schedule_expiry(partition, group_id, outcome.classic_group)
            after = image.consumer_groups.get(group_id)
            if outcome.records and (before is None or after is None or before.state is not after.state
                                    or before.group_epoch != after.group_epoch):
                log.info("Consumer group %s (%s-%d) %s -> %s, group epoch %d, assignment epoch %d: %s", group_id,
                         GROUP_METADATA_TOPIC_NAME, partition, "absent" if before is None else before.state.value,
                         "absent" if after is None else after.state.value, -1 if after is None else after.group_epoch,
                         -1 if after is None else after.assignment_epoch, outcome.reason or "-")
            self._schedule_consumer_expiry(partition, group_id, image)
            return image
        return apply

    def _schedule_consumer_expiry(self, partition: int, group_id: str, image: GroupsImage) -> None:
        """The group's timer at its members' next deadline (session, or rebalance timeout while
        revoking); when it comes, `groups.consumer_heartbeat.expire` fences those past it."""
        timers = image.consumer_timers.get(group_id, {})
        deadlines = [d for t in timers.values() for d in (t.session_deadline_ms, t.rebalance_deadline_ms) if d >= 0]
        key = ("consumer-expire", group_id)
        if not deadlines:
            self.runtime.cancel_timer(partition, key)
            return
        deadline = min(deadlines)
        delay_ms = max(0, deadline - self.now_ms())

        def operation(state: GroupsImage, _timer_ms: int) -> CoordinatorResult[GroupsImage, Any]:
            group = state.consumer_groups.get(group_id)
            if group is None:
                return CoordinatorResult()
            outcome = expire_members(group, state.consumer_timers.get(group_id, {}), max(self.now_ms(), deadline),
                                     topics=topics_of(self.image()), policy=self.settings.consumer.migration_policy,
                                     classic_config=self.config)
            return CoordinatorResult(self.shard.encode(outcome.records), outcome,
                                     memory=self._consumer_memory(partition, group_id, state, outcome))

        self.runtime.schedule_timer(partition, key, delay_ms, operation, lambda written: None)

    def consumer_group(self, partition: int, group_id: str) -> ConsumerGroup | None:
        return self.runtime.current(partition).consumer_groups.get(group_id)

    def _arm_consumer_sessions(self, partition: int, image: GroupsImage) -> None:
        """After a load every consumer-protocol member gets a full session from now (Kafka's
        onLoaded schedules each member's session timeout): one that died meanwhile is fenced
        then, the others' heartbeats reach the new coordinator long before."""
        now_ms, session_ms = self.now_ms(), self.settings.consumer.session_timeout_ms
        # a classic member of a consumer group keeps its JoinGroup's session timeout
        changes = {group_id: {m: ConsumerTimers(now_ms + (v.classic.session_timeout_ms if v.classic else session_ms))
                              for m, v in group.members.items()}
                   for group_id, group in sorted(image.consumer_groups.items()) if group.members}

        def operation(state: GroupsImage) -> CoordinatorResult[GroupsImage, Any]:
            def memory(current: GroupsImage) -> GroupsImage:
                for group_id, timers in changes.items():
                    current = current.with_consumer_timers(group_id, timers)
                    self._schedule_consumer_expiry(partition, group_id, current)
                return current
            return CoordinatorResult(memory=memory)

        try:
            self.runtime.submit_settled(partition, operation, lambda answer, failure: None)
        except CoordinatorError as e:  # moved away again already: the next load arms them
            log.warning("Sessions of %d consumer group(s) on %s-%d not armed: %s", len(changes),
                        GROUP_METADATA_TOPIC_NAME, partition, e)


    # ---- classic members of a consumer group (KIP-848's online migration) ----------------

    async def classic_member_join(self, partition: int, req: JoinRequest, new_member_id: str) -> JoinResult:
        """JoinGroup to a consumer group with members: answered at once, once its records commit."""
        image, now_ms = self.image(), self.now_ms()
        topics = topics_of(image)
        racks = partition_racks(image) if _subscribes_racked(req) else NO_RACKS

        def rule(state: GroupsImage) -> ClassicMemberOutcome:
            group = state.consumer_groups.get(req.group_id)
            if group is None or not group.members:  # changed type meanwhile: the member joins again
                return ClassicMemberOutcome((), JoinResult(E.REBALANCE_IN_PROGRESS, member_id=req.member_id))
            return classic_join(group, req, new_member_id=new_member_id, topics=topics,
                                config=self.settings.consumer, classic_config=self.config, now_ms=now_ms,
                                partition_racks=racks)
        outcome, error = await self.run_consumer(partition, req.group_id, rule)
        answer = outcome.response
        assert isinstance(answer, JoinResult)
        return answer if error is E.NONE else JoinResult(error, member_id=answer.member_id)

    async def classic_member_sync(self, partition: int, req: SyncRequest) -> SyncResult:
        topics, now_ms = topics_of(self.image()), self.now_ms()

        def rule(state: GroupsImage) -> ClassicMemberOutcome:
            group = state.consumer_groups.get(req.group_id)
            if group is None:
                return ClassicMemberOutcome((), SyncResult(E.UNKNOWN_MEMBER_ID))
            return classic_sync(group, req, topics=topics, now_ms=now_ms,
                                timer=state.consumer_timers.get(req.group_id, {}).get(req.member_id))
        outcome, error = await self.run_consumer(partition, req.group_id, rule)
        answer = outcome.response
        assert isinstance(answer, SyncResult)
        return answer if error is E.NONE else SyncResult(error)

    async def classic_member_heartbeat(self, partition: int, group_id: str, member_id: str,
                                       instance_id: str | None, generation_id: int) -> ErrorCode:
        now_ms = self.now_ms()

        def rule(state: GroupsImage) -> ClassicMemberOutcome:
            group = state.consumer_groups.get(group_id)
            if group is None:
                return ClassicMemberOutcome((), E.UNKNOWN_MEMBER_ID)
            return classic_heartbeat(group, member_id, instance_id, generation_id, now_ms=now_ms,
                                     timer=state.consumer_timers.get(group_id, {}).get(member_id))
        outcome, error = await self.run_consumer(partition, group_id, rule)
        answer = outcome.response
        assert isinstance(answer, ErrorCode)
        return answer if error is E.NONE else error

    async def classic_member_leave(self, partition: int, group_id: str,
                                   leaving: tuple[LeavingMember, ...]) -> LeaveResult:
        topics = topics_of(self.image())

        def rule(state: GroupsImage) -> ClassicMemberOutcome:
            group = state.consumer_groups.get(group_id)
            if group is None:
                return ClassicMemberOutcome((), LeaveResult(E.NONE, tuple((m, E.UNKNOWN_MEMBER_ID) for m in leaving)))
            return classic_leave(group, leaving, topics=topics)
        outcome, error = await self.run_consumer(partition, group_id, rule)
        answer = outcome.response
        assert isinstance(answer, LeaveResult)
        return answer if error is E.NONE else LeaveResult(error)


def _upgrades(outcome: HeartbeatOutcome | ClassicMemberOutcome, group_id: str) -> bool:
    """The outcome tombstones the classic group of that id (an upgrade, or an empty one replaced)."""
    return any(isinstance(r.key, GroupMetadataKey) and r.key.group == group_id and r.value is None
               for r in outcome.records)


def _subscribes_racked(req: JoinRequest) -> bool:
    """Whether the member's subscription names a rack (rack-aware assignment reads the image's racks)."""
    try:
        return bool(req.protocols) and decode_subscription(req.protocols[0][1]).rack_id is not None
    except MalformedConsumerProtocol:
        return False
