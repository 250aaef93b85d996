"""quorum/replica_failure.py: the records that take a broker's failed replicas out of their ISR
and leadership, as a table; and that replaying them is what the image then says."""

from __future__ import annotations

import pytest

from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import (
    NO_LEADER,
    BeginEpoch,
    BrokerRegistrationChange,
    Config,
    ConfigResourceType,
    Listener,
    OfflineReplicas,
    Partition,
    PartitionChange,
    RegisterBroker,
    Topic,
)
from quorum.replica_failure import failed_isr_members, handle_offline_replicas, news


def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


def listeners(b):
    return (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),)


# Offsets 1..3 register brokers 1..3, so broker b has broker_epoch b.
CLUSTER = replay(EMPTY_IMAGE, BeginEpoch(1), *(RegisterBroker(b, f"inc-{b}", listeners(b)) for b in (1, 2, 3)),
                 *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2, 3)))
IMAGE = replay(
    CLUSTER,
    Topic("orders", "ORD"),
    Partition("ORD", 0, (1, 2, 3), (1, 2, 3), leader=1),  # led by 1
    Partition("ORD", 1, (2, 1, 3), (2, 1, 3), leader=2),  # 1 follows, in the ISR
    Partition("ORD", 2, (2, 3), (2, 3), leader=2),  # 1 is not a replica
    Partition("ORD", 3, (1, 2), (2,), leader=2),  # 1 already out of the ISR
    Partition("ORD", 4, (1,), (1,), leader=1),  # 1 alone: KIP-841 keeps the last ISR member
    Topic("solo", "SOLO"),
    Partition("SOLO", 0, (1, 2), (1, 2), leader=1),
    Config(ConfigResourceType.TOPIC, "solo", "unclean.leader.election.enable", "true"),
)
EPOCH_1 = 1  # broker 1's broker epoch


def marked(reported, *, image=IMAGE, broker=1, epoch=EPOCH_1):
    return handle_offline_replicas(image, broker_id=broker, broker_epoch=epoch, reported=reported)


CASES = [  # (why, reported replicas of broker 1, expected records)
    ("the leader's replica fails: out of the ISR, the next in-sync replica leads",
     [("ORD", 0)], [OfflineReplicas(1, EPOCH_1, "ORD", (0,)),
                    PartitionChange("ORD", 0, isr=(2, 3), leader=2)]),
    ("a follower's replica fails: out of the ISR, the leader stays",
     [("ORD", 1)], [OfflineReplicas(1, EPOCH_1, "ORD", (1,)), PartitionChange("ORD", 1, isr=(2, 3))]),
    ("already out of the ISR: recorded, nothing to move",
     [("ORD", 3)], [OfflineReplicas(1, EPOCH_1, "ORD", (3,))]),
    ("the last ISR member: recorded; it stays in the ISR (KIP-841) and the partition loses its leader",
     [("ORD", 4)], [OfflineReplicas(1, EPOCH_1, "ORD", (4,)), PartitionChange("ORD", 4, leader=NO_LEADER)]),
    ("several topics: one record per topic, then each partition's change",
     [("SOLO", 0), ("ORD", 1)],
     [OfflineReplicas(1, EPOCH_1, "ORD", (1,)), OfflineReplicas(1, EPOCH_1, "SOLO", (0,)),
      PartitionChange("ORD", 1, isr=(2, 3)), PartitionChange("SOLO", 0, isr=(2,), leader=2)]),
    ("not one of its replicas: no-op", [("ORD", 2)], []),
    ("unknown topic or partition (deleted meanwhile): no-op", [("GONE", 0), ("ORD", 99)], []),
    ("nothing reported: no-op", [], []),
]


@pytest.mark.parametrize(("why", "reported", "expected"), CASES, ids=[c[0] for c in CASES])
def test_records_for_failed_replicas(why, reported, expected):
    assert list(marked(reported).records) == expected


def test_the_response_names_what_was_marked_for_the_log():
    response = marked([("ORD", 0), ("ORD", 1)]).response
    assert response.replicas == (("orders", 0), ("orders", 1)) and response.leaders_moved == 1


@pytest.mark.parametrize("broker, epoch", [(1, 999), (1, -1), (7, 7)], ids=["stale epoch", "no epoch", "unknown"])
def test_a_stale_or_unknown_broker_epoch_changes_nothing(broker, epoch):
    """An old incarnation's heartbeat must not mark the new one's replicas offline."""
    assert marked([("ORD", 0)], broker=broker, epoch=epoch).records == ()
    assert not news(IMAGE, broker, epoch, [("ORD", 0)])


def test_replaying_the_records_is_what_the_image_then_says():
    image = replay(IMAGE, *marked([("ORD", 0), ("ORD", 1)]).records)
    assert image.broker(1).offline_replicas == {("ORD", 0), ("ORD", 1)}
    assert image.partition("ORD", 0).leader == 2 and 1 not in image.partition("ORD", 0).isr
    assert image.failed_replicas(image.partition("ORD", 0)) == (1,)
    assert image.failed_replicas(image.partition("ORD", 2)) == ()
    # already recorded: the next heartbeat repeating them is no news and no record
    assert not news(image, 1, EPOCH_1, [("ORD", 0), ("ORD", 1)])
    assert marked([("ORD", 0), ("ORD", 1)], image=image).records == ()
    # a new one among them is
    assert news(image, 1, EPOCH_1, [("ORD", 0), ("ORD", 3)])
    assert marked([("ORD", 0), ("ORD", 3)], image=image).records == (OfflineReplicas(1, EPOCH_1, "ORD", (3,)),)


def test_a_leader_is_never_elected_where_its_replica_failed():
    """Broker 2 failed ORD-0 earlier (still in the ISR by a stale leader's view); when broker 1's
    replica fails too, the election skips 2 and picks 3."""
    image = replay(IMAGE, OfflineReplicas(2, 2, "ORD", (0,)))
    assert list(marked([("ORD", 0)], image=image).records) == [
        OfflineReplicas(1, EPOCH_1, "ORD", (0,)), PartitionChange("ORD", 0, isr=(2, 3), leader=3)]


def test_one_decision_marks_at_most_the_limit():
    result = handle_offline_replicas(IMAGE, broker_id=1, broker_epoch=EPOCH_1,
                                     reported=[("ORD", 0), ("ORD", 1), ("ORD", 3)], limit=2)
    assert result.records[0] == OfflineReplicas(1, EPOCH_1, "ORD", (0, 1))
    assert result.response.replicas == (("orders", 0), ("orders", 1))


def test_a_failed_replica_is_refused_back_into_the_isr():
    """AlterPartition proposing it again answers INELIGIBLE_REPLICA (broker_rpc's call site)."""
    image = replay(IMAGE, *marked([("ORD", 1)]).records)
    assert failed_isr_members(image, "ORD", 1, [2, 1, 3]) == [1]
    assert failed_isr_members(image, "ORD", 1, [2, 3]) == []
    assert failed_isr_members(image, "ORD", 0, [1, 2, 3]) == []  # its other replicas are fine
    again = replay(image, RegisterBroker(1, "inc-1b", listeners(1)))  # restarted: eligible again
    assert failed_isr_members(again, "ORD", 1, [2, 1, 3]) == []
