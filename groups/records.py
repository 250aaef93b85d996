"""`__consumer_offsets` records in Kafka's own key/value schemas, byte for byte.

Each record key starts with an int16 schema version that names the record type, as Kafka's
`GroupCoordinatorRecordSerde` reads it: 0 and 1 are OffsetCommitKey, 2 is GroupMetadataKey.
A null value is a tombstone (offset deleted, group deleted). Values carry their own int16
version; we write the versions Kafka 3.x/4.x write (OffsetCommitValue v3 — v1 only with an
explicit expire timestamp —, GroupMetadataValue v3) and read v0–v3 of both, so Kafka's
`kafka-console-consumer --formatter ...GroupMetadataMessageFormatter` could read our topic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.protocol.primitives import ProtocolError, Reader, Writer

OFFSET_COMMIT_KEY_VERSION: Final = 1
GROUP_METADATA_KEY_VERSION: Final = 2
OFFSET_COMMIT_VALUE_VERSION: Final = 3
GROUP_METADATA_VALUE_VERSION: Final = 3
NO_EXPIRE_TIMESTAMP: Final = -1
NO_LEADER_EPOCH: Final = -1


class RecordFormatError(ValueError):
    """A `__consumer_offsets` record we cannot read (unknown version, truncated bytes)."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = NO_LEADER_EPOCH  # v3+
    expire_timestamp: int = NO_EXPIRE_TIMESTAMP  # v1 only


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None  # v3+
    client_id: str
    client_host: str
    rebalance_timeout: int  # v1+ (v0: the session timeout)
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int  # v2+, -1 before
    members: tuple[MemberMetadata, ...]


RecordKey = OffsetCommitKey | GroupMetadataKey
RecordValue = OffsetCommitValue | GroupMetadataValue


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One record to append to a group's partition; value None is a tombstone."""

    key: RecordKey
    value: RecordValue | None


# ---- keys ---------------------------------------------------------------------------------


def encode_key(key: RecordKey) -> bytes:
    w = Writer()
    if isinstance(key, OffsetCommitKey):
        w.int16(OFFSET_COMMIT_KEY_VERSION)
        w.string(key.group)
        w.string(key.topic)
        w.int32(key.partition)
    else:
        w.int16(GROUP_METADATA_KEY_VERSION)
        w.string(key.group)
    return w.to_bytes()


def decode_key(data: bytes) -> RecordKey:
    try:
        r = Reader(data)
        version = r.int16()
        if version in (0, 1):
            return OffsetCommitKey(r.string(), r.string(), r.int32())
        if version == 2:
            return GroupMetadataKey(r.string())
    except ProtocolError as e:
        raise RecordFormatError(f"truncated record key: {e.reason}") from None
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


# ---- values -------------------------------------------------------------------------------


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    w = Writer()
    # Kafka writes v1 only to carry an explicit expire timestamp (OffsetCommit v1-v4 retention).
    version = 1 if value.expire_timestamp != NO_EXPIRE_TIMESTAMP else OFFSET_COMMIT_VALUE_VERSION
    w.int16(version)
    w.int64(value.offset)
    if version >= 3:
        w.int32(value.leader_epoch)
    w.string(value.metadata)
    w.int64(value.commit_timestamp)
    if version == 1:
        w.int64(value.expire_timestamp)
    return w.to_bytes()


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    try:
        r = Reader(data)
        version = r.int16()
        if not 0 <= version <= 3:
            raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
        offset = r.int64()
        leader_epoch = r.int32() if version >= 3 else NO_LEADER_EPOCH
        metadata = r.string()
        commit_timestamp = r.int64()
        expire = r.int64() if version == 1 else NO_EXPIRE_TIMESTAMP
    except ProtocolError as e:
        raise RecordFormatError(f"truncated OffsetCommitValue: {e.reason}") from None
    return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire)


def _write_member(w: Writer, m: MemberMetadata) -> None:
    w.string(m.member_id)
    w.nullable_string(m.group_instance_id)
    w.string(m.client_id)
    w.string(m.client_host)
    w.int32(m.rebalance_timeout)
    w.int32(m.session_timeout)
    w.bytes_(m.subscription)
    w.bytes_(m.assignment)


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    w = Writer()
    w.int16(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.nullable_string(value.protocol)
    w.nullable_string(value.leader)
    w.int64(value.current_state_timestamp)
    w.array(value.members, _write_member)
    return w.to_bytes()


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    try:
        r = Reader(data)
        version = r.int16()
        if not 0 <= version <= 3:
            raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
        protocol_type = r.string()
        generation = r.int32()
        protocol = r.nullable_string()
        leader = r.nullable_string()
        timestamp = r.int64() if version >= 2 else -1

        def member(rr: Reader) -> MemberMetadata:
            member_id = rr.string()
            instance = rr.nullable_string() if version >= 3 else None
            client_id, host = rr.string(), rr.string()
            rebalance = rr.int32() if version >= 1 else -1
            session = rr.int32()
            return MemberMetadata(member_id, instance, client_id, host,
                                  rebalance if version >= 1 else session, session,
                                  bytes(rr.bytes_()), bytes(rr.bytes_()))

        members = r.array(member, 2 + 2 + 2 + 4 + 4 + 4)
    except ProtocolError as e:
        raise RecordFormatError(f"truncated GroupMetadataValue: {e.reason}") from None
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, members)


def encode_value(value: RecordValue | None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, OffsetCommitValue):
        return encode_offset_commit_value(value)
    return encode_group_metadata_value(value)


def decode_record(key: bytes, value: bytes | None) -> CoordinatorRecord:
    """A record read back from the partition (loading a coordinator, tools)."""
    decoded = decode_key(key)
    if value is None:
        return CoordinatorRecord(decoded, None)
    if isinstance(decoded, OffsetCommitKey):
        return CoordinatorRecord(decoded, decode_offset_commit_value(value))
    return CoordinatorRecord(decoded, decode_group_metadata_value(value))


def encode_record(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    return encode_key(record.key), encode_value(record.value)
