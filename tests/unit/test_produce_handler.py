"""broker/handlers/produce.py at the new versions: Produce v9–v11 (KIP-951's CurrentLeader and
NodeEndpoints on NOT_LEADER_OR_FOLLOWER, from this broker's image), with the real
RequestHandler, ReplicaManager and log of test_request_handler's `node`. InitProducerId's
tests moved with its handler to test_transaction_handlers.py."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode
from common.protocol import produce
from common.protocol.leader_discovery import LeaderIdAndEpoch, NodeEndpoint
from metadata.records import PartitionChange
from tests.log_helpers import batch
from tests.unit.test_request_handler import IMAGE, do_produce, node, replay  # noqa: F401 - the fixture

E = ErrorCode
NOT_LEADER = int(E.NOT_LEADER_OR_FOLLOWER)


@pytest.mark.parametrize("version", [9, 10, 11])
async def test_produce_appends_at_every_new_version(node, version):  # noqa: F811
    handler, _, _ = node
    response = await do_produce(handler, 1, ("orders", 0, batch(3)), version=version)
    part = response.responses[0].partitions[0]
    assert (part.error_code, part.base_offset, part.current_leader) == (0, 0, produce.UNKNOWN_LEADER)
    assert response.node_endpoints == ()
    again = await do_produce(handler, -1, ("orders", 0, batch(2)), version=version)
    assert again.responses[0].partitions[0].base_offset == 3


async def test_not_leader_names_the_current_leader_from_v10(node):  # noqa: F811
    handler, _, _ = node
    parts = (("orders", 1, batch(1)), ("dark", 0, batch(1)), ("orders", 0, batch(1)), ("nope", 0, batch(1)))
    by_version = {}
    for version in (9, 10, 11):
        response = await do_produce(handler, 1, *parts, version=version)
        by_version[version] = response
        answers = {(t.name, p.partition_index): (p.error_code, p.current_leader)
                   for t in response.responses for p in t.partitions}
        if version < 10:
            assert response.node_endpoints == ()
            assert all(leader == produce.UNKNOWN_LEADER for _, leader in answers.values())
            continue
        assert answers[("orders", 1)] == (NOT_LEADER, LeaderIdAndEpoch(2, 0))  # broker 2 leads
        assert answers[("dark", 0)] == (NOT_LEADER, LeaderIdAndEpoch(3, 0))  # its leader is fenced
        assert answers[("orders", 0)][0] == 0 and answers[("orders", 0)][1] == produce.UNKNOWN_LEADER
        assert answers[("nope", 0)] == (int(E.UNKNOWN_TOPIC_OR_PARTITION), produce.UNKNOWN_LEADER)
        # only alive leaders have an endpoint: broker 3 is fenced
        assert response.node_endpoints == (NodeEndpoint(2, "127.0.0.2", 9092, None),)


async def test_the_current_leader_follows_the_image(node):  # noqa: F811
    handler, _, _ = node
    moved = replay(IMAGE, PartitionChange("ORDERS", 1, leader=1), PartitionChange("ORDERS", 1, leader=2))
    handler.context.image = lambda: moved
    response = await do_produce(handler, 1, ("orders", 1, batch(1)), version=11)
    part = response.responses[0].partitions[0]
    assert (part.error_code, part.current_leader) == (NOT_LEADER, LeaderIdAndEpoch(2, 2))
