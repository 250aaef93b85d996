"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups and retention.

Offsets live per group as {(topic, partition): OffsetCommitValue}, rebuilt by replaying
`__consumer_offsets` (groups/image.py). A commit is checked against the group's member and
generation; a commit with generation -1 and no member (a consumer that assign()s, or an
admin tool) is accepted for an empty or unknown group, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, replace

from common.errors import ErrorCode
from groups.consumer_group import ConsumerGroup
from groups.group import ClassicGroup, GroupConfig
from groups.outcome import Outcome
from groups.records import (
    NO_EXPIRE_TIMESTAMP,
    CoordinatorRecord,
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
)
from groups.state import GroupState

E = ErrorCode
GroupOffsets = Mapping[tuple[str, int], OffsetCommitValue]
NO_OFFSET = -1


@dataclass(frozen=True, slots=True)
class CommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp: int = -1  # OffsetCommit v1; -1: the coordinator's time


@dataclass(frozen=True, slots=True)
class CommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    partitions: tuple[CommitPartition, ...]
    expire_timestamp: int = NO_EXPIRE_TIMESTAMP  # v2-v4 retention_time_ms, as Kafka keeps it
    # What an unknown group committing with a generation gets: ILLEGAL_GENERATION before
    # OffsetCommit v9, GROUP_ID_NOT_FOUND from v9 (Kafka's OffsetMetadataManager).
    unknown_group_error: ErrorCode = ErrorCode.ILLEGAL_GENERATION


def _commit_error(group: ClassicGroup | None, req: CommitRequest) -> ErrorCode:
    if not req.group_id:
        return E.INVALID_GROUP_ID
    if group is None:
        return E.NONE if req.generation_id < 0 else req.unknown_group_error
    if group.state is GroupState.DEAD:
        return E.COORDINATOR_NOT_AVAILABLE
    if req.generation_id < 0 and group.state is GroupState.EMPTY:
        return E.NONE  # the group only stores offsets in Kafka (Kafka's doCommitOffsets)
    error = validate_member(group, req.member_id, req.group_instance_id, req.generation_id)
    if error is E.NONE and group.state is GroupState.COMPLETING_REBALANCE:
        return E.REBALANCE_IN_PROGRESS
    return error


def consumer_member_error(group: ConsumerGroup, member_id: str | None, member_epoch: int, *,
                          commit: bool) -> ErrorCode:
    """OffsetCommit's and OffsetFetch's check of a KIP-848 group's member (Kafka's
    ConsumerGroup.validateOffsetCommit / validateOffsetFetch). No member and a negative epoch
    is an admin tool or a consumer that assign()s: a fetch always passes, a commit only while
    the group is empty. Otherwise the member must exist (UNKNOWN_MEMBER_ID) at its current
    epoch; a stale one is STALE_MEMBER_EPOCH for a consumer-protocol member, which refreshes
    its epoch and retries, but ILLEGAL_GENERATION for a classic member, whose generation is
    its member epoch and whose client rejoins on that error (validateMemberEpoch)."""
    if member_epoch < 0 and (not group.members if commit else not member_id):
        return E.NONE
    member = group.members.get(member_id or "")
    if member is None:
        return E.UNKNOWN_MEMBER_ID
    if member_epoch != member.member_epoch:
        return E.ILLEGAL_GENERATION if member.uses_classic_protocol else E.STALE_MEMBER_EPOCH
    return E.NONE


def validate_member(group: ClassicGroup, member_id: str, group_instance_id: str | None,
                    generation_id: int) -> ErrorCode:
    """Kafka's ClassicGroup.validateMember (a static member by its instance id, else by its
    member id) and then the generation check of validateOffsetCommit: a plain and a
    transactional commit from a member both pass these."""
    if group_instance_id is not None:
        holder = group.static_member(group_instance_id)
        if holder is None:
            return E.UNKNOWN_MEMBER_ID
        if holder != member_id:
            return E.FENCED_INSTANCE_ID
    elif member_id not in group.members:
        return E.UNKNOWN_MEMBER_ID
    if generation_id != group.generation_id:
        return E.ILLEGAL_GENERATION
    return E.NONE


