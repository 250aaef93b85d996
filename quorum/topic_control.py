"""Topic rules: create and delete topics, add partitions, alter topic configs.

Kafka's ReplicationControlManager (topic half) and ConfigurationControlManager (topic
configs) as plain functions over the committed image. Each validates its request and
raises `ControllerApiError` before producing any record, then returns the records.

Kafka's choices kept here: a topic's configs are written before its Topic record (so a
broker never creates a partition log without them); a new partition's replicas come
from `metadata.placement.place_replicas` over the active brokers; its ISR is the
replicas and its leader the first one, at leader_epoch 0 and partition_epoch 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from common.config import parse_config
from common.config_schema import ConfigError, Value
from common.errors import ErrorCode
from common.limits import MAX_RECORDS_PER_USER_OP
from common.protocol.api_versions import ELR_VERSION
from common.topic_config import (
    MIN_INSYNC_REPLICAS,
    TOPIC_CONFIG_KEYS,
    TOPIC_CONFIGS_BY_NAME,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    config_string,
    default_bool,
    default_int,
    default_value,
)
from metadata.image import MetadataImage, PartitionRegistration, TopicImage
from metadata.partition_change import Election, elect_leader
from metadata.placement import eligible_brokers, place_replicas
from metadata.records import (
    NO_LEADER,
    Config,
    ConfigResourceType,
    Partition,
    Record,
    RemoveTopic,
    Topic,
)
from metadata.topic_name import topic_name_error
from quorum.controller_result import ControllerApiError, ControllerResult
from quorum.feature_control import elr_clearing_records
from quorum.replica_assignment import new_partition_assignments, topic_assignments

if TYPE_CHECKING:  # the caller owns the generator: no global random here
    from random import Random

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

ELR_FEATURE: Final = ELR_VERSION  # KIP-966's feature: level >= 1 enables ELR (finalized by quorum.feature_control)
TOPIC = ConfigResourceType.TOPIC
# The topic configs tidelog accepts, their checks and defaults: common.topic_config, the one
# table the brokers' LogConfig and DescribeConfigs read too.
MIN_COMPACTION_LAG_MS: Final = "min.compaction.lag.ms"
MAX_COMPACTION_LAG_MS: Final = "max.compaction.lag.ms"
_KEYS_BY_NAME: Final = {name: d.key for name, d in TOPIC_CONFIGS_BY_NAME.items()}


def validate_topic_name(name: str, existing: Iterable[str] = ()) -> None:
    """Kafka's Topic.validate, plus the '.'/'_' collision check against `existing` names."""
    problem = topic_name_error(name, existing)
    if problem is not None:
        raise ControllerApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem, field="name")


def validate_topic_config(key: str, value: object) -> str:
    """The canonical string of one topic config value; INVALID_CONFIG naming the key otherwise."""
    try:
        parsed = parse_config({key: value}, keys=TOPIC_CONFIG_KEYS, checks=())
    except ConfigError as exc:
        raise ControllerApiError(ErrorCode.INVALID_CONFIG, str(exc), field=key) from None
    if key not in parsed.originals:
        raise ControllerApiError(ErrorCode.INVALID_CONFIG, f"config {key!r} has no value", field=key)
    return config_string(parsed.originals[key])


def check_config_set(configs: Mapping[str, str]) -> None:
    """Kafka's LogConfig.validateValues over a topic's whole set (each value already valid alone)."""
    def effective(key: str) -> int:
        value = configs[key] if key in configs else default_value(key)
        assert isinstance(value, int | str), f"{key} is a LONG config"
        return int(value)

    low, high = effective(MIN_COMPACTION_LAG_MS), effective(MAX_COMPACTION_LAG_MS)
    if low > high:
        raise ControllerApiError(ErrorCode.INVALID_CONFIG, f"conflict topic config setting {MIN_COMPACTION_LAG_MS} "
                                 f"({low}) > {MAX_COMPACTION_LAG_MS} ({high})", field=MIN_COMPACTION_LAG_MS)


@dataclass(frozen=True, slots=True)
class TopicElectionConfig:
    """The settings the election and ISR rules read for one topic."""

    unclean_allowed: bool = default_bool(UNCLEAN_LEADER_ELECTION_ENABLE)
    min_insync_replicas: int = default_int(MIN_INSYNC_REPLICAS)
    elr_enabled: bool = False


def topic_election_config(image: MetadataImage, topic_name: str) -> TopicElectionConfig:
    """Topic config, else the cluster default (broker ""), else Kafka's default; ELR from its feature."""
    sources = (image.config(TOPIC, topic_name), image.config(ConfigResourceType.BROKER, ""))

    def value(key: str, default: Value) -> Value:
        for source in sources:
            raw = source.get(key)
            if raw is not None:
                try:
                    return _KEYS_BY_NAME[key].parse(raw)
                except ConfigError:
                    continue  # written by something else: fall back rather than fail elections
        return default

    defaults = TopicElectionConfig()
    return TopicElectionConfig(unclean_allowed=bool(value(UNCLEAN_LEADER_ELECTION_ENABLE,
                                                          defaults.unclean_allowed)),
                               min_insync_replicas=int(value(MIN_INSYNC_REPLICAS,  # type: ignore[arg-type]
                                                             defaults.min_insync_replicas)),
                               elr_enabled=image.feature_level(ELR_FEATURE) >= 1)


