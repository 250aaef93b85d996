"""Group API requests in, responses out: kio's generated messages ↔ the `groups/` rules.

Each handler is a plain coroutine `(coordinator, request, version, client) -> response`
for the broker's dispatch table: it reads kio's request of the version the client sent and
answers that version's response (`messages.build` drops the fields a version lacks), except
OffsetCommit v0/v1, read into common/protocol/offset_commit.py's dataclasses (kio has no
v0/v1; their field names are kio's, `getattr` supplies the fields they lack). Errors that
concern the whole request (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...) come from
`GroupCoordinator.partition_for`. A rule runs inside `GroupCoordinator.run` on the
partition's current groups image.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, Final, TypeVar, cast

from broker.group_coordinator.runtime import CoordinatorError, GroupCoordinator
from broker.handlers.context import ClientInfo
from common.errors import ErrorCode
from common.protocol import acls, messages
from common.protocol import offset_commit as oc
from common.protocol.api_keys import ApiKey
from common.protocol.messages import NO_THROTTLE, build, error_code
from common.units import SECOND_MS
from groups.consumer_group import ConsumerGroup
from groups.consumer_heartbeat import consumer_group_tombstones
from groups.records import OffsetCommitKey
from groups.group import ClassicGroup
from groups.image import GroupsImage
from groups.join import JoinRequest, SyncRequest, join_group, sync_group
from groups.membership import LeaveResult, LeavingMember, heartbeat, leave_group
from groups.offsets import (
    CommitPartition,
    CommitRequest,
    FetchedOffset,
    commit_offsets,
    consumer_member_error,
    delete_group,
    delete_offsets,
)
from groups.outcome import JoinResult, Outcome, SyncResult
from groups.state import GroupState
from metadata.image import MetadataImage

E = ErrorCode
JOIN_MARGIN_MS: Final = 5 * SECOND_MS  # a parked JoinGroup waits its rebalance timeout plus this, at most
GROUP_OPERATIONS_BITS: Final = acls.operations_bitfield(acls.GROUP_OPERATIONS)  # DescribeGroups v3+
AUTHORIZED_OPERATIONS_OMITTED: Final = -2147483648  # Kafka's INT32_MIN: "not asked for" (DescribeGroups)
CLASSIC_GROUP_TYPE: Final = "classic"  # Kafka's Group.GroupType.CLASSIC (ListGroups v5)
CONSUMER_GROUP_TYPE: Final = "consumer"  # Group.GroupType.CONSUMER: KIP-848's groups
CONSUMER_PROTOCOL_TYPE: Final = "consumer"  # what Kafka lists as a consumer group's protocol type
NO_OFFSET: Final = -1
NO_EPOCH: Final = -1
R = TypeVar("R", JoinResult, SyncResult)


# ---- JoinGroup, SyncGroup -----------------------------------------------------------------


def _join_response(version: int, result: JoinResult) -> Any:
    m = messages.response_module(ApiKey.JOIN_GROUP, version)
    return build(m.JoinGroupResponse, throttle_time=NO_THROTTLE, error_code=error_code(result.error),
                 generation_id=result.generation_id, protocol_type=result.protocol_type,
                 # Kafka's JoinGroupResponse: no null name before v7, "" instead
                 protocol_name=result.protocol_name if version >= 7 else result.protocol_name or "",
                 leader=result.leader, skip_assignment=result.skip_assignment, member_id=result.member_id,
                 members=tuple(build(m.JoinGroupResponseMember, member_id=j.member_id,
                                     group_instance_id=j.group_instance_id, metadata=j.metadata)
                               for j in result.members))


def _sync_response(version: int, result: SyncResult) -> Any:
    m = messages.response_module(ApiKey.SYNC_GROUP, version)
    return build(m.SyncGroupResponse, throttle_time=NO_THROTTLE, error_code=error_code(result.error),
                 protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                 assignment=result.assignment)


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


async def join(coord: GroupCoordinator, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's JoinGroupRequest of `version`."""
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return _join_response(version, JoinResult(e.code, member_id=req.member_id))
    instance: str | None = getattr(req, "group_instance_id", None)  # v5+
    prefix = instance or client.client_id or "member"
    new_id = coord.new_member_id(prefix)
    session_ms = messages.milliseconds(req.session_timeout)
    # v0 has no rebalance timeout: the session timeout stands for it, as Kafka does
    rebalance_ms = messages.milliseconds(getattr(req, "rebalance_timeout", req.session_timeout))
    core = JoinRequest(req.group_id, req.member_id, instance, client.client_id, client.host,
                       session_ms, rebalance_ms, req.protocol_type,
                       tuple((p.name, p.metadata) for p in req.protocols), version >= 4,
                       supports_skip_assignment=version >= 9, reason=getattr(req, "reason", None))
    now_ms = coord.now_ms()
    if _mixed(coord, partition, req.group_id):  # KIP-848: a classic member of a consumer group
        return _join_response(version, await coord.classic_member_join(partition, core, new_id))
    result = await _answer_or_park(
        coord, partition, req.group_id, JoinResult,
        lambda state: _join_rule(state, core, new_id, now_ms, coord),
        lambda: coord.park_join(partition, req.group_id, req.member_id or new_id, rebalance_ms + JOIN_MARGIN_MS))
    return _join_response(version, result)


