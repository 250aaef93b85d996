"""quorum/topic_control.py: topic names, configs, create/delete topics, add partitions, as tables."""

from __future__ import annotations

import random

import pytest

from common.errors import ErrorCode
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import (
    NO_LEADER,
    BeginEpoch,
    BrokerRegistrationChange,
    Config,
    ConfigResourceType,
    LeaderRecoveryState,
    Listener,
    Partition,
    PartitionChange,
    RegisterBroker,
    RemoveTopic,
    Topic,
)
from quorum.controller_result import ControllerApiError
from quorum.topic_control import (
    TopicCreated,
    TopicElectionConfig,
    alter_topic_configs,
    create_partitions,
    create_topic,
    delete_topic,
    topic_election_config,
    validate_topic_config,
    validate_topic_name,
)

TOPIC, BROKER = ConfigResourceType.TOPIC, ConfigResourceType.BROKER
E = ErrorCode


def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


class FixedRandom(random.Random):
    """Every draw is `value`: placement starts at broker index `value` with shift `value`."""

    def __init__(self, value: int = 0) -> None:
        super().__init__(0)
        self.value = value

    def randrange(self, start, stop=None, step=1):  # noqa: ARG002 - the Random signature
        return self.value % (start if stop is None else stop)


def registered(*broker_ids):
    """Brokers 1..n registered at offsets 1..n after a BeginEpoch: broker epoch == broker id."""
    return replay(EMPTY_IMAGE, BeginEpoch(1),
                  *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),))
                    for b in broker_ids))


BASE3 = registered(1, 2, 3)
CLUSTER3 = replay(BASE3, *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2, 3)))
ONE_FENCED = replay(BASE3, *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2)))
ONE_SHUTTING_DOWN = replay(CLUSTER3, BrokerRegistrationChange(3, 3, in_controlled_shutdown=True))
ALL_FENCED = BASE3
ORDERS = replay(CLUSTER3, Config(TOPIC, "orders", "retention.ms", "1000"), Topic("orders", "ORDERS"),
                Partition("ORDERS", 0, (1, 2, 3), (1, 2, 3), leader=1),
                Partition("ORDERS", 1, (2, 3, 1), (2, 3, 1), leader=2),
                Partition("ORDERS", 2, (3, 1, 2), (3, 1, 2), leader=3))
# "offline": KIP-841 left broker 3 alone in the ISR and leaderless; broker 3 is fenced.
OFFLINE = replay(ORDERS, Topic("offline", "OFFLINE"), Partition("OFFLINE", 0, (3, 1, 2), (3,)),
                 BrokerRegistrationChange(3, 3, fenced=True))
CLUSTER_DEFAULTS = replay(ORDERS, Config(BROKER, "", "min.insync.replicas", "2"),
                          Config(BROKER, "", "unclean.leader.election.enable", "true"),
                          Config(TOPIC, "orders", "min.insync.replicas", "3"))


# --- names -------------------------------------------------------------------------------

VALID_NAMES = ["a", "orders", "Orders-2024_v1.0", "x" * 249, "...", "a..b", "_", "-"]


@pytest.mark.parametrize("name", VALID_NAMES)
def test_valid_topic_names(name):
    validate_topic_name(name, existing=["other", "b.c"])


INVALID_NAMES = [
    pytest.param("", (), "can't be empty", id="empty"),
    pytest.param(".", (), 'cannot be "." or ".."', id="dot"),
    pytest.param("..", (), 'cannot be "." or ".."', id="dot-dot"),
    pytest.param("x" * 250, (), "longer than 249 characters", id="too-long"),
    pytest.param("a b", (), "other than ASCII alphanumerics", id="space"),
    pytest.param("a/b", (), "other than ASCII alphanumerics", id="slash"),
    pytest.param("caf\u00e9", (), "other than ASCII alphanumerics", id="non-ascii"),
    pytest.param("a\n", (), "other than ASCII alphanumerics", id="trailing-newline"),
    pytest.param("a_b", ("a.b",), "collides with existing topic: a.b", id="underscore-collides-with-dot"),
    pytest.param("a.b", ("a_b",), "collides with existing topic: a_b", id="dot-collides-with-underscore"),
]


