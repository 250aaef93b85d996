"""broker/replication/replica_fetcher.py: a fetch answer with no records that moves neither the
follower's high watermark nor its log start offset is not appended (Kafka's appendAsFollower
returns at once for no batches, and its HW and start-offset updates are no-ops); one that moves
either still is. A new leader answers each partition a follower moves to it once, with no
records, so a surviving broker skips ~16,500 appends after a controlled shutdown at 100,000
partitions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker.replication.high_watermark import follower_answer_changes_nothing
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, Partition, RegisterBroker, Topic
from tests.log_helpers import NOW, batch
from tests.unit.test_replica_fetcher import LEADER, ME, Leader, follower

IMAGE = apply(EMPTY_IMAGE, enumerate([
    BeginEpoch(1),
    *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", "127.0.0.1", 1),)) for b in (LEADER, ME)),
    *(BrokerRegistrationChange(b, i, fenced=False) for i, b in enumerate((LEADER, ME), start=1)),
    Topic("t", "T"),
    *(Partition("T", p, (LEADER, ME), (LEADER, ME), leader=LEADER, leader_epoch=1) for p in range(3)),
]))
QUIET, MOVED, HW_ONLY = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


class OneAnswer(Leader):
    """A leader that answers the first Fetch and then has no news."""

    async def request(self, api_key: int, version: int, payload: Any, decode: Any, **kw: Any) -> Any:
        if self.named:
            self.named.append(set())
            await asyncio.sleep(3600)  # the test ends first
        return await super().request(api_key, version, payload, decode, **kw)

# (leader HW, leader log start, follower LEO, HW, log start) -> nothing to append
ROWS = [
    ((7, 0, 0, 0, 0), True),     # the leader is ahead, the follower has nothing: its HW stays 0
    ((5, 0, 5, 5, 0), True),     # caught up, nothing new
    ((5, 3, 5, 5, 3), True),     # the start offsets agree
    ((6, 0, 6, 5, 0), False),    # the HW moves to 6
    ((5, 2, 5, 5, 0), False),    # the leader's DeleteRecords moves the start to 2
    ((5, 9, 5, 5, 0), False),    # ... up to the follower's HW 5
    ((4, 0, 5, 5, 0), False),    # a leader HW behind ours (a new leader's first answers) lowers it
    ((5, -1, 5, 5, 0), True),    # no log start offset from the leader (-1): nothing to move
]


@pytest.mark.parametrize(("answer", "nothing"), ROWS)
def test_which_empty_answers_change_nothing(answer: tuple[int, int, int, int, int], nothing: bool) -> None:
    leader_hw, leader_start, leo, hw, start = answer
    assert follower_answer_changes_nothing(
        leader_high_watermark=leader_hw, leader_log_start_offset=leader_start,
        log_end_offset=leo, high_watermark=hw, log_start_offset=start) is nothing


def test_an_empty_answer_that_changes_nothing_is_not_appended(tmp_path: Path) -> None:
    async def scenario() -> None:
        leader = OneAnswer({QUIET.partition: (7, b""), MOVED.partition: (3, batch(3)), HW_ONLY.partition: (2, b"")})
        async with follower(tmp_path, IMAGE) as (replicas, manager):
            appended: list[TopicPartition] = []
            append = replicas.append_as_follower

            def counted(partition: Any, *args: Any) -> Any:
                appended.append(partition.tp)
                return append(partition, *args)

            replicas.append_as_follower = counted  # type: ignore[method-assign,assignment]
            replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, IMAGE, ME), IMAGE)
            # HW_ONLY holds two records its HW has not reached: the leader's HW 2 moves it
            hw_only = replicas.get_partition(HW_ONLY)
            assert hw_only is not None
            hw_only.log.append(batch(2), now_ms=NOW, assign_offsets=False)
            assert hw_only.log.high_watermark == 0
            fetcher = manager.fetchers[LEADER]
            fetcher._conn = leader  # type: ignore[assignment]
            async with asyncio.timeout(10):
                while len(leader.named) < 2:  # the first answer is handled before the next fetch
                    await asyncio.sleep(0)
            assert leader.named[0] == {0, 1, 2}
            assert sorted(appended) == [MOVED, HW_ONLY]  # QUIET's answer changed nothing
            assert hw_only.log.high_watermark == 2
            quiet = replicas.get_partition(QUIET)
            assert quiet is not None and quiet.log.high_watermark == 0  # min(leader HW 7, own LEO 0)

    asyncio.run(scenario())
