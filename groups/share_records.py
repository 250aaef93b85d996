"""A share partition's durable state (KIP-932) as a `__consumer_offsets` record.

    record = ShareStateRecord(ShareSnapshotKey("g", topic_id, 0), ShareSnapshotValue(...))
    key, value = encode_record(record); decode_record(key, value) == record

Kafka keeps it in `__share_group_state`, written by its share coordinator (ShareSnapshotKey and
ShareSnapshotValue: a compacted topic whose last record per key is the state). tidelog's share
coordinator is the share group's group coordinator, so the same snapshot is a record of the
group's `__consumer_offsets` partition: loading a coordinator replays it, compaction keeps the
last one per key, a null value deletes it. Its key version, SHARE_SNAPSHOT_KEY_VERSION, is
tidelog's own: Kafka's `__consumer_offsets` has no share-state records, and the number is far
from the versions Kafka uses there (0-16). The value is ShareSnapshotValue v0's fields, plain.

A state batch is (first offset, last offset, delivery state, delivery count) with Kafka's
delivery states (0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED; an acquired record is stored as
AVAILABLE with its count, so it is delivered again after a failover).

A share group's membership is in Kafka's own records (keys 10-14 of Kafka's
CoordinatorRecordType, the values' version 0 flexible, as Kafka 4.1+ writes them):
ShareGroupMemberMetadata (10), ShareGroupMetadata (11: the group epoch),
ShareGroupTargetAssignmentMetadata (12) and ShareGroupTargetAssignmentMember (13: the
assignment computed for that epoch), ShareGroupCurrentMemberAssignment (14: a member's epoch
and partitions). `membership_records` turns the share group rules' records
(`groups.share_group`) into these; `replay_membership` rebuilds the group from them, so a new
coordinator (a failover, a restart) loads the group epoch, members and assignment and the
members carry on without rejoining. ShareGroupStatePartitionMetadata (15) is not written: it
tracks which share partitions' state the share coordinator initialized, and here the
snapshot records above are that state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final

from common.protocol.primitives import ProtocolError, Reader, Writer
# one codec for a flexible [](TopicId, []Partitions) list, the consumer groups' records' too
from groups.consumer_records import _read_partitions as read_partitions, _write_partitions as write_partitions
from groups.records import RecordFormatError
from groups import share_group as sg

SHARE_SNAPSHOT_KEY_VERSION: Final = 100
SHARE_SNAPSHOT_VALUE_VERSION: Final = 0
StateBatch = tuple[int, int, int, int]  # (first offset, last offset, delivery state, delivery count)


@dataclass(frozen=True, slots=True)
class ShareSnapshotKey:
    group: str
    topic_id: str  # as the metadata image spells it
    partition: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class ShareStateRecord:
    key: ShareSnapshotKey
    value: ShareSnapshotValue | None  # None: deleted (the group's share state goes)


FINISHED_DELIVERY_STATES: Final = frozenset({2, 4})  # Kafka's ACKNOWLEDGED and ARCHIVED: delivery complete
UNKNOWN_LAG: Final = -1  # DescribeShareGroupOffsets v1's lag when it cannot be computed (Kafka's default)


def share_lag(snapshot: ShareSnapshotValue, high_watermark: int) -> int:
    """A share partition's lag (DescribeShareGroupOffsets v1, KIP-1226): the records from its
    start offset (SPSO) up to the high watermark whose delivery is not complete (not yet
    acknowledged or archived: available, acquired, or never fetched)."""
    end = max(high_watermark, snapshot.start_offset)
    done = sum(max(0, min(last + 1, end) - max(first, snapshot.start_offset))
               for first, last, state, _ in snapshot.batches if state in FINISHED_DELIVERY_STATES)
    return end - snapshot.start_offset - done


def is_share_key(key: bytes) -> bool:
    """A share partition's snapshot or a share group's membership record."""
    return len(key) >= 2 and int.from_bytes(key[:2], "big") in SHARE_KEY_VERSIONS


def encode_record(record: ShareStateRecord | MembershipRecord) -> tuple[bytes, bytes | None]:
    if isinstance(record, MembershipRecord):
        return _encode_membership(record)
    w = Writer()
    w.int16(SHARE_SNAPSHOT_KEY_VERSION)
    w.string(record.key.group)
    w.string(record.key.topic_id)
    w.int32(record.key.partition)
    if record.value is None:
        return w.to_bytes(), None
    v = Writer()
    v.int16(SHARE_SNAPSHOT_VALUE_VERSION)
    v.int32(record.value.state_epoch)
    v.int32(record.value.leader_epoch)
    v.int64(record.value.start_offset)

    def batch(wr: Writer, b: StateBatch) -> None:
        wr.int64(b[0])
        wr.int64(b[1])
        wr.int8(b[2])
        wr.int16(b[3])

    v.array(record.value.batches, batch)
    return w.to_bytes(), v.to_bytes()


def decode_record(key: bytes, value: bytes | None) -> ShareStateRecord | MembershipRecord:
    if len(key) >= 2 and int.from_bytes(key[:2], "big") in MEMBERSHIP_KEY_VERSIONS:
        return _decode_membership(key, value)
    try:
        r = Reader(key)
        if r.int16() != SHARE_SNAPSHOT_KEY_VERSION:
            raise RecordFormatError("not a share snapshot key")
        decoded = ShareSnapshotKey(r.string(), r.string(), r.int32())
        if value is None:
            return ShareStateRecord(decoded, None)
        v = Reader(value)
        version = v.int16()
        if version != SHARE_SNAPSHOT_VALUE_VERSION:
            raise RecordFormatError(f"unknown share snapshot value version {version}")
        state_epoch, leader_epoch, start = v.int32(), v.int32(), v.int64()
        batches = v.array(lambda rr: (rr.int64(), rr.int64(), rr.int8(), rr.int16()), 8 + 8 + 1 + 2)
    except ProtocolError as e:
        raise RecordFormatError(f"truncated share snapshot record: {e.reason}") from None
    return ShareStateRecord(decoded, ShareSnapshotValue(state_epoch, leader_epoch, start, tuple(batches)))


# ---- a share group's membership: Kafka's ShareGroup* records -------------------------------------

SHARE_GROUP_MEMBER_METADATA_KEY_VERSION: Final = 10
SHARE_GROUP_METADATA_KEY_VERSION: Final = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION: Final = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION: Final = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION: Final = 14
MEMBERSHIP_KEY_VERSIONS: Final = frozenset(range(10, 15))
SHARE_KEY_VERSIONS: Final = MEMBERSHIP_KEY_VERSIONS | {SHARE_SNAPSHOT_KEY_VERSION}
_PER_MEMBER: Final = frozenset({SHARE_GROUP_MEMBER_METADATA_KEY_VERSION, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION,
                                SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION})
MEMBERSHIP_VALUE_VERSION: Final = 0
MEMBER_STATE_STABLE: Final = 0  # Kafka's MemberState.STABLE: a share member never revokes


@dataclass(frozen=True, slots=True)
class ShareGroupKey:
    """The key of one of the five records: its type (the key version), the group and, for the
    per-member ones (10, 13, 14), the member."""

    version: int
    group: str
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0  # KIP-1101's; 0: not computed (the assignment is recomputed from the image)


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    partitions: sg.Assignment


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: sg.Assignment


ShareGroupValue = (ShareGroupMetadataValue | ShareGroupMemberMetadataValue | ShareGroupTargetAssignmentMetadataValue
                   | ShareGroupTargetAssignmentMemberValue | ShareGroupCurrentMemberAssignmentValue)


@dataclass(frozen=True, slots=True)
class MembershipRecord:
    key: ShareGroupKey
    value: ShareGroupValue | None  # None: a tombstone


ShareRecord = ShareStateRecord | MembershipRecord  # every share record of `__consumer_offsets`


def membership_records(group: sg.ShareGroup, records: Iterable[sg.ShareGroupRecord]) -> tuple[MembershipRecord, ...]:
    """Kafka's records for the share group rules' `records` on `group` (in their order): a
    member set is its metadata and current assignment, a member removed tombstones its three
    records, a new epoch is the group's metadata, then each target assignment that changed,
    then the target's epoch (Kafka's order: the epoch's metadata record last)."""
    out: list[MembershipRecord] = []
    target = dict(group.target)
    for record in records:
        gid = group.group_id
        if isinstance(record, sg.MemberSet):
            m = record.member
            before = group.members.get(m.member_id)
            out.append(MembershipRecord(ShareGroupKey(SHARE_GROUP_MEMBER_METADATA_KEY_VERSION, gid, m.member_id),
                                        ShareGroupMemberMetadataValue(m.rack_id, m.client_id, m.client_host,
                                                                      m.subscribed_topic_names)))
            out.append(MembershipRecord(
                ShareGroupKey(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION, gid, m.member_id),
                ShareGroupCurrentMemberAssignmentValue(m.member_epoch, sg.JOIN_EPOCH if before is None
                                                       else before.member_epoch, MEMBER_STATE_STABLE, m.assignment)))
        elif isinstance(record, sg.MemberRemoved):
            for version in (SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION,
                            SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION, SHARE_GROUP_MEMBER_METADATA_KEY_VERSION):
                out.append(MembershipRecord(ShareGroupKey(version, gid, record.member_id), None))
            target.pop(record.member_id, None)
        else:
            out.append(MembershipRecord(ShareGroupKey(SHARE_GROUP_METADATA_KEY_VERSION, gid),
                                        ShareGroupMetadataValue(record.group_epoch)))
            for member_id, partitions in sorted(record.target.items()):
                if target.get(member_id) != partitions:
                    out.append(MembershipRecord(
                        ShareGroupKey(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION, gid, member_id),
                        ShareGroupTargetAssignmentMemberValue(partitions)))
            for member_id in sorted(set(target) - set(record.target)):
                out.append(MembershipRecord(
                    ShareGroupKey(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION, gid, member_id), None))
            target = dict(record.target)
            out.append(MembershipRecord(ShareGroupKey(SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION, gid),
                                        ShareGroupTargetAssignmentMetadataValue(record.group_epoch)))
    return tuple(out)


