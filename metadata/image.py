"""MetadataImage: the immutable cluster state the metadata log describes at one offset.

Split like Kafka's image package (ClusterImage, TopicsImage, ConfigurationsImage,
FeaturesImage, ProducerIdsImage) so that applying a batch rebuilds only the sub-images
it touches and shares the rest. Every mapping is a `MappingProxyType` over a dict that
nothing else holds; nothing here mutates after construction. Only `metadata.delta`
builds new images from records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from types import MappingProxyType
from typing import Any, NamedTuple

from metadata.codec import (
    BOOL,
    BROKER_ID,
    EPOCH32,
    IDS,
    INT64,
    LISTENERS,
    NAME,
    OFFSET,
    OPT_STR,
    PARTITION_ID,
    REPLICA_KEYS,
    Enum,
    Int,
    Listener,
    MetadataRecordError,
    check_fields,
    instance_builder,
)
from metadata.records import (
    LEADER,
    NO_LEADER,
    AccessControlEntry,
    ConfigResourceType,
    UserScramCredential,
    LeaderRecoveryState,
    Partition,
    check_partition_state,
)

EMPTY_MAP: Mapping[Any, Any] = MappingProxyType({})


def frozen_map(items: Mapping[Any, Any] | None = None) -> Mapping[Any, Any]:
    """A read-only copy of `items` (or the shared empty map)."""
    return MappingProxyType(dict(items)) if items else EMPTY_MAP


def _freeze(obj: Any, name: str, where: str) -> None:
    value = getattr(obj, name)
    if isinstance(value, MappingProxyType):
        return  # already private and read-only: share it (structural sharing)
    if not isinstance(value, Mapping):
        raise MetadataRecordError(f"{where}.{name}: expected a mapping, got {type(value).__name__}")
    object.__setattr__(obj, name, frozen_map(value))


BROKER_KINDS = MappingProxyType(dict(
    broker_id=BROKER_ID, broker_epoch=INT64, incarnation_id=NAME, listeners=LISTENERS,
    rack=OPT_STR, fenced=BOOL, in_controlled_shutdown=BOOL, offline_replicas=REPLICA_KEYS))
# Left out of a snapshot when empty, so snapshots written before offline replicas read the same.
BROKER_OPTIONAL: Mapping[str, Any] = MappingProxyType({"offline_replicas": frozenset()})


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker; broker_epoch is the offset of its RegisterBroker record."""

    broker_id: int
    broker_epoch: int
    incarnation_id: str
    listeners: tuple[Listener, ...]
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    # (topic_id, partition_id) of the replicas this incarnation could not open (OfflineReplicas
    # records); a new registration starts without any, as a restarted Kafka broker's log dirs
    # are online again until they fail anew.
    offline_replicas: frozenset[tuple[str, int]] = frozenset()

    def __post_init__(self) -> None:
        check_fields(self, BROKER_KINDS, "BrokerRegistration")

    def is_replica_offline(self, topic_id: str, partition_id: int) -> bool:
        """Whether this broker's replica of the partition failed (it never serves nor joins the ISR)."""
        return (topic_id, partition_id) in self.offline_replicas

    @property
    def is_active(self) -> bool:
        """Unfenced and not shutting down: may lead partitions and join ISRs (Kafka's isActive)."""
        return not self.fenced and not self.in_controlled_shutdown


PARTITION_KINDS = MappingProxyType(dict(
    topic_id=NAME, partition_id=PARTITION_ID, replicas=IDS, isr=IDS, elr=IDS, leader=LEADER,
    leader_epoch=EPOCH32, partition_epoch=EPOCH32, leader_recovery_state=Enum(LeaderRecoveryState),
    removing_replicas=IDS, adding_replicas=IDS))
