"""broker/handlers/fetch.py `_fetch_one`: a consumer's sessionless Fetch of one partition (what
librdkafka sends a bulk consumer, every fetch) answered with the bytes `fetch_any`, the path of
every other fetch, gives it, at every version the broker serves, with no naming machinery.

A real ReplicaManager on one broker that leads t-0 and t-1 (leader epoch 3); requests are
encoded and decoded by the codec the broker uses and both answers encoded by it, so the
comparison is of the bytes a client would read."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from broker.fetch_session import FINAL_EPOCH
from broker.handlers import fetch as fetch_handler
from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers.fetch import fetch_any, fetch_now
from broker.server import Later
from common.protocol import fetch
from common.protocol.frame import join_chunks
from common.protocol.metadata import wire_topic_id
from common.topic_partition import TopicPartition
from tests.handler_context import replica_context
from tests.log_helpers import batch
from tests.unit.test_fetch_now import IMAGE

T0 = TopicPartition("t", 0)
CLIENT = ClientInfo("consumer", "/127.0.0.9")
VERSIONS = range(4, 18)
SEEDS = range(6)
FETCHES_PER_VERSION = 40  # per seed: every version's requests from one random stream
WAIT_MS = 5_000  # a fetch that waits is cancelled at once: no test waits for it


@pytest.fixture
def ctx(tmp_path):
    with replica_context(tmp_path, IMAGE) as context:
        yield context


def wire_bytes(chunks: list) -> bytes:
    """The bytes a client reads: a records slice's from its file."""
    return b"".join(c if isinstance(c, bytes) else c.read_bytes() for c in chunks)


def through_codec(req: fetch.FetchRequest, version: int) -> fetch.FetchRequest:
    """`req` as the broker decodes it from the bytes a client would send."""
    return fetch.decode_request_in_range(memoryview(join_chunks(fetch.encode_fetch_request(req, version))), version)


def random_request(rng: random.Random, version: int, end: int) -> fetch.FetchRequest:
    """One partition of t (or of an unknown topic / partition), sessionless, a consumer's."""
    by_id = version >= 13
    topic = rng.choice(["t", "t", "t", "nope"])
    partition = rng.choice([0, 0, 0, 1, 7])
    leader_epoch = rng.choice([-1, 3, 3, 2, 4]) if version >= 9 else -1  # 2: fenced, 4: unknown
    last_fetched = rng.choice([-1, -1, 3, 1, 5]) if version >= 12 else -1  # 1, 5: diverging
    part = fetch.FetchPartition(partition, rng.randrange(end + 3), rng.choice([1, 60, 300, 1 << 20]),
                                rng.choice([-1, 0]) if version >= 5 else -1, leader_epoch, last_fetched)
    return fetch.FetchRequest(
        -1, rng.choice([0, WAIT_MS]), rng.choice([0, 1, 1, 200, 1 << 20]), rng.choice([1, 100, 1 << 20]),
        rng.choice([fetch.READ_UNCOMMITTED, fetch.READ_COMMITTED]) if version >= 4 else fetch.READ_UNCOMMITTED,
        (fetch.FetchTopic("" if by_id else topic, (part,), wire_topic_id(topic.upper()) if by_id else fetch.ZERO_UUID),),
        0, FINAL_EPOCH, (), rng.choice(["", "rack-a"]) if version >= 11 else "")


@pytest.mark.parametrize("seed", SEEDS)
def test_one_partition_fetches_answer_as_fetch_any_does_at_every_version(ctx: BrokerContext, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(rng.randrange(2, 8)):  # a few batches of 1-5 records
        ctx.replicas.append(T0, batch(rng.randrange(1, 6), tag=f"b{i}"), acks=1)
    end = ctx.replicas.get_partition(T0).log.high_watermark

    async def compare() -> tuple[int, int]:
        compared = waited = 0
        for version in VERSIONS:
            for _ in range(FETCHES_PER_VERSION):  # bounded
                req = through_codec(random_request(rng, version, end), version)
                fast, plain = fetch_now(ctx, req, version, CLIENT), fetch_any(ctx, req, version, CLIENT)
                if isinstance(fast, Later) or isinstance(plain, Later):  # both wait, or neither
                    assert isinstance(fast, Later) and isinstance(plain, Later), (seed, version, req)
                    fast.answer.cancel()
                    plain.answer.cancel()
                    waited += 1
                    continue
                assert wire_bytes(fetch.encode_response_in_range(fast, version)) == \
                    wire_bytes(fetch.encode_response_in_range(plain, version)), (seed, version, req)
                compared += 1
        return compared, waited

    compared, waited = asyncio.run(compare())
    assert compared + waited == len(VERSIONS) * FETCHES_PER_VERSION and compared > waited > 0


def test_the_usual_consumer_fetch_builds_no_named_partitions(ctx: BrokerContext, monkeypatch) -> None:
    """librdkafka's fetch (v16, one partition by id, sessionless) is answered without
    `name_partitions` (its Named, its dicts and loops): the one-partition path names it."""
    def refused(*args: object) -> None:
        raise AssertionError("name_partitions ran for a one-partition sessionless fetch")

    monkeypatch.setattr(fetch_handler, "name_partitions", refused)
    ctx.replicas.append(T0, batch(2), acks=1)
    req = through_codec(fetch.FetchRequest(-1, 500, 1, 1 << 20, fetch.READ_COMMITTED, (fetch.FetchTopic(
        "", (fetch.FetchPartition(0, 0, 1 << 20, -1, 3),), wire_topic_id("T")),), 0, FINAL_EPOCH), 16)

    async def run() -> object:
        return fetch_now(ctx, req, 16, CLIENT)
    answer = asyncio.run(run())
    assert isinstance(answer, fetch.FetchResponse)
    (topic,) = answer.responses
    assert topic.topic_id == wire_topic_id("T") and topic.partitions[0].records.length == len(batch(2))


@pytest.mark.parametrize("version", [11, 16])
def test_a_one_partition_fetch_that_must_wait_is_answered_as_fetch_any_when_data_arrives(
        ctx: BrokerContext, version: int) -> None:
    """min_bytes not found: the one-partition path waits in the purgatory as a full fetch does,
    and its answer, when an append wakes it, is the plain path's for the same read."""
    by_id = version >= 13
    req = through_codec(fetch.FetchRequest(-1, 5_000, 1, 1 << 20, fetch.READ_UNCOMMITTED, (fetch.FetchTopic(
        "" if by_id else "t", (fetch.FetchPartition(0, 0, 1 << 20, -1, 3),),
        wire_topic_id("T") if by_id else fetch.ZERO_UUID),), 0, FINAL_EPOCH), version)

    async def run() -> tuple[bytes, bytes]:
        waiting = fetch_now(ctx, req, version, CLIENT)
        assert isinstance(waiting, Later)
        ctx.replicas.append(T0, batch(3), acks=1)
        answer = await asyncio.wait_for(waiting.answer, 2.0)
        plain = fetch_any(ctx, req, version, CLIENT)
        assert isinstance(plain, fetch.FetchResponse)
        return (wire_bytes(fetch.encode_response_in_range(answer, version)),
                wire_bytes(fetch.encode_response_in_range(plain, version)))

    woken, plain = asyncio.run(run())
    assert woken == plain
    assert struct.pack(">q", 0) in woken  # the batch at offset 0 is in it
