"""Snapshots: a MetadataImage encoded at its offset, as one msgpack map.

A broker (or a restarting controller) that is further behind than the retained metadata
log loads a snapshot taken at offset k and then replays the records after k; the image it
reaches equals replaying the whole log (tested as a property). The encoding is canonical:
every collection is sorted, so equal images give equal bytes.

    {"format": "tidelog-metadata-snapshot", "version": 0, "offset": k, "controller_epoch": e,
     "brokers": [{broker_id, broker_epoch, incarnation_id, listeners, rack, fenced,
                  in_controlled_shutdown, offline_replicas (left out when empty)}, ...],
     "topics": [{"name", "topic_id", "partitions": [{partition_id, replicas, isr, elr, leader,
                 leader_epoch, partition_epoch, leader_recovery_state}, ...]}, ...],
     "configs": [{"resource_type", "resource_name", "configs": {name: value}}, ...],
     "features": {name: level}, "next_producer_id_block_start": n,
     "acls": [{id, resource_type, resource_name, pattern_type, principal, host, operation,
               permission_type}, ...] (left out when empty),
     "scram": [{name, mechanism, salt, stored_key, server_key, iterations}, ...] (left out when empty)}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgpack

from metadata.codec import (
    INT16_MAX,
    NAME,
    OFFSET,
    STR,
    Enum,
    Int,
    MetadataRecordError,
    fields_from_map,
    fields_to_map,
)
from metadata.image import (
    BROKER_KINDS,
    BROKER_OPTIONAL,
    AclsImage,
    PARTITION_KINDS,
    PARTITION_OPTIONAL,
    BrokerRegistration,
    ClusterImage,
    ConfigResource,
    ConfigurationsImage,
    FeaturesImage,
    MetadataImage,
    PartitionRegistration,
    ProducerIdsImage,
    ScramImage,
    TopicImage,
    TopicsImage,
    frozen_map,
)
from metadata.records import (
    ACL_KINDS,
    SCRAM_KINDS,
    AccessControlEntry,
    ConfigResourceType,
    LeaderRecoveryState,
    UserScramCredential,
    check_partition_state,
)

SNAPSHOT_FORMAT = "tidelog-metadata-snapshot"
SNAPSHOT_VERSION = 0
_TOP_KEYS = ("format", "version", "offset", "controller_epoch", "brokers", "topics", "configs",
             "features", "next_producer_id_block_start", "acls", "scram")
# Left out when there are none, so snapshots written before ACLs (SCRAM credentials) read and encode the same.
_TOP_OPTIONAL: dict[str, Any] = {"acls": [], "scram": []}
# The topic id of a partition is its topic's: written once per topic, not per partition.
_PARTITION_WIRE_KINDS = {k: v for k, v in PARTITION_KINDS.items() if k != "topic_id"}
_CONFIG_KEYS = ("resource_type", "resource_name", "configs")
_TOPIC_KEYS = ("name", "topic_id", "partitions")
_LEVEL = Int(1, INT16_MAX)
_BLOCK_START = Int(-1, 2**63 - 1)
_EPOCH = Int(-1, 2**63 - 1)

T = TypeVar("T")


def encode_snapshot(image: MetadataImage) -> bytes:
    """The image as canonical msgpack bytes."""
    packed: bytes = msgpack.packb({
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "offset": image.offset,
        "controller_epoch": image.controller_epoch,
        "brokers": [fields_to_map(image.cluster.brokers[b], BROKER_KINDS, BROKER_OPTIONAL)
                    for b in sorted(image.cluster.brokers)],
        "topics": [_topic_to_map(image.topics.by_id[t]) for t in sorted(image.topics.by_id)],
        "configs": [{"resource_type": int(resource.resource_type), "resource_name": resource.resource_name,
                     "configs": dict(sorted(image.configs.resources[resource].items()))}
                    for resource in sorted(image.configs.resources)],
        "features": dict(sorted(image.features.levels.items())),
        "next_producer_id_block_start": image.producer_ids.next_producer_id_block_start,
        **({"acls": [fields_to_map(image.acls.by_id[i], ACL_KINDS) for i in sorted(image.acls.by_id)]}
           if image.acls.by_id else {}),
        **({"scram": [fields_to_map(image.scram.credentials[k], SCRAM_KINDS) for k in sorted(image.scram.credentials)]}
           if image.scram.credentials else {}),
    }, use_bin_type=True)
    return packed


def _topic_to_map(topic: TopicImage) -> dict[str, Any]:
    return {"name": topic.name, "topic_id": topic.topic_id,
            "partitions": [fields_to_map(topic.partitions[p], _PARTITION_WIRE_KINDS, PARTITION_OPTIONAL)
                           for p in sorted(topic.partitions)]}


def decode_snapshot(data: bytes) -> MetadataImage:
    """The image a snapshot holds; anything malformed raises MetadataRecordError."""
    try:
        return _decode(data)
    except MetadataRecordError as exc:
        raise MetadataRecordError(f"snapshot: {exc}") from None


def _decode(data: bytes) -> MetadataImage:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MetadataRecordError(f"expected bytes, got {type(data).__name__}")
    try:
        m = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (msgpack.UnpackException, ValueError, TypeError) as exc:
        raise MetadataRecordError(f"not valid msgpack ({type(exc).__name__})") from None
    _check_keys(m, _TOP_KEYS, "snapshot", optional=_TOP_OPTIONAL)
    if m["format"] != SNAPSHOT_FORMAT:
        raise MetadataRecordError(f"format {m['format']!r:.40} is not {SNAPSHOT_FORMAT!r}")
    if m["version"] != SNAPSHOT_VERSION or type(m["version"]) is not int:
        raise MetadataRecordError(
            f"version {m['version']!r:.40} is not supported (this build reads version {SNAPSHOT_VERSION})")
    brokers = _unique(_list(m["brokers"], "brokers", _broker_from_map), lambda b: b.broker_id, "broker id")
    topics = _unique(_list(m["topics"], "topics", _topic_from_map), lambda t: t.topic_id, "topic id")
    configs = _unique(_list(m["configs"], "configs", _config_from_map), lambda c: c[0], "config resource")
    acls = _unique(_list(m.get("acls", []), "acls", _acl_from_map), lambda a: a.id, "ACL id")
    scram = _unique(_list(m.get("scram", []), "scram", _scram_from_map), lambda c: (c.name, c.mechanism),
                    "SCRAM credential")
    return MetadataImage(
        offset=OFFSET.check(m["offset"], "offset"),
        controller_epoch=_EPOCH.check(m["controller_epoch"], "controller_epoch"),
        cluster=ClusterImage(frozen_map(brokers)),
        topics=TopicsImage(frozen_map(topics)),
        configs=ConfigurationsImage(frozen_map({resource: values for resource, values in configs.values()})),
        features=FeaturesImage(frozen_map(_str_map(m["features"], "features", _LEVEL))),
        producer_ids=ProducerIdsImage(_BLOCK_START.check(m["next_producer_id_block_start"],
                                                         "next_producer_id_block_start")),
        acls=AclsImage(frozen_map(acls)),
        scram=ScramImage(frozen_map(scram)),
    )


def _check_keys(m: Any, keys: tuple[str, ...], where: str, optional: Mapping[str, Any] | None = None) -> None:
    if not isinstance(m, dict):
        raise MetadataRecordError(f"{where}: expected a map, got {type(m).__name__}")
    unknown = sorted(str(k) for k in m if k not in keys)
    missing = [k for k in keys if k not in m and k not in (optional or {})]
    if unknown or missing:
        raise MetadataRecordError(f"{where}: unknown field(s) {unknown}, missing field(s) {missing}")


def _list(value: Any, where: str, item: Callable[[Any, str], T]) -> list[T]:
    if not isinstance(value, list):
        raise MetadataRecordError(f"{where}: expected a list, got {type(value).__name__}")
    return [item(v, f"{where}[{i}]") for i, v in enumerate(value)]


def _unique(items: list[T], key: Callable[[T], Any], what: str) -> dict[Any, T]:
    out: dict[Any, T] = {}
    for item in items:
        k = key(item)
        if k in out:
            raise MetadataRecordError(f"duplicate {what} {k!r}")
        out[k] = item
    return out


def _str_map(value: Any, where: str, kind: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MetadataRecordError(f"{where}: expected a map, got {type(value).__name__}")
    return {NAME.check(k, f"{where} key"): kind.check(v, f"{where}[{k!r}]") for k, v in value.items()}


def _broker_from_map(m: Any, where: str) -> BrokerRegistration:
    return fields_from_map(BrokerRegistration, m, BROKER_KINDS, where, optional=BROKER_OPTIONAL)


def _topic_from_map(m: Any, where: str) -> TopicImage:
    _check_keys(m, _TOPIC_KEYS, where)
    topic_id = NAME.check(m["topic_id"], f"{where}.topic_id")

    def partition(pm: Any, at: str) -> PartitionRegistration:
        fast = _plain_partition(pm, topic_id)
        if fast is not None:
            return fast
        _check_keys(pm, tuple(_PARTITION_WIRE_KINDS), at, optional=PARTITION_OPTIONAL)
        return fields_from_map(PartitionRegistration, {**pm, "topic_id": topic_id}, PARTITION_KINDS, at,
                               optional=PARTITION_OPTIONAL)

    parts = _unique(_list(m["partitions"], f"{where}.partitions", partition),
                    lambda p: p.partition_id, "partition id")
    return TopicImage(m["name"], topic_id, frozen_map(parts))


# The shape nearly every partition of a snapshot has: no reassignment running (its two lists
# left out), or one running (both present).
_PLAIN_KEYS = frozenset(_PARTITION_WIRE_KINDS) - PARTITION_OPTIONAL.keys()
_REASSIGNING_KEYS = frozenset(_PARTITION_WIRE_KINDS)
_ID = PARTITION_KINDS["replicas"].item  # type: ignore[attr-defined]  # IntList's item kind
_RECOVERY_STATES = {int(state): state for state in LeaderRecoveryState}


def _ids(value: Any) -> tuple[int, ...] | None:
    """IntList's check, without building an error: None when the list is not distinct ids."""
    if type(value) is not list:
        return None
    lo, hi = _ID.lo, _ID.hi
    for v in value:  # bounded by the list (a few replicas)
        if type(v) is not int or not lo <= v <= hi:
            return None
    items = tuple(value)
    return items if len(set(items)) == len(items) else None


