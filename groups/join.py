"""JoinGroup and SyncGroup, and the rebalance they drive (Kafka's classic protocol).

A rebalance: the group goes to PreparingRebalance and waits until every member has sent a
JoinGroup (or the rebalance timeout passes; members that did not rejoin are dropped), then
it picks a protocol common to all, bumps the generation, answers every JoinGroup — the
leader's with the members and their metadata — and waits in CompletingRebalance for the
leader's SyncGroup with the assignment, which is persisted (GroupMetadataValue) before any
SyncGroup is answered. Assignment itself stays in the clients.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from common.errors import ErrorCode
from groups.group import ClassicGroup, GroupConfig, Member
from groups.outcome import JoinMember, JoinResult, Outcome, SyncResult
from groups.records import CoordinatorRecord, GroupMetadataKey
from groups.state import GroupState

E = ErrorCode


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = True  # JoinGroup v4+: MEMBER_ID_REQUIRED first
    supports_skip_assignment: bool = False  # JoinGroup v9+ (KIP-814)
    reason: str | None = None  # JoinGroup v8+ (KIP-800), for the log line of the rebalance


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    assignments: tuple[tuple[str, bytes], ...]
    protocol_type: str | None = None  # SyncGroup v5+: checked against the group's
    protocol_name: str | None = None


def _join_error(group: ClassicGroup | None, error: ErrorCode, member_id: str = "") -> Outcome:
    return Outcome(group, response=JoinResult(error, member_id=member_id))


def join_group(group: ClassicGroup | None, req: JoinRequest, *, new_member_id: str,
               now_ms: int, config: GroupConfig) -> Outcome:
    """Kafka's classicGroupJoin; `new_member_id` is the id an unknown member would get."""
    if not req.group_id:
        return _join_error(group, E.INVALID_GROUP_ID, req.member_id)
    if not config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms:
        return _join_error(group, E.INVALID_SESSION_TIMEOUT, req.member_id)
    if group is None:
        if req.member_id:
            return _join_error(None, E.UNKNOWN_MEMBER_ID, req.member_id)
        candidate = ClassicGroup(req.group_id, state_timestamp_ms=now_ms)
    else:
        candidate = group
    if candidate.state is GroupState.DEAD:
        return _join_error(group, E.COORDINATOR_NOT_AVAILABLE, req.member_id)
    if not candidate.supports(req.protocol_type, req.protocols):
        return _join_error(group, E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
    if not req.member_id:
        outcome = _join_unknown(candidate, group, req, new_member_id, now_ms, config)
    else:
        outcome = _join_known(candidate, req, now_ms, config)
    if outcome.reason.startswith(_REASONED):  # Kafka's joinReason, in the lines it logs it in
        outcome = replace(outcome, reason=f"{outcome.reason}; client reason: {client_reason(req.reason)}")
    return outcome


# The transitions a JoinGroup causes whose log line carries the client's reason (Kafka logs
# it when preparing a rebalance and when a static member replaces its old member id).
_REASONED: Final = ("preparing to rebalance", "static member")


def client_reason(reason: str | None) -> str:
    """Kafka's rendering of a JoinGroup (v8+) or LeaveGroup (v5+) reason."""
    return reason if reason else "not provided"


def _new_member(req: JoinRequest, member_id: str, now_ms: int, config: GroupConfig) -> Member:
    """Kafka's addMemberAndRebalance: a new member's first deadline is the new member join
    timeout, not its session, so a client gone before the join completes does not hold
    the rebalance until the (possibly much longer) rebalance timeout."""
    return Member(member_id, req.group_instance_id, req.client_id, req.client_host,
                  req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type,
                  req.protocols, awaiting_join=True,
                  session_deadline_ms=now_ms + config.new_member_join_timeout_ms, is_new=True)


def _join_unknown(group: ClassicGroup, before: ClassicGroup | None, req: JoinRequest,
                  new_member_id: str, now_ms: int, config: GroupConfig) -> Outcome:
    holder = group.static_member(req.group_instance_id)
    if holder is not None:
        return _replace_static(group, holder, new_member_id, req, now_ms, config)
    if group.size() >= config.max_size:
        return _join_error(before, E.GROUP_MAX_SIZE_REACHED)
    if req.group_instance_id is None and req.require_known_member_id:
        # KIP-394: the member must rejoin with this id, so a client that lost the answer
        # cannot leave an orphan member behind until its session expires.
        pending = group.with_pending(new_member_id, now_ms + req.session_timeout_ms)
        return Outcome(pending, response=JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_member_id),
                       reason=f"member id {new_member_id} handed out (MEMBER_ID_REQUIRED)")
    return _add_and_rebalance(group, _new_member(req, new_member_id, now_ms, config), now_ms, config,
                              f"member {new_member_id} joined")


