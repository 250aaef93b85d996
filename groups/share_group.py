"""A share group's membership (KIP-932): ShareGroupHeartbeat as pure rules.

    out = heartbeat(group, req, topics=topics, config=config)   # records and the answer
    group = replay_all(group, out.records)                      # only replay changes state

A share group has no revocation: many members may hold one partition, since the records, not
the partitions, are what a member gets (each one acquired by one member at a time, on the
partition's leader: `groups.share_partition`). So an assignment takes effect at once: the
group epoch goes up when membership, a subscription or a subscribed topic's partition count
changes, the assignment is recomputed (Kafka's SimpleAssignor: partitions spread over the
members subscribed to their topic, and every partition to at least one member when there are
more members than partitions) and each member's epoch becomes the group's at its next
heartbeat. Errors are Kafka's: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, INVALID_REQUEST,
GROUP_MAX_SIZE_REACHED.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType
from typing import Final

from common.errors import ErrorCode

E = ErrorCode
JOIN_EPOCH: Final = 0  # member_epoch of a member joining (or rejoining)
LEAVE_EPOCH: Final = -1  # member_epoch of a member leaving
Assignment = frozenset[tuple[str, int]]  # (topic id, partition)
Topics = Mapping[str, tuple[str, int]]  # topic name -> (topic id, partition count)
NOTHING: Final[Assignment] = frozenset()


class ShareGroupState(Enum):
    """Kafka's ShareGroup.ShareGroupState, as ListGroups and describe spell them."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """group.share.* broker configs (Kafka's defaults)."""

    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...]
    assignment: Assignment = NOTHING
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    members: Mapping[str, ShareMember] = field(default_factory=lambda: MappingProxyType({}))
    target: Mapping[str, Assignment] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topics(self) -> frozenset[str]:
        return frozenset(t for m in self.members.values() for t in m.subscribed_topic_names)


# ---- records ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberSet:
    member: ShareMember


@dataclass(frozen=True, slots=True)
class MemberRemoved:
    member_id: str


@dataclass(frozen=True, slots=True)
class EpochSet:
    """The group epoch and the assignment computed for it (every member's)."""

    group_epoch: int
    target: Mapping[str, Assignment]


ShareGroupRecord = MemberSet | MemberRemoved | EpochSet


def replay(group: ShareGroup, record: ShareGroupRecord) -> ShareGroup:
    members = dict(group.members)
    if isinstance(record, MemberSet):
        members[record.member.member_id] = record.member
    elif isinstance(record, MemberRemoved):
        members.pop(record.member_id, None)
    else:
        return replace(group, group_epoch=record.group_epoch, target=MappingProxyType(dict(record.target)))
    return replace(group, members=MappingProxyType(members))


def replay_all(group: ShareGroup, records: Iterable[ShareGroupRecord]) -> ShareGroup:
    for record in records:
        group = replay(group, record)
    return group


# ---- the assignor ------------------------------------------------------------------------------


def assign(members: Mapping[str, ShareMember], topics: Topics) -> dict[str, Assignment]:
    """Kafka's share SimpleAssignor in spirit: per subscribed topic, its partitions round-robin
    over the members subscribed to it (sorted ids, so every coordinator computes the same), and
    when there are more members than partitions, members round-robin over the partitions."""
    out: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
    for name in sorted({t for m in members.values() for t in m.subscribed_topic_names}):
        if name not in topics:
            continue
        topic_id, count = topics[name]
        subscribers = sorted(m for m, member in members.items() if name in member.subscribed_topic_names)
        if not count or not subscribers:
            continue
        if len(subscribers) <= count:
            for p in range(count):
                out[subscribers[p % len(subscribers)]].add((topic_id, p))
        else:
            for i, m in enumerate(subscribers):
                out[m].add((topic_id, i % count))
    return {m: frozenset(a) for m, a in out.items()}


# ---- heartbeat -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed_topic_names: tuple[str, ...] | None  # None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: ErrorCode
    message: str | None
    member_id: str
    member_epoch: int = LEAVE_EPOCH
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged, not sent


@dataclass(frozen=True, slots=True)
class HeartbeatOutcome:
    records: tuple[ShareGroupRecord, ...]
    response: HeartbeatResponse
    reason: str = ""  # why the group epoch moved, for the coordinator's log line


def _refused(req: HeartbeatRequest, code: ErrorCode, message: str) -> HeartbeatOutcome:
    return HeartbeatOutcome((), HeartbeatResponse(code, message, req.member_id))


def _rebalanced(group: ShareGroup, members: dict[str, ShareMember], topics: Topics,
                reason: str) -> tuple[list[ShareGroupRecord], ShareGroup, str]:
    """Records that bump the group epoch when the assignment of `members` differs from the
    group's (or membership changed, `reason` set); the group after them."""
    target = assign(members, topics)
    records: list[ShareGroupRecord] = []
    if reason or target != dict(group.target):
        records.append(EpochSet(group.group_epoch + 1, MappingProxyType(target)))
        reason = reason or "the subscribed topics' partitions changed"
    return records, replay_all(group, records), reason


def heartbeat(group: ShareGroup | None, req: HeartbeatRequest, *, topics: Topics,
              config: ShareGroupConfig) -> HeartbeatOutcome:
    """One ShareGroupHeartbeat (v1: the member always names itself)."""
    if not req.member_id:
        return _refused(req, E.INVALID_REQUEST, "MemberId can't be empty.")
    group = group or ShareGroup(req.group_id)
    member = group.members.get(req.member_id)
    if req.member_epoch == LEAVE_EPOCH:
        if member is None:
            return HeartbeatOutcome((), HeartbeatResponse(E.NONE, None, req.member_id, LEAVE_EPOCH))
        members = {m: v for m, v in group.members.items() if m != req.member_id}
        records, _, reason = _rebalanced(group, members, topics, f"member {req.member_id} left")
        return HeartbeatOutcome((MemberRemoved(req.member_id), *records),
                                HeartbeatResponse(E.NONE, None, req.member_id, LEAVE_EPOCH), reason)
    if req.member_epoch == JOIN_EPOCH:
        if not req.subscribed_topic_names:
            return _refused(req, E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        if member is None and len(group.members) >= config.max_size:
            return _refused(req, E.GROUP_MAX_SIZE_REACHED,
                            f"The share group has reached its maximum capacity of {config.max_size} members.")
        member = ShareMember(req.member_id, 0, tuple(req.subscribed_topic_names))
        reason = f"member {req.member_id} joined"
    elif member is None:
        return _refused(req, E.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of share group "
                                                  f"{req.group_id}.")
    elif req.member_epoch != member.member_epoch:
        return _refused(req, E.FENCED_MEMBER_EPOCH, f"The share group member has a member epoch "
                                                    f"{req.member_epoch} that is not its {member.member_epoch}.")
    else:
        subscribed = member.subscribed_topic_names if req.subscribed_topic_names is None else tuple(
            req.subscribed_topic_names)
        reason = "" if subscribed == member.subscribed_topic_names else \
            f"member {req.member_id} changed its subscription"
        member = replace(member, subscribed_topic_names=subscribed)
    member = replace(member, rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
                     client_id=req.client_id, client_host=req.client_host)
    members = {**group.members, member.member_id: member}
    records, after, reason = _rebalanced(group, members, topics, reason)
    assignment = after.target.get(member.member_id, NOTHING)
    send: Assignment | None = None
    if member.member_epoch != after.group_epoch or req.member_epoch == JOIN_EPOCH:
        send = assignment  # the member moves to the group's epoch and learns its assignment
    member = replace(member, member_epoch=after.group_epoch, assignment=assignment)
    if member != group.members.get(member.member_id):
        records.insert(0, MemberSet(member))
    return HeartbeatOutcome(tuple(records), HeartbeatResponse(
        E.NONE, None, member.member_id, member.member_epoch, config.heartbeat_interval_ms, send), reason)


NO_OUTCOME: Final = HeartbeatOutcome((), HeartbeatResponse(E.NONE, None, ""))  # nothing to do


def expire(group: ShareGroup, member_ids: Iterable[str], *, topics: Topics) -> HeartbeatOutcome:
    """Members whose session ran out leave (Kafka fences them): their records, then one epoch
    bump for the rest."""
    gone = sorted(m for m in set(member_ids) if m in group.members)
    if not gone:
        return NO_OUTCOME
    members = {m: v for m, v in group.members.items() if m not in gone}
    records, _, reason = _rebalanced(group, members, topics, f"session of member(s) {', '.join(gone)} expired")
    return HeartbeatOutcome((*(MemberRemoved(m) for m in gone), *records),
                            HeartbeatResponse(E.NONE, None, ""), reason)
