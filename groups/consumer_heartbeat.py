"""ConsumerGroupHeartbeat (KIP-848) as a rule: records to append and the answer.

    out = heartbeat(group, request, topics=topics, config=config, now_ms=now_ms)
    for record in out.records:
        group = replay_consumer(group, record)   # the only way the group changes
    answer, deadlines = out.response, out.timers

Kafka's GroupMetadataManager.consumerGroupHeartbeat, in order: check the request; find the
member (a new one on epoch 0; a static member by its instance id); fence a wrong epoch; apply
what the heartbeat changed (subscription, assignor, rack, rebalance timeout); bump the group
epoch when a subscription or the subscribed topics' metadata changed; recompute the target
assignment when the group epoch is ahead of it; reconcile this member towards its target; and
answer its epoch, the heartbeat interval and, when it changed (or the member joined, or its
full heartbeat disagrees), its assignment.

Regular expressions: Kafka matches `subscribed_topic_regex` with RE2/J against each whole
topic name. We use Python's `re.fullmatch`, and refuse what RE2 does not have (lookaround,
backreferences, possessive or atomic groups, conditionals) with INVALID_REGULAR_EXPRESSION, so
a pattern works here only if it would on Kafka. Left different: `\\Z` (RE2 refuses it, Python
reads it as RE2's `\\z`), Unicode classes `\\pL` (Python's re has none: refused here as
invalid) and Python's wider `\\w`/`\\d` (Unicode, where RE2's are ASCII). Internal topics (those
starting with `__`) never match a regex, as Kafka's clients never subscribed them by pattern.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from common.errors import ErrorCode
from groups.assignors import NO_RACKS, PartitionRacks, assign
from groups.consumer_group import (
    JOIN_GROUP_MEMBER_EPOCH,
    KEEP_REBALANCE_DEADLINE,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerMember,
    ConsumerTimers,
    MemberState,
)
from groups.consumer_records import (
    Assignment,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerRecord,
)
from groups.reconcile import reconcile
from groups.group import ClassicGroup
from groups.records import CoordinatorRecord

E = ErrorCode
Topics = Mapping[str, tuple[str, int]]  # topic name -> (topic id, partition count), from the metadata image
MAX_REGEX_LENGTH: Final = 1000  # characters; Kafka bounds nothing, a pattern this long is a mistake
_RE2_UNSUPPORTED: Final = re.compile(r"\(\?(?:[=!]|<[=!]|P=|>|\()|\\[1-9]|[*+?}]\+")


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """kio's ConsumerGroupHeartbeatRequest, with the client's id and host. None: unchanged
    since the last heartbeat (owned: not sent)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: not sent (unchanged)


@dataclass(frozen=True, slots=True)
class HeartbeatOutcome:
    # a classic group's record too, when an empty classic group becomes a consumer group
    records: tuple[ConsumerRecord | CoordinatorRecord, ...]
    response: HeartbeatResponse
    # each member's deadlines after this heartbeat (None: it left, its timers go)
    timers: Mapping[str, ConsumerTimers | None] = field(default_factory=dict)
    reason: str = ""  # why the group changed, for the coordinator's one log line
    # KIP-848's online downgrade: the classic group the records turn this group into, with what
    # only memory holds of it (a rebalance in progress, its members' sessions)
    classic_group: ClassicGroup | None = None


def _fail(error: ErrorCode, message: str, member_id: str | None = None) -> HeartbeatOutcome:
    return HeartbeatOutcome((), HeartbeatResponse(error, message, member_id), {})


def compile_regex(pattern: str) -> re.Pattern[str]:
    """The pattern, or ValueError saying why it is not one RE2/J would compile."""
    if len(pattern) > MAX_REGEX_LENGTH:
        raise ValueError(f"the regular expression is longer than {MAX_REGEX_LENGTH} characters")
    if _RE2_UNSUPPORTED.search(pattern):
        raise ValueError(f"{pattern!r} uses lookaround, a backreference, an atomic group or a possessive quantifier, "
                         "which RE2/J (Kafka's regular expressions) does not have")
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {e}") from None


