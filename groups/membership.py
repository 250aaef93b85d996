"""Heartbeat, LeaveGroup (batch leave, KIP-345) and session/rebalance expiry.

`expire` is the timer rule: the runtime calls it with the coordinator's clock and it drops
members whose session passed, members given an id with MEMBER_ID_REQUIRED that never came
back, new members whose join did not complete within the new member join timeout,
members that sent no SyncGroup within the rebalance timeout after a join phase (KIP-814),
and completes a join phase whose deadline passed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from common.errors import ErrorCode
from groups.group import ClassicGroup, GroupConfig, Member
from groups.join import client_reason, maybe_complete_join, prepare_rebalance
from groups.outcome import JoinResult, Outcome
from groups.state import GroupState

E = ErrorCode


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str  # "" with a group_instance_id: leave by instance (v3+)
    group_instance_id: str | None = None
    reason: str | None = None  # LeaveGroup v5+ (KIP-800), for the log line of the rebalance


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode  # the request-level error
    members: tuple[tuple[LeavingMember, ErrorCode], ...] = ()


def heartbeat(group: ClassicGroup | None, group_id: str, member_id: str,
              group_instance_id: str | None, generation_id: int, now_ms: int) -> Outcome:
    """Kafka's classicGroupHeartbeat: refreshes the member's session; the answer tells it
    to rejoin (REBALANCE_IN_PROGRESS) or that it was removed (UNKNOWN_MEMBER_ID)."""
    if not group_id:
        return Outcome(group, response=E.INVALID_GROUP_ID)
    if group is None:
        return Outcome(None, response=E.UNKNOWN_MEMBER_ID)
    if group.state is GroupState.DEAD:
        return Outcome(group, response=E.COORDINATOR_NOT_AVAILABLE)
    holder = group.static_member(group_instance_id)
    if holder is not None and holder != member_id:
        return Outcome(group, response=E.FENCED_INSTANCE_ID)
    member = group.members.get(member_id)
    if member is None or group.state is GroupState.EMPTY:
        return Outcome(group, response=E.UNKNOWN_MEMBER_ID)
    if generation_id != group.generation_id:
        return Outcome(group, response=E.ILLEGAL_GENERATION)
    refreshed = group.with_member(replace(member, session_deadline_ms=now_ms + member.session_timeout_ms))
    if group.state is GroupState.PREPARING_REBALANCE:
        return Outcome(refreshed, response=E.REBALANCE_IN_PROGRESS)
    return Outcome(refreshed, response=E.NONE)


def leave_group(group: ClassicGroup | None, group_id: str, leaving: tuple[LeavingMember, ...],
                now_ms: int, config: GroupConfig) -> Outcome:
    """Kafka's classicGroupLeave: each member leaves (by member id, or by instance id for a
    static member); the group rebalances once for all of them."""
    if not group_id:
        return Outcome(group, response=LeaveResult(E.INVALID_GROUP_ID))
    if group is None:
        return Outcome(None, response=LeaveResult(
            E.NONE, tuple((m, E.UNKNOWN_MEMBER_ID) for m in leaving)))
    if group.state is GroupState.DEAD:
        return Outcome(group, response=LeaveResult(E.COORDINATOR_NOT_AVAILABLE))
    results: list[tuple[LeavingMember, ErrorCode]] = []
    removed: list[str] = []
    joins: tuple[tuple[str, JoinResult], ...] = ()
    for m in leaving:
        holder = group.static_member(m.group_instance_id)
        if m.group_instance_id is not None:
            if holder is None:
                results.append((m, E.UNKNOWN_MEMBER_ID))
                continue
            if m.member_id and holder != m.member_id:
                results.append((m, E.FENCED_INSTANCE_ID))
                continue
            target = holder
        else:
            target = m.member_id
        if target in group.pending_members:
            group = group.without_member(target)
            results.append((m, E.NONE))
            continue
        if target not in group.members:
            results.append((m, E.UNKNOWN_MEMBER_ID))
            continue
        joins += _answer_waiting_joins(group, [target])
        group = group.without_member(target)
        removed.append(f"{target} (client reason: {client_reason(m.reason)})")
        results.append((m, E.NONE))
    outcome = Outcome(group, response=LeaveResult(E.NONE, tuple(results)), joins=joins)
    if removed:
        outcome = outcome.then(_after_removal(group, now_ms, config, f"member(s) {', '.join(removed)} left"))
    return outcome


def _after_removal(group: ClassicGroup, now_ms: int, config: GroupConfig, reason: str) -> Outcome:
    """Kafka's removeMemberAndUpdateGroup: Stable and CompletingRebalance rebalance;
    PreparingRebalance may now be complete."""
    if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
        prepared = prepare_rebalance(group, now_ms, config, reason)
        assert prepared.group is not None
        return prepared.then(maybe_complete_join(prepared.group, now_ms))
    if group.state is GroupState.PREPARING_REBALANCE:
        return maybe_complete_join(group, now_ms)
    return Outcome(group)


def _answer_waiting_joins(group: ClassicGroup, removed: list[str]) -> tuple[tuple[str, JoinResult], ...]:
    """Kafka's removeMemberAndUpdateGroup answers a removed member's waiting JoinGroup
    UNKNOWN_MEMBER_ID (with no member id), so a client still alive joins again."""
    return tuple((mid, JoinResult(E.UNKNOWN_MEMBER_ID)) for mid in removed
                 if mid in group.members and group.members[mid].awaiting_join)


def _heartbeat_expired(member: Member, now_ms: int) -> bool:
    """Kafka's hasSatisfiedHeartbeat, negated at the deadline: a new member can expire while
    its JoinGroup waits; any other member waiting for a join or sync answer cannot."""
    if member.session_deadline_ms < 0 or member.session_deadline_ms > now_ms:
        return False
    return member.is_new or not (member.awaiting_join or member.awaiting_sync)


def _sync_expired(group: ClassicGroup, now_ms: int) -> bool:
    """Kafka's onExpirePendingSync: members of this generation that never sent SyncGroup."""
    return (group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
            and bool(group.pending_sync) and 0 <= group.sync_deadline_ms <= now_ms)


