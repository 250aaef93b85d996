"""Fetch sessions (KIP-227) against a real cluster: raw session errors, real consumers whose
assignment changes mid-session and across a leader change, and followers whose idle
incremental fetches keep them in the ISR.

One cluster (1 controller + brokers 2-4, `replication_fixtures`) serves the whole module.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.replication.kafka_connection import KafkaConnection
from common.errors import ErrorCode
from common.prometheus import samples
from common.protocol import fetch
from common.protocol.leader_discovery import LeaderIdAndEpoch
from common.protocol.api_keys import ApiKey
from common.protocol.metadata import wire_topic_id
from tests.integration.cluster_fixtures import http
from tests.integration.replication_clients import (
    assert_delivered,
    leader_bootstrap,
    values,
    wait_unfenced,
)
from tests.integration.replication_clients import produce as produce_reports
from tests.integration.replication_fixtures import (
    create_topic,
    partition_state,
    replicated_cluster,
    wait_for_state,
    wait_full_isr,
)
from localcluster.launcher import LocalCluster
from localcluster.node_process import NodeProcess

CLIENT_TIMEOUT_S = 60.0
VERSION = 11


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root: Path = tmp_path_factory.mktemp("fetch-sessions")
    with replicated_cluster(root) as (running, _nemesis):
        yield running


def produce(bootstrap_servers: str, topic: str, vs: list[bytes], *, acks: str, partition: int = 0) -> None:
    assert_delivered(produce_reports(bootstrap_servers, topic, vs, acks=acks, partition=partition))


def bootstrap(cluster: LocalCluster) -> str:
    return ",".join(node.spec.bootstrap_address for node in cluster.brokers)


# ---- raw protocol: the session rules on the wire ----------------------------------------


def raw_fetch(cluster: LocalCluster, leader: int, requests: list[fetch.FetchRequest]) -> list[fetch.FetchResponse]:
    host, port = leader_bootstrap(cluster, leader).split(":")

    async def run() -> list[fetch.FetchResponse]:
        conn = await KafkaConnection.open(host, int(port), client_id="session-test", timeout_s=10.0)
        try:
            return [await conn.request(ApiKey.FETCH, VERSION, fetch.encode_fetch_request(r, VERSION),
                                       fetch.decode_fetch_response, extra_timeout_s=1.0) for r in requests]
        finally:
            await conn.close()

    return asyncio.run(run())


def request(topic: str, partitions: list[int], session_id: int, epoch: int, *, offset: int = 0,
            forgotten: tuple[fetch.ForgottenTopic, ...] = ()) -> fetch.FetchRequest:
    parts = tuple(fetch.FetchPartition(p, offset, 1 << 20) for p in partitions)
    return fetch.FetchRequest(-1, 100, 1, 1 << 20, fetch.READ_UNCOMMITTED,
                              (fetch.FetchTopic(topic, parts),) if parts else (), session_id, epoch, forgotten)


def test_session_errors_on_the_wire(cluster: LocalCluster) -> None:
    create_topic(cluster, "raw", partitions=1)
    leader = wait_for_state(cluster, "raw", 0, "a leader", lambda s: s["leader"] >= 0)["leader"]
    produce(leader_bootstrap(cluster, leader), "raw", values("r", 3), acks="all")
    unknown, full, wrong_epoch = raw_fetch(cluster, leader, [
        request("raw", [0], 123456, 1),  # no such session
        request("raw", [0], 0, 0),  # full: opens a session
        request("raw", [], 1, 7),  # refused below once the real id is known
    ])
    assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and unknown.responses == ()
    assert full.error_code == 0 and full.session_id > 0
    assert [len(bytes(p.records or b"")) > 0 for t in full.responses for p in t.partitions] == [True]
    assert wrong_epoch.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    sid = full.session_id
    idle, bad_epoch, closed, after_close = raw_fetch(cluster, leader, [
        request("raw", [0], sid, 1, offset=3),  # incremental: moved to the log end, nothing new
        request("raw", [], sid, 1),  # epoch 1 again: a duplicate
        request("raw", [0], sid, -1, offset=3),  # the final epoch closes it (a sessionless fetch)
        request("raw", [], sid, 2),
    ])
    assert idle.error_code == 0 and idle.session_id == sid
    # Offset 3 is the log end: the HW was already reported with the full fetch -> nothing to say.
    assert idle.responses == ()
    assert bad_epoch.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH and bad_epoch.session_id == 0
    assert closed.error_code == 0 and closed.session_id == 0 and len(closed.responses) == 1
    assert after_close.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_incremental_fetch_answers_new_records_and_forgets(cluster: LocalCluster) -> None:
    create_topic(cluster, "inc", partitions=2, replication_factor=1)
    leaders = {p: wait_for_state(cluster, "inc", p, "a leader", lambda s: s["leader"] >= 0)["leader"]
               for p in (0, 1)}
    leader = leaders[0]
    mine = [p for p in (0, 1) if leaders[p] == leader]
    full, = raw_fetch(cluster, leader, [request("inc", mine, 0, 0)])
    sid = full.session_id
    produce(leader_bootstrap(cluster, leader), "inc", values("i", 2), acks="all", partition=0)
    woken, forgot = raw_fetch(cluster, leader, [
        request("inc", [], sid, 1),  # names nothing: the session holds partition 0 at offset 0
        request("inc", [], sid, 2, forgotten=(fetch.ForgottenTopic("inc", (0,)),)),
    ])
    answered = {p.partition_index: p for t in woken.responses for p in t.partitions}
    assert list(answered) == [0] and answered[0].high_watermark == 2 and bytes(answered[0].records or b"")
    assert forgot.error_code == 0
    if mine == [0]:  # the session is left empty: closed, answered sessionless
        assert forgot.session_id == 0


# ---- real consumers ---------------------------------------------------------------------


def confluent_consume(cluster: LocalCluster, topic: str, phases: list[tuple[list[int], int]]) -> dict[int, list[bytes]]:
    """Assign each phase's partitions (the session adds and forgets them) and read until
    `count` records arrived in that phase."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    got: dict[int, list[bytes]] = {}
    positions: dict[int, int] = {}
    try:
        for partitions, count in phases:
            consumer.assign([TopicPartition(topic, p, positions.get(p, 0)) for p in partitions])
            seen = 0
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while seen < count:  # bounded by the deadline
                assert time.monotonic() < deadline, f"consumed {seen} of {count}"
                message = consumer.poll(0.5)
                if message is None or message.error():
                    continue
                got.setdefault(message.partition(), []).append(message.value())
                positions[message.partition()] = message.offset() + 1
                seen += 1
    finally:
        consumer.close()
    return got