# Left out of a snapshot when empty, so snapshots written before KIP-455 read the same.
PARTITION_OPTIONAL: Mapping[str, Any] = MappingProxyType({"removing_replicas": (), "adding_replicas": ()})
_PARTITION_NAMES = tuple(PARTITION_KINDS)
_partition_values = attrgetter(*_PARTITION_NAMES)  # a Partition record's (or registration's) fields, in order


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """The state of one partition, as Kafka's PartitionRegistration; while a reassignment
    (KIP-455) runs, replicas = target + the current replicas not in it, and adding_replicas /
    removing_replicas say which are which."""

    topic_id: str
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        where = f"partition {self.topic_id}-{self.partition_id}"
        check_fields(self, PARTITION_KINDS, where)
        check_partition_state(self.replicas, self.isr, self.elr, self.leader, where,
                              self.adding_replicas, self.removing_replicas)

    @classmethod
    def from_record(cls, record: Partition) -> PartitionRegistration:
        """The registration a Partition record replays to. The record checked these very fields
        with the same kinds and `check_partition_state` when it was built, so they are not checked
        twice (replaying a 10,000-partition topic did, on every controller and broker)."""
        return _new_registration(_partition_values(record))  # the record has the same fields

    @classmethod
    def merged(cls, fields: Mapping[str, Any]) -> PartitionRegistration:
        """A registration whose fields each passed their kind's check already (an image's
        partition merged with a PartitionChange record, which checked its own fields when it
        was built): only what the merge derives, the bumped epochs, and Kafka's structural
        rules across fields are checked again. The full per-field check was 10 % of an active
        controller's CPU replaying ISR changes at 30,000 partitions."""
        return cls.merged_values([fields[name] for name in _PARTITION_NAMES])

    @classmethod
    def merged_values(cls, values: Sequence[Any]) -> PartitionRegistration:
        """`merged` for field values in PARTITION_KINDS order (no map built per record): the
        leader_epoch and partition_epoch (values 6 and 7) and the structural rules are checked."""
        (topic_id, partition_id, replicas, isr, elr, leader, leader_epoch, partition_epoch, _,
         removing, adding) = values
        if type(leader_epoch) is not int or not 0 <= leader_epoch <= EPOCH32.hi:
            EPOCH32.check(leader_epoch, f"partition {topic_id}-{partition_id}.leader_epoch")
        if type(partition_epoch) is not int or not 0 <= partition_epoch <= EPOCH32.hi:
            EPOCH32.check(partition_epoch, f"partition {topic_id}-{partition_id}.partition_epoch")
        try:  # the partition is named only when a rule fails: formatting it per record cost more than the check
            check_partition_state(replicas, isr, elr, leader, "", adding, removing)
        except MetadataRecordError:
            check_partition_state(replicas, isr, elr, leader, f"partition {topic_id}-{partition_id}", adding, removing)
            raise
        return _new_registration(values)

    @classmethod
    def from_checked(cls, values: Sequence[Any]) -> PartitionRegistration:
        """The registration of field values in PARTITION_KINDS order, each checked as its kind and
        `check_partition_state` would already (a decoder's fast path)."""
        return _new_registration(values)

    @property
    def is_reassigning(self) -> bool:
        """Kafka's isReassigning: a reassignment adds or removes replicas."""
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once the reassignment completes (the replicas when none runs)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment (what a cancel reverts to)."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    @property
    def preferred_replica(self) -> int:
        """The first replica in assignment order."""
        return self.replicas[0]


_new_registration = instance_builder(PartitionRegistration, _PARTITION_NAMES)


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic and its partitions by partition id."""

    name: str
    topic_id: str
    partitions: Mapping[int, PartitionRegistration] = field(default_factory=lambda: EMPTY_MAP)

    def __post_init__(self) -> None:
        where = f"topic {self.name!r}"
        NAME.check(self.name, f"{where}.name")
        NAME.check(self.topic_id, f"{where}.topic_id")
        _freeze(self, "partitions", where)
        for partition_id, partition in self.partitions.items():
            if (not isinstance(partition, PartitionRegistration) or partition.partition_id != partition_id
                    or partition.topic_id != self.topic_id):
                raise MetadataRecordError(f"{where}: partition {partition_id} does not belong here")

    @classmethod
    def replayed(cls, name: str, topic_id: str, partitions: MappingProxyType[int, PartitionRegistration],
                 ) -> TopicImage:
        """The topic `metadata.delta` built: replay put each partition under its own topic id and
        partition id, so the per-partition check above is not run again. It ran once per applied
        chunk over the whole topic: O(partitions) for each ~100-record chunk of a 10,000-partition
        topic's creation, on every controller and broker."""
        topic = object.__new__(cls)
        object.__setattr__(topic, "name", name)
        object.__setattr__(topic, "topic_id", topic_id)
        object.__setattr__(topic, "partitions", partitions)
        return topic


@dataclass(frozen=True, slots=True)
class ClusterImage:
    """Registered brokers by broker id."""

    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: EMPTY_MAP)

    def __post_init__(self) -> None:
        _freeze(self, "brokers", "ClusterImage")