@pytest.mark.parametrize(("name", "existing", "message"), INVALID_NAMES)
def test_invalid_topic_names(name, existing, message):
    with pytest.raises(ControllerApiError) as info:
        validate_topic_name(name, existing)
    assert (info.value.code, info.value.field) == (E.INVALID_TOPIC_EXCEPTION, "name")
    assert message in info.value.message


# --- configs -----------------------------------------------------------------------------

CONFIG_VALUES = [
    ("min.insync.replicas", "2", "2"),
    ("min.insync.replicas", " 1 ", "1"),
    ("unclean.leader.election.enable", "TRUE", "true"),
    ("unclean.leader.election.enable", "false", "false"),
    ("retention.ms", "-1", "-1"),
    ("retention.bytes", "1073741824", "1073741824"),
    ("segment.bytes", "14", "14"),
    ("segment.ms", "60000", "60000"),
    ("max.message.bytes", "2000000", "2000000"),
    ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
    ("flush.messages", "1", "1"),
    ("flush.ms", "1000", "1000"),
    ("cleanup.policy", "delete", "delete"),
    ("cleanup.policy", "", ""),  # Kafka checks elements only: keep every record
    ("cleanup.policy", "compact, delete", "compact,delete"),
]


@pytest.mark.parametrize(("key", "value", "canonical"), CONFIG_VALUES)
def test_valid_topic_configs(key, value, canonical):
    assert validate_topic_config(key, value) == canonical


