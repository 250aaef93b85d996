"""Fetch (key 1), v4–v17: consumers and follower replicas read record batches.

The response encoder returns chunks: bytes, and the caller's records objects (anything with
a `length`, e.g. a segment `FileSlice`) in place, so the server can write the bytes before
each one and then send the records straight from the segment file.

Kafka 3.9's FetchRequest/FetchResponse.json: v12 is flexible and adds LastFetchedEpoch, the
ClusterId tag (0) and, in answers, DivergingEpoch (tag 0), CurrentLeader (tag 1) and
SnapshotId (tag 2); v13 names topics by id; v15 moves the replica id into the ReplicaState
tag (1); v16 adds NodeEndpoints (tag 0) to answers; v17 the ReplicaDirectoryId tag (0).
"""

from __future__ import annotations

from collections.abc import Callable

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
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
    LeaderIdAndEpoch,
    NodeEndpoint,
    Records,
    SnapshotId,
    read_tags,
    write_tags,
)
from common.protocol.primitives import Chunk, Reader, Writer

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
    "LeaderIdAndEpoch",
    "NodeEndpoint",
    "Records",
    "SnapshotId",
    "decode_fetch_request",
    "decode_fetch_response",
    "encode_fetch_request",
    "encode_fetch_response",
]


# ---- request ---------------------------------------------------------------------------------


def decode_fetch_request(body: memoryview, version: int) -> FetchRequest:
    check_version(ApiKey.FETCH, version)
    r = reader_for(ApiKey.FETCH, version, body)
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
        directory = [ZERO_UUID]

        def directory_id(t: Reader) -> None:
            directory[0] = t.uuid()

        read_tags(r, {0: directory_id} if version >= 17 else {})
        return FetchPartition(index, offset, max_bytes, log_start, epoch, last_fetched, directory[0])

    def topic(r: Reader) -> FetchTopic:
        name, topic_id = ("", r.uuid()) if version >= 13 else (r.string(), ZERO_UUID)
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
    found: dict[str, object] = {}

    def cluster_id(t: Reader) -> None:
        found["cluster_id"] = t.nullable_string()

    def replica_state(t: Reader) -> None:
        found["replica"] = (t.int32(), t.int64())
        t.tagged_fields()

    read_tags(r, {0: cluster_id, 1: replica_state} if version >= 15 else {0: cluster_id})
    replica_epoch = -1
    if version >= 15 and "replica" in found:
        replica_id, replica_epoch = found["replica"]  # type: ignore[misc]
    cluster = found.get("cluster_id")
    return FetchRequest(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, topics,
                        session_id, session_epoch, forgotten_topics, rack_id,
                        cluster if isinstance(cluster, str) else None, replica_epoch)


def encode_fetch_request(req: FetchRequest, version: int) -> list[Chunk]:
    """The follower fetcher's side (and tests): the inverse of `decode_fetch_request`."""
    check_version(ApiKey.FETCH, version)
    w = writer_for(ApiKey.FETCH, version)
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
        write_tags(w, [(0, lambda t: t.uuid(directory))] if version >= 17 and directory != ZERO_UUID else [])

    def topic(w: Writer, t: FetchTopic) -> None:
        if version >= 13:
            w.uuid(t.topic_id)
        else:
            w.string(t.topic)
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
    tags: list[tuple[int, Callable[[Writer], None]]] = []
    if req.cluster_id is not None:
        cluster_id = req.cluster_id
        tags.append((0, lambda t: t.nullable_string(cluster_id)))
    if version >= 15 and req.replica_id >= 0:
        def replica_state(t: Writer) -> None:
            t.int32(req.replica_id)
            t.int64(req.replica_epoch)
            t.tagged_fields()
        tags.append((1, replica_state))
    write_tags(w, tags)
    return w.chunks()


# ---- response --------------------------------------------------------------------------------


def encode_fetch_response(resp: FetchResponse, version: int) -> list[Chunk]:
    """Chunks: bytes, with each partition's records placeholder (if any) as its own item."""
    check_version(ApiKey.FETCH, version)
    w = writer_for(ApiKey.FETCH, version)
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
        write_tags(w, _partition_tags(p))

    def topic(w: Writer, t: FetchTopicResponse) -> None:
        if version >= 13:
            w.uuid(t.topic_id)
        else:
            w.string(t.topic)
        w.array(t.partitions, partition)
        w.tagged_fields()

    w.array(resp.responses, topic)
    endpoints = resp.node_endpoints
    write_tags(w, [(0, lambda t: t.array(endpoints, _node_endpoint))] if version >= 16 and endpoints else [])
    return w.chunks()


def _partition_tags(p: FetchPartitionResponse) -> list[tuple[int, Callable[[Writer], None]]]:
    tags: list[tuple[int, Callable[[Writer], None]]] = []
    diverging, leader, snapshot = p.diverging_epoch, p.current_leader, p.snapshot_id
    if diverging is not None:
        def write_diverging(t: Writer) -> None:
            t.int32(diverging.epoch)
            t.int64(diverging.end_offset)
            t.tagged_fields()
        tags.append((0, write_diverging))
    if leader is not None:
        def write_leader(t: Writer) -> None:
            t.int32(leader.leader_id)
            t.int32(leader.leader_epoch)
            t.tagged_fields()
        tags.append((1, write_leader))
    if snapshot is not None:
        def write_snapshot(t: Writer) -> None:
            t.int64(snapshot.end_offset)
            t.int32(snapshot.epoch)
            t.tagged_fields()
        tags.append((2, write_snapshot))
    return tags


def _node_endpoint(w: Writer, n: NodeEndpoint) -> None:
    w.int32(n.node_id)
    w.string(n.host)
    w.int32(n.port)
    w.nullable_string(n.rack)
    w.tagged_fields()


def decode_fetch_response(body: memoryview, version: int) -> FetchResponse:
    """The follower fetcher's side; records come back as views into `body`."""
    check_version(ApiKey.FETCH, version)
    r = reader_for(ApiKey.FETCH, version, body)
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
        tags: dict[int, object] = {}

        def diverging(t: Reader) -> None:
            tags[0] = EpochEndOffset(t.int32(), t.int64())
            t.tagged_fields()

        def leader(t: Reader) -> None:
            tags[1] = LeaderIdAndEpoch(t.int32(), t.int32())
            t.tagged_fields()

        def snapshot(t: Reader) -> None:
            tags[2] = SnapshotId(t.int64(), t.int32())
            t.tagged_fields()

        read_tags(r, {0: diverging, 1: leader, 2: snapshot})
        return FetchPartitionResponse(index, error, hw, records, lso, log_start, aborted_txns, preferred,
                                      tags.get(0), tags.get(1), tags.get(2))  # type: ignore[arg-type]

    def topic(r: Reader) -> FetchTopicResponse:
        name, topic_id = ("", r.uuid()) if version >= 13 else (r.string(), ZERO_UUID)
        partitions = r.array(partition, 30)
        r.tagged_fields()
        return FetchTopicResponse(name, partitions, topic_id)

    responses = r.array(topic, 6)
    endpoints: list[NodeEndpoint] = []

    def node_endpoints(t: Reader) -> None:
        def endpoint(e: Reader) -> NodeEndpoint:
            n = NodeEndpoint(e.int32(), e.string(), e.int32(), e.nullable_string())
            e.tagged_fields()
            return n
        endpoints.extend(t.array(endpoint, 10))

    read_tags(r, {0: node_endpoints} if version >= 16 else {})
    return FetchResponse(throttle, responses, error_code, session_id, tuple(endpoints))
