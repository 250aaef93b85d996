"""broker/topic_metrics.py and its hook in Fetch (broker/handlers/fetch.py): a topic's
bytes_out counts what consumers' fetches returned, once per partition answered, and never a
follower's replication fetch (Kafka's BytesOutPerSec{topic}, KIP-153)."""

from __future__ import annotations

import asyncio

import pytest

from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers.fetch import handle_fetch
from broker.handlers.fetch_partitions import size_of
from broker.topic_metrics import BrokerTopicStats, count_fetch
from common.protocol import fetch
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, Partition, RegisterBroker, Topic
from tests.handler_context import replica_context
from tests.log_helpers import batch

SESSIONLESS_VERSION = 4  # before KIP-227's sessions (v7) and topic ids (v13): names on the wire

# broker 1 leads t-0 (replicas 1, 2)
IMAGE = apply(EMPTY_IMAGE, enumerate((
    BeginEpoch(1),
    *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),), None) for b in (1, 2)),
    *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2)),
    Topic("t", "T"), Partition("T", 0, (1, 2), (1, 2), leader=1, leader_epoch=3),
), start=EMPTY_IMAGE.offset + 1))  # broker b registers at offset b: its epoch
T0 = TopicPartition("t", 0)
CLIENT = ClientInfo("test", "/127.0.0.1")


@pytest.fixture
def ctx(tmp_path):
    with replica_context(tmp_path, IMAGE) as context:
        yield context


def fetch_t0(ctx: BrokerContext, offset: int, *, replica_id: int) -> int:
    """A one-partition fetch of t-0 at `offset`; the record bytes it answered."""
    part = fetch.FetchPartition(0, offset, -1, 1 << 20, 3)
    req = fetch.FetchRequest(replica_id, 0, 1, 1 << 20, 0, (fetch.FetchTopic("t", (part,)),))
    response = asyncio.run(handle_fetch(ctx, req, SESSIONLESS_VERSION, CLIENT))
    (topic,) = response.responses
    (answer,) = topic.partitions
    assert answer.error_code == 0
    return size_of(answer)


def test_a_consumers_fetch_counts_its_record_bytes_a_followers_does_not(ctx) -> None:
    ctx.replicas.append(T0, batch(5), acks=1)
    ctx.replicas.read(T0, 5, 1 << 20, replica_id=2)  # follower caught up: high watermark 5
    assert fetch_t0(ctx, 0, replica_id=2) > 0  # replication: records sent, not counted
    assert ctx.topic_stats.bytes_out == {}
    size = fetch_t0(ctx, 0, replica_id=-1)
    assert size > 0
    assert ctx.topic_stats.bytes_out == {"t": size}
    assert fetch_t0(ctx, 5, replica_id=-1) == 0  # at the log end: nothing returned, nothing added
    assert fetch_t0(ctx, 0, replica_id=-1) == size
    assert ctx.topic_stats.bytes_out == {"t": 2 * size}


def test_count_fetch_adds_per_topic_and_skips_empty_answers() -> None:
    stats = BrokerTopicStats()
    count_fetch(stats, [("a", 10), ("b", 0), ("a", 5)], replica_id=-1)
    count_fetch(stats, [("a", 100), ("c", 7)], replica_id=3)
    assert stats.bytes_out == {"a": 15}