BAD_CONFIGS = [
    ("min.insync.replicas", "0", "at least 1"),
    ("min.insync.replicas", "two", "expects an integer"),
    ("unclean.leader.election.enable", "yes", "expects a boolean"),
    ("retention.ms", "-2", "at least -1"),
    ("retention.bytes", "9223372036854775808", "64-bit integer"),
    ("segment.bytes", "13", "at least 14"),
    ("segment.bytes", "2147483648", "32-bit integer"),
    ("cleanup.policy", "compacted", "must be one of 'delete', 'compact'"),
    ("min.cleanable.dirty.ratio", "1.5", "between 0.0 and 1.0"),
    ("delete.retention.ms", "-1", "at least 0"),
    ("message.timestamp.type", "Now", "must be one of"),
    ("retention.msx", "1", "did you mean 'retention.ms'"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD_CONFIGS)
def test_invalid_topic_configs_name_the_key(key, value, message):
    with pytest.raises(ControllerApiError) as info:
        validate_topic_config(key, value)
    assert (info.value.code, info.value.field) == (E.INVALID_CONFIG, key)
    assert message in info.value.message


ELECTION_CONFIGS = [
    pytest.param(ORDERS, "orders", TopicElectionConfig(), id="kafka-defaults"),
    pytest.param(CLUSTER_DEFAULTS, "orders", TopicElectionConfig(True, 3, False), id="topic-over-cluster"),
    pytest.param(CLUSTER_DEFAULTS, "other", TopicElectionConfig(True, 2, False), id="cluster-default"),
]


@pytest.mark.parametrize(("image", "topic", "expected"), ELECTION_CONFIGS)
def test_topic_election_config(image, topic, expected):
    assert topic_election_config(image, topic) == expected


# --- create_topic ------------------------------------------------------------------------

def created(topic_id, *assignments, isr_of=None):
    return [Partition(topic_id, p, replicas, replicas if isr_of is None else isr_of(replicas),
                      leader=replicas[0]) for p, replicas in enumerate(assignments)]


CREATE = [
    pytest.param(CLUSTER3, dict(partitions=3, replication_factor=3, configs={}),
                 [Topic("t", "T"), *created("T", (1, 2, 3), (2, 3, 1), (3, 1, 2))],
                 id="round-robin-leaders-isr-is-replicas"),
    pytest.param(CLUSTER3, dict(partitions=2, replication_factor=1,
                                configs={"retention.ms": "60000", "min.insync.replicas": "1"}),
                 [Config(TOPIC, "t", "min.insync.replicas", "1"), Config(TOPIC, "t", "retention.ms", "60000"),
                  Topic("t", "T"), *created("T", (1,), (2,))],
                 id="configs-first-sorted-by-key"),
    pytest.param(ONE_FENCED, dict(partitions=2, replication_factor=2, configs={}),
                 [Topic("t", "T"), *created("T", (1, 2), (2, 1))], id="fenced-broker-gets-nothing"),
    pytest.param(ONE_SHUTTING_DOWN, dict(partitions=1, replication_factor=2, configs={}),
                 [Topic("t", "T"), *created("T", (1, 2))], id="shutting-down-broker-gets-nothing"),
]


@pytest.mark.parametrize(("image", "kwargs", "expected"), CREATE)
def test_create_topic(image, kwargs, expected):
    result = create_topic(image, name="t", topic_id="T", rng=FixedRandom(0), **kwargs)
    assert list(result.records) == expected
    assert result.response == TopicCreated(
        "t", "T", kwargs["partitions"], kwargs["replication_factor"],
        tuple(r.replicas for r in expected if isinstance(r, Partition)),
        tuple(sorted(kwargs["configs"].items())))
    after = replay(image, *result.records)
    topic = after.topic("t")
    assert topic is not None and len(topic.partitions) == kwargs["partitions"]
    for partition in topic.partitions.values():
        assert (partition.leader, partition.isr) == (partition.replicas[0], partition.replicas)
        assert (partition.leader_epoch, partition.partition_epoch) == (0, 0)
        assert all(after.broker(b).is_active for b in partition.replicas)
    assert dict(after.config(TOPIC, "t")) == kwargs["configs"]


CREATE_ERRORS = [
    pytest.param(ORDERS, dict(name="orders"), E.TOPIC_ALREADY_EXISTS, "name", "already exists", id="exists"),
    pytest.param(ORDERS, dict(name="bad name"), E.INVALID_TOPIC_EXCEPTION, "name", "illegal", id="bad-name"),
    pytest.param(replay(CLUSTER3, Topic("a.b", "AB")), dict(name="a_b"), E.INVALID_TOPIC_EXCEPTION, "name",
                 "collides", id="collision"),
    pytest.param(CLUSTER3, dict(partitions=0), E.INVALID_PARTITIONS, "partitions", "larger than 0",
                 id="zero-partitions"),
    pytest.param(CLUSTER3, dict(partitions=-1), E.INVALID_PARTITIONS, "partitions", "larger than 0",
                 id="default-partitions-not-resolved"),
    pytest.param(CLUSTER3, dict(partitions=10_001), E.INVALID_PARTITIONS, "partitions", "the most one request",
                 id="too-many-partitions"),
    pytest.param(CLUSTER3, dict(replication_factor=0), E.INVALID_REPLICATION_FACTOR, "replication_factor",
                 "larger than 0", id="zero-replication-factor"),
    pytest.param(CLUSTER3, dict(replication_factor=4), E.INVALID_REPLICATION_FACTOR, "replication_factor",
                 "only 3 broker(s) are available", id="more-replicas-than-brokers"),
    pytest.param(ONE_FENCED, dict(replication_factor=3), E.INVALID_REPLICATION_FACTOR, "replication_factor",
                 "only 2 broker(s) are available (unfenced and not shutting down): [1, 2]",
                 id="fenced-brokers-do-not-count"),
    pytest.param(ALL_FENCED, dict(replication_factor=1), E.INVALID_REPLICATION_FACTOR, "replication_factor",
                 "only 0 broker(s)", id="all-fenced"),
    pytest.param(CLUSTER3, dict(configs={"cleanup.policy": "compacted"}), E.INVALID_CONFIG,
                 "cleanup.policy", "must be one of", id="bad-cleanup-policy"),
    pytest.param(CLUSTER3, dict(configs={"min.insync.replicas": "0"}), E.INVALID_CONFIG,
                 "min.insync.replicas", "at least 1", id="bad-config"),
    pytest.param(ORDERS, dict(topic_id="ORDERS"), E.INVALID_REQUEST, "topic_id", "already in use",
                 id="topic-id-in-use"),
]


@pytest.mark.parametrize(("image", "overrides", "code", "field", "message"), CREATE_ERRORS)
def test_create_topic_errors(image, overrides, code, field, message):
    kwargs = dict(name="t", partitions=1, replication_factor=1, configs={}, topic_id="T") | overrides
    with pytest.raises(ControllerApiError) as info:
        create_topic(image, rng=FixedRandom(0), **kwargs)
    assert (info.value.code, info.value.field) == (code, field)
    assert message in info.value.message


def test_create_topic_draws_placement_from_the_callers_rng():
    first = create_topic(CLUSTER3, name="t", partitions=6, replication_factor=2, configs={}, topic_id="T",
                         rng=random.Random(7))
    again = create_topic(CLUSTER3, name="t", partitions=6, replication_factor=2, configs={}, topic_id="T",
                         rng=random.Random(7))
    assert first == again
    leaders = [p.leader for p in first.records if isinstance(p, Partition)]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]  # leaders spread evenly whatever the start


