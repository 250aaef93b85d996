"""Produce (key 0), v3–v12 (v12 adds no field: a transactions v2 client, KIP-890). Records stay a memoryview slice of the request, never parsed here.

v9 is the first flexible version. v10 (KIP-951) adds two tagged fields to the response, sent
only when set: a partition's CurrentLeader (the leader the broker knows of, on
NOT_LEADER_OR_FOLLOWER) and the response's NodeEndpoints (where to reach those leaders), so a
client can retry on the new leader without a Metadata round trip. v11 has no new field: it
lets the broker answer TRANSACTION_ABORTABLE (KIP-890) to a transactional producer.

With acks=0 the broker sends no response at all; that decision belongs to the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.leader_discovery import (
    UNKNOWN_LEADER,
    LeaderIdAndEpoch,
    NodeEndpoint,
    read_leader,
    read_node_endpoints,
    write_leader,
    write_node_endpoints,
)
from common.protocol.primitives import Chunk, Reader, Writer
from common.protocol.tagged import (
    decode_tagged,
    encode_tagged,
    read_tagged_fields,
    write_tagged_fields,
)

__all__ = [
    "LEADER_DISCOVERY_VERSION",
    "UNKNOWN_LEADER",
    "BatchIndexAndErrorMessage",
    "PartitionProduceData",
    "PartitionProduceResponse",
    "ProduceRequest",
    "ProduceResponse",
    "TopicProduceData",
    "TopicProduceResponse",
    "decode_produce_request",
    "decode_produce_response",
    "encode_produce_request",
    "encode_produce_response",
]

LEADER_DISCOVERY_VERSION: Final = 10  # KIP-951: CurrentLeader and NodeEndpoints
_CURRENT_LEADER_TAG: Final = 0  # of a partition response
_NODE_ENDPOINTS_TAG: Final = 0  # of the response


@dataclass(frozen=True, slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | bytes | None  # record batches exactly as sent


@dataclass(frozen=True, slots=True)
class TopicProduceData:
    name: str
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


@dataclass(frozen=True, slots=True)
class BatchIndexAndErrorMessage:
    batch_index: int
    batch_index_error_message: str | None


@dataclass(frozen=True, slots=True)
class PartitionProduceResponse:
    partition_index: int
    error_code: int
    base_offset: int
    log_append_time_ms: int = -1
    log_start_offset: int = -1  # v5+
    record_errors: tuple[BatchIndexAndErrorMessage, ...] = ()  # v8+
    error_message: str | None = None  # v8+
    current_leader: LeaderIdAndEpoch = UNKNOWN_LEADER  # v10+, tagged


@dataclass(frozen=True, slots=True)
class TopicProduceResponse:
    name: str
    partitions: tuple[PartitionProduceResponse, ...]


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    responses: tuple[TopicProduceResponse, ...]
    throttle_time_ms: int = 0
    node_endpoints: tuple[NodeEndpoint, ...] = ()  # v10+, tagged


def _read_partition(r: Reader) -> PartitionProduceData:
    data = PartitionProduceData(r.int32(), r.nullable_bytes())
    r.tagged_fields()
    return data


def _read_topic(r: Reader) -> TopicProduceData:
    topic = TopicProduceData(r.string(), r.array(_read_partition, 5 if r.flexible else 8))
    r.tagged_fields()
    return topic


def decode_produce_request(body: memoryview, version: int) -> ProduceRequest:
    check_version(ApiKey.PRODUCE, version)
    r = reader_for(ApiKey.PRODUCE, version, body)
    transactional_id = r.nullable_string()
    acks = r.int16()
    timeout_ms = r.int32()
    topic_data = r.array(_read_topic, 3 if r.flexible else 6)
    r.tagged_fields()
    return ProduceRequest(transactional_id, acks, timeout_ms, topic_data)


def encode_produce_request(req: ProduceRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_produce_request`."""
    check_version(ApiKey.PRODUCE, version)
    w = writer_for(ApiKey.PRODUCE, version)
    w.nullable_string(req.transactional_id)
    w.int16(req.acks)
    w.int32(req.timeout_ms)

    def partition(w: Writer, p: PartitionProduceData) -> None:
        w.int32(p.index)
        w.nullable_bytes(p.records)
        w.tagged_fields()

    def topic(w: Writer, t: TopicProduceData) -> None:
        w.string(t.name)
        w.array(t.partition_data, partition)
        w.tagged_fields()

    w.array(req.topic_data, topic)
    w.tagged_fields()
    return w.chunks()


