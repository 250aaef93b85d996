"""broker/handlers/produce.py at the new versions: Produce v9–v11 (KIP-951's CurrentLeader and
NodeEndpoints on NOT_LEADER_OR_FOLLOWER, from this broker's image), with the real
RequestHandler, ReplicaManager and log of test_request_handler's `node`. InitProducerId's
tests moved with its handler to test_transaction_handlers.py."""

from __future__ import annotations

import pytest

from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.request_handler import RequestHandler
from common.errors import ErrorCode
from common.log_config import LogConfig
from common.protocol import produce
from common.protocol.leader_discovery import LeaderIdAndEpoch, NodeEndpoint
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import Partition, PartitionChange, Topic
from tests.log_helpers import NOW, batch
from tests.unit.test_request_handler import ADVERTISED, IMAGE, ME, do_produce, node, replay  # noqa: F401 - the fixture

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


WIDE_RF1 = replay(IMAGE, Topic("wide", "WIDE"), *(Partition("WIDE", p, (1,), (1,), leader=1) for p in range(6)))


@pytest.fixture
def ticking(tmp_path):
    """A handler over WIDE_RF1 whose replica manager's clock moves 1 ms at every reading, and
    the list of those readings."""
    readings: list[int] = []

    def clock() -> int:
        readings.append(NOW + len(readings))
        return readings[-1]

    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=clock)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, WIDE_RF1, ME), WIDE_RF1)
    yield RequestHandler(ME, replicas, lambda: WIDE_RF1, ADVERTISED, None), readings
    log_manager.shutdown()


@pytest.mark.parametrize("acks", [1, -1])
async def test_a_produce_reads_the_clock_once_whatever_its_partitions(ticking, acks):
    # ReplicaManager.leader_appender: the request's clock reading serves every partition's
    # append (append time, the ISR's lag), as its acks check does; each append read it before
    handler, readings = ticking
    read_by = {}
    for count in (1, 6):
        before = len(readings)
        response = await do_produce(handler, acks, *(("wide", p, batch(2)) for p in range(count)))
        assert [p.error_code for t in response.responses for p in t.partitions] == [0] * count
        read_by[count] = len(readings) - before
    assert read_by[6] == read_by[1] >= 1


async def test_invalid_acks_refuse_every_partition_but_a_null_one_answers_corrupt(ticking):
    handler, _ = ticking
    response = await do_produce(handler, 2, ("wide", 0, batch(1)), ("wide", 1, None), ("wide", 2, batch(1)))
    assert [(p.partition_index, p.error_code) for p in response.responses[0].partitions] == [
        (0, int(E.INVALID_REQUIRED_ACKS)), (1, int(E.CORRUPT_MESSAGE)), (2, int(E.INVALID_REQUIRED_ACKS))]
    again = await do_produce(handler, 1, ("wide", 0, batch(1)))  # nothing was appended
    assert again.responses[0].partitions[0].base_offset == 0


async def test_one_partitions_refusal_leaves_the_others_appended(ticking):
    handler, _ = ticking
    parts = (("wide", 0, batch(2)), ("orders", 1, batch(1)), ("wide", 0, batch(3)), ("nope", 0, batch(1)),
             ("wide", 5, batch(1)))
    response = await do_produce(handler, -1, *parts)
    answers = [(t.name, p.partition_index, p.error_code, p.base_offset)
               for t in response.responses for p in t.partitions]
    assert answers == [("wide", 0, 0, 0), ("wide", 0, 0, 2), ("wide", 5, 0, 0),
                       ("orders", 1, NOT_LEADER, -1), ("nope", 0, int(E.UNKNOWN_TOPIC_OR_PARTITION), -1)]
