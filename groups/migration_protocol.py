"""The embedded consumer protocol a classic member speaks inside JoinGroup and SyncGroup.

    sub = decode_subscription(metadata)          # ConsumerProtocolSubscription v0-v3
    data = encode_assignment([("t", 0)], version=sub.version)

Kafka's ConsumerProtocolSubscription (topics; user data; v1+ owned partitions; v2+ generation
id; v3+ rack id) and ConsumerProtocolAssignment (assigned partitions, user data), non-flexible
and read as Kafka's ConsumerProtocol reads them: a version above the newest we know is read as
the newest (later versions only append fields). Online migration needs them: a classic member
of a consumer group has its subscription and owned partitions read from its JoinGroup metadata
and its assignment written into its SyncGroup answer, and the conversions read and write the
classic group's stored subscriptions and assignments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from common.protocol.primitives import ProtocolError, Reader, Writer

NEWEST_SUBSCRIPTION_VERSION: Final = 3
NEWEST_ASSIGNMENT_VERSION: Final = 3
NO_GENERATION: Final = -1  # ConsumerProtocolSubscription's default GenerationId

TopicPartitionName = tuple[str, int]  # (topic name, partition), as the classic protocol names them


class MalformedConsumerProtocol(ValueError):
    """Bytes that are not a ConsumerProtocolSubscription/Assignment (Kafka's SchemaException)."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: tuple[TopicPartitionName, ...] = ()
    generation_id: int = NO_GENERATION
    rack_id: str | None = None
    user_data: bytes | None = None


def _topic_partitions(r: Reader) -> tuple[str, tuple[int, ...]]:
    return r.string(), r.int32_array()


def decode_subscription(metadata: bytes) -> Subscription:
    try:
        r = Reader(metadata)
        version = r.int16()
        if version < 0:
            raise MalformedConsumerProtocol(f"ConsumerProtocolSubscription version {version}")
        topics = r.array(Reader.string, 2)
        user_data = r.nullable_bytes()
        owned: tuple[TopicPartitionName, ...] = ()
        generation, rack = NO_GENERATION, None
        if version >= 1:
            owned = tuple((t, p) for t, ps in r.array(_topic_partitions, 2 + 4) for p in ps)
        if version >= 2:
            generation = r.int32()
        if version >= 3:
            rack = r.nullable_string()
    except ProtocolError as e:
        raise MalformedConsumerProtocol(f"not a ConsumerProtocolSubscription: {e.reason}") from None
    return Subscription(version, topics, owned, generation, rack, None if user_data is None else bytes(user_data))


def encode_subscription(sub: Subscription) -> bytes:
    """The subscription at its version (tests and the downgrade path write what a client would)."""
    w = Writer()
    version = min(sub.version, NEWEST_SUBSCRIPTION_VERSION)
    w.int16(version)
    w.string_array(sub.topics)
    w.nullable_bytes(sub.user_data)
    if version >= 1:
        _write_partitions(w, sub.owned)
    if version >= 2:
        w.int32(sub.generation_id)
    if version >= 3:
        w.nullable_string(sub.rack_id)
    return w.to_bytes()


def _write_partitions(w: Writer, partitions: Iterable[TopicPartitionName]) -> None:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)

    def item(ww: Writer, entry: tuple[str, list[int]]) -> None:
        ww.string(entry[0])
        ww.int32_array(entry[1])
    w.array(sorted(by_topic.items()), item)


def encode_assignment(partitions: Iterable[TopicPartitionName], version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment (no user data); every version has the same two fields."""
    w = Writer()
    w.int16(max(0, min(version, NEWEST_ASSIGNMENT_VERSION)))
    _write_partitions(w, partitions)
    w.nullable_bytes(None)
    return w.to_bytes()


def decode_assignment(data: bytes) -> tuple[TopicPartitionName, ...]:
    """The partitions of a ConsumerProtocolAssignment; an empty assignment (b"", what a member
    that never synced holds) is none."""
    if not data:
        return ()
    try:
        r = Reader(data)
        if r.int16() < 0:
            raise MalformedConsumerProtocol("negative ConsumerProtocolAssignment version")
        return tuple((t, p) for t, ps in r.array(_topic_partitions, 2 + 4) for p in ps)
    except ProtocolError as e:
        raise MalformedConsumerProtocol(f"not a ConsumerProtocolAssignment: {e.reason}") from None
