"""broker/group_coordinator's part of transactions over a real ReplicaManager and log (no
processes): TxnOffsetCommit through the RequestHandler on kio's messages, its offsets stored
as the producer's transactional batch and pending (OffsetFetch answers the last committed
offset, require_stable UNSTABLE_OFFSET_COMMIT), `complete_transaction` appending the marker
and committing or dropping them, and a fresh coordinator loading the same pending and
committed offsets from the partition."""

from __future__ import annotations

import pytest

from broker.group_coordinator.runtime import CoordinatorSettings, GroupCoordinator
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.request_handler import RequestHandler
from broker.timers import TimerService
from common.config import parse_config
from common.control_records import decode_marker
from common.errors import ErrorCode as E
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.record_batch import iter_batches
from common.records import decode_records
from common.log_config import LogConfig
from common.topic_partition import TopicPartition
from groups.group import GroupConfig
from groups.offsets import FetchedOffset
from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import Partition, Topic
from tests.log_helpers import NOW
from tests.unit.test_request_handler import ADVERTISED, CLUSTER, ME, FakeAdmin, call, replay

HERE = "g1"  # offsets partition 0, led here; partition 1 is led by broker 2
assert coordinator_partition(HERE, 2) == 0
IMAGE = replay(CLUSTER, Topic(GROUP_METADATA_TOPIC_NAME, "OFFSETS"),
               Partition("OFFSETS", 0, (1,), (1,), leader=1), Partition("OFFSETS", 1, (2,), (2,), leader=2),
               Topic("orders", "ORDERS"), Partition("ORDERS", 0, (1,), (1,), leader=1))
OFFSETS_TP = TopicPartition(GROUP_METADATA_TOPIC_NAME, 0)
SETTINGS = CoordinatorSettings(GroupConfig(initial_rebalance_delay_ms=0))
PID, EPOCH = 4_000, 2
WANTED = (("orders", (0,)),)


@pytest.fixture
def replicas(tmp_path):
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, IMAGE, ME), IMAGE)
    yield replicas
    log_manager.shutdown()


async def loaded_coordinator(replicas: ReplicaManager) -> GroupCoordinator:
    coord = GroupCoordinator(ME, replicas, lambda: IMAGE, SETTINGS, now_ms=lambda: NOW,
                             timers=TimerService(clock=lambda: NOW, driven=False))
    coord.ensure_started()
    await coord.runtime.idle()
    assert coord.partition_for(HERE) == 0
    return coord


# No transaction coordinator here to vouch for the test's producer (KIP-890's check of a
# TxnOffsetCommit, tests/integration/test_transactions_v2.py): the group coordinator's rules alone.
UNVERIFIED = parse_config({"node.id": str(ME), "process.roles": "broker",
                           "transaction.partition.verification.enable": "false"})


async def loaded_handler(replicas: ReplicaManager) -> RequestHandler:
    handler = RequestHandler(ME, replicas, lambda: IMAGE, ADVERTISED, None, topic_admin=FakeAdmin(),
                             group_settings=SETTINGS, broker_config=UNVERIFIED)
    await handler.context.groups.runtime.idle()
    return handler


def txn_offset_commit(version: int, offset: int, *, generation: int = -1, member: str = "",
                      topic: str = "orders", producer_id: int = PID) -> object:
    m = messages.request_module(ApiKey.TXN_OFFSET_COMMIT, version)
    partition = messages.build(m.TxnOffsetCommitRequestPartition, partition_index=0, committed_offset=offset,
                               committed_leader_epoch=3, committed_metadata="m")
    return messages.build(m.TxnOffsetCommitRequest, transactional_id="tx", group_id=HERE, producer_id=producer_id,
                          producer_epoch=EPOCH, generation_id=generation, member_id=member, group_instance_id=None,
                          topics=(m.TxnOffsetCommitRequestTopic(name=topic, partitions=(partition,)),))


async def send(handler: RequestHandler, version: int, request: object) -> list[tuple[str, int, int]]:
    response = await call(handler, ApiKey.TXN_OFFSET_COMMIT, version, request, messages.encode_request,
                          messages.response_decoder(ApiKey.TXN_OFFSET_COMMIT))
    return [(t.name, p.partition_index, int(p.error_code)) for t in response.topics for p in t.partitions]


def fetched(coord: GroupCoordinator, *, require_stable: bool) -> FetchedOffset:
    (answer,) = coord.fetch_offsets(0, HERE, WANTED, require_stable=require_stable)
    return answer


async def offset_fetch(handler: RequestHandler, require_stable: bool) -> tuple[int, int]:
    """OffsetFetch v7 (require_stable's first version) of orders-0: (offset, error code)."""
    m = messages.request_module(ApiKey.OFFSET_FETCH, 7)
    request = m.OffsetFetchRequest(group_id=HERE, topics=(m.OffsetFetchRequestTopic(name="orders", partition_indexes=(0,)),),
                                   require_stable=require_stable)
    response = await call(handler, ApiKey.OFFSET_FETCH, 7, request, messages.encode_request,
                          messages.response_decoder(ApiKey.OFFSET_FETCH))
    (topic,) = response.topics
    (partition,) = topic.partitions
    return partition.committed_offset, int(partition.error_code)