@dataclass(frozen=True, slots=True)
class TopicsImage:
    """Topics by topic id; `by_name` and `reassigning` are derived and always agree.

    `reassigning` holds (topic id, partition id) of every partition a reassignment runs on
    (Kafka's ReplicationControlManager.reassigningTopics): what looks for reassignments to
    complete or list reads it instead of every partition. Built by one pass here (a snapshot,
    a test's image); `metadata.delta` keeps it up to date record by record (`replayed`)."""

    by_id: Mapping[str, TopicImage] = field(default_factory=lambda: EMPTY_MAP)
    by_name: Mapping[str, TopicImage] = field(init=False, compare=False, repr=False)
    reassigning: frozenset[tuple[str, int]] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        _freeze(self, "by_id", "TopicsImage")
        by_name = {topic.name: topic for topic in self.by_id.values()}
        if len(by_name) != len(self.by_id):
            raise MetadataRecordError("TopicsImage: two topics share a name")
        object.__setattr__(self, "by_name", frozen_map(by_name))
        object.__setattr__(self, "reassigning", frozenset(
            (topic_id, partition_id) for topic_id, topic in self.by_id.items()
            for partition_id, partition in topic.partitions.items() if partition.is_reassigning))

    @classmethod
    def replayed(cls, by_id: MappingProxyType[str, TopicImage], by_name: MappingProxyType[str, TopicImage],
                 reassigning: frozenset[tuple[str, int]]) -> TopicsImage:
        """The topics `metadata.delta` built, with the derived maps it kept up to date (no pass
        over every partition per applied batch)."""
        topics = object.__new__(cls)
        object.__setattr__(topics, "by_id", by_id)
        object.__setattr__(topics, "by_name", by_name)
        object.__setattr__(topics, "reassigning", reassigning)
        return topics


class ConfigResource(NamedTuple):
    """What a config applies to; BROKER "" is the cluster-wide default."""

    resource_type: ConfigResourceType
    resource_name: str


@dataclass(frozen=True, slots=True)
class ConfigurationsImage:
    """Explicitly set configs (key -> value) per resource; absent resources have none."""

    resources: Mapping[ConfigResource, Mapping[str, str]] = field(default_factory=lambda: EMPTY_MAP)

    def __post_init__(self) -> None:
        _freeze(self, "resources", "ConfigurationsImage")


@dataclass(frozen=True, slots=True)
class FeaturesImage:
    """Finalised feature levels by feature name."""

    levels: Mapping[str, int] = field(default_factory=lambda: EMPTY_MAP)

    def __post_init__(self) -> None:
        _freeze(self, "levels", "FeaturesImage")


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    """Where the next producer-id block starts; -1 until a block was handed out."""

    next_producer_id_block_start: int = -1


@dataclass(frozen=True, slots=True)
class AclsImage:
    """ACLs by their id (AccessControlEntry records, as replayed); Kafka's AclsImage."""

    by_id: Mapping[str, AccessControlEntry] = field(default_factory=lambda: EMPTY_MAP)

    def __post_init__(self) -> None:
        _freeze(self, "by_id", "AclsImage")


@dataclass(frozen=True, slots=True)
class ScramImage:
    """SCRAM credentials by (user name, mechanism code) (UserScramCredential records, as
    replayed); Kafka's ScramImage."""

    credentials: Mapping[tuple[str, int], UserScramCredential] = field(default_factory=lambda: EMPTY_MAP)

    def __post_init__(self) -> None:
        _freeze(self, "credentials", "ScramImage")


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The whole metadata state after applying every record up to and including `offset`."""

    offset: int = -1
    controller_epoch: int = -1
    cluster: ClusterImage = ClusterImage()
    topics: TopicsImage = TopicsImage()
    configs: ConfigurationsImage = ConfigurationsImage()
    features: FeaturesImage = FeaturesImage()
    producer_ids: ProducerIdsImage = ProducerIdsImage()
    acls: AclsImage = AclsImage()
    scram: ScramImage = ScramImage()

    def __post_init__(self) -> None:
        OFFSET.check(self.offset, "MetadataImage.offset")
        Int(-1, 2**63 - 1).check(self.controller_epoch, "MetadataImage.controller_epoch")

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.cluster.brokers.get(broker_id)

    def failed_replicas(self, partition: PartitionRegistration) -> tuple[int, ...]:
        """The partition's replicas whose broker could not open them (OfflineReplicas records of
        its current registration), in replica order."""
        brokers = self.cluster.brokers
        out = []
        for replica in partition.replicas:
            registration = brokers.get(replica)
            # almost every broker has no offline replica: skip the lookup (a topic view of 10,000
            # partitions asks this for each of them)
            if registration is not None and registration.offline_replicas and registration.is_replica_offline(
                    partition.topic_id, partition.partition_id):
                out.append(replica)
        return tuple(out)

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.by_name.get(name)

    def topic_by_id(self, topic_id: str) -> TopicImage | None:
        return self.topics.by_id.get(topic_id)

    def partition(self, topic_id: str, partition_id: int) -> PartitionRegistration | None:
        topic = self.topics.by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    def config(self, resource_type: ConfigResourceType, resource_name: str) -> Mapping[str, str]:
        """Explicit configs of one resource (empty when none were set)."""
        return self.configs.resources.get(ConfigResource(resource_type, resource_name), EMPTY_MAP)

    def feature_level(self, name: str) -> int:
        """The finalised level of a feature; 0 when it is not finalised."""
        return self.features.levels.get(name, 0)


EMPTY_IMAGE = MetadataImage()
