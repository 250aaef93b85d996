"""A KIP-848 consumer group, rebuilt by replaying its `__consumer_offsets` records.

    group = None
    for record in records_of_the_group:
        group = replay_consumer(group, record)       # None: no such group (yet, or any more)

Three epochs (Kafka's ConsumerGroup): the group epoch moves when a member joins, leaves or
changes its subscription, or the subscribed topics' metadata changes; the assignment epoch is
the group epoch the target assignment was computed at; each member's epoch is the assignment
epoch it has reconciled to. Kafka's states follow from them (ConsumerGroup.maybeUpdateGroupState):
Empty without members, Assigning while the group epoch is ahead of the assignment epoch,
Reconciling while a member's epoch is behind it, Stable otherwise.

The session and rebalance deadlines are not in the records (Kafka keeps them in timers):
`ConsumerTimers` holds them beside the group, set by the heartbeat rule's result.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from common.units import SECOND_MS
from groups.consumer_records import (
    NO_PARTITIONS,
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerRecord,
    TopicIdPartition,
)

NO_PREVIOUS_EPOCH: Final = -1
LEAVE_GROUP_MEMBER_EPOCH: Final = -1  # ConsumerGroupHeartbeat: the member leaves
LEAVE_GROUP_STATIC_MEMBER_EPOCH: Final = -2  # a static member leaves and will come back
JOIN_GROUP_MEMBER_EPOCH: Final = 0
FREE: Final = -1  # the epoch of a partition no member owns


class MemberState(enum.IntEnum):
    """Kafka's MemberState, by the byte its CurrentMemberAssignment record holds."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1  # must revoke some partitions before it moves to the next epoch
    UNRELEASED_PARTITIONS = 2  # at the assignment epoch, waiting for partitions others still own


