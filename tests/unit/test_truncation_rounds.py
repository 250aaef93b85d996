"""broker/replication/truncation_rounds.py: a follower's truncation rounds against a leader
that answers from its own log. OffsetForLeaderEpoch until the two logs agree, the truncation
it leads to, the ListOffsets reset when no epoch is common, and a partition's error handed to
the fetcher (its back-off) with the log untouched. Every row ends with the partition fetching
(or, on an error, still truncating)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker.log.log_manager import LogManager
from broker.log.partition_log import PartitionLog
from broker.replica_manager import ReplicaManager
from broker.replication.fetch_rounds import FetchRounds
from broker.replication.fetcher_state import PartitionFetchState
from broker.replication.truncation import AskLeader, start_truncation
from broker.replication.truncation_rounds import TruncationRounds
from common.errors import ErrorCode
from common.log_config import LogConfig
from common.protocol import list_offsets as lo
from common.protocol import messages
from common.protocol import offset_for_leader_epoch as ofle
from common.protocol.api_keys import ApiKey
from common.protocol.frame import join_chunks
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, Partition, RegisterBroker, Topic
from tests.log_helpers import NOW, batch, open_log

ME, LEADER, EPOCH = 5, 4, 9  # EPOCH: the partition's leader epoch now, past every epoch in the logs
TP = TopicPartition("t", 0)
IMAGE = apply(EMPTY_IMAGE, enumerate([
    BeginEpoch(1),
    *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", "127.0.0.1", 1),)) for b in (LEADER, ME)),
    *(BrokerRegistrationChange(b, i, fenced=False) for i, b in enumerate((LEADER, ME), start=1)),
    Topic("t", "T"),
    Partition("T", 0, (LEADER, ME), (LEADER, ME), leader=LEADER, leader_epoch=EPOCH),
]))


def _append(log: PartitionLog, epochs: list[tuple[int, int]]) -> None:
    """`count` batches of one record in `epoch`, for each (epoch, count) in turn (a log is cut at
    batch boundaries: one record each, so that it can be cut at any offset)."""
    for epoch, count in epochs:
        for _ in range(count):
            log.append(batch(1), now_ms=NOW, leader_epoch=epoch)


class Leader:
    """A leader's connection answering OffsetForLeaderEpoch and ListOffsets from `log`, through
    the real codecs (or `error` for every partition)."""

    def __init__(self, log: PartitionLog, error: int = 0) -> None:
        self.log, self.error = log, error
        self.asked: list[tuple[str, int]] = []  # (API, epoch or timestamp) in order

    async def request(self, api_key: int, version: int, payload: Any, decode: Any, **_: Any) -> Any:
        body = memoryview(join_chunks(payload))
        if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            req = ofle.CODEC.decode(body, version)
            m = messages.response_module(api_key, ofle.schema_version(version))
            parts = []
            for p in req.topics[0].partitions:
                self.asked.append(("OffsetForLeaderEpoch", p.leader_epoch))
                end = self.log.end_offset_for_epoch(p.leader_epoch)
                parts.append(m.EpochEndOffset(error_code=messages.error_code(self.error), partition=p.partition,
                                              leader_epoch=end.leader_epoch, end_offset=end.end_offset))
            response = m.OffsetForLeaderEpochResponse(throttle_time=messages.NO_THROTTLE, topics=(
                m.OffsetForLeaderTopicResult(topic=req.topics[0].topic, partitions=tuple(parts)),))
            answer = ofle.CODEC.encode(response, version)
        else:
            assert api_key == ApiKey.LIST_OFFSETS
            req = lo.CODEC.decode(body, version)
            m = messages.response_module(api_key, version)
            parts = []
            for p in req.topics[0].partitions:
                self.asked.append(("ListOffsets", p.timestamp))
                offset = self.log.log_start_offset if p.timestamp == lo.EARLIEST_TIMESTAMP else self.log.log_end_offset
                parts.append(messages.build(m.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                                            error_code=messages.error_code(self.error), offset=offset))
            response = messages.build(m.ListOffsetsResponse, throttle_time=messages.NO_THROTTLE, topics=(
                m.ListOffsetsTopicResponse(name=req.topics[0].name, partitions=tuple(parts)),))
            answer = lo.CODEC.encode(response, version)
        return decode(memoryview(join_chunks(answer)), version)


class Fetcher:
    """The fetcher's side the rounds call: a partition error backs the partition off (for
    longer than the test), as ReplicaFetcher's does; both noted."""

    leader_id = LEADER

    def __init__(self, rounds: FetchRounds) -> None:
        self.rounds = rounds
        self.errors: list[tuple[TopicPartition, int, str]] = []

    def back_off(self, tp: TopicPartition, state: PartitionFetchState, *, leader_behind: bool = False) -> None:
        self.rounds.back_off(tp, state, retry_at=3600.0)

    def partition_error(self, tp: TopicPartition, state: PartitionFetchState, code: int, what: str) -> None:
        self.errors.append((tp, code, what))
        self.back_off(tp, state)


