"""Bounded broker decisions (issue 36): fencing, controlled shutdown and unregistration in batches.

The rules (`quorum.broker_control`) move at most `max_partitions` partitions per decision, the
registration change first, and name where the next batch starts (`follow_up`); the runtime
(`quorum.controller_runtime`) queues those batches one decision at a time and, once per active
epoch, finishes what a failover cut short.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest

from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Listener,
    Partition,
    PartitionChange,
    Record,
    RegisterBroker,
    Topic,
    UnregisterBroker,
)
from quorum import active_controller
from quorum.active_controller import ActiveController
from quorum.broker_control import (
    HeartbeatReply,
    brokers_left_behind,
    continue_leaving,
    fence_broker,
    leaving_after,
    process_heartbeat,
    register_broker,
    unregister_broker,
)
from quorum.controller_result import MAX_PARTITIONS_PER_DECISION, ControllerResult, LeaveFollowUp
from quorum.heartbeat_manager import BrokerHeartbeatManager
from tests.unit.test_controller_runtime import INTERVAL_MS, SESSION_MS, Clock, runtime_for, step
from tests.unit.test_quorum_active_controller import ScriptedLog, until

BATCH = 10


def replay(image: MetadataImage, *records: Record) -> MetadataImage:
    return apply(image, enumerate(records, start=image.offset + 1))


def listeners(b: int) -> tuple[Listener, ...]:
    return (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),)


def cluster_with(partitions_per_topic: dict[str, int], *, leader: int = 1) -> MetadataImage:
    """Brokers 1..3 (broker b has broker epoch b), unfenced; every partition RF=3 led by `leader`,
    the other two replicas in the ISR."""
    image = replay(EMPTY_IMAGE, BeginEpoch(1), *(RegisterBroker(b, f"inc-{b}", listeners(b)) for b in (1, 2, 3)))
    image = replay(image, *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2, 3)))
    others = tuple(b for b in (1, 2, 3) if b != leader)
    records: list[Record] = []
    for name, count in partitions_per_topic.items():
        records.append(Topic(name, name.upper()))
        replicas = (leader, *others)
        records.extend(Partition(name.upper(), p, replicas, replicas, leader=leader) for p in range(count))
    return replay(image, *records)


# 25 partitions of broker 1 over three topics, walked in name order: "a" (10), "b" (4), "c" (11)
BIG = cluster_with({"c": 11, "a": 10, "b": 4})
EXACT = cluster_with({"a": 20})  # exactly two batches


def keys(records: tuple[Record, ...] | list[Record]) -> list[tuple[str, int]]:
    return [(r.topic_id, r.partition_id) for r in records if isinstance(r, PartitionChange)]


def referencing(image: MetadataImage, broker_id: int) -> list[tuple[str, int]]:
    return sorted((topic.topic_id, p.partition_id) for topic in image.topics.by_id.values()
                  for p in topic.partitions.values() if broker_id in p.isr or p.leader == broker_id)


def left_every_isr(image: MetadataImage, broker_id: int) -> bool:
    return all(p.leader != broker_id and (broker_id not in p.isr or p.isr == (broker_id,))
               for topic in image.topics.by_id.values() for p in topic.partitions.values())


def run_batches(image: MetadataImage, first: ControllerResult[object],
                max_partitions: int = BATCH) -> tuple[MetadataImage, list[tuple[Record, ...]]]:
    """Replay the first batch and every follow-up batch after it, as the runtime does."""
    batches = [first.records]
    image = replay(image, *first.records)
    follow_up = first.follow_up
    while follow_up is not None:  # bounded: each batch moves the walk past its partitions
        result = continue_leaving(image, follow_up.broker_id, after=follow_up.after, max_partitions=max_partitions,
                                  leaders_only=follow_up.leaders_only, max_leaderships=max_partitions)
        assert result.records, "a follow-up always has partitions left"
        assert result.splittable, "moves away stand alone: plain chunks, no transaction"
        batches.append(result.records)
        image = replay(image, *result.records)
        follow_up = result.follow_up
    return image, batches


# --- the pure rules ----------------------------------------------------------------------------

@pytest.mark.parametrize(("image", "sizes"), [
    pytest.param(BIG, [1 + BATCH, BATCH, 5], id="25-partitions-in-batches-of-10"),
    pytest.param(EXACT, [1 + BATCH, BATCH], id="a-multiple-of-the-batch-ends-without-an-empty-batch"),
])
def test_fencing_in_batches_covers_every_partition_once_in_order(image: MetadataImage, sizes: list[int]) -> None:
    first = fence_broker(image, 1, reason="test", max_partitions=BATCH)
    assert first.records[0] == BrokerRegistrationChange(1, 1, fenced=True)  # the registration change first
    topic_id, partition_id = keys(first.records)[-1]
    assert first.follow_up == LeaveFollowUp(1, (topic_id.lower(), partition_id))  # resumes after it, by name
    after, batches = run_batches(image, first)
    assert [len(b) for b in batches] == sizes
    moved = [key for batch in batches for key in keys(batch)]
    assert moved == referencing(image, 1)  # each partition exactly once, in (topic, partition) order
    assert after.broker(1).fenced and left_every_isr(after, 1)
    unbatched = fence_broker(image, 1, reason="test", max_partitions=None)
    assert unbatched.follow_up is None and len(unbatched.records) == sum(sizes)
    assert replay(image, *unbatched.records) == after  # the same image, whatever the split


def test_nothing_to_move_is_no_batch() -> None:
    idle = cluster_with({"a": 3}, leader=2)
    idle = replay(idle, *(PartitionChange("A", p, isr=(2, 3)) for p in range(3)))  # broker 1 in no ISR
    result = fence_broker(idle, 1, reason="test", max_partitions=BATCH)
    assert list(result.records) == [BrokerRegistrationChange(1, 1, fenced=True)] and result.follow_up is None
    done, _ = run_batches(BIG, fence_broker(BIG, 1, reason="test", max_partitions=BATCH))
    assert continue_leaving(done, 1, after=None, max_partitions=BATCH) == ControllerResult((), 0, splittable=True)
    assert continue_leaving(BIG, 1, after=None) == ControllerResult((), 0)  # active again: it stays


def test_the_last_isr_member_is_no_leftover() -> None:
    """KIP-841 keeps a fenced broker that is the last ISR member: done, not left behind."""
    solo = replay(EMPTY_IMAGE, BeginEpoch(1), RegisterBroker(1, "inc-1", listeners(1)),
                  BrokerRegistrationChange(1, 1, fenced=False), Topic("s", "S"), Partition("S", 0, (1,), (1,), leader=1))
    fenced, _ = run_batches(solo, fence_broker(solo, 1, reason="test", max_partitions=BATCH))
    assert fenced.topic("s").partitions[0].isr == (1,) and brokers_left_behind(fenced) == []


def test_a_failover_after_the_first_batch_leaves_a_broker_behind_to_finish() -> None:
    first = fence_broker(BIG, 1, reason="test", max_partitions=BATCH)
    cut_short = replay(BIG, *first.records)  # the next active controller sees only this
    assert brokers_left_behind(cut_short) == [1]
    result = continue_leaving(cut_short, 1, after=None, max_partitions=BATCH)
    assert keys(result.records) == referencing(cut_short, 1)[:BATCH]
    done, _ = run_batches(cut_short, result)
    assert brokers_left_behind(done) == [] and left_every_isr(done, 1)


def test_unregistration_removes_the_registration_first_and_finishes_later() -> None:
    first = unregister_broker(BIG, 1, max_partitions=BATCH)
    assert first.records[0] == UnregisterBroker(1, 1) and len(first.records) == 1 + BATCH
    after, batches = run_batches(BIG, first)
    assert after.broker(1) is None and left_every_isr(after, 1) and brokers_left_behind(after) == []
    assert [len(b) for b in batches] == [1 + BATCH, BATCH, 5]


def test_a_controlled_shutdown_moves_the_leaderships_first_then_the_isr_seats() -> None:
    """Broker 1 leads 15 partitions of "b" and follows 12 of "a" (name order puts "a" first):
    its leaderships go in the first batches, whatever the order, its ISR seats after them."""
    image = cluster_with({"a": 12, "b": 15}, leader=1)
    image = replay(image, *(PartitionChange("A", p, leader=2, isr=(2, 1, 3)) for p in range(12)))
    heartbeats = BrokerHeartbeatManager(1000)
    for b in (2, 3):
        heartbeats.touch(b, 0, 10**6)  # every active broker replayed everything

    def beat(image: MetadataImage) -> ControllerResult[HeartbeatReply]:
        return process_heartbeat(image, broker_id=1, broker_epoch=1, metadata_offset=image.offset, want_fence=False,
                                 want_shutdown=True, now_ms=0, heartbeats=heartbeats, max_partitions=BATCH,
                                 max_leaderships=BATCH)

    first = beat(image)
    assert keys(first.records) == [("B", p) for p in range(10)]
    assert first.splittable and isinstance(first.records[0], BrokerRegistrationChange)  # the change first
    assert first.follow_up == LeaveFollowUp(1, ("b", 9), leaders_only=True)
    after, batches = run_batches(image, first)
    assert [keys(b) for b in batches[1:]] == [[("B", p) for p in range(10, 15)] + [("A", p) for p in range(5)],
                                              [("A", p) for p in range(5, 12)]]
    assert left_every_isr(after, 1)
    two = replay(image, *first.records, *batches[1])
    assert beat(two).response == HeartbeatReply(True, True, True)  # leads nothing: the seats left need no wait
    unbatched = process_heartbeat(image, broker_id=1, broker_epoch=1, metadata_offset=image.offset,
                                  want_fence=False, want_shutdown=True, now_ms=0,
                                  heartbeats=BrokerHeartbeatManager(1000), max_partitions=None,
                                  max_leaderships=None)
    assert replay(image, *unbatched.records) == after  # the same image, whatever the split


def test_a_batch_computed_ahead_is_the_one_computed_after_the_commit() -> None:
    """`leaving_after` (the runtime computes it while the batch before commits) returns what
    `continue_leaving` returns on the image that batch leaves: every step of a controlled
    shutdown (leaderships, then seats) and of a fence."""
    image = cluster_with({"a": 12, "b": 15}, leader=1)
    image = replay(image, *(PartitionChange("A", p, leader=2, isr=(2, 1, 3)) for p in range(12)))
    for first in (process_heartbeat(image, broker_id=1, broker_epoch=1, metadata_offset=image.offset,
                                    want_fence=False, want_shutdown=True, now_ms=0,
                                    heartbeats=BrokerHeartbeatManager(1000), max_partitions=4, max_leaderships=10),
                  fence_broker(image, 1, reason="test", max_partitions=4)):
        before, result, steps = image, first, 0
        while isinstance(result.follow_up, LeaveFollowUp):  # bounded: each batch moves the walk on
            follow_up = result.follow_up
            ahead = leaving_after(before, result.records, follow_up)
            before = replay(before, *result.records)
            result = continue_leaving(before, 1, after=follow_up.after, leaders_only=follow_up.leaders_only)
            assert ahead == result
            steps += 1
        assert steps > 0 and left_every_isr(replay(before, *result.records), 1)


def test_a_controlled_shutdown_moves_leaderships_in_batches_of_their_own_bound() -> None:
    """The batches the shutdown waits for hold `max_leaderships` leaderships (fewer Raft commit
    rounds per leadership); the ISR seats after them keep `max_partitions`, and a batch that
    ends the leaderships adds seats only while it is under `max_partitions`."""
    image = cluster_with({"a": 12, "b": 15}, leader=1)
    image = replay(image, *(PartitionChange("A", p, leader=2, isr=(2, 1, 3)) for p in range(12)))
    first = process_heartbeat(image, broker_id=1, broker_epoch=1, metadata_offset=image.offset, want_fence=False,
                              want_shutdown=True, now_ms=0, heartbeats=BrokerHeartbeatManager(1000),
                              max_partitions=4, max_leaderships=10)
    assert keys(first.records) == [("B", p) for p in range(10)]
    batches = [first.records]
    image = replay(image, *first.records)
    follow_up = first.follow_up
    while follow_up is not None:  # bounded: each batch moves the walk past its partitions
        result = continue_leaving(image, 1, after=follow_up.after, max_partitions=4,
                                  leaders_only=follow_up.leaders_only, max_leaderships=10)
        batches.append(result.records)
        image = replay(image, *result.records)
        follow_up = result.follow_up
    assert [keys(b) for b in batches[1:]] == [[("B", p) for p in range(10, 15)],  # 5 leaderships: no room left
                                              [("A", p) for p in range(4)], [("A", p) for p in range(4, 8)],
                                              [("A", p) for p in range(8, 12)]]
    assert left_every_isr(image, 1)


def test_leads_partitions_walks_from_where_the_first_leadership_was() -> None:
    """Asked on every heartbeat of a broker in controlled shutdown: a hint keeps the walk short,
    and once it leads nothing that answer stands until it leaves controlled shutdown."""
    from quorum.broker_control import _leads_partitions
    heartbeats = BrokerHeartbeatManager(1000)
    heartbeats.touch(1, 0, 0)
    assert _leads_partitions(BIG, 1, heartbeats) and heartbeats.leader_hint(1) == ("a", 0)
    moved = replay(BIG, *(PartitionChange("A", p, leader=2, isr=(2, 3)) for p in range(10)))
    assert _leads_partitions(moved, 1, heartbeats) and heartbeats.leader_hint(1) == ("b", 0)
    elsewhere = replay(cluster_with({"a": 2}, leader=2), PartitionChange("A", 1, leader=1))
    heartbeats.set_leader_hint(1, ("b", 0))  # a hint past its only leadership: one scan from the start finds it
    assert _leads_partitions(elsewhere, 1, heartbeats) and heartbeats.leader_hint(1) == ("a", 1)
    none = replay(elsewhere, PartitionChange("A", 1, leader=2))
    assert not _leads_partitions(none, 1, heartbeats) and heartbeats.led_nothing(1)
    assert not _leads_partitions(elsewhere, 1, heartbeats)  # kept while in controlled shutdown
    heartbeats.clear_controlled_shutdown_offset(1)  # out of it: looked for again
    assert _leads_partitions(elsewhere, 1, heartbeats)


def test_controlled_shutdown_in_batches_waits_for_the_last_one() -> None:
    heartbeats = BrokerHeartbeatManager(1000)

    def beat(image: MetadataImage) -> ControllerResult[HeartbeatReply]:
        return process_heartbeat(image, broker_id=1, broker_epoch=1, metadata_offset=image.offset, want_fence=False,
                                 want_shutdown=True, now_ms=0, heartbeats=heartbeats, max_partitions=BATCH,
                                 max_leaderships=BATCH)

    first = beat(BIG)
    assert first.records[0] == BrokerRegistrationChange(1, 1, in_controlled_shutdown=True)
    assert len(first.records) == 1 + BATCH and first.follow_up is not None
    image = replay(BIG, *first.records)
    for b in (2, 3):
        heartbeats.touch(b, 0, 10**6)  # every active broker replayed everything
    assert beat(image).response == HeartbeatReply(True, False, False)  # still leads partitions
    image, _ = run_batches(image, ControllerResult((), None, follow_up=first.follow_up))
    assert beat(image).response == HeartbeatReply(True, True, True)


# --- the runtime: batches as decisions of their own ---------------------------------------------

PARTITIONS = 2 * MAX_PARTITIONS_PER_DECISION + MAX_PARTITIONS_PER_DECISION // 2  # three batches


@pytest.fixture
async def big() -> AsyncIterator[tuple[ScriptedLog, ActiveController]]:
    """Brokers 4 and 5 unfenced; broker 4 leads PARTITIONS partitions with broker 5 in their ISR."""
    log = ScriptedLog()
    controller = ActiveController(log)
    task = asyncio.create_task(controller.run())
    log.lead(term=1)
    await until(lambda: controller.is_active)
    for broker in (4, 5):
        outcome = await controller.append([RegisterBroker(broker, f"inc-{broker}", listeners(broker))], 1.0)
        await controller.append([BrokerRegistrationChange(broker, outcome.first_offset, fenced=False)], 1.0)
    await controller.append([Topic("big", "BIG"), *(Partition("BIG", p, (4, 5), (4, 5), leader=4)
                                                    for p in range(PARTITIONS))], 5.0)
    try:
        yield log, controller
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def leads(log: ScriptedLog, broker_id: int) -> int:
    return sum(1 for p in log.image().topic("big").partitions.values() if p.leader == broker_id or broker_id in p.isr)


def partition_batches(log: ScriptedLog) -> list[int]:
    return [sum(isinstance(r, PartitionChange) for r in records) for _, records in log.appends
            if any(isinstance(r, PartitionChange) for r in records)]


async def test_session_expiry_fences_in_batches_with_other_decisions_between(big) -> None:
    log, controller = big
    clock = Clock()
    runtime = runtime_for(log, controller, clock)
    runtime.sessions()
    epoch5 = log.image().broker(5).broker_epoch
    log.gate = asyncio.Event()  # hold the first batch until broker 5's decision is queued behind it
    entered = log.entered

    async def broker_5_beats_until_4_is_fenced() -> None:
        while not log.image().broker(4).fenced:  # bounded: broker 4's session expires
            runtime.touch_on_arrival(5, epoch5, 0)
            await step(runtime, clock, clock.now + INTERVAL_MS)

    fencing = asyncio.create_task(broker_5_beats_until_4_is_fenced())
    await until(lambda: log.entered > entered)
    beat = asyncio.create_task(runtime.decide(
        lambda image: ControllerResult([BrokerRegistrationChange(5, epoch5, fenced=False)], None)))
    await asyncio.sleep(0.01)
    log.gate.set()
    await fencing
    await beat
    await until(lambda: leads(log, 4) == 0)
    first = next(i for i, (_, records) in enumerate(log.appends)
                 if BrokerRegistrationChange(4, 1, fenced=True) in records)
    assert log.appends[first][1][0] == BrokerRegistrationChange(4, 1, fenced=True)
    assert log.appends[first + 1][1] == (BrokerRegistrationChange(5, epoch5, fenced=False),)  # between batches
    assert partition_batches(log) == [MAX_PARTITIONS_PER_DECISION, MAX_PARTITIONS_PER_DECISION,
                                      MAX_PARTITIONS_PER_DECISION // 2]
    assert not log.image().broker(5).fenced
    await runtime.close()


async def test_a_new_active_controller_finishes_a_fence_cut_short(big) -> None:
    log, controller = big
    await controller.append([BrokerRegistrationChange(4, 1, fenced=True)], 1.0)  # fenced, partitions not moved
    assert leads(log, 4) == PARTITIONS
    clock = Clock()
    runtime = runtime_for(log, controller, clock)
    await runtime.run_due(clock.now)  # finish-left-behind runs once this epoch
    await until(lambda: leads(log, 4) == 0)
    assert all(p.leader == 5 for p in log.image().topic("big").partitions.values())
    appended = len(log.appends)
    await step(runtime, clock, clock.now + SESSION_MS - INTERVAL_MS)  # within broker 5's session
    assert len(log.appends) == appended  # once per epoch: no scan, no decision after that
    await runtime.close()


async def test_a_controlled_shutdown_offset_covers_the_last_batch(big) -> None:
    log, controller = big
    runtime = runtime_for(log, controller, Clock())
    sessions = runtime.sessions()

    def beat(image: MetadataImage) -> ControllerResult[HeartbeatReply]:
        return process_heartbeat(image, broker_id=4, broker_epoch=1, metadata_offset=image.offset,
                                 want_fence=False, want_shutdown=True, now_ms=0, heartbeats=sessions)

    reply, _ = await runtime.decide(beat)
    assert reply == HeartbeatReply(True, False, False)
    await until(lambda: leads(log, 4) == 0)
    # raised to the end of the last batch (in the decision loop, before the next decision runs)
    await until(lambda: sessions.controlled_shutdown_offset(4) == log.image().offset)
    sessions.touch(5, 0, log.image().offset)
    reply, _ = await runtime.decide(beat)
    assert reply == HeartbeatReply(True, True, True)
    await runtime.close()


async def test_a_controlled_shutdown_waits_for_its_leadership_batches_only(big) -> None:
    """Broker 4 also sits in the ISRs of a topic broker 5 leads: the batches moving those seats
    come after its leaderships and do not raise the offset its shutdown waits for."""
    log, controller = big
    await controller.append([Topic("seats", "SEATS"), *(Partition("SEATS", p, (5, 4), (5, 4), leader=5)
                                                        for p in range(MAX_PARTITIONS_PER_DECISION))], 5.0)
    runtime = runtime_for(log, controller, Clock())
    sessions = runtime.sessions()

    def beat(image: MetadataImage) -> ControllerResult[HeartbeatReply]:
        return process_heartbeat(image, broker_id=4, broker_epoch=1, metadata_offset=image.offset,
                                 want_fence=False, want_shutdown=True, now_ms=0, heartbeats=sessions)

    await runtime.decide(beat)
    await until(lambda: leads(log, 4) == 0 and all(4 not in p.isr for p in log.image().topic("seats").partitions.values()))
    ends, end = [], log.image().offset  # each append's last offset, from the last one back (one per record)
    for _, records in reversed(log.appends):
        ends.append((end, records))
        end -= len(records)
    led_until = max(end for end, records in ends
                    if any(isinstance(r, PartitionChange) and r.topic_id == "BIG" for r in records))
    moved = [r.topic_id for _, records in log.appends for r in records if isinstance(r, PartitionChange)]
    assert moved == ["BIG"] * PARTITIONS + ["SEATS"] * MAX_PARTITIONS_PER_DECISION  # leaderships first
    assert led_until <= sessions.controlled_shutdown_offset(4) < log.image().offset
    await runtime.close()


async def test_preferred_leader_balancing_moves_leaders_in_bounded_decisions_back_to_back(big) -> None:
    """Broker 5 is the preferred replica of PARTITIONS partitions broker 4 leads: the periodic
    balancing moves them MAX_PARTITIONS_PER_DECISION per decision, each next one due at once."""
    log, controller = big
    await controller.append([Topic("back", "BACK"), *(Partition("BACK", p, (5, 4), (5, 4), leader=4)
                                                      for p in range(PARTITIONS))], 5.0)
    clock = Clock()
    runtime = runtime_for(log, controller, clock, rebalance_s=1)  # within the brokers' sessions
    appended = len(log.appends)
    await step(runtime, clock, clock.now + 1000 + 5)  # one period: the first run, then the rest 1 ms apart
    await until(lambda: all(p.leader == 5 for p in log.image().topic("back").partitions.values()))
    moved = [sum(isinstance(r, PartitionChange) and r.topic_id == "BACK" for r in records)
             for _, records in log.appends[appended:]]
    assert [m for m in moved if m] == [MAX_PARTITIONS_PER_DECISION, MAX_PARTITIONS_PER_DECISION,
                                       MAX_PARTITIONS_PER_DECISION // 2]
    await runtime.close()


async def test_the_stall_probe_logs_a_blocked_event_loop(big, caplog: pytest.LogCaptureFixture) -> None:
    log, controller = big
    runtime = runtime_for(log, controller, Clock())
    task = asyncio.create_task(runtime.run())
    try:
        await asyncio.sleep(0.15)
        with caplog.at_level(logging.WARNING, logger="quorum.controller_runtime"):
            time.sleep(0.6)  # noqa: ASYNC251 - the point: the event loop runs nothing meanwhile
            await until(lambda: runtime.longest_stall_ms > 0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert 400 <= runtime.longest_stall_ms
    assert any("Controller 1 was stalled for" in r.getMessage() for r in caplog.records)


def test_a_broker_still_leaving_is_not_unfenced() -> None:
    heartbeats = BrokerHeartbeatManager(1000)
    fenced, _ = run_batches(BIG, fence_broker(BIG, 1, reason="test", max_partitions=BATCH))
    heartbeats.begin_leaving(1)

    def beat() -> ControllerResult[HeartbeatReply]:
        return process_heartbeat(fenced, broker_id=1, broker_epoch=1, metadata_offset=fenced.offset, want_fence=False,
                                 want_shutdown=False, now_ms=0, heartbeats=heartbeats)

    assert (beat().records, beat().response) == ((), HeartbeatReply(True, True, False))
    heartbeats.end_leaving(1)
    assert beat().records[0] == BrokerRegistrationChange(1, 1, fenced=False)


async def test_a_restarted_broker_stays_fenced_until_its_last_batch(big) -> None:
    """A new incarnation of broker 4 registers (its old partitions move away in batches) and
    heartbeats caught up at once: it is unfenced only after the last batch."""
    log, controller = big
    clock = Clock()
    runtime = runtime_for(log, controller, clock)
    sessions = runtime.sessions()
    _, registered = await runtime.decide(lambda image: register_broker(
        image, broker_id=4, incarnation_id="inc-4b", listeners=listeners(4), rack=None,
        now_ms=clock.now + SESSION_MS + 1, heartbeats=sessions))
    epoch = registered.first_offset
    log.gate = asyncio.Event()  # the second batch waits

    def beat(image: MetadataImage) -> ControllerResult[HeartbeatReply]:
        return process_heartbeat(image, broker_id=4, broker_epoch=epoch, metadata_offset=image.offset,
                                 want_fence=False, want_shutdown=False, now_ms=clock.now, heartbeats=sessions)

    early = asyncio.create_task(runtime.decide(beat))
    await asyncio.sleep(0.05)
    log.gate.set()
    reply, _ = await early
    assert reply.is_fenced  # caught up, but batches of its partitions are still to come
    await until(lambda: leads(log, 4) == 0 and not sessions.is_leaving(4))
    reply, _ = await runtime.decide(beat)
    assert not reply.is_fenced
    await runtime.close()


async def test_each_next_batch_is_computed_ahead_while_the_one_before_commits(
        big, caplog: pytest.LogCaptureFixture) -> None:
    log, controller = big
    runtime = runtime_for(log, controller, Clock())
    runtime.sessions()  # this epoch's, begun (as by the first heartbeat)
    with caplog.at_level(logging.DEBUG, logger="quorum.controller_runtime"):
        await runtime.decide(lambda image: fence_broker(image, 4, reason="test"))
        await until(lambda: leads(log, 4) == 0 and not runtime.sessions().is_leaving(4))
    assert partition_batches(log) == [MAX_PARTITIONS_PER_DECISION, MAX_PARTITIONS_PER_DECISION,
                                      MAX_PARTITIONS_PER_DECISION // 2]
    ahead = [r.getMessage() for r in caplog.records if "was computed ahead" in r.getMessage()]
    assert len(ahead) == 2 and all(m.startswith("The batch of broker 4's moves after ('big', ") for m in ahead)
    await runtime.close()


async def test_a_batch_computed_ahead_reaches_the_log_encoded(big, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker thread that computes the next batch ahead also cuts its records into chunks:
    the event loop encodes only the first batch (c8ad164 encoded every one there, 0.1-0.2 s
    between two batches of 5,000 leaderships, with nothing in the Raft pipeline meanwhile)."""
    log, controller = big
    on_the_loop: list[int] = []
    split = active_controller.split_records

    def counted(records, **form):  # type: ignore[no-untyped-def]
        on_the_loop.append(len(records))
        return split(records, **form)

    monkeypatch.setattr(active_controller, "split_records", counted)
    runtime = runtime_for(log, controller, Clock())
    runtime.sessions()
    await runtime.decide(lambda image: fence_broker(image, 4, reason="test"))
    await until(lambda: leads(log, 4) == 0 and not runtime.sessions().is_leaving(4))
    assert partition_batches(log) == [MAX_PARTITIONS_PER_DECISION, MAX_PARTITIONS_PER_DECISION,
                                      MAX_PARTITIONS_PER_DECISION // 2]
    assert on_the_loop == [MAX_PARTITIONS_PER_DECISION + 1]  # the fence's own batch (registration change first)
    await runtime.close()
