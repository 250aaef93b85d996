"""Online migration's rules through the request handler and the coordinator's memory: a classic
static member replacing the last consumer-protocol member (the group is classic and Stable at
once, the newcomer syncs the replaced member's assignment), and OffsetFetch v9 from a classic
member of a consumer group with a stale generation (ILLEGAL_GENERATION). The rules themselves
are tests/unit/test_migration.py's; this checks the runtime keeps what they decide."""

from __future__ import annotations

from common.errors import ErrorCode as E
from common.protocol.api_keys import ApiKey
from groups.migration_protocol import decode_assignment
from tests import group_wire as gw
from tests.unit.test_consumer_group_coordinator import (  # noqa: F401 (broker: the fixture)
    GROUP,
    SUBSCRIPTION,
    beat,
    broker,
    classic_join,
    listed_type,
    loaded,
)
from tests.unit.test_request_handler import call

SESSION_MS, REBALANCE_MS = 10_000, 30_000


async def test_a_classic_static_member_replacing_the_last_consumer_protocol_one_downgrades(broker) -> None:
    new_handler, _ = broker
    handler = new_handler()
    await loaded(handler)
    first = await beat(handler, "member-a", 0, [], subscribed_topic_names=("orders",), instance_id="i")
    assert first.error_code == 0 and first.member_epoch == 1
    held = await beat(handler, "member-a", 1, [0, 1, 2, 3])
    assert held.error_code == 0
    dynamic = await classic_join(handler)  # a classic member joins: the group stays a consumer group
    joined = await classic_join(handler, dynamic.member_id)
    assert joined.error_code == 0 and await listed_type(handler) == ("consumer", "Reconciling")
    stale = await call(handler, ApiKey.OFFSET_FETCH, 9, gw.fetch_groups(
        9, False, (GROUP, None, dynamic.member_id, joined.generation_id - 1)), *gw.codec(ApiKey.OFFSET_FETCH))
    assert stale.groups[0].error_code == E.ILLEGAL_GENERATION  # a classic member's stale generation

    coord = handler.context.groups
    target = coord.groups(0).consumer_groups[GROUP].target["member-a"]
    replacing = gw.join(5, GROUP, SESSION_MS, REBALANCE_MS, "", "i", "consumer", (("range", SUBSCRIPTION),))
    answer = await call(handler, ApiKey.JOIN_GROUP, 5, replacing, *gw.codec(ApiKey.JOIN_GROUP))
    assert answer.error_code == 0 and answer.member_id not in ("", "member-a")
    assert GROUP not in coord.groups(0).consumer_groups
    classic = coord.groups(0).groups[GROUP]
    assert classic.state.value == "Stable" and set(classic.members) == {dynamic.member_id, answer.member_id}
    assert await listed_type(handler) == ("classic", "Stable")
    synced = await call(handler, ApiKey.SYNC_GROUP, 5, gw.sync(5, GROUP, answer.generation_id, answer.member_id, "i",
                                                               (), "consumer", "range"), *gw.codec(ApiKey.SYNC_GROUP))
    assert synced.error_code == 0
    assert {p for _, p in decode_assignment(synced.assignment)} == {p for _, p in target}
    await handler.close()