def _mixed(coord: GroupCoordinator, partition: int, group_id: str) -> bool:
    """Whether the group is a KIP-848 group with members: its classic members' requests are
    consumer group rules then (Kafka's classicGroupJoinToConsumerGroup and its siblings)."""
    consumer = coord.consumer_group(partition, group_id)
    return consumer is not None and bool(consumer.members)


def _join_rule(state: GroupsImage, core: JoinRequest, new_id: str, now_ms: int, coord: GroupCoordinator) -> Outcome:
    """JoinGroup on the group of that id. A KIP-848 group with members is handled by
    `GroupCoordinator.classic_member_join` before this rule; should it have gained members
    since, the member is told to join again (REBALANCE_IN_PROGRESS) and goes there. An empty
    one is deleted first (its records tombstoned, its offsets kept) and the group starts again
    as a classic one, as Kafka converts an empty group."""
    consumer = state.consumer_groups.get(core.group_id)
    if consumer is None:
        return join_group(state.groups.get(core.group_id), core, new_member_id=new_id, now_ms=now_ms,
                          config=coord.config)
    if consumer.members:
        return Outcome(None, response=JoinResult(E.REBALANCE_IN_PROGRESS, member_id=core.member_id))
    joined = join_group(None, core, new_member_id=new_id, now_ms=now_ms, config=coord.config)
    return replace(joined, records=consumer_group_tombstones(core.group_id) + joined.records,
                   reason=joined.reason or "a classic member joined the empty consumer group: now a classic group")


async def sync(coord: GroupCoordinator, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's SyncGroupRequest of `version`."""
    protocol_type: str | None = getattr(req, "protocol_type", None)  # v5+
    protocol_name: str | None = getattr(req, "protocol_name", None)
    if version >= 5 and (protocol_type is None or protocol_name is None):
        # Kafka's areMandatoryProtocolTypeAndNamePresent, checked before anything else
        return _sync_response(version, SyncResult(E.INCONSISTENT_GROUP_PROTOCOL))
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return _sync_response(version, SyncResult(e.code))
    core = SyncRequest(req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None),
                       tuple((a.member_id, a.assignment) for a in req.assignments), protocol_type, protocol_name)
    if _mixed(coord, partition, req.group_id):
        return _sync_response(version, await coord.classic_member_sync(partition, core))
    group = coord.groups(partition).groups.get(req.group_id)
    wait_ms = max((m.rebalance_timeout_ms for m in (group.members.values() if group else ())), default=0) \
        + JOIN_MARGIN_MS
    now_ms = coord.now_ms()
    result = await _answer_or_park(
        coord, partition, req.group_id, SyncResult,
        lambda state: sync_group(state.groups.get(req.group_id), core, now_ms),
        lambda: coord.park_sync(partition, req.group_id, req.member_id, wait_ms))
    return _sync_response(version, result)


# ---- Heartbeat, LeaveGroup ----------------------------------------------------------------


def _heartbeat_response(version: int, code: int) -> Any:
    m = messages.response_module(ApiKey.HEARTBEAT, version)
    return build(m.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=error_code(code))


