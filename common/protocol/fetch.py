"""Fetch (key 1), v4–v17: consumers and follower replicas read record batches.

The response encoder returns chunks: bytes, and the caller's records objects (anything with
a `length`, e.g. a segment `FileSlice`) in place, so the server can write the bytes before
each one and then send the records straight from the segment file.

Kafka 3.9's FetchRequest/FetchResponse.json: v12 is flexible and adds LastFetchedEpoch, the
ClusterId tag (0) and, in answers, DivergingEpoch (tag 0), CurrentLeader (tag 1) and
SnapshotId (tag 2); v13 names topics by id; v15 moves the replica id into the ReplicaState
tag (1); v16 adds NodeEndpoints (tag 0) to answers; v17 the ReplicaDirectoryId tag (0).

This module is the API (`__all__`): the messages (defined in `fetch_messages`), the encode and
decode entry points, and the field-by-field codec, which takes every version and is the one that
says why bytes are refused. The entry points try the one-pass codecs of `fetch_one_pass` first
(the versions librdkafka and our followers send).
"""

from __future__ import annotations

from typing import Final

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.leader_discovery import (
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
from common.protocol.fetch_messages import (
    CONSUMER_REPLICA_ID,
    FINAL_FETCH_SESSION_EPOCH,
    FULL_FETCH_SESSION_EPOCH,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ZERO_UUID,
    AbortedTransaction,
    EpochEndOffset,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    FetchTopicResponse,
    ForgottenTopic,
    Records,
    SnapshotId,
    new_fetch_partition,
)
from common.protocol.fetch_one_pass import (
    _REQUEST_PARTITION_V9,
    _decode_classic_request,
    _decode_flexible_request,
    _read_partitions_v9_to_v11,
)
from common.protocol.fetch_one_pass_responses import (
    _decode_classic_response,
    _encode_classic_response,
    _encode_flexible_response,
)

__all__ = [
    "CONSUMER_REPLICA_ID",
    "FINAL_FETCH_SESSION_EPOCH",
    "FULL_FETCH_SESSION_EPOCH",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "ZERO_UUID",
    "AbortedTransaction",
    "EpochEndOffset",
    "FetchPartition",
    "FetchPartitionResponse",
    "FetchRequest",
    "FetchResponse",
    "FetchTopic",
    "FetchTopicResponse",
    "ForgottenTopic",
    "Records",
    "SnapshotId",
    "decode_fetch_request",
    "decode_fetch_response",
    "decode_request_in_range",
    "encode_fetch_request",
    "encode_fetch_response",
    "encode_response_in_range",
    "new_fetch_partition",
]

# The member bound once: `ApiKey.FETCH` goes through the enum class's slow attribute hook
# (~0.55 us on 3.11, against ~0.07 us for a global), and every Fetch's codec names it.
_FETCH: Final = ApiKey.FETCH

# Tag numbers, per struct (Kafka 3.9's FetchRequest/FetchResponse.json)
_REPLICA_DIRECTORY_ID_TAG: Final = 0  # of a request partition, v17+
_CLUSTER_ID_TAG: Final = 0  # of the request, v12+
_REPLICA_STATE_TAG: Final = 1  # of the request, v15+
_DIVERGING_EPOCH_TAG: Final = 0  # of a partition answer, v12+
_CURRENT_LEADER_TAG: Final = 1  # of a partition answer, v12+
_SNAPSHOT_ID_TAG: Final = 2  # of a partition answer, v12+
_NODE_ENDPOINTS_TAG: Final = 0  # of the response, v16+
_PARTITION_ANSWER_TAGS: Final = frozenset({_DIVERGING_EPOCH_TAG, _CURRENT_LEADER_TAG, _SNAPSHOT_ID_TAG})


# ---- request ---------------------------------------------------------------------------------


def decode_fetch_request(body: memoryview, version: int) -> FetchRequest:
    """ProtocolError for a version tidelog does not serve (clients and tests; the broker's row
    calls `decode_request_in_range`)."""
    check_version(_FETCH, version)
    return decode_request_in_range(body, version)


def decode_request_in_range(body: memoryview, version: int) -> FetchRequest:
    """`decode_fetch_request` at a version its caller has checked: the broker's row (api_table),
    which RequestHandler calls only after `row_for` checked the version against the row's range.
    A second check cost ~32 opcodes per Fetch (and as many again in the answer's encode)."""
    one_pass = _decode_classic_request(body, version) if 7 <= version <= 11 \
        else _decode_flexible_request(body, version) if version >= 12 else None
    return _decode_request_fields(body, version) if one_pass is None else one_pass


def _decode_request_fields(body: memoryview, version: int) -> FetchRequest:
    """Field by field: every version, and the only one that refuses (with its reason)."""
    r = reader_for(_FETCH, version, body)
    replica_id = r.int32() if version <= 14 else -1
    max_wait_ms, min_bytes, max_bytes = r.int32(), r.int32(), r.int32()
    isolation_level = r.int8()
    session_id, session_epoch = (r.int32(), r.int32()) if version >= 7 else (0, -1)

    def partition(r: Reader) -> FetchPartition:
        index = r.int32()
        epoch = r.int32() if version >= 9 else -1
        offset = r.int64()
        last_fetched = r.int32() if version >= 12 else -1
        log_start = r.int64() if version >= 5 else -1
        max_bytes = r.int32()
        tags = read_tagged_fields(r, {_REPLICA_DIRECTORY_ID_TAG} if version >= 17 else ())
        directory = decode_tagged(tags, _REPLICA_DIRECTORY_ID_TAG, Reader.uuid, ZERO_UUID)
        return FetchPartition(index, offset, max_bytes, log_start, epoch, last_fetched, directory)

    def topic(r: Reader) -> FetchTopic:
        name, topic_id = ("", r.uuid()) if version >= 13 else (r.string(), ZERO_UUID)
        partitions = _read_partitions_v9_to_v11(r) if 9 <= version <= 11 else None
        if partitions is None:
            partitions = r.array(partition, 16)
        r.tagged_fields()
        return FetchTopic(name, partitions, topic_id)

    def forgotten(r: Reader) -> ForgottenTopic:
        name, topic_id = ("", r.uuid()) if version >= 13 else (r.string(), ZERO_UUID)
        partitions = r.int32_array()
        r.tagged_fields()
        return ForgottenTopic(name, partitions, topic_id)

    topics = r.array(topic, 6)
    forgotten_topics = r.array(forgotten, 6) if version >= 7 else ()
    rack_id = r.string() if version >= 11 else ""
    tags = read_tagged_fields(r, {_CLUSTER_ID_TAG, _REPLICA_STATE_TAG} if version >= 15 else {_CLUSTER_ID_TAG})
    cluster = decode_tagged(tags, _CLUSTER_ID_TAG, Reader.nullable_string, None)
    replica_epoch = -1
    replica_state = decode_tagged(tags, _REPLICA_STATE_TAG, _read_replica_state, None)
    if replica_state is not None:
        replica_id, replica_epoch = replica_state
    return FetchRequest(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, topics,
                        session_id, session_epoch, forgotten_topics, rack_id, cluster, replica_epoch)


def _read_replica_state(r: Reader) -> tuple[int, int]:
    replica_id, replica_epoch = r.int32(), r.int64()
    r.tagged_fields()
    return replica_id, replica_epoch


def encode_fetch_request(req: FetchRequest, version: int) -> list[Chunk]:
    """The follower fetcher's side (and tests): the inverse of `decode_fetch_request`."""
    check_version(_FETCH, version)
    w = writer_for(_FETCH, version)
    if version <= 14:
        w.int32(req.replica_id)
    for v in (req.max_wait_ms, req.min_bytes, req.max_bytes):
        w.int32(v)
    w.int8(req.isolation_level)
    if version >= 7:
        w.int32(req.session_id)
        w.int32(req.session_epoch)

    def partition(w: Writer, p: FetchPartition) -> None:
        w.int32(p.partition)
        if version >= 9:
            w.int32(p.current_leader_epoch)
        w.int64(p.fetch_offset)
        if version >= 12:
            w.int32(p.last_fetched_epoch)
        if version >= 5:
            w.int64(p.log_start_offset)
        w.int32(p.partition_max_bytes)
        directory = p.replica_directory_id
        sent = version >= 17 and directory != ZERO_UUID
        write_tagged_fields(w, {_REPLICA_DIRECTORY_ID_TAG: encode_tagged(lambda t: t.uuid(directory)) if sent else None})

    def topic(w: Writer, t: FetchTopic) -> None:
        if version >= 13:
            w.uuid(t.topic_id)
        else:
            w.string(t.topic)
        if 9 <= version <= 11:  # one pack per partition: a follower's Fetch names thousands at times
            pack = _REQUEST_PARTITION_V9.pack
            w.int32(len(t.partitions))
            w.raw(b"".join([pack(p.partition, p.current_leader_epoch, p.fetch_offset, p.log_start_offset,
                                 p.partition_max_bytes) for p in t.partitions]))
        else:
            w.array(t.partitions, partition)
        w.tagged_fields()

    def forgotten(w: Writer, f: ForgottenTopic) -> None:
        if version >= 13:
            w.uuid(f.topic_id)
        else:
            w.string(f.topic)
        w.int32_array(f.partitions)
        w.tagged_fields()

    w.array(req.topics, topic)
    if version >= 7:
        w.array(req.forgotten_topics_data, forgotten)
    if version >= 11:
        w.string(req.rack_id)
    tags: dict[int, bytes | None] = {}
    if req.cluster_id is not None:
        cluster_id = req.cluster_id
        tags[_CLUSTER_ID_TAG] = encode_tagged(lambda t: t.nullable_string(cluster_id))
    if version >= 15 and req.replica_id >= 0:
        def replica_state(t: Writer) -> None:
            t.int32(req.replica_id)
            t.int64(req.replica_epoch)
            t.tagged_fields()
        tags[_REPLICA_STATE_TAG] = encode_tagged(replica_state)
    write_tagged_fields(w, tags)
    return w.chunks()


# ---- response --------------------------------------------------------------------------------


def encode_fetch_response(resp: FetchResponse, version: int) -> list[Chunk]:
    """Chunks: bytes, with each partition's records placeholder (if any) as its own item;
    ProtocolError for a version tidelog does not serve (the broker's row calls
    `encode_response_in_range`)."""
    check_version(_FETCH, version)
    return encode_response_in_range(resp, version)


def encode_response_in_range(resp: FetchResponse, version: int) -> list[Chunk]:
    """`encode_fetch_response` at a version its caller has checked (`decode_request_in_range`)."""
    if 5 <= version <= 11:
        return _encode_classic_response(resp, version)
    if version >= 12:
        flexible = _encode_flexible_response(resp, version)
        if flexible is not None:
            return flexible
    return _encode_response_fields(resp, version)


def _encode_response_fields(resp: FetchResponse, version: int) -> list[Chunk]:
    """Field by field through a Writer: every version (v12+ carry tagged fields)."""
    w = writer_for(_FETCH, version)
    w.int32(resp.throttle_time_ms)
    if version >= 7:
        w.int16(resp.error_code)
        w.int32(resp.session_id)

    def aborted(w: Writer, a: AbortedTransaction) -> None:
        w.int64(a.producer_id)
        w.int64(a.first_offset)
        w.tagged_fields()

    def partition(w: Writer, p: FetchPartitionResponse) -> None:
        w.int32(p.partition_index)
        w.int16(p.error_code)
        w.int64(p.high_watermark)
        w.int64(p.last_stable_offset)
        if version >= 5:
            w.int64(p.log_start_offset)
        w.nullable_array(p.aborted_transactions, aborted)
        if version >= 11:
            w.int32(p.preferred_read_replica)
        w.records(p.records)
        write_tagged_fields(w, _partition_tags(p))

    def topic(w: Writer, t: FetchTopicResponse) -> None:
        if version >= 13:
            w.uuid(t.topic_id)
        else:
            w.string(t.topic)
        w.array(t.partitions, partition)
        w.tagged_fields()

    w.array(resp.responses, topic)
    endpoints = resp.node_endpoints
    sent = version >= 16 and bool(endpoints)
    write_tagged_fields(w, {_NODE_ENDPOINTS_TAG: encode_tagged(lambda t: write_node_endpoints(t, endpoints))
                            if sent else None})
    return w.chunks()


def _partition_tags(p: FetchPartitionResponse) -> dict[int, bytes | None]:
    tags: dict[int, bytes | None] = {}
    diverging, leader, snapshot = p.diverging_epoch, p.current_leader, p.snapshot_id
    if diverging is not None:
        def write_diverging(t: Writer) -> None:
            t.int32(diverging.epoch)
            t.int64(diverging.end_offset)
            t.tagged_fields()
        tags[_DIVERGING_EPOCH_TAG] = encode_tagged(write_diverging)
    if leader is not None:
        tags[_CURRENT_LEADER_TAG] = encode_tagged(lambda t: write_leader(t, leader))
    if snapshot is not None:
        def write_snapshot(t: Writer) -> None:
            t.int64(snapshot.end_offset)
            t.int32(snapshot.epoch)
            t.tagged_fields()
        tags[_SNAPSHOT_ID_TAG] = encode_tagged(write_snapshot)
    return tags


def _read_diverging_epoch(r: Reader) -> EpochEndOffset:
    diverging = EpochEndOffset(r.int32(), r.int64())
    r.tagged_fields()
    return diverging


def _read_snapshot_id(r: Reader) -> SnapshotId:
    snapshot = SnapshotId(r.int64(), r.int32())
    r.tagged_fields()
    return snapshot


def decode_fetch_response(body: memoryview, version: int) -> FetchResponse:
    """The follower fetcher's side; records come back as views into `body`."""
    if 5 <= version <= 11:
        one_pass = _decode_classic_response(body, version)
        if one_pass is not None:
            return one_pass
    return _decode_response_fields(body, version)


def _decode_response_fields(body: memoryview, version: int) -> FetchResponse:
    """Field by field: every version, and the only one that refuses (with its reason)."""
    check_version(_FETCH, version)
    r = reader_for(_FETCH, version, body)
    throttle = r.int32()
    error_code, session_id = (r.int16(), r.int32()) if version >= 7 else (0, 0)

    def aborted(r: Reader) -> AbortedTransaction:
        a = AbortedTransaction(r.int64(), r.int64())
        r.tagged_fields()
        return a

    def partition(r: Reader) -> FetchPartitionResponse:
        index, error, hw, lso = r.int32(), r.int16(), r.int64(), r.int64()
        log_start = r.int64() if version >= 5 else -1
        aborted_txns = r.nullable_array(aborted, 16)
        preferred = r.int32() if version >= 11 else -1
        records = r.nullable_bytes()
        tags = read_tagged_fields(r, _PARTITION_ANSWER_TAGS)
        return FetchPartitionResponse(
            index, error, hw, records, lso, log_start, aborted_txns, preferred,
            decode_tagged(tags, _DIVERGING_EPOCH_TAG, _read_diverging_epoch, None),
            decode_tagged(tags, _CURRENT_LEADER_TAG, read_leader, None),
            decode_tagged(tags, _SNAPSHOT_ID_TAG, _read_snapshot_id, None))

    def topic(r: Reader) -> FetchTopicResponse:
        name, topic_id = ("", r.uuid()) if version >= 13 else (r.string(), ZERO_UUID)
        partitions = r.array(partition, 30)
        r.tagged_fields()
        return FetchTopicResponse(name, partitions, topic_id)

    responses = r.array(topic, 6)
    no_endpoints: tuple[NodeEndpoint, ...] = ()
    tags = read_tagged_fields(r, {_NODE_ENDPOINTS_TAG} if version >= 16 else ())
    endpoints = decode_tagged(tags, _NODE_ENDPOINTS_TAG, read_node_endpoints, no_endpoints)
    return FetchResponse(throttle, responses, error_code, session_id, endpoints)
