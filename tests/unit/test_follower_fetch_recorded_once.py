"""A follower's fetch is recorded once, on its first read (Kafka's ReplicaManager.fetchMessages
calls updateFollowerFetchState with the request's fetchTimeMs), not again when it waited and
is read again (Kafka's DelayedFetch.onComplete reads with updateFetchState off): woken by an
append, or at its deadline, on both waits (a session's parked fetch, a full fetch in the
fetch purgatory). The ISR lag reading that follows is Kafka's, and the ISR expand the woken
fetch used to propose happens on the follower's next fetch, where Kafka proposes it.

A real ReplicaManager, FetchSessions and Fetch handler on broker 1, leading t-0, on a fake
clock that the broker's timers (the fetch deadlines) share; followers' fetches are v11 with
the current leader epoch, as tidelog's replica fetcher sends them."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from broker.fetch_sessions import FetchSessions
from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers.fetch import fetch_now
from broker.handlers.fetch_partitions import size_of
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.replication.partition import Partition as HostedPartition
from broker.server import Later
from broker.timers import TimerService
from common.log_config import LogConfig
from common.protocol import fetch
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import changes_for_broker
from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, Partition, RegisterBroker, Topic
from tests.log_helpers import NOW, batch

ME = 1
LAG_MS = 30_000
MAX_WAIT_MS = 500
LEADER_EPOCH = 3
VERSION = 11  # sessions, the current leader epoch, topics by name
TP = TopicPartition("t", 0)
CLIENT = ClientInfo("replica-fetcher", "/127.0.0.2")
ANSWER_BOUND_S = 10.0  # a bound on awaiting an answer the wake sets in the next loop pass, not a timing


def image(replicas: tuple[int, ...], isr: tuple[int, ...], fenced: tuple[int, ...] = ()) -> MetadataImage:
    return apply(EMPTY_IMAGE, enumerate((
        BeginEpoch(1),  # offset 0: broker b registers at offset b (its broker epoch)
        *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),), None) for b in (1, 2, 3)),
        *(BrokerRegistrationChange(b, b, fenced=b in fenced) for b in (1, 2, 3)),
        Topic("t", "T"), Partition("T", 0, replicas, isr, leader=ME, leader_epoch=LEADER_EPOCH),
    ), start=EMPTY_IMAGE.offset + 1))


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


class RecordingAlterPartition:
    """The AlterPartition manager: the ISRs proposed, none sent (each fetch may propose again)."""

    def __init__(self) -> None:
        self.proposed: list[tuple[int, ...]] = []
        self.pending = 0

    def submit(self, item: Any, _on_result: Any) -> bool:
        self.proposed.append(tuple(replica for replica, _epoch in item.new_isr))
        return False

    def discard(self, tp: TopicPartition) -> None:
        pass


@dataclass
class Leader:
    clock: Clock
    replicas: ReplicaManager
    ctx: BrokerContext
    alter: RecordingAlterPartition
    images: list[MetadataImage]

    @property
    def partition(self) -> HostedPartition:
        return self.replicas.partitions[TP]

    def set_image(self, new: MetadataImage) -> None:
        self.replicas.apply_changes(changes_for_broker(self.images[-1], new, ME), new)
        self.images.append(new)

    def unfence(self, broker_id: int) -> None:
        old = self.images[-1]
        self.set_image(apply(old, [(old.offset + 1, BrokerRegistrationChange(broker_id, broker_id, fenced=False))]))


@pytest.fixture
def leader(tmp_path) -> Iterator[Any]:
    made: list[LogManager] = []

    def make(first: MetadataImage) -> Leader:
        clock = Clock()
        alter = RecordingAlterPartition()
        log_manager = LogManager([tmp_path / f"logs-{len(made)}"], LogConfig(), now_ms=NOW)
        made.append(log_manager)
        replicas = ReplicaManager(ME, log_manager, now_ms=clock, replica_lag_time_max_ms=LAG_MS,
                                  alter_partition=alter,  # type: ignore[arg-type]
                                  timers=TimerService(clock, driven=False))  # deadlines run when a test says
        images = [EMPTY_IMAGE]
        ctx = BrokerContext(ME, replicas, lambda: images[-1], ("127.0.0.1", 9092), None, None, None, None,
                            None, None, None, None, None, None, None, None)  # type: ignore[arg-type]
        ctx.fetch_sessions = FetchSessions(replicas, max_entries=10, rng=random.Random(3))
        hosted = Leader(clock, replicas, ctx, alter, images)
        hosted.set_image(first)
        return hosted

    yield make
    for log_manager in made:
        log_manager.shutdown()


class Follower:
    """A follower's fetcher: one session (opened by its first fetch), naming t-0 at its offset."""

    def __init__(self, broker_id: int, *, sessions: bool = True, max_wait_ms: int = MAX_WAIT_MS) -> None:
        self.broker_id, self.sessions, self.max_wait_ms = broker_id, sessions, max_wait_ms
        self.offset = 0
        self.session_id, self.epoch = 0, 0 if sessions else -1

    def start(self, hosted: Leader) -> fetch.FetchResponse | Later[fetch.FetchResponse]:
        """Send a fetch from its offset: the answer, or the Later of one that waits."""
        part = fetch.FetchPartition(TP.partition, self.offset, 1 << 20, 0, LEADER_EPOCH)
        req = fetch.FetchRequest(self.broker_id, self.max_wait_ms, 1, 1 << 20, fetch.READ_UNCOMMITTED,
                                 (fetch.FetchTopic(TP.topic, (part,)),), self.session_id, self.epoch)
        return fetch_now(hosted.ctx, req, VERSION, CLIENT)

    def took(self, response: fetch.FetchResponse) -> int:
        """Take an answer (its session, its records); the records it took."""
        assert response.error_code == 0
        if self.sessions:
            assert response.session_id != 0
            self.session_id, self.epoch = response.session_id, self.epoch + 1
        records = 0
        for topic in response.responses:
            for answer in topic.partitions:
                assert answer.error_code == 0
                records += size_of(answer) // len(batch(1))  # one-record batches only here
        self.offset += records
        return records


