"""broker/handlers/produce.py at the new versions: Produce v9–v11 (KIP-951's CurrentLeader and
NodeEndpoints on NOT_LEADER_OR_FOLLOWER, from this broker's image) and InitProducerId v3–v5
(Kafka's checks of the producer id and epoch, a new id for every idempotent producer), with the
real RequestHandler, ReplicaManager and log of test_request_handler's `node`."""

from __future__ import annotations

import pytest

from broker.producer_ids import init_producer_id_error
from common.errors import ErrorCode
from common.protocol import produce
from common.protocol.api_keys import ApiKey
from common.protocol.init_producer_id import (
    InitProducerIdRequest,
    decode_init_producer_id_response,
    encode_init_producer_id_request,
)
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
        assert answers[("orders", 1)] == (NOT_LEADER, produce.LeaderIdAndEpoch(2, 0))  # broker 2 leads
        assert answers[("dark", 0)] == (NOT_LEADER, produce.LeaderIdAndEpoch(3, 0))  # its leader is fenced
        assert answers[("orders", 0)][0] == 0 and answers[("orders", 0)][1] == produce.UNKNOWN_LEADER
        assert answers[("nope", 0)] == (int(E.UNKNOWN_TOPIC_OR_PARTITION), produce.UNKNOWN_LEADER)
        # only alive leaders have an endpoint: broker 3 is fenced
        assert response.node_endpoints == (produce.NodeEndpoint(2, "127.0.0.2", 9092, None),)


async def test_the_current_leader_follows_the_image(node):  # noqa: F811
    handler, _, _ = node
    moved = replay(IMAGE, PartitionChange("ORDERS", 1, leader=1), PartitionChange("ORDERS", 1, leader=2))
    handler.context.image = lambda: moved
    response = await do_produce(handler, 1, ("orders", 1, batch(1)), version=11)
    part = response.responses[0].partitions[0]
    assert (part.error_code, part.current_leader) == (NOT_LEADER, produce.LeaderIdAndEpoch(2, 2))


INIT_RULES = [  # (transactional id, producer id, epoch, Kafka's answer)
    (None, -1, -1, None),
    (None, 4000, 3, None),  # KIP-360: an idempotent producer starting over gets a new id
    (None, 4000, -1, E.INVALID_REQUEST),  # an id without an epoch (KafkaApis)
    (None, -1, 0, E.INVALID_REQUEST),  # an epoch without an id
    ("", -1, -1, E.INVALID_REQUEST),  # TransactionCoordinator: empty transactional id
    ("", 5, -1, E.INVALID_REQUEST),
    ("tx", -1, -1, E.COORDINATOR_NOT_AVAILABLE),  # no transaction coordinator
    ("tx", 5, 1, E.COORDINATOR_NOT_AVAILABLE),
]


@pytest.mark.parametrize(("transactional_id", "producer_id", "epoch", "expected"), INIT_RULES)
def test_init_producer_id_rule(transactional_id, producer_id, epoch, expected):
    assert init_producer_id_error(transactional_id, producer_id, epoch) == expected


@pytest.mark.parametrize("version", [3, 4, 5])
async def test_init_producer_id_new_versions(node, version):  # noqa: F811
    handler, _, _ = node

    async def init(request):
        return await handler_call(handler, version, request)

    first = await init(InitProducerIdRequest(None, 60000))
    assert (first.error_code, first.producer_id, first.producer_epoch) == (0, 1000, 0)
    again = await init(InitProducerIdRequest(None, 60000, first.producer_id, first.producer_epoch))
    assert (again.error_code, again.producer_id, again.producer_epoch) == (0, 1001, 0)
    bad = await init(InitProducerIdRequest(None, 60000, first.producer_id, -1))
    assert (bad.error_code, bad.producer_id, bad.producer_epoch) == (E.INVALID_REQUEST, -1, -1)
    tx = await init(InitProducerIdRequest("tx", 60000))
    assert (tx.error_code, tx.producer_id, tx.producer_epoch) == (E.COORDINATOR_NOT_AVAILABLE, -1, -1)


async def handler_call(handler, version, request):
    from tests.unit.test_request_handler import call
    return await call(handler, ApiKey.INIT_PRODUCER_ID, version, request, encode_init_producer_id_request,
                      decode_init_producer_id_response)
