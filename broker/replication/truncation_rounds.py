"""A follower fetcher's truncation rounds: OffsetsForLeaderEpoch to the leader, truncate, resume.

A partition joins its leader's fetcher truncating (`truncation.start_truncation`): the
fetcher's task asks the leader where the partition's latest epoch ends, truncates there,
and asks again with older epochs until the two logs agree (KIP-101/279; the steps are
`truncation`'s pure rules); then the partition is fetched from its log end offset. A log
the leader's does not reach (no common epoch, or a Fetch answered OFFSET_OUT_OF_RANGE) is
reset with ListOffsets: truncated to the leader's log end offset when ours is beyond it,
restarted empty at the leader's log start offset when ours is below it (Kafka's
AbstractFetcherThread.truncateToEpochEndOffsets and handleOutOfRangeError).

Each round is one request per leader for all its truncating partitions, awaited by the
fetcher's task (`replica_fetcher.ReplicaFetcher`); a partition's error backs it off alone
through the fetcher, whose back-off and error rules these share with its Fetch rounds.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final, Protocol

from broker.log.leader_epochs import EpochEndOffset
from broker.replication.fetch_rounds import FetchRounds
from broker.replication.fetcher_state import PartitionFetchState
from broker.replication.kafka_connection import KafkaConnection
from broker.replication.partition import Partition
from broker.replication.truncation import AskLeader, TruncateFully, TruncationStep, on_epoch_end_offset
from common.topic_partition import TopicPartition
from common.protocol import list_offsets as lo
from common.protocol import offset_for_leader_epoch as ofle
from common.protocol.api_keys import ApiKey
from common.request_versions import LIST_OFFSETS_VERSION

if TYPE_CHECKING:  # the replica manager (above this package) is its owner's: annotation only
    from broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

OFFSET_FOR_LEADER_EPOCH_VERSION: Final = 3


class TruncatingFetcher(Protocol):
    """What the truncation rounds need of their fetcher (`replica_fetcher.ReplicaFetcher`)."""

    leader_id: int

    def back_off(self, tp: TopicPartition, state: PartitionFetchState, *, leader_behind: bool = False) -> None: ...

    def partition_error(self, tp: TopicPartition, state: PartitionFetchState, code: int, what: str) -> None: ...


class TruncationRounds:
    """One fetcher's truncation rounds, over the connection the fetcher's task hands in."""

    def __init__(self, fetcher: TruncatingFetcher, replicas: ReplicaManager, rounds: FetchRounds,
                 broker_id: int) -> None:
        self._fetcher = fetcher
        self._replicas = replicas
        self._rounds = rounds
        self._broker_id = broker_id

    def _current(self, tp: TopicPartition, state: PartitionFetchState) -> Partition | None:
        """The partition if `state` is still how we fetch it (nothing moved during an await)."""
        if self._rounds.partitions.get(tp) is not state:
            return None
        return self._replicas.follower_partition(tp, state.leader_epoch)

    async def run(self, conn: KafkaConnection) -> None:
        """One round for every truncating partition; each then fetches, or asks again."""
        truncating = self._rounds.truncating()
        await self._truncate(conn, truncating)
        for tp, state in truncating.items():
            self._rounds.truncated(tp, state)

    async def _truncate(self, conn: KafkaConnection, truncating: dict[TopicPartition, PartitionFetchState]
                        ) -> None:
        fetcher, leader_id = self._fetcher, self._fetcher.leader_id
        asked: dict[TopicPartition, tuple[PartitionFetchState, int]] = {}
        rows: list[tuple[str, int, int, int]] = []  # topic, partition, epoch asked, current epoch
        for tp, state in truncating.items():
            ask = state.truncation
            partition = self._current(tp, state)
            if partition is None or ask is None:
                fetcher.back_off(tp, state)
                continue
            if ask.truncate_to is not None:
                self._replicas.truncate_follower(partition, ask.truncate_to,
                                                 f"(before asking leader {leader_id} for epoch {ask.epoch})")
                state.truncation = AskLeader(ask.epoch)
            asked[tp] = (state, ask.epoch)
            rows.append((tp.topic, tp.partition, ask.epoch, state.leader_epoch))
        if not asked:
            return
        request = ofle.request(OFFSET_FOR_LEADER_EPOCH_VERSION, rows, replica_id=self._broker_id)
        response = await conn.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION,
            ofle.encode_request(request, OFFSET_FOR_LEADER_EPOCH_VERSION), ofle.decode_response)
        resets: list[TopicPartition] = []
        for topic in response.topics:
            for answer in topic.partitions:
                tp = TopicPartition(topic.topic, answer.partition)
                entry = asked.get(tp)
                if entry is None:
                    continue
                state, epoch = entry
                partition = self._current(tp, state)
                if partition is None:
                    continue
                if answer.error_code:
                    fetcher.partition_error(tp, state, answer.error_code, "OffsetForLeaderEpoch")
                    continue
                state.leader_behind = 0
                step = on_epoch_end_offset(
                    partition.log.leader_epoch_cache.entries, partition.log.log_end_offset,
                    asked_epoch=epoch, answer=EpochEndOffset(answer.leader_epoch, answer.end_offset))
                if self._apply_step(tp, state, partition, step, epoch, answer):
                    resets.append(tp)
        if resets:
            await self.reset_to_leader(conn, resets)

    def _apply_step(self, tp: TopicPartition, state: PartitionFetchState, partition: Partition,
                    step: TruncationStep, asked: int, answer: Any) -> bool:
        """Act on a truncation step; True when the log must restart at the leader's start."""
        if isinstance(step, AskLeader):
            state.truncation = step  # truncate_to is applied before the next question
            return False
        if isinstance(step, TruncateFully):
            return True
        leader_id = self._fetcher.leader_id
        self._replicas.truncate_follower(
            partition, step.offset, f"by leader epoch: leader {leader_id} ends epoch "
            f"{answer.leader_epoch} at offset {answer.end_offset} (asked for epoch {asked})")
        state.truncation = None
        log.info("Follower %s truncated by leader epoch; fetching from leader %d at offset %d "
                 "(leader epoch %d)", tp, leader_id, partition.log.log_end_offset, state.leader_epoch)
        return False

    async def reset_to_leader(self, conn: KafkaConnection, tps: list[TopicPartition]) -> None:
        """Out of range (or no common epoch): truncate to the leader's LEO if we are beyond
        it, or restart empty at its log start offset if we are below that (Kafka's
        handleOutOfRangeError)."""
        partitions, leader_id = self._rounds.partitions, self._fetcher.leader_id
        states = {tp: partitions[tp] for tp in tps if tp in partitions}
        earliest = await self._list_offsets(conn, states, lo.EARLIEST_TIMESTAMP)
        latest = await self._list_offsets(conn, states, lo.LATEST_TIMESTAMP)
        for tp, state in states.items():
            partition = self._current(tp, state)
            if partition is None:
                continue
            start, end = earliest.get(tp), latest.get(tp)
            if start is None or end is None:
                self._fetcher.back_off(tp, state)
                continue
            leo = partition.log.log_end_offset
            if state.truncation is None and start <= leo <= end:
                continue  # in range after all (the leader's log moved)
            if state.truncation is None and leo > end:
                self._replicas.truncate_follower(partition, end, f"to leader {leader_id}'s log end offset")
            else:
                self._replicas.truncate_follower_fully(
                    partition, start, f"to leader {leader_id}'s log start offset "
                    f"(leader log [{start}, {end}))")
            state.truncation = None
            self._rounds.touch(tp)  # fetched from its new log end offset

    async def _list_offsets(self, conn: KafkaConnection, states: dict[TopicPartition, PartitionFetchState],
                            timestamp: int) -> dict[TopicPartition, int]:
        request = lo.request(LIST_OFFSETS_VERSION, self._broker_id, [
            (tp.topic, tp.partition, timestamp, state.leader_epoch) for tp, state in states.items()])
        response = await conn.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION,
                                      lo.encode_request(request, LIST_OFFSETS_VERSION), lo.decode_response)
        out = {}
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                if p.error_code == 0 and p.offset >= 0:
                    out[tp] = p.offset
                elif tp in states:
                    self._fetcher.partition_error(tp, states[tp], p.error_code, "ListOffsets")
        return out