@dataclass(frozen=True, slots=True)
class TopicCreated:
    """CreateTopics' answer for one topic: assignments[p] are partition p's replicas."""

    name: str
    topic_id: str
    partitions: int
    replication_factor: int
    assignments: tuple[tuple[int, ...], ...]
    configs: tuple[tuple[str, str], ...]


def _require_topic(image: MetadataImage, name: str) -> TopicImage:
    topic = image.topic(name)
    if topic is None:
        raise ControllerApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"Topic '{name}' does not exist.", field="name")
    return topic


def _check_partition_count(count: object, field: str) -> int:
    if type(count) is not int or count <= 0:
        raise ControllerApiError(ErrorCode.INVALID_PARTITIONS,
                                 f"Number of partitions must be larger than 0, got {count!r}", field=field)
    if count > MAX_RECORDS_PER_USER_OP:
        raise ControllerApiError(ErrorCode.INVALID_PARTITIONS,
                                 f"Number of partitions {count} is more than {MAX_RECORDS_PER_USER_OP}, "
                                 "the most one request may create", field=field)
    return count


def _check_replication_factor(image: MetadataImage, replication_factor: object) -> int:
    if type(replication_factor) is not int or replication_factor <= 0:
        raise ControllerApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"Replication factor must be larger than 0, got {replication_factor!r}",
                                 field="replication_factor")
    available = [b.broker_id for b in eligible_brokers(image.cluster.brokers.values())]
    if replication_factor > len(available):
        raise ControllerApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication_factor} time(s): the target replication "
            f"factor of {replication_factor} cannot be reached because only {len(available)} broker(s) "
            f"are available (unfenced and not shutting down): {available}", field="replication_factor")
    return replication_factor


def _new_partitions(image: MetadataImage, topic_id: str,
                    assignments: Mapping[int, tuple[int, ...]]) -> list[Partition]:
    """Partition records: ISR = the active replicas, leader = the first of them."""
    out = []
    for partition_id, replicas in sorted(assignments.items()):
        isr = tuple(r for r in replicas if (b := image.broker(r)) is not None and b.is_active)
        out.append(Partition(topic_id, partition_id, replicas, isr,
                             leader=isr[0] if isr else NO_LEADER, leader_epoch=0, partition_epoch=0))
    return out


def create_topic(image: MetadataImage, *, name: str, partitions: int, replication_factor: int,
                 configs: Mapping[str, str], topic_id: str, rng: Random,
                 assignments: Sequence[tuple[int, Sequence[int]]] = ()) -> ControllerResult[TopicCreated]:
    """CreateTopics for one topic: its Config records, Topic record and Partition records.

    `assignments` (partition index, replicas) are Kafka's manual assignments: then `partitions`
    and `replication_factor` must be -1 (`quorum.replica_assignment`). A validate_only request
    runs this same rule and appends nothing."""
    if image.topic(name) is not None:
        raise ControllerApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.",
                                 field="name")
    validate_topic_name(name, image.topics.by_name)
    if assignments:
        placed = topic_assignments(image, assignments, num_partitions=partitions,
                                   replication_factor=replication_factor)
        _check_partition_count(len(placed), "assignments")
    else:
        _check_partition_count(partitions, "partitions")
        _check_replication_factor(image, replication_factor)
    canonical = {key: validate_topic_config(key, value) for key, value in sorted(configs.items())}
    check_config_set(canonical)
    if not isinstance(topic_id, str) or not topic_id or image.topic_by_id(topic_id) is not None:
        raise ControllerApiError(ErrorCode.INVALID_REQUEST,
                                 f"topic id {topic_id!r} is empty or already in use", field="topic_id")
    if not assignments:
        placed = place_replicas(image.cluster.brokers.values(), partitions=partitions,
                                replication_factor=replication_factor, rng=rng)
    records: list[Record] = [Config(TOPIC, name, key, value) for key, value in canonical.items()]
    records.append(Topic(name, topic_id))
    records.extend(_new_partitions(image, topic_id, placed))
    created = TopicCreated(name, topic_id, len(placed), len(placed[0]),
                           tuple(placed[p] for p in range(len(placed))), tuple(canonical.items()))
    return ControllerResult(records, created)


def delete_topic(image: MetadataImage, name: str) -> ControllerResult[None]:
    """DeleteTopics for one topic: RemoveTopic (replay drops its partitions and configs)."""
    topic = _require_topic(image, name)
    return ControllerResult((RemoveTopic(topic.topic_id),), None)