def _add_and_rebalance(group: ClassicGroup, member: Member, now_ms: int, config: GroupConfig,
                       reason: str) -> Outcome:
    is_new = member.member_id not in group.members
    group = group.with_member(member)
    outcome = Outcome(group, park=True)
    if group.state is not GroupState.PREPARING_REBALANCE:
        outcome = outcome.then(prepare_rebalance(group, now_ms, config, reason))
    elif group.initial_join and is_new:  # Kafka's InitialDelayedJoin: wait for more
        limit = group.state_timestamp_ms + _rebalance_timeout(group)
        deadline = max(group.rebalance_deadline_ms,
                       min(now_ms + config.initial_rebalance_delay_ms, limit))
        outcome = outcome.then(Outcome(replace(group, rebalance_deadline_ms=deadline)))
    assert outcome.group is not None
    return Outcome(outcome.group, outcome.records, None, True, outcome.joins, outcome.syncs,
                   outcome.reason).then(maybe_complete_join(outcome.group, now_ms))


def _replace_static(group: ClassicGroup, old_id: str, new_id: str, req: JoinRequest,
                    now_ms: int, config: GroupConfig) -> Outcome:
    """KIP-345: a static member rejoining with an unknown member id takes over its instance;
    the old member id is fenced. A Stable group with unchanged protocols skips the rebalance."""
    old = group.members[old_id]
    fenced: tuple[tuple[str, JoinResult], ...] = ()
    if old.awaiting_join:
        fenced = ((old_id, JoinResult(E.FENCED_INSTANCE_ID, member_id=old_id)),)
    new = replace(old, member_id=new_id, client_id=req.client_id, client_host=req.client_host,
                  session_timeout_ms=req.session_timeout_ms,
                  rebalance_timeout_ms=req.rebalance_timeout_ms, protocols=req.protocols,
                  awaiting_join=False, session_deadline_ms=now_ms + req.session_timeout_ms)
    members = {(new_id if k == old_id else k): (new if k == old_id else m)
               for k, m in group.members.items()}
    leader = new_id if group.leader_id == old_id else group.leader_id
    pending_sync = group.pending_sync
    if old_id in pending_sync:  # the new id owes the old one's SyncGroup
        pending_sync = (pending_sync - {old_id}) | {new_id}
    replaced = replace(group, members=members, leader_id=leader, pending_sync=pending_sync)
    if group.state is GroupState.STABLE and old.same_protocols(req.protocols):
        record = CoordinatorRecord(GroupMetadataKey(group.group_id), replaced.to_record_value())
        if req.supports_skip_assignment:
            # KIP-814: the leader learns it leads (to keep watching metadata) but must not
            # run the assignor: a Stable group would not hand out a new assignment.
            answer = replace(_current(replaced, new_id), skip_assignment=leader == new_id)
        else:
            # Before JoinGroup v9: the previous leader id, which is not the member's new id,
            # so a rejoining static leader does not think it leads and runs no assignment.
            answer = JoinResult(E.NONE, replaced.generation_id, replaced.protocol_type,
                                replaced.protocol_name, group.leader_id or "", new_id)
        return Outcome(replaced, (record,), answer, joins=fenced,
                       reason=f"static member {req.group_instance_id} rejoined as {new_id}")
    outcome = _add_and_rebalance(replaced, replace(new, awaiting_join=True), now_ms, config,
                                 f"static member {req.group_instance_id} rejoined as {new_id}")
    return Outcome(outcome.group, outcome.records, None, True, fenced + outcome.joins,
                   outcome.syncs, outcome.reason)