# --- delete_topic ------------------------------------------------------------------------

def test_delete_topic_removes_partitions_and_configs():
    result = delete_topic(ORDERS, "orders")
    assert result.records == (RemoveTopic("ORDERS"),) and result.response is None
    after = replay(ORDERS, *result.records)
    assert after.topic("orders") is None and after.topic_by_id("ORDERS") is None
    assert dict(after.config(TOPIC, "orders")) == {}


def test_delete_unknown_topic():
    with pytest.raises(ControllerApiError) as info:
        delete_topic(ORDERS, "nope")
    assert (info.value.code, info.value.field) == (E.UNKNOWN_TOPIC_OR_PARTITION, "name")


# --- create_partitions -------------------------------------------------------------------

CREATE_PARTITIONS = [
    # Kafka's addPartitions: start at partition 0's first replica, continue the shift from
    # partition id 3 on, so the new leaders continue the round robin.
    pytest.param(ORDERS, 5, {3: (1, 3, 2), 4: (2, 1, 3)}, id="continues-round-robin"),
    pytest.param(ORDERS, 4, {3: (1, 3, 2)}, id="one-more"),
]


@pytest.mark.parametrize(("image", "total", "expected"), CREATE_PARTITIONS)
def test_create_partitions(image, total, expected):
    result = create_partitions(image, "orders", total, FixedRandom(2))  # a fixed start: rng unused
    assert result.response == expected
    assert list(result.records) == [Partition("ORDERS", p, r, r, leader=r[0]) for p, r in expected.items()]
    after = replay(image, *result.records)
    assert sorted(after.topic("orders").partitions) == list(range(total))
    assert after.topic("orders").partitions[0] is image.topic("orders").partitions[0]


CREATE_PARTITIONS_ERRORS = [
    pytest.param(ORDERS, "nope", 5, E.UNKNOWN_TOPIC_OR_PARTITION, "does not exist", id="unknown-topic"),
    pytest.param(ORDERS, "orders", 3, E.INVALID_PARTITIONS, "Topic already has 3 partition(s).", id="same"),
    pytest.param(ORDERS, "orders", 2, E.INVALID_PARTITIONS, "2 would not be an increase", id="fewer"),
    pytest.param(ORDERS, "orders", 0, E.INVALID_PARTITIONS, "larger than 0", id="zero"),
    pytest.param(OFFLINE, "orders", 4, E.INVALID_REPLICATION_FACTOR, "only 2 broker(s)",
                 id="replication-factor-above-active-brokers"),
]


