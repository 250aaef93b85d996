"""common/protocol/fetch_requests.py: a fetch-session client's requests from a head packed once
are `encode_fetch_request`'s bytes exactly, for seeded sets of partitions named and forgotten
(topics in the order their partitions come, as the fetcher grouped them before), and read back
as the request they stand for."""

from __future__ import annotations

import random

import pytest

from common.protocol import fetch
from common.protocol import fetch_requests
from common.protocol.fetch_requests import FetchRequests
from common.protocol.frame import join_chunks
from common.topic_partition import TopicPartition

TOPICS = ("canary", "t", "\u00fcber-topic", "x" * 249)


def _as_fetch_request(version: int, session_id: int, epoch: int, sent: dict[TopicPartition, fetch.FetchPartition],
                      forgotten: tuple[TopicPartition, ...], rack_id: str) -> fetch.FetchRequest:
    """The same request as the dataclasses the fetcher built before (topics grouped in order)."""
    topics: dict[str, list[fetch.FetchPartition]] = {}
    for tp, p in sent.items():
        topics.setdefault(tp.topic, []).append(p)
    gone: dict[str, list[int]] = {}
    for tp in forgotten:
        gone.setdefault(tp.topic, []).append(tp.partition)
    return fetch.FetchRequest(
        7, 500, 1, 10 << 20, fetch.READ_UNCOMMITTED, tuple(fetch.FetchTopic(t, tuple(ps)) for t, ps in topics.items()),
        session_id, epoch, tuple(fetch.ForgottenTopic(t, tuple(ps)) for t, ps in gone.items()),
        rack_id if version >= 11 else "")


@pytest.mark.parametrize("version", range(9, 12))
@pytest.mark.parametrize("rack_id", ["", "rack-1"])
def test_requests_are_encode_fetch_request_bytes(version: int, rack_id: str) -> None:
    rng = random.Random(version)
    requests = FetchRequests(version, replica_id=7, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20,
                             isolation_level=fetch.READ_UNCOMMITTED, rack_id=rack_id)
    for _ in range(300):
        sent = {TopicPartition(rng.choice(TOPICS), p): fetch.FetchPartition(
            p, rng.randrange(-1, 1 << 50), rng.choice((1, 1 << 20)), rng.randrange(-1, 1 << 40), rng.randrange(-1, 9))
            for p in rng.sample(range(50), rng.choice((0, 0, 1, 1, 3, 20)))}
        forgotten = tuple(TopicPartition(rng.choice(TOPICS), p) for p in rng.sample(range(50), rng.choice((0, 0, 1, 4))))
        session_id, epoch = rng.choice((0, rng.randrange(1 << 31))), rng.choice((0, -1, rng.randrange(1 << 31)))
        body = requests.encode(session_id, epoch, sent.items(), forgotten)
        expected = _as_fetch_request(version, session_id, epoch, sent, forgotten, rack_id)
        assert body == join_chunks(fetch.encode_fetch_request(expected, version))
        assert fetch.decode_fetch_request(memoryview(body), version) == expected


def test_a_fetch_naming_nothing_is_the_head_and_the_session() -> None:
    requests = FetchRequests(11, replica_id=5, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20)
    empty = fetch.FetchRequest(5, 500, 1, 1 << 20, 0, (), 77, 12)
    assert requests.encode(77, 12) == join_chunks(fetch.encode_fetch_request(empty, 11))


def test_only_the_classic_session_versions_and_kafka_string_lengths() -> None:
    for version in (8, 12):
        with pytest.raises(ValueError, match=f"v{version}"):
            FetchRequests(version, replica_id=5, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20)
    requests = FetchRequests(11, replica_id=5, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20)
    with pytest.raises(ValueError, match="32767"):
        requests.encode(0, 0, {TopicPartition("x" * 40_000, 0): fetch.FetchPartition(0, 0, 1)}.items())


def test_encoded_topic_names_are_kept_up_to_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch_requests, "MAX_ENCODED_TOPICS", 2)
    requests = FetchRequests(11, replica_id=7, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20)
    for topic in (*TOPICS, *TOPICS):  # each round names a topic the last did not
        sent = {TopicPartition(topic, 3): fetch.FetchPartition(3, 10, 1 << 20, 0, 1)}
        body = requests.encode(5, 1, sent.items())
        assert body == join_chunks(fetch.encode_fetch_request(_as_fetch_request(11, 5, 1, sent, (), ""), 11))
        assert topic in requests._topics and len(requests._topics) <= 2


@pytest.mark.parametrize("version", range(9, 12))
def test_one_partition_is_packed_as_any_set_is(version: int) -> None:
    """A follower's round names one partition (the one whose offsets moved): `encode` packs it
    in one join, giving what the any-set path gives, with or without partitions forgotten."""
    rng = random.Random(version)
    requests = FetchRequests(version, replica_id=7, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20,
                             rack_id="rack-1")
    for _ in range(100):
        p = rng.randrange(50)
        sent = {TopicPartition(rng.choice(TOPICS), p): fetch.FetchPartition(
            p, rng.randrange(-1, 1 << 50), rng.choice((1, 1 << 20)), rng.randrange(-1, 1 << 40), rng.randrange(-1, 9))}
        forgotten = rng.choice(((), (TopicPartition("t", 1),)))
        session_id, epoch = rng.randrange(1 << 31), rng.randrange(1 << 31)
        body = requests.encode(session_id, epoch, sent.items(), forgotten)
        assert body == requests._encode_any(session_id, epoch, sent.items(), forgotten)
        expected = _as_fetch_request(version, session_id, epoch, sent, forgotten, "rack-1")
        assert fetch.decode_fetch_request(memoryview(body), version) == expected
