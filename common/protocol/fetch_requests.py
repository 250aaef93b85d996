"""A fetch-session client's Fetch requests (v9-v11) from a head packed once.

    requests = FetchRequests(11, replica_id=5, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20)
    body = requests.encode(session_id, epoch, plan.to_send.items(), plan.to_forget)

A follower's Fetch differs from its last only in the session id and epoch and the partitions it
names, and an incremental fetch names only those whose entry changed: most name none. Through
a `FetchRequest` and `fetch.encode_fetch_request` (a frozen dataclass of twelve fields, a
Writer call per field, tuples of topics) a round cost ~400 opcodes of a follower's ~5,000 (issue
35, bench/follower_round_cpu.py --opcodes); here the fixed fields are packed once and a fetch
naming nothing is one pack. The bytes are `encode_fetch_request`'s exactly
(tests/unit/test_fetch_requests.py), topics in the order their partitions come.
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from typing import Final

from common.protocol.fetch import FetchPartition
from common.protocol.fetch_one_pass import _MAX_STRING_BYTES, _REQUEST_PARTITION_V9

_HEAD: Final = struct.Struct(">iiiib")  # replica id, max wait, min bytes, max bytes, isolation level
_SESSION: Final = struct.Struct(">iii")  # session id, session epoch, topics count
_NOTHING: Final = struct.Struct(">iiii")  # session id, session epoch, no topics, no forgotten topics
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_NO_TOPICS: Final = _I32.pack(0)  # an empty array
# A topic's partitions count, 1, and that partition's fields (`encode`'s one-partition Fetch)
_ONE_PARTITION: Final = struct.Struct(">i" + _REQUEST_PARTITION_V9.format[1:])
# Topic names kept encoded: a fetcher names the same few topics round after round. Cleared when
# full (topics deleted and created over a broker's life would otherwise pile up).
MAX_ENCODED_TOPICS: Final = 10_000


class FetchRequests:
    """Encodes one client's Fetch requests: the same replica id, waits, sizes, isolation level
    and rack on each, the session and the partitions per request."""

    __slots__ = ("_head", "_tail", "_topics")

    def __init__(self, version: int, *, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                 isolation_level: int = 0, rack_id: str = "") -> None:
        if not 9 <= version <= 11:  # the session versions with a leader epoch per partition, classic
            raise ValueError(f"Fetch v{version} is not encoded here (v9-v11)")
        self._head = _HEAD.pack(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level)
        self._tail = _string(rack_id) if version >= 11 else b""  # v11: the rack id ends the request
        self._topics: dict[str, bytes] = {}  # topic name -> its encoded string

    def encode(self, session_id: int, session_epoch: int,
               to_send: Collection[tuple[tuple[str, int], FetchPartition]] = (),
               to_forget: Collection[tuple[str, int]] = ()) -> bytes:
        """The request body naming `to_send`'s partitions ((topic, partition), entry) and
        forgetting `to_forget`'s."""
        if not to_forget:
            if not to_send:  # an incremental fetch with nothing changed
                return self._head + _NOTHING.pack(session_id, session_epoch, 0, 0) + self._tail
            if len(to_send) == 1:  # a follower's round, mostly: the partition whose offsets moved
                ((topic, _), p), = to_send
                return b"".join((self._head, _SESSION.pack(session_id, session_epoch, 1),
                                 self._topics.get(topic) or self._encode_name(topic),
                                 _ONE_PARTITION.pack(1, p.partition, p.current_leader_epoch, p.fetch_offset,
                                                     p.log_start_offset, p.partition_max_bytes),
                                 _NO_TOPICS, self._tail))
        return self._encode_any(session_id, session_epoch, to_send, to_forget)

    def _encode_any(self, session_id: int, session_epoch: int,
                    to_send: Collection[tuple[tuple[str, int], FetchPartition]],
                    to_forget: Collection[tuple[str, int]]) -> bytes:
        """`encode` of any partitions named and forgotten: topics in the order their partitions come."""
        pack = _REQUEST_PARTITION_V9.pack
        topics: dict[str, list[bytes]] = {}
        for (topic, _), p in to_send:  # bounded by the partitions named
            packed = pack(p.partition, p.current_leader_epoch, p.fetch_offset, p.log_start_offset,
                          p.partition_max_bytes)
            named = topics.get(topic)
            if named is None:
                topics[topic] = [packed]
            else:
                named.append(packed)
        out = [self._head, _SESSION.pack(session_id, session_epoch, len(topics))]
        encoded = self._topics
        for topic, packed_partitions in topics.items():  # bounded by the partitions named
            name = encoded.get(topic) or self._encode_name(topic)
            out += (name, _I32.pack(len(packed_partitions)), *packed_partitions)
        if to_forget:
            out.append(_forgotten(to_forget))
        else:
            out.append(_NO_TOPICS)
        out.append(self._tail)
        return b"".join(out)

    def _encode_name(self, topic: str) -> bytes:
        """`topic` as a classic string, kept for the next requests (never empty: its length comes first)."""
        encoded = self._topics
        if len(encoded) >= MAX_ENCODED_TOPICS:
            encoded.clear()
        name = encoded[topic] = _string(topic)
        return name


def _forgotten(to_forget: Collection[tuple[str, int]]) -> bytes:
    """The forgotten topics array, topics in the order their partitions come."""
    forgotten: dict[str, list[int]] = {}
    for topic, partition in to_forget:  # bounded by the partitions forgotten
        forgotten.setdefault(topic, []).append(partition)
    out = [_I32.pack(len(forgotten))]
    for topic, partitions in forgotten.items():  # bounded by the partitions forgotten
        out += (_string(topic), struct.pack(f">i{len(partitions)}i", len(partitions), *partitions))
    return b"".join(out)


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > _MAX_STRING_BYTES:  # the Writer's limit, and its error
        raise ValueError("string longer than 32767 bytes")
    return _I16.pack(len(data)) + data