async def answered(pending: fetch.FetchResponse | Later[fetch.FetchResponse]) -> fetch.FetchResponse:
    if isinstance(pending, Later):
        return await asyncio.wait_for(pending.answer, ANSWER_BOUND_S)
    return pending


@pytest.fixture
def recordings(monkeypatch) -> list[tuple[int, int, int]]:
    """Every follower fetch a leader records: (replica, fetch offset, clock)."""
    seen: list[tuple[int, int, int]] = []
    record = HostedPartition.record_follower_fetch

    def counting(self: HostedPartition, replica_id: int, fetch_offset: int, now_ms: int, *args: Any) -> None:
        seen.append((replica_id, fetch_offset, now_ms))
        record(self, replica_id, fetch_offset, now_ms, *args)

    monkeypatch.setattr(HostedPartition, "record_follower_fetch", counting)
    return seen


@pytest.mark.parametrize("sessions", [True, False], ids=["parked-on-its-session", "in-the-fetch-purgatory"])
def test_a_fetch_woken_by_an_append_is_recorded_once_at_its_arrival(leader, recordings, sessions) -> None:
    hosted = leader(image((1, 2, 3), (1, 2, 3)))
    follower = Follower(2, sessions=sessions)

    async def run() -> None:
        hosted.replicas.append(TP, batch(1), acks=1)
        assert follower.took(await answered(follower.start(hosted))) == 1  # opens its session
        hosted.clock.now = arrival = NOW + 1_000
        pending = follower.start(hosted)  # at the log end: it waits
        assert isinstance(pending, Later)
        recordings.clear()
        hosted.clock.now = NOW + 1_200
        hosted.replicas.append(TP, batch(1), acks=1)  # wakes it: read again, with the new record
        assert follower.took(await answered(pending)) == 1
        assert recordings == [], "the woken read recorded the follower's fetch again"
        state = hosted.partition.follower_states[2]
        # where its request said, when it arrived, with the log end it found (Kafka's updateFetchState)
        assert (state.log_end_offset, state.last_fetch_ms, state.last_caught_up_ms,
                state.last_fetch_leader_log_end_offset) == (1, arrival, arrival, 1)
        # Its next fetch reaches the log end its previous one found (1), not the one now (3):
        # caught up as of that previous fetch's arrival (Kafka's lastFetchTimeMs), not its wake.
        hosted.replicas.append(TP, batch(1), acks=1)
        hosted.clock.now = NOW + 1_300
        assert follower.took(await answered(follower.start(hosted))) == 1
        assert recordings == [(2, 2, NOW + 1_300)]
        assert hosted.partition.follower_states[2].last_caught_up_ms == arrival

    asyncio.run(run())


