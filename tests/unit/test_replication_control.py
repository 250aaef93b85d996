"""quorum/replication_control.py: AlterPartition and ElectLeaders over named images, as tables."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode
from common.rpc_messages import (
    AlterPartitionData,
    AlterPartitionPartitionReply,
    AlterPartitionRequest,
    AlterPartitionTopic,
    AlterPartitionTopicReply,
    IsrMemberData,
)
from common.rpc_messages import AlterPartitionReply as AlterPartitionRpcReply
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.partition_change import Election, IsrMember
from metadata.records import (
    NO_LEADER,
    BeginEpoch,
    BrokerRegistrationChange,
    LeaderRecoveryState,
    Listener,
    Partition,
    PartitionChange,
    RegisterBroker,
    Topic,
)
from quorum.controller_result import ControllerApiError
from quorum.replication_control import (
    AlterPartitionReply,
    alter_partition_batches,
    elect_leaders,
    handle_alter_partition,
    merged_alter_partition_replies,
    unclean_elections,
)

E = ErrorCode
RECOVERED, RECOVERING = LeaderRecoveryState.RECOVERED, LeaderRecoveryState.RECOVERING
PREFERRED, UNCLEAN = Election.PREFERRED, Election.UNCLEAN


def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


def change(topic_id, partition_id=0, **fields):
    return PartitionChange(topic_id, partition_id, **fields)


# Brokers 1..4 registered at offsets 1..4 (broker epoch == id) and unfenced.
REGISTERED = replay(EMPTY_IMAGE, BeginEpoch(1),
                    *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),))
                      for b in (1, 2, 3, 4)))
CLUSTER = replay(REGISTERED, *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2, 3, 4)))
TOPICS = replay(
    CLUSTER,
    Topic("orders", "ORDERS"),
    Partition("ORDERS", 0, (1, 2, 3), (1, 2, 3), leader=1),  # the preferred replica leads
    Partition("ORDERS", 1, (1, 2, 3), (1, 2), leader=2),  # 1 is preferred, in the ISR, not leading
    Partition("ORDERS", 2, (3, 1, 2), (1, 2), leader=1),  # preferred 3 is out of the ISR
    Topic("offline", "OFFLINE"),
    Partition("OFFLINE", 0, (1, 2, 4), (4,)),  # KIP-841: 4 stayed in the ISR and left; nobody leads
    Partition("OFFLINE", 1, (4,), (4,)),  # a single replica on broker 4
    BrokerRegistrationChange(4, 4, fenced=True),
)
# ORDERS-0 after the leader shrank the ISR once: partition_epoch 1.
SHRUNK = replay(TOPICS, change("ORDERS", 0, isr=(1, 2)))
RECOVERING_IMAGE = replay(TOPICS, change("OFFLINE", 0, leader=1, isr=(1,), leader_recovery_state=RECOVERING))


def alter(image=TOPICS, **overrides):
    kwargs = dict(broker_id=1, broker_epoch=1, topic_id="ORDERS", partition_id=0, leader_epoch=0,
                  partition_epoch=0, new_isr=[IsrMember(1, 1), IsrMember(2, 2), IsrMember(3, 3)],
                  leader_recovery_state=RECOVERED) | overrides
    return handle_alter_partition(image, **kwargs)


def isr(*ids):
    return [IsrMember(b) for b in ids]


# --- handle_alter_partition --------------------------------------------------------------

# (image, request overrides, expected records, expected reply)
ALTER = [
    pytest.param(TOPICS, dict(new_isr=[IsrMember(1, 1), IsrMember(2, 2)]), [change("ORDERS", 0, isr=(1, 2))],
                 AlterPartitionReply(0, 1, 0, (1, 2), 1, RECOVERED), id="leader-shrinks-the-isr"),
    pytest.param(SHRUNK, dict(partition_epoch=1, new_isr=isr(1, 2, 3)), [change("ORDERS", 0, isr=(1, 2, 3))],
                 AlterPartitionReply(0, 1, 0, (1, 2, 3), 2, RECOVERED), id="leader-expands-the-isr"),
    pytest.param(TOPICS, dict(), [], AlterPartitionReply(0, 1, 0, (1, 2, 3), 0, RECOVERED),
                 id="same-isr-no-record-current-state"),
    pytest.param(RECOVERING_IMAGE, dict(topic_id="OFFLINE", leader_epoch=1, partition_epoch=1, new_isr=isr(1)),
                 [change("OFFLINE", 0, leader_recovery_state=RECOVERED)],
                 AlterPartitionReply(0, 1, 1, (1,), 2, RECOVERED), id="leader-finished-recovering"),
]


@pytest.mark.parametrize(("image", "overrides", "expected", "reply"), ALTER)
def test_handle_alter_partition(image, overrides, expected, reply):
    result = alter(image, **overrides)
    assert list(result.records) == expected
    assert result.response == reply
    after = replay(image, *result.records).partition(result.records[0].topic_id if expected else "ORDERS",
                                                     reply.partition_id)
    assert (after.leader, after.leader_epoch, after.isr, after.partition_epoch, after.leader_recovery_state) == (
        reply.leader_id, reply.leader_epoch, reply.isr, reply.partition_epoch, reply.leader_recovery_state)


ALTER_ERRORS = [
    pytest.param(TOPICS, dict(broker_id=9), E.BROKER_ID_NOT_REGISTERED, "broker_id", id="unknown-broker"),
    pytest.param(TOPICS, dict(broker_epoch=7), E.STALE_BROKER_EPOCH, "broker_epoch", id="stale-broker-epoch"),
    pytest.param(TOPICS, dict(topic_id="NOPE"), E.UNKNOWN_TOPIC_ID, "topic_id", id="unknown-topic-id"),
    pytest.param(TOPICS, dict(partition_id=7), E.UNKNOWN_TOPIC_OR_PARTITION, "partition_id",
                 id="unknown-partition"),
    pytest.param(TOPICS, dict(broker_id=2, broker_epoch=2), E.INVALID_REQUEST, None, id="not-the-leader"),
    pytest.param(replay(TOPICS, change("ORDERS", 0, leader=2)), dict(), E.FENCED_LEADER_EPOCH, "leader_epoch",
                 id="stale-leader-epoch"),
    pytest.param(SHRUNK, dict(), E.INVALID_UPDATE_VERSION, "partition_epoch", id="stale-partition-epoch"),
    pytest.param(TOPICS, dict(leader_epoch=3), E.NOT_CONTROLLER, None, id="newer-leader-epoch-stale-controller"),
    pytest.param(replay(TOPICS, BrokerRegistrationChange(3, 3, fenced=True)), dict(new_isr=isr(1, 3)),
                 E.INELIGIBLE_REPLICA, "new_isr", id="fenced-isr-member"),
    pytest.param(TOPICS, dict(new_isr=isr(1, 4)), E.INVALID_REQUEST, None, id="isr-member-not-a-replica"),
    pytest.param(TOPICS, dict(new_isr=[IsrMember(1, 1), IsrMember(2, 1)]), E.INELIGIBLE_REPLICA, "new_isr",
                 id="stale-isr-member-epoch"),
    pytest.param(TOPICS, dict(new_isr=isr(2, 3)), E.INVALID_REQUEST, None, id="leader-not-in-isr"),
    pytest.param(TOPICS, dict(leader_recovery_state=7), E.INVALID_REQUEST, None, id="unknown-recovery-state"),
]


@pytest.mark.parametrize(("image", "overrides", "code", "field"), ALTER_ERRORS)
def test_handle_alter_partition_errors(image, overrides, code, field):
    with pytest.raises(ControllerApiError) as info:
        alter(image, **overrides)
    assert (info.value.code, info.value.field) == (code, field)


# --- elect_leaders -----------------------------------------------------------------------

OFFLINE_UNCLEAN = change("OFFLINE", 0, leader=1, isr=(1,), leader_recovery_state=RECOVERING)

# (image, election, partitions, expected records, expected results)
ELECT = [
    pytest.param(TOPICS, PREFERRED, [("orders", 1)], [change("ORDERS", 1, leader=1)], {("orders", 1): E.NONE},
                 id="preferred-moves-leadership-back"),
    pytest.param(TOPICS, PREFERRED, [("orders", 0)], [], {("orders", 0): E.ELECTION_NOT_NEEDED},
                 id="preferred-already-leads"),
    pytest.param(TOPICS, PREFERRED, [("orders", 2)], [], {("orders", 2): E.PREFERRED_LEADER_NOT_AVAILABLE},
                 id="preferred-not-in-isr"),
    pytest.param(replay(TOPICS, BrokerRegistrationChange(1, 1, fenced=True)), PREFERRED, [("orders", 1)], [],
                 {("orders", 1): E.PREFERRED_LEADER_NOT_AVAILABLE}, id="preferred-fenced"),
    pytest.param(TOPICS, PREFERRED, [("offline", 0)], [], {("offline", 0): E.PREFERRED_LEADER_NOT_AVAILABLE},
                 id="preferred-is-never-unclean"),
    pytest.param(TOPICS, UNCLEAN, [("offline", 0)], [OFFLINE_UNCLEAN], {("offline", 0): E.NONE},
                 id="unclean-elects-a-live-replica-recovering"),
    pytest.param(TOPICS, UNCLEAN, [("offline", 1)], [], {("offline", 1): E.ELIGIBLE_LEADERS_NOT_AVAILABLE},
                 id="unclean-nobody-alive"),
    pytest.param(TOPICS, UNCLEAN, [("orders", 1)], [], {("orders", 1): E.ELECTION_NOT_NEEDED},
                 id="unclean-partition-has-a-leader"),
    pytest.param(TOPICS, PREFERRED, [("nope", 0), ("orders", 9)], [],
                 {("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION, ("orders", 9): E.UNKNOWN_TOPIC_OR_PARTITION},
                 id="unknown-topic-or-partition"),
    pytest.param(TOPICS, PREFERRED, [("orders", 1), ("orders", 1)], [change("ORDERS", 1, leader=1)],
                 {("orders", 1): E.NONE}, id="a-partition-named-twice-is-elected-once"),
    pytest.param(TOPICS, PREFERRED, None, [change("ORDERS", 1, leader=1)],
                 {("offline", 0): E.PREFERRED_LEADER_NOT_AVAILABLE, ("offline", 1): E.PREFERRED_LEADER_NOT_AVAILABLE,
                  ("orders", 1): E.NONE, ("orders", 2): E.PREFERRED_LEADER_NOT_AVAILABLE},
                 id="all-partitions-omit-election-not-needed"),
    pytest.param(TOPICS, UNCLEAN, None, [OFFLINE_UNCLEAN],
                 {("offline", 0): E.NONE, ("offline", 1): E.ELIGIBLE_LEADERS_NOT_AVAILABLE},
                 id="unclean-all-partitions"),
]


@pytest.mark.parametrize(("image", "election", "partitions", "expected", "results"), ELECT)
def test_elect_leaders(image, election, partitions, expected, results):
    result = elect_leaders(image, election=election, partitions=partitions)
    assert list(result.records) == expected
    assert result.response == results
    after = replay(image, *result.records)
    for (name, partition_id), error in results.items():
        if error is E.NONE:
            partition = after.topic(name).partitions[partition_id]
            assert partition.leader != NO_LEADER and after.broker(partition.leader).is_active
            if election is PREFERRED:
                assert partition.leader == partition.preferred_replica


def test_periodic_preferred_elections_stop_at_their_bound_and_say_more_is_left():
    """Kafka's balancing elects at most MAX_ELECTIONS_PER_IMBALANCE per run and runs again at
    once: five partitions led away from their preferred replica, two per decision."""
    from quorum.replication_control import more_elections_left
    image = replay(CLUSTER, Topic("many", "MANY"),
                   *(Partition("MANY", p, (1, 2, 3), (1, 2, 3), leader=2) for p in range(5)))
    moved = []
    for _ in range(3):  # bounded: 5 elections, 2 per decision
        result = elect_leaders(image, election=PREFERRED, partitions=None, max_elections=2)
        moved.append([r.partition_id for r in result.records])
        image = replay(image, *result.records)
        if not more_elections_left(result.response, 2):
            break
    assert moved == [[0, 1], [2, 3], [4]]
    assert all(p.leader == 1 for p in image.topic("many").partitions.values())
    named = elect_leaders(TOPICS, election=PREFERRED, partitions=[("orders", 1)], max_elections=0)
    assert named.response == {("orders", 1): E.NONE}  # partitions named by an operator: never bounded


def test_elect_leaders_rejects_an_online_election():
    with pytest.raises(ControllerApiError) as info:
        elect_leaders(TOPICS, election=Election.ONLINE, partitions=None)
    assert (info.value.code, info.value.field) == (E.INVALID_REQUEST, "election")


def test_unclean_elections_are_described_for_the_operator():
    result = elect_leaders(TOPICS, election=UNCLEAN, partitions=[("offline", 0)])
    lines = unclean_elections(TOPICS, result.records)
    assert lines == ["Unclean leader election for offline-0: broker 1 leads at leader epoch 1 though not in "
                     "the ISR [4]; records only the old ISR had are lost"]
    assert unclean_elections(TOPICS, [change("ORDERS", 0, isr=(1, 2))]) == []


# ---- a large AlterPartition as decisions of bounded size -----------------------------------

def _request(*topics: tuple[str, int]) -> AlterPartitionRequest:
    return AlterPartitionRequest(4, 12, tuple(
        AlterPartitionTopic(topic_id, tuple(AlterPartitionData(p, 3, 7, (IsrMemberData(4, 12),), 0)
                                            for p in range(count)))
        for topic_id, count in topics))


def _shape(request: AlterPartitionRequest) -> list[tuple[str, tuple[int, ...]]]:
    return [(t.topic_id, tuple(p.partition_index for p in t.partitions)) for t in request.topics]


def test_a_large_alter_partition_is_cut_into_bounded_batches_in_its_order() -> None:
    request = _request(("A", 5), ("B", 2), ("C", 4))
    batches = alter_partition_batches(request, limit=3)
    assert [_shape(b) for b in batches] == [
        [("A", (0, 1, 2))], [("A", (3, 4)), ("B", (0,))], [("B", (1,)), ("C", (0, 1))], [("C", (2, 3))]]
    assert all((b.broker_id, b.broker_epoch) == (4, 12) for b in batches)
    assert alter_partition_batches(request, limit=11) == [request]  # within the limit: as sent
    assert alter_partition_batches(_request(), limit=3) == [_request()]
    assert [_shape(b) for b in alter_partition_batches(_request(("A", 0), ("B", 1)), limit=1)] == [
        [("A", ()), ("B", (0,))]]  # a topic without partitions is kept as sent
    with pytest.raises(ValueError):
        alter_partition_batches(request, limit=0)


def test_the_batches_replies_are_merged_into_one_per_topic() -> None:
    request = _request(("A", 5), ("B", 2))

    def reply_to(batch: AlterPartitionRequest) -> AlterPartitionRpcReply:
        return AlterPartitionRpcReply(tuple(AlterPartitionTopicReply(t.topic_id, tuple(
            AlterPartitionPartitionReply(p.partition_index, 0, None, 4, 3, (4,), 8, 0) for p in t.partitions))
            for t in batch.topics))

    merged = merged_alter_partition_replies([reply_to(b) for b in alter_partition_batches(request, limit=3)])
    assert merged == reply_to(request)
