"""broker/group_coordinator at Kafka 3.9's newest group versions (issue 18), through the
broker's RequestHandler over a real ReplicaManager and log: JoinGroup v9, SyncGroup v5,
OffsetCommit v0/v1/v9, OffsetFetch v0/v8/v9, ListGroups v5 and LeaveGroup v5 on one group
life, and the errors those versions added."""

from __future__ import annotations

from broker.request_handler import RequestHandler
from common.errors import ErrorCode as E
from common.protocol import group_admin as ga
from common.protocol import group_membership as gm
from common.protocol import join_group as jg
from common.protocol import offset_commit as oc
from common.protocol import offset_fetch as of
from common.protocol.api_keys import ApiKey
from groups.partitioner import coordinator_partition
from tests.unit.test_group_coordinator import (  # noqa: F401 - `broker` is a fixture
    ELSEWHERE,
    HERE,
    OFFSETS_TP,
    SUBSCRIPTION,
    broker,
    loaded,
)
from tests.unit.test_request_handler import call

PROTOCOLS = (jg.JoinGroupRequestProtocol("range", SUBSCRIPTION),)


async def join_v9(handler: RequestHandler, member_id: str = "") -> jg.JoinGroupResponse:
    request = jg.JoinGroupRequest(HERE, 10000, 30000, member_id, None, "consumer", PROTOCOLS, "first start")
    return await call(handler, ApiKey.JOIN_GROUP, 9, request, jg.encode_join_group_request,
                      jg.decode_join_group_response)


async def sync_v5(handler: RequestHandler, member_id: str, generation: int, protocol_name: str | None,
                  assignments: tuple[jg.SyncGroupRequestAssignment, ...] = ()) -> jg.SyncGroupResponse:
    request = jg.SyncGroupRequest(HERE, generation, member_id, None, assignments, "consumer", protocol_name)
    return await call(handler, ApiKey.SYNC_GROUP, 5, request, jg.encode_sync_group_request,
                      jg.decode_sync_group_response)


async def commit(handler: RequestHandler, version: int, group: str, generation: int, member: str,
                 offset: int) -> int:
    request = oc.OffsetCommitRequest(group, generation, member, (oc.OffsetCommitRequestTopic(
        "orders", (oc.OffsetCommitRequestPartition(0, offset, -1, "m", commit_timestamp=-1),)),))
    response = await call(handler, ApiKey.OFFSET_COMMIT, version, request, oc.encode_offset_commit_request,
                          oc.decode_offset_commit_response)
    return response.topics[0].partitions[0].error_code


async def list_groups(handler: RequestHandler, types: tuple[str, ...]) -> ga.ListGroupsResponse:
    return await call(handler, ApiKey.LIST_GROUPS, 5, ga.ListGroupsRequest((), types),
                      ga.encode_list_groups_request, ga.decode_list_groups_response)


