"""quorum/replica_assignment.py (and its use by create_topic / create_partitions): Kafka's manual
replica assignment rules as tables of (image, request) -> records or (error code, field, message)."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode
from metadata.records import BrokerRegistrationChange, Partition, Topic
from quorum.controller_result import ControllerApiError
from quorum.replica_assignment import new_partition_assignments, topic_assignments
from quorum.topic_control import TopicCreated, create_partitions, create_topic
from tests.unit.test_topic_control import (
    CLUSTER3,
    ONE_FENCED,
    ORDERS,
    FixedRandom,
    registered,
    replay,
)

E = ErrorCode
# Brokers 1, 2, 3 registered; 1 and 2 unfenced, 3 fenced; 4 unfenced but shutting down.
MIXED = replay(registered(1, 2, 3, 4), *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2, 4)),
               BrokerRegistrationChange(4, 4, in_controlled_shutdown=True))

# --- topic_assignments: (image, assignments) -> partition id -> replicas ---------------------

TOPIC_OK = [
    pytest.param(CLUSTER3, [(0, (3, 1)), (1, (1, 2))], {0: (3, 1), 1: (1, 2)}, id="order-kept"),
    pytest.param(CLUSTER3, [(1, (2,)), (0, (3,))], {1: (2,), 0: (3,)}, id="any-request-order"),
    pytest.param(MIXED, [(0, (3, 1))], {0: (3, 1)}, id="a-fenced-replica-is-allowed"),
    pytest.param(MIXED, [(0, (4, 2))], {0: (4, 2)}, id="a-shutting-down-replica-is-allowed"),
]


@pytest.mark.parametrize(("image", "assignments", "expected"), TOPIC_OK)
def test_topic_assignments(image, assignments, expected):
    assert topic_assignments(image, assignments, num_partitions=-1, replication_factor=-1) == expected


TOPIC_BAD = [  # (image, assignments, num_partitions, replication_factor, code, field, message)
    pytest.param(CLUSTER3, [(0, (1,))], 1, -1, E.INVALID_REQUEST, "partitions",
                 "numPartitions was not set to -1", id="num-partitions-set"),
    pytest.param(CLUSTER3, [(0, (1,))], -1, 1, E.INVALID_REQUEST, "replication_factor",
                 "replication factor was not set to -1", id="replication-factor-set"),
    pytest.param(CLUSTER3, [(0, (1,))], 1, 1, E.INVALID_REQUEST, "replication_factor",
                 "replication factor was not set to -1", id="both-set-replication-factor-first"),
    pytest.param(CLUSTER3, [(0, ())], -1, -1, E.INVALID_REPLICA_ASSIGNMENT, "assignments",
                 "includes an empty replica list", id="empty-replicas"),
    pytest.param(CLUSTER3, [(0, (1, 9))], -1, -1, E.INVALID_REPLICA_ASSIGNMENT, "assignments",
                 "includes broker 9, but no such broker is registered", id="unknown-broker"),
    pytest.param(CLUSTER3, [(0, (2, 1, 2))], -1, -1, E.INVALID_REPLICA_ASSIGNMENT, "assignments",
                 "includes the broker 2 more than once", id="duplicate-broker"),
    pytest.param(CLUSTER3, [(0, (1, 2)), (1, (3,))], -1, -1, E.INVALID_REPLICA_ASSIGNMENT, "assignments",
                 "a partition with 1 replica(s), but this is not consistent with previous partitions, which "
                 "have 2 replica(s)", id="differing-replication-factor"),
    pytest.param(CLUSTER3, [(0, (1,)), (0, (2,))], -1, -1, E.INVALID_REPLICA_ASSIGNMENT, "assignments",
                 "multiple manual partition assignments for partition 0", id="partition-twice"),
    pytest.param(CLUSTER3, [(0, (1,)), (2, (2,))], -1, -1, E.INVALID_REPLICA_ASSIGNMENT, "assignments",
                 "consecutive 0-based integer sequence", id="gap-in-partition-ids"),
    pytest.param(CLUSTER3, [(1, (1,))], -1, -1, E.INVALID_REPLICA_ASSIGNMENT, "assignments",
                 "consecutive 0-based integer sequence", id="not-from-zero"),
    pytest.param(MIXED, [(0, (1,)), (1, (3,))], -1, -1, E.INVALID_REPLICA_ASSIGNMENT, "assignments",
                 "for partition 1 are fenced or in controlled shutdown", id="only-a-fenced-broker"),
    pytest.param(MIXED, [(0, (3, 4))], -1, -1, E.INVALID_REPLICA_ASSIGNMENT, "assignments",
                 "for partition 0 are fenced or in controlled shutdown", id="fenced-and-shutting-down"),
]


@pytest.mark.parametrize(("image", "assignments", "partitions", "rf", "code", "field", "message"), TOPIC_BAD)
def test_topic_assignment_refusals(image, assignments, partitions, rf, code, field, message):
    with pytest.raises(ControllerApiError) as info:
        topic_assignments(image, assignments, num_partitions=partitions, replication_factor=rf)
    assert (info.value.code, info.value.field) == (code, field)
    assert message in info.value.message


# --- create_topic with assignments: the records --------------------------------------------

def test_create_topic_honours_the_assignment_order():
    result = create_topic(MIXED, name="t", partitions=-1, replication_factor=-1, configs={"retention.ms": "5"},
                          topic_id="T", rng=FixedRandom(0), assignments=[(1, (2, 1, 3)), (0, (3, 1, 2))])
    # preferred leader = first replica, unless it is not active: then the first active one;
    # ISR = the active replicas (a fenced broker is named in replicas, not in the ISR)
    partitions = [r for r in result.records if isinstance(r, Partition)]
    assert partitions == [Partition("T", 0, (3, 1, 2), (1, 2), leader=1),
                          Partition("T", 1, (2, 1, 3), (2, 1), leader=2)]
    assert result.response == TopicCreated("t", "T", 2, 3, ((3, 1, 2), (2, 1, 3)), (("retention.ms", "5"),))
    topic = replay(MIXED, *result.records).topic("t")
    assert topic is not None and [topic.partitions[p].replicas for p in (0, 1)] == [(3, 1, 2), (2, 1, 3)]


def test_create_topic_checks_assignments_before_configs():
    with pytest.raises(ControllerApiError) as info:
        create_topic(CLUSTER3, name="t", partitions=-1, replication_factor=-1, configs={"min.insync.replicas": "0"},
                     topic_id="T", rng=FixedRandom(0), assignments=[(0, (7,))])
    assert info.value.code == E.INVALID_REPLICA_ASSIGNMENT


def test_create_topic_refuses_an_existing_name_first():
    with pytest.raises(ControllerApiError) as info:
        create_topic(ORDERS, name="orders", partitions=-1, replication_factor=-1, configs={}, topic_id="T",
                     rng=FixedRandom(0), assignments=[(0, (9,))])
    assert info.value.code == E.TOPIC_ALREADY_EXISTS


# --- new_partition_assignments / create_partitions with assignments ------------------------

def test_create_partitions_honours_assignments():
    result = create_partitions(ORDERS, "orders", 5, FixedRandom(0), [(3, 2, 1), (2, 1, 3)])
    assert result.response == {3: (3, 2, 1), 4: (2, 1, 3)}
    assert list(result.records) == [Partition("ORDERS", 3, (3, 2, 1), (3, 2, 1), leader=3),
                                    Partition("ORDERS", 4, (2, 1, 3), (2, 1, 3), leader=2)]
    assert sorted(replay(ORDERS, *result.records).topic("orders").partitions) == [0, 1, 2, 3, 4]


ORDERS_ONE_FENCED = replay(ORDERS, BrokerRegistrationChange(3, 3, fenced=True))

PARTITIONS_BAD = [  # (image, total, assignments, code, message)
    pytest.param(ORDERS, 5, [(1, 2, 3)], E.INVALID_REPLICA_ASSIGNMENT,
                 "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified",
                 id="too-few-lists"),
    pytest.param(ORDERS, 4, [(1, 2, 3), (2, 3, 1)], E.INVALID_REPLICA_ASSIGNMENT,
                 "Attempted to add 1 additional partition(s), but only 2 assignment(s)", id="too-many-lists"),
    pytest.param(ORDERS, 4, [(1, 2)], E.INVALID_REPLICA_ASSIGNMENT,
                 "a partition with 2 replica(s), but this is not consistent with previous partitions, which "
                 "have 3 replica(s)", id="not-the-topics-replication-factor"),
    pytest.param(ORDERS, 4, [(1, 1, 2)], E.INVALID_REPLICA_ASSIGNMENT, "the broker 1 more than once",
                 id="duplicate"),
    pytest.param(ORDERS, 4, [(1, 2, 8)], E.INVALID_REPLICA_ASSIGNMENT, "broker 8, but no such broker",
                 id="unknown-broker"),
    pytest.param(replay(ORDERS_ONE_FENCED, *(BrokerRegistrationChange(b, b, fenced=True) for b in (1, 2))), 4,
                 [(1, 2, 3)], E.INVALID_REPLICA_ASSIGNMENT, "for partition 3 are fenced", id="all-fenced"),
    pytest.param(ORDERS, 3, [], E.INVALID_PARTITIONS, "Topic already has 3 partition(s)", id="no-increase"),
    pytest.param(ORDERS, 2, [(1,)], E.INVALID_PARTITIONS, "would not be an increase", id="decrease"),
]


@pytest.mark.parametrize(("image", "total", "assignments", "code", "message"), PARTITIONS_BAD)
def test_create_partitions_assignment_refusals(image, total, assignments, code, message):
    with pytest.raises(ControllerApiError) as info:
        create_partitions(image, "orders", total, FixedRandom(0), assignments)
    assert info.value.code == code and message in info.value.message


def test_new_partition_assignments_allow_a_fenced_replica():
    got = new_partition_assignments(ORDERS_ONE_FENCED, [(3, 1, 2)], start_partition_id=3, additional=1,
                                    replication_factor=3)
    assert got == {3: (3, 1, 2)}
    records = create_partitions(ORDERS_ONE_FENCED, "orders", 4, FixedRandom(0), [(3, 1, 2)]).records
    assert records == (Partition("ORDERS", 3, (3, 1, 2), (1, 2), leader=1),)


def test_one_fenced_cluster_can_still_take_manual_topics():
    result = create_topic(ONE_FENCED, name="t", partitions=-1, replication_factor=-1, configs={}, topic_id="T",
                          rng=FixedRandom(0), assignments=[(0, (1, 2, 3))])  # rf 3 > 2 live brokers: allowed
    assert result.records == (Topic("t", "T"), Partition("T", 0, (1, 2, 3), (1, 2), leader=1))
