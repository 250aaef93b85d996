"""The KIP-848 consumer group's `__consumer_offsets` records, in Kafka's schemas.

A key starts with its int16 version, which names the record type (Kafka's
CoordinatorRecordType): 3 ConsumerGroupMetadata, 5 ConsumerGroupMemberMetadata,
6 ConsumerGroupTargetAssignmentMetadata, 7 ConsumerGroupTargetAssignmentMember, 8
ConsumerGroupCurrentMemberAssignment. Keys are not flexible; values are (version 0, flexible:
compact strings and arrays, an empty tagged-field section). A null value is a tombstone.

We do not write ConsumerGroupPartitionMetadata (key 4): Kafka 4.0 deprecated it (KIP-1101)
and our target assignment is recomputed from the metadata image on the group epoch's bump.
An assignment is held as a frozenset of (topic id, partition); records group it by topic id,
sorted so the same assignment always encodes to the same bytes.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final

from common.protocol.metadata import wire_topic_id
from common.protocol.primitives import ProtocolError, Reader, Writer

CONSUMER_GROUP_METADATA_KEY_VERSION: Final = 3
CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION: Final = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION: Final = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION: Final = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION: Final = 8
CONSUMER_KEY_VERSIONS: Final = frozenset(range(3, 9)) - {4}
VALUE_VERSION: Final = 0
METADATA_HASH_TAG: Final = 0  # ConsumerGroupMetadataValue's tagged MetadataHash (int64)
CLASSIC_MEMBER_METADATA_TAG: Final = 0  # ConsumerGroupMemberMetadataValue's tagged ClassicMemberMetadata

TopicIdPartition = tuple[str, int]  # (topic id, partition), the topic id as the metadata image spells it
Assignment = frozenset[TopicIdPartition]
NO_PARTITIONS: Final[Assignment] = frozenset()


def image_topic_id(wire: uuid.UUID) -> str:
    """A wire topic id as the metadata image spells it (Kafka's Uuid.toString: base64url, no padding)."""
    return base64.urlsafe_b64encode(wire.bytes).rstrip(b"=").decode()


class ConsumerRecordFormatError(ValueError):
    """A consumer group record we cannot read (unknown version, truncated bytes)."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int  # the group epoch
    # KIP-1101's MetadataHash (tagged field 0): of the subscribed topics' ids and partition
    # counts when the epoch was set, so a topic created or grown is noticed after a reload too.
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that speaks the classic protocol inside a consumer group (KIP-848's online
    migration): its JoinGroup session timeout and protocols, (name, metadata) in its order."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tagged field 0; None: a KIP-848 member


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    partitions: Assignment


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState byte: 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS
    assigned: Assignment
    pending_revocation: Assignment


ConsumerRecordKey = (ConsumerGroupMetadataKey | ConsumerGroupMemberMetadataKey | ConsumerGroupTargetAssignmentMetadataKey
                     | ConsumerGroupTargetAssignmentMemberKey | ConsumerGroupCurrentMemberAssignmentKey)
ConsumerRecordValue = (ConsumerGroupMetadataValue | ConsumerGroupMemberMetadataValue
                       | ConsumerGroupTargetAssignmentMetadataValue | ConsumerGroupTargetAssignmentMemberValue
                       | ConsumerGroupCurrentMemberAssignmentValue)

_KEY_VERSIONS: Final[dict[type, int]] = {
    ConsumerGroupMetadataKey: CONSUMER_GROUP_METADATA_KEY_VERSION,
    ConsumerGroupMemberMetadataKey: CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION,
    ConsumerGroupTargetAssignmentMetadataKey: CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION,
    ConsumerGroupTargetAssignmentMemberKey: CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION,
    ConsumerGroupCurrentMemberAssignmentKey: CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION,
}


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One consumer group record to append; value None is a tombstone."""

    key: ConsumerRecordKey
    value: ConsumerRecordValue | None


# ---- keys ---------------------------------------------------------------------------------


def encode_key(key: ConsumerRecordKey) -> bytes:
    w = Writer()
    w.int16(_KEY_VERSIONS[type(key)])
    w.string(key.group)
    if isinstance(key, (ConsumerGroupMemberMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
                        ConsumerGroupCurrentMemberAssignmentKey)):
        w.string(key.member_id)
    return w.to_bytes()


def decode_key(data: bytes) -> ConsumerRecordKey:
    try:
        r = Reader(data)
        version = r.int16()
        group = r.string()
        if version == CONSUMER_GROUP_METADATA_KEY_VERSION:
            return ConsumerGroupMetadataKey(group)
        if version == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION:
            return ConsumerGroupTargetAssignmentMetadataKey(group)
        if version == CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION:
            return ConsumerGroupMemberMetadataKey(group, r.string())
        if version == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION:
            return ConsumerGroupTargetAssignmentMemberKey(group, r.string())
        if version == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION:
            return ConsumerGroupCurrentMemberAssignmentKey(group, r.string())
    except ProtocolError as e:
        raise ConsumerRecordFormatError(f"truncated consumer group record key: {e.reason}") from None
    raise ConsumerRecordFormatError(f"not a consumer group record key version: {version}")


# ---- values -------------------------------------------------------------------------------


def _by_topic(assignment: Iterable[TopicIdPartition]) -> list[tuple[str, list[int]]]:
    topics: dict[str, list[int]] = {}
    for topic_id, partition in assignment:
        topics.setdefault(topic_id, []).append(partition)
    return [(t, sorted(ps)) for t, ps in sorted(topics.items())]


def _write_partitions(w: Writer, assignment: Assignment) -> None:
    def topic(ww: Writer, item: tuple[str, list[int]]) -> None:
        ww.uuid(wire_topic_id(item[0]))
        ww.int32_array(item[1])
        ww.tagged_fields()
    w.array(_by_topic(assignment), topic)


def _read_partitions(r: Reader) -> Assignment:
    def topic(rr: Reader) -> tuple[str, tuple[int, ...]]:
        topic_id, partitions = image_topic_id(rr.uuid()), rr.int32_array()
        rr.skip_tagged_fields()
        return topic_id, partitions
    return frozenset((t, p) for t, ps in r.array(topic, 16 + 1 + 1) for p in ps)


def encode_value(value: ConsumerRecordValue | None) -> bytes | None:
    if value is None:
        return None
    w = Writer(flexible=True)
    w.int16(VALUE_VERSION)
    if isinstance(value, ConsumerGroupMetadataValue):
        w.int32(value.epoch)
        if value.metadata_hash:
            tag = Writer()
            tag.int64(value.metadata_hash)
            w.uvarint(1)  # one tagged field: tag 0, 8 bytes
            w.uvarint(METADATA_HASH_TAG)
            w.uvarint(8)
            w.raw(tag.to_bytes())
            return w.to_bytes()
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        w.int32(value.assignment_epoch)
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        _write_partitions(w, value.partitions)
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        w.int32(value.member_epoch)
        w.int32(value.previous_member_epoch)
        w.int8(value.state)
        _write_partitions(w, value.assigned)
        _write_partitions(w, value.pending_revocation)
    else:
        w.nullable_string(value.instance_id)
        w.nullable_string(value.rack_id)
        w.string(value.client_id)
        w.string(value.client_host)
        w.string_array(value.subscribed_topic_names)
        w.nullable_string(value.subscribed_topic_regex)
        w.int32(value.rebalance_timeout_ms)
        w.nullable_string(value.server_assignor)
        if value.classic_member_metadata is not None:
            classic = _classic_metadata_bytes(value.classic_member_metadata)
            w.uvarint(1)  # one tagged field: tag 0, ClassicMemberMetadata
            w.uvarint(CLASSIC_MEMBER_METADATA_TAG)
            w.uvarint(len(classic))
            w.raw(classic)
            return w.to_bytes()
    w.tagged_fields()  # ClassicMemberMetadata (tag 0) absent: a member that speaks KIP-848
    return w.to_bytes()


def _classic_metadata_bytes(classic: ClassicMemberMetadata) -> bytes:
    """ClassicMemberMetadata as its tagged field holds it (flexible: compact arrays and strings)."""
    w = Writer(flexible=True)
    w.int32(classic.session_timeout_ms)

    def protocol(ww: Writer, item: tuple[str, bytes]) -> None:
        ww.string(item[0])
        ww.bytes_(item[1])
        ww.tagged_fields()
    w.array(classic.supported_protocols, protocol)
    w.tagged_fields()
    return w.to_bytes()


def _read_classic_metadata(data: bytes) -> ClassicMemberMetadata:
    r = Reader(data, flexible=True)
    session = r.int32()

    def protocol(rr: Reader) -> tuple[str, bytes]:
        name, metadata = rr.string(), bytes(rr.bytes_())
        rr.skip_tagged_fields()
        return name, metadata
    protocols = r.array(protocol, 1 + 1 + 1)
    r.skip_tagged_fields()
    return ClassicMemberMetadata(session, protocols)


def _read_value(key: ConsumerRecordKey, r: Reader) -> ConsumerRecordValue:
    value: ConsumerRecordValue
    if isinstance(key, ConsumerGroupMetadataKey):
        epoch, metadata_hash = r.int32(), 0
        for tag, data in r.tagged_field_items():
            if tag == METADATA_HASH_TAG and len(data) == 8:
                metadata_hash = Reader(data).int64()
        return ConsumerGroupMetadataValue(epoch, metadata_hash)
    elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        value = ConsumerGroupTargetAssignmentMetadataValue(r.int32())
    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        value = ConsumerGroupTargetAssignmentMemberValue(_read_partitions(r))
    elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        value = ConsumerGroupCurrentMemberAssignmentValue(r.int32(), r.int32(), r.int8(), _read_partitions(r),
                                                          _read_partitions(r))
    else:
        value = ConsumerGroupMemberMetadataValue(
            r.nullable_string(), r.nullable_string(), r.string(), r.string(),
            r.array(lambda rr: rr.string(), 1), r.nullable_string(), r.int32(), r.nullable_string())
        classic = None
        for tag, data in r.tagged_field_items():
            if tag == CLASSIC_MEMBER_METADATA_TAG:
                classic = _read_classic_metadata(bytes(data))
        return replace(value, classic_member_metadata=classic)
    r.skip_tagged_fields()
    return value


def decode_record(key: bytes, value: bytes | None) -> ConsumerRecord:
    decoded = decode_key(key)
    if value is None:
        return ConsumerRecord(decoded, None)
    try:
        r = Reader(value, flexible=True)
        version = r.int16()
        if version != VALUE_VERSION:
            raise ConsumerRecordFormatError(f"unknown {type(decoded).__name__[:-3]}Value version {version}")
        return ConsumerRecord(decoded, _read_value(decoded, r))
    except ProtocolError as e:
        raise ConsumerRecordFormatError(f"truncated {type(decoded).__name__[:-3]}Value: {e.reason}") from None


def encode_record(record: ConsumerRecord) -> tuple[bytes, bytes | None]:
    return encode_key(record.key), encode_value(record.value)
