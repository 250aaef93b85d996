"""Fetch (key 1), v4–v11: consumers and follower replicas read record batches.

The response encoder returns chunks: bytes, and the caller's records objects (anything with
a `length`, e.g. a segment `FileSlice`) in place, so the server can write the bytes before
each one and then send the records straight from the segment file.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version
from common.protocol.primitives import Chunk, Reader, RecordsPlaceholder, Writer

CONSUMER_REPLICA_ID = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
FULL_FETCH_SESSION_EPOCH = 0
FINAL_FETCH_SESSION_EPOCH = -1


@dataclass(frozen=True, slots=True)
class FetchPartition:
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    log_start_offset: int = -1  # v5+, followers only
    current_leader_epoch: int = -1  # v9+


@dataclass(frozen=True, slots=True)
class FetchTopic:
    topic: str
    partitions: tuple[FetchPartition, ...]


@dataclass(frozen=True, slots=True)
class ForgottenTopic:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FetchRequest:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    topics: tuple[FetchTopic, ...]
    session_id: int = 0  # v7+
    session_epoch: int = FINAL_FETCH_SESSION_EPOCH  # v7+
    forgotten_topics_data: tuple[ForgottenTopic, ...] = ()  # v7+
    rack_id: str = ""  # v11+


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


Records = bytes | memoryview | RecordsPlaceholder | None


@dataclass(frozen=True, slots=True)
class FetchPartitionResponse:
    partition_index: int
    error_code: int
    high_watermark: int
    records: Records
    last_stable_offset: int = -1
    log_start_offset: int = -1  # v5+
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None
    preferred_read_replica: int = -1  # v11+


@dataclass(frozen=True, slots=True)
class FetchTopicResponse:
    topic: str
    partitions: tuple[FetchPartitionResponse, ...]


@dataclass(frozen=True, slots=True)
class FetchResponse:
    throttle_time_ms: int
    responses: tuple[FetchTopicResponse, ...]
    error_code: int = 0  # v7+
    session_id: int = 0  # v7+


def decode_fetch_request(body: memoryview, version: int) -> FetchRequest:
    check_version(ApiKey.FETCH, version)
    r = Reader(body)
    replica_id, max_wait_ms, min_bytes, max_bytes = r.int32(), r.int32(), r.int32(), r.int32()
    isolation_level = r.int8()
    session_id, session_epoch = (r.int32(), r.int32()) if version >= 7 else (0, -1)

    def partition(r: Reader) -> FetchPartition:
        index = r.int32()
        epoch = r.int32() if version >= 9 else -1
        offset = r.int64()
        log_start = r.int64() if version >= 5 else -1
        return FetchPartition(index, offset, r.int32(), log_start, epoch)

    def topic(r: Reader) -> FetchTopic:
        return FetchTopic(r.string(), r.array(partition, 16))

    def forgotten(r: Reader) -> ForgottenTopic:
        return ForgottenTopic(r.string(), r.int32_array())

    topics = r.array(topic, 6)
    forgotten_topics = r.array(forgotten, 6) if version >= 7 else ()
    rack_id = r.string() if version >= 11 else ""
    return FetchRequest(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, topics,
                        session_id, session_epoch, forgotten_topics, rack_id)


def encode_fetch_request(req: FetchRequest, version: int) -> list[Chunk]:
    """The follower fetcher's side: the inverse of `decode_fetch_request`."""
    check_version(ApiKey.FETCH, version)
    w = Writer()
    for v in (req.replica_id, req.max_wait_ms, req.min_bytes, req.max_bytes):
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
        if version >= 5:
            w.int64(p.log_start_offset)
        w.int32(p.partition_max_bytes)

    def topic(w: Writer, t: FetchTopic) -> None:
        w.string(t.topic)
        w.array(t.partitions, partition)

    def forgotten(w: Writer, f: ForgottenTopic) -> None:
        w.string(f.topic)
        w.int32_array(f.partitions)

    w.array(req.topics, topic)
    if version >= 7:
        w.array(req.forgotten_topics_data, forgotten)
    if version >= 11:
        w.string(req.rack_id)
    return w.chunks()


def encode_fetch_response(resp: FetchResponse, version: int) -> list[Chunk]:
    """Chunks: bytes, with each partition's records placeholder (if any) as its own item."""
    check_version(ApiKey.FETCH, version)
    w = Writer()
    w.int32(resp.throttle_time_ms)
    if version >= 7:
        w.int16(resp.error_code)
        w.int32(resp.session_id)

    def aborted(w: Writer, a: AbortedTransaction) -> None:
        w.int64(a.producer_id)
        w.int64(a.first_offset)

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

    def topic(w: Writer, t: FetchTopicResponse) -> None:
        w.string(t.topic)
        w.array(t.partitions, partition)

    w.array(resp.responses, topic)
    return w.chunks()


def decode_fetch_response(body: memoryview, version: int) -> FetchResponse:
    """The follower fetcher's side; records come back as views into `body`."""
    check_version(ApiKey.FETCH, version)
    r = Reader(body)
    throttle = r.int32()
    error_code, session_id = (r.int16(), r.int32()) if version >= 7 else (0, 0)

    def aborted(r: Reader) -> AbortedTransaction:
        return AbortedTransaction(r.int64(), r.int64())

    def partition(r: Reader) -> FetchPartitionResponse:
        index, error, hw, lso = r.int32(), r.int16(), r.int64(), r.int64()
        log_start = r.int64() if version >= 5 else -1
        aborted_txns = r.nullable_array(aborted, 16)
        preferred = r.int32() if version >= 11 else -1
        records = r.nullable_bytes()
        return FetchPartitionResponse(index, error, hw, records, lso, log_start, aborted_txns,
                                      preferred)

    def topic(r: Reader) -> FetchTopicResponse:
        return FetchTopicResponse(r.string(), r.array(partition, 30))

    responses = r.array(topic, 6)
    return FetchResponse(throttle, responses, error_code, session_id)