def _join_known(group: ClassicGroup, req: JoinRequest, now_ms: int, config: GroupConfig) -> Outcome:
    if req.member_id in group.pending_members:
        return _add_and_rebalance(group, _new_member(req, req.member_id, now_ms, config), now_ms, config,
                                  f"member {req.member_id} joined")
    holder = group.static_member(req.group_instance_id)
    if holder is not None and holder != req.member_id:
        return _join_error(group, E.FENCED_INSTANCE_ID, req.member_id)
    member = group.members.get(req.member_id)
    if member is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
        return _join_error(group, E.UNKNOWN_MEMBER_ID, req.member_id)
    # Kafka's updateMember does not reschedule the heartbeat: a new member sending its
    # JoinGroup again keeps its join timeout instead of getting a (shorter) session.
    deadline = member.session_deadline_ms if member.is_new else now_ms + req.session_timeout_ms
    updated = replace(member, protocols=req.protocols, client_id=req.client_id,
                      session_timeout_ms=req.session_timeout_ms,
                      rebalance_timeout_ms=req.rebalance_timeout_ms, awaiting_join=True,
                      session_deadline_ms=deadline)
    unchanged = member.same_protocols(req.protocols)
    if group.state is GroupState.COMPLETING_REBALANCE and unchanged:
        return Outcome(group, response=_current(group, member.member_id))
    if group.state is GroupState.STABLE and unchanged and group.leader_id != member.member_id:
        return Outcome(group, response=_current(group, member.member_id))
    return _add_and_rebalance(group, updated, now_ms, config,
                              f"member {member.member_id} rejoined with new protocols"
                              if not unchanged else f"leader {member.member_id} rejoined")


def _current(group: ClassicGroup, member_id: str) -> JoinResult:
    """The answer describing the current generation, to a member that need not rebalance."""
    members = _join_members(group) if group.leader_id == member_id else ()
    return JoinResult(E.NONE, group.generation_id, group.protocol_type, group.protocol_name,
                      group.leader_id or "", member_id, members)


def _join_members(group: ClassicGroup) -> tuple[JoinMember, ...]:
    return tuple(JoinMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                 for m in group.members.values())


def _rebalance_timeout(group: ClassicGroup) -> int:
    return group.rebalance_timeout_ms()


def prepare_rebalance(group: ClassicGroup, now_ms: int, config: GroupConfig, reason: str) -> Outcome:
    """Kafka's prepareRebalance: parked SyncGroups fail with REBALANCE_IN_PROGRESS, and the
    group waits for every member's JoinGroup until the (initial) rebalance deadline."""
    syncs: tuple[tuple[str, SyncResult], ...] = ()
    if group.state is GroupState.COMPLETING_REBALANCE:
        syncs = tuple((m.member_id, SyncResult(E.REBALANCE_IN_PROGRESS))
                      for m in group.members.values() if m.awaiting_sync)
        group = group.map_members(awaiting_sync=False, assignment=b"")
    initial = group.state is GroupState.EMPTY
    timeout = _rebalance_timeout(group)
    delay = min(config.initial_rebalance_delay_ms, timeout) if initial else timeout
    group = replace(group.transition(GroupState.PREPARING_REBALANCE, now_ms),
                    rebalance_deadline_ms=now_ms + delay, initial_join=initial,
                    pending_sync=frozenset(), sync_deadline_ms=-1)  # Kafka's removeSyncExpiration
    return Outcome(group, syncs=syncs, reason=f"preparing to rebalance: {reason}")


def maybe_complete_join(group: ClassicGroup, now_ms: int) -> Outcome:
    """Complete the join phase when everyone rejoined (not during the initial delay) or
    the deadline passed; otherwise nothing changes."""
    if group.state is not GroupState.PREPARING_REBALANCE:
        return Outcome(group)
    due = now_ms >= group.rebalance_deadline_ms
    if (group.initial_join and not due) or not (due or group.all_joined()):
        return Outcome(group)
    return complete_join(group, now_ms)


def complete_join(group: ClassicGroup, now_ms: int) -> Outcome:
    """Kafka's onCompleteJoin: drop members that did not rejoin, then a new generation."""
    for member in list(group.members.values()):
        if not member.awaiting_join:
            group = group.without_member(member.member_id)
    group = replace(group, rebalance_deadline_ms=-1, initial_join=False)
    if not group.members:
        empty = replace(group.transition(GroupState.EMPTY, now_ms),
                        generation_id=group.generation_id + 1, protocol_name=None, leader_id=None)
        record = CoordinatorRecord(GroupMetadataKey(group.group_id), empty.to_record_value())
        return Outcome(empty, (record,), reason="no member rejoined: group is empty")
    protocol = group.select_protocol()
    first = next(iter(group.members.values()))
    leader = group.leader_id if group.leader_id in group.members else first.member_id
    group = replace(group, generation_id=group.generation_id + 1, protocol_name=protocol,
                    protocol_type=first.protocol_type, leader_id=leader)
    group = group.transition(GroupState.COMPLETING_REBALANCE, now_ms)
    group = replace(group, members={k: replace(m, awaiting_join=False, is_new=False,
                                               session_deadline_ms=now_ms + m.session_timeout_ms)
                                    for k, m in group.members.items()},
                    pending_sync=frozenset(group.members),
                    sync_deadline_ms=now_ms + group.rebalance_timeout_ms())  # schedulePendingSync
    joins = tuple((m.member_id, _current(group, m.member_id)) for m in group.members.values())
    return Outcome(group, joins=joins,
                   reason=f"generation {group.generation_id} with protocol {protocol}, "
                          f"leader {leader}, {len(group.members)} member(s)")


