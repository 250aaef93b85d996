"""broker/replication/alter_partition_manager.py and the answers' effect in isr_manager.py:
bounded AlterPartition requests, stale proposals dropped, and a refusal for a stale view
waiting for the metadata instead of being proposed again on every fetch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.replication.alter_partition_manager import (
    MAX_ITEMS_PER_REQUEST,
    AlterPartitionItem,
    AlterPartitionManager,
    describe_answers,
)
from broker.replication.isr_manager import IsrManager
from broker.replication.partition import Partition
from common import rpc, rpc_messages
from common.errors import ErrorCode
from common.topic_partition import TopicPartition
from metadata.image import BrokerRegistration
from metadata.records import LeaderRecoveryState

ME = 1
TOPIC_ID = "T" * 22


class FakeControllerClient:
    """Answers every AlterPartition with `answer(partition_index)` and records each request."""

    def __init__(self, answer: int = 0) -> None:
        self.requests: list[rpc_messages.AlterPartitionRequest] = []
        self.answer = answer

    async def call(self, path: str, body: Any) -> Any:
        assert path == "alter-partition"
        request = rpc.decode_alter_partition_request(body)
        self.requests.append(request)
        topics = tuple(rpc_messages.AlterPartitionTopicReply(t.topic_id, tuple(
            rpc_messages.AlterPartitionPartitionReply(p.partition_index, self.answer) if self.answer else
            rpc_messages.AlterPartitionPartitionReply(p.partition_index, 0, None, ME, p.leader_epoch,
                                                      tuple(m.broker_id for m in p.new_isr_with_epochs),
                                                      p.partition_epoch + 1, p.leader_recovery_state)
            for p in t.partitions)) for t in request.topics)
        return rpc.encode_reply(rpc_messages.AlterPartitionReply(topics))


def item(partition: int, leader_epoch: int = 3, partition_epoch: int = 7) -> AlterPartitionItem:
    return AlterPartitionItem(TopicPartition("t", partition), TOPIC_ID, leader_epoch, partition_epoch,
                              ((1, -1), (2, -1)))


async def drain(manager: AlterPartitionManager) -> None:
    task = asyncio.create_task(manager.run())
    for _ in range(100):  # bounded: a few loop turns per request
        await asyncio.sleep(0)
        if manager.pending == 0:
            break
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize(("items", "sizes"), [
    (3, [3]),
    (MAX_ITEMS_PER_REQUEST, [MAX_ITEMS_PER_REQUEST]),
    (2 * MAX_ITEMS_PER_REQUEST + 7, [MAX_ITEMS_PER_REQUEST, MAX_ITEMS_PER_REQUEST, 7]),
])
def test_one_request_carries_at_most_the_limit_oldest_first(items, sizes):
    client = FakeControllerClient()
    manager = AlterPartitionManager(client, ME, broker_epoch=lambda: 5)  # type: ignore[arg-type]
    answers: list[int] = []
    for p in range(items):
        assert manager.submit(item(p), lambda code, reply: answers.append(code))
    asyncio.run(drain(manager))
    assert [sum(len(t.partitions) for t in r.topics) for r in client.requests] == sizes
    assert [p.partition_index for t in client.requests[0].topics for p in t.partitions][:3] == [0, 1, 2]
    assert answers == [0] * items and manager.pending == 0


def test_a_discarded_item_is_not_sent_and_its_partition_may_propose_again():
    client = FakeControllerClient()
    manager = AlterPartitionManager(client, ME, broker_epoch=lambda: 5)  # type: ignore[arg-type]
    answered: list[int] = []
    assert manager.submit(item(0), lambda code, reply: answered.append(0))
    assert not manager.submit(item(0, leader_epoch=4), lambda code, reply: None)  # one per partition
    manager.discard(TopicPartition("t", 0))
    assert manager.submit(item(0, leader_epoch=4), lambda code, reply: answered.append(4))
    asyncio.run(drain(manager))
    assert [p.leader_epoch for r in client.requests for t in r.topics for p in t.partitions] == [4]
    assert answered == [4]


def test_the_answer_line_counts_each_error_and_names_a_few():
    answered = {TopicPartition("t", p): (int(ErrorCode.FENCED_LEADER_EPOCH) if p < 8 else 0) for p in range(10)}
    line = describe_answers(ME, answered, queued=4)
    assert line == ("Broker 1: AlterPartition of 10 partition(s) answered: 2 committed, 8 FENCED_LEADER_EPOCH (74): "
                    "t-0, t-1, t-2, t-3, t-4 and 3 more; 4 queued for the next request")


class FakeLog:
    log_end_offset = 0
    high_watermark = 0


class Brokers:
    """The one thing IsrManager.propose reads of the image: every broker registered, epoch 5."""

    def broker(self, broker_id: int) -> BrokerRegistration:
        return BrokerRegistration(broker_id, 5, "incarnation", (), fenced=False)


def leader_partition() -> Partition:
    return Partition(TopicPartition("t", 0), TOPIC_ID, FakeLog(), ME, 3, 7, (1, 2, 3), (1, 2))  # type: ignore[arg-type]


@pytest.mark.parametrize(("error", "awaits"), [
    (ErrorCode.FENCED_LEADER_EPOCH, True),
    (ErrorCode.INVALID_UPDATE_VERSION, True),
    (ErrorCode.UNKNOWN_TOPIC_ID, True),
    (ErrorCode.INELIGIBLE_REPLICA, False),  # the controller says the epochs are right: back to committed
    (ErrorCode.REQUEST_TIMED_OUT, False),  # retriable: proposed again from the next fetch
])
def test_a_refusal_for_a_stale_view_waits_for_the_metadata(error, awaits):
    client = FakeControllerClient(answer=int(error))
    manager = AlterPartitionManager(client, ME, broker_epoch=lambda: 5)  # type: ignore[arg-type]
    partition = leader_partition()
    isr = IsrManager(ME, now_ms=lambda: 0, replica_lag_time_max_ms=1000, alter_partition=manager,
                     image=lambda: Brokers(), is_current=lambda p: p is partition,  # type: ignore[arg-type,return-value]
                     on_change=lambda tp: None)
    assert isr.propose(partition, (1, 2, 3), LeaderRecoveryState.RECOVERED)
    asyncio.run(drain(manager))
    assert (partition.pending_isr is not None) is awaits
    if awaits:
        assert partition.pending_isr is not None and partition.pending_isr.awaiting_metadata
        assert partition.isr_to_expand(lambda r: True) is None  # nothing proposed again meanwhile
