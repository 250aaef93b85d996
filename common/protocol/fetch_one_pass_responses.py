"""Fetch (key 1): the one-pass response codecs, the hot versions written and read by struct
packs and unpacks rather than a Writer or Reader call per field (`common.protocol.fetch` tries
them first); the requests' are `common.protocol.fetch_one_pass`.

Each returns None for bytes or values it does not take, and the field-by-field codec in
`common.protocol.fetch` then writes, reads or refuses them: that one covers every version and
is the one that says why bytes are refused. An answer of one partition of one topic (a
follower's in an acks=all canary's rounds, a consumer's usual one) is packed or read in one or
two struct calls; any other goes through the arrays.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from common.protocol.fetch_messages import (
    ZERO_UUID,
    AbortedTransaction,
    FetchPartitionResponse,
    FetchResponse,
    FetchTopicResponse,
)
from common.protocol.fetch_one_pass import _I16, _I32, _MAX_STRING_BYTES
from common.protocol.primitives import Chunk
from common.slotted import instance_builder


def _encode_classic_response(resp: FetchResponse, version: int) -> list[Chunk]:
    """A v5-v11 response by one pack per partition head, the Writer's bytes exactly: these
    versions have no tagged fields, so an answer is fixed-size but for its topic names, aborted
    transactions and records (field by field, ~20 Writer calls cost ~10 us for one partition).
    Records in bytes are joined in; a placeholder (a segment slice) is its own chunk.

    A v11 answer of one partition of one topic with no aborted transaction (a follower's, in an
    acks=all canary's rounds: the leader writes two per produce) is two packs around the
    topic's name, the layout `_decode_classic_response` reads; any other goes to the arrays,
    which take 39 opcodes more for it (bench/fetch_codec_opcodes.py: their loops and list)."""
    topics = resp.responses
    if version >= 11 and len(topics) == 1 and len(partitions := topics[0].partitions) == 1 \
            and not (p := partitions[0]).aborted_transactions:
        name = _names.get(topics[0].topic) or _encode_name(topics[0].topic)
        records = p.records
        length = -1 if records is None else len(records) if isinstance(records, _IN_BYTES) else records.length
        head = b"".join((
            _ONE_TOPIC_HEAD_V11.pack(resp.throttle_time_ms, resp.error_code, resp.session_id, 1, len(name)),
            name,
            _ONE_ANSWER_V11.pack(1, p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                                 p.log_start_offset, -1 if p.aborted_transactions is None else 0,
                                 p.preferred_read_replica, length)))
        if records is None or length == 0:
            return [head]
        if isinstance(records, _IN_BYTES):
            return [head + records]
        return [head, records]
    return _encode_classic_topics(resp, version)


def _encode_classic_topics(resp: FetchResponse, version: int) -> list[Chunk]:
    """`_encode_classic_response`'s arrays: any topics, partitions and aborted transactions, one
    pack per partition head, and each name encoded once for every answer (`_names`)."""
    topics = resp.responses
    v7, v11 = version >= 7, version >= 11
    answer = _ANSWER_HEAD_V11.pack if v11 else _ANSWER_HEAD_V5.pack
    out: list[Any] = [_RESPONSE_HEAD_V7.pack(resp.throttle_time_ms, resp.error_code, resp.session_id, len(topics))
                      if v7 else _RESPONSE_HEAD_V5.pack(resp.throttle_time_ms, len(topics))]
    chunks: list[Chunk] = []
    names = _names
    for t in topics:  # bounded by the response's topics
        name = names.get(t.topic) or _encode_name(t.topic)
        partitions = t.partitions
        out += (_I16.pack(len(name)), name, _I32.pack(len(partitions)))
        for p in partitions:  # bounded by the topic's partitions
            txns, records = p.aborted_transactions, p.records
            length = -1 if records is None else len(records) if isinstance(records, _IN_BYTES) else records.length
            if v11:
                fixed = answer(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                               p.log_start_offset, -1 if txns is None else len(txns), p.preferred_read_replica, length)
            else:
                fixed = answer(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                               p.log_start_offset, -1 if txns is None else len(txns), length)
            if txns:
                # the aborted transactions go between their count and the preferred replica: the
                # head packed them as one struct, so it is split around them
                out.append(fixed[:_ABORTED_AT])
                out.extend([_ABORTED.pack(a.producer_id, a.first_offset) for a in txns])
                out.append(fixed[_ABORTED_AT:])
            else:
                out.append(fixed)
            if length > 0:
                if isinstance(records, _IN_BYTES):
                    out.append(records)
                else:
                    chunks.append(b"".join(out))
                    chunks.append(records)  # type: ignore[arg-type]
                    out = []
    if out:
        chunks.append(b"".join(out))
    return chunks


def _encode_flexible_response(resp: FetchResponse, version: int) -> list[Chunk] | None:
    """A v12+ response with no tagged field to write (no diverging epoch, leader hint, snapshot
    id or node endpoints: a consumer's ordinary answer) by one pack per partition head, the
    Writer's bytes exactly; None otherwise (the fields path writes it).

    A v13+ answer of one partition of one topic with no aborted transaction (a consumer's usual
    answer) is one pack up to its records' length, no loop; any other goes to the arrays, which
    take ~100 opcodes more for it (bench/fetch_codec_opcodes.py: their loops, a pack and a join
    more, the tagged-field bytes one by one)."""
    if version >= 16 and resp.node_endpoints:
        return None
    topics = resp.responses
    if version >= 13 and len(topics) == 1 and len(partitions := topics[0].partitions) == 1 \
            and not (p := partitions[0]).aborted_transactions and p.diverging_epoch is None \
            and p.current_leader is None and p.snapshot_id is None:
        head = _ONE_ANSWER_FLEXIBLE.pack(
            resp.throttle_time_ms, resp.error_code, resp.session_id, 2, topics[0].topic_id.bytes, 2,
            p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
            0 if p.aborted_transactions is None else 1, p.preferred_read_replica)
        records = p.records
        if records is None:
            return [head + b"\x00\x00\x00\x00"]  # null records; the partition's, topic's, response's tags
        if isinstance(records, _IN_BYTES):
            return [b"".join((head, _uvarint(len(records) + 1), records, b"\x00\x00\x00"))]
        if not records.length:  # an empty slice is no chunk of its own
            return [head + b"\x01\x00\x00\x00"]
        return [head + _uvarint(records.length + 1), records, b"\x00\x00\x00"]
    return _encode_flexible_topics(resp, version)


def _encode_flexible_topics(resp: FetchResponse, version: int) -> list[Chunk] | None:
    """`_encode_flexible_response`'s arrays: any topics, partitions and aborted transactions.
    Compact counts and lengths under 128 are a byte of `_BYTES`, and an answer with no aborted
    transaction (null, or empty: read_committed with none aborted, librdkafka's default) is one
    pack up to its records' length; None for a tagged field to write."""
    if version >= 16 and resp.node_endpoints:
        return None
    topics = resp.responses
    n = len(topics) + 1
    out: list[Any] = [_FLEXIBLE_RESPONSE_HEAD.pack(resp.throttle_time_ms, resp.error_code, resp.session_id),
                      _BYTES[n] if n < 0x80 else _uvarint(n)]
    by_id = version >= 13
    chunks: list[Chunk] = []
    for t in topics:  # bounded by the response's topics
        partitions = t.partitions
        n = len(partitions) + 1
        if by_id:
            out += (t.topic_id.bytes, _BYTES[n] if n < 0x80 else _uvarint(n))
        else:
            name = _names.get(t.topic) or _encode_name(t.topic)
            out += (_uvarint(len(name) + 1), name, _BYTES[n] if n < 0x80 else _uvarint(n))
        for p in partitions:  # bounded by the topic's partitions
            if p.diverging_epoch is not None or p.current_leader is not None or p.snapshot_id is not None:
                return None
            txns, records = p.aborted_transactions, p.records
            if not txns:
                out.append(_ANSWER_FLEXIBLE.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                                                 p.log_start_offset, 0 if txns is None else 1,
                                                 p.preferred_read_replica))
            else:
                out += (_FLEXIBLE_ANSWER_HEAD.pack(p.partition_index, p.error_code, p.high_watermark,
                                                   p.last_stable_offset, p.log_start_offset), _uvarint(len(txns) + 1))
                out.extend([_ABORTED.pack(a.producer_id, a.first_offset) + b"\x00" for a in txns])
                out.append(_I32.pack(p.preferred_read_replica))
            if records is None:
                out.append(b"\x00\x00")  # null records, no tagged fields
                continue
            length = len(records) if isinstance(records, _IN_BYTES) else records.length
            out.append(_BYTES[length + 1] if length < 0x7F else _uvarint(length + 1))
            if length and isinstance(records, _IN_BYTES):
                out.append(records)
            elif length:
                chunks.append(b"".join(out))
                chunks.append(records)  # type: ignore[arg-type]
                out = []
            out.append(b"\x00")  # the partition's tagged fields
        out.append(b"\x00")  # the topic's
    out.append(b"\x00")  # the response's
    chunks.append(b"".join(out))
    return chunks


# Topic names as classic strings (an int16 length, then UTF-8), kept encoded: a leader answers
# the same few topics fetch after fetch, and a fetcher names them. Cleared when full (topics
# deleted and created over a broker's life would otherwise pile up).
MAX_ENCODED_NAMES: Final = 10_000
_names: dict[str, bytes] = {}


def _encode_name(topic: str) -> bytes:
    """`topic`'s classic string, kept in `_names`; the Writer's ValueError past its limit."""
    data = topic.encode("utf-8")
    if len(data) > _MAX_STRING_BYTES:  # the Writer's limit, and its error
        raise ValueError("string longer than 32767 bytes")
    if len(_names) >= MAX_ENCODED_NAMES:  # a bound, not an LRU: a refill is cheap
        _names.clear()
    name = _names[topic] = data
    return name


def _uvarint(v: int) -> bytes:
    """Kafka's unsigned varint (compact lengths): one byte under 128; a records length of a
    bulk answer (up to 2 MiB) in three, without the loop."""
    if v < 0x80:
        return _BYTES[v]
    if v < 0x200000:
        if v < 0x4000:
            return bytes(((v & 0x7F) | 0x80, v >> 7))
        return bytes(((v & 0x7F) | 0x80, ((v >> 7) & 0x7F) | 0x80, v >> 14))
    out = bytearray()
    while v >= 0x80:  # bounded: seven bits a pass
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_BYTES: Final = tuple(bytes((i,)) for i in range(0x80))


def _decode_classic_response(body: memoryview, version: int) -> FetchResponse | None:
    """A v5-v11 response read by unpacks, not a Reader call per field (a follower's answer was
    ~600 opcodes of its fetch round's 5,000, issue 35; and a surviving broker in a controlled
    shutdown at 100,000 partitions decodes ~16,500 partition answers from its new leader). None
    when anything does not parse so (a negative length, short bytes, bad UTF-8): the
    field-by-field path then reads it or refuses it.

    A follower's v11 answer mostly names one partition of one topic (its incremental session
    answers only the partitions with news: an acks=all canary's round is one batch of one
    partition): that one is read here by two unpacks, around the topic's name, and built with
    no loop, list or tuple() (~200 opcodes of its round's ~3,000); any other goes to the arrays."""
    view = body if body.format == "B" and body.ndim == 1 else body.cast("B")
    if version >= 11:
        try:
            throttle, error_code, session_id, n_topics, length = _ONE_TOPIC_HEAD_V11.unpack_from(view, 0)
            if n_topics == 1 and length >= 0:
                pos = _NAME_AT + length
                name = str(view[_NAME_AT:pos], "utf-8")
                n, index, error, hw, lso, log_start, n_aborted, preferred, length = \
                    _ONE_ANSWER_V11.unpack_from(view, pos)
                pos += _ONE_ANSWER_SIZE
                # null records or past the end, aborted transactions (a read_committed answer):
                # the arrays read them, or refuse them
                if n == 1 and 0 <= length <= len(view) - pos and -1 <= n_aborted <= 0:
                    answer = _new_answer((index, error, hw, view[pos:pos + length], lso, log_start,
                                          () if n_aborted == 0 else None, preferred, None, None, None))
                    return _new_response((throttle, (_new_topic_answer((name, (answer,), ZERO_UUID)),),
                                          error_code, session_id, ()))
        except (struct.error, UnicodeDecodeError):  # shorter (no topic, no answer) or bad text:
            pass  # the arrays read them, or refuse them
    return _decode_classic_topics(view, version)


def _decode_classic_topics(view: memoryview, version: int) -> FetchResponse | None:
    """`_decode_classic_response`'s arrays, any number of topics and partitions. An answer's head
    is fixed-size but for its aborted transactions, which sit between their count and the (v11)
    preferred replica."""
    end = len(view)
    v11 = version >= 11
    head = _ANSWER_HEAD_V11 if v11 else _ANSWER_HEAD_V5
    size, unpack, new = head.size, head.unpack_from, _new_answer
    try:
        if version >= 7:
            throttle, error_code, session_id, n_topics = _RESPONSE_HEAD_V7.unpack_from(view, 0)
            pos = _RESPONSE_HEAD_V7.size
        else:
            throttle, n_topics = _RESPONSE_HEAD_V5.unpack_from(view, 0)
            error_code = session_id = 0
            pos = _RESPONSE_HEAD_V5.size
        if n_topics < 0 or n_topics * 6 > end - pos:  # a topic is at least a name's length and a count
            return None
        topics = []
        for _ in range(n_topics):  # bounded by the count, checked against the bytes
            (length,) = _I16.unpack_from(view, pos)  # the name's (its checks inline: one topic per answer, mostly)
            pos += 2
            if length < 0:
                return None
            name = str(view[pos:pos + length], "utf-8")
            pos += length
            (n,) = _I32.unpack_from(view, pos)
            pos += 4
            if n < 0 or n * size > end - pos:
                return None
            answers = []
            for _ in range(n):  # bounded by the count, checked against the bytes
                if v11:
                    index, error, hw, lso, log_start, n_aborted, preferred, length = unpack(view, pos)
                else:
                    index, error, hw, lso, log_start, n_aborted, length = unpack(view, pos)
                    preferred = -1
                pos += size
                aborted: tuple[AbortedTransaction, ...] | None = () if n_aborted == 0 else None
                if n_aborted > 0:  # (read_committed consumers) the head read past the count: read again
                    aborted, pos = _aborted_and_rest(view, pos - size + _ABORTED_AT, n_aborted)
                    if v11:
                        preferred, length = _ANSWER_TAIL_V11.unpack_from(view, pos)
                        pos += _ANSWER_TAIL_V11.size
                    else:
                        (length,) = _I32.unpack_from(view, pos)
                        pos += 4
                if n_aborted < -1 or length < -1 or length > end - pos:
                    return None
                records = None
                if length >= 0:
                    records = view[pos:pos + length]
                    pos += length
                answers.append(new((index, error, hw, records, lso, log_start, aborted, preferred,
                                    None, None, None)))
            topics.append(_new_topic_answer((name, tuple(answers), ZERO_UUID)))
    except (struct.error, UnicodeDecodeError):  # short bytes, bad text: the Reader's path says which
        return None
    return _new_response((throttle, tuple(topics), error_code, session_id, ()))


def _aborted_and_rest(view: memoryview, pos: int, n: int) -> tuple[tuple[AbortedTransaction, ...], int]:
    """`n` aborted transactions from `pos`, and where what follows them starts; struct.error
    when the bytes are short."""
    if n * _ABORTED.size > len(view) - pos:
        raise struct.error("aborted transactions past the end")
    txns = tuple(AbortedTransaction(*_ABORTED.unpack_from(view, at))
                 for at in range(pos, pos + n * _ABORTED.size, _ABORTED.size))
    return txns, pos + n * _ABORTED.size


# ---- layouts ---------------------------------------------------------------------------------
# partition, error, high watermark, last stable offset, log start offset, aborted transactions
# count, then the preferred read replica (v11) and the records' length: an answer's head when it
# holds no aborted transactions (they go after the count, at _ABORTED_AT, and the tail after them)
_ANSWER_HEAD_V5: Final = struct.Struct(">ihqqqii")
_ANSWER_HEAD_V11: Final = struct.Struct(">ihqqqiii")
_ABORTED_AT: Final = _ANSWER_HEAD_V5.size - 4
_ANSWER_TAIL_V11: Final = struct.Struct(">ii")  # preferred read replica, records' length
_RESPONSE_HEAD_V7: Final = struct.Struct(">ihii")  # throttle, error, session id, topics count
_RESPONSE_HEAD_V5: Final = struct.Struct(">ii")  # throttle, topics count
# a v11 answer of one topic (`_decode_classic_response`): the response's head and the topic
# name's length; after the name, its partitions' count and the first answer's head
_ONE_TOPIC_HEAD_V11: Final = struct.Struct(">ihiih")
_ONE_ANSWER_V11: Final = struct.Struct(">iihqqqiii")
_NAME_AT: Final = _ONE_TOPIC_HEAD_V11.size
_IN_BYTES: Final = (bytes, bytearray, memoryview)  # records held in memory, not a placeholder
_ONE_ANSWER_SIZE: Final = _ONE_ANSWER_V11.size
_FLEXIBLE_RESPONSE_HEAD: Final = struct.Struct(">ihi")  # throttle, error, session id (v12+)
# partition, error, high watermark, last stable offset, log start offset (v12+: the fixed part)
_FLEXIBLE_ANSWER_HEAD: Final = struct.Struct(">ihqqq")
# an answer with no aborted transaction (v12+): its fixed part, the aborted transactions' compact
# count (null or empty) and the preferred read replica
_ANSWER_FLEXIBLE: Final = struct.Struct(_FLEXIBLE_ANSWER_HEAD.format + "Bi")
# a v13+ answer of one partition by topic id (`_encode_flexible_response`): the response's head,
# the topics' compact count, the topic id, the partitions' compact count, then `_ANSWER_FLEXIBLE`
_ONE_ANSWER_FLEXIBLE: Final = struct.Struct(_FLEXIBLE_RESPONSE_HEAD.format + "B16sB" + _ANSWER_FLEXIBLE.format[1:])
_ABORTED: Final = struct.Struct(">qq")  # producer id, first offset
_new_answer = instance_builder(FetchPartitionResponse, tuple(FetchPartitionResponse.__dataclass_fields__))
_new_topic_answer = instance_builder(FetchTopicResponse, tuple(FetchTopicResponse.__dataclass_fields__))
_new_response = instance_builder(FetchResponse, tuple(FetchResponse.__dataclass_fields__))
