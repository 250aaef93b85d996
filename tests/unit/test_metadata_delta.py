"""Tests for metadata/delta.py's split_changes, merge_partition_change and writable (the replay rules
are tested through their users)."""

from __future__ import annotations

import collections
import dataclasses

import pytest

from common.units import INT_MAX
from metadata.codec import MetadataRecordError
from metadata.delta import merge_partition_change, writable
from metadata.image import EMPTY_MAP, PARTITION_KINDS, PartitionRegistration, frozen_map
from metadata.local_changes import LocalPartition, LocalReplicaChanges, split_changes
from metadata.records import _SCHEMAS, NO_LEADER, LeaderRecoveryState, Partition, PartitionChange

# --- split_changes: a large change set in slices, Kafka's order kept ------------------

def _local(topic: str, partition_id: int) -> LocalPartition:
    registration = PartitionRegistration(topic_id=f"id-{topic}", partition_id=partition_id, replicas=(1,),
                                         isr=(1,), elr=(), leader=1, leader_epoch=0, partition_epoch=0)
    return LocalPartition(topic, f"id-{topic}", partition_id, registration)


@pytest.mark.parametrize("max_partitions", [1, 2, 3, 5, 100])
def test_split_changes_keeps_every_partition_in_order(max_partitions: int) -> None:
    deletes = tuple(_local("gone", i) for i in range(3))
    leaders = tuple(_local("led", i) for i in range(5))
    followers = tuple(_local("followed", i) for i in range(4))
    changes = LocalReplicaChanges(deletes=deletes, leaders=leaders, elected_leaders=leaders[1::2],
                                  followers=followers)
    pieces = split_changes(changes, max_partitions)
    assert all(len(p.deletes) + len(p.leaders) + len(p.followers) <= max_partitions for p in pieces)
    assert sum((p.deletes for p in pieces), ()) == deletes
    assert sum((p.leaders for p in pieces), ()) == leaders
    assert sum((p.elected_leaders for p in pieces), ()) == leaders[1::2]
    assert sum((p.followers for p in pieces), ()) == followers
    kinds = [k for p in pieces for k in ("deletes", "leaders", "followers") if getattr(p, k)]
    assert kinds == sorted(kinds, key=["deletes", "leaders", "followers"].index)  # Kafka's order
    assert all(set(p.elected_leaders) <= set(p.leaders) for p in pieces)
    if max_partitions >= 12:
        assert pieces == [changes]


def test_split_changes_refuses_an_empty_slice() -> None:
    with pytest.raises(ValueError):
        split_changes(LocalReplicaChanges(), 0)


# --- a Partition record replays without being checked twice -------------------------------

@pytest.mark.parametrize("record", [
    Partition("T", 0, (1, 2, 3), (1, 2), leader=1, leader_epoch=4, partition_epoch=7),
    Partition("T", 1, (3,), (), elr=(3,), leader=-1, leader_recovery_state=LeaderRecoveryState.RECOVERING),
    Partition("T", 2, (1, 2, 4), (1, 2), leader=2, removing_replicas=(4,), adding_replicas=(1,)),
])
def test_partition_registration_from_record_equals_the_checked_constructor(record: Partition) -> None:
    fields = {name: getattr(record, name) for name in PARTITION_KINDS}
    assert PartitionRegistration.from_record(record) == PartitionRegistration(**fields)


def test_partition_record_and_registration_check_the_same_fields_the_same_way() -> None:
    # from_record trusts the record's checks: the two must never drift apart
    def shape(kinds):  # a kind is known by its class and settings
        return {name: (type(kind), vars(kind)) for name, kind in kinds.items()}

    assert shape(_SCHEMAS[Partition].kinds) == shape(PARTITION_KINDS)


# --- a merged PartitionChange is checked across fields, not field by field again ------------

BASE = PartitionRegistration(topic_id="T", partition_id=3, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1,
                             leader_epoch=4, partition_epoch=7)


@pytest.mark.parametrize("change", [
    PartitionChange("T", 3, isr=(1, 2)),
    PartitionChange("T", 3, leader=2, isr=(2, 3)),
    PartitionChange("T", 3, isr=(1,), elr=(2, 3)),
    PartitionChange("T", 3, replicas=(1, 2, 3, 4), adding_replicas=(4,), removing_replicas=(3,)),
    PartitionChange("T", 3, leader=NO_LEADER, isr=(), leader_recovery_state=LeaderRecoveryState.RECOVERING),
])
def test_merge_equals_the_checked_constructor(change: PartitionChange) -> None:
    merged = merge_partition_change(BASE, change)
    fields = {name: getattr(merged, name) for name in PARTITION_KINDS}
    assert merged == PartitionRegistration(**fields)
    assert merged.partition_epoch == BASE.partition_epoch + 1


@pytest.mark.parametrize(("base", "change", "fault"), [
    (BASE, PartitionChange("T", 3, isr=(1, 7)), "not a subset of replicas"),
    (BASE, PartitionChange("T", 3, leader=7), "is not one of replicas"),
    (BASE, PartitionChange("T", 3, elr=(1,)), "overlap"),
    (BASE, PartitionChange("T", 3, adding_replicas=(4,)), "disjoint subsets"),
    (dataclasses.replace(BASE, partition_epoch=INT_MAX), PartitionChange("T", 3, isr=(1, 2)), "partition_epoch"),
    (dataclasses.replace(BASE, leader_epoch=INT_MAX), PartitionChange("T", 3, leader=2), "leader_epoch"),
])
def test_merge_refuses_a_change_the_partition_cannot_take(base: PartitionRegistration, change: PartitionChange,
                                                          fault: str) -> None:
    with pytest.raises(MetadataRecordError, match=fault):
        merge_partition_change(base, change)


def test_writable_is_a_private_copy_of_an_image_mapping() -> None:
    image_map = frozen_map({1: "a", 2: "b"})
    copy = writable(image_map)
    copy[3] = "c"
    assert type(copy) is dict and dict(image_map) == {1: "a", 2: "b"}
    assert writable(EMPTY_MAP) == {} and writable(collections.OrderedDict(x=1)) == {"x": 1}
