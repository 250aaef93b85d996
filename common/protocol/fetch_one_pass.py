"""Fetch (key 1): the one-pass request decoders, the hot versions read by struct unpacks rather
than a Reader call per field (`common.protocol.fetch` tries them first); the responses' are
`common.protocol.fetch_one_pass_responses`.

Each returns None (or leaves its Reader unmoved) for bytes it does not take, and the
field-by-field codec in `common.protocol.fetch` then reads or refuses them: that one covers
every version and is the one that says why bytes are refused.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

from common.protocol.fetch_messages import (
    ZERO_UUID,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ForgottenTopic,
    new_fetch_partition,
)
from common.protocol.primitives import Reader
from common.slotted import instance_builder

# ---- requests --------------------------------------------------------------------------------


def _decode_classic_request(body: memoryview, version: int) -> FetchRequest | None:
    """A v7-v11 request read by unpacks, not a Reader call per field: librdkafka before 2.5 sends
    v11 for every fetch of a consumer, and our followers v11 for theirs (field by field, a one-partition
    request cost ~12 us, a sixth of a consumer fetch's Python). None when anything does not
    parse so (a negative or short length, bad UTF-8): the field-by-field path then reads it or
    refuses it with its own message.

    A v11 Fetch naming one partition of one topic and forgetting nothing (a follower's, in an
    acks=all canary's rounds: the partition whose offsets moved; the leader reads two per
    produce) is read by two unpacks, around the topic's name, with no loop or array helper;
    any other goes to the arrays (`_decode_classic_request_arrays`), which take ~155 opcodes
    more for it (bench/fetch_codec_opcodes.py: their loops, lists and count checks)."""
    view = body if body.format == "B" and body.ndim == 1 else body.cast("B")
    if version >= 11:
        try:
            replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch, \
                n_topics, length = _ONE_TOPIC_REQUEST_HEAD_V7.unpack_from(view, 0)
            if n_topics == 1 and length >= 0:
                pos = _REQUEST_NAME_AT + length
                name = str(view[_REQUEST_NAME_AT:pos], "utf-8")
                n, index, epoch, offset, log_start, partition_max, n_forgotten, length = \
                    _ONE_PARTITION_REQUEST_V11.unpack_from(view, pos)
                pos += _ONE_PARTITION_REQUEST_SIZE
                if n == 1 and n_forgotten == 0 and 0 <= length <= len(view) - pos:
                    partition = new_fetch_partition((index, offset, partition_max, log_start, epoch, -1, ZERO_UUID))
                    return _new_request((replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level,
                                         (_new_topic((name, (partition,), ZERO_UUID)),), session_id,
                                         session_epoch, (), str(view[pos:pos + length], "utf-8"), None, -1))
        except (struct.error, UnicodeDecodeError):  # shorter (no topic, no partition) or bad text:
            pass  # the arrays read them, or refuse them
    return _decode_classic_request_arrays(view, version)


def _decode_classic_request_arrays(view: memoryview, version: int) -> FetchRequest | None:
    """`_decode_classic_request`'s arrays: any number of topics, partitions and forgotten topics;
    a topic's partitions by one iter_unpack (`_classic_partitions`)."""
    end = len(view)
    head = _ONE_TOPIC_REQUEST_HEAD_V7  # with the topics' count (and a name's length, not read here)
    if end < head.size:
        return None
    replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch, n_topics, _ = \
        head.unpack_from(view, 0)
    pos = _REQUEST_HEAD_V7.size + 4
    v9 = version >= 9
    size = _REQUEST_PARTITION_V9.size if v9 else _REQUEST_PARTITION_V7.size
    if n_topics < 0 or n_topics * 6 > end - pos:  # a topic is at least a name's length and a count
        return None
    try:
        topics = []
        for _ in range(n_topics):  # bounded by the count, checked against the bytes
            (length,) = _I16.unpack_from(view, pos)  # the name's, then the partitions' count (`_name_and_count` inline)
            pos += 2 + length
            if length < 0:
                return None
            name = str(view[pos - length:pos], "utf-8")
            (n,) = _I32.unpack_from(view, pos)
            pos += 4
            if n < 0 or n * size > end - pos:
                return None
            topics.append(_new_topic((name, _classic_partitions(view, pos, n, v9), ZERO_UUID)))
            pos += n * size
        (n_forgotten,) = _I32.unpack_from(view, pos)
        pos += 4
        if n_forgotten < 0 or n_forgotten * 6 > end - pos:  # a topic is at least a name's length and a count
            return None
        forgotten = []
        for _ in range(n_forgotten):  # bounded by the count, checked against the bytes
            named = _name_and_count(view, pos, 4)
            if named is None:
                return None
            name, n, pos = named
            forgotten.append(ForgottenTopic(name, struct.unpack_from(f">{n}i", view, pos)))
            pos += 4 * n
        rack_id = ""
        if version >= 11:
            (length,) = _I16.unpack_from(view, pos)
            pos += 2
            if length < 0 or pos + length > end:
                return None
            rack_id = str(view[pos:pos + length], "utf-8")
    except (struct.error, UnicodeDecodeError):  # short bytes, bad text: the Reader's path says which
        return None
    return _new_request((replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, tuple(topics),
                         session_id, session_epoch, tuple(forgotten), rack_id, None, -1))


def _decode_flexible_request(body: memoryview, version: int) -> FetchRequest | None:
    """A v12-v17 request without tagged fields read by unpacks: librdkafka since 2.5 (KIP-951)
    sends v16, Java consumers v17. Compact lengths must be one byte (under 128 topics,
    partitions and bytes of a name) and no tagged field may be present (a follower's
    ReplicaState, a v17 directory id): anything else is None, for the field-by-field path.

    A v15+ Fetch naming one partition of one topic, forgetting nothing, with no rack id (a
    librdkafka consumer's usual fetch) is one unpack, no loop or compact-count frames; any other
    goes to the arrays (`_decode_flexible_request_arrays`), which take ~185 opcodes more for
    it (bench/fetch_codec_opcodes.py: their loops, lists and compact-count checks)."""
    view = body if body.format == "B" and body.ndim == 1 else body.cast("B")
    if version >= 15 and len(view) >= _ONE_PARTITION_FLEXIBLE_SIZE:
        max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch, n_topics, raw_id, n, \
            index, epoch, offset, last_fetched, log_start, partition_max, *tail = _ONE_PARTITION_FLEXIBLE.unpack_from(view)
        if n_topics == 2 and n == 2 and tail == _ONE_PARTITION_FLEXIBLE_TAIL:
            partition = new_fetch_partition((index, offset, partition_max, log_start, epoch, last_fetched, ZERO_UUID))
            topic = _new_topic(("", (partition,), _topic_ids.get(raw_id) or _topic_id(raw_id)))
            return _new_request((-1, max_wait_ms, min_bytes, max_bytes, isolation_level, (topic,), session_id,
                                 session_epoch, (), "", None, -1))
    return _decode_flexible_request_arrays(view, version)


def _decode_flexible_request_arrays(view: memoryview, version: int) -> FetchRequest | None:
    """`_decode_flexible_request`'s arrays: any topics, partitions, forgotten topics, rack id; a
    topic's partitions by one iter_unpack, their tagged-field counts checked in one pass."""
    end = len(view)
    by_id = version >= 13
    new = new_fetch_partition
    try:
        pos = 0
        replica_id = -1  # v15+: only in the ReplicaState tag, which sends this to the fields path
        if version <= 14:
            (replica_id,) = _I32.unpack_from(view, 0)
            pos = 4
        max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch = \
            _FLEXIBLE_HEAD.unpack_from(view, pos)
        pos += _FLEXIBLE_HEAD.size
        n_topics = _compact_count(view, pos, 17 if by_id else 3)
        pos += 1
        topics = []
        size = _FLEXIBLE_PARTITION.size
        for _ in range(n_topics):  # bounded by the count, checked against the bytes
            if by_id:  # the topic id and the partitions' compact count (`_flexible_topic` inline)
                raw, c = _TOPIC_ID_AND_COUNT.unpack_from(view, pos)
                name, topic_id = "", _topic_ids.get(raw) or _topic_id(raw)
                pos += _TOPIC_ID_AND_COUNT.size
            else:
                name, topic_id, pos = _flexible_topic(view, pos, by_id)
                c = view[pos]
                pos += 1
            n = c - 1  # the partitions' compact count (`_compact_count` inline)
            stop = pos + n * size
            if c == 0 or c >= 0x80 or stop >= end or any(view[pos + size - 1:stop:size]):  # a partition's tags
                return None
            topics.append(_new_topic((name, tuple([
                new((index, offset, partition_max, log_start, epoch, last_fetched, ZERO_UUID))
                for index, epoch, offset, last_fetched, log_start, partition_max, _ in
                _FLEXIBLE_PARTITION.iter_unpack(view[pos:stop])]), topic_id)))
            pos = stop + 1
            if view[stop]:  # the topic's tagged fields
                return None
        # no forgotten topics and no rack id (a consumer's usual fetch): one byte each, read so
        n_forgotten = 0 if view[pos] == 1 else _compact_count(view, pos, 17 if by_id else 3)
        pos += 1
        forgotten = []
        for _ in range(n_forgotten):  # bounded by the count, checked against the bytes
            name, topic_id, pos = _flexible_topic(view, pos, by_id)
            n = _compact_count(view, pos, 4)
            forgotten.append(ForgottenTopic(name, struct.unpack_from(f">{n}i", view, pos + 1), topic_id))
            pos += 1 + 4 * n
            if view[pos]:
                return None
            pos += 1
        if view[pos] == 1:
            rack_id = ""
            pos += 1
        else:
            length = _compact_count(view, pos, 1)
            rack_id = str(view[pos + 1:pos + 1 + length], "utf-8")
            pos += 1 + length
        if view[pos]:  # the request's tagged fields (ClusterId, ReplicaState)
            return None
    except (struct.error, IndexError, UnicodeDecodeError, _NotOnePass):
        return None
    return _new_request((replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, tuple(topics),
                         session_id, session_epoch, tuple(forgotten), rack_id, None, -1))


# A request's topic ids (v13+) as UUIDs: UUID's constructor is Python code (~75 bytecodes, a
# fortieth of a consumer fetch's handling), and a broker's fetchers name the same few topics
# in every request. A UUID is immutable, so sharing one between requests is safe.
TOPIC_IDS_CACHED: Final = 4096
_topic_ids: dict[bytes, uuid.UUID] = {}


def _topic_id(raw: bytes) -> uuid.UUID:
    """The UUID of a topic id's 16 bytes not in `_topic_ids` yet, kept there."""
    if len(_topic_ids) >= TOPIC_IDS_CACHED:  # a bound, not an LRU: a refill is cheap
        _topic_ids.clear()
    topic_id = _topic_ids[raw] = uuid.UUID(bytes=raw)
    return topic_id


class _NotOnePass(Exception):
    """Bytes the one-pass read leaves to the field-by-field path."""


def _compact_count(view: memoryview, pos: int, item_size: int) -> int:
    """A one-byte compact count (or length) at `pos` of items of at least `item_size` bytes that
    fit in the bytes after it; _NotOnePass for null, a longer varint, or too many."""
    c = view[pos]
    n = c - 1
    if c == 0 or c >= 0x80 or n * item_size > len(view) - pos - 1:
        raise _NotOnePass
    return n


def _flexible_topic(view: memoryview, pos: int, by_id: bool) -> tuple[str, uuid.UUID, int]:
    """A topic's name (v12) or id (v13+), and where what follows it starts."""
    if by_id:
        if pos + 16 > len(view):
            raise _NotOnePass
        raw = bytes(view[pos:pos + 16])
        return "", _topic_ids.get(raw) or _topic_id(raw), pos + 16
    length = _compact_count(view, pos, 1)
    return str(view[pos + 1:pos + 1 + length], "utf-8"), ZERO_UUID, pos + 1 + length


def _name_and_count(view: memoryview, pos: int, item_size: int) -> tuple[str, int, int] | None:
    """A classic topic name and the count of the array after it, and where its items start;
    None when the lengths are negative or the items cannot fit in the bytes left. Raises
    struct.error (short bytes) and UnicodeDecodeError as they come."""
    end = len(view)
    (length,) = _I16.unpack_from(view, pos)
    pos += 2
    if length < 0 or pos + length + 4 > end:
        return None
    name = str(view[pos:pos + length], "utf-8")
    pos += length
    n = _array_count(view, pos, item_size)
    return None if n < 0 else (name, n, pos + 4)


def _array_count(view: memoryview, pos: int, item_size: int) -> int:
    """The int32 count at `pos` of an array whose items take at least `item_size` bytes each;
    -1 when it is negative or they cannot fit in the bytes after it. struct.error when short."""
    (n,) = _I32.unpack_from(view, pos)
    return n if 0 <= n and n * item_size <= len(view) - pos - 4 else -1


# ---- classic arrays of partitions, read in one pass ----------------------------------------------
# A surviving broker in a controlled shutdown at 100,000 partitions decodes ~16,500 partition
# answers from its new leader's fetcher and ~16,500 partition entries in the Fetches the other
# survivor sends it; read field by field (a Reader call per field, the tagged-field bookkeeping,
# a frozen dataclass's __init__) one cost ~6 us. In the classic versions (our fetchers send v11,
# librdkafka v11) each entry is fixed-size but for its records (and an answer's aborted
# transactions), so one unpack reads its head. Bytes that do not parse leave the reader where it
# was (a request's partitions) or the whole answer (`fetch_one_pass_responses`) to the
# field-by-field path, which reads or refuses them.

_I32: Final = struct.Struct(">i")
_I16: Final = struct.Struct(">h")
_MAX_STRING_BYTES: Final = 0x7FFF  # a classic string's int16 length (the Writer's limit)
# replica id, max wait, min bytes, max bytes, isolation level, session id, session epoch (v7-v14)
_REQUEST_HEAD_V7: Final = struct.Struct(">iiiibii")
# partition, current leader epoch, fetch offset, log start offset, partition max bytes (v9-v11)
_REQUEST_PARTITION_V9: Final = struct.Struct(">iiqqi")
_REQUEST_PARTITION_V7: Final = struct.Struct(">iqqi")  # v7-v8: no current leader epoch
# a request of one topic (`_decode_classic_request`): the head, the topics count and the name's
# length; after the name, the partitions count, the first partition (v9-v11), the forgotten
# topics count and (v11) the rack id's length
_ONE_TOPIC_REQUEST_HEAD_V7: Final = struct.Struct(_REQUEST_HEAD_V7.format + "ih")
_ONE_PARTITION_REQUEST_V11: Final = struct.Struct(">i" + _REQUEST_PARTITION_V9.format[1:] + "ih")
_REQUEST_NAME_AT: Final = _ONE_TOPIC_REQUEST_HEAD_V7.size
_ONE_PARTITION_REQUEST_SIZE: Final = _ONE_PARTITION_REQUEST_V11.size
# max wait, min bytes, max bytes, isolation level, session id, session epoch (v12+, after the replica id to v14)
_FLEXIBLE_HEAD: Final = struct.Struct(">iiibii")
# partition, current leader epoch, fetch offset, last fetched epoch, log start offset, partition max
# bytes, then the tagged-field count (v12+)
_FLEXIBLE_PARTITION: Final = struct.Struct(">iiqiqiB")
_TOPIC_ID_AND_COUNT: Final = struct.Struct(">16sB")  # a v13+ topic's id and its partitions' compact count
# a v15+ request of one partition by topic id (`_decode_flexible_request`): the head, the topics'
# compact count, the topic id, the partitions' compact count, the partition with its tagged-field
# count, then one byte each: the topic's tagged fields, the forgotten topics' compact count, the
# rack id's compact length and the request's tagged fields, which must be these (none, none, "")
_ONE_PARTITION_FLEXIBLE: Final = struct.Struct(_FLEXIBLE_HEAD.format + "B16sB" + _FLEXIBLE_PARTITION.format[1:] + "BBBB")
_ONE_PARTITION_FLEXIBLE_TAIL: Final = [0, 0, 1, 1, 0]  # partition tags, topic tags, forgotten, rack, tags
_ONE_PARTITION_FLEXIBLE_SIZE: Final = _ONE_PARTITION_FLEXIBLE.size
_new_topic = instance_builder(FetchTopic, tuple(FetchTopic.__dataclass_fields__))
_new_request = instance_builder(FetchRequest, tuple(FetchRequest.__dataclass_fields__))


def _read_partitions_v9_to_v11(r: Reader) -> tuple[FetchPartition, ...] | None:
    """A topic's partitions in a v9-v11 request, or None (reader unmoved) when they do not parse."""
    view = r.rest()
    end = len(view)
    size = _REQUEST_PARTITION_V9.size
    if end < 4:
        return None
    (n,) = _I32.unpack_from(view, 0)
    if n < 0 or n * size > end - 4:
        return None
    partitions = _classic_partitions(view, 4, n, True)
    r.raw(4 + n * size)
    return partitions


def _classic_partitions(view: memoryview, pos: int, n: int, v9: bool) -> tuple[FetchPartition, ...]:
    """The `n` partitions of a v9-v11 (`v9`) or v7-v8 request's topic at `pos`, which the caller
    checked fit in `view`: one iter_unpack, no Python loop of unpacks (a follower's Fetch names
    thousands at times)."""
    new, rows = new_fetch_partition, view[pos:pos + n * (_REQUEST_PARTITION_V9.size if v9 else _REQUEST_PARTITION_V7.size)]
    if v9:
        return tuple([new((index, offset, partition_max, log_start, epoch, -1, ZERO_UUID))
                      for index, epoch, offset, log_start, partition_max in _REQUEST_PARTITION_V9.iter_unpack(rows)])
    return tuple([new((index, offset, partition_max, log_start, -1, -1, ZERO_UUID))
                  for index, offset, log_start, partition_max in _REQUEST_PARTITION_V7.iter_unpack(rows)])