def test_confluent_consumer_with_assignment_changes(cluster: LocalCluster) -> None:
    create_topic(cluster, "assign", partitions=3)
    wait_full_isr(cluster, "assign", 3)
    sent = {p: values(f"a{p}-", 20) for p in range(3)}
    for p, vs in sent.items():
        produce(bootstrap(cluster), "assign", vs[:10], acks="all", partition=p)
    got = confluent_consume(cluster, "assign", [([0], 10), ([0, 1, 2], 20)])
    for p, vs in sent.items():
        produce(bootstrap(cluster), "assign", vs[10:], acks="all", partition=p)
    more = confluent_consume(cluster, "assign", [([1, 2], 40)])  # partition 0 dropped
    assert got == {p: sent[p][:10] for p in range(3)}
    assert more == {p: sent[p] for p in (1, 2)}


def kafka_python_consume(cluster: LocalCluster, topic: str, partitions: list[int], count: int) -> list[Any]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap(cluster), group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        out: list[Any] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(out) < count:  # bounded by the deadline
            assert time.monotonic() < deadline, f"consumed {len(out)} of {count}"
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(records)
        return out
    finally:
        consumer.close()


async def aiokafka_consume(cluster: LocalCluster, topic: str, partitions: list[int], count: int) -> list[Any]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap(cluster), group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=100)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        out: list[Any] = []
        async with asyncio.timeout(CLIENT_TIMEOUT_S):
            while len(out) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend(records)
        return out
    finally:
        await consumer.stop()