def _sync_error(group: ClassicGroup | None, error: ErrorCode) -> Outcome:
    return Outcome(group, response=SyncResult(error))


def sync_group(group: ClassicGroup | None, req: SyncRequest, now_ms: int) -> Outcome:
    """Kafka's classicGroupSync: the leader's assignment is persisted, then every member
    waiting in CompletingRebalance gets its part."""
    if not req.group_id:
        return _sync_error(group, E.INVALID_GROUP_ID)
    if group is None:
        return _sync_error(None, E.UNKNOWN_MEMBER_ID)
    if group.state is GroupState.DEAD:
        return _sync_error(group, E.COORDINATOR_NOT_AVAILABLE)
    holder = group.static_member(req.group_instance_id)
    if holder is not None and holder != req.member_id:
        return _sync_error(group, E.FENCED_INSTANCE_ID)
    member = group.members.get(req.member_id)
    if member is None or group.state is GroupState.EMPTY:
        return _sync_error(group, E.UNKNOWN_MEMBER_ID)
    if req.generation_id != group.generation_id:
        return _sync_error(group, E.ILLEGAL_GENERATION)
    if (_inconsistent(req.protocol_type, group.protocol_type)
            or _inconsistent(req.protocol_name, group.protocol_name)):
        return _sync_error(group, E.INCONSISTENT_GROUP_PROTOCOL)
    if group.state is GroupState.PREPARING_REBALANCE:
        return _sync_error(group, E.REBALANCE_IN_PROGRESS)
    member = replace(member, session_deadline_ms=now_ms + member.session_timeout_ms)
    group = replace(group, pending_sync=group.pending_sync - {member.member_id})
    if group.state is GroupState.STABLE:
        return Outcome(group.with_member(member), response=SyncResult(
            E.NONE, member.assignment, group.protocol_type, group.protocol_name))
    group = group.with_member(replace(member, awaiting_sync=True))
    if req.member_id != group.leader_id:
        return Outcome(group, park=True)
    assignment = dict(req.assignments)
    waiting = [m.member_id for m in group.members.values() if m.awaiting_sync]
    group = group.transition(GroupState.STABLE, now_ms)
    group = replace(group, members={k: replace(m, awaiting_sync=False,
                                               assignment=assignment.get(k, b""))
                                    for k, m in group.members.items()})
    record = CoordinatorRecord(GroupMetadataKey(group.group_id), group.to_record_value())
    syncs = tuple((mid, SyncResult(E.NONE, group.members[mid].assignment, group.protocol_type,
                                   group.protocol_name)) for mid in waiting)
    return Outcome(group, (record,), park=True, syncs=syncs,
                   reason=f"generation {group.generation_id} assigned by leader {req.member_id}")


def _inconsistent(asked: str | None, group_value: str | None) -> bool:
    """Kafka's isProtocolInconsistent: only a value both sides have can disagree (SyncGroup
    before v5 sends none)."""
    return asked is not None and group_value is not None and asked != group_value


def sync_failed(group: ClassicGroup, generation_id: int, error: ErrorCode, now_ms: int,
                config: GroupConfig) -> Outcome:
    """The leader's assignment could not be persisted: members learn the error and the
    group rebalances again (Kafka's resetAndPropagateAssignmentError + prepareRebalance)."""
    if group.generation_id != generation_id or group.state is not GroupState.STABLE:
        return Outcome(group)
    syncs = tuple((m.member_id, SyncResult(error)) for m in group.members.values())
    reset = group.map_members(assignment=b"")
    return Outcome(reset, syncs=syncs).then(
        prepare_rebalance(reset, now_ms, config, f"assignment not persisted: {error.name}"))
