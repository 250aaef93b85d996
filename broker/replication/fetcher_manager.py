"""Follower fetchers by leader: one ReplicaFetcher (task + connection) per leader broker.

    fetchers = ReplicaFetcherManager(replicas, settings, image=lambda: follower.state.image)
    replicas.fetchers = fetchers          # apply_changes adds and removes partitions
    ...
    await fetchers.shutdown()

Kafka's ReplicaFetcherManager: a partition moves to its new leader's fetcher when the
leader changes; a fetcher left without partitions stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from broker.replication.fetcher_state import FetcherSettings
from broker.replication.replica_fetcher import ReplicaFetcher
from common.topic_partition import TopicPartition
from metadata.image import MetadataImage

if TYPE_CHECKING:  # the replica manager (above this package) hands itself in: annotation only
    from broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

__all__ = ["ReplicaFetcherManager"]


class ReplicaFetcherManager:
    """The fetchers by leader id; partitions move between them as leaders change."""

    def __init__(self, replicas: ReplicaManager, settings: FetcherSettings, *,
                 image: Callable[[], MetadataImage]) -> None:
        self.replicas = replicas
        self.settings = settings
        self._image = image
        self.fetchers: dict[int, ReplicaFetcher] = {}
        # The leader each partition was last handed to: a removal or a registration change
        # goes to that one fetcher, not to all (a controlled shutdown at 100,000 partitions
        # removes 33,000 and changes 66,000 per surviving broker). It may name a leader whose
        # fetcher dropped the partition or stopped since: that fetcher's removal is a no-op.
        self._leader_of: dict[TopicPartition, int] = {}

    def add_partitions(self, partitions: Iterable[tuple[TopicPartition, int, int]]) -> None:
        """Fetch each (tp, leader, leader epoch) from that leader, truncating first."""
        for tp, leader_id, leader_epoch in partitions:
            self._remove(tp)
            fetcher = self.fetchers.get(leader_id)
            if fetcher is None:
                fetcher = self.fetchers[leader_id] = ReplicaFetcher(self, leader_id)
                log.info("Started the fetcher of leader %d", leader_id)
            fetcher.add(tp, leader_epoch)
            self._leader_of[tp] = leader_id
        self._stop_idle()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._remove(tp)
        self._stop_idle()

    def registrations_changed(self, tps: Iterable[TopicPartition]) -> None:
        """This broker joined or left the ISR of these followed partitions without their leader
        or leader epoch moving: their fetchers build their entries again."""
        by_leader: dict[int, list[TopicPartition]] = {}
        leader_of = self._leader_of
        for tp in tps:
            leader_id = leader_of.get(tp)
            if leader_id is not None:
                by_leader.setdefault(leader_id, []).append(tp)
        for leader_id, changed in by_leader.items():  # a fetcher per leader broker: a handful
            fetcher = self.fetchers.get(leader_id)
            if fetcher is not None:
                fetcher.registrations_changed(changed)

    def _stop_idle(self) -> None:
        for leader_id in [i for i, f in self.fetchers.items() if not f.partitions]:
            self.fetchers.pop(leader_id).stop()
            log.info("Stopped the fetcher of leader %d (no partitions left)", leader_id)

    def _remove(self, tp: TopicPartition) -> None:
        leader_id = self._leader_of.pop(tp, None)
        fetcher = None if leader_id is None else self.fetchers.get(leader_id)
        if fetcher is not None:
            fetcher.remove(tp)

    def fetching(self, tp: TopicPartition) -> int | None:
        """The leader `tp` is fetched from, if any (tests, metrics)."""
        for leader_id, fetcher in self.fetchers.items():
            if tp in fetcher.partitions:
                return leader_id
        return None

    def leader_address(self, leader_id: int) -> tuple[str, int] | None:
        registration = self._image().broker(leader_id)
        if registration is None:
            return None
        for listener in registration.listeners:
            if self.settings.listener_name is None or listener.name == self.settings.listener_name:
                return listener.host, listener.port
        return None

    async def shutdown(self) -> None:
        """Stop every fetcher and close its connection (bounded: tasks are cancelled)."""
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._leader_of.clear()
        for fetcher in fetchers:
            fetcher.stop()
        await asyncio.gather(*(f.task for f in fetchers if f.task is not None), return_exceptions=True)