class ConsumerGroupState(enum.Enum):
    """Kafka's ConsumerGroupState names, as ConsumerGroupDescribe and ListGroups show them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MigrationPolicy(enum.Enum):
    """Kafka's ConsumerGroupMigrationPolicy (group.consumer.migration.policy): which online
    conversions between a classic and a consumer group the coordinator makes."""

    BIDIRECTIONAL = "bidirectional"  # Kafka 4's default
    UPGRADE = "upgrade"  # classic -> consumer only
    DOWNGRADE = "downgrade"  # consumer -> classic only
    DISABLED = "disabled"

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)

    @classmethod
    def parse(cls, value: str) -> MigrationPolicy:
        """Case-insensitive, as Kafka's ConsumerGroupMigrationPolicy.parse; ValueError names the choices."""
        for policy in cls:
            if policy.value == value.strip().lower():
                return policy
        raise ValueError(f"group.consumer.migration.policy must be one of "
                         f"{', '.join(p.value for p in cls)}, got {value!r}")


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """The broker's group.consumer.* settings, Kafka's defaults. A member's heartbeat interval
    and session timeout are the broker's (KIP-848 moved them from the client to the server)."""

    session_timeout_ms: int = 45 * SECOND_MS  # group.consumer.session.timeout.ms
    min_session_timeout_ms: int = 45 * SECOND_MS  # group.consumer.min.session.timeout.ms
    max_session_timeout_ms: int = 60 * SECOND_MS  # group.consumer.max.session.timeout.ms
    heartbeat_interval_ms: int = 5 * SECOND_MS  # group.consumer.heartbeat.interval.ms
    min_heartbeat_interval_ms: int = 5 * SECOND_MS  # group.consumer.min.heartbeat.interval.ms
    max_heartbeat_interval_ms: int = 15 * SECOND_MS  # group.consumer.max.heartbeat.interval.ms
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors: the first is the default
    max_size: int = 2**31 - 1  # group.consumer.max.size
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL  # group.consumer.migration.policy

    def __post_init__(self) -> None:
        """Kafka's GroupCoordinatorConfig checks, at startup: a bad setting names itself."""
        if not self.min_session_timeout_ms <= self.session_timeout_ms <= self.max_session_timeout_ms:
            raise ValueError(f"group.consumer.session.timeout.ms must be within group.consumer.min.session.timeout.ms "
                             f"({self.min_session_timeout_ms}) and group.consumer.max.session.timeout.ms "
                             f"({self.max_session_timeout_ms}), got {self.session_timeout_ms}")
        if not self.min_heartbeat_interval_ms <= self.heartbeat_interval_ms <= self.max_heartbeat_interval_ms:
            raise ValueError(f"group.consumer.heartbeat.interval.ms must be within "
                             f"group.consumer.min.heartbeat.interval.ms ({self.min_heartbeat_interval_ms}) and "
                             f"group.consumer.max.heartbeat.interval.ms ({self.max_heartbeat_interval_ms}), "
                             f"got {self.heartbeat_interval_ms}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")
        if not self.assignors:
            raise ValueError("group.consumer.assignors must name at least one assignor")


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = JOIN_GROUP_MEMBER_EPOCH
    previous_member_epoch: int = NO_PREVIOUS_EPOCH
    state: MemberState = MemberState.STABLE
    assigned: Assignment = NO_PARTITIONS
    pending_revocation: Assignment = NO_PARTITIONS
    # KIP-848's online migration: a member that speaks JoinGroup/SyncGroup/Heartbeat (None: KIP-848)
    classic: ClassicMemberMetadata | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
            self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor, self.classic)

    def assignment_value(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        return ConsumerGroupCurrentMemberAssignmentValue(
            self.member_epoch, self.previous_member_epoch, int(self.state), self.assigned, self.pending_revocation)


@dataclass(frozen=True, slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0  # of the subscribed topics the group epoch last saw (KIP-1101's MetadataHash)
    assignment_epoch: int = 0
    members: Mapping[str, ConsumerMember] = field(default_factory=dict)
    target: Mapping[str, Assignment] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        for member_id in sorted(self.members):
            if self.members[member_id].instance_id == instance_id:
                return self.members[member_id]
        return None

    def partition_epochs(self, excluding: str | None = None) -> dict[TopicIdPartition, int]:
        """Who owns what (Kafka's currentPartitionEpoch): every partition a member other than
        `excluding` holds, assigned or pending revocation, with that member's epoch."""
        out: dict[TopicIdPartition, int] = {}
        for member in self.members.values():
            if member.member_id != excluding:
                for tp in member.assigned | member.pending_revocation:
                    out[tp] = member.member_epoch
        return out

    def all_classic_except(self, member_id: str) -> bool:
        """Kafka's allMembersUseClassicProtocolExcept: every other member speaks the classic protocol."""
        return all(m.uses_classic_protocol for k, m in self.members.items() if k != member_id)

    def preferred_assignor(self, default: str) -> str:
        """Kafka's ConsumerGroup.computePreferredServerAssignor: the assignor most members name
        (ties by name), the broker's default when none names one."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        return min(counts, key=lambda a: (-counts[a], a)) if counts else default


@dataclass(frozen=True, slots=True)
class ConsumerTimers:
    """A member's deadlines, kept beside the group and never written: its session (it must
    heartbeat by then) and, while it revokes, its rebalance timeout."""

    session_deadline_ms: int
    rebalance_deadline_ms: int = -1  # -1: none; KEEP_REBALANCE_DEADLINE: the one set before stays


# A member still revoking the same partitions keeps the rebalance deadline it got when it began
# (Kafka schedules the rebalance timeout once, on entering UNREVOKED_PARTITIONS): heartbeats do
# not push it back, so a member that never lets them go is fenced.
KEEP_REBALANCE_DEADLINE: Final = -2


def replay_consumer(group: ConsumerGroup | None, record: ConsumerRecord) -> ConsumerGroup | None:
    """The group after one of its records (Kafka's GroupMetadataManager.replay for the
    consumer group records). A member record for an unknown member creates it, as Kafka's
    getOrMaybeCreateMember(memberId, true) does: records of one member may come in any split."""
    key, value = record.key, record.value
    if isinstance(key, ConsumerGroupMetadataKey):
        if value is None:
            return None  # the group is deleted
        assert isinstance(value, ConsumerGroupMetadataValue)
        base = group or ConsumerGroup(key.group)
        return replace(base, group_epoch=value.epoch, metadata_hash=value.metadata_hash)
    base = group or ConsumerGroup(key.group)
    if isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        if value is None:
            return base
        assert isinstance(value, ConsumerGroupTargetAssignmentMetadataValue)
        return replace(base, assignment_epoch=value.assignment_epoch)
    member_id = key.member_id
    if isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        target = dict(base.target)
        if value is None:
            target.pop(member_id, None)
        else:
            assert isinstance(value, ConsumerGroupTargetAssignmentMemberValue)
            target[member_id] = value.partitions
        return replace(base, target=target)
    members = dict(base.members)
    member = members.get(member_id) or ConsumerMember(member_id)
    if isinstance(key, ConsumerGroupMemberMetadataKey):
        if value is None:
            members.pop(member_id, None)
            return replace(base, members=members)
        assert isinstance(value, ConsumerGroupMemberMetadataValue)
        members[member_id] = replace(
            member, instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
            client_host=value.client_host, subscribed_topic_names=value.subscribed_topic_names,
            subscribed_topic_regex=value.subscribed_topic_regex, rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor=value.server_assignor, classic=value.classic_member_metadata)
        return replace(base, members=members)
    assert isinstance(key, ConsumerGroupCurrentMemberAssignmentKey)
    if value is None:  # the member's assignment is gone; its metadata tombstone removes it
        members[member_id] = replace(member, member_epoch=JOIN_GROUP_MEMBER_EPOCH,
                                     previous_member_epoch=NO_PREVIOUS_EPOCH, state=MemberState.STABLE,
                                     assigned=NO_PARTITIONS, pending_revocation=NO_PARTITIONS)
    else:
        assert isinstance(value, ConsumerGroupCurrentMemberAssignmentValue)
        members[member_id] = replace(
            member, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
            state=MemberState(value.state), assigned=value.assigned, pending_revocation=value.pending_revocation)
    return replace(base, members=members)
