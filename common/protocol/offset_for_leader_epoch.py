"""OffsetForLeaderEpoch (key 23), v0–v4: where a leader epoch ends, for follower truncation.

Its messages are kio's generated ones from v2. kio (Kafka 4's schemas, KIP-896) has no v0 or
v1, which Kafka 3.9 answers; their bytes are v2's without the partition's
current_leader_epoch (request) and the throttle time (response), and v0's response also
lacks the partition's leader_epoch. So v0 and v1 read into kio's v2 request
(current_leader_epoch -1: no fencing) and write kio's v2 response without those fields. A
handler always sees and answers v2+ classes (`schema_version`).
"""

from __future__ import annotations

from common.limits import MIN_CLASSIC_TOPIC_BYTES
from collections.abc import Iterable
from typing import Any, Final

from common.protocol import messages
from common.protocol.api_keys import ApiKey, check_version, reader_for, writer_for
from common.protocol.dispatch import Codec
from common.protocol.primitives import Chunk, Reader, Writer

DEBUG_REPLICA_ID = -2  # Kafka's default when v3's replica_id is absent
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
FIRST_GENERATED_VERSION: Final = 2
MIN_PARTITION_BYTES: Final = 8  # v0/v1 request: partition, leader_epoch
MIN_RESULT_BYTES: Final = 14  # v0 response: error_code, partition, end_offset


def schema_version(version: int) -> int:
    """The version whose kio classes carry `version`'s messages."""
    return max(version, FIRST_GENERATED_VERSION)


def request(version: int, partitions: Iterable[tuple[str, int, int, int]], *,
            replica_id: int = DEBUG_REPLICA_ID) -> Any:
    """kio's request of `schema_version(version)` for (topic, partition, leader_epoch,
    current_leader_epoch) rows, grouped by topic in order (the follower's side, tests)."""
    m = messages.request_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, schema_version(version))
    topics: dict[str, list[Any]] = {}
    for topic, partition, epoch, current in partitions:
        topics.setdefault(topic, []).append(
            m.OffsetForLeaderPartition(partition=partition, leader_epoch=epoch, current_leader_epoch=current))
    return messages.build(m.OffsetForLeaderEpochRequest, replica_id=replica_id, topics=tuple(
        m.OffsetForLeaderTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items()))


# ---- v0 and v1, by hand -----------------------------------------------------------------

def _decode_old_request(body: memoryview, version: int) -> Any:
    check_version(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    r = reader_for(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, body)

    def partition(r: Reader) -> tuple[int, int]:
        return r.int32(), r.int32()

    def topic(r: Reader) -> tuple[str, tuple[tuple[int, int], ...]]:
        return r.string(), r.array(partition, MIN_PARTITION_BYTES)

    return request(version, ((name, p, epoch, UNDEFINED_EPOCH) for name, parts in r.array(topic, MIN_CLASSIC_TOPIC_BYTES)
                             for p, epoch in parts))


def _encode_old_request(req: Any, version: int) -> list[Chunk]:
    w = writer_for(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)

    def partition(w: Writer, p: Any) -> None:
        w.int32(p.partition)
        w.int32(p.leader_epoch)

    def topic(w: Writer, t: Any) -> None:
        w.string(t.topic)
        w.array(t.partitions, partition)

    w.array(req.topics, topic)
    return w.chunks()


def _encode_old_response(resp: Any, version: int) -> list[Chunk]:
    w = writer_for(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)

    def partition(w: Writer, p: Any) -> None:
        w.int16(p.error_code)
        w.int32(p.partition)
        if version >= 1:
            w.int32(p.leader_epoch)
        w.int64(p.end_offset)

    def topic(w: Writer, t: Any) -> None:
        w.string(t.topic)
        w.array(t.partitions, partition)

    w.array(resp.topics, topic)
    return w.chunks()


def _decode_old_response(body: memoryview, version: int) -> Any:
    r = reader_for(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, body)
    m = messages.response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, FIRST_GENERATED_VERSION)

    def partition(r: Reader) -> Any:
        error, index = messages.error_code(r.int16()), r.int32()
        epoch = r.int32() if version >= 1 else UNDEFINED_EPOCH
        return m.EpochEndOffset(error_code=error, partition=index, leader_epoch=epoch, end_offset=r.int64())

    def topic(r: Reader) -> Any:
        return m.OffsetForLeaderTopicResult(topic=r.string(), partitions=r.array(partition, MIN_RESULT_BYTES))

    return m.OffsetForLeaderEpochResponse(throttle_time=messages.NO_THROTTLE, topics=r.array(topic, MIN_CLASSIC_TOPIC_BYTES))


# ---- the codecs: kio from v2, v0 and v1 above -------------------------------------------

_GENERATED: Final = messages.kio_codec(ApiKey.OFFSET_FOR_LEADER_EPOCH)


def _check_old(message: Any) -> None:
    if message.__version__ != FIRST_GENERATED_VERSION:
        raise ValueError(f"{type(message).__name__} v{message.__version__} does not carry OffsetForLeaderEpoch v0/v1")


def _decode_body(body: memoryview, version: int) -> Any:
    if version < FIRST_GENERATED_VERSION:
        return _decode_old_request(body, version)
    return _GENERATED.decode(body, version)


def _encode_body(response: Any, version: int) -> list[Chunk]:
    if version < FIRST_GENERATED_VERSION:
        check_version(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
        _check_old(response)
        return _encode_old_response(response, version)
    return _GENERATED.encode(response, version)


CODEC: Final = Codec(_decode_body, _encode_body)  # the broker's (api_table)


def encode_request(req: Any, version: int) -> list[Chunk]:
    """Client side: kio's request of `schema_version(version)` as `version`'s bytes."""
    if version < FIRST_GENERATED_VERSION:
        check_version(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
        _check_old(req)
        return _encode_old_request(req, version)
    return messages.encode_request(req, version)


def decode_response(body: bytes | bytearray | memoryview, version: int) -> Any:
    """Client side: kio's response of `schema_version(version)`."""
    if version < FIRST_GENERATED_VERSION:
        return _decode_old_response(memoryview(body), version)
    return messages.decode_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, body)
