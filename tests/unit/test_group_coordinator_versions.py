"""broker/group_coordinator at Kafka 3.9's newest group versions (issue 18), through the
broker's RequestHandler over a real ReplicaManager and log: JoinGroup v9, SyncGroup v5,
OffsetCommit v0/v1/v9, OffsetFetch v0/v8/v9, ListGroups v5 and LeaveGroup v5 on one group
life, and the errors those versions added."""

from __future__ import annotations

from broker.request_handler import RequestHandler
from common.errors import ErrorCode as E
from typing import Any

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
from tests import group_wire as gw
from tests.unit.test_request_handler import call

PROTOCOLS = (("range", SUBSCRIPTION),)


async def join_v9(handler: RequestHandler, member_id: str = "") -> Any:
    request = gw.join(9, HERE, 10000, 30000, member_id, None, "consumer", PROTOCOLS, "first start")
    return await call(handler, ApiKey.JOIN_GROUP, 9, request, *gw.codec(ApiKey.JOIN_GROUP))


async def sync_v5(handler: RequestHandler, member_id: str, generation: int, protocol_name: str | None,
                  assignments: tuple[tuple[str, bytes], ...] = ()) -> Any:
    request = gw.sync(5, HERE, generation, member_id, None, assignments, "consumer", protocol_name)
    return await call(handler, ApiKey.SYNC_GROUP, 5, request, *gw.codec(ApiKey.SYNC_GROUP))


async def commit(handler: RequestHandler, version: int, group: str, generation: int, member: str,
                 offset: int) -> int:
    request = gw.commit(version, group, generation, member, [("orders", 0, offset, -1, "m")])
    response = await call(handler, ApiKey.OFFSET_COMMIT, version, request, *gw.codec(ApiKey.OFFSET_COMMIT))
    return int(response.topics[0].partitions[0].error_code)


async def list_groups(handler: RequestHandler, types: tuple[str, ...]) -> Any:
    return await call(handler, ApiKey.LIST_GROUPS, 5, gw.list_groups(5, (), types), *gw.codec(ApiKey.LIST_GROUPS))


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
                           ((member, b"assignment"),))
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
    assert await commit(handler, 1, other, -1, "", 7) == 0  # v1: by hand too, with its commit timestamp
    v0 = await call(handler, ApiKey.OFFSET_FETCH, 0, gw.fetch(0, other, (("orders", (0,)),)),
                    *gw.codec(ApiKey.OFFSET_FETCH))
    assert [(p.partition_index, p.committed_offset) for t in v0.topics for p in t.partitions] == [(0, 7)]

    # OffsetFetch v8/v9: several groups in one request, each with its own answer or error
    for version in (8, 9):
        request = gw.fetch_groups(version, False, (HERE, None, member, generation),
                                  (other, (("orders", (0, 1)),), None, -1), (ELSEWHERE, None, None, -1),
                                  ("", None, None, -1))
        fetched = await call(handler, ApiKey.OFFSET_FETCH, version, request, *gw.codec(ApiKey.OFFSET_FETCH))
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
    left = await call(handler, ApiKey.LEAVE_GROUP, 5, gw.leave(5, HERE, (member, None, "the consumer is being closed")),
                      *gw.codec(ApiKey.LEAVE_GROUP))
    assert (left.error_code, [(m.member_id, m.error_code) for m in left.members]) == (0, [(member, 0)])
    assert [g.group_state for g in (await list_groups(handler, ())).groups if g.group_id == HERE] == ["Empty"]
    await handler.close()


async def test_join_v6_gets_an_empty_protocol_name_where_v7_gets_null(broker) -> None:  # noqa: F811
    new_handler, _ = broker
    handler = new_handler()
    await loaded(handler)
    for version, expected in ((6, ""), (7, None)):
        request = gw.join(version, HERE, 10000, 30000, "", None, "consumer", PROTOCOLS)
        answer = await call(handler, ApiKey.JOIN_GROUP, version, request, *gw.codec(ApiKey.JOIN_GROUP))
        assert (answer.error_code, answer.protocol_name) == (E.MEMBER_ID_REQUIRED, expected)
    await handler.close()