def test_python_consumers_across_a_leader_change(cluster: LocalCluster) -> None:
    create_topic(cluster, "moves", partitions=2)
    wait_full_isr(cluster, "moves", 2)
    first = {p: values(f"m{p}-", 10) for p in range(2)}
    for p, vs in first.items():
        produce(bootstrap(cluster), "moves", vs, acks="all", partition=p)
    assert len(kafka_python_consume(cluster, "moves", [0, 1], 20)) == 20
    old_leader = partition_state(cluster, "moves", 0)["leader"]
    node = cluster.node(old_leader)
    node.stop()  # controlled shutdown: leadership moves to an ISR member
    try:
        wait_for_state(cluster, "moves", 0, "a new leader", lambda s: s["leader"] not in (-1, old_leader))
        later = {p: values(f"n{p}-", 10) for p in range(2)}
        for p, vs in later.items():
            produce(bootstrap(cluster), "moves", vs, acks="all", partition=p)
        for records in (kafka_python_consume(cluster, "moves", [0, 1], 40),
                        asyncio.run(aiokafka_consume(cluster, "moves", [0, 1], 40))):
            by_partition: dict[int, list[bytes]] = {}
            for r in records:
                by_partition.setdefault(r.partition, []).append(r.value)
            assert by_partition == {p: first[p] + later[p] for p in range(2)}
    finally:
        cluster.nodes[cluster.nodes.index(node)] = NodeProcess.spawn(node.spec)  # same config and data
        wait_unfenced(cluster, old_leader)


# ---- followers ----------------------------------------------------------------------------


def test_idle_followers_stay_in_the_isr(cluster: LocalCluster) -> None:
    """Idle incremental fetches name no partition; the leader must still count them as
    fetches: a produce after an idle spell longer than replica.lag.time.max.ms (4 s here)
    finds every follower still in the ISR, and acks=all completes."""
    create_topic(cluster, "idle", partitions=4)
    wait_full_isr(cluster, "idle", 4)
    time.sleep(6.0)
    for p in range(4):
        produce(bootstrap(cluster), "idle", values(f"x{p}-", 1), acks="all", partition=p)
    time.sleep(1.0)
    for p in range(4):
        state = partition_state(cluster, "idle", p)
        assert sorted(state["isr"]) == sorted(state["replicas"]), state


# ---- v12+ on the wire: topic ids, diverging epochs, leader hints ---------------------------


def raw_fetch_v(cluster: LocalCluster, broker: int, version: int, requests: list[fetch.FetchRequest]
                ) -> list[fetch.FetchResponse]:
    host, port = leader_bootstrap(cluster, broker).split(":")

    async def run() -> list[fetch.FetchResponse]:
        conn = await KafkaConnection.open(host, int(port), client_id="v16-test", timeout_s=10.0)
        try:
            return [await conn.request(ApiKey.FETCH, version, fetch.encode_fetch_request(r, version),
                                       fetch.decode_fetch_response, extra_timeout_s=1.0) for r in requests]
        finally:
            await conn.close()

    return asyncio.run(run())


def by_id(topic_id: Any, partition: int, *, offset: int = 0, last_epoch: int = -1, session_id: int = 0,
          epoch: int = -1) -> fetch.FetchRequest:
    return fetch.FetchRequest(-1, 100, 1, 1 << 20, fetch.READ_UNCOMMITTED, (fetch.FetchTopic(
        "", (fetch.FetchPartition(partition, offset, 1 << 20, last_fetched_epoch=last_epoch),), topic_id),),
        session_id, epoch)


