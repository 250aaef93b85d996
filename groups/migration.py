"""KIP-848's online migration: a classic group with members becomes a consumer group, and back.

    refused = upgrade_refusal(classic, config)                  # None: the upgrade may go
    records = upgrade_records(classic, topics)                  # tombstone + consumer group records
    group = replay_all(None, records)                           # the consumer group, by replay only

    refused = downgrade_refusal(group, leaving, policy=..., classic_max_size=...)
    down = downgrade(group, leaving, topics=topics, now_ms=now_ms, config=classic_config)

Kafka's rules (GroupMetadataManager.validateOnlineUpgrade / convertToConsumerGroup,
ConsumerGroup.fromClassicGroup; validateOnlineDowngradeWithFencedMember /
convertToClassicGroup, ClassicGroup.fromConsumerGroup):

- **Upgrade**, when a ConsumerGroupHeartbeat joins a classic group with members: refused
  (GROUP_ID_NOT_FOUND "not a consumer group") unless `group.consumer.migration.policy` allows
  upgrades, every member speaks the `consumer` protocol type, and the group is no larger than
  `group.consumer.max.size`. The classic group's GroupMetadata is tombstoned and the consumer
  group's records written: each member at the classic generation as member epoch, its
  subscription read from its JoinGroup metadata, its assignment from the last SyncGroup (both
  ConsumerProtocol bytes), and that assignment as its target; group and assignment epochs are
  the generation. The joining member then bumps the group epoch as any new member does, and the
  classic members learn of it as REBALANCE_IN_PROGRESS on their next Heartbeat.
- **Downgrade**, when the last consumer-protocol member leaves (or is fenced) and only classic
  members remain: refused (the group stays a consumer group) unless the policy allows
  downgrades and the members left fit `group.max.size`. The consumer group's records are
  tombstoned and one GroupMetadata written (generation = the group epoch, each member's
  JoinGroup protocols, its target assignment), and the classic group starts a rebalance.
  A classic static member replacing the last consumer-protocol member (same
  `group.instance.id`, a JoinGroup) downgrades it too (validateOnlineDowngradeWithReplacedMemberId):
  the newcomer takes the replaced member's place and assignment, and the classic group stays
  Stable unless the join moved the group epoch (its subscription differs).
- **Empty groups** change type without any check of the policy, as Kafka's
  maybeDeleteEmptyClassicGroup / maybeDeleteEmptyConsumerGroup: an empty classic group is
  tombstoned when a ConsumerGroupHeartbeat joins, an empty consumer group when a JoinGroup does.

Offsets are keyed by group id alone, so both directions keep them untouched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from common.errors import ErrorCode
from groups.assignors import NO_RACKS, PartitionRacks
from groups.consumer_group import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerMember,
    ConsumerTimers,
    MemberState,
    MigrationPolicy,
    replay_consumer,
)
from groups.consumer_heartbeat import (
    HeartbeatOutcome,
    HeartbeatRequest,
    HeartbeatResponse,
    Topics,
    consumer_group_tombstones,
    expire,
    heartbeat,
    metadata_hash,
    remove_member_records,
)
from groups.consumer_records import (
    Assignment,
    ClassicMemberMetadata,
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
from groups.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupConfig, Member
from groups.join import prepare_rebalance
from groups.migration_protocol import (
    MalformedConsumerProtocol,
    TopicPartitionName,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from groups.records import CoordinatorRecord, GroupMetadataKey
from groups.state import GroupState

E = ErrorCode
MigrationRecord = ConsumerRecord | CoordinatorRecord


@dataclass(frozen=True, slots=True)
class Downgrade:
    """A consumer group turned classic: the group with its rebalance begun (memory), and the
    records that make it so (the consumer group's tombstones, then its GroupMetadata)."""

    classic: ClassicGroup
    records: tuple[MigrationRecord, ...]
    reason: str


# ---- classic -> consumer ------------------------------------------------------------------


def upgrade_refusal(classic: ClassicGroup, config: ConsumerGroupConfig) -> str | None:
    """Why `classic` may not become a consumer group now (Kafka's validateOnlineUpgrade), None
    when it may."""
    if not config.migration_policy.upgrade_enabled:
        return f"online upgrade is disabled (group.consumer.migration.policy={config.migration_policy.value})"
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE or any(
            m.protocol_type != CONSUMER_PROTOCOL_TYPE for m in classic.members.values()):
        return f"the group does not use the consumer embedded protocol (protocol type {classic.protocol_type!r})"
    if len(classic.members) > config.max_size:
        return (f"its {len(classic.members)} members exceed the consumer group maximum size "
                f"(group.consumer.max.size={config.max_size})")
    return None


def topic_ids(partitions: Iterable[TopicPartitionName], topics: Topics) -> Assignment:
    """Named partitions as (topic id, partition); a topic the metadata lacks is dropped."""
    return frozenset((topics[t][0], p) for t, p in partitions if t in topics)


def topic_names(assignment: Iterable[tuple[str, int]], topics: Topics) -> list[TopicPartitionName]:
    """(topic id, partition) as named partitions; a deleted topic is dropped."""
    names = {tid: name for name, (tid, _) in topics.items()}
    return sorted((names[t], p) for t, p in assignment if t in names)


def _consumer_member(classic: ClassicGroup, member: Member, topics: Topics) -> ConsumerMember:
    """Kafka's ConsumerGroup.fromClassicGroup for one member (MalformedConsumerProtocol when its
    bytes are not the consumer protocol's)."""
    subscription = decode_subscription(member.metadata_for(classic.protocol_name))
    epoch = classic.generation_id
    return ConsumerMember(
        member.member_id, instance_id=member.group_instance_id, rack_id=subscription.rack_id,
        client_id=member.client_id, client_host=member.client_host,
        subscribed_topic_names=tuple(sorted(subscription.topics)), rebalance_timeout_ms=member.rebalance_timeout_ms,
        member_epoch=epoch, previous_member_epoch=epoch, state=MemberState.STABLE,
        assigned=topic_ids(decode_assignment(member.assignment), topics),
        classic=ClassicMemberMetadata(member.session_timeout_ms, member.protocols))


def upgrade_records(classic: ClassicGroup, topics: Topics) -> tuple[MigrationRecord, ...]:
    """The classic group's tombstone, then the consumer group's records in Kafka's order
    (createConsumerGroupRecords): members, group epoch, targets, assignment epoch, current
    assignments. MalformedConsumerProtocol when a member's metadata or assignment is not the
    consumer protocol's (Kafka refuses the upgrade then)."""
    group_id, epoch = classic.group_id, classic.generation_id
    members = {m.member_id: _consumer_member(classic, m, topics) for m in classic.members.values()}
    order = sorted(members)
    records: list[MigrationRecord] = [CoordinatorRecord(GroupMetadataKey(group_id), None)]
    records += [ConsumerRecord(ConsumerGroupMemberMetadataKey(group_id, m), members[m].metadata_value())
                for m in order]
    records.append(ConsumerRecord(ConsumerGroupMetadataKey(group_id),
                                  ConsumerGroupMetadataValue(epoch, metadata_hash(members, topics))))
    records += [ConsumerRecord(ConsumerGroupTargetAssignmentMemberKey(group_id, m),
                               ConsumerGroupTargetAssignmentMemberValue(members[m].assigned)) for m in order]
    records.append(ConsumerRecord(ConsumerGroupTargetAssignmentMetadataKey(group_id),
                                  ConsumerGroupTargetAssignmentMetadataValue(epoch)))
    records += [ConsumerRecord(ConsumerGroupCurrentMemberAssignmentKey(group_id, m), members[m].assignment_value())
                for m in order]
    return tuple(records)


def replay_all(group: ConsumerGroup | None, records: Iterable[MigrationRecord]) -> ConsumerGroup | None:
    """The consumer group after `records` (a classic group's records are not its own)."""
    for record in records:
        if isinstance(record, ConsumerRecord):
            group = replay_consumer(group, record)
    return group


def upgrade(classic: ClassicGroup, config: ConsumerGroupConfig, topics: Topics
            ) -> tuple[ConsumerGroup, tuple[MigrationRecord, ...]] | str:
    """The consumer group `classic` becomes and its records, or why it may not."""
    refused = upgrade_refusal(classic, config)
    if refused is not None:
        return refused
    try:
        records = upgrade_records(classic, topics)
    except MalformedConsumerProtocol as e:
        return f"the embedded consumer protocol is malformed: {e}"
    group = replay_all(None, records)
    assert group is not None  # the records hold the group's epoch record
    return group, records


# ---- consumer -> classic ------------------------------------------------------------------


def downgrade_refusal(group: ConsumerGroup, leaving: frozenset[str], *, policy: MigrationPolicy,
                      classic_max_size: int) -> str | None:
    """Why `group` does not become classic when `leaving` go (Kafka's
    validateOnlineDowngradeWithFencedMember); None when it does. A group that keeps a
    consumer-protocol member, or keeps nobody, is simply not one to downgrade."""
    if not any(m in group.members and not group.members[m].uses_classic_protocol for m in leaving):
        return "no consumer-protocol member leaves"
    staying = [m for k, m in group.members.items() if k not in leaving]
    if not staying:
        return "no member stays"
    if not all(m.uses_classic_protocol for m in staying):
        return "a consumer-protocol member stays"
    if not policy.downgrade_enabled:
        return f"online downgrade is disabled (group.consumer.migration.policy={policy.value})"
    if len(staying) > classic_max_size:
        return f"its {len(staying)} members exceed the classic group maximum size (group.max.size={classic_max_size})"
    return None


def replacement_downgrade_refusal(group: ConsumerGroup, replaced: ConsumerMember, *, policy: MigrationPolicy,
                                  classic_max_size: int) -> str | None:
    """Why a classic static member replacing `replaced` does not make `group` classic (Kafka's
    validateOnlineDowngradeWithReplacedMemberId); None when it does. The group keeps its size:
    the newcomer takes the replaced member's place."""
    if replaced.uses_classic_protocol or not group.all_classic_except(replaced.member_id):
        return "a consumer-protocol member stays"
    if not policy.downgrade_enabled:
        return f"online downgrade is disabled (group.consumer.migration.policy={policy.value})"
    if len(group.members) > classic_max_size:
        return (f"its {len(group.members)} members exceed the classic group maximum size "
                f"(group.max.size={classic_max_size})")
    return None


def _classic_member(member: ConsumerMember, target: Assignment, topics: Topics, now_ms: int) -> Member:
    """Kafka's ClassicGroup.fromConsumerGroup for one member: its JoinGroup protocols and
    session, its TARGET assignment (Kafka serializes consumerGroup.targetAssignment(), not what
    the member holds yet) at its subscription's version."""
    classic = member.classic
    assert classic is not None
    try:
        version = decode_subscription(classic.supported_protocols[0][1]).version if classic.supported_protocols else 0
    except MalformedConsumerProtocol:
        version = 0
    return Member(member.member_id, member.instance_id, member.client_id, member.client_host,
                  member.rebalance_timeout_ms, classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE,
                  classic.supported_protocols, encode_assignment(topic_names(target, topics), version),
                  session_deadline_ms=now_ms + classic.session_timeout_ms)


def downgrade(group: ConsumerGroup, leaving: frozenset[str], *, topics: Topics, now_ms: int,
              config: GroupConfig, rebalance: bool = True, reason: str = "") -> Downgrade:
    """The classic group `group` becomes once `leaving` go (check `downgrade_refusal` first):
    Stable at generation = the group epoch, then (`rebalance`) a rebalance, as Kafka's
    convertToClassicGroup. Each member's assignment is its target, as Kafka writes it."""
    records: list[MigrationRecord] = []
    for member_id in sorted(group.members):
        records += remove_member_records(group.group_id, member_id)
    records += consumer_group_tombstones(group.group_id)
    members = {m: _classic_member(group.members[m], group.target.get(m, frozenset()), topics, now_ms)
               for m in sorted(group.members) if m not in leaving}
    classic = ClassicGroup(group.group_id, GroupState.STABLE, now_ms, group.group_epoch, CONSUMER_PROTOCOL_TYPE,
                           None, next(iter(members), None), members)
    classic = replace(classic, protocol_name=classic.select_protocol())
    records.append(CoordinatorRecord(GroupMetadataKey(group.group_id), classic.to_record_value()))
    reason = reason or f"consumer group downgraded to a classic group ({', '.join(sorted(leaving))} left)"
    if not rebalance:
        return Downgrade(classic, tuple(records), reason)
    rebalancing = prepare_rebalance(classic, now_ms, config, reason)
    assert rebalancing.group is not None
    return Downgrade(rebalancing.group, tuple(records), reason)



def maybe_downgrade(group: ConsumerGroup, leaving: frozenset[str], outcome: HeartbeatOutcome, *,
                    topics: Topics, now_ms: int, policy: MigrationPolicy, classic_config: GroupConfig
                    ) -> HeartbeatOutcome:
    """`outcome` (members `leaving` left or were fenced) turned into a downgrade when Kafka
    would make one; otherwise `outcome` as it is."""
    if not leaving or downgrade_refusal(group, leaving, policy=policy, classic_max_size=classic_config.max_size):
        return outcome
    down = downgrade(group, leaving, topics=topics, now_ms=now_ms, config=classic_config)
    return replace(outcome, records=down.records, timers={m: None for m in sorted(group.members)},
                   reason=f"{outcome.reason}; {down.reason}" if outcome.reason else down.reason,
                   classic_group=down.classic)


def migrating_heartbeat(classic: ClassicGroup | None, group: ConsumerGroup | None, req: HeartbeatRequest, *,
                        topics: Topics, config: ConsumerGroupConfig, classic_config: GroupConfig, now_ms: int,
                        partition_racks: PartitionRacks = NO_RACKS) -> HeartbeatOutcome:
    """ConsumerGroupHeartbeat on a group id that may name a classic group (Kafka's
    getOrMaybeCreateConsumerGroup, then consumerGroupHeartbeat, then the downgrade check of
    consumerGroupLeave). An empty classic group is replaced by the consumer group; one with
    members is upgraded when a member joins (epoch 0) and the upgrade is allowed, and
    otherwise answers GROUP_ID_NOT_FOUND, as Kafka's does."""
    converted: tuple[MigrationRecord, ...] = ()
    reason = ""
    if classic is not None and classic.members:
        upgraded = upgrade(classic, config, topics) if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH \
            else "only a joining member (epoch 0) upgrades a classic group"
        if isinstance(upgraded, str):
            return HeartbeatOutcome((), HeartbeatResponse(
                E.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group: {upgraded}.", req.member_id))
        group, converted = upgraded
        reason = (f"classic group (generation {classic.generation_id}, {len(classic.members)} member(s)) "
                  f"upgraded to a consumer group")
    elif classic is not None:
        # An empty classic group (every member gone) becomes a consumer group: its record goes
        # first, its offsets stay. Kafka's maybeDeleteEmptyClassicGroup does so whatever the
        # migration policy says: there is no member to migrate.
        converted = (CoordinatorRecord(GroupMetadataKey(req.group_id), None),)
        reason = "the empty classic group is now a consumer group"
    out = heartbeat(group, req, topics=topics, config=config, now_ms=now_ms, partition_racks=partition_racks)
    if out.response.error is not E.NONE:
        return out
    if group is not None and req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
        out = maybe_downgrade(group, frozenset({req.member_id}), out, topics=topics, now_ms=now_ms,
                              policy=config.migration_policy, classic_config=classic_config)
    if not converted or not out.records:
        return out
    return replace(out, records=converted + out.records,
                   reason=f"{reason}; {out.reason}" if out.reason else reason)


def expire_members(group: ConsumerGroup, timers: Mapping[str, ConsumerTimers], now_ms: int, *, topics: Topics,
                   policy: MigrationPolicy, classic_config: GroupConfig) -> HeartbeatOutcome:
    """The session/rebalance timers' rule: those past their deadline are fenced, and when the
    last consumer-protocol member goes that way the group becomes classic (Kafka's
    consumerGroupFenceMemberOperation)."""
    out = expire(group, timers, now_ms)
    gone = frozenset(m for m, t in out.timers.items() if t is None)
    return maybe_downgrade(group, gone, out, topics=topics, now_ms=now_ms, policy=policy,
                           classic_config=classic_config)