async def heartbeat_(coord: GroupCoordinator, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's HeartbeatRequest of `version`."""
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return _heartbeat_response(version, e.code)
    now_ms = coord.now_ms()
    instance: str | None = getattr(req, "group_instance_id", None)  # v3+
    if _mixed(coord, partition, req.group_id):
        return _heartbeat_response(version, await coord.classic_member_heartbeat(
            partition, req.group_id, req.member_id, instance, req.generation_id))
    outcome, _ = await coord.run(partition, req.group_id, lambda state: heartbeat(
        state.groups.get(req.group_id), req.group_id, req.member_id, instance, req.generation_id, now_ms))
    return _heartbeat_response(version, cast(ErrorCode, outcome.response))


async def leave(coord: GroupCoordinator, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's LeaveGroupRequest of `version` (v0-v2: one member_id; v3+: members)."""
    m = messages.response_module(ApiKey.LEAVE_GROUP, version)
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return build(m.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error_code(e.code), members=())
    if version < 3:
        leaving: tuple[LeavingMember, ...] = (LeavingMember(req.member_id, None, None),)
    else:
        leaving = tuple(LeavingMember(i.member_id, i.group_instance_id, getattr(i, "reason", None))
                        for i in req.members)
    now_ms = coord.now_ms()
    if _mixed(coord, partition, req.group_id):
        result: object = await coord.classic_member_leave(partition, req.group_id, leaving)
    else:
        outcome, _ = await coord.run(partition, req.group_id, lambda state: leave_group(
            state.groups.get(req.group_id), req.group_id, leaving, now_ms, coord.config))
        result = outcome.response
    assert isinstance(result, LeaveResult)
    error = error_code(result.error)
    if version < 3:  # one member: its error is the request's
        if error == E.NONE and result.members:
            error = error_code(result.members[0][1])
        return build(m.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error)
    members = tuple(m.MemberResponse(member_id=left.member_id, group_instance_id=left.group_instance_id,
                                     error_code=error_code(code)) for left, code in result.members)
    return build(m.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error, members=members)


# ---- OffsetCommit, OffsetFetch, OffsetDelete ----------------------------------------------


def _partition_exists(image: MetadataImage) -> Callable[[str, int], bool]:
    def exists(topic: str, partition: int) -> bool:
        t = image.topic(topic)
        return t is not None and partition in t.partitions
    return exists


def _commit_response(version: int, answers: dict[str, list[tuple[int, int]]]) -> Any:
    m = messages.response_module(ApiKey.OFFSET_COMMIT, oc.schema_version(version))
    return build(m.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(
        m.OffsetCommitResponseTopic(name=t, partitions=tuple(
            m.OffsetCommitResponsePartition(partition_index=p, error_code=error_code(code)) for p, code in ps))
        for t, ps in answers.items()))


async def commit(coord: GroupCoordinator, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's OffsetCommitRequest of `version` (oc.OldCommitRequest at v0/v1)."""
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return _commit_response(version, {t.name: [(p.partition_index, e.code) for p in t.partitions]
                                          for t in req.topics})
    parts = tuple(CommitPartition(t.name, p.partition_index, p.committed_offset,
                                  getattr(p, "committed_leader_epoch", NO_EPOCH),  # v6+
                                  p.committed_metadata,
                                  getattr(p, "commit_timestamp", oc.DEFAULT_COMMIT_TIMESTAMP))  # v1
                  for t in req.topics for p in t.partitions)
    retention = getattr(req, "retention_time", None)  # v2-v4
    retention_ms = oc.DEFAULT_RETENTION_TIME_MS if retention is None else messages.milliseconds(retention)
    # retention_time_ms (v2-v4) only sets an expire timestamp when given (Kafka >= 2.1)
    expire = coord.now_ms() + retention_ms if retention_ms >= 0 else -1
    core = CommitRequest(req.group_id, req.generation_id_or_member_epoch, req.member_id,
                         getattr(req, "group_instance_id", None), parts, expire,
                         E.GROUP_ID_NOT_FOUND if version >= 9 else E.ILLEGAL_GENERATION)
    now_ms, exists = coord.now_ms(), _partition_exists(coord.image())

    def rule(state: GroupsImage) -> Outcome:
        consumer = state.consumer_groups.get(req.group_id)
        if consumer is not None:  # KIP-848: the member epoch stands for the generation
            return _consumer_commit(consumer, core, now_ms, coord, exists)
        return commit_offsets(state.groups.get(req.group_id), core, now_ms=now_ms, config=coord.config,
                              partition_exists=exists)
    outcome, error = await coord.run(partition, req.group_id, rule)
    answers: dict[str, list[tuple[int, int]]] = {}
    for topic, index, code in outcome.response:  # type: ignore[attr-defined]
        if code is E.NONE and error is not E.NONE:
            code = error
        answers.setdefault(topic, []).append((index, code))
    return _commit_response(version, answers)


def _consumer_commit(group: ConsumerGroup, core: CommitRequest, now_ms: int, coord: GroupCoordinator,
                     exists: Callable[[str, int], bool]) -> Outcome:
    """OffsetCommit for a KIP-848 group (Kafka's ConsumerGroup.validateOffsetCommit): a member
    commits with its current member epoch (an older one: STALE_MEMBER_EPOCH, so it refreshes
    its epoch and retries; ILLEGAL_GENERATION for a classic member); without a member id and epoch (an admin tool) only while the group
    is empty. The offsets themselves are stored as any group's."""
    error = consumer_member_error(group, core.member_id, core.generation_id, commit=True)
    if error is not E.NONE:
        return Outcome(None, response=tuple((p.topic, p.partition, error) for p in core.partitions))
    stored = commit_offsets(None, replace(core, generation_id=-1, member_id=""), now_ms=now_ms, config=coord.config,
                            partition_exists=exists)
    return Outcome(None, stored.records, stored.response)  # no classic group comes of it


GroupOffsets = tuple[int, dict[str, list[FetchedOffset]]]  # (error, offsets by topic)


def _committed(coord: GroupCoordinator, partition: int, group_id: str,
               wanted: tuple[tuple[str, tuple[int, ...]], ...] | None, *, require_stable: bool) -> list[FetchedOffset]:
    """The one place OffsetFetch reads committed offsets. `require_stable` (v7+, KIP-447):
    a partition with a pending transactional offset answers UNSTABLE_OFFSET_COMMIT."""
    return list(coord.fetch_offsets(partition, group_id, wanted, require_stable=require_stable))


def _fetch_group(coord: GroupCoordinator, group_id: str, topics: Any, *, require_stable: bool,
                 member_id: str | None = None, member_epoch: int = NO_EPOCH) -> GroupOffsets:
    """One group's committed offsets, or its error (with no topics) when this broker cannot
    answer for it. A classic group checks no member id or epoch (OffsetFetch v9): Kafka's
    ClassicGroup.validateOffsetFetch only refuses a Dead group, which tidelog never keeps. A
    KIP-848 group checks them as Kafka's ConsumerGroup.validateOffsetFetch: none (an admin
    client), or a member at its current epoch (UNKNOWN_MEMBER_ID; STALE_MEMBER_EPOCH, or
    ILLEGAL_GENERATION for a classic member: groups.offsets.consumer_member_error)."""
    if not group_id:
        return E.INVALID_GROUP_ID, {}
    try:
        partition = coord.partition_for(group_id)
    except CoordinatorError as e:
        return e.code, {}
    consumer = coord.consumer_group(partition, group_id)
    error = E.NONE if consumer is None else consumer_member_error(consumer, member_id, member_epoch, commit=False)
    if error is not E.NONE:
        return error, {}
    wanted = None if topics is None else tuple((t.name, tuple(t.partition_indexes)) for t in topics)
    answers: dict[str, list[FetchedOffset]] = {}
    for f in _committed(coord, partition, group_id, wanted, require_stable=require_stable):
        answers.setdefault(f.topic, []).append(f)
    return E.NONE, answers


def _fetched_topics(topic_type: Any, partition_type: Any, answers: dict[str, list[FetchedOffset]]) -> tuple[Any, ...]:
    return tuple(topic_type(name=t, partitions=tuple(build(
        partition_type, partition_index=f.partition, committed_offset=f.offset, committed_leader_epoch=f.leader_epoch,
        metadata=f.metadata, error_code=error_code(f.error)) for f in fs)) for t, fs in answers.items())


async def fetch(coord: GroupCoordinator, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's OffsetFetchRequest of `version` (v0: v1's classes, the same bytes)."""
    m = messages.response_module(ApiKey.OFFSET_FETCH, version)
    require_stable: bool = getattr(req, "require_stable", False)  # v7+
    if version >= 8:  # KIP-709: each group answered on its own, errors included
        groups = []
        for g in req.groups:
            code, answers = _fetch_group(coord, g.group_id, g.topics, require_stable=require_stable,
                                         member_id=getattr(g, "member_id", None),  # v9+
                                         member_epoch=getattr(g, "member_epoch", NO_EPOCH))
            groups.append(m.OffsetFetchResponseGroup(
                group_id=g.group_id, error_code=error_code(code),
                topics=_fetched_topics(m.OffsetFetchResponseTopics, m.OffsetFetchResponsePartitions, answers)))
        return m.OffsetFetchResponse(throttle_time=NO_THROTTLE, groups=tuple(groups))
    code, answers = _fetch_group(coord, req.group_id, req.topics, require_stable=require_stable)
    if code == E.NONE:
        topics = _fetched_topics(m.OffsetFetchResponseTopic, m.OffsetFetchResponsePartition, answers)
    elif version >= 2:
        topics = ()
    else:  # v0-v1 have no top-level error: every asked partition carries it
        topics = _fetched_topics(m.OffsetFetchResponseTopic, m.OffsetFetchResponsePartition, {
            t.name: [FetchedOffset(t.name, p, NO_OFFSET, NO_EPOCH, "", error_code(code)) for p in t.partition_indexes]
            for t in req.topics or ()})
    return build(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=topics, error_code=error_code(code))


async def offset_delete(coord: GroupCoordinator, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's OffsetDeleteRequest of `version`."""
    m = messages.response_module(ApiKey.OFFSET_DELETE, version)
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return m.OffsetDeleteResponse(error_code=error_code(e.code), throttle_time=NO_THROTTLE, topics=())
    partitions = tuple((t.name, p.partition_index) for t in req.topics for p in t.partitions)
    outcome, error = await coord.run(partition, req.group_id, lambda state: delete_offsets(
        state.groups.get(req.group_id), state.offsets.get(req.group_id), req.group_id, partitions))
    group_error, answers = cast(tuple[ErrorCode, tuple[tuple[str, int, ErrorCode], ...]], outcome.response)
    if group_error is E.NONE and error is not E.NONE:
        group_error = error
    topics: dict[str, list[Any]] = {}
    for topic, index, code in answers:
        topics.setdefault(topic, []).append(m.OffsetDeleteResponsePartition(partition_index=index,
                                                                            error_code=error_code(code)))
    return m.OffsetDeleteResponse(error_code=error_code(group_error), throttle_time=NO_THROTTLE, topics=tuple(
        m.OffsetDeleteResponseTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()))


# ---- DescribeGroups, ListGroups, DeleteGroups ---------------------------------------------


async def describe(coord: GroupCoordinator, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's DescribeGroupsRequest of `version`."""
    m = messages.response_module(ApiKey.DESCRIBE_GROUPS, version)

    def described(code: int, group_id: str, state: str = "", protocol_type: str = "", protocol_data: str = "",
                  members: tuple[Any, ...] = (), operations: int = AUTHORIZED_OPERATIONS_OMITTED) -> Any:
        return build(m.DescribedGroup, error_code=error_code(code), group_id=group_id, group_state=state,
                     protocol_type=protocol_type, protocol_data=protocol_data, members=members,
                     authorized_operations=operations)

    out = []
    for group_id in req.groups:
        try:
            partition = coord.partition_for(group_id)
        except CoordinatorError as e:
            out.append(described(e.code, group_id))
            continue
        group = coord.groups(partition).groups.get(group_id)
        operations = GROUP_OPERATIONS_BITS if getattr(req, "include_authorized_operations", False) \
            else AUTHORIZED_OPERATIONS_OMITTED  # Kafka without an authorizer: all of them
        if group is None:  # Kafka (v0-v5): an unknown group is described as Dead, no error; a KIP-848
            # group too (Kafka 4 answers GROUP_ID_NOT_FOUND "is not a classic group" from v6 only)
            out.append(described(E.NONE, group_id, GroupState.DEAD.value, operations=operations))
            continue
        stable = group.state is GroupState.STABLE
        members = tuple(build(
            m.DescribedGroupMember, member_id=g.member_id, group_instance_id=g.group_instance_id,
            client_id=g.client_id, client_host=g.client_host,
            member_metadata=g.metadata_for(group.protocol_name) if stable else b"",
            member_assignment=g.assignment if stable else b"") for g in group.members.values())
        out.append(described(E.NONE, group_id, group.state.value, group.protocol_type or "",
                             (group.protocol_name or "") if stable else "", members, operations))
    return build(m.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(out))


async def list_(coord: GroupCoordinator, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's ListGroupsRequest of `version`."""
    m = messages.response_module(ApiKey.LIST_GROUPS, version)
    coord.ensure_started()
    error = E.COORDINATOR_LOAD_IN_PROGRESS if coord.loading() else E.NONE
    # v4 (KIP-518): states compared case-insensitively; a group known only by its committed
    # offsets is an Empty group, as Kafka loads it.
    wanted = {state.lower() for state in getattr(req, "states_filter", ())}
    # v5 (KIP-848): types compared case-insensitively: classic, or consumer (KIP-848's groups)
    types = {t.lower() for t in getattr(req, "types_filter", ())}
    groups = []
    if not types or CONSUMER_GROUP_TYPE in types:
        for partition in coord.active_partitions():
            for group_id, consumer in sorted(coord.groups(partition).consumer_groups.items()):
                if not wanted or consumer.state.value.lower() in wanted:
                    groups.append(build(m.ListedGroup, group_id=group_id, group_state=consumer.state.value,
                                        protocol_type=CONSUMER_PROTOCOL_TYPE, group_type=CONSUMER_GROUP_TYPE))
    if not types or CLASSIC_GROUP_TYPE in types:
        for partition in coord.active_partitions():
            image = coord.groups(partition)
            for group_id in sorted(set(image.groups) | set(image.offsets)):
                if group_id in image.consumer_groups:
                    continue
                group = image.groups.get(group_id)
                state = group.state.value if group else GroupState.EMPTY.value
                if wanted and state.lower() not in wanted:
                    continue
                groups.append(build(m.ListedGroup, group_id=group_id, group_state=state,
                                    protocol_type=(group.protocol_type or "") if group else "",
                                    group_type=CLASSIC_GROUP_TYPE))
    return build(m.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=error, groups=tuple(groups))


async def delete(coord: GroupCoordinator, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's DeleteGroupsRequest of `version`."""
    m = messages.response_module(ApiKey.DELETE_GROUPS, version)
    results = []
    for group_id in req.groups_names:
        try:
            partition = coord.partition_for(group_id)
        except CoordinatorError as e:
            results.append(m.DeletableGroupResult(group_id=group_id, error_code=error_code(e.code)))
            continue
        outcome, error = await coord.run(partition, group_id, partial(_delete_group, group_id=group_id,
                                                                      now_ms=coord.now_ms()))
        code = outcome.response
        if code is E.NONE:
            code = error
        results.append(m.DeletableGroupResult(group_id=group_id, error_code=error_code(cast(int, code))))
    return m.DeleteGroupsResponse(throttle_time=NO_THROTTLE, results=tuple(results))


def _delete_group(state: GroupsImage, group_id: str, now_ms: int) -> Outcome:
    group = state.groups.get(group_id)
    offsets = state.offsets.get(group_id)
    consumer = state.consumer_groups.get(group_id)
    if consumer is not None:  # KIP-848: only an empty group; its offsets and its own records go
        if consumer.members:
            return Outcome(group, response=E.NON_EMPTY_GROUP)
        deleted = delete_group(ClassicGroup(group_id), offsets, group_id, now_ms)
        offsets_gone = tuple(r for r in deleted.records if isinstance(r.key, OffsetCommitKey))
        return Outcome(group, offsets_gone + consumer_group_tombstones(group_id), E.NONE, reason="deleted")
    if group is None and offsets:  # offsets of standalone commits only: an Empty group
        group = ClassicGroup(group_id)
    outcome = delete_group(group, offsets, group_id, now_ms)
    if outcome.response is not E.NONE:  # refused: nothing written, nothing kept
        return Outcome(state.groups.get(group_id), response=outcome.response)
    return outcome