def test_topic_ids_diverging_epochs_and_leader_hints(cluster: LocalCluster) -> None:
    # one replica: since KIP-392 a follower serves a consumer's Fetch v11+, so only a broker that
    # hosts no replica answers NOT_LEADER_OR_FOLLOWER with the leader hint checked below
    create_topic(cluster, "ids", partitions=1, replication_factor=1)
    state = wait_for_state(cluster, "ids", 0, "a leader", lambda s: s["leader"] >= 0)
    leader = state["leader"]
    produce(leader_bootstrap(cluster, leader), "ids", values("d", 4), acks="all")
    status, body = http(f"{cluster.admin_url}/v1/topics/ids")
    assert status == 200, body
    topic_id = wire_topic_id(json.loads(body)["topic_id"])
    unknown_id = uuid.UUID(int=424242)
    good, unknown, diverging, same, opened = raw_fetch_v(cluster, leader, 16, [
        by_id(topic_id, 0),
        by_id(unknown_id, 0),
        by_id(topic_id, 0, offset=4, last_epoch=state["leader_epoch"] + 5),  # an epoch this log never had
        by_id(topic_id, 0, offset=4, last_epoch=state["leader_epoch"]),  # the leader's own: no divergence
        by_id(topic_id, 0, offset=4, epoch=0),  # opens a session named by ids
    ])
    answer = good.responses[0]
    assert answer.topic_id == topic_id and answer.partitions[0].high_watermark == 4
    assert bytes(answer.partitions[0].records or b"")
    assert unknown.responses[0].topic_id == unknown_id
    assert unknown.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    part = diverging.responses[0].partitions[0]
    assert part.error_code == 0 and part.diverging_epoch is not None and not bytes(part.records or b"")
    # Kafka's end offset for an epoch newer than the log's latest is undefined: (-1, -1).
    assert part.diverging_epoch == fetch.EpochEndOffset(-1, -1)
    assert same.responses[0].partitions[0].diverging_epoch is None and same.responses[0].partitions[0].error_code == 0
    # The session was opened with topic ids: a v12 fetch (names) may not use it.
    mismatch, = raw_fetch(cluster, leader, [request("ids", [], opened.session_id, 1)])
    assert mismatch.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    # A broker that does not host the partition names the leader and how to reach it (KIP-951).
    other = next(b for b in (2, 3, 4) if b != leader)
    hint, = raw_fetch_v(cluster, other, 16, [by_id(topic_id, 0)])
    part = hint.responses[0].partitions[0]
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert part.current_leader == LeaderIdAndEpoch(leader, state["leader_epoch"])
    assert [(n.node_id, f"{n.host}:{n.port}") for n in hint.node_endpoints] == [
        (leader, leader_bootstrap(cluster, leader))]


# ---- where an acks=all produce's wait goes (issue 35): the leader's /metrics -----------------


def leader_waits(cluster: LocalCluster, leader: int) -> tuple[float, float]:
    """(produce purgatory waits, follower fetch waits) counted so far by `leader`."""
    with urllib.request.urlopen(cluster.node(leader).spec.metrics_url, timeout=10.0) as answer:
        found = samples(answer.read().decode())
    return (found.get('tidelog_broker_purgatory_wait_ms_count{purgatory="Produce"}', 0.0),
            found.get("tidelog_broker_follower_fetch_wait_ms_count", 0.0))


def test_the_leader_counts_acks_all_waits_and_follower_fetch_waits(cluster: LocalCluster) -> None:
    """Each acks=all produce waits in the leader's Produce purgatory for both followers to
    fetch it, and each append waits for a follower's fetch to read it: both histograms grow."""
    create_topic(cluster, "waits", partitions=1)
    wait_full_isr(cluster, "waits", 1)
    leader = partition_state(cluster, "waits", 0)["leader"]
    produced_before, fetched_before = leader_waits(cluster, leader)
    for i in range(5):  # one at a time: each is its own produce request
        produce(bootstrap(cluster), "waits", values(f"w{i}-", 1), acks="all")
    produced, fetched = leader_waits(cluster, leader)
    assert produced - produced_before >= 5, (produced_before, produced)
    assert fetched - fetched_before >= 5, (fetched_before, fetched)