def subscribed_topics(member: ConsumerMember, topics: Topics) -> frozenset[str]:
    """The topic ids a member reads: its names that exist, and the topics its regex matches."""
    ids = {topics[name][0] for name in member.subscribed_topic_names if name in topics}
    if member.subscribed_topic_regex:
        try:
            pattern = compile_regex(member.subscribed_topic_regex)
        except ValueError:  # refused when it was set; a record from elsewhere reads nothing
            pattern = None
        if pattern is not None:
            ids.update(tid for name, (tid, _) in topics.items()
                       if not name.startswith("__") and pattern.fullmatch(name))
    return frozenset(ids)


def metadata_hash(members: Mapping[str, ConsumerMember], topics: Topics) -> int:
    """A signed 64-bit hash of the subscribed topics' names, ids and partition counts (the
    group epoch moves when it changes: a topic created, deleted or grown)."""
    wanted: set[str] = set()
    for member in members.values():
        wanted |= subscribed_topics(member, topics)
    text = ";".join(f"{name}:{tid}:{count}" for name, (tid, count) in sorted(topics.items()) if tid in wanted)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


def _check(req: HeartbeatRequest, config: ConsumerGroupConfig) -> HeartbeatOutcome | None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, and the assignor and regex."""
    if not req.group_id:
        return _fail(E.INVALID_REQUEST, "GroupId can't be empty.")
    if not req.member_id:
        return _fail(E.INVALID_REQUEST, "MemberId can't be empty.")
    if req.instance_id is not None and not req.instance_id:
        return _fail(E.INVALID_REQUEST, "InstanceId can't be empty.")
    if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and req.instance_id is None:
        return _fail(E.INVALID_REQUEST, "InstanceId can't be null for a static member leaving.")
    if req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        return _fail(E.INVALID_REQUEST, f"MemberEpoch {req.member_epoch} is invalid.")
    if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if req.rebalance_timeout_ms == -1:
            return _fail(E.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or req.owned:
            return _fail(E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            return _fail(E.INVALID_REQUEST, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    if req.server_assignor is not None and req.server_assignor not in config.assignors:
        return _fail(E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported. "
                     f"Supported assignors: {', '.join(config.assignors)}.")
    if req.subscribed_topic_regex:
        try:
            compile_regex(req.subscribed_topic_regex)
        except ValueError as e:
            return _fail(E.INVALID_REGULAR_EXPRESSION, str(e))
    return None


def _find_member(group: ConsumerGroup | None, req: HeartbeatRequest, config: ConsumerGroupConfig
                 ) -> tuple[ConsumerMember | None, ConsumerMember | None, HeartbeatOutcome | None]:
    """(the member as it is, a static member it replaces, or the error)."""
    joining = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH
    if group is None and not joining:
        return None, None, _fail(E.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.", req.member_id)
    member = group.members.get(req.member_id) if group else None
    replaced = None
    if req.instance_id is not None and group is not None:
        holder = group.static_member(req.instance_id)
        if joining and holder is not None and holder.member_id != req.member_id:
            if holder.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                return None, None, _fail(E.UNRELEASED_INSTANCE_ID, f"Static member {holder.member_id} with instance "
                                         f"id {req.instance_id} is not released yet.", req.member_id)
            replaced = holder
        elif not joining and (holder is None or holder.member_id != req.member_id):
            code = E.UNKNOWN_MEMBER_ID if holder is None else E.FENCED_INSTANCE_ID
            return None, None, _fail(code, f"Instance id {req.instance_id} is not member {req.member_id}.",
                                     req.member_id)
    if member is None:
        if not joining:
            return None, None, _fail(E.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group "
                                     f"{req.group_id}.", req.member_id)
        if group is not None and replaced is None and len(group.members) >= config.max_size:
            return None, None, _fail(E.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum "
                                     f"capacity of {config.max_size} members.", req.member_id)
    elif not joining and req.member_epoch not in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
        fenced = _fenced(member, req)
        if fenced is not None:
            return None, None, fenced
    return member, replaced, None


def _fenced(member: ConsumerMember, req: HeartbeatRequest) -> HeartbeatOutcome | None:
    """Kafka's throwIfMemberEpochIsInvalid: an epoch ahead of the member's is fenced; one behind
    is accepted only as its previous epoch with nothing owned beyond its assignment (the
    answer that moved it on was lost)."""
    if req.member_epoch > member.member_epoch or (
            req.member_epoch < member.member_epoch and (
                req.member_epoch != member.previous_member_epoch or req.owned is None
                or not req.owned <= member.assigned)):
        return _fail(E.FENCED_MEMBER_EPOCH, f"The member epoch {req.member_epoch} is not the member's "
                     f"{member.member_epoch}.", req.member_id)
    return None


# ---- the rule -----------------------------------------------------------------------------


def heartbeat(group: ConsumerGroup | None, req: HeartbeatRequest, *, topics: Topics, config: ConsumerGroupConfig,
              now_ms: int, partition_racks: PartitionRacks = NO_RACKS) -> HeartbeatOutcome:
    """One ConsumerGroupHeartbeat: records and the answer (see the module's docstring).
    `partition_racks`: the racks of each partition's replicas, for a rack-aware target."""
    refused = _check(req, config)
    if refused is not None:
        return refused
    member, replaced, refused = _find_member(group, req, config)
    if refused is not None:
        return refused
    if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
        assert group is not None and member is not None
        return leave(group, member, static=req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH)
    current = group or ConsumerGroup(req.group_id)
    old = member or (replace(replaced, member_id=req.member_id) if replaced else ConsumerMember(req.member_id))
    owned = req.owned if member is not None else frozenset()
    records, reconciled, reason = update_and_reconcile(
        current, member, replaced, old, _updated(old, req), owned, topics=topics, config=config,
        partition_racks=partition_racks)
    send = (req.member_epoch == JOIN_GROUP_MEMBER_EPOCH or reconciled.assigned != old.assigned
            or (req.owned is not None and req.owned != reconciled.assigned))
    rebalance_deadline = -1
    if reconciled.state is MemberState.UNREVOKED_PARTITIONS and reconciled.rebalance_timeout_ms > 0:
        still = old.state is MemberState.UNREVOKED_PARTITIONS and old.pending_revocation == reconciled.pending_revocation
        rebalance_deadline = KEEP_REBALANCE_DEADLINE if still else now_ms + reconciled.rebalance_timeout_ms
    timers: dict[str, ConsumerTimers | None] = {
        req.member_id: ConsumerTimers(now_ms + config.session_timeout_ms, rebalance_deadline)}
    if replaced is not None:
        timers[replaced.member_id] = None
    response = HeartbeatResponse(E.NONE, None, req.member_id, reconciled.member_epoch, config.heartbeat_interval_ms,
                                 reconciled.assigned if send else None)
    return HeartbeatOutcome(tuple(records), response, timers, reason)


def update_and_reconcile(current: ConsumerGroup, member: ConsumerMember | None, replaced: ConsumerMember | None,
                         old: ConsumerMember, updated: ConsumerMember, owned: Assignment | None, *, topics: Topics,
                         config: ConsumerGroupConfig, partition_racks: PartitionRacks = NO_RACKS
                         ) -> tuple[list[ConsumerRecord], ConsumerMember, str]:
    """Kafka's three steps shared by ConsumerGroupHeartbeat and a classic member's JoinGroup in
    a consumer group: persist the member (`member` None: it joins; `replaced`: the static
    member it takes over), bump the group epoch when a subscription or the subscribed topics
    changed, recompute the target when the group epoch is ahead of it, and reconcile this
    member towards its target given what it says it owns. Returns (records, the member, why)."""
    records: list[ConsumerRecord] = []
    member_id = updated.member_id
    members = {k: v for k, v in current.members.items() if replaced is None or k != replaced.member_id}
    members[member_id] = updated
    reason = ""
    if replaced is not None:  # the static member's new incarnation takes its place and its assignment
        records += remove_member_records(current.group_id, replaced.member_id)
        reason = f"static member {updated.instance_id} is now member {member_id}"
    if member is None or updated.metadata_value() != old.metadata_value():
        records.append(ConsumerRecord(ConsumerGroupMemberMetadataKey(current.group_id, member_id),
                                      updated.metadata_value()))
    group_epoch, digest = current.group_epoch, metadata_hash(members, topics)
    subscription_changed = member is None and replaced is None or _subscription(updated) != _subscription(old)
    if subscription_changed or digest != current.metadata_hash:
        group_epoch += 1
        records.append(ConsumerRecord(ConsumerGroupMetadataKey(current.group_id),
                                      ConsumerGroupMetadataValue(group_epoch, digest)))
        reason = reason or (f"member {member_id} joined" if member is None else
                            f"member {member_id} changed its subscription" if subscription_changed
                            else "the subscribed topics' metadata changed")
    target, assignment_epoch = dict(current.target), current.assignment_epoch
    if replaced is not None and replaced.member_id in target:
        target[member_id] = target.pop(replaced.member_id)
        records.append(ConsumerRecord(ConsumerGroupTargetAssignmentMemberKey(current.group_id, member_id),
                                      ConsumerGroupTargetAssignmentMemberValue(target[member_id])))
    if group_epoch > assignment_epoch:
        new_target = _target(replace(current, members=members), target, topics, config, partition_racks)
        records += _target_records(current.group_id, target, new_target, group_epoch)
        target, assignment_epoch = new_target, group_epoch
    others = replace(current, members=members).partition_epochs(excluding=member_id)
    reconciled = reconcile(updated, target_epoch=assignment_epoch, target=target.get(member_id, frozenset()),
                           owned=owned, partition_epochs=others)
    if member is None or reconciled.assignment_value() != old.assignment_value():
        records.append(ConsumerRecord(ConsumerGroupCurrentMemberAssignmentKey(current.group_id, member_id),
                                      reconciled.assignment_value()))
    return records, reconciled, reason


def _target(group: ConsumerGroup, target: Mapping[str, Assignment], topics: Topics, config: ConsumerGroupConfig,
            partition_racks: PartitionRacks) -> dict[str, Assignment]:
    """Kafka's TargetAssignmentBuilder: every member's target at the new group epoch, by the
    assignor most members name (sticky to `target`, the previous one)."""
    subscriptions = {m: subscribed_topics(v, topics) for m, v in group.members.items()}
    counts = {tid: count for tid, count in topics.values()}
    return assign(group.preferred_assignor(config.assignors[0]), subscriptions, counts, target,
                  partition_racks=partition_racks, member_racks={m: v.rack_id for m, v in group.members.items()})


def _target_records(group_id: str, before: Mapping[str, Assignment], after: Mapping[str, Assignment],
                    epoch: int) -> list[ConsumerRecord]:
    """The members whose target changed, then the assignment epoch (Kafka's order)."""
    records = [ConsumerRecord(ConsumerGroupTargetAssignmentMemberKey(group_id, m),
                              ConsumerGroupTargetAssignmentMemberValue(after[m]))
               for m in sorted(after) if after[m] != before.get(m)]
    records.append(ConsumerRecord(ConsumerGroupTargetAssignmentMetadataKey(group_id),
                                  ConsumerGroupTargetAssignmentMetadataValue(epoch)))
    return records


def _updated(member: ConsumerMember, req: HeartbeatRequest) -> ConsumerMember:
    """The member with what this heartbeat sets (None and -1 leave a field as it was)."""
    return replace(
        member,
        instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        client_id=req.client_id, client_host=req.client_host,
        subscribed_topic_names=tuple(sorted(req.subscribed_topic_names)) if req.subscribed_topic_names is not None
        else member.subscribed_topic_names,
        # an empty regex clears it (librdkafka sends "" when it switches to names)
        subscribed_topic_regex=(req.subscribed_topic_regex or None) if req.subscribed_topic_regex is not None
        else member.subscribed_topic_regex,
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
        server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor)


def _subscription(member: ConsumerMember) -> tuple[object, ...]:
    return member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor


def remove_member_records(group_id: str, member_id: str) -> list[ConsumerRecord]:
    """Kafka's order: the current assignment, the target, then the member itself."""
    return [ConsumerRecord(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
            ConsumerRecord(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
            ConsumerRecord(ConsumerGroupMemberMetadataKey(group_id, member_id), None)]


def consumer_group_tombstones(group_id: str) -> tuple[ConsumerRecord, ...]:
    """An empty group deleted (Kafka's ConsumerGroup.createGroupTombstoneRecords): its target
    assignment metadata, then the group itself."""
    return (ConsumerRecord(ConsumerGroupTargetAssignmentMetadataKey(group_id), None),
            ConsumerRecord(ConsumerGroupMetadataKey(group_id), None))


def leave(group: ConsumerGroup, member: ConsumerMember, *, static: bool) -> HeartbeatOutcome:
    """Epoch -1: the member goes and the group epoch moves (its partitions are reassigned at
    the next heartbeat of another member). Epoch -2: a static member steps out and keeps its
    place and assignment (epoch -2) until it comes back or its session expires."""
    if static:
        left = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        record = ConsumerRecord(ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member.member_id),
                                left.assignment_value())
        return HeartbeatOutcome((record,), HeartbeatResponse(E.NONE, None, member.member_id,
                                                             LEAVE_GROUP_STATIC_MEMBER_EPOCH),
                                {}, f"static member {member.instance_id} ({member.member_id}) left temporarily")
    return HeartbeatOutcome(fence_records(group, member.member_id),
                            HeartbeatResponse(E.NONE, None, member.member_id, LEAVE_GROUP_MEMBER_EPOCH),
                            {member.member_id: None}, f"member {member.member_id} left")


def fence_records(group: ConsumerGroup, member_id: str) -> tuple[ConsumerRecord, ...]:
    """A member removed (it left, or its session or rebalance timeout expired): its records
    go and the group epoch moves, so the others' target is recomputed without it."""
    return (*remove_member_records(group.group_id, member_id),
            ConsumerRecord(ConsumerGroupMetadataKey(group.group_id),
                           ConsumerGroupMetadataValue(group.group_epoch + 1, group.metadata_hash)))


def expire(group: ConsumerGroup, timers: Mapping[str, ConsumerTimers], now_ms: int) -> HeartbeatOutcome:
    """The members whose session ended, or whose rebalance timeout passed while they still had
    partitions to revoke, are fenced (Kafka's session and rebalance timers)."""
    records: list[ConsumerRecord] = []
    gone: dict[str, ConsumerTimers | None] = {}
    reasons = []
    for member_id in sorted(group.members):
        t = timers.get(member_id)
        if t is None:
            continue
        if t.session_deadline_ms <= now_ms or 0 <= t.rebalance_deadline_ms <= now_ms:
            why = "session" if t.session_deadline_ms <= now_ms else "rebalance timeout"
            records += fence_records(replace(group, group_epoch=group.group_epoch + len(gone)), member_id)
            gone[member_id] = None
            reasons.append(f"member {member_id} fenced: its {why} expired")
    return HeartbeatOutcome(tuple(records), HeartbeatResponse(E.NONE), gone, "; ".join(reasons))
