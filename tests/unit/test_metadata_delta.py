"""Tests for metadata/delta.py's split_changes (the replay rules are tested through their users)."""

from __future__ import annotations

import pytest

from metadata.image import PARTITION_KINDS, PartitionRegistration
from metadata.local_changes import LocalPartition, LocalReplicaChanges, split_changes
from metadata.records import _SCHEMAS, LeaderRecoveryState, Partition

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
