"""A classic group as an immutable value, and the facts every rule derives from it.

A `ClassicGroup` holds both what `__consumer_offsets` persists (generation, protocol, leader,
members with their subscriptions and assignments: GroupMetadataValue) and the soft state of
a rebalance in progress (which members have a JoinGroup or SyncGroup waiting, session and
rebalance deadlines in ms on the coordinator's clock). Rules return a new group; nothing
here changes one in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final

from common.units import DAY_MS, INT_MAX, MINUTE_MS, SECOND_MS
from groups.migration_protocol import MalformedConsumerProtocol, decode_subscription
from groups.records import GroupMetadataValue, MemberMetadata
from groups.state import GroupState, check_transition

CONSUMER_PROTOCOL_TYPE: Final = "consumer"
NO_DEADLINE: Final = -1
_EMPTY: Final[Mapping[str, object]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker's group.* and offset* settings, Kafka's defaults."""

    min_session_timeout_ms: int = 6 * SECOND_MS  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 30 * MINUTE_MS  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3 * SECOND_MS  # group.initial.rebalance.delay.ms
    max_size: int = INT_MAX  # group.max.size
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * DAY_MS  # offsets.retention.minutes (10080)
    new_member_join_timeout_ms: int = 5 * MINUTE_MS  # Kafka's GroupCoordinator constant


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's preference order
    assignment: bytes = b""
    awaiting_join: bool = False  # a JoinGroup of this member waits for the rebalance to complete
    awaiting_sync: bool = False  # a SyncGroup waits for the leader's assignment
    session_deadline_ms: int = NO_DEADLINE
    # Kafka's isNew: joined but no join phase completed yet. Its deadline is the new member
    # join timeout, and it holds even while its JoinGroup waits (KAFKA-7610).
    is_new: bool = False

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def same_protocols(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols


@dataclass(frozen=True, slots=True)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: Mapping[str, Member] = field(default_factory=dict)  # in join order
    # Member ids handed out with MEMBER_ID_REQUIRED (JoinGroup v4+), by their join deadline.
    pending_members: Mapping[str, int] = field(default_factory=dict)
    rebalance_deadline_ms: int = NO_DEADLINE
    initial_join: bool = False  # this rebalance began from Empty: group.initial.rebalance.delay.ms
    # KIP-814's pendingSyncMembers: members of this generation whose SyncGroup has not come
    # yet; those left at `sync_deadline_ms` (join completion + rebalance timeout) are removed.
    pending_sync: frozenset[str] = frozenset()
    sync_deadline_ms: int = NO_DEADLINE

    # ---- derived facts ------------------------------------------------------------------

    def static_member(self, group_instance_id: str | None) -> str | None:
        """The member id that holds `group_instance_id` now, if any."""
        if group_instance_id is None:
            return None
        for member in self.members.values():
            if member.group_instance_id == group_instance_id:
                return member.member_id
        return None

    def rebalance_timeout_ms(self) -> int:
        """Kafka's rebalanceTimeoutMs: the largest of the members'."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def size(self) -> int:
        return len(self.members) + len(self.pending_members)

    def all_joined(self) -> bool:
        """Kafka's hasAllMembersJoined: every member rejoined and nobody is pending."""
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Kafka's supportsProtocols: an empty group takes any non-empty list; otherwise the
        type must match and at least one protocol be common to every member."""
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        common: set[str] | None = None
        for member in self.members.values():
            names = {name for name, _ in member.protocols}
            common = names if common is None else common & names
        return common or set()

    def select_protocol(self) -> str | None:
        """Kafka's selectProtocol: each member votes for its first candidate; most votes win
        (a tie goes to the protocol the earliest member prefers)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            for name, _ in member.protocols:
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        if not votes:
            return None
        best = max(votes.values())
        return next(name for name, count in votes.items() if count == best)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol); None when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = consumer_subscription_topics(member.metadata_for(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    # ---- new values ---------------------------------------------------------------------

    def transition(self, target: GroupState, now_ms: int) -> ClassicGroup:
        check_transition(self.group_id, self.state, target)
        return replace(self, state=target, state_timestamp_ms=now_ms)

    def with_member(self, member: Member) -> ClassicGroup:
        members = dict(self.members)
        members[member.member_id] = member
        pending = {k: v for k, v in self.pending_members.items() if k != member.member_id}
        # Kafka's add(): the first member sets the group's protocol type
        protocol_type = self.protocol_type if self.members else member.protocol_type
        return replace(self, members=members, pending_members=pending, protocol_type=protocol_type)

    def without_member(self, member_id: str) -> ClassicGroup:
        members = {k: v for k, v in self.members.items() if k != member_id}
        pending = {k: v for k, v in self.pending_members.items() if k != member_id}
        leader = self.leader_id
        if leader == member_id:
            leader = next(iter(members), None)
        return replace(self, members=members, pending_members=pending, leader_id=leader,
                       pending_sync=self.pending_sync - {member_id})

    def with_pending(self, member_id: str, deadline_ms: int) -> ClassicGroup:
        return replace(self, pending_members={**self.pending_members, member_id: deadline_ms})

    def map_members(self, **changes: object) -> ClassicGroup:
        return replace(self, members={k: replace(m, **changes) for k, m in self.members.items()})  # type: ignore[arg-type]

    def to_record_value(self) -> GroupMetadataValue:
        """What GroupMetadataValue persists of this group (assignments included)."""
        return GroupMetadataValue(
            self.protocol_type or "", self.generation_id, self.protocol_name, self.leader_id,
            self.state_timestamp_ms,
            tuple(MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                 m.rebalance_timeout_ms, m.session_timeout_ms,
                                 m.metadata_for(self.protocol_name), m.assignment)
                  for m in self.members.values()))


def group_from_record(group_id: str, value: GroupMetadataValue, now_ms: int) -> ClassicGroup:
    """A group loaded from `__consumer_offsets` (Kafka's loadGroup): Empty without members,
    else Stable with every member's session starting now."""
    members = {m.member_id: Member(
        m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
        m.session_timeout, value.protocol_type,
        ((value.protocol, m.subscription),) if value.protocol is not None else (),
        m.assignment, session_deadline_ms=now_ms + m.session_timeout) for m in value.members}
    state = GroupState.STABLE if members else GroupState.EMPTY
    return ClassicGroup(group_id, state, value.current_state_timestamp, value.generation,
                        value.protocol_type or None, value.protocol, value.leader, members)


def consumer_subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version); None when it does not parse."""
    try:
        return set(decode_subscription(metadata).topics)
    except MalformedConsumerProtocol:
        return None
