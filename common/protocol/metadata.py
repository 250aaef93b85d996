"""Metadata (key 3), v0–v12: which brokers exist and who leads each partition.

v0 has no null topic list (an empty one asks for every topic), no broker rack, controller
id or internal-topic flag; v1 adds those three. v9 is the first flexible version; v10 adds topic ids (KIP-516) to requests and responses;
v11 drops the cluster's authorized operations (DescribeCluster answers them); v12 lets a
request name topics by id alone (a null name), answered with a null name for unknown ids.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

AUTHORIZED_OPERATIONS_OMITTED = -2147483648  # Kafka's INT32_MIN default
ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: "no topic id"


def wire_topic_id(topic_id: str) -> uuid.UUID:
    """The 16 bytes of a topic id as the metadata log spells it: Kafka's Uuid.toString, base64url
    without padding, as the controller mints them. An id in another form (hand-written test
    images) maps to a stable name-based UUID, so it still round-trips within one cluster."""
    try:
        raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    return uuid.UUID(bytes=raw) if len(raw) == 16 else uuid.uuid5(uuid.NAMESPACE_OID, topic_id)


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    """topics None means every topic (v1+); an empty tuple means none. From v10 a requested
    topic may carry an id: `topic_ids` lists the non-zero ones, `null_names` counts entries
    without a name (only valid with an id, from v12)."""

    topics: tuple[str, ...] | None
    allow_auto_topic_creation: bool = True
    include_cluster_authorized_operations: bool = False
    include_topic_authorized_operations: bool = False
    topic_ids: tuple[uuid.UUID, ...] = ()  # v10+
    null_names: int = 0  # v10+


@dataclass(frozen=True, slots=True)
class MetadataResponseBroker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class MetadataResponsePartition:
    error_code: int
    partition_index: int
    leader_id: int
    leader_epoch: int  # v7+
    replica_nodes: tuple[int, ...]
    isr_nodes: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()  # v5+


@dataclass(frozen=True, slots=True)
class MetadataResponseTopic:
    error_code: int
    name: str | None  # null only for an unknown topic id (v12+)
    is_internal: bool
    partitions: tuple[MetadataResponsePartition, ...]
    topic_authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED  # v8+
    topic_id: uuid.UUID = ZERO_UUID  # v10+


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    throttle_time_ms: int  # v3+
    brokers: tuple[MetadataResponseBroker, ...]
    cluster_id: str | None  # v2+
    controller_id: int
    topics: tuple[MetadataResponseTopic, ...]
    cluster_authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED  # v8-v10


def decode_metadata_request(body: memoryview, version: int) -> MetadataRequest:
    check_version(ApiKey.METADATA, version)
    r = reader_for(ApiKey.METADATA, version, body)

    def topic(r: Reader) -> tuple[uuid.UUID, str | None]:
        topic_id = r.uuid() if version >= 10 else ZERO_UUID
        name = r.nullable_string() if version >= 10 else r.string()
        r.tagged_fields()
        return topic_id, name

    entries = r.nullable_array(topic, 2) if version >= 1 else (r.array(topic, 2) or None)
    auto = r.boolean() if version >= 4 else True
    cluster_ops = r.boolean() if 8 <= version <= 10 else False
    topic_ops = r.boolean() if version >= 8 else False
    r.tagged_fields()
    if entries is None:
        return MetadataRequest(None, auto, cluster_ops, topic_ops)
    return MetadataRequest(tuple(name for _, name in entries if name is not None), auto, cluster_ops, topic_ops,
                           tuple(i for i, _ in entries if i != ZERO_UUID),
                           sum(1 for _, name in entries if name is None))


def encode_metadata_request(req: MetadataRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): names first, then ids (with null names)."""
    check_version(ApiKey.METADATA, version)
    w = writer_for(ApiKey.METADATA, version)

    def topic(w: Writer, entry: tuple[uuid.UUID, str | None]) -> None:
        if version >= 10:
            w.uuid(entry[0])
            w.nullable_string(entry[1])
        else:
            w.string(entry[1] or "")
        w.tagged_fields()

    entries = None if req.topics is None else [
        *((ZERO_UUID, name) for name in req.topics), *((i, None) for i in req.topic_ids)]
    if version == 0 and entries is None:  # v0 spells "every topic" as an empty list
        entries = []
    w.nullable_array(entries, topic)
    if version >= 4:
        w.boolean(req.allow_auto_topic_creation)
    if 8 <= version <= 10:
        w.boolean(req.include_cluster_authorized_operations)
    if version >= 8:
        w.boolean(req.include_topic_authorized_operations)
    w.tagged_fields()
    return w.chunks()