def stored_batches(replicas: ReplicaManager) -> list[tuple[bool, bool, int, int, list]]:
    """(transactional, control, producer id, producer epoch, records) of every stored batch."""
    data = replicas.get_partition(OFFSETS_TP).log.read(0, 1 << 20).read_bytes()
    return [(h.is_transactional, h.is_control, h.producer_id, h.producer_epoch, list(decode_records(data, pos, h)))
            for pos, h in iter_batches(data)]


@pytest.mark.parametrize("version", [0, 2, 3, 4])  # v3+: flexible, with KIP-447's member fields
async def test_txn_offsets_are_pending_until_the_commit_marker_and_reload_the_same(replicas, version) -> None:
    handler = RequestHandler(ME, replicas, lambda: IMAGE, ADVERTISED, None, topic_admin=FakeAdmin(),
                             group_settings=SETTINGS, broker_config=UNVERIFIED)
    coord = handler.context.groups
    assert await send(handler, version, txn_offset_commit(version, 7)) == [("orders", 0, E.COORDINATOR_LOAD_IN_PROGRESS)]
    await coord.runtime.idle()
    assert await send(handler, version, txn_offset_commit(version, 7)) == [("orders", 0, 0)]
    assert await send(handler, version, txn_offset_commit(version, 1, topic="nope")) == [
        ("nope", 0, E.UNKNOWN_TOPIC_OR_PARTITION)]
    transactional, control, pid, epoch, records = stored_batches(replicas)[-1]
    assert (transactional, control, pid, epoch, len(records)) == (True, False, PID, EPOCH, 1)
    assert fetched(coord, require_stable=False) == FetchedOffset("orders", 0, -1, -1, "", E.NONE)
    assert fetched(coord, require_stable=True).error == E.UNSTABLE_OFFSET_COMMIT
    assert await offset_fetch(handler, require_stable=False) == (-1, E.NONE)  # the handler passes it on
    assert await offset_fetch(handler, require_stable=True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    offsets_partition = replicas.get_partition(OFFSETS_TP)
    assert offsets_partition.last_stable_offset < offsets_partition.log.log_end_offset  # the transaction is open

    again = await loaded_coordinator(replicas)  # pending survives a reload
    assert fetched(again, require_stable=True).error == E.UNSTABLE_OFFSET_COMMIT
    await again.close()

    assert await coord.complete_transaction(0, PID, EPOCH, 5, committed=True) == E.NONE
    transactional, control, pid, epoch, (marker,) = stored_batches(replicas)[-1]
    assert (transactional, control, pid, epoch) == (True, True, PID, EPOCH)
    assert decode_marker(marker.key, marker.value).committed
    assert offsets_partition.last_stable_offset == offsets_partition.log.log_end_offset  # ended by the marker
    committed = FetchedOffset("orders", 0, 7, 3 if version >= 2 else -1, "m", E.NONE)  # v2+: leader epochs
    assert fetched(coord, require_stable=True) == committed
    assert await offset_fetch(handler, require_stable=True) == (7, E.NONE)

    again = await loaded_coordinator(replicas)  # committed by the marker after a reload too
    assert fetched(again, require_stable=True) == committed
    await again.close()
    await handler.close()


async def test_an_abort_marker_drops_the_pending_offsets_and_a_second_producer_is_independent(replicas) -> None:
    handler = await loaded_handler(replicas)
    coord = handler.context.groups
    assert await send(handler, 3, txn_offset_commit(3, 5)) == [("orders", 0, 0)]
    assert await coord.complete_transaction(0, PID, EPOCH, 5, committed=True) == E.NONE
    assert await send(handler, 3, txn_offset_commit(3, 9)) == [("orders", 0, 0)]
    assert await send(handler, 3, txn_offset_commit(3, 11, producer_id=PID + 1)) == [("orders", 0, 0)]
    assert await coord.complete_transaction(0, PID, EPOCH, 5, committed=False) == E.NONE
    assert fetched(coord, require_stable=False).offset == 5  # the abort dropped 9
    assert fetched(coord, require_stable=True).error == E.UNSTABLE_OFFSET_COMMIT  # 11 still pending
    again = await loaded_coordinator(replicas)
    assert again.runtime.committed(0).offsets == coord.runtime.committed(0).offsets
    assert again.runtime.committed(0).pending == coord.runtime.committed(0).pending
    await again.close()
    await handler.close()


async def test_kip447_a_zombie_of_an_older_generation_is_fenced(replicas) -> None:
    handler = await loaded_handler(replicas)
    coord = handler.context.groups
    assert await send(handler, 3, txn_offset_commit(3, 5, generation=4, member="zombie")) == [
        ("orders", 0, E.ILLEGAL_GENERATION)]  # no such group with a generation: Kafka's answer
    assert stored_batches(replicas) == []
    await handler.close()


async def test_a_marker_for_a_partition_not_led_here_is_retried_elsewhere(replicas) -> None:
    coord = await loaded_coordinator(replicas)
    assert await coord.complete_transaction(1, PID, EPOCH, 5, committed=True) == E.NOT_LEADER_OR_FOLLOWER
    await coord.close()
