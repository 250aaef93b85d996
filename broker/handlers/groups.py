"""Group API requests in, responses out: wire dataclasses ↔ the `groups/` rules.

Each handler is a plain coroutine `(coordinator, request, version, client) -> response`
for the broker's dispatch table. Errors that concern the whole request (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, ...) come from `GroupCoordinator.partition_for`. A rule runs
inside `GroupCoordinator.run` on the partition's current groups image.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Final, TypeVar, cast

from broker.group_coordinator.runtime import CoordinatorError, GroupCoordinator
from broker.handlers.context import ClientInfo
from common.errors import ErrorCode
from common.protocol import acls
from common.protocol import group_admin as ga
from common.protocol import group_membership as gm
from common.protocol import join_group as jg
from common.protocol import offset_commit as oc
from common.protocol import offset_fetch as of
from common.units import SECOND_MS
from groups.group import ClassicGroup
from groups.image import GroupsImage
from groups.join import JoinRequest, SyncRequest, join_group, sync_group
from groups.membership import LeaveResult, LeavingMember, heartbeat, leave_group
from groups.offsets import (
    CommitPartition,
    CommitRequest,
    commit_offsets,
    delete_group,
    delete_offsets,
    fetch_offsets,
)
from groups.outcome import JoinResult, Outcome, SyncResult
from groups.state import GroupState
from metadata.image import MetadataImage

E = ErrorCode
JOIN_MARGIN_MS: Final = 5 * SECOND_MS  # a parked JoinGroup waits its rebalance timeout plus this, at most
GROUP_OPERATIONS_BITS: Final = acls.operations_bitfield(acls.GROUP_OPERATIONS)  # DescribeGroups v3+
CLASSIC_GROUP_TYPE: Final = "classic"  # Kafka's Group.GroupType.CLASSIC (ListGroups v5)
R = TypeVar("R", JoinResult, SyncResult)


def _join_response(result: JoinResult) -> jg.JoinGroupResponse:
    return jg.JoinGroupResponse(
        int(result.error), result.generation_id, result.protocol_name, result.leader,
        result.member_id,
        tuple(jg.JoinGroupResponseMember(m.member_id, m.group_instance_id, m.metadata) for m in result.members),
        protocol_type=result.protocol_type, skip_assignment=result.skip_assignment)


def _sync_response(result: SyncResult) -> jg.SyncGroupResponse:
    return jg.SyncGroupResponse(int(result.error), result.assignment,
                                protocol_type=result.protocol_type, protocol_name=result.protocol_name)


async def _answer_or_park(coord: GroupCoordinator, partition: int, group_id: str, kind: type[R],
                          rule: Callable[[GroupsImage], Outcome],
                          park_one: Callable[[], asyncio.Future[R]]) -> R:
    """Run a JoinGroup/SyncGroup rule: its own answer, or, when the rule parks the request,
    the answer the group gives it later. The request parks before any answer of the rule's
    write goes out (a completed rebalance may answer it within the same write)."""
    parked: list[asyncio.Future[R]] = []

    def park(outcome: Outcome) -> None:
        if outcome.park:
            parked.append(park_one())

    outcome, _ = await coord.run(partition, group_id, rule, park)
    if not parked:
        assert isinstance(outcome.response, kind)
        return outcome.response
    return await parked[0]


async def join(coord: GroupCoordinator, req: jg.JoinGroupRequest, version: int,
               client: ClientInfo) -> jg.JoinGroupResponse:
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return _join_response(JoinResult(e.code, member_id=req.member_id))
    prefix = req.group_instance_id or client.client_id or "member"
    new_id = coord.new_member_id(prefix)
    core = JoinRequest(req.group_id, req.member_id, req.group_instance_id, client.client_id, client.host,
                       req.session_timeout_ms, req.rebalance_timeout_ms, req.protocol_type,
                       tuple((p.name, p.metadata) for p in req.protocols), version >= 4,
                       supports_skip_assignment=version >= 9, reason=req.reason)
    now_ms = coord.now_ms()
    result = await _answer_or_park(
        coord, partition, req.group_id, JoinResult,
        lambda state: join_group(state.groups.get(req.group_id), core, new_member_id=new_id, now_ms=now_ms,
                                 config=coord.config),
        lambda: coord.park_join(partition, req.group_id, req.member_id or new_id,
                                req.rebalance_timeout_ms + JOIN_MARGIN_MS))
    return _join_response(result)


async def sync(coord: GroupCoordinator, req: jg.SyncGroupRequest, version: int,
               client: ClientInfo) -> jg.SyncGroupResponse:
    if version >= 5 and (req.protocol_type is None or req.protocol_name is None):
        # Kafka's areMandatoryProtocolTypeAndNamePresent, checked before anything else
        return jg.SyncGroupResponse(int(E.INCONSISTENT_GROUP_PROTOCOL), b"")
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return jg.SyncGroupResponse(int(e.code), b"")
    core = SyncRequest(req.group_id, req.generation_id, req.member_id, req.group_instance_id,
                       tuple((a.member_id, a.assignment) for a in req.assignments),
                       req.protocol_type, req.protocol_name)
    group = coord.groups(partition).groups.get(req.group_id)
    wait_ms = max((m.rebalance_timeout_ms for m in (group.members.values() if group else ())), default=0) \
        + JOIN_MARGIN_MS
    now_ms = coord.now_ms()
    result = await _answer_or_park(
        coord, partition, req.group_id, SyncResult,
        lambda state: sync_group(state.groups.get(req.group_id), core, now_ms),
        lambda: coord.park_sync(partition, req.group_id, req.member_id, wait_ms))
    return _sync_response(result)


async def heartbeat_(coord: GroupCoordinator, req: gm.HeartbeatRequest, version: int,
                     client: ClientInfo) -> gm.HeartbeatResponse:
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return gm.HeartbeatResponse(int(e.code))
    now_ms = coord.now_ms()
    outcome, _ = await coord.run(partition, req.group_id, lambda state: heartbeat(
        state.groups.get(req.group_id), req.group_id, req.member_id, req.group_instance_id,
        req.generation_id, now_ms))
    return gm.HeartbeatResponse(int(outcome.response))  # type: ignore[call-overload]


async def leave(coord: GroupCoordinator, req: gm.LeaveGroupRequest, version: int,
                client: ClientInfo) -> gm.LeaveGroupResponse:
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return gm.LeaveGroupResponse(int(e.code))
    leaving = tuple(LeavingMember(m.member_id, m.group_instance_id, m.reason) for m in req.members)
    now_ms = coord.now_ms()
    outcome, _ = await coord.run(partition, req.group_id, lambda state: leave_group(
        state.groups.get(req.group_id), req.group_id, leaving, now_ms, coord.config))
    result = outcome.response
    assert isinstance(result, LeaveResult)
    members = tuple(gm.MemberResponse(m.member_id, m.group_instance_id, int(code)) for m, code in result.members)
    error = int(result.error)
    if version < 3 and error == 0 and members:  # one member: its error is the request's
        error = members[0].error_code
    return gm.LeaveGroupResponse(error, members if version >= 3 else ())


def _partition_exists(image: MetadataImage) -> Callable[[str, int], bool]:
    def exists(topic: str, partition: int) -> bool:
        t = image.topic(topic)
        return t is not None and partition in t.partitions
    return exists


async def commit(coord: GroupCoordinator, req: oc.OffsetCommitRequest, version: int,
                 client: ClientInfo) -> oc.OffsetCommitResponse:
    def all_failed(code: int) -> oc.OffsetCommitResponse:
        return oc.OffsetCommitResponse(tuple(oc.TopicErrors(t.name, tuple(
            oc.PartitionError(p.partition_index, code) for p in t.partitions)) for t in req.topics))

    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return all_failed(int(e.code))
    parts = tuple(CommitPartition(t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                                  p.committed_metadata, p.commit_timestamp) for t in req.topics for p in t.partitions)
    # retention_time_ms (v2-v4) only sets an expire timestamp when given (Kafka >= 2.1)
    expire = coord.now_ms() + req.retention_time_ms if req.retention_time_ms >= 0 else -1
    core = CommitRequest(req.group_id, req.generation_id, req.member_id, req.group_instance_id, parts, expire,
                         E.GROUP_ID_NOT_FOUND if version >= 9 else E.ILLEGAL_GENERATION)
    now_ms, exists = coord.now_ms(), _partition_exists(coord.image())
    outcome, error = await coord.run(partition, req.group_id, lambda state: commit_offsets(
        state.groups.get(req.group_id), core, now_ms=now_ms, config=coord.config, partition_exists=exists))
    answers: dict[str, list[oc.PartitionError]] = {}
    for topic, partition, code in outcome.response:  # type: ignore[attr-defined]
        if code is E.NONE and error is not E.NONE:
            code = error
        answers.setdefault(topic, []).append(oc.PartitionError(partition, int(code)))
    return oc.OffsetCommitResponse(tuple(oc.TopicErrors(t, tuple(ps)) for t, ps in answers.items()))


def _fetch_group(coord: GroupCoordinator, group_id: str,
                 topics: tuple[of.OffsetFetchRequestTopic, ...] | None) -> of.OffsetFetchResponseGroup:
    """One group's committed offsets, or its error (with no topics) when this broker cannot
    answer for it. A classic group checks no member id or epoch (OffsetFetch v9): Kafka's
    ClassicGroup.validateOffsetFetch only refuses a Dead group, which tidelog never keeps."""
    if not group_id:
        return of.OffsetFetchResponseGroup(group_id, (), int(E.INVALID_GROUP_ID))
    try:
        partition = coord.partition_for(group_id)
    except CoordinatorError as e:
        return of.OffsetFetchResponseGroup(group_id, (), int(e.code))
    wanted = None if topics is None else tuple((t.name, t.partition_indexes) for t in topics)
    answers: dict[str, list[of.OffsetFetchResponsePartition]] = {}
    for f in fetch_offsets(coord.committed_offsets(partition).offsets.get(group_id), wanted):
        answers.setdefault(f.topic, []).append(of.OffsetFetchResponsePartition(
            f.partition, f.offset, f.leader_epoch, f.metadata, int(f.error)))
    return of.OffsetFetchResponseGroup(
        group_id, tuple(of.OffsetFetchResponseTopic(t, tuple(ps)) for t, ps in answers.items()))


async def fetch(coord: GroupCoordinator, req: of.OffsetFetchRequest, version: int,
                client: ClientInfo) -> of.OffsetFetchResponse:
    if version >= 8:  # KIP-709: each group answered on its own, errors included
        return of.OffsetFetchResponse((), groups=tuple(
            _fetch_group(coord, g.group_id, g.topics) for g in req.groups))
    group = _fetch_group(coord, req.group_id, req.topics)
    if group.error_code == 0:
        return of.OffsetFetchResponse(group.topics)
    if version >= 2:
        return of.OffsetFetchResponse((), group.error_code)
    # v0-v1 have no top-level error: every asked partition carries it
    return of.OffsetFetchResponse(tuple(of.OffsetFetchResponseTopic(t.name, tuple(
        of.OffsetFetchResponsePartition(p, -1, -1, "", group.error_code) for p in t.partition_indexes))
        for t in req.topics or ()))


async def offset_delete(coord: GroupCoordinator, req: oc.OffsetDeleteRequest, version: int,
                        client: ClientInfo) -> oc.OffsetDeleteResponse:
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return oc.OffsetDeleteResponse(int(e.code))
    partitions = tuple((t.name, p) for t in req.topics for p in t.partitions)
    outcome, error = await coord.run(partition, req.group_id, lambda state: delete_offsets(
        state.groups.get(req.group_id), state.offsets.get(req.group_id), req.group_id, partitions))
    group_error, answers = cast(tuple[ErrorCode, tuple[tuple[str, int, ErrorCode], ...]], outcome.response)
    if group_error is E.NONE and error is not E.NONE:
        group_error = error
    topics: dict[str, list[oc.PartitionError]] = {}
    for topic, partition, code in answers:
        topics.setdefault(topic, []).append(oc.PartitionError(partition, int(code)))
    return oc.OffsetDeleteResponse(int(group_error), tuple(oc.TopicErrors(t, tuple(ps)) for t, ps in topics.items()))


async def describe(coord: GroupCoordinator, req: ga.DescribeGroupsRequest, version: int,
                   client: ClientInfo) -> ga.DescribeGroupsResponse:
    out = []
    for group_id in req.groups:
        try:
            partition = coord.partition_for(group_id)
        except CoordinatorError as e:
            out.append(ga.DescribedGroup(int(e.code), group_id, "", "", ""))
            continue
        group = coord.groups(partition).groups.get(group_id)
        operations = GROUP_OPERATIONS_BITS if req.include_authorized_operations \
            else ga.AUTHORIZED_OPERATIONS_OMITTED  # Kafka without an authorizer: all of them
        if group is None:  # Kafka (v0-v5): an unknown group is described as Dead, no error
            out.append(ga.DescribedGroup(0, group_id, GroupState.DEAD.value, "", "", (), operations))
            continue
        stable = group.state is GroupState.STABLE
        members = tuple(ga.DescribedGroupMember(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            m.metadata_for(group.protocol_name) if stable else b"", m.assignment if stable else b"")
            for m in group.members.values())
        out.append(ga.DescribedGroup(0, group_id, group.state.value, group.protocol_type or "",
                                     (group.protocol_name or "") if stable else "", members, operations))
    return ga.DescribeGroupsResponse(tuple(out))


async def list_(coord: GroupCoordinator, req: ga.ListGroupsRequest, version: int,
                client: ClientInfo) -> ga.ListGroupsResponse:
    coord.ensure_started()
    error = E.COORDINATOR_LOAD_IN_PROGRESS if coord.loading() else E.NONE
    # v4 (KIP-518): states compared case-insensitively; a group known only by its committed
    # offsets is an Empty group, as Kafka loads it.
    wanted = {state.lower() for state in req.states_filter}
    # v5 (KIP-848): types compared case-insensitively; every group here is a classic one
    if req.types_filter and CLASSIC_GROUP_TYPE not in {t.lower() for t in req.types_filter}:
        return ga.ListGroupsResponse(int(error), ())
    groups = []
    for partition in coord.active_partitions():
        image = coord.groups(partition)
        for group_id in sorted(set(image.groups) | set(image.offsets)):
            group = image.groups.get(group_id)
            state = group.state.value if group else GroupState.EMPTY.value
            if wanted and state.lower() not in wanted:
                continue
            groups.append(ga.ListedGroup(group_id, (group.protocol_type or "") if group else "", state,
                                         CLASSIC_GROUP_TYPE))
    return ga.ListGroupsResponse(int(error), tuple(groups))


async def delete(coord: GroupCoordinator, req: ga.DeleteGroupsRequest, version: int,
                 client: ClientInfo) -> ga.DeleteGroupsResponse:
    results = []
    for group_id in req.groups_names:
        try:
            partition = coord.partition_for(group_id)
        except CoordinatorError as e:
            results.append(ga.DeletableGroupResult(group_id, int(e.code)))
            continue
        outcome, error = await coord.run(partition, group_id, partial(_delete_group, group_id=group_id,
                                                                      now_ms=coord.now_ms()))
        code = outcome.response
        if code is E.NONE:
            code = error
        results.append(ga.DeletableGroupResult(group_id, int(code)))  # type: ignore[call-overload]
    return ga.DeleteGroupsResponse(tuple(results))


def _delete_group(state: GroupsImage, group_id: str, now_ms: int) -> Outcome:
    group = state.groups.get(group_id)
    offsets = state.offsets.get(group_id)
    if group is None and offsets:  # offsets of standalone commits only: an Empty group
        group = ClassicGroup(group_id)
    outcome = delete_group(group, offsets, group_id, now_ms)
    if outcome.response is not E.NONE:  # refused: nothing written, nothing kept
        return Outcome(state.groups.get(group_id), response=outcome.response)
    return outcome