def replay_membership(group: sg.ShareGroup | None, record: MembershipRecord) -> sg.ShareGroup | None:
    """The share group after one of its records (None: it has none left). A member's record
    may come before its metadata's (a load replays what compaction kept, in log order), so
    either makes the member and each fills in its own fields."""
    key, value = record.key, record.value
    if key.version == SHARE_GROUP_METADATA_KEY_VERSION and value is None:
        return None  # the group was deleted
    group = group or sg.ShareGroup(key.group)
    members = dict(group.members)
    member = members.get(key.member_id) or sg.ShareMember(key.member_id, sg.JOIN_EPOCH, ())
    if isinstance(value, ShareGroupMetadataValue):
        return replace(group, group_epoch=value.epoch)
    if isinstance(value, ShareGroupTargetAssignmentMetadataValue):
        return group  # the assignment epoch is the group epoch here: both move together
    if key.version == SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION:
        target = dict(group.target)
        if isinstance(value, ShareGroupTargetAssignmentMemberValue):
            target[key.member_id] = value.partitions
        else:
            target.pop(key.member_id, None)
        return replace(group, target=MappingProxyType(target))
    if key.version == SHARE_GROUP_MEMBER_METADATA_KEY_VERSION and value is None:
        members.pop(key.member_id, None)
    elif isinstance(value, ShareGroupMemberMetadataValue):
        members[key.member_id] = replace(member, rack_id=value.rack_id, client_id=value.client_id,
                                         client_host=value.client_host,
                                         subscribed_topic_names=value.subscribed_topic_names)
    elif isinstance(value, ShareGroupCurrentMemberAssignmentValue):
        members[key.member_id] = replace(member, member_epoch=value.member_epoch, assignment=value.assigned)
    else:
        return group  # a current assignment's tombstone: its metadata's tombstone removes the member
    return replace(group, members=MappingProxyType(members))


