"""OffsetFetch (key 9) v0–v9: a group's committed offsets.

v0 and v1 are the same layout (Kafka kept v0 offsets in ZooKeeper; with no ZooKeeper both
read `__consumer_offsets`), v2+ a null topic list means every partition and a top-level
error_code, v3+ throttle_time_ms, v5+ committed_leader_epoch, v6 is flexible, v7 adds
require_stable (KIP-447: wait out pending transactional offsets; tidelog has no
transactions, so no offset is ever pending), v8 asks for several groups at once and answers
each group with its own error (KIP-709), v9 adds each group's member_id and member_epoch
(KIP-848; a classic group checks neither, as Kafka's ClassicGroup.validateOffsetFetch).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.primitives import Chunk, Reader, Writer


@dataclass(frozen=True, slots=True)
class OffsetFetchRequestTopic:
    name: str
    partition_indexes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchRequestGroup:
    """One group of a v8+ request."""

    group_id: str
    topics: tuple[OffsetFetchRequestTopic, ...] | None  # None: every committed partition
    member_id: str | None = None  # v9+
    member_epoch: int = -1  # v9+


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    """v0-v7 name one group (`group_id`, `topics`); v8+ name several in `groups`."""

    group_id: str
    topics: tuple[OffsetFetchRequestTopic, ...] | None  # None (v2+): every committed partition
    require_stable: bool = False  # v7+
    groups: tuple[OffsetFetchRequestGroup, ...] = ()  # v8+


@dataclass(frozen=True, slots=True)
class OffsetFetchResponsePartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int  # v5+
    metadata: str | None
    error_code: int


@dataclass(frozen=True, slots=True)
class OffsetFetchResponseTopic:
    name: str
    partitions: tuple[OffsetFetchResponsePartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchResponseGroup:
    """One group's answer (v8+): its own error instead of the response's."""

    group_id: str
    topics: tuple[OffsetFetchResponseTopic, ...]
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    topics: tuple[OffsetFetchResponseTopic, ...]  # v0-v7
    error_code: int = 0  # v2-v7
    throttle_time_ms: int = 0  # v3+
    groups: tuple[OffsetFetchResponseGroup, ...] = ()  # v8+


def _read_fetch_topic(rr: Reader) -> OffsetFetchRequestTopic:
    t = OffsetFetchRequestTopic(rr.string(), rr.int32_array())
    rr.tagged_fields()
    return t


def _write_fetch_topic(ww: Writer, t: OffsetFetchRequestTopic) -> None:
    ww.string(t.name)
    ww.int32_array(t.partition_indexes)
    ww.tagged_fields()


def decode_offset_fetch_request(body: memoryview, version: int) -> OffsetFetchRequest:
    check_version(ApiKey.OFFSET_FETCH, version)
    r = reader_for(ApiKey.OFFSET_FETCH, version, body)
    if version >= 8:
        def group(rr: Reader) -> OffsetFetchRequestGroup:
            group_id = rr.string()
            member_id, epoch = (rr.nullable_string(), rr.int32()) if version >= 9 else (None, -1)
            g = OffsetFetchRequestGroup(group_id, rr.nullable_array(_read_fetch_topic, 2), member_id, epoch)
            rr.tagged_fields()
            return g

        groups = r.array(group, 2)
        require_stable = r.boolean()
        r.tagged_fields()
        return OffsetFetchRequest("", None, require_stable, groups)
    group_id = r.string()
    topics = r.nullable_array(_read_fetch_topic, 2) if version >= 2 else r.array(_read_fetch_topic, 2)
    require_stable = r.boolean() if version >= 7 else False
    r.tagged_fields()
    return OffsetFetchRequest(group_id, topics, require_stable)


def encode_offset_fetch_request(req: OffsetFetchRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): the inverse of `decode_offset_fetch_request`."""
    check_version(ApiKey.OFFSET_FETCH, version)
    w = writer_for(ApiKey.OFFSET_FETCH, version)
    if version >= 8:
        def group(ww: Writer, g: OffsetFetchRequestGroup) -> None:
            ww.string(g.group_id)
            if version >= 9:
                ww.nullable_string(g.member_id)
                ww.int32(g.member_epoch)
            ww.nullable_array(g.topics, _write_fetch_topic)
            ww.tagged_fields()

        w.array(req.groups, group)
    else:
        w.string(req.group_id)
        w.nullable_array(req.topics, _write_fetch_topic)
    if version >= 7:
        w.boolean(req.require_stable)
    w.tagged_fields()
    return w.chunks()


def encode_offset_fetch_response(resp: OffsetFetchResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.OFFSET_FETCH, version)
    w = writer_for(ApiKey.OFFSET_FETCH, version)
    if version >= 3:
        w.int32(resp.throttle_time_ms)

    def partition(ww: Writer, p: OffsetFetchResponsePartition) -> None:
        ww.int32(p.partition_index)
        ww.int64(p.committed_offset)
        if version >= 5:
            ww.int32(p.committed_leader_epoch)
        ww.nullable_string(p.metadata)
        ww.int16(p.error_code)
        ww.tagged_fields()

    def topic(ww: Writer, t: OffsetFetchResponseTopic) -> None:
        ww.string(t.name)
        ww.array(t.partitions, partition)
        ww.tagged_fields()

    if version >= 8:
        def group(ww: Writer, g: OffsetFetchResponseGroup) -> None:
            ww.string(g.group_id)
            ww.array(g.topics, topic)
            ww.int16(g.error_code)
            ww.tagged_fields()

        w.array(resp.groups, group)
    else:
        w.array(resp.topics, topic)
        if version >= 2:
            w.int16(resp.error_code)
    w.tagged_fields()
    return w.chunks()


def decode_offset_fetch_response(body: memoryview, version: int) -> OffsetFetchResponse:
    """Client side (tests, tools): the inverse of `encode_offset_fetch_response`."""
    check_version(ApiKey.OFFSET_FETCH, version)
    r = reader_for(ApiKey.OFFSET_FETCH, version, body)
    throttle = r.int32() if version >= 3 else 0

    def partition(rr: Reader) -> OffsetFetchResponsePartition:
        index, offset = rr.int32(), rr.int64()
        epoch = rr.int32() if version >= 5 else -1
        p = OffsetFetchResponsePartition(index, offset, epoch, rr.nullable_string(), rr.int16())
        rr.tagged_fields()
        return p

    def topic(rr: Reader) -> OffsetFetchResponseTopic:
        t = OffsetFetchResponseTopic(rr.string(), rr.array(partition, 16))
        rr.tagged_fields()
        return t

    if version >= 8:
        def group(rr: Reader) -> OffsetFetchResponseGroup:
            g = OffsetFetchResponseGroup(rr.string(), rr.array(topic, 2), rr.int16())
            rr.tagged_fields()
            return g

        groups = r.array(group, 4)
        r.tagged_fields()
        return OffsetFetchResponse((), 0, throttle, groups)
    topics = r.array(topic, 2)
    error = r.int16() if version >= 2 else 0
    r.tagged_fields()
    return OffsetFetchResponse(topics, error, throttle)
