"""What changed for one broker between two metadata images (Kafka's LocalReplicaChanges and
TopicsDelta.localChanges): the partitions it now leads, follows or must delete, and the
slicing that lets a broker apply a 10,000-partition change set a slice at a time.

Pure: images in, frozen changes out; the replica manager acts on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from metadata.image import EMPTY_MAP, MetadataImage, PartitionRegistration


@dataclass(frozen=True, slots=True)
class LocalPartition:
    """One partition a broker must act on, with its new registration (its last one if deleted)."""

    topic_name: str
    topic_id: str
    partition_id: int
    partition: PartitionRegistration

    @property
    def leader(self) -> int:
        return self.partition.leader

    @property
    def leader_epoch(self) -> int:
        return self.partition.leader_epoch


@dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    """Kafka's LocalReplicaChanges: what changed for one broker between two images.

    leaders: partitions it leads whose registration changed; elected_leaders: the subset
    whose leader_epoch changed (it was just elected); followers: partitions it follows
    whose registration changed; deletes: partitions it no longer hosts.
    """

    deletes: tuple[LocalPartition, ...] = ()
    leaders: tuple[LocalPartition, ...] = ()
    elected_leaders: tuple[LocalPartition, ...] = ()
    followers: tuple[LocalPartition, ...] = ()


def split_changes(changes: LocalReplicaChanges, max_partitions: int) -> list[LocalReplicaChanges]:
    """`changes` cut into slices of at most `max_partitions` partitions, in Kafka's order
    (deletes, then leaders, then followers), each elected leader in the slice of its leader.

    A broker applies a 10,000-partition change set slice by slice and lets its event loop run
    between slices (heartbeats, requests), as Kafka's publisher applies partitions one by one
    while request threads serve; the image handed with every slice is the whole new image."""
    if max_partitions < 1:
        raise ValueError("max_partitions must be at least 1")
    total = len(changes.deletes) + len(changes.leaders) + len(changes.followers)
    if total <= max_partitions:
        return [changes]
    elected = {(p.topic_name, p.partition_id) for p in changes.elected_leaders}
    out: list[LocalReplicaChanges] = []
    for kind in ("deletes", "leaders", "followers"):
        parts: tuple[LocalPartition, ...] = getattr(changes, kind)
        for start in range(0, len(parts), max_partitions):  # bounded by the partition count
            part = parts[start:start + max_partitions]
            if kind == "leaders":
                chosen = tuple(p for p in part if (p.topic_name, p.partition_id) in elected)
                out.append(LocalReplicaChanges(leaders=part, elected_leaders=chosen))
            else:
                out.append(LocalReplicaChanges(**{kind: part}))
    return out


def _sorted(parts: list[LocalPartition]) -> tuple[LocalPartition, ...]:
    return tuple(sorted(parts, key=lambda p: (p.topic_name, p.partition_id)))


def changes_for_broker(old: MetadataImage, new: MetadataImage, broker_id: int) -> LocalReplicaChanges:
    """The partitions `broker_id` now leads, follows or must delete (Kafka's TopicsDelta.localChanges)."""
    if old.topics is new.topics:
        return LocalReplicaChanges()
    deletes: list[LocalPartition] = []
    leaders: list[LocalPartition] = []
    elected: list[LocalPartition] = []
    followers: list[LocalPartition] = []
    for topic_id, topic in new.topics.by_id.items():
        old_topic = old.topics.by_id.get(topic_id)
        if old_topic is topic:
            continue  # structural sharing: an untouched topic is the same object
        old_parts = EMPTY_MAP if old_topic is None else old_topic.partitions
        for partition_id, partition in topic.partitions.items():
            prev = old_parts.get(partition_id)
            if prev == partition:
                continue
            if broker_id not in partition.replicas:
                if prev is not None and broker_id in prev.replicas:
                    deletes.append(LocalPartition(topic.name, topic_id, partition_id, partition))
                continue
            local = LocalPartition(topic.name, topic_id, partition_id, partition)
            if partition.leader == broker_id:
                leaders.append(local)
                if prev is None or prev.leader_epoch != partition.leader_epoch:
                    elected.append(local)
            else:
                followers.append(local)
    for topic_id, old_topic in old.topics.by_id.items():
        if topic_id not in new.topics.by_id:
            deletes.extend(LocalPartition(old_topic.name, topic_id, partition_id, partition)
                           for partition_id, partition in old_topic.partitions.items()
                           if broker_id in partition.replicas)
    return LocalReplicaChanges(_sorted(deletes), _sorted(leaders), _sorted(elected), _sorted(followers))
