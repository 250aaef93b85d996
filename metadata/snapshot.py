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

from collections.abc import Callable, Iterator, Mapping
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
    PLAIN_PARTITION_KEYS,
    REASSIGNING_PARTITION_KEYS,
    ConfigResourceType,
    UserScramCredential,
    plain_partition_fields,
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
    return b"".join(snapshot_pieces(image))


def snapshot_pieces(image: MetadataImage) -> Iterator[bytes]:
    """`encode_snapshot`'s bytes in pieces of at most one topic each (msgpack is concatenative: a
    map is its header then its keys and values, an array its header then its items). A controller
    encodes its fold's snapshot a few pieces at a time between Raft ticks (quorum.fold_encoder):
    packing 100,000 partitions in one call held the GIL for ~90 ms, and building it ~0.2 s more."""
    top = {
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "offset": image.offset,
        "controller_epoch": image.controller_epoch,
        "brokers": [fields_to_map(image.cluster.brokers[b], BROKER_KINDS, BROKER_OPTIONAL)
                    for b in sorted(image.cluster.brokers)],
        "topics": None,  # packed topic by topic below
        "configs": [{"resource_type": int(resource.resource_type), "resource_name": resource.resource_name,
                     "configs": dict(sorted(image.configs.resources[resource].items()))}
                    for resource in sorted(image.configs.resources)],
        "features": dict(sorted(image.features.levels.items())),
        "next_producer_id_block_start": image.producer_ids.next_producer_id_block_start,
        **({"acls": [fields_to_map(image.acls.by_id[i], ACL_KINDS) for i in sorted(image.acls.by_id)]}
           if image.acls.by_id else {}),
        **({"scram": [fields_to_map(image.scram.credentials[k], SCRAM_KINDS) for k in sorted(image.scram.credentials)]}
           if image.scram.credentials else {}),
    }
    packer = msgpack.Packer(use_bin_type=True)  # autoreset: each call returns its own bytes
    yield packer.pack_map_header(len(top))
    for key, value in top.items():  # bounded: the keys above
        yield packer.pack(key)
        if key != "topics":
            yield packer.pack(value)
            continue
        yield packer.pack_array_header(len(image.topics.by_id))
        for topic_id in sorted(image.topics.by_id):  # bounded by the image's topics
            yield packer.pack(_topic_to_map(image.topics.by_id[topic_id]))


def _topic_to_map(topic: TopicImage) -> dict[str, Any]:
    return {"name": topic.name, "topic_id": topic.topic_id,
            "partitions": [_partition_to_map(topic.partitions[p]) for p in sorted(topic.partitions)]}


def _partition_to_map(p: PartitionRegistration) -> dict[str, Any]:
    """`fields_to_map(p, _PARTITION_WIRE_KINDS, PARTITION_OPTIONAL)`, written out: the same keys in
    the same order (msgpack packs the tuples and the IntEnum as the kinds' lists and int), at a
    fraction of the cost for the 100,000 partitions a broker's checkpoint holds."""
    m = {"partition_id": p.partition_id, "replicas": p.replicas, "isr": p.isr, "elr": p.elr, "leader": p.leader,
         "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
         "leader_recovery_state": p.leader_recovery_state}
    if p.removing_replicas:
        m["removing_replicas"] = p.removing_replicas
    if p.adding_replicas:
        m["adding_replicas"] = p.adding_replicas
    return m


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


# A snapshot's partition maps leave out the topic id (their topic's), and nothing else.
_PLAIN_KEYS = PLAIN_PARTITION_KEYS - {"topic_id"}
_REASSIGNING_KEYS = REASSIGNING_PARTITION_KEYS - {"topic_id"}


def _plain_partition(pm: Any, topic_id: str) -> PartitionRegistration | None:
    """A partition map of the usual shape, checked as PartitionRegistration's __post_init__ checks
    it but without its per-field bookkeeping (`metadata.records.plain_partition_fields`, which
    the Partition records a broker replays share); None for anything else, which the general
    path then decodes and, when it is wrong, names what is wrong in it."""
    if type(pm) is not dict or (pm.keys() != _PLAIN_KEYS and pm.keys() != _REASSIGNING_KEYS):
        return None
    values = plain_partition_fields(pm, topic_id)
    return None if values is None else PartitionRegistration.from_checked(values)


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