def commit_offsets(group: ClassicGroup | None, req: CommitRequest, *, now_ms: int,
                   config: GroupConfig, partition_exists: Callable[[str, int], bool]) -> Outcome:
    """Kafka's commitOffset: per partition (topic, partition, error), records for the valid
    ones. An unknown group committing with generation -1 is created, Empty."""
    error = _commit_error(group, req)
    if error is not E.NONE:
        return Outcome(group, response=tuple((p.topic, p.partition, error) for p in req.partitions))
    if group is None:
        group = ClassicGroup(req.group_id, state_timestamp_ms=now_ms)
    member = group.members.get(req.member_id)
    if member is not None:  # a commit is as good as a heartbeat (Kafka does the same)
        group = group.with_member(replace(member, session_deadline_ms=now_ms + member.session_timeout_ms))
    answers: list[tuple[str, int, ErrorCode]] = []
    records: list[CoordinatorRecord] = []
    for p in req.partitions:
        metadata = p.metadata or ""
        if len(metadata.encode("utf-8")) > config.offset_metadata_max_bytes:
            answers.append((p.topic, p.partition, E.OFFSET_METADATA_TOO_LARGE))
        elif not partition_exists(p.topic, p.partition):
            answers.append((p.topic, p.partition, E.UNKNOWN_TOPIC_OR_PARTITION))
        else:
            answers.append((p.topic, p.partition, E.NONE))
            records.append(CoordinatorRecord(
                OffsetCommitKey(req.group_id, p.topic, p.partition),
                OffsetCommitValue(p.offset, metadata, now_ms if p.commit_timestamp == -1 else p.commit_timestamp,
                                  p.leader_epoch, req.expire_timestamp)))
    return Outcome(group, tuple(records), tuple(answers))


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    error: ErrorCode


def fetch_offsets(offsets: GroupOffsets | None,
                  wanted: tuple[tuple[str, tuple[int, ...]], ...] | None, *,
                  unstable: Set[tuple[str, int]] = frozenset()) -> tuple[FetchedOffset, ...]:
    """Kafka's fetchOffsets: the committed offsets of the asked partitions (-1 and "" where
    none), or every committed offset of the group when `wanted` is None. A partition in
    `unstable` (a transactional offset pending, asked with require_stable, KIP-447) answers
    UNSTABLE_OFFSET_COMMIT so the consumer retries until the transaction ends."""
    offsets = offsets or {}
    if wanted is None:
        keys = sorted(offsets)
    else:
        keys = [(topic, p) for topic, partitions in wanted for p in partitions]
    out = []
    for topic, partition in keys:
        value = offsets.get((topic, partition))
        if (topic, partition) in unstable:
            out.append(FetchedOffset(topic, partition, NO_OFFSET, -1, "", E.UNSTABLE_OFFSET_COMMIT))
        elif value is None:
            out.append(FetchedOffset(topic, partition, NO_OFFSET, -1, "", E.NONE))
        else:
            out.append(FetchedOffset(topic, partition, value.offset, value.leader_epoch,
                                     value.metadata, E.NONE))
    return tuple(out)


def delete_offsets(group: ClassicGroup | None, offsets: GroupOffsets | None, group_id: str,
                   partitions: tuple[tuple[str, int], ...]) -> Outcome:
    """OffsetDelete (KIP-496): response (group error, ((topic, partition, error), ...))."""
    if not group_id:
        return Outcome(group, response=(E.INVALID_GROUP_ID, ()))
    if group is None or group.state is GroupState.DEAD:
        return Outcome(group, response=(E.GROUP_ID_NOT_FOUND, ()))
    subscribed: set[str] = set()
    if group.state is not GroupState.EMPTY:
        topics = group.subscribed_topics()
        if topics is None:
            return Outcome(group, response=(E.NON_EMPTY_GROUP, ()))
        subscribed = topics
    answers, records = [], []
    for topic, partition in partitions:
        if topic in subscribed:
            answers.append((topic, partition, E.GROUP_SUBSCRIBED_TO_TOPIC))
            continue
        answers.append((topic, partition, E.NONE))
        if offsets and (topic, partition) in offsets:
            records.append(CoordinatorRecord(OffsetCommitKey(group_id, topic, partition), None))
    return Outcome(group, tuple(records), (E.NONE, tuple(answers)))


