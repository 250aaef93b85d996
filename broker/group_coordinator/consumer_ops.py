"""The group coordinator's KIP-848 part: consumer group rules on the coordinator runtime.

`GroupCoordinator` (runtime.py) mixes this in. A rule (groups/consumer_heartbeat.py) runs on
the partition's current image and returns records and an answer; the members' deadlines it
sets are memory (`GroupsImage.with_consumer_timers`), and one runtime timer per group, at the
next of them, fences those past it (`groups.consumer_heartbeat.expire`). After a load every
member gets a full session from then, as Kafka's onLoaded schedules them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.coordinator.errors import CoordinatorError, client_error
from broker.coordinator.runtime import CoordinatorResult
from common.errors import ErrorCode
from groups.consumer_group import ConsumerGroup, ConsumerTimers
from groups.consumer_heartbeat import HeartbeatOutcome, expire as expire_consumers
from groups.image import GroupsImage
from groups.partitioner import GROUP_METADATA_TOPIC_NAME

if TYPE_CHECKING:
    from broker.coordinator.runtime import CoordinatorRuntime
    from broker.group_coordinator.runtime import CoordinatorSettings, GroupShard

log = logging.getLogger("broker.group_coordinator.runtime")  # one logger for the coordinator's lines
E = ErrorCode
Memory = Callable[[GroupsImage], GroupsImage]


class ConsumerGroupOps:
    """KIP-848 groups on the runtime; needs the coordinator's runtime, shard, settings and clock."""

    runtime: CoordinatorRuntime[GroupsImage]
    shard: GroupShard
    settings: CoordinatorSettings
    now_ms: Callable[[], int]

    async def run_consumer(self, partition: int, group_id: str,
                           rule: Callable[[GroupsImage], HeartbeatOutcome]) -> tuple[HeartbeatOutcome, ErrorCode]:
        """A consumer group rule on the partition's current image: its outcome and, once its
        records committed (or failed), the error. The members' deadlines it sets are memory
        (`GroupsImage.with_consumer_timers`); the group's timer moves to the next of them."""
        decided: list[HeartbeatOutcome] = []
        done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def operation(state: GroupsImage) -> CoordinatorResult[GroupsImage, HeartbeatOutcome]:
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
            if not done.done():
                done.set_result(error)

        self.runtime.submit_settled(partition, operation, settle)
        return decided[0], await done

    def _consumer_memory(self, partition: int, group_id: str, state: GroupsImage,
                         outcome: HeartbeatOutcome) -> Memory:
        before = state.consumer_groups.get(group_id)

        def apply(replayed: GroupsImage) -> GroupsImage:
            image = replayed.with_consumer_timers(group_id, outcome.timers)
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
            outcome = expire_consumers(group, state.consumer_timers.get(group_id, {}), max(self.now_ms(), deadline))
            return CoordinatorResult(self.shard.encode(outcome.records), outcome,
                                     memory=self._consumer_memory(partition, group_id, state, outcome))

        self.runtime.schedule_timer(partition, key, delay_ms, operation, lambda written: None)

    def consumer_group(self, partition: int, group_id: str) -> ConsumerGroup | None:
        return self.runtime.current(partition).consumer_groups.get(group_id)

    def _arm_consumer_sessions(self, partition: int, image: GroupsImage) -> None:
        """After a load every consumer-protocol member gets a full session from now (Kafka's
        onLoaded schedules each member's session timeout): one that died meanwhile is fenced
        then, the others' heartbeats reach the new coordinator long before."""
        deadline = self.now_ms() + self.settings.consumer.session_timeout_ms
        changes = {group_id: {m: ConsumerTimers(deadline) for m in group.members}
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