async def test_a_group_at_the_newest_versions(broker) -> None:  # noqa: F811
    new_handler, replicas = broker
    handler = new_handler()
    await loaded(handler)
    first = await join_v9(handler)
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.protocol_name is None and first.protocol_type is None
    joined = await join_v9(handler, first.member_id)
    assert (joined.error_code, joined.protocol_type, joined.protocol_name, joined.leader, joined.skip_assignment) == (
        0, "consumer", "range", first.member_id, False)
    member, generation = joined.member_id, joined.generation_id
    # SyncGroup v5: a protocol name other than the group's is refused and stores nothing
    end = replicas.get_partition(OFFSETS_TP).log.log_end_offset
    assert (await sync_v5(handler, member, generation, "roundrobin")).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    # v5 makes both mandatory: a null one is refused before any other check
    assert (await sync_v5(handler, member, generation, None)).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert replicas.get_partition(OFFSETS_TP).log.log_end_offset == end
    synced = await sync_v5(handler, member, generation, "range",
                           (jg.SyncGroupRequestAssignment(member, b"assignment"),))
    assert (synced.error_code, synced.assignment, synced.protocol_type, synced.protocol_name) == (
        0, b"assignment", "consumer", "range")

    # OffsetCommit v9: the generation is the classic member's epoch
    assert await commit(handler, 9, HERE, generation, member, 42) == 0
    assert await commit(handler, 9, HERE, generation + 1, member, 43) == E.ILLEGAL_GENERATION
    # an unknown group with a generation: GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before
    other = "g3"  # coordinated here too
    assert coordinator_partition(other, 2) == 0
    assert await commit(handler, 9, other, 1, "m", 1) == E.GROUP_ID_NOT_FOUND
    assert await commit(handler, 8, other, 1, "m", 1) == E.ILLEGAL_GENERATION
    # OffsetCommit v0 (no membership) is a standalone commit, read back by OffsetFetch v0
    assert await commit(handler, 0, other, -1, "", 7) == 0
    v0 = await call(handler, ApiKey.OFFSET_FETCH, 0, of.OffsetFetchRequest(other, (of.OffsetFetchRequestTopic(
        "orders", (0,)),)), of.encode_offset_fetch_request, of.decode_offset_fetch_response)
    assert [(p.partition_index, p.committed_offset) for t in v0.topics for p in t.partitions] == [(0, 7)]

    # OffsetFetch v8/v9: several groups in one request, each with its own answer or error
    for version in (8, 9):
        request = of.OffsetFetchRequest("", None, False, (
            of.OffsetFetchRequestGroup(HERE, None, member, generation),
            of.OffsetFetchRequestGroup(other, (of.OffsetFetchRequestTopic("orders", (0, 1)),)),
            of.OffsetFetchRequestGroup(ELSEWHERE, None), of.OffsetFetchRequestGroup("", None)))
        fetched = await call(handler, ApiKey.OFFSET_FETCH, version, request, of.encode_offset_fetch_request,
                             of.decode_offset_fetch_response)
        assert [(g.group_id, g.error_code, [(p.partition_index, p.committed_offset)
                                            for t in g.topics for p in t.partitions]) for g in fetched.groups] == [
            (HERE, 0, [(0, 42)]), (other, 0, [(0, 7), (1, -1)]), (ELSEWHERE, E.NOT_COORDINATOR, []),
            ("", E.INVALID_GROUP_ID, [])]

    # ListGroups v5: every group is a classic one
    listed = await list_groups(handler, ())
    assert sorted((g.group_id, g.group_state, g.group_type) for g in listed.groups) == [
        (HERE, "Stable", "classic"), (other, "Empty", "classic")]
    assert [g.group_id for g in (await list_groups(handler, ("Classic",))).groups] == [HERE, other]
    assert (await list_groups(handler, ("consumer",))).groups == ()

    # LeaveGroup v5 with a reason: the group empties
    left = await call(handler, ApiKey.LEAVE_GROUP, 5, gm.LeaveGroupRequest(HERE, (gm.MemberIdentity(
        member, None, "the consumer is being closed"),)), gm.encode_leave_group_request, gm.decode_leave_group_response)
    assert (left.error_code, [(m.member_id, m.error_code) for m in left.members]) == (0, [(member, 0)])
    assert [g.group_state for g in (await list_groups(handler, ())).groups if g.group_id == HERE] == ["Empty"]
    await handler.close()


async def test_join_v6_gets_an_empty_protocol_name_where_v7_gets_null(broker) -> None:  # noqa: F811
    new_handler, _ = broker
    handler = new_handler()
    await loaded(handler)
    request = jg.JoinGroupRequest(HERE, 10000, 30000, "", None, "consumer", PROTOCOLS)
    for version, expected in ((6, ""), (7, None)):
        answer = await call(handler, ApiKey.JOIN_GROUP, version, request, jg.encode_join_group_request,
                            jg.decode_join_group_response)
        assert (answer.error_code, answer.protocol_name) == (E.MEMBER_ID_REQUIRED, expected)
    await handler.close()
