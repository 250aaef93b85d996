"""broker/handlers/fetch.py: a follower's fetch session answers its partitions in turn when
the response size limit cuts it short (Kafka's round robin), so a partition with one small
batch is not starved by a busy partition beside it (issue 35: the acks=all canary beside
bulk load).

A real ReplicaManager and FetchSessions on one broker that leads t-0..t-2 (replicas 1, 2);
broker 2's fetches are built as its fetcher builds them: the full fetch opens the session,
each incremental one names the partitions whose fetch offset moved."""

from __future__ import annotations

import asyncio
import random

import pytest

from broker.fetch_sessions import FetchSessions
from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers.fetch import handle_fetch
from broker.handlers.fetch_partitions import size_of
from common.protocol import fetch
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, Partition, RegisterBroker, Topic
from tests.handler_context import replica_context
from tests.log_helpers import batch

SESSION_VERSION = 11  # sessions (v7+), topics by name (before v13)
FOLLOWER = 2
PARTITIONS = 3
IMAGE = apply(EMPTY_IMAGE, enumerate((
    BeginEpoch(1),
    *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),), None) for b in (1, 2)),
    *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2)),
    Topic("t", "T"), *(Partition("T", i, (1, 2), (1, 2), leader=1, leader_epoch=3) for i in range(PARTITIONS)),
), start=EMPTY_IMAGE.offset + 1))
TPS = [TopicPartition("t", i) for i in range(PARTITIONS)]
BATCH = len(batch(1))  # every batch here is one record of this size
CLIENT = ClientInfo("broker-2-fetcher", "/127.0.0.2")


@pytest.fixture
def ctx(tmp_path):
    with replica_context(tmp_path, IMAGE) as context:
        context.fetch_sessions = FetchSessions(context.replicas, max_entries=10, rng=random.Random(3))
        yield context


class Follower:
    """Broker 2's fetcher, one batch of response budget per fetch: it names what moved."""

    def __init__(self) -> None:
        self.offsets = {tp: 0 for tp in TPS}
        self.session_id, self.epoch = 0, 0

    def fetch(self, ctx: BrokerContext, named: list[TopicPartition]) -> list[TopicPartition]:
        """One fetch naming `named`; the partitions it took records of."""
        parts = tuple(fetch.FetchPartition(tp.partition, self.offsets[tp], 1 << 20, 0, 3) for tp in named)
        req = fetch.FetchRequest(FOLLOWER, 0, 1, BATCH, fetch.READ_UNCOMMITTED,
                                 (fetch.FetchTopic("t", parts),) if parts else (), self.session_id, self.epoch)
        response = asyncio.run(handle_fetch(ctx, req, SESSION_VERSION, CLIENT))
        assert response.error_code == 0 and response.session_id != 0
        self.session_id, self.epoch = response.session_id, self.epoch + 1
        took = []
        for topic in response.responses:
            for answer in topic.partitions:
                tp = TopicPartition("t", answer.partition_index)
                assert answer.error_code == 0
                if size_of(answer):
                    self.offsets[tp] += size_of(answer) // BATCH
                    took.append(tp)
        return took


def test_a_busy_partition_cannot_starve_the_others(ctx) -> None:
    """t-0 gets a new batch before every fetch; t-1 and t-2 hold one batch each. With room
    for one batch per response, every partition is answered within three fetches."""
    for tp in TPS:
        ctx.replicas.append(tp, batch(1), acks=1)
    follower = Follower()
    served: list[TopicPartition] = []
    named = TPS  # the full fetch that opens the session names every partition
    for _ in range(PARTITIONS):
        ctx.replicas.append(TPS[0], batch(1), acks=1)
        took = follower.fetch(ctx, named)
        served += took
        named = took  # the fetcher names the partitions whose offset moved
    assert sorted(served, key=lambda tp: tp.partition) == TPS, served
    assert follower.offsets[TPS[1]] == follower.offsets[TPS[2]] == 1


def test_an_idle_partition_s_new_batch_is_answered_next_despite_the_busy_one(ctx) -> None:
    """The canary's case: t-0 always has more than a response holds; a batch appended to t-1
    is answered by the next fetch or the one after, never left behind indefinitely."""
    follower = Follower()
    for _ in range(4):
        ctx.replicas.append(TPS[0], batch(1), acks=1)
    named = follower.fetch(ctx, TPS)
    assert named == [TPS[0]]
    for round_ in range(3):
        ctx.replicas.append(TPS[0], batch(1), acks=1)
        if round_ == 0:
            ctx.replicas.append(TPS[1], batch(1), acks=1)
        named = follower.fetch(ctx, named)
        if TPS[1] in named:
            break
    assert follower.offsets[TPS[1]] == 1
