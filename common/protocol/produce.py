"""Produce (key 0), v3–v12 (v12 adds no field: a transactions v2 client, KIP-890). Records stay a memoryview slice of the request, never parsed here.

v9 is the first flexible version. v10 (KIP-951) adds two tagged fields to the response, sent
only when set: a partition's CurrentLeader (the leader the broker knows of, on
NOT_LEADER_OR_FOLLOWER) and the response's NodeEndpoints (where to reach those leaders), so a
client can retry on the new leader without a Metadata round trip. v11 has no new field: it
lets the broker answer TRANSACTION_ABORTABLE (KIP-890) to a transactional producer.

With acks=0 the broker sends no response at all; that decision belongs to the server.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NamedTuple

from common.protocol.api_keys import ApiKey, check_version, is_flexible, reader_for, writer_for
from common.protocol.leader_discovery import (
    UNKNOWN_LEADER,
    LeaderIdAndEpoch,
    NodeEndpoint,
    read_leader,
    read_node_endpoints,
    write_leader,
    write_node_endpoints,
)
from common.protocol.primitives import MAX_VARINT_BYTES, Chunk, ProtocolError, Reader, Writer
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
class PartitionProduceData:  # a dataclass still: a NamedTuple's `index` field would hide tuple.index
    index: int
    records: memoryview | bytes | None  # record batches exactly as sent


# The per-topic entries of a request and the per-partition and per-topic ones of a response are
# NamedTuples, not frozen dataclasses: as immutable and behaviour-free, but a frozen dataclass
# sets each field through object.__setattr__ and costs several times a tuple to build, and a
# producer with linger.ms=0 sends one request per record (bench/produce_consume.py's latency phases).
class TopicProduceData(NamedTuple):
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


class PartitionProduceResponse(NamedTuple):
    partition_index: int
    error_code: int
    base_offset: int
    log_append_time_ms: int = -1
    log_start_offset: int = -1  # v5+
    record_errors: tuple[BatchIndexAndErrorMessage, ...] = ()  # v8+
    error_message: str | None = None  # v8+
    current_leader: LeaderIdAndEpoch = UNKNOWN_LEADER  # v10+, tagged


class TopicProduceResponse(NamedTuple):
    name: str
    partitions: tuple[PartitionProduceResponse, ...]


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    responses: tuple[TopicProduceResponse, ...]
    throttle_time_ms: int = 0
    node_endpoints: tuple[NodeEndpoint, ...] = ()  # v10+, tagged


_ACKS_TIMEOUT: Final = struct.Struct(">hi")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_TOPIC_MIN_BYTES: Final = (6, 3)  # the smallest topic entry: (classic, flexible)
_PARTITION_MIN_BYTES: Final = (8, 5)
_PARTITION_V5: Final = struct.Struct(">ihqqq")  # index, error, base offset, log append time, log start
_PARTITION_V3: Final = struct.Struct(">ihqq")
_INDEX_AND_LENGTH: Final = struct.Struct(">ii")  # a classic partition entry's head
_INDEX_VARINT3: Final = struct.Struct(">iBBB")  # a flexible one's: index and the length's first 3 bytes
# object.__new__ and the slots' setters (C): a PartitionProduceData without its __init__'s frame
_new_partition: Final = object.__new__
_SET_INDEX: Final[Callable[[PartitionProduceData, int], None]] = vars(PartitionProduceData)["index"].__set__
_SET_RECORDS: Final[Callable[[PartitionProduceData, memoryview | None], None]] = \
    vars(PartitionProduceData)["records"].__set__
_NO_RECORD_ERRORS: Final = (b"\x00\x00\x00\x00\xff\xff", b"\x01\x00")  # v8+: no record errors, null message


def decode_produce_request(body: memoryview, version: int) -> ProduceRequest:
    """One pass over the body with local offsets, not a Reader call per field: a produce of one
    small batch is the request a low-latency producer sends thousands of times a second. The
    checks are the Reader's (`primitives`): every length against the bytes left, compact
    lengths, tagged fields skipped (a non-empty section through the Reader's own checks)."""
    check_version(ApiKey.PRODUCE, version)
    buf = memoryview(body)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    end = len(buf)
    flexible = is_flexible(ApiKey.PRODUCE, version)
    n, pos = _length(buf, 0, end, flexible, _INT16, "string")
    transactional_id = None if n < 0 else _utf8(buf[pos:pos + n])
    pos += max(n, 0)
    if pos + _ACKS_TIMEOUT.size > end:
        raise ProtocolError("truncated acks and timeout_ms")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
    pos += _ACKS_TIMEOUT.size
    topics: list[TopicProduceData] = []
    new_partition, set_index, set_records = _new_partition, _SET_INDEX, _SET_RECORDS
    n_topics, pos = _count(buf, pos, end, flexible, _TOPIC_MIN_BYTES[flexible])
    for _ in range(n_topics):  # bounded: the count was checked against the bytes left
        n, pos = _length(buf, pos, end, flexible, _INT16, "string")
        if n < 0:
            raise ProtocolError("null string where a string is required")
        name = _utf8(buf[pos:pos + n])
        pos += n
        partitions: list[PartitionProduceData] = []
        n_partitions, pos = _count(buf, pos, end, flexible, _PARTITION_MIN_BYTES[flexible])
        for _ in range(n_partitions):  # bounded as the topics
            # The index and the records' length in one unpack, no call: a bulk producer's request
            # holds one entry per partition (the _length and _uvarint frames were ~90 opcodes of
            # each). A compact length of 1-3 bytes (records under 2 MiB) is read here; anything
            # else, a short tail or a bad length goes field by field, which names the fault.
            start = pos
            if pos + 8 > end:
                index, n, pos = _partition_head(buf, pos, end, flexible)
            elif flexible:
                index, b0, b1, b2 = _INDEX_VARINT3.unpack_from(buf, pos)
                if not b0 & 0x80:
                    n, pos = b0 - 1, pos + 5
                elif not b1 & 0x80:
                    n, pos = ((b0 & 0x7F) | (b1 << 7)) - 1, pos + 6
                elif not b2 & 0x80:
                    n, pos = ((b0 & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14)) - 1, pos + 7
                else:
                    index, n, pos = _partition_head(buf, pos, end, flexible)
            else:
                index, n = _INDEX_AND_LENGTH.unpack_from(buf, pos)
                pos += 8
            if n < -1 or n > end - pos:  # read again field by field, which raises naming the fault
                index, n, pos = _partition_head(buf, start, end, flexible)
            # slot setters (C), not the frozen dataclass's __init__ (a Python frame per partition)
            entry = new_partition(PartitionProduceData)
            set_index(entry, index)
            if n >= 0:
                set_records(entry, buf[pos:pos + n])
                pos += n
            else:
                set_records(entry, None)
            partitions.append(entry)
            if flexible:  # the empty section inline (_skip_tagged_fields's own first test)
                pos = pos + 1 if pos < end and buf[pos] == 0 else _skip_tagged_fields(buf, pos, end)
        topics.append(TopicProduceData(name, tuple(partitions)))
        if flexible:
            pos = _skip_tagged_fields(buf, pos, end)
    if flexible:
        _skip_tagged_fields(buf, pos, end)
    return ProduceRequest(transactional_id, acks, timeout_ms, tuple(topics))


def _partition_head(buf: memoryview, pos: int, end: int, flexible: bool) -> tuple[int, int, int]:
    """(index, records length or -1, position after them) of the partition entry at `pos`, field
    by field with the checks' own messages: the decoder's path for what its one unpack does not read."""
    if pos + 4 > end:
        raise ProtocolError(f"truncated partition index: need 4 bytes, have {end - pos}")
    index = _INT32.unpack_from(buf, pos)[0]
    n, pos = _length(buf, pos + 4, end, flexible, _INT32, "bytes")
    return index, n, pos


def _length(buf: memoryview, pos: int, end: int, flexible: bool, classic: struct.Struct,
            what: str) -> tuple[int, int]:
    """(length, position after it) of a string or bytes: -1 for null; the bytes left must hold it."""
    if not flexible:
        if pos + classic.size > end:
            raise ProtocolError(f"truncated {what} length")
        n: int = classic.unpack_from(buf, pos)[0]
        pos += classic.size
        if n < -1:
            raise ProtocolError(f"invalid {what} length {n}")
    elif pos < end and buf[pos] < 0x80:  # a one-byte varint: lengths under 127
        n = buf[pos] - 1
        pos += 1
    else:
        n, pos = _uvarint(buf, pos, end)
        n -= 1
    if n > end - pos:
        raise ProtocolError(f"{what} of {n} bytes past the end ({end - pos} left)")
    return n, pos


def _count(buf: memoryview, pos: int, end: int, flexible: bool, min_size: int) -> tuple[int, int]:
    """(items, position after the count) of a non-null array whose items fit in the bytes left."""
    if flexible:
        n, pos = _length(buf, pos, end, flexible, _INT32, "array")
    else:
        if pos + 4 > end:
            raise ProtocolError(f"truncated array length: need 4 bytes, have {end - pos}")
        n, pos = _INT32.unpack_from(buf, pos)[0], pos + 4
    if n < 0:
        raise ProtocolError(f"invalid array length {n}")
    if n * min_size > end - pos:
        raise ProtocolError(f"array of {n} items cannot fit in {end - pos} bytes")
    return n, pos


def _uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of an unsigned varint of at most MAX_VARINT_BYTES bytes.

    Two and three bytes unrolled: a record batch's compact length (127 B to 2 MiB) is one of
    those (the partition loop reads it inline; this is for its slow path and the strings); the
    loop took twice the instructions."""
    if pos + 3 <= end:
        b0, b1 = buf[pos], buf[pos + 1]
        if b0 & 0x80:  # not a one-byte varint (the loop below takes those)
            if not b1 & 0x80:
                return (b0 & 0x7F) | (b1 << 7), pos + 2
            b2 = buf[pos + 2]
            if not b2 & 0x80:
                return (b0 & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14), pos + 3
    value = 0
    for i in range(MAX_VARINT_BYTES):  # bounded
        if pos >= end:
            raise ProtocolError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, pos
    raise ProtocolError("varint too long")


def _skip_tagged_fields(buf: memoryview, pos: int, end: int) -> int:
    """Past a struct's tagged-field section: one byte when empty (the usual case), else the
    Reader's checks (count, ascending tags, sizes) over the section."""
    if pos < end and buf[pos] == 0:
        return pos + 1
    r = Reader(buf, pos, flexible=True)
    r.skip_tagged_fields()
    return r.pos


def _utf8(raw: memoryview) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("string is not valid UTF-8") from None


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
    """A partition's fixed fields in one pack and the usual "no record errors, no message, no
    leader" tail as constant bytes: the response to a one-record produce, many a second."""
    check_version(ApiKey.PRODUCE, version)
    w = writer_for(ApiKey.PRODUCE, version)
    flexible = w.flexible
    leaders = version >= LEADER_DISCOVERY_VERSION
    no_errors = _NO_RECORD_ERRORS[flexible]
    # v8+ without record errors or a leader: the fixed fields, the empty errors and message, and
    # an empty tag section in one write (a bulk producer's request carries every partition)
    plain_tail = no_errors + (b"\x00" if flexible else b"")
    plain = version >= 8
    pack = _PARTITION_V5.pack
    _write_count(w, len(resp.responses))
    for t in resp.responses:
        w.string(t.name)
        _write_count(w, len(t.partitions))
        for p in t.partitions:
            if plain and not p.record_errors and p.error_message is None and p.current_leader is UNKNOWN_LEADER:
                w.raw(pack(p.partition_index, p.error_code, p.base_offset, p.log_append_time_ms,
                           p.log_start_offset) + plain_tail)
                continue
            if version >= 5:
                w.raw(_PARTITION_V5.pack(p.partition_index, p.error_code, p.base_offset,
                                         p.log_append_time_ms, p.log_start_offset))
            else:
                w.raw(_PARTITION_V3.pack(p.partition_index, p.error_code, p.base_offset, p.log_append_time_ms))
            if version >= 8:
                if p.record_errors or p.error_message is not None:
                    w.array(p.record_errors, _write_record_error)
                    w.nullable_string(p.error_message)
                else:
                    w.raw(no_errors)
            # identity first: the hot path's partitions all share the default object
            if leaders and p.current_leader is not UNKNOWN_LEADER and p.current_leader != UNKNOWN_LEADER:
                leader = p.current_leader
                write_tagged_fields(w, {_CURRENT_LEADER_TAG: encode_tagged(lambda t: write_leader(t, leader))})
            else:
                w.tagged_fields()
        w.tagged_fields()
    w.int32(resp.throttle_time_ms)
    if leaders and resp.node_endpoints:
        write_tagged_fields(w, {_NODE_ENDPOINTS_TAG: encode_tagged(
            lambda t: write_node_endpoints(t, resp.node_endpoints))})
    else:
        w.tagged_fields()
    return w.chunks()


def _write_count(w: Writer, n: int) -> None:
    """An array's length: compact (n + 1) when flexible."""
    if w.flexible:
        w.uvarint(n + 1)
    else:
        w.int32(n)


def _write_record_error(w: Writer, e: BatchIndexAndErrorMessage) -> None:
    w.int32(e.batch_index)
    w.nullable_string(e.batch_index_error_message)
    w.tagged_fields()


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