@pytest.mark.parametrize(("image", "name", "total", "code", "message"), CREATE_PARTITIONS_ERRORS)
def test_create_partitions_errors(image, name, total, code, message):
    with pytest.raises(ControllerApiError) as info:
        create_partitions(image, name, total, FixedRandom(0))
    assert info.value.code == code and message in info.value.message


# --- alter_topic_configs -----------------------------------------------------------------

RECOVERING = LeaderRecoveryState.RECOVERING

ALTER_CONFIGS = [
    pytest.param(ORDERS, "orders", {"min.insync.replicas": "2"},
                 [Config(TOPIC, "orders", "min.insync.replicas", "2")],
                 {"retention.ms": "1000", "min.insync.replicas": "2"}, 1, id="set-new-key"),
    pytest.param(ORDERS, "orders", {"retention.ms": "5000"}, [Config(TOPIC, "orders", "retention.ms", "5000")],
                 {"retention.ms": "5000"}, 1, id="change-a-key"),
    pytest.param(ORDERS, "orders", {"retention.ms": None}, [Config(TOPIC, "orders", "retention.ms", None)],
                 {}, 1, id="none-deletes"),
    pytest.param(ORDERS, "orders", {"retention.ms": "1000", "segment.ms": None}, [], {"retention.ms": "1000"}, 1,
                 id="unchanged-values-write-nothing"),
    pytest.param(OFFLINE, "offline", {"unclean.leader.election.enable": "true"},
                 [Config(TOPIC, "offline", "unclean.leader.election.enable", "true"),
                  PartitionChange("OFFLINE", 0, leader=1, isr=(1,), leader_recovery_state=RECOVERING)],
                 {"unclean.leader.election.enable": "true"}, 1,
                 id="enabling-unclean-elects-offline-partitions"),
    pytest.param(OFFLINE, "offline", {"unclean.leader.election.enable": "false"},
                 [Config(TOPIC, "offline", "unclean.leader.election.enable", "false")],
                 {"unclean.leader.election.enable": "false"}, NO_LEADER,
                 id="disabling-unclean-elects-nothing"),
]


@pytest.mark.parametrize(("image", "name", "changes", "expected", "configs_after", "leader_after"),
                         ALTER_CONFIGS)
def test_alter_topic_configs(image, name, changes, expected, configs_after, leader_after):
    result = alter_topic_configs(image, name, changes)
    assert list(result.records) == expected and result.response is None
    after = replay(image, *result.records)
    assert dict(after.config(TOPIC, name)) == configs_after
    assert after.topic(name).partitions[0].leader == leader_after


ALTER_CONFIG_ERRORS = [
    pytest.param("nope", {"retention.ms": "1"}, E.UNKNOWN_TOPIC_OR_PARTITION, "name", id="unknown-topic"),
    pytest.param("orders", {"retention.ms": "-5"}, E.INVALID_CONFIG, "retention.ms", id="bad-value"),
    pytest.param("orders", {"retention.mss": None}, E.INVALID_CONFIG, "retention.mss", id="delete-unknown-key"),
    pytest.param("orders", {"cleanup.policy": "compact,tidy"}, E.INVALID_CONFIG, "cleanup.policy",
                 id="bad-cleanup-policy"),
]


@pytest.mark.parametrize(("name", "changes", "code", "field"), ALTER_CONFIG_ERRORS)
def test_alter_topic_configs_errors(name, changes, code, field):
    with pytest.raises(ControllerApiError) as info:
        alter_topic_configs(ORDERS, name, changes)
    assert (info.value.code, info.value.field) == (code, field)