def _int(value: Any, kind: Any) -> int | None:
    return value if type(value) is int and kind.lo <= value <= kind.hi else None


def _plain_partition(pm: Any, topic_id: str) -> PartitionRegistration | None:
    """A partition map of the usual shape, checked field by field as PartitionRegistration's
    __post_init__ checks it but without its per-field bookkeeping (a broker loading 100,000
    partitions spent most of its 5 s there); None for anything else, which the general path
    then decodes and, when it is wrong, names what is wrong in it."""
    if type(pm) is not dict or (pm.keys() != _PLAIN_KEYS and pm.keys() != _REASSIGNING_KEYS):
        return None
    replicas, isr, elr = _ids(pm["replicas"]), _ids(pm["isr"]), _ids(pm["elr"])
    adding, removing = _ids(pm.get("adding_replicas", [])), _ids(pm.get("removing_replicas", []))
    partition_id = _int(pm["partition_id"], PARTITION_KINDS["partition_id"])
    leader = _int(pm["leader"], PARTITION_KINDS["leader"])
    leader_epoch = _int(pm["leader_epoch"], PARTITION_KINDS["leader_epoch"])
    partition_epoch = _int(pm["partition_epoch"], PARTITION_KINDS["partition_epoch"])
    state = pm["leader_recovery_state"]
    recovery = _RECOVERY_STATES.get(state) if type(state) is int else None
    if replicas is None or isr is None or elr is None or adding is None or removing is None \
            or partition_id is None or leader is None or leader_epoch is None or partition_epoch is None \
            or recovery is None:
        return None
    try:
        check_partition_state(replicas, isr, elr, leader, f"partition {topic_id}-{partition_id}", adding, removing)
    except MetadataRecordError:
        return None
    registration = object.__new__(PartitionRegistration)
    put = object.__setattr__  # frozen: as __post_init__ normalises its fields
    put(registration, "topic_id", topic_id)
    put(registration, "partition_id", partition_id)
    put(registration, "replicas", replicas)
    put(registration, "isr", isr)
    put(registration, "elr", elr)
    put(registration, "leader", leader)
    put(registration, "leader_epoch", leader_epoch)
    put(registration, "partition_epoch", partition_epoch)
    put(registration, "leader_recovery_state", recovery)
    put(registration, "removing_replicas", removing)
    put(registration, "adding_replicas", adding)
    return registration


def _scram_from_map(m: Any, where: str) -> UserScramCredential:
    return fields_from_map(UserScramCredential, m, SCRAM_KINDS, where)


def _acl_from_map(m: Any, where: str) -> AccessControlEntry:
    return fields_from_map(AccessControlEntry, m, ACL_KINDS, where)


def _config_from_map(m: Any, where: str) -> tuple[ConfigResource, Any]:
    _check_keys(m, _CONFIG_KEYS, where)
    resource = ConfigResource(ConfigResourceType(Enum(ConfigResourceType).check(m["resource_type"],
                                                                                  f"{where}.resource_type")),
                              STR.check(m["resource_name"], f"{where}.resource_name"))
    values = _str_map(m["configs"], f"{where}.configs", STR)
    if not values:
        raise MetadataRecordError(f"{where}: a config resource with no configs")
    return resource, frozen_map(values)
