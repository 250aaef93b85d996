"""Classic members inside a consumer group (KIP-848's online migration), as rules.

    out = classic_join(group, join_request, new_member_id=..., topics=..., config=..., ...)
    out = classic_sync(group, sync_request, topics=topics, now_ms=now_ms)
    out = classic_heartbeat(group, member_id, instance_id, generation_id, now_ms=..., timer=...)
    out = classic_leave(group, leaving, topics=topics)

A member that still speaks JoinGroup/SyncGroup/Heartbeat/LeaveGroup while the group is a
consumer group (Kafka's classicGroupJoinToConsumerGroup, classicGroupSyncToConsumerGroup,
classicGroupHeartbeatToConsumerGroup, classicGroupLeaveToConsumerGroup):

- JoinGroup is the member's heartbeat with a subscription: the subscription and the owned
  partitions are read from its first protocol's ConsumerProtocolSubscription, the member is
  updated as a ConsumerGroupHeartbeat would update it (group epoch, target, reconciliation) and
  the answer comes at once: generation = its member epoch, no leader (it never assigns).
  Bytes that are not a ConsumerProtocolSubscription answer UNKNOWN_SERVER_ERROR, as Kafka's
  (its deserializeSubscription throws IllegalStateException, which the coordinator service
  answers so). A static member that replaces the last consumer-protocol member downgrades
  the group (groups.migration.replacement_downgrade_refusal).
- SyncGroup gives it its current assignment (what reconciliation let it have), serialized as a
  ConsumerProtocolAssignment; REBALANCE_IN_PROGRESS when the group epoch moved meanwhile.
- Heartbeat answers REBALANCE_IN_PROGRESS when it must rejoin to move on: the group epoch is
  ahead of its member epoch, it has partitions to revoke, or partitions it waits for are free.
- Its session is its JoinGroup's session timeout; after a JoinGroup it must sync within its
  rebalance timeout, and after a REBALANCE_IN_PROGRESS rejoin within it (Kafka's sync and join
  timeouts), or it is fenced.

Each rule returns records and the answer; the runtime replays the records (the only way the
group changes) and keeps `timers` in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from common.errors import ErrorCode
from groups.assignors import NO_RACKS, PartitionRacks
from groups.consumer_group import ConsumerGroup, ConsumerGroupConfig, ConsumerMember, ConsumerTimers, MemberState
from groups.consumer_heartbeat import Topics, metadata_hash, remove_member_records, update_and_reconcile
from groups.consumer_records import (
    ClassicMemberMetadata,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerRecord,
)
from groups.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupConfig
from groups.join import JoinRequest, SyncRequest
from groups.membership import LeaveResult, LeavingMember
from groups.migration import downgrade, replacement_downgrade_refusal, replay_all, topic_ids, topic_names
from groups.migration_protocol import MalformedConsumerProtocol, decode_subscription, encode_assignment
from groups.outcome import JoinResult, SyncResult
from groups.records import CoordinatorRecord

E = ErrorCode
NO_TIMER = ConsumerTimers(-1)


@dataclass(frozen=True, slots=True)
class ClassicMemberOutcome:
    """What a classic member's request did to a consumer group: records, its answer (a
    JoinResult, SyncResult, Heartbeat's ErrorCode or a LeaveResult) and members' deadlines
    (None: the member's go)."""

    records: tuple[ConsumerRecord | CoordinatorRecord, ...]
    response: JoinResult | SyncResult | ErrorCode | LeaveResult
    timers: Mapping[str, ConsumerTimers | None] = field(default_factory=dict)
    reason: str = ""
    classic_group: ClassicGroup | None = None  # set when a static member's JoinGroup downgraded the group


def _member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember | ErrorCode:
    """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
    if instance_id is not None:
        holder = group.static_member(instance_id)
        if holder is None:
            return E.UNKNOWN_MEMBER_ID
        if holder.member_id != member_id:
            return E.FENCED_INSTANCE_ID
    member = group.members.get(member_id)
    if member is None or not member.uses_classic_protocol:
        return E.UNKNOWN_MEMBER_ID
    return member


def _supports(group: ConsumerGroup, member_id: str, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]
              ) -> bool:
    """Kafka's supportsClassicProtocols: the consumer protocol type, and a protocol every other
    classic member supports too."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
        return False
    others = [m.classic for k, m in group.members.items() if k != member_id and m.classic is not None]
    names = {name for name, _ in protocols}
    for classic in others:
        names &= {name for name, _ in classic.supported_protocols}
    return bool(names)


def _protocol_name(member: ConsumerMember) -> str:
    assert member.classic is not None and member.classic.supported_protocols
    return member.classic.supported_protocols[0][0]


def classic_join(group: ConsumerGroup, req: JoinRequest, *, new_member_id: str, topics: Topics,
                 config: ConsumerGroupConfig, classic_config: GroupConfig, now_ms: int,
                 partition_racks: PartitionRacks = NO_RACKS) -> ClassicMemberOutcome:
    """A JoinGroup to a consumer group with members (see the module's docstring)."""
    def fail(error: ErrorCode, member_id: str = req.member_id) -> ClassicMemberOutcome:
        return ClassicMemberOutcome((), JoinResult(error, member_id=member_id))

    if not classic_config.min_session_timeout_ms <= req.session_timeout_ms <= classic_config.max_session_timeout_ms:
        return fail(E.INVALID_SESSION_TIMEOUT)
    member_id = req.member_id or new_member_id
    member = group.members.get(member_id)
    replaced = None
    if req.group_instance_id is not None:
        holder = group.static_member(req.group_instance_id)
        if holder is not None and holder.member_id != member_id:
            if req.member_id:
                return fail(E.FENCED_INSTANCE_ID)
            replaced = holder  # a static member back with a new id takes over its place
    if member is None and replaced is None and len(group.members) >= config.max_size:
        return fail(E.GROUP_MAX_SIZE_REACHED)
    if not _supports(group, member_id, req.protocol_type, req.protocols):
        return fail(E.INCONSISTENT_GROUP_PROTOCOL)
    if not req.member_id and req.group_instance_id is None and req.require_known_member_id:
        return ClassicMemberOutcome((), JoinResult(E.MEMBER_ID_REQUIRED, member_id=member_id))
    try:
        subscription = decode_subscription(req.protocols[0][1])
    except MalformedConsumerProtocol:  # Kafka's IllegalStateException: an unexpected error to the client
        return fail(E.UNKNOWN_SERVER_ERROR)
    old = member or (replace(replaced, member_id=member_id, member_epoch=0, previous_member_epoch=0)
                     if replaced else ConsumerMember(member_id))
    updated = replace(
        old, instance_id=req.group_instance_id if req.group_instance_id is not None else old.instance_id,
        rack_id=subscription.rack_id if subscription.rack_id is not None else old.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms, subscribed_topic_names=tuple(sorted(subscription.topics)),
        subscribed_topic_regex=None, client_id=req.client_id, client_host=req.client_host,
        classic=ClassicMemberMetadata(req.session_timeout_ms, req.protocols))
    records, reconciled, reason = update_and_reconcile(
        group, member, replaced, old, updated, topic_ids(subscription.owned, topics), topics=topics, config=config,
        partition_racks=partition_racks)
    timers: dict[str, ConsumerTimers | None] = {
        # its session, and the sync timeout: a SyncGroup must follow within the rebalance timeout
        member_id: ConsumerTimers(now_ms + req.session_timeout_ms, now_ms + req.rebalance_timeout_ms)}
    if replaced is not None:
        timers[replaced.member_id] = None
    answer = JoinResult(E.NONE, reconciled.member_epoch, CONSUMER_PROTOCOL_TYPE, req.protocols[0][0], "", member_id)
    if reason:
        reason = f"{reason} (classic protocol)"
    if replaced is not None and replacement_downgrade_refusal(
            group, replaced, policy=config.migration_policy, classic_max_size=classic_config.max_size) is None:
        return _replacement_downgrade(group, records, answer, reason, topics=topics, now_ms=now_ms,
                                      config=classic_config)
    return ClassicMemberOutcome(tuple(records), answer, timers, reason)


def _replacement_downgrade(group: ConsumerGroup, records: list[ConsumerRecord], answer: JoinResult, reason: str, *,
                           topics: Topics, now_ms: int, config: GroupConfig) -> ClassicMemberOutcome:
    """Kafka's convertToClassicGroup after a static replacement: the group with the newcomer in
    the replaced member's place (and target) becomes classic, Stable when the join left the
    group epoch alone (the newcomer syncs its assignment at once), rebalancing when it moved it
    (the newcomer's subscription differs)."""
    joined = replay_all(group, records)
    assert joined is not None  # the join's records keep the group
    why = f"{reason}; consumer group downgraded to a classic group (its last consumer-protocol member replaced)"
    down = downgrade(joined, frozenset(), topics=topics, now_ms=now_ms, config=config,
                     rebalance=joined.group_epoch != group.group_epoch, reason=why)
    gone: dict[str, ConsumerTimers | None] = {m: None for m in sorted(set(group.members) | set(joined.members))}
    return ClassicMemberOutcome(tuple(records) + down.records, answer, gone, why, down.classic)


def classic_sync(group: ConsumerGroup, req: SyncRequest, *, topics: Topics, now_ms: int,
                 timer: ConsumerTimers | None = None) -> ClassicMemberOutcome:
    """A SyncGroup of a classic member of a consumer group: its current assignment."""
    member = _member(group, req.member_id, req.group_instance_id)
    if isinstance(member, ErrorCode):
        return ClassicMemberOutcome((), SyncResult(member))
    if req.generation_id != member.member_epoch:
        return ClassicMemberOutcome((), SyncResult(E.ILLEGAL_GENERATION))
    name = _protocol_name(member)
    if (req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            req.protocol_name is not None and req.protocol_name != name):
        return ClassicMemberOutcome((), SyncResult(E.INCONSISTENT_GROUP_PROTOCOL))
    assert member.classic is not None
    session = now_ms + member.classic.session_timeout_ms
    if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
        return ClassicMemberOutcome((), SyncResult(E.REBALANCE_IN_PROGRESS),
                                    {member.member_id: _join_timeout(member, session, now_ms, timer)})
    try:
        version = decode_subscription(member.classic.supported_protocols[0][1]).version
    except MalformedConsumerProtocol:
        version = 0
    assignment = encode_assignment(topic_names(member.assigned, topics), version)
    return ClassicMemberOutcome((), SyncResult(E.NONE, assignment, CONSUMER_PROTOCOL_TYPE, name),
                                {member.member_id: ConsumerTimers(session)})


def _join_timeout(member: ConsumerMember, session_deadline_ms: int, now_ms: int,
                  timer: ConsumerTimers | None) -> ConsumerTimers:
    """Kafka's scheduleConsumerGroupJoinTimeoutIfAbsent: the member must rejoin within its
    rebalance timeout of the first answer telling it to (a later one keeps that deadline)."""
    before = -1 if timer is None else timer.rebalance_deadline_ms
    return ConsumerTimers(session_deadline_ms, before if before >= 0 else now_ms + member.rebalance_timeout_ms)


def must_rejoin(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Kafka's three reasons for a classic member to rejoin: the group epoch moved past its
    epoch; it has partitions to revoke; partitions it waits for are free now."""
    if member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS:
        return True
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        owned_elsewhere = group.partition_epochs(excluding=member.member_id)
        waiting = group.target.get(member.member_id, frozenset()) - member.assigned
        return not any(tp in owned_elsewhere for tp in waiting)
    return False


def classic_heartbeat(group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int, *,
                      now_ms: int, timer: ConsumerTimers | None = None) -> ClassicMemberOutcome:
    """A Heartbeat of a classic member of a consumer group: its session goes on; the answer
    tells it to rejoin (REBALANCE_IN_PROGRESS) when reconciliation needs it to."""
    member = _member(group, member_id, instance_id)
    if isinstance(member, ErrorCode):
        return ClassicMemberOutcome((), member)
    if generation_id != member.member_epoch:
        return ClassicMemberOutcome((), E.ILLEGAL_GENERATION)
    assert member.classic is not None
    session = now_ms + member.classic.session_timeout_ms
    if must_rejoin(group, member):
        return ClassicMemberOutcome((), E.REBALANCE_IN_PROGRESS,
                                    {member_id: _join_timeout(member, session, now_ms, timer)})
    return ClassicMemberOutcome((), E.NONE, {member_id: replace(timer or NO_TIMER, session_deadline_ms=session)})


def classic_leave(group: ConsumerGroup, leaving: tuple[LeavingMember, ...], *, topics: Topics
                  ) -> ClassicMemberOutcome:
    """A LeaveGroup to a consumer group: each classic member named goes (by member id, or by
    instance id for a static one), and the group epoch moves once for all of them."""
    results: list[tuple[LeavingMember, ErrorCode]] = []
    gone: list[str] = []
    for m in leaving:
        if m.group_instance_id is not None:
            holder = group.static_member(m.group_instance_id)
            target = m.member_id or (holder.member_id if holder else "")
            found = _member(group, target, m.group_instance_id)
        else:
            found = _member(group, m.member_id, None)
        if isinstance(found, ErrorCode):
            results.append((m, found))
            continue
        if found.member_id not in gone:
            gone.append(found.member_id)
        results.append((m, E.NONE))
    records: list[ConsumerRecord | CoordinatorRecord] = []
    for member_id in gone:
        records += remove_member_records(group.group_id, member_id)
    if gone:
        staying = {k: v for k, v in group.members.items() if k not in gone}
        records.append(ConsumerRecord(ConsumerGroupMetadataKey(group.group_id), ConsumerGroupMetadataValue(
            group.group_epoch + 1, metadata_hash(staying, topics))))
    reason = f"classic member(s) {', '.join(gone)} left" if gone else ""
    return ClassicMemberOutcome(tuple(records), LeaveResult(E.NONE, tuple(results)),
                                {m: None for m in gone}, reason)