@pytest.mark.parametrize(("follower", "leader", "error", "asked", "log_end_offset"), [
    pytest.param([(1, 3)], [(1, 3), (2, 2)], 0, [("OffsetForLeaderEpoch", 1)], 3, id="the-logs-agree"),
    pytest.param([(1, 3), (2, 4)], [(1, 3), (3, 2)], 0, [("OffsetForLeaderEpoch", 2)], 3,
                 id="an-epoch-the-leader-never-had"),
    pytest.param([(1, 5)], [(1, 3), (2, 1)], 0, [("OffsetForLeaderEpoch", 1)], 3, id="the-leader-ends-it-earlier"),
    pytest.param([(1, 2), (2, 2)], [(1, 2), (2, 1), (3, 1)], 0, [("OffsetForLeaderEpoch", 2)], 3,
                 id="same-epoch-shorter-leader"),
    pytest.param([(1, 3)], [(2, 4)], 0, [("OffsetForLeaderEpoch", 1)], 0, id="older-than-the-leader-first-epoch"),
    pytest.param([(1, 2), (3, 2)], [(1, 1), (2, 2), (4, 1)], 0,
                 [("OffsetForLeaderEpoch", 3), ("OffsetForLeaderEpoch", 1)], 1, id="asked-again-for-an-older-epoch"),
    pytest.param([(1, 3)], [], 0,
                 [("OffsetForLeaderEpoch", 1), ("ListOffsets", lo.EARLIEST_TIMESTAMP),
                  ("ListOffsets", lo.LATEST_TIMESTAMP)], 0, id="no-epoch-at-the-leader-restarts-at-its-start"),
    pytest.param([(1, 3), (2, 2)], [(1, 3)], ErrorCode.NOT_LEADER_OR_FOLLOWER, [("OffsetForLeaderEpoch", 2)], 5,
                 id="an-error-leaves-the-log"),
])
def test_truncation_rounds(tmp_path: Path, follower: list[tuple[int, int]], leader: list[tuple[int, int]],
                           error: int, asked: list[tuple[str, int]], log_end_offset: int) -> None:
    async def scenario() -> None:
        log_manager = LogManager([tmp_path / "follower"], LogConfig(), now_ms=NOW)
        try:
            replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
            replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, IMAGE, ME), IMAGE)
            partition = replicas.get_partition(TP)
            assert partition is not None
            _append(partition.log, follower)
            leader_log = open_log(tmp_path / "leader")
            _append(leader_log, leader)
            step = start_truncation(partition.log.leader_epoch_cache.entries, partition.log.log_end_offset)
            assert isinstance(step, AskLeader)
            rounds = FetchRounds()
            fetcher, conn = Fetcher(rounds), Leader(leader_log, error)
            state = PartitionFetchState(EPOCH, step)
            rounds.add(TP, state)
            truncation = TruncationRounds(fetcher, replicas, rounds, ME)
            for _ in range(3):  # bounded: each question asks an older epoch
                if not rounds.truncating():
                    break
                await truncation.run(conn)  # type: ignore[arg-type]
            assert conn.asked == asked
            assert partition.log.log_end_offset == log_end_offset
            if error:
                assert fetcher.errors == [(TP, error, "OffsetForLeaderEpoch")] and state.truncation == step
                assert not rounds.has_fetch_work()  # backed off, to ask again
            else:
                assert fetcher.errors == [] and state.truncation is None
                assert not rounds.is_truncating() and rounds.has_fetch_work()  # fetching from here
            leader_log.close()
        finally:
            log_manager.shutdown()

    asyncio.run(scenario())