def encode_metadata_response(resp: MetadataResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.METADATA, version)
    w = writer_for(ApiKey.METADATA, version)
    if version >= 3:
        w.int32(resp.throttle_time_ms)

    def broker(w: Writer, b: MetadataResponseBroker) -> None:
        w.int32(b.node_id)
        w.string(b.host)
        w.int32(b.port)
        if version >= 1:
            w.nullable_string(b.rack)
        w.tagged_fields()

    def partition(w: Writer, p: MetadataResponsePartition) -> None:
        w.int16(p.error_code)
        w.int32(p.partition_index)
        w.int32(p.leader_id)
        if version >= 7:
            w.int32(p.leader_epoch)
        w.int32_array(p.replica_nodes)
        w.int32_array(p.isr_nodes)
        if version >= 5:
            w.int32_array(p.offline_replicas)
        w.tagged_fields()

    def topic(w: Writer, t: MetadataResponseTopic) -> None:
        w.int16(t.error_code)
        if version >= 12:
            w.nullable_string(t.name)
        else:
            w.string(t.name or "")
        if version >= 10:
            w.uuid(t.topic_id)
        if version >= 1:
            w.boolean(t.is_internal)
        w.array(t.partitions, partition)
        if version >= 8:
            w.int32(t.topic_authorized_operations)
        w.tagged_fields()

    w.array(resp.brokers, broker)
    if version >= 2:
        w.nullable_string(resp.cluster_id)
    if version >= 1:
        w.int32(resp.controller_id)
    w.array(resp.topics, topic)
    if 8 <= version <= 10:
        w.int32(resp.cluster_authorized_operations)
    w.tagged_fields()
    return w.chunks()


def decode_metadata_response(body: memoryview, version: int) -> MetadataResponse:
    """Client side (tests, tools): the inverse of `encode_metadata_response`."""
    check_version(ApiKey.METADATA, version)
    r = reader_for(ApiKey.METADATA, version, body)
    throttle = r.int32() if version >= 3 else 0

    def broker(r: Reader) -> MetadataResponseBroker:
        b = MetadataResponseBroker(r.int32(), r.string(), r.int32(), r.nullable_string() if version >= 1 else None)
        r.tagged_fields()
        return b

    def partition(r: Reader) -> MetadataResponsePartition:
        error_code, index, leader = r.int16(), r.int32(), r.int32()
        epoch = r.int32() if version >= 7 else -1
        replicas, isr = r.int32_array(), r.int32_array()
        offline = r.int32_array() if version >= 5 else ()
        r.tagged_fields()
        return MetadataResponsePartition(error_code, index, leader, epoch, replicas, isr, offline)

    def topic(r: Reader) -> MetadataResponseTopic:
        error_code = r.int16()
        name = r.nullable_string() if version >= 12 else r.string()
        topic_id = r.uuid() if version >= 10 else ZERO_UUID
        internal = r.boolean() if version >= 1 else False
        partitions = r.array(partition, 18)
        ops = r.int32() if version >= 8 else AUTHORIZED_OPERATIONS_OMITTED
        r.tagged_fields()
        return MetadataResponseTopic(error_code, name, internal, partitions, ops, topic_id)

    brokers = r.array(broker, 11)  # flexible: 4 + 1 + 4 + 1 + tags
    cluster_id = r.nullable_string() if version >= 2 else None
    controller_id = r.int32() if version >= 1 else -1
    topics = r.array(topic, 9)
    cluster_ops = r.int32() if 8 <= version <= 10 else AUTHORIZED_OPERATIONS_OMITTED
    r.tagged_fields()
    return MetadataResponse(throttle, brokers, cluster_id, controller_id, topics, cluster_ops)