def _encode_membership(record: MembershipRecord) -> tuple[bytes, bytes | None]:
    k = Writer()
    k.int16(record.key.version)
    k.string(record.key.group)
    if record.key.version in _PER_MEMBER:
        k.string(record.key.member_id)
    value = record.value
    if value is None:
        return k.to_bytes(), None
    w = Writer(flexible=True)
    w.int16(MEMBERSHIP_VALUE_VERSION)
    if isinstance(value, ShareGroupMetadataValue):
        w.int32(value.epoch)
        w.int64(value.metadata_hash)
    elif isinstance(value, ShareGroupMemberMetadataValue):
        w.nullable_string(value.rack_id)
        w.string(value.client_id)
        w.string(value.client_host)
        w.string_array(value.subscribed_topic_names)
    elif isinstance(value, ShareGroupTargetAssignmentMetadataValue):
        w.int32(value.assignment_epoch)
    elif isinstance(value, ShareGroupTargetAssignmentMemberValue):
        write_partitions(w, value.partitions)
    else:
        w.int32(value.member_epoch)
        w.int32(value.previous_member_epoch)
        w.int8(value.state)
        write_partitions(w, value.assigned)
    w.tagged_fields()
    return k.to_bytes(), w.to_bytes()


def _decode_membership(key: bytes, value: bytes | None) -> MembershipRecord:
    try:
        r = Reader(key)
        version = r.int16()
        decoded = ShareGroupKey(version, r.string(), r.string() if version in _PER_MEMBER else "")
        if value is None:
            return MembershipRecord(decoded, None)
        v = Reader(value, flexible=True)
        if (value_version := v.int16()) != MEMBERSHIP_VALUE_VERSION:
            raise RecordFormatError(f"unknown share group record value version {value_version} (key {version})")
        out: ShareGroupValue
        if version == SHARE_GROUP_METADATA_KEY_VERSION:
            out = ShareGroupMetadataValue(v.int32(), v.int64())
        elif version == SHARE_GROUP_MEMBER_METADATA_KEY_VERSION:
            out = ShareGroupMemberMetadataValue(v.nullable_string(), v.string(), v.string(),
                                                v.array(lambda rr: rr.string(), 1))
        elif version == SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION:
            out = ShareGroupTargetAssignmentMetadataValue(v.int32())
        elif version == SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION:
            out = ShareGroupTargetAssignmentMemberValue(read_partitions(v))
        else:
            out = ShareGroupCurrentMemberAssignmentValue(v.int32(), v.int32(), v.int8(), read_partitions(v))
        v.skip_tagged_fields()
    except ProtocolError as e:
        raise RecordFormatError(f"truncated share group record: {e.reason}") from None
    return MembershipRecord(decoded, out)
