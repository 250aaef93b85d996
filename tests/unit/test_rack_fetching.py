"""broker/replica_selector.py and KIP-392's Fetch path (broker/handlers/fetch_partitions.py,
broker/replica_reads.read_as_follower): which replica a rack-aware consumer is sent to, and
what a follower serves it, over a real ReplicaManager and log directory."""

from __future__ import annotations

import asyncio

import pytest

from broker.handlers.context import BrokerContext
from broker.handlers.fetch_partitions import read_partition, size_of
from broker.replica_manager import ReplicaManager
from broker.replica_selector import (
    LEADER_SELECTOR,
    RACK_AWARE_SELECTOR,
    LeaderSelector,
    RackAwareReplicaSelector,
    ReplicaSelectorError,
    ReplicaView,
    replica_selector,
)
from common.errors import ErrorCode
from common.protocol import fetch
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, Partition, RegisterBroker, Topic
from tests.handler_context import replica_context
from tests.log_helpers import batch

# ---- the selectors, as tables --------------------------------------------------------------

LEADER = ReplicaView(1, "a", 100, 0)
B_FRESH = ReplicaView(2, "b", 100, 10)
B_BEHIND = ReplicaView(3, "b", 90, 0)
B_STALE = ReplicaView(4, "b", 100, 500)
C_ONE = ReplicaView(5, "c", 80, 0)
NO_RACK = ReplicaView(6, None, 100, 0)

# (client rack, candidates besides the leader, the replica chosen)
RACK_AWARE = [
    pytest.param("b", [B_BEHIND, B_FRESH], B_FRESH, id="most-caught-up-of-the-rack"),
    pytest.param("b", [B_STALE, B_FRESH], B_FRESH, id="tie-on-offset-most-recently-caught-up"),
    pytest.param("c", [B_FRESH, C_ONE], C_ONE, id="the-only-replica-of-the-rack-even-if-behind"),
    pytest.param("a", [B_FRESH], LEADER, id="leader-in-the-clients-rack"),
    pytest.param("z", [B_FRESH, C_ONE], LEADER, id="no-replica-in-the-rack-leader"),
    pytest.param("", [B_FRESH], LEADER, id="no-client-rack-leader"),
    pytest.param("b", [NO_RACK], LEADER, id="an-unracked-replica-is-in-no-rack"),
]


@pytest.mark.parametrize(("rack", "others", "chosen"), RACK_AWARE)
def test_rack_aware_selector(rack: str, others: list[ReplicaView], chosen: ReplicaView) -> None:
    assert RackAwareReplicaSelector().select(rack, [*others, LEADER], LEADER) == chosen


def test_leader_selector_always_answers_the_leader() -> None:
    assert LeaderSelector().select("b", [B_FRESH, LEADER], LEADER) == LEADER


@pytest.mark.parametrize(("name", "kind"), [(None, type(None)), ("", type(None)), (LEADER_SELECTOR, LeaderSelector),
                                            (RACK_AWARE_SELECTOR, RackAwareReplicaSelector)])
def test_replica_selector_class(name: str | None, kind: type) -> None:
    assert isinstance(replica_selector(name), kind)


def test_an_unknown_selector_class_names_the_setting() -> None:
    with pytest.raises(ReplicaSelectorError, match="replica.selector.class 'com.example.Mine'"):
        replica_selector("com.example.Mine")


# ---- the Fetch path: broker 1 leads t-0 (replicas 1, 2, 3) and follows u-0 (led by 2) --------

RACKS = {1: "a", 2: "b", 3: "c"}
T0, U0 = TopicPartition("t", 0), TopicPartition("u", 0)


def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


IMAGE = replay(
    EMPTY_IMAGE, BeginEpoch(1),
    *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),), rack) for b, rack in RACKS.items()),
    *(BrokerRegistrationChange(b, b, fenced=False) for b in RACKS),
    Topic("t", "T"), Partition("T", 0, (1, 2, 3), (1, 2, 3), leader=1, leader_epoch=4),
    Topic("u", "U"), Partition("U", 0, (2, 1), (2, 1), leader=2, leader_epoch=7),
)


@pytest.fixture
def ctx(tmp_path):
    with replica_context(tmp_path, IMAGE) as context:
        context.replica_selector = RackAwareReplicaSelector()
        yield context


def consumer_fetch(tp: TopicPartition, offset: int, *, rack: str = "", epoch: int = -1,
                   isolation: int = 0) -> tuple[fetch.FetchRequest, fetch.FetchPartition]:
    part = fetch.FetchPartition(tp.partition, offset, -1, 1 << 20, epoch)
    topic = fetch.FetchTopic(tp.topic, (part,))
    return fetch.FetchRequest(-1, 0, 1, 1 << 20, isolation, (topic,), rack_id=rack), part


def answer(ctx: BrokerContext, tp: TopicPartition, offset: int, **kw) -> fetch.FetchPartitionResponse:
    req, part = consumer_fetch(tp, offset, **kw)
    return read_partition(ctx, tp, part, req, 1 << 20, first=True, follower_reads=True)[0]