def _kafka_start_index(image: MetadataImage, partition0: PartitionRegistration) -> int:
    """Kafka's addPartitions start: the first broker (by id) at or after partition 0's first replica."""
    ids = [b.broker_id for b in eligible_brokers(image.cluster.brokers.values())]
    return next((i for i, broker_id in enumerate(ids) if broker_id >= partition0.replicas[0]), 0)


def create_partitions(image: MetadataImage, name: str, total_count: int, rng: Random,
                      assignments: Sequence[Sequence[int]] | None = None,
                      ) -> ControllerResult[dict[int, tuple[int, ...]]]:
    """CreatePartitions: grow a topic to total_count partitions; the reply maps new ids to replicas.
    `assignments` are Kafka's manual ones, one replica list per new partition."""
    topic = _require_topic(image, name)
    current = len(topic.partitions)  # partition ids are dense: 0..current-1
    if current == 0:
        raise ControllerApiError(ErrorCode.INVALID_REQUEST, f"Topic '{name}' has no partitions.",
                                 field="name")
    _check_partition_count(total_count, "total_count")
    if total_count == current:
        raise ControllerApiError(ErrorCode.INVALID_PARTITIONS,
                                 f"Topic already has {current} partition(s).", field="total_count")
    if total_count < current:
        raise ControllerApiError(ErrorCode.INVALID_PARTITIONS,
                                 f"The topic {name} currently has {current} partition(s); {total_count} "
                                 "would not be an increase.", field="total_count")
    partition0 = topic.partitions[0]
    if assignments is not None:
        placed = new_partition_assignments(image, assignments, start_partition_id=current,
                                           additional=total_count - current,
                                           replication_factor=len(partition0.replicas))
    else:
        _check_replication_factor(image, len(partition0.replicas))
        placed = place_replicas(image.cluster.brokers.values(), partitions=total_count - current,
                                replication_factor=len(partition0.replicas), rng=rng,
                                start_partition_id=current,
                                fixed_start_index=_kafka_start_index(image, partition0))
    return ControllerResult(_new_partitions(image, topic.topic_id, placed), dict(placed))


def alter_topic_configs(image: MetadataImage, name: str,
                        changes: Mapping[str, str | None]) -> ControllerResult[None]:
    """IncrementalAlterConfigs for one topic: set (or, for None, delete) keys; unchanged keys write nothing."""
    topic = _require_topic(image, name)
    current = image.config(TOPIC, name)
    records: list[Record] = []
    after = dict(current)
    for key, value in sorted(changes.items()):
        if value is None:
            if key not in _KEYS_BY_NAME:
                validate_topic_config(key, "")  # raises: an unknown key names its near miss
            new = None
        else:
            new = validate_topic_config(key, value)
        if current.get(key) != new:
            records.append(Config(TOPIC, name, key, new))
        if new is None:
            after.pop(key, None)
        else:
            after[key] = new
    check_config_set(after)
    records.extend(_unclean_elections(image, topic, current, after))
    if MIN_INSYNC_REPLICAS in changes and image.feature_level(ELR_VERSION) >= 1:
        # KIP-966: an ELR kept against the old minimum is cleared when the topic's is set
        records.extend(elr_clearing_records(image, topic_names=(name,), error=ErrorCode.INVALID_CONFIG,
                                            field=MIN_INSYNC_REPLICAS,
                                            why=f"Setting {name}'s {MIN_INSYNC_REPLICAS}"))
    return ControllerResult(records, None)


def _unclean_elections(image: MetadataImage, topic: TopicImage, before: Mapping[str, str],
                       after: Mapping[str, str]) -> list[Record]:
    """Turning unclean.leader.election.enable on brings leaderless partitions back at once."""
    if before.get(UNCLEAN_LEADER_ELECTION_ENABLE) == after.get(UNCLEAN_LEADER_ELECTION_ENABLE) \
            or after.get(UNCLEAN_LEADER_ELECTION_ENABLE) != "true":
        return []
    return elect_leaderless(image, topic)


def elect_leaderless(image: MetadataImage, topic: TopicImage) -> list[Record]:
    """Unclean elections for `topic`'s leaderless partitions, now that unclean.leader.election
    .enable is on for it: the first live replica leads, marked RECOVERING. Also used when the
    cluster-wide default turns it on (quorum.config_control)."""
    config = topic_election_config(image, topic.name)

    def is_active(broker_id: int) -> bool:
        return (b := image.broker(broker_id)) is not None and b.is_active

    out: list[Record] = []
    for partition_id in sorted(topic.partitions):
        partition = topic.partitions[partition_id]
        if partition.has_leader:
            continue
        change = elect_leader(partition, is_acceptable=is_active, unclean_allowed=True,
                              election=Election.ONLINE, elr_enabled=config.elr_enabled,
                              min_insync_replicas=config.min_insync_replicas)
        if change is not None:
            out.append(change)
    return out
