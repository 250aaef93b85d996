"""DescribeCluster (key 60), v0–v1, flexible from v0 (KIP-700): the cluster id, the alive
brokers, the controller id a client should use, and (asked for) the cluster operations the
caller may perform. v1 adds the endpoint type (KIP-919): 1 BROKER, 2 CONTROLLER."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer

ENDPOINT_TYPE_BROKER: Final = 1
ENDPOINT_TYPE_CONTROLLER: Final = 2
# Kafka's "not asked for" value of every authorized-operations field (Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)


@dataclass(frozen=True, slots=True)
class DescribeClusterRequest:
    include_cluster_authorized_operations: bool = False
    endpoint_type: int = ENDPOINT_TYPE_BROKER  # v1+


@dataclass(frozen=True, slots=True)
class DescribeClusterBroker:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class DescribeClusterResponse:
    error_code: int
    error_message: str | None
    cluster_id: str
    controller_id: int
    brokers: tuple[DescribeClusterBroker, ...]
    cluster_authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED
    endpoint_type: int = ENDPOINT_TYPE_BROKER  # v1+
    throttle_time_ms: int = 0


def decode_describe_cluster_request(body: memoryview, version: int) -> DescribeClusterRequest:
    check_version(ApiKey.DESCRIBE_CLUSTER, version)
    r = reader_for(ApiKey.DESCRIBE_CLUSTER, version, body)
    include = r.boolean()
    endpoint_type = r.int8() if version >= 1 else ENDPOINT_TYPE_BROKER
    r.tagged_fields()
    return DescribeClusterRequest(include, endpoint_type)


def encode_describe_cluster_request(req: DescribeClusterRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_describe_cluster_request`."""
    check_version(ApiKey.DESCRIBE_CLUSTER, version)
    w = writer_for(ApiKey.DESCRIBE_CLUSTER, version)
    w.boolean(req.include_cluster_authorized_operations)
    if version >= 1:
        w.int8(req.endpoint_type)
    w.tagged_fields()
    return w.chunks()


def _write_broker(w: Writer, b: DescribeClusterBroker) -> None:
    w.int32(b.broker_id)
    w.string(b.host)
    w.int32(b.port)
    w.nullable_string(b.rack)
    w.tagged_fields()


def _read_broker(r: Reader) -> DescribeClusterBroker:
    broker = DescribeClusterBroker(r.int32(), r.string(), r.int32(), r.nullable_string())
    r.tagged_fields()
    return broker


def encode_describe_cluster_response(resp: DescribeClusterResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.DESCRIBE_CLUSTER, version)
    w = writer_for(ApiKey.DESCRIBE_CLUSTER, version)
    w.int32(resp.throttle_time_ms)
    w.int16(resp.error_code)
    w.nullable_string(resp.error_message)
    if version >= 1:
        w.int8(resp.endpoint_type)
    w.string(resp.cluster_id)
    w.int32(resp.controller_id)
    w.array(resp.brokers, _write_broker)
    w.int32(resp.cluster_authorized_operations)
    w.tagged_fields()
    return w.chunks()


def decode_describe_cluster_response(body: memoryview, version: int) -> DescribeClusterResponse:
    """Client side (tests, tools): the inverse of `encode_describe_cluster_response`."""
    check_version(ApiKey.DESCRIBE_CLUSTER, version)
    r = reader_for(ApiKey.DESCRIBE_CLUSTER, version, body)
    throttle, error_code, message = r.int32(), r.int16(), r.nullable_string()
    endpoint_type = r.int8() if version >= 1 else ENDPOINT_TYPE_BROKER
    cluster_id, controller_id = r.string(), r.int32()
    brokers = r.array(_read_broker, 11)
    operations = r.int32()
    r.tagged_fields()
    return DescribeClusterResponse(error_code, message, cluster_id, controller_id, brokers,
                                   operations, endpoint_type, throttle)