def replicate(ctx: BrokerContext, records: int, *, followers: dict[int, int]) -> None:
    """`records` appended at the leader; each follower fetched up to its offset."""
    ctx.replicas.append(T0, batch(records), acks=1)
    for broker, offset in followers.items():
        ctx.replicas.read(T0, offset, 1 << 20, replica_id=broker)


def test_a_consumer_in_a_followers_rack_is_sent_there_without_records(ctx) -> None:
    replicate(ctx, 3, followers={2: 3, 3: 3})
    got = answer(ctx, T0, 0, rack="b")
    assert (got.error_code, got.preferred_read_replica, got.records, got.high_watermark) == (0, 2, b"", 3)
    assert ctx.follower_fetches.preferred_replica_answers == 1


def test_the_leaders_rack_no_rack_or_no_selector_read_at_the_leader(ctx) -> None:
    replicate(ctx, 3, followers={2: 3, 3: 3})
    for rack in ("a", "", "elsewhere"):
        got = answer(ctx, T0, 0, rack=rack)
        assert got.preferred_read_replica == -1 and size_of(got) > 0, rack
    ctx.replica_selector = None
    assert answer(ctx, T0, 0, rack="b").preferred_read_replica == -1


def test_a_follower_out_of_the_isr_or_without_the_offset_is_not_chosen(ctx) -> None:
    replicate(ctx, 3, followers={2: 1, 3: 3})  # 2 fetched only up to offset 1
    assert answer(ctx, T0, 2, rack="b").preferred_read_replica == -1  # 2 lacks offset 2
    assert answer(ctx, T0, 1, rack="b").preferred_read_replica == 2
    ctx.replicas.partitions[T0].isr = (1, 3)  # 2 left the ISR: re-selected, the leader here
    assert answer(ctx, T0, 0, rack="b").preferred_read_replica == -1
    assert answer(ctx, T0, 0, rack="c").preferred_read_replica == 3


def test_a_stale_leader_epoch_at_the_leader_is_still_fenced(ctx) -> None:
    replicate(ctx, 1, followers={2: 1, 3: 1})
    assert answer(ctx, T0, 0, rack="b", epoch=3).error_code == ErrorCode.FENCED_LEADER_EPOCH


def follow(ctx: BrokerContext, records: int, leader_high_watermark: int) -> None:
    """`records` (none: only the leader's HW) appended at follower 1 of u-0 as its fetcher would."""
    partition = ctx.replicas.partitions[U0]
    ctx.replicas.append_as_follower(partition, memoryview(batch(records) if records else b""), leader_high_watermark)


def test_a_follower_serves_consumers_up_to_its_high_watermark(ctx) -> None:
    follow(ctx, 3, leader_high_watermark=0)
    # held but not yet known committed here: nothing, and no error (the consumer waits)
    early = answer(ctx, U0, 0, rack="a", epoch=7)
    assert (early.error_code, early.high_watermark, size_of(early)) == (0, 0, 0)
    follow(ctx, 0, leader_high_watermark=3)
    got = answer(ctx, U0, 0, rack="a", epoch=7)
    assert (got.error_code, got.high_watermark, got.preferred_read_replica) == (0, 3, -1)
    assert size_of(got) > 0
    assert ctx.follower_fetches.follower_reads == 2
    assert ctx.follower_fetches.follower_read_bytes == size_of(got)


# (offset, leader epoch the consumer sends, error code)
FOLLOWER_ERRORS = [
    pytest.param(9, 7, ErrorCode.OFFSET_OUT_OF_RANGE, id="past-the-log-end-back-to-the-leader"),
    pytest.param(9, -1, ErrorCode.NONE, id="past-the-log-end-without-epoch-empty"),
    pytest.param(0, 6, ErrorCode.FENCED_LEADER_EPOCH, id="older-epoch"),
    pytest.param(0, 8, ErrorCode.UNKNOWN_LEADER_EPOCH, id="newer-epoch"),
]


@pytest.mark.parametrize(("offset", "epoch", "code"), FOLLOWER_ERRORS)
def test_follower_read_errors(ctx, offset: int, epoch: int, code: ErrorCode) -> None:
    follow(ctx, 5, leader_high_watermark=5)
    got = answer(ctx, U0, offset, epoch=epoch)
    assert got.error_code == code and (code or size_of(got) == 0)


def test_before_fetch_v11_a_follower_refuses_consumers(ctx) -> None:
    follow(ctx, 2, leader_high_watermark=2)
    req, part = consumer_fetch(U0, 0)
    got = read_partition(ctx, U0, part, req, 1 << 20, first=True, follower_reads=False)[0]
    assert got.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_read_committed_at_a_follower(ctx) -> None:
    follow(ctx, 4, leader_high_watermark=4)
    got = answer(ctx, U0, 0, epoch=7, isolation=1)
    assert got.error_code == 0 and size_of(got) > 0 and got.aborted_transactions == ()


async def test_a_consumer_waiting_at_a_follower_is_woken_when_its_high_watermark_moves(ctx) -> None:
    follow(ctx, 3, leader_high_watermark=0)
    waiting = asyncio.create_task(ctx.replicas.wait_for_data([U0], 5.0))
    await asyncio.sleep(0)
    follow(ctx, 0, leader_high_watermark=3)
    assert await asyncio.wait_for(waiting, 1.0) is True  # woken, not timed out