def delete_group(group: ClassicGroup | None, offsets: GroupOffsets | None, group_id: str,
                 now_ms: int) -> Outcome:
    """DeleteGroups for one group: tombstones for its offsets and its metadata; the group
    is Dead. Only an empty group can be deleted."""
    if not group_id:
        return Outcome(group, response=E.INVALID_GROUP_ID)
    if group is None or group.state is GroupState.DEAD:
        return Outcome(group, response=E.GROUP_ID_NOT_FOUND)
    if group.state is not GroupState.EMPTY:
        return Outcome(group, response=E.NON_EMPTY_GROUP)
    records = [CoordinatorRecord(OffsetCommitKey(group_id, t, p), None) for t, p in sorted(offsets or {})]
    records.append(CoordinatorRecord(GroupMetadataKey(group_id), None))
    return Outcome(group.transition(GroupState.DEAD, now_ms), tuple(records), E.NONE,
                   reason="deleted")


def expire_offsets(group: ClassicGroup, offsets: GroupOffsets | None, now_ms: int,
                   config: GroupConfig, *, pending: Set[tuple[str, int]] = frozenset()) -> Outcome:
    """offsets.retention.minutes (KIP-211): an Empty group's offsets expire that long after it
    became empty (a group that never had members: after each commit); an explicit expire
    timestamp (OffsetCommit v2-v4 retention_time_ms) wins. When every offset of an empty
    group is gone, the group is deleted too. A partition in `pending` (a transactional offset
    awaiting its marker) keeps its offset, as Kafka's cleanupExpiredOffsets does."""
    if group.state is not GroupState.EMPTY:
        return Outcome(group)
    offsets = offsets or {}
    expired = []
    for key, value in sorted(offsets.items()):
        if value.expire_timestamp != NO_EXPIRE_TIMESTAMP:
            due = value.expire_timestamp
        elif group.protocol_type is not None and group.state_timestamp_ms >= 0:
            due = group.state_timestamp_ms + config.offsets_retention_ms
        else:
            due = value.commit_timestamp + config.offsets_retention_ms
        if due <= now_ms and key not in pending:
            expired.append(key)
    return _remove_offsets(group, offsets, expired, now_ms, f"{len(expired)} offset(s) expired" if expired else "")


def delete_topic_offsets(group: ClassicGroup, offsets: GroupOffsets | None, deleted_topics: Set[str],
                         now_ms: int) -> Outcome:
    """The committed offsets of deleted topics go with them (Kafka's onPartitionsDeleted: a
    consumer of a topic recreated under the same name starts from its reset policy, not at a
    stale position); an Empty group left without offsets is removed as well, as Kafka's
    cleanupGroupMetadata does."""
    offsets = offsets or {}
    gone = [key for key in sorted(offsets) if key[0] in deleted_topics]
    if not gone:
        return Outcome(group)
    return _remove_offsets(group, offsets, gone, now_ms, f"{len(gone)} offset(s) of deleted topic(s) "
                           f"{', '.join(sorted({t for t, _ in gone}))} removed")


def _remove_offsets(group: ClassicGroup, offsets: GroupOffsets, gone: list[tuple[str, int]], now_ms: int,
                    reason: str) -> Outcome:
    """Tombstones for `gone`; an Empty group left without offsets is removed too (Kafka's
    cleanupGroupMetadata)."""
    records = [CoordinatorRecord(OffsetCommitKey(group.group_id, t, p), None) for t, p in gone]
    if len(gone) == len(offsets) and group.state is GroupState.EMPTY and group.generation_id >= 0:
        records.append(CoordinatorRecord(GroupMetadataKey(group.group_id), None))
        return Outcome(group.transition(GroupState.DEAD, now_ms), tuple(records), reason=f"{reason}: group removed")
    return Outcome(group, tuple(records), reason=reason)