def expire(group: ClassicGroup, now_ms: int, config: GroupConfig) -> Outcome:
    """The timers of one group at `now_ms`: expired sessions (and new members' join timeout),
    pending member ids, members that never synced, the join deadline."""
    expired = [m.member_id for m in group.members.values() if _heartbeat_expired(m, now_ms)]
    pending = [mid for mid, deadline in group.pending_members.items() if deadline <= now_ms]
    for member_id in pending:
        group = group.without_member(member_id)
    joins = _answer_waiting_joins(group, expired)
    reasons = [f"session of member(s) {', '.join(expired)} expired"] if expired else []
    if _sync_expired(group, now_ms):
        unsynced = sorted(group.pending_sync - set(expired))
        if unsynced:
            reasons.append(f"member(s) {', '.join(unsynced)} sent no SyncGroup for generation "
                           f"{group.generation_id} within the rebalance timeout")
        expired += unsynced
    if expired:
        for member_id in expired:
            group = group.without_member(member_id)
        return Outcome(group, joins=joins).then(
            _after_removal(group, now_ms, config, "; ".join(reasons)))
    return maybe_complete_join(group, now_ms)


def next_deadline(group: ClassicGroup) -> int:
    """The earliest time `expire` could change this group; -1 when none."""
    times = [m.session_deadline_ms for m in group.members.values()
             if m.session_deadline_ms >= 0 and (m.is_new or not (m.awaiting_join or m.awaiting_sync))]
    times += list(group.pending_members.values())
    if group.state is GroupState.PREPARING_REBALANCE:
        times.append(group.rebalance_deadline_ms)
    if group.pending_sync and group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
        times.append(group.sync_deadline_ms)
    return min(times, default=-1)
