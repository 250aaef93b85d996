"""broker/replication/replica_fetcher.py: ReplicaFetcher.back_off. A partition whose leader is
behind (UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER: it has not applied its own election yet)
is retried after 20 ms, doubling per consecutive answer up to replica.fetch.backoff.ms; the
count of those answers grows for as long as the leader stays behind, so the doubling must stay
bounded (0.02 * 2 ** 1,100 does not fit a float: the fetcher failed on every round)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.replication.fetcher_state import FetcherSettings, PartitionFetchState
from broker.replication.replica_fetcher import ReplicaFetcher
from common.topic_partition import TopicPartition

TP = TopicPartition("t", 0)
BACKOFF_MS = 1000


class Rounds:
    """FetchRounds.back_off, noted."""

    def __init__(self) -> None:
        self.retry_at: list[float] = []

    def back_off(self, tp: TopicPartition, state: PartitionFetchState, retry_at: float) -> None:
        state.retry_at = retry_at
        self.retry_at.append(retry_at)


def delays(answers: int, *, leader_behind: bool) -> list[float]:
    """The delay of each of `answers` consecutive back-offs of one partition, in seconds."""
    async def scenario() -> list[float]:
        rounds = Rounds()
        fetcher = SimpleNamespace(_settings=FetcherSettings(5, backoff_ms=BACKOFF_MS), _rounds=rounds)
        state = PartitionFetchState(0, None)
        loop, out = asyncio.get_running_loop(), []
        for _ in range(answers):
            before = loop.time()
            ReplicaFetcher.back_off(fetcher, TP, state, leader_behind=leader_behind)  # type: ignore[arg-type]
            out.append(rounds.retry_at[-1] - before)
        return out
    return asyncio.run(scenario())


def test_a_leader_behind_doubles_up_to_the_backoff_for_as_long_as_it_stays_behind() -> None:
    # ~20 minutes of a leader that does not apply its election (one answer per second)
    behind = delays(1_200, leader_behind=True)
    assert behind[:8] == pytest.approx([0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0], abs=0.005)
    assert behind[-100:] == pytest.approx([BACKOFF_MS / 1000] * 100, abs=0.005)
    # any other error: replica.fetch.backoff.ms at once
    assert delays(3, leader_behind=False) == pytest.approx([1.0, 1.0, 1.0], abs=0.005)