def encode_produce_response(resp: ProduceResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.PRODUCE, version)
    w = writer_for(ApiKey.PRODUCE, version)
    leaders = version >= LEADER_DISCOVERY_VERSION

    def record_error(w: Writer, e: BatchIndexAndErrorMessage) -> None:
        w.int32(e.batch_index)
        w.nullable_string(e.batch_index_error_message)
        w.tagged_fields()

    def partition(w: Writer, p: PartitionProduceResponse) -> None:
        w.int32(p.partition_index)
        w.int16(p.error_code)
        w.int64(p.base_offset)
        w.int64(p.log_append_time_ms)
        if version >= 5:
            w.int64(p.log_start_offset)
        if version >= 8:
            w.array(p.record_errors, record_error)
            w.nullable_string(p.error_message)
        # identity first: the hot path's partitions all share the default object
        if leaders and p.current_leader is not UNKNOWN_LEADER and p.current_leader != UNKNOWN_LEADER:
            leader = p.current_leader
            write_tagged_fields(w, {_CURRENT_LEADER_TAG: encode_tagged(lambda t: write_leader(t, leader))})
        else:
            w.tagged_fields()

    def topic(w: Writer, t: TopicProduceResponse) -> None:
        w.string(t.name)
        w.array(t.partitions, partition)
        w.tagged_fields()

    w.array(resp.responses, topic)
    w.int32(resp.throttle_time_ms)
    if leaders and resp.node_endpoints:
        write_tagged_fields(w, {_NODE_ENDPOINTS_TAG: encode_tagged(
            lambda t: write_node_endpoints(t, resp.node_endpoints))})
    else:
        w.tagged_fields()
    return w.chunks()


def decode_produce_response(body: memoryview, version: int) -> ProduceResponse:
    """Client side (tests, tools): the inverse of `encode_produce_response`."""
    check_version(ApiKey.PRODUCE, version)
    r = reader_for(ApiKey.PRODUCE, version, body)
    leaders = {_CURRENT_LEADER_TAG} if version >= LEADER_DISCOVERY_VERSION else set()

    def record_error(r: Reader) -> BatchIndexAndErrorMessage:
        error = BatchIndexAndErrorMessage(r.int32(), r.nullable_string())
        r.tagged_fields()
        return error

    def partition(r: Reader) -> PartitionProduceResponse:
        index, error_code, base_offset, append_time = r.int32(), r.int16(), r.int64(), r.int64()
        log_start = r.int64() if version >= 5 else -1
        errors: tuple[BatchIndexAndErrorMessage, ...] = ()
        message = None
        if version >= 8:
            errors = r.array(record_error, 3 if r.flexible else 6)
            message = r.nullable_string()
        leader = decode_tagged(read_tagged_fields(r, leaders), _CURRENT_LEADER_TAG, read_leader,
                               UNKNOWN_LEADER)
        return PartitionProduceResponse(index, error_code, base_offset, append_time, log_start,
                                        errors, message, leader)

    def topic(r: Reader) -> TopicProduceResponse:
        t = TopicProduceResponse(r.string(), r.array(partition, 21 if r.flexible else 22))
        r.tagged_fields()
        return t

    responses = r.array(topic, 3 if r.flexible else 6)
    throttle = r.int32()
    no_endpoints: tuple[NodeEndpoint, ...] = ()
    endpoints = decode_tagged(read_tagged_fields(r, leaders), _NODE_ENDPOINTS_TAG,
                              read_node_endpoints, no_endpoints)
    return ProduceResponse(responses, throttle, endpoints)
