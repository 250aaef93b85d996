"""KIP-848 groups through the broker's request handler: ConsumerGroupHeartbeat and
ConsumerGroupDescribe on kio's messages, OffsetCommit with member epochs, ListGroups and
DescribeGroups of a consumer group, what the log holds, and a reload by a new coordinator
(its members back, their sessions armed again)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from kio.schema.consumer_group_heartbeat.v1.request import TopicPartitions

from broker.group_coordinator.runtime import CoordinatorSettings
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.request_handler import RequestHandler
from common.errors import ErrorCode as E
from common.log_config import LogConfig
from common.protocol.api_keys import ApiKey
from common.protocol.metadata import wire_topic_id
from common.record_batch import iter_batches
from common.records import decode_records
from common.topic_partition import TopicPartition
from groups.consumer_records import ConsumerGroupMetadataKey, decode_record
from groups.group import GroupConfig
from groups.migration_protocol import Subscription, decode_assignment, encode_subscription
from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import Partition, Topic
from tests import group_wire as gw
from tests.log_helpers import NOW
from tests.unit.test_request_handler import ADVERTISED, CLUSTER, ME, FakeAdmin, call, kio_call, replay

GROUP = "g1"
assert coordinator_partition(GROUP, 1) == 0
ORDERS_ID = "AAAAAAAAAAAAAAAAAAAAAQ"  # as the controller mints ids: base64url of 16 bytes
IMAGE = replay(CLUSTER, Topic(GROUP_METADATA_TOPIC_NAME, "OFFSETS"), Partition("OFFSETS", 0, (1,), (1,), leader=1),
               Topic("orders", ORDERS_ID), *(Partition(ORDERS_ID, p, (1,), (1,), leader=1) for p in range(4)))
OFFSETS_TP = TopicPartition(GROUP_METADATA_TOPIC_NAME, 0)
SETTINGS = CoordinatorSettings(GroupConfig(initial_rebalance_delay_ms=0))


@pytest.fixture
def broker(tmp_path):
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, IMAGE, ME), IMAGE)

    def new_handler() -> RequestHandler:
        return RequestHandler(ME, replicas, lambda: IMAGE, ADVERTISED, None, topic_admin=FakeAdmin(),
                              group_settings=SETTINGS)

    yield new_handler, replicas
    log_manager.shutdown()


async def beat(handler: RequestHandler, member: str, epoch: int, owned: list[int] | None = None,
               **fields: Any) -> Any:
    """A v1 heartbeat; `owned` the partitions of orders the member says it owns (None: not sent)."""
    topic_partitions = None if owned is None else tuple(
        TopicPartitions(topic_id=wire_topic_id(ORDERS_ID), partitions=tuple(owned)) for _ in (1,) if owned)
    request: dict[str, Any] = dict(group_id=GROUP, member_id=member, member_epoch=epoch, instance_id=None,
                                   rack_id=None, rebalance_timeout=timedelta(seconds=30), subscribed_topic_names=None,
                                   subscribed_topic_regex=None, server_assignor=None,
                                   topic_partitions=topic_partitions)
    request.update(fields)
    return await kio_call(handler, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, **request)


async def loaded(handler: RequestHandler) -> None:
    for _ in range(100):  # bounded: the partition loads within a few event-loop turns
        if (await beat(handler, "probe", 5)).error_code != E.COORDINATOR_LOAD_IN_PROGRESS:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the offsets partition never loaded")


def assigned(response: Any) -> list[int]:
    assert response.assignment is not None
    return sorted(p for tp in response.assignment.topic_partitions for p in tp.partitions)


async def commit(handler: RequestHandler, member: str, epoch: int) -> int:
    request = gw.commit(9, GROUP, epoch, member, [("orders", 0, 7, 0, "")])
    response = await call(handler, ApiKey.OFFSET_COMMIT, 9, request, *gw.codec(ApiKey.OFFSET_COMMIT))
    return response.topics[0].partitions[0].error_code


async def test_a_consumer_group_life_and_a_reload(broker) -> None:
    new_handler, replicas = broker
    handler = new_handler()
    await loaded(handler)
    a = await beat(handler, "member-a", 0, [], subscribed_topic_names=("orders",))
    assert (a.error_code, a.member_epoch, assigned(a)) == (0, 1, [0, 1, 2, 3])
    assert a.heartbeat_interval == timedelta(seconds=5)
    b = await beat(handler, "member-b", 0, [], subscribed_topic_names=("orders",))
    assert (b.error_code, b.member_epoch, assigned(b)) == (0, 2, [])  # a still owns them all
    revoke = await beat(handler, "member-a", 1, [0, 1, 2, 3])
    assert (revoke.member_epoch, len(assigned(revoke))) == (1, 2)  # keeps two, must give up two
    moved = await beat(handler, "member-a", 1, assigned(revoke))
    assert (moved.member_epoch, moved.assignment) == (2, None)  # unchanged: not sent again
    b = await beat(handler, "member-b", 2, [])
    assert len(assigned(b)) == 2 and set(assigned(b)).isdisjoint(assigned(revoke))

    assert (await beat(handler, "member-a", 3, [])).error_code == E.FENCED_MEMBER_EPOCH
    assert (await beat(handler, "member-a", 0, [], subscribed_topic_names=("orders",), server_assignor="sticky")
            ).error_code == E.UNSUPPORTED_ASSIGNOR
    assert (await beat(handler, "member-c", 0, [], subscribed_topic_regex="(?<=x)y")).error_code \
        == E.INVALID_REGULAR_EXPRESSION
    assert await commit(handler, "member-a", 2) == 0
    assert await commit(handler, "member-a", 1) == E.STALE_MEMBER_EPOCH
    assert await commit(handler, "nobody", 2) == E.UNKNOWN_MEMBER_ID
    for member, epoch, expected in (("member-a", 2, 0), ("member-a", 1, E.STALE_MEMBER_EPOCH),
                                    ("nobody", 2, E.UNKNOWN_MEMBER_ID), (None, -1, 0)):  # None, -1: an admin
        fetched = await call(handler, ApiKey.OFFSET_FETCH, 9, gw.fetch_groups(9, False, (GROUP, None, member, epoch)),
                             *gw.codec(ApiKey.OFFSET_FETCH))
        assert fetched.groups[0].error_code == expected, (member, epoch)
        if expected == 0:
            assert [(t.name, p.committed_offset) for t in fetched.groups[0].topics for p in t.partitions] == [
                ("orders", 7)]

    listed = await kio_call(handler, ApiKey.LIST_GROUPS, 5, states_filter=(), types_filter=("Consumer",))
    assert [(g.group_id, g.group_state, g.group_type) for g in listed.groups] == [(GROUP, "Stable", "consumer")]
    classic_only = await kio_call(handler, ApiKey.LIST_GROUPS, 5, states_filter=(), types_filter=("classic",))
    assert classic_only.groups == ()
    old = await call(handler, ApiKey.DESCRIBE_GROUPS, 5, gw.describe(5, (GROUP,)), *gw.codec(ApiKey.DESCRIBE_GROUPS))
    assert (old.groups[0].error_code, old.groups[0].group_state) == (0, "Dead")  # Kafka before v6: no error
    described = await kio_call(handler, ApiKey.CONSUMER_GROUP_DESCRIBE, 1, group_ids=(GROUP, "unknown"),
                               include_authorized_operations=False)
    group, unknown = described.groups
    assert (group.group_state, group.group_epoch, group.assignment_epoch, group.assignor_name) == (
        "Stable", 2, 2, "uniform")
    assert [(m.member_id, m.member_epoch) for m in group.members] == [("member-a", 2), ("member-b", 2)]
    assert group.members[0].assignment.topic_partitions[0].topic_name == "orders"
    assert unknown.error_code == E.GROUP_ID_NOT_FOUND
    metrics = {(sample.name, sample.labels.get("state")): sample.value
               for family in handler.context.groups.metric_families("t_") for sample in family.samples}
    assert metrics[("t_consumer_protocol_groups", "Stable")] == 1

    data = replicas.get_partition(OFFSETS_TP).log.read(0, 1 << 20).read_bytes()
    keys = [r.key for pos, h in iter_batches(data) for r in decode_records(data, pos, h)]
    assert ConsumerGroupMetadataKey(GROUP) in [decode_record(k, None).key for k in keys if k is not None and k[:2] != b"\x00\x01"]
    await handler.close()

    again = new_handler()  # a new coordinator loads the records: the members are back at their epochs
    await loaded(again)
    coord = again.context.groups
    image = coord.groups(0)
    assert sorted(image.consumer_groups[GROUP].members) == ["member-a", "member-b"]
    assert sorted(image.consumer_timers[GROUP]) == ["member-a", "member-b"]  # sessions armed on load
    back = await beat(again, "member-b", 2, assigned(b))
    assert (back.error_code, back.member_epoch) == (0, 2)
    left = await beat(again, "member-b", -1)
    assert (left.error_code, left.member_epoch) == (0, -1)

    async def delete() -> int:
        deleted = await call(again, ApiKey.DELETE_GROUPS, 2, gw.delete(2, (GROUP,)), *gw.codec(ApiKey.DELETE_GROUPS))
        return int(deleted.results[0].error_code)
    assert await delete() == E.NON_EMPTY_GROUP  # member-a is still in it
    assert (await beat(again, "member-a", 2, None)).error_code == 0
    assert (await beat(again, "member-a", -1)).error_code == 0
    assert await delete() == 0
    gone = await kio_call(again, ApiKey.CONSUMER_GROUP_DESCRIBE, 0, group_ids=(GROUP,),
                          include_authorized_operations=False)
    assert gone.groups[0].error_code == E.GROUP_ID_NOT_FOUND
    assert GROUP not in coord.groups(0).offsets  # its offsets went with it
    await again.close()


SUBSCRIPTION = encode_subscription(Subscription(1, ("orders",)))


async def classic_join(handler: RequestHandler, member_id: str = "") -> Any:
    request = gw.join(5, GROUP, 10000, 30000, member_id, None, "consumer", (("range", SUBSCRIPTION),))
    return await call(handler, ApiKey.JOIN_GROUP, 5, request, *gw.codec(ApiKey.JOIN_GROUP))


async def classic_heartbeat(handler: RequestHandler, member_id: str, generation: int) -> int:
    answer = await call(handler, ApiKey.HEARTBEAT, 3, gw.heartbeat(3, GROUP, generation, member_id),
                        *gw.codec(ApiKey.HEARTBEAT))
    return int(answer.error_code)


async def listed_type(handler: RequestHandler) -> tuple[str, str]:
    listed = await kio_call(handler, ApiKey.LIST_GROUPS, 5, states_filter=(), types_filter=())
    return next((g.group_type, g.group_state) for g in listed.groups if g.group_id == GROUP)


async def test_a_group_migrates_online_both_ways_and_keeps_its_offsets(broker) -> None:
    """KIP-848's online migration through the request handler: a classic member joins a
    consumer group with members (the group stays a consumer group, the member speaks
    JoinGroup/SyncGroup/Heartbeat in it); the last consumer-protocol member leaves and the
    group is classic again, rebalancing; a consumer-protocol member joins and upgrades it."""
    new_handler, _ = broker
    handler = new_handler()
    await loaded(handler)
    assert (await beat(handler, "member-a", 0, [], subscribed_topic_names=("orders",))).error_code == 0
    assert await commit(handler, "member-a", 1) == 0
    first = await classic_join(handler)
    assert first.error_code == E.MEMBER_ID_REQUIRED
    joined = await classic_join(handler, first.member_id)
    assert (joined.error_code, joined.protocol_name, joined.leader) == (0, "range", "")
    assert await listed_type(handler) == ("consumer", "Reconciling")
    described = await kio_call(handler, ApiKey.CONSUMER_GROUP_DESCRIBE, 1, group_ids=(GROUP,),
                               include_authorized_operations=False)
    assert sorted((m.member_id, m.member_type) for m in described.groups[0].members) == sorted(
        [("member-a", 1), (first.member_id, 0)])
    synced = await call(handler, ApiKey.SYNC_GROUP, 5, gw.sync(5, GROUP, joined.generation_id, first.member_id, None,
                                                               (), "consumer", "range"), *gw.codec(ApiKey.SYNC_GROUP))
    assert synced.error_code == 0 and decode_assignment(synced.assignment) == ()  # member-a still holds them all
    assert await classic_heartbeat(handler, first.member_id, joined.generation_id - 1) == E.ILLEGAL_GENERATION

    assert (await beat(handler, "member-a", -1)).error_code == 0  # the last consumer-protocol member leaves
    coord = handler.context.groups
    classic = coord.groups(0).groups[GROUP]
    assert GROUP not in coord.groups(0).consumer_groups and coord.groups(0).offsets[GROUP]  # offsets kept
    assert classic.state.value == "PreparingRebalance" and list(classic.members) == [first.member_id]
    assert await listed_type(handler) == ("classic", "PreparingRebalance")
    assert await classic_heartbeat(handler, first.member_id, classic.generation_id) == E.REBALANCE_IN_PROGRESS
    rejoined = await classic_join(handler, first.member_id)
    assert rejoined.error_code == 0 and rejoined.leader == first.member_id  # a classic rebalance again

    upgraded = await beat(handler, "member-b", 0, [], subscribed_topic_names=("orders",))
    assert upgraded.error_code == 0  # a consumer-protocol member joins: the group is upgraded
    assert GROUP not in coord.groups(0).groups and coord.groups(0).consumer_groups[GROUP].members[
        first.member_id].uses_classic_protocol
    assert await listed_type(handler) == ("consumer", "Reconciling")
    left = await call(handler, ApiKey.LEAVE_GROUP, 3, gw.leave(3, GROUP, (first.member_id, None, None)),
                      *gw.codec(ApiKey.LEAVE_GROUP))
    assert left.error_code == 0 and left.members[0].error_code == 0
    assert sorted(coord.groups(0).consumer_groups[GROUP].members) == ["member-b"]
    await handler.close()
