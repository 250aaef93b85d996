"""metadata/image.py and metadata/delta.py: IMAGE1 + DELTA1_RECORDS == IMAGE2, and friends."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from metadata.delta import MetadataDelta, apply, apply_tracked
from metadata.codec import instance_builder
from metadata.image import (
    EMPTY_IMAGE,
    PARTITION_KINDS,
    BrokerRegistration,
    ClusterImage,
    ConfigResource,
    ConfigurationsImage,
    FeaturesImage,
    MetadataImage,
    PartitionRegistration,
    ProducerIdsImage,
    TopicImage,
    TopicsImage,
)
from metadata.local_changes import LocalReplicaChanges, changes_for_broker
from metadata.records import (
    NO_LEADER,
    BeginEpoch,
    BrokerRegistrationChange,
    Config,
    ConfigResourceType,
    FeatureLevel,
    LeaderRecoveryState,
    Listener,
    MetadataRecordError,
    NoOp,
    OfflineReplicas,
    Partition,
    PartitionChange,
    ProducerIds,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnregisterBroker,
)

ORDERS, CLICKS, AUDIT = "ORDERS-id", "CLICKS-id", "AUDIT-id"
TOPIC = ConfigResourceType.TOPIC
RECOVERING = LeaderRecoveryState.RECOVERING


def listener(n: int) -> tuple[Listener, ...]:
    return (Listener("PLAINTEXT", f"127.0.0.{n}", 9092),)


def offsets(records, start):
    return list(enumerate(records, start))


# Offsets 0..9: a controller epoch, three unfenced brokers, two topics, a config, a feature.
IMAGE1_RECORDS = [
    BeginEpoch(1),
    RegisterBroker(1, "inc-1", listener(1), "r1"),
    RegisterBroker(2, "inc-2", listener(2), "r2"),
    RegisterBroker(3, "inc-3", listener(3), "r3", fenced=False),
    BrokerRegistrationChange(1, 1, fenced=False),
    BrokerRegistrationChange(2, 2, fenced=False),
    Topic("orders", ORDERS),
    Partition(ORDERS, 0, (1, 2, 3), (1, 2, 3), leader=1),
    Partition(ORDERS, 1, (2, 3, 1), (2, 3, 1), leader=2),
    Topic("clicks", CLICKS),
    Partition(CLICKS, 0, (3, 1), (3, 1), leader=3),
    Config(TOPIC, "orders", "retention.ms", "1000"),
    FeatureLevel("metadata.version", 7),
]
IMAGE1 = apply(EMPTY_IMAGE, offsets(IMAGE1_RECORDS, 0))

B1 = BrokerRegistration(1, 1, "inc-1", listener(1), "r1", fenced=False)
B2 = BrokerRegistration(2, 2, "inc-2", listener(2), "r2", fenced=False)
B3 = BrokerRegistration(3, 3, "inc-3", listener(3), "r3", fenced=False)
ORDERS_0 = PartitionRegistration(ORDERS, 0, (1, 2, 3), (1, 2, 3), leader=1)
ORDERS_1 = PartitionRegistration(ORDERS, 1, (2, 3, 1), (2, 3, 1), leader=2)
CLICKS_0 = PartitionRegistration(CLICKS, 0, (3, 1), (3, 1), leader=3)

# Broker 1 goes into controlled shutdown: it leaves the ISRs and its leaderships move.
# orders-0: leader 1 -> 2, isr (2, 3); clicks-0: isr (3,); then a new incarnation of broker 3.
DELTA1_RECORDS = [
    BrokerRegistrationChange(1, 1, in_controlled_shutdown=True),
    PartitionChange(ORDERS, 0, isr=(2, 3), leader=2),
    PartitionChange(ORDERS, 1, isr=(2, 3)),
    PartitionChange(CLICKS, 0, isr=(3,)),
    RegisterBroker(3, "inc-3b", listener(3), "r3"),
    ProducerIds(2, 2, 1000),
    Config(TOPIC, "orders", "retention.ms", None),
    FeatureLevel("metadata.version", 0),
    NoOp(),
]
IMAGE2 = MetadataImage(
    offset=21,
    controller_epoch=1,
    cluster=ClusterImage({1: BrokerRegistration(1, 1, "inc-1", listener(1), "r1", fenced=False,
                                                in_controlled_shutdown=True),
                          2: B2,
                          3: BrokerRegistration(3, 17, "inc-3b", listener(3), "r3", fenced=True)}),
    topics=TopicsImage({
        ORDERS: TopicImage("orders", ORDERS, {
            0: PartitionRegistration(ORDERS, 0, (1, 2, 3), (2, 3), leader=2, leader_epoch=1, partition_epoch=1),
            1: PartitionRegistration(ORDERS, 1, (2, 3, 1), (2, 3), leader=2, leader_epoch=0, partition_epoch=1),
        }),
        CLICKS: TopicImage("clicks", CLICKS, {
            0: PartitionRegistration(CLICKS, 0, (3, 1), (3,), leader=3, partition_epoch=1)}),
    }),
    producer_ids=ProducerIdsImage(1000),
)


def test_image1_is_what_its_records_say():
    assert IMAGE1 == MetadataImage(
        offset=12, controller_epoch=1,
        cluster=ClusterImage({1: B1, 2: B2, 3: B3}),
        topics=TopicsImage({ORDERS: TopicImage("orders", ORDERS, {0: ORDERS_0, 1: ORDERS_1}),
                            CLICKS: TopicImage("clicks", CLICKS, {0: CLICKS_0})}),
        configs=ConfigurationsImage({ConfigResource(TOPIC, "orders"): {"retention.ms": "1000"}}),
        features=FeaturesImage({"metadata.version": 7}),
    )


def test_image1_plus_delta1_records_is_image2():
    assert apply(IMAGE1, offsets(DELTA1_RECORDS, 13)) == IMAGE2


def test_lookups_by_name_and_id():
    assert IMAGE1.topic("orders") is IMAGE1.topic_by_id(ORDERS)
    assert IMAGE1.topic("nope") is None and IMAGE1.topic_by_id("nope") is None
    assert IMAGE1.partition(ORDERS, 1) == ORDERS_1
    assert IMAGE1.partition(ORDERS, 9) is None and IMAGE1.partition("nope", 0) is None
    assert IMAGE1.broker(3) == B3 and IMAGE1.broker(9) is None
    assert IMAGE1.config(TOPIC, "orders") == {"retention.ms": "1000"}
    assert IMAGE1.config(TOPIC, "clicks") == {}
    assert IMAGE1.feature_level("metadata.version") == 7 and IMAGE1.feature_level("nope") == 0
    assert B1.is_active and not IMAGE2.broker(1).is_active and not IMAGE2.broker(3).is_active


def test_images_are_read_only():
    with pytest.raises(TypeError):
        IMAGE1.cluster.brokers[9] = B1  # type: ignore[index]
    with pytest.raises(AttributeError):
        IMAGE1.offset = 3  # type: ignore[misc]
    assert isinstance(IMAGE1.topic("orders").partitions, MappingProxyType)


def test_unchanged_sub_images_are_shared():
    image = apply(IMAGE1, [(13, PartitionChange(CLICKS, 0, isr=(3,)))])
    assert image.cluster is IMAGE1.cluster
    assert image.configs is IMAGE1.configs
    assert image.features is IMAGE1.features
    assert image.producer_ids is IMAGE1.producer_ids
    assert image.topic_by_id(ORDERS) is IMAGE1.topic_by_id(ORDERS)
    assert image.topic_by_id(CLICKS) is not IMAGE1.topic_by_id(CLICKS)
    assert apply(IMAGE1, [(13, NoOp())]).topics is IMAGE1.topics


# (change, the partition it makes of ORDERS_0): epochs are derived here and nowhere else.
MERGES = [
    pytest.param(PartitionChange(ORDERS, 0, isr=(1, 2)),
                 PartitionRegistration(ORDERS, 0, (1, 2, 3), (1, 2), leader=1, partition_epoch=1),
                 id="isr-shrink-bumps-partition-epoch-only"),
    pytest.param(PartitionChange(ORDERS, 0, leader=2),
                 PartitionRegistration(ORDERS, 0, (1, 2, 3), (1, 2, 3), leader=2, leader_epoch=1,
                                       partition_epoch=1), id="new-leader-bumps-both"),
    pytest.param(PartitionChange(ORDERS, 0, leader=1),
                 PartitionRegistration(ORDERS, 0, (1, 2, 3), (1, 2, 3), leader=1, leader_epoch=1,
                                       partition_epoch=1), id="naming-the-same-leader-bumps-leader-epoch"),
    pytest.param(PartitionChange(ORDERS, 0, leader=NO_LEADER),
                 PartitionRegistration(ORDERS, 0, (1, 2, 3), (1, 2, 3), leader=NO_LEADER, leader_epoch=1,
                                       partition_epoch=1), id="going-leaderless-bumps-both"),
    pytest.param(PartitionChange(ORDERS, 0),
                 PartitionRegistration(ORDERS, 0, (1, 2, 3), (1, 2, 3), leader=1, partition_epoch=1),
                 id="empty-change-still-bumps-partition-epoch"),
    pytest.param(PartitionChange(ORDERS, 0, isr=(3,), leader=3, elr=(1, 2), replicas=(3, 1, 2),
                                 leader_recovery_state=RECOVERING),
                 PartitionRegistration(ORDERS, 0, (3, 1, 2), (3,), (1, 2), leader=3, leader_epoch=1,
                                       partition_epoch=1, leader_recovery_state=RECOVERING),
                 id="every-field"),
]


@pytest.mark.parametrize(("change", "expected"), MERGES)
def test_partition_change_replay(change, expected):
    assert apply(IMAGE1, [(13, change)]).partition(ORDERS, 0) == expected


def test_broker_epoch_is_the_offset_of_register_broker():
    image = apply(IMAGE1, [(40, RegisterBroker(4, "inc-4", listener(4), None))])
    assert image.broker(4) == BrokerRegistration(4, 40, "inc-4", listener(4), None, fenced=True)


def test_remove_topic_drops_partitions_and_configs():
    image = apply(IMAGE1, [(13, RemoveTopic(ORDERS)), (14, Topic("orders", AUDIT))])
    assert image.topic("orders") == TopicImage("orders", AUDIT)
    assert image.topic_by_id(ORDERS) is None
    assert image.config(TOPIC, "orders") == {}
    assert image.configs.resources == {}


def test_config_set_overwrite_and_delete():
    image = apply(IMAGE1, offsets([
        Config(TOPIC, "orders", "cleanup.policy", "compact"),
        Config(TOPIC, "orders", "retention.ms", "5"),
        Config(ConfigResourceType.BROKER, "", "min.insync.replicas", "2"),
        Config(ConfigResourceType.BROKER, "", "unknown.key", None),
    ], 13))
    assert image.config(TOPIC, "orders") == {"cleanup.policy": "compact", "retention.ms": "5"}
    assert image.config(ConfigResourceType.BROKER, "") == {"min.insync.replicas": "2"}
    assert image.config(ConfigResourceType.BROKER, "1") == {}


def test_unregister_and_re_register():
    image = apply(IMAGE1, [(13, UnregisterBroker(3, 3))])
    assert image.broker(3) is None
    image = apply(image, [(14, RegisterBroker(3, "inc-3c", listener(3), None, fenced=False))])
    assert image.broker(3).broker_epoch == 14


def test_begin_epoch_may_repeat_but_not_go_back():
    assert apply(IMAGE1, [(13, BeginEpoch(1)), (14, BeginEpoch(5))]).controller_epoch == 5


# (records applied to IMAGE1 from offset 13, part of the error message)
CONTRADICTIONS = [
    ([PartitionChange("nope", 0, isr=(1,))], "offset 13: PartitionChange: unknown topic id nope"),
    ([PartitionChange(ORDERS, 5, isr=(1,))], "unknown partition 5 of topic id ORDERS-id"),
    ([PartitionChange(ORDERS, 0, isr=(4,))], "isr [4] is not a subset of replicas [1, 2, 3]"),
    ([PartitionChange(ORDERS, 0, leader=9)], "leader 9 is not one of replicas"),
    ([PartitionChange(ORDERS, 0, elr=(1,))], "overlap"),
    ([Partition("nope", 0, (1,), (1,))], "Partition: unknown topic id nope"),
    ([Topic("other", ORDERS)], "topic id ORDERS-id already exists"),
    ([Topic("orders", AUDIT)], "topic name 'orders' is already used by topic id ORDERS-id"),
    ([RemoveTopic("nope")], "RemoveTopic: unknown topic id nope"),
    ([RemoveTopic(ORDERS), PartitionChange(ORDERS, 0, isr=(1,))], "offset 14: PartitionChange: unknown topic"),
    ([UnregisterBroker(9, 0)], "broker 9 is not registered"),
    ([UnregisterBroker(1, 2)], "broker 1 has broker_epoch 1, not 2"),
    ([BrokerRegistrationChange(1, 7, fenced=True)], "broker 1 has broker_epoch 1, not 7"),
    ([BrokerRegistrationChange(8, 7, fenced=True)], "broker 8 is not registered"),
    ([ProducerIds(1, 1, 1000), ProducerIds(1, 1, 1000)], "is not greater than the current 1000"),
    ([BeginEpoch(0)], "epoch 0 is older than controller epoch 1"),
    (["not a record"], "not a metadata record: str"),
]


@pytest.mark.parametrize(("records", "message"), CONTRADICTIONS, ids=[m for _, m in CONTRADICTIONS])
def test_contradicting_records_raise_metadata_record_error(records, message):
    before = apply(EMPTY_IMAGE, offsets(IMAGE1_RECORDS, 0))
    with pytest.raises(MetadataRecordError) as info:
        apply(IMAGE1, offsets(records, 13))
    assert message in str(info.value)
    assert IMAGE1 == before  # all or nothing: the input image is untouched


@pytest.mark.parametrize("offset", [12, 5, -1, "13", 13.0], ids=repr)
def test_offsets_must_increase(offset):
    with pytest.raises(MetadataRecordError, match="does not follow offset 12"):
        apply(IMAGE1, [(offset, NoOp())])


def test_offsets_may_have_gaps():
    assert apply(IMAGE1, [(20, NoOp()), (30, NoOp())]).offset == 30


def test_delta_cannot_replay_after_apply():
    delta = MetadataDelta(IMAGE1)
    delta.replay(NoOp(), 13)
    assert delta.apply().offset == 13
    with pytest.raises(RuntimeError):
        delta.replay(NoOp(), 14)


def _names(parts):
    return [(p.topic_name, p.partition_id) for p in parts]


# (records applied to IMAGE1 from offset 13, broker, deletes, leaders, elected_leaders, followers)
LOCAL_CHANGES = [
    pytest.param(DELTA1_RECORDS, 1, [], [], [], [("clicks", 0), ("orders", 0), ("orders", 1)],
                 id="broker-1-left-every-isr-but-still-follows"),
    pytest.param(DELTA1_RECORDS, 2, [], [("orders", 0), ("orders", 1)], [("orders", 0)], [],
                 id="broker-2-elected-for-orders-0-isr-change-on-orders-1"),
    pytest.param(DELTA1_RECORDS, 3, [], [("clicks", 0)], [], [("orders", 0), ("orders", 1)],
                 id="broker-3-leads-clicks-0-follows-orders"),
    pytest.param([NoOp()], 1, [], [], [], [], id="nothing-changed"),
    pytest.param([Partition(CLICKS, 0, (3, 1), (3, 1), leader=3)], 1, [], [], [], [],
                 id="identical-partition-record-changes-nothing"),
    pytest.param([RemoveTopic(CLICKS)], 1, [("clicks", 0)], [], [], [], id="topic-deleted"),
    pytest.param([RemoveTopic(CLICKS)], 2, [], [], [], [], id="topic-deleted-not-hosted"),
    pytest.param([PartitionChange(CLICKS, 0, replicas=(3, 2), isr=(3,))], 1, [("clicks", 0)], [], [], [],
                 id="reassigned-away"),
    pytest.param([PartitionChange(CLICKS, 0, replicas=(3, 2), isr=(3,))], 2, [], [], [], [("clicks", 0)],
                 id="reassigned-to"),
    pytest.param([Topic("audit", AUDIT), Partition(AUDIT, 0, (2, 1), (2, 1), leader=2),
                  Partition(AUDIT, 1, (1, 2), (1, 2), leader=1)], 1,
                 [], [("audit", 1)], [("audit", 1)], [("audit", 0)], id="new-topic"),
    pytest.param([RemoveTopic(CLICKS), Topic("clicks", AUDIT), Partition(AUDIT, 0, (1,), (1,), leader=1)], 1,
                 [("clicks", 0)], [("clicks", 0)], [("clicks", 0)], [], id="topic-recreated-under-new-id"),
    pytest.param([PartitionChange(CLICKS, 0, isr=(3,)), RemoveTopic(CLICKS)], 1, [("clicks", 0)], [], [], [],
                 id="changed-then-deleted"),
    pytest.param([RemoveTopic(CLICKS), Topic("clicks", CLICKS), Partition(CLICKS, 0, (2, 1), (2, 1), leader=2)], 1,
                 [], [], [], [("clicks", 0)], id="topic-recreated-under-the-same-id"),
]


@pytest.mark.parametrize(("records", "broker", "deletes", "leaders", "elected", "followers"), LOCAL_CHANGES)
def test_changes_for_broker(records, broker, deletes, leaders, elected, followers):
    """Comparing every partition of the touched topics, and looking only at the partitions the
    replay names as changed (what a broker does), find the same changes."""
    new, changed = apply_tracked(IMAGE1, offsets(records, 13))
    assert apply(IMAGE1, offsets(records, 13)) == new
    for changes in (changes_for_broker(IMAGE1, new, broker), changes_for_broker(IMAGE1, new, broker, changed)):
        assert _names(changes.deletes) == deletes
        assert _names(changes.leaders) == leaders
        assert _names(changes.elected_leaders) == elected
        assert _names(changes.followers) == followers


def test_changes_come_in_name_and_partition_order_whatever_the_order_of_changed():
    records = [PartitionChange(ORDERS, 1, isr=(2, 3)), PartitionChange(CLICKS, 0, isr=(3,)),
               PartitionChange(ORDERS, 0, isr=(2, 3))]
    new, changed = apply_tracked(IMAGE1, offsets(records, 13))
    for order in (sorted(changed), sorted(changed, reverse=True)):
        changes = changes_for_broker(IMAGE1, new, 3, order)
        assert _names(changes.followers) == [("orders", 0), ("orders", 1)]
        assert _names(changes.leaders) == [("clicks", 0)]
        assert changes_for_broker(IMAGE1, new, 2, order) == changes_for_broker(IMAGE1, new, 2)


def test_replay_names_only_the_partitions_records_replaced():
    records = [PartitionChange(ORDERS, 1, isr=(2,)), OfflineReplicas(2, 2, CLICKS, (0,)),
               Topic("audit", AUDIT), Partition(AUDIT, 0, (2, 1), (2, 1), leader=2), RemoveTopic(AUDIT)]
    _, changed = apply_tracked(IMAGE1, offsets(records, 13))
    assert changed == {(ORDERS, 1), (AUDIT, 0)}  # not CLICKS-0: OfflineReplicas replaces no partition


def test_changes_for_broker_carry_leader_and_leader_epoch():
    changes = changes_for_broker(IMAGE1, IMAGE2, 3)
    orders_0 = changes.followers[0]
    assert (orders_0.topic_id, orders_0.leader, orders_0.leader_epoch) == (ORDERS, 2, 1)
    assert changes_for_broker(IMAGE1, IMAGE1, 3) == LocalReplicaChanges()


@pytest.mark.parametrize(("build", "message"), [
    (lambda: TopicImage("t", ORDERS, {1: ORDERS_0}), "topic 't': partition 1 does not belong here"),
    (lambda: TopicImage("t", CLICKS, {0: ORDERS_0}), "topic 't': partition 0 does not belong here"),
    (lambda: TopicImage("", ORDERS), "topic ''.name: expected a non-empty string"),
    (lambda: ClusterImage([B1]), "ClusterImage.brokers: expected a mapping, got list"),
    (lambda: PartitionRegistration(ORDERS, 0, (1, 2), (3,)), "partition ORDERS-id-0: isr [3] is not a subset"),
    (lambda: MetadataImage(offset=-2), "MetadataImage.offset"),
], ids=["wrong-partition-id", "wrong-topic-id", "empty-name", "not-a-mapping", "bad-partition", "bad-offset"])
def test_images_are_validated_at_construction(build, message):
    with pytest.raises(MetadataRecordError) as info:
        build()
    assert message in str(info.value)


def test_an_instance_builder_takes_exactly_its_fields():
    values = [getattr(ORDERS_0, name) for name in PARTITION_KINDS]
    assert PartitionRegistration.from_checked(values) == ORDERS_0
    with pytest.raises(ValueError):
        PartitionRegistration.from_checked(values[:-1])
    with pytest.raises(TypeError, match="not a slotted class"):
        instance_builder(TopicImage, ("name", "colour"))
