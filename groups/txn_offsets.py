"""TxnOffsetCommit: offsets committed inside a producer's transaction (KIP-98, KIP-447).

    outcome = txn_commit_offsets(group, TxnCommitRequest(...), now_ms=now, config=config)
    outcome.records   # OffsetCommit records, appended as the producer's transactional batch

The records are the same OffsetCommit records a plain commit writes; what makes them
pending is the batch they are appended in (the producer's id and epoch, the transactional
bit): `GroupsImage.replay` holds them per producer until the producer's marker commits or
aborts them. The checks are Kafka's `ClassicGroup.validateOffsetCommit` with
isTransactional: a request with a generation, a member id or an instance id must come from
the group's current member of the current generation (KIP-447: a zombie of an older
generation is fenced with ILLEGAL_GENERATION, a replaced static member with
FENCED_INSTANCE_ID), while one without them (TxnOffsetCommit v0-v2, or a producer that does
not use group management) is accepted whatever the group's state; a transactional commit
is allowed during CompletingRebalance, a plain one is not.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import ErrorCode
from groups.group import ClassicGroup, GroupConfig
from groups.offsets import CommitPartition, validate_member
from groups.outcome import Outcome
from groups.records import CoordinatorRecord, OffsetCommitKey, OffsetCommitValue
from groups.state import GroupState

E = ErrorCode
NO_GENERATION = -1  # TxnOffsetCommit v0-v2 carry none (Kafka's JoinGroupRequest.UNKNOWN_GENERATION_ID)


@dataclass(frozen=True, slots=True)
class TxnCommitRequest:
    group_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[CommitPartition, ...]
    generation_id: int = NO_GENERATION  # v3+ (KIP-447)
    member_id: str = ""  # v3+
    group_instance_id: str | None = None  # v3+


def _validate(group: ClassicGroup | None, req: TxnCommitRequest) -> ErrorCode:
    """Kafka's validateTransactionalOffsetCommit, then ClassicGroup.validateOffsetCommit."""
    if not req.group_id:
        return E.INVALID_GROUP_ID
    if group is None:  # Kafka creates a "simple" group for a commit without a generation
        return E.NONE if req.generation_id < 0 else E.ILLEGAL_GENERATION
    if group.state is GroupState.DEAD:
        return E.COORDINATOR_NOT_AVAILABLE
    if req.generation_id < 0 and group.state is GroupState.EMPTY:
        return E.NONE
    if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
        return validate_member(group, req.member_id, req.group_instance_id, req.generation_id)
    return E.NONE


def txn_commit_offsets(group: ClassicGroup | None, req: TxnCommitRequest, *, now_ms: int,
                       config: GroupConfig) -> Outcome:
    """Kafka's commitTransactionalOffset: response ((topic, partition, error), ...) and an
    OffsetCommit record per accepted partition (offset metadata over
    offset.metadata.max.bytes is refused alone, as in a plain commit)."""
    error = _validate(group, req)
    if error is not E.NONE:
        return Outcome(group, response=tuple((p.topic, p.partition, error) for p in req.partitions))
    if group is None:
        group = ClassicGroup(req.group_id, state_timestamp_ms=now_ms)
    answers: list[tuple[str, int, ErrorCode]] = []
    records: list[CoordinatorRecord] = []
    for p in req.partitions:
        metadata = p.metadata or ""
        if len(metadata.encode("utf-8")) > config.offset_metadata_max_bytes:
            answers.append((p.topic, p.partition, E.OFFSET_METADATA_TOO_LARGE))
            continue
        answers.append((p.topic, p.partition, E.NONE))
        records.append(CoordinatorRecord(OffsetCommitKey(req.group_id, p.topic, p.partition),
                                         OffsetCommitValue(p.offset, metadata, now_ms, p.leader_epoch)))
    return Outcome(group, tuple(records), tuple(answers))
