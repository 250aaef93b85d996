"""Metadata (key 3), v1–v8: which brokers exist and who leads each partition."""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version
from common.protocol.primitives import Chunk, Reader, Writer

AUTHORIZED_OPERATIONS_OMITTED = -2147483648  # Kafka's INT32_MIN default


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    """topics None means every topic (v1+); an empty tuple means none."""

    topics: tuple[str, ...] | None
    allow_auto_topic_creation: bool = True
    include_cluster_authorized_operations: bool = False
    include_topic_authorized_operations: bool = False


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
    name: str
    is_internal: bool
    partitions: tuple[MetadataResponsePartition, ...]
    topic_authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED  # v8+


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    throttle_time_ms: int  # v3+
    brokers: tuple[MetadataResponseBroker, ...]
    cluster_id: str | None  # v2+
    controller_id: int
    topics: tuple[MetadataResponseTopic, ...]
    cluster_authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED  # v8+


def decode_metadata_request(body: memoryview, version: int) -> MetadataRequest:
    check_version(ApiKey.METADATA, version)
    r = Reader(body)
    topics = r.nullable_array(Reader.string, 2)
    auto = r.boolean() if version >= 4 else True
    cluster_ops = topic_ops = False
    if version >= 8:
        cluster_ops = r.boolean()
        topic_ops = r.boolean()
    return MetadataRequest(topics, auto, cluster_ops, topic_ops)


def encode_metadata_request(req: MetadataRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_metadata_request`."""
    check_version(ApiKey.METADATA, version)
    w = Writer()
    w.nullable_array(req.topics, Writer.string)
    if version >= 4:
        w.boolean(req.allow_auto_topic_creation)
    if version >= 8:
        w.boolean(req.include_cluster_authorized_operations)
        w.boolean(req.include_topic_authorized_operations)
    return w.chunks()


def encode_metadata_response(resp: MetadataResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.METADATA, version)
    w = Writer()
    if version >= 3:
        w.int32(resp.throttle_time_ms)

    def broker(w: Writer, b: MetadataResponseBroker) -> None:
        w.int32(b.node_id)
        w.string(b.host)
        w.int32(b.port)
        w.nullable_string(b.rack)

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

    def topic(w: Writer, t: MetadataResponseTopic) -> None:
        w.int16(t.error_code)
        w.string(t.name)
        w.boolean(t.is_internal)
        w.array(t.partitions, partition)
        if version >= 8:
            w.int32(t.topic_authorized_operations)

    w.array(resp.brokers, broker)
    if version >= 2:
        w.nullable_string(resp.cluster_id)
    w.int32(resp.controller_id)
    w.array(resp.topics, topic)
    if version >= 8:
        w.int32(resp.cluster_authorized_operations)
    return w.chunks()


def decode_metadata_response(body: memoryview, version: int) -> MetadataResponse:
    """Client side (tests, tools): the inverse of `encode_metadata_response`."""
    check_version(ApiKey.METADATA, version)
    r = Reader(body)
    throttle = r.int32() if version >= 3 else 0

    def broker(r: Reader) -> MetadataResponseBroker:
        return MetadataResponseBroker(r.int32(), r.string(), r.int32(), r.nullable_string())

    def partition(r: Reader) -> MetadataResponsePartition:
        error_code, index, leader = r.int16(), r.int32(), r.int32()
        epoch = r.int32() if version >= 7 else -1
        replicas, isr = r.int32_array(), r.int32_array()
        offline = r.int32_array() if version >= 5 else ()
        return MetadataResponsePartition(error_code, index, leader, epoch, replicas, isr,
                                         offline)

    def topic(r: Reader) -> MetadataResponseTopic:
        error_code, name, internal = r.int16(), r.string(), r.boolean()
        partitions = r.array(partition, 18)
        ops = r.int32() if version >= 8 else AUTHORIZED_OPERATIONS_OMITTED
        return MetadataResponseTopic(error_code, name, internal, partitions, ops)

    brokers = r.array(broker, 12)
    cluster_id = r.nullable_string() if version >= 2 else None
    controller_id = r.int32()
    topics = r.array(topic, 9)
    cluster_ops = r.int32() if version >= 8 else AUTHORIZED_OPERATIONS_OMITTED
    return MetadataResponse(throttle, brokers, cluster_id, controller_id, topics, cluster_ops)
