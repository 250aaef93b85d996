"""broker/replication/fetcher_manager.py: a partition is fetched by its leader's fetcher alone;
moving, removing it or changing its registration touches that one fetcher; an idle fetcher
stops. The fetchers' tasks never run here (no await between the calls): no network."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.replication.fetcher_manager import ReplicaFetcherManager
from broker.replication.fetcher_state import FetcherSettings
from common.log_config import LogConfig
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, Partition, RegisterBroker, Topic
from tests.log_helpers import NOW

ME = 5
BROKERS = (4, 5, 6)
IMAGE = apply(EMPTY_IMAGE, enumerate([
    BeginEpoch(1),
    *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", "127.0.0.1", 1),)) for b in BROKERS),
    *(BrokerRegistrationChange(b, i, fenced=False) for i, b in enumerate(BROKERS, start=1)),
    Topic("t", "T"),
    *(Partition("T", p, (4 if p % 2 else 6, 5), (4 if p % 2 else 6, 5), leader=4 if p % 2 else 6, leader_epoch=1)
      for p in range(4)),
]))
TPS = [TopicPartition("t", p) for p in range(4)]  # t-1, t-3 led by 4; t-0, t-2 by 6


def dirty(manager: ReplicaFetcherManager, leader_id: int) -> set[TopicPartition]:
    return set(manager.fetchers[leader_id]._rounds._dirty)


def test_partitions_move_between_fetchers_and_changes_reach_only_their_own(tmp_path: Path) -> None:
    async def scenario() -> None:
        log_manager = LogManager([tmp_path], LogConfig(), now_ms=NOW)
        replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
        manager = ReplicaFetcherManager(replicas, FetcherSettings(ME), image=lambda: IMAGE)
        try:
            replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, IMAGE, ME), IMAGE)
            manager.add_partitions((tp, 4 if tp.partition % 2 else 6, 1) for tp in TPS)
            assert [manager.fetching(tp) for tp in TPS] == [6, 4, 6, 4]
            for fetcher in manager.fetchers.values():
                fetcher._rounds._dirty.clear()
            manager.registrations_changed([TPS[1], TopicPartition("t", 9)])  # t-9: fetched nowhere
            assert dirty(manager, 4) == {TPS[1]} and dirty(manager, 6) == set()
            manager.add_partitions([(TPS[1], 6, 1)])  # t-1's leader moved to 6
            assert manager.fetching(TPS[1]) == 6 and set(manager.fetchers[4].partitions) == {TPS[3]}
            manager.remove_partitions([TPS[3], TPS[0]])
            assert 4 not in manager.fetchers  # no partitions left: stopped
            assert [manager.fetching(tp) for tp in TPS] == [None, 6, 6, None]
            manager.add_partitions([(TPS[3], 4, 1)])  # a new fetcher of leader 4
            manager.remove_partitions([TPS[3]])
            manager.registrations_changed(TPS)
            assert set(manager.fetchers) == {6} and dirty(manager, 6) >= {TPS[1], TPS[2]}
        finally:
            await manager.shutdown()
            log_manager.shutdown()
        assert manager.fetchers == {}

    asyncio.run(scenario())
