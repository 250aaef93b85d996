"""An unfence's elections in bounded batches (`quorum.broker_control.continue_electing`).

A broker that was the last ISR member of many partitions (KIP-841 keeps it there, leaderless,
while it is fenced) is elected again when it unfences, as Kafka's handleBrokerUnfenced does.
At 100,000 such partitions that was one decision of 100,001 records, 30 s long, and the active
controller lost Raft leadership in it; the elections now go `MAX_PARTITIONS_PER_DECISION` per
decision, the unfence in the first, the runtime queueing the rest like the moves away.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from metadata.image import MetadataImage
from metadata.records import BrokerRegistrationChange, Partition, PartitionChange, RegisterBroker, Topic
from quorum.active_controller import ActiveController
from quorum.broker_control import (
    HeartbeatReply,
    brokers_with_elections_left,
    continue_electing,
    process_heartbeat,
)
from quorum.controller_result import MAX_PARTITIONS_PER_DECISION, ControllerResult, ElectFollowUp
from quorum.heartbeat_manager import BrokerHeartbeatManager
from tests.unit.test_controller_runtime import Clock, runtime_for
from tests.unit.test_fencing_batches import BATCH, cluster_with, keys, listeners, replay
from tests.unit.test_quorum_active_controller import ScriptedLog, until


def orphaned(partitions_per_topic: dict[str, int]) -> MetadataImage:
    """Brokers 1..3, broker 1 fenced and the last ISR member (leaderless) of every partition."""
    image = cluster_with(partitions_per_topic, leader=1)
    image = replay(image, *(PartitionChange(name.upper(), p, leader=-1, isr=(1,))
                            for name, count in partitions_per_topic.items() for p in range(count)))
    return replay(image, BrokerRegistrationChange(1, 1, fenced=True))


ORPHANED = orphaned({"c": 11, "a": 10, "b": 4})  # 25 leaderless partitions, walked a, b, c


def unfence(image: MetadataImage, max_partitions: int | None) -> ControllerResult[HeartbeatReply]:
    return process_heartbeat(image, broker_id=1, broker_epoch=1, metadata_offset=image.offset, want_fence=False,
                             want_shutdown=False, now_ms=0, heartbeats=BrokerHeartbeatManager(1000),
                             max_partitions=max_partitions)


def leaderless(image: MetadataImage) -> int:
    return sum(not p.has_leader for t in image.topics.by_id.values() for p in t.partitions.values())


def test_an_unfence_elects_in_batches_that_cover_every_partition_once_in_order() -> None:
    first = unfence(ORPHANED, BATCH)
    assert first.records[0] == BrokerRegistrationChange(1, 1, fenced=False)  # unfenced first: the rest see it active
    assert keys(first.records) == [("A", p) for p in range(10)]
    assert first.follow_up == ElectFollowUp(1, ("a", 9))
    batches, image, follow_up = [first.records], replay(ORPHANED, *first.records), first.follow_up
    while isinstance(follow_up, ElectFollowUp):  # bounded: each batch moves the walk past its partitions
        result = continue_electing(image, 1, after=follow_up.after, max_partitions=BATCH)
        assert result.splittable  # elections stand alone: plain chunks, no transaction
        batches.append(result.records)
        image = replay(image, *result.records)
        follow_up = result.follow_up
    assert [keys(b) for b in batches[1:]] == [[("B", p) for p in range(4)] + [("C", p) for p in range(6)],
                                              [("C", p) for p in range(6, 11)]]
    assert leaderless(image) == 0
    assert replay(ORPHANED, *unfence(ORPHANED, None).records) == image  # the same image, whatever the split


def test_elections_stop_when_the_broker_is_no_longer_active() -> None:
    first = unfence(ORPHANED, BATCH)
    fenced_again = replay(ORPHANED, *first.records, BrokerRegistrationChange(1, 1, fenced=True))
    assert continue_electing(fenced_again, 1, after=("a", 9), max_partitions=BATCH) == ControllerResult((), 0)


def test_a_new_active_controller_finds_the_elections_left() -> None:
    assert brokers_with_elections_left(ORPHANED) == []  # its only ISR member is fenced: nothing to elect
    half = replay(ORPHANED, *unfence(ORPHANED, BATCH).records)
    assert brokers_with_elections_left(half) == [1]
    assert brokers_with_elections_left(cluster_with({"a": 3})) == []  # every partition led


# --- the runtime -----------------------------------------------------------------------------------

PARTITIONS = 2 * MAX_PARTITIONS_PER_DECISION + MAX_PARTITIONS_PER_DECISION // 2  # three batches


@pytest.fixture
async def orphans() -> AsyncIterator[tuple[ScriptedLog, ActiveController]]:
    """Broker 4 registered and fenced, the last ISR member of PARTITIONS leaderless partitions;
    broker 5 (their other replica) unfenced."""
    log = ScriptedLog()
    controller = ActiveController(log)
    task = asyncio.create_task(controller.run())
    log.lead(term=1)
    await until(lambda: controller.is_active)
    for broker in (4, 5):
        await controller.append([RegisterBroker(broker, f"inc-{broker}", listeners(broker))], 1.0)
    await controller.append([BrokerRegistrationChange(5, log.image().broker(5).broker_epoch, fenced=False)], 1.0)
    await controller.append([Topic("big", "BIG"), *(Partition("BIG", p, (4, 5), (4,)) for p in range(PARTITIONS))],
                            5.0)
    try:
        yield log, controller
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def election_batches(log: ScriptedLog) -> list[int]:
    return [sum(isinstance(r, PartitionChange) for r in records) for _, records in log.appends
            if any(isinstance(r, PartitionChange) for r in records)]


async def test_the_runtime_elects_the_rest_in_bounded_decisions(orphans) -> None:
    log, controller = orphans
    runtime = runtime_for(log, controller, Clock())
    epoch = log.image().broker(4).broker_epoch

    def beat(image: MetadataImage) -> ControllerResult[HeartbeatReply]:
        return process_heartbeat(image, broker_id=4, broker_epoch=epoch, metadata_offset=image.offset,
                                 want_fence=False, want_shutdown=False, now_ms=0, heartbeats=runtime.sessions())

    reply, _ = await runtime.decide(beat)
    assert reply == HeartbeatReply(True, False, False)
    await until(lambda: leaderless(log.image()) == 0)
    assert election_batches(log) == [MAX_PARTITIONS_PER_DECISION, MAX_PARTITIONS_PER_DECISION,
                                     MAX_PARTITIONS_PER_DECISION // 2]
    assert all(p.leader == 4 for p in log.image().topic("big").partitions.values())
    await runtime.close()


async def test_a_new_active_controller_finishes_elections_cut_short(orphans) -> None:
    log, controller = orphans
    image = log.image()
    first = process_heartbeat(image, broker_id=4, broker_epoch=image.broker(4).broker_epoch,
                              metadata_offset=image.offset, want_fence=False, want_shutdown=False, now_ms=0,
                              heartbeats=BrokerHeartbeatManager(1000))
    await controller.append(first.records, 5.0)  # unfenced, the first batch elected, the rest cut short
    assert leaderless(log.image()) == PARTITIONS - MAX_PARTITIONS_PER_DECISION
    clock = Clock()
    runtime = runtime_for(log, controller, clock)
    await runtime.run_due(clock.now)  # the new epoch's sessions look for what was left, once
    await until(lambda: leaderless(log.image()) == 0)
    await runtime.close()
