"""ListOffsets (key 2), v0–v9: the offset for a timestamp, or a special position.

v1 onwards are kio's generated messages (one offset and its timestamp per partition). v0 keeps
a codec here: Kafka 4's schemas (kio's) dropped it (KIP-896) while Kafka 3.9 answers it, and
its bytes are not v1's (a request asks for up to max_num_offsets offsets per partition and is
answered with a list of them, old_style_offsets: segment starts, broker/log/legacy_offsets.py),
so it cannot ride on v1's classes as ACL v0 does: it has its own small dataclasses.

Special timestamps: -1 latest, -2 earliest, -3 the record with the largest timestamp (v7+,
KIP-734), -4 the local log start offset (v8+, KIP-405: without tiered storage it is the log
start offset), -5 the last offset moved to tiered storage (v9+, KIP-1005: without tiered
storage there is none, offset -1). v6 is the first flexible version; v7, v8 and v9 change no
field, only which special timestamps the client may send (`MIN_VERSION_OF_TIMESTAMP`).
"""

from __future__ import annotations

from common.limits import MIN_CLASSIC_TOPIC_BYTES
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from common.protocol import messages
from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.dispatch import Codec
from common.protocol.primitives import Chunk, Reader, Writer

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
# The first version allowed to ask for each special timestamp (Kafka's ReplicaManager
# timestampMinSupportedVersion); an older request asking for one gets UNSUPPORTED_VERSION.
MIN_VERSION_OF_TIMESTAMP: dict[int, int] = {
    MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9,
}
READ_UNCOMMITTED: Final = 0
NO_LEADER_EPOCH: Final = -1  # current_leader_epoch when the client does not fence (v4+)
V0_MIN_PARTITION_BYTES: Final = 16  # partition, timestamp, max_num_offsets


# ---- v1+: kio's messages ----------------------------------------------------------------

def request(version: int, replica_id: int, partitions: Iterable[tuple[str, int, int, int]], *,
            isolation_level: int = READ_UNCOMMITTED) -> Any:
    """Client side: kio's ListOffsetsRequest of `version` (>= 1) asking for
    (topic, partition, timestamp, current_leader_epoch) rows, grouped by topic in order."""
    m = messages.request_module(ApiKey.LIST_OFFSETS, version)
    topics: dict[str, list[Any]] = {}
    for topic, partition, timestamp, epoch in partitions:
        topics.setdefault(topic, []).append(messages.build(
            m.ListOffsetsPartition, partition_index=partition, timestamp=timestamp, current_leader_epoch=epoch))
    return messages.build(m.ListOffsetsRequest, replica_id=replica_id, isolation_level=isolation_level,
                          topics=tuple(m.ListOffsetsTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()))


# ---- v0, by hand ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class V0Partition:
    partition_index: int
    timestamp: int
    max_num_offsets: int


@dataclass(frozen=True, slots=True)
class V0Topic:
    name: str
    partitions: tuple[V0Partition, ...]


@dataclass(frozen=True, slots=True)
class V0Request:
    replica_id: int
    topics: tuple[V0Topic, ...]


@dataclass(frozen=True, slots=True)
class V0PartitionResponse:
    partition_index: int
    error_code: int
    old_style_offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class V0TopicResponse:
    name: str
    partitions: tuple[V0PartitionResponse, ...]


@dataclass(frozen=True, slots=True)
class V0Response:
    topics: tuple[V0TopicResponse, ...]


def _decode_v0_request(body: memoryview) -> V0Request:
    check_version(ApiKey.LIST_OFFSETS, 0)
    r = reader_for(ApiKey.LIST_OFFSETS, 0, body)
    replica_id = r.int32()

    def partition(r: Reader) -> V0Partition:
        return V0Partition(r.int32(), r.int64(), r.int32())

    def topic(r: Reader) -> V0Topic:
        return V0Topic(r.string(), r.array(partition, V0_MIN_PARTITION_BYTES))

    return V0Request(replica_id, r.array(topic, MIN_CLASSIC_TOPIC_BYTES))


def _encode_v0_request(req: V0Request) -> list[Chunk]:
    w = writer_for(ApiKey.LIST_OFFSETS, 0)
    w.int32(req.replica_id)

    def partition(w: Writer, p: V0Partition) -> None:
        w.int32(p.partition_index)
        w.int64(p.timestamp)
        w.int32(p.max_num_offsets)

    def topic(w: Writer, t: V0Topic) -> None:
        w.string(t.name)
        w.array(t.partitions, partition)

    w.array(req.topics, topic)
    return w.chunks()


def _encode_v0_response(resp: V0Response) -> list[Chunk]:
    w = writer_for(ApiKey.LIST_OFFSETS, 0)

    def partition(w: Writer, p: V0PartitionResponse) -> None:
        w.int32(p.partition_index)
        w.int16(p.error_code)
        w.array(p.old_style_offsets, Writer.int64)

    def topic(w: Writer, t: V0TopicResponse) -> None:
        w.string(t.name)
        w.array(t.partitions, partition)

    w.array(resp.topics, topic)
    return w.chunks()


def _decode_v0_response(body: memoryview) -> V0Response:
    r = reader_for(ApiKey.LIST_OFFSETS, 0, body)

    def partition(r: Reader) -> V0PartitionResponse:
        return V0PartitionResponse(r.int32(), r.int16(), r.array(Reader.int64, 8))

    def topic(r: Reader) -> V0TopicResponse:
        return V0TopicResponse(r.string(), r.array(partition, 10))

    return V0Response(r.array(topic, 6))


# ---- the codecs: kio from v1, v0 above --------------------------------------------------

_GENERATED: Final = messages.kio_codec(ApiKey.LIST_OFFSETS)


def _decode_body(body: memoryview, version: int) -> Any:
    return _decode_v0_request(body) if version == 0 else _GENERATED.decode(body, version)


def _encode_body(response: Any, version: int) -> list[Chunk]:
    if version == 0:
        if not isinstance(response, V0Response):
            raise ValueError(f"{type(response).__name__} answers ListOffsets v0")
        return _encode_v0_response(response)
    return _GENERATED.encode(response, version)


CODEC: Final = Codec(_decode_body, _encode_body)  # the broker's (api_table)


def encode_request(req: Any, version: int) -> list[Chunk]:
    """Client side: a V0Request at v0, else kio's request of `version`."""
    if version == 0:
        if not isinstance(req, V0Request):
            raise ValueError(f"{type(req).__name__} is not a ListOffsets v0 request")
        return _encode_v0_request(req)
    return messages.encode_request(req, version)


def decode_response(body: bytes | bytearray | memoryview, version: int) -> Any:
    """Client side: a V0Response at v0, else kio's response of `version`."""
    if version == 0:
        return _decode_v0_response(memoryview(body))
    return messages.decode_response(ApiKey.LIST_OFFSETS, version, body)