def test_a_fetch_read_again_at_its_deadline_is_not_recorded_again(leader, recordings) -> None:
    """Parked at the log end; the other follower's fetch moves the HW (a change, not due for
    a follower): the deadline reads it again to answer the HW, and records nothing."""
    hosted = leader(image((1, 2, 3), (1, 2, 3)))
    follower, other = Follower(2), Follower(3)

    async def run() -> None:
        hosted.replicas.append(TP, batch(1), acks=1)
        for each in (follower, other):
            assert each.took(await answered(each.start(hosted))) == 1
        hosted.clock.now = arrival = NOW + 1_000
        pending = follower.start(hosted)
        assert isinstance(pending, Later)
        hosted.clock.now = NOW + 1_100
        waiting_other = other.start(hosted)  # both at 1 now: the HW moves to 1
        assert isinstance(waiting_other, Later)
        assert hosted.partition.log.high_watermark == 1
        recordings.clear()
        hosted.clock.now = arrival + MAX_WAIT_MS
        hosted.replicas.timers.run_due()  # the first fetch's deadline (and nothing else yet)
        response = await answered(pending)
        assert [a.high_watermark for t in response.responses for a in t.partitions] == [1]
        assert recordings == [], "the expired read recorded the follower's fetch again"
        state = hosted.partition.follower_states[2]
        assert (state.last_fetch_ms, state.last_caught_up_ms) == (arrival, arrival)

    asyncio.run(run())


def test_a_park_longer_than_the_lag_reads_the_lag_as_kafka(leader, recordings) -> None:
    """At the log end the follower is caught up however long it waits (Kafka's isCaughtUp:
    at the leader's LEO): the isr-expiration pass leaves it in. Woken, it is answered without
    being recorded again, and its next fetch, at the log end, catches it up at that fetch."""
    hosted = leader(image((1, 2), (1, 2)))
    follower = Follower(2, max_wait_ms=3 * LAG_MS)

    async def run() -> None:
        hosted.replicas.append(TP, batch(1), acks=1)
        assert follower.took(await answered(follower.start(hosted))) == 1
        hosted.clock.now = arrival = NOW + 1_000
        pending = follower.start(hosted)
        assert isinstance(pending, Later)
        for _ in range(4):  # two lag times at the log end
            hosted.clock.now += LAG_MS // 2
            assert hosted.replicas.maybe_shrink_isr() == 0
        assert hosted.alter.proposed == []
        recordings.clear()
        hosted.replicas.append(TP, batch(1), acks=1)
        assert follower.took(await answered(pending)) == 1
        assert recordings == []
        assert hosted.partition.follower_states[2].last_fetch_ms == arrival
        hosted.clock.now += 1
        again = hosted.clock.now
        assert isinstance(follower.start(hosted), Later)  # at the new log end: caught up now
        assert hosted.partition.follower_states[2].last_caught_up_ms == again
        hosted.clock.now += LAG_MS
        assert hosted.replicas.maybe_shrink_isr() == 0
        assert hosted.alter.proposed == []

    asyncio.run(run())


def test_an_isr_expand_a_woken_fetch_allows_is_proposed_on_the_followers_next_fetch(leader) -> None:
    """Broker 3, out of the ISR and fenced, waits at the log end; it is unfenced meanwhile (no
    change to the partition, so nothing wakes it). An append wakes it: the read again
    proposes nothing (Kafka's DelayedFetch does not call maybeExpandIsr); its next fetch,
    recorded on arrival, proposes the ISR with it (Kafka's updateFollowerFetchState)."""
    hosted = leader(image((1, 2, 3), (1, 2), fenced=(3,)))
    follower = Follower(3)

    async def run() -> None:
        hosted.replicas.append(TP, batch(1), acks=1)
        assert follower.took(await answered(follower.start(hosted))) == 1
        pending = follower.start(hosted)
        assert isinstance(pending, Later)
        assert hosted.alter.proposed == []  # fenced: not eligible
        hosted.unfence(3)
        hosted.replicas.append(TP, batch(1), acks=1)
        assert follower.took(await answered(pending)) == 1
        assert hosted.alter.proposed == [], "the woken read proposed the expand"
        assert isinstance(follower.start(hosted), Later)
        assert hosted.alter.proposed == [(1, 2, 3)]

    asyncio.run(run())
