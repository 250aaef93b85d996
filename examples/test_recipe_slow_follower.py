"""Recipe (issue 33): a slow follower under acks=all, with confluent-kafka, kafka-python and aiokafka.

Two ways to slow it: its fetches held by the leader (below), or its network link slowed
(`slow_link`, the last test).

The partition leader holds each Fetch of one follower 300 ms before serving it (a request-level
`delay` filtered on that follower's fetcher client id, `broker-<follower>-fetcher-<leader>`). The
follower stays in the ISR (each fetch still catches it up, well within replica.lag.time.max.ms),
so an acks=all write is acknowledged only once that follower has fetched it: the producer's
latency rises by about the delay, and nothing is lost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from tidelog.testing import Cluster

FOLLOWER_DELAY_MS = 300
RECORDS = 5
DELIVERY_TIMEOUT_S = 30.0


def send_confluent(bootstrap: str, topic: str, values: list[bytes]) -> list[float]:
    """Each value sent on its own, acks=all; the seconds each took to be acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    took = []
    for value in values:
        began = time.monotonic()
        producer.produce(topic, value, partition=0)
        assert producer.flush(DELIVERY_TIMEOUT_S) == 0
        took.append(time.monotonic() - began)
    return took


def send_kafka_python(bootstrap: str, topic: str, values: list[bytes]) -> list[float]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    try:
        took = []
        for value in values:
            began = time.monotonic()
            producer.send(topic, value, partition=0).get(timeout=DELIVERY_TIMEOUT_S)
            took.append(time.monotonic() - began)
        return took
    finally:
        producer.close(timeout=5)


def send_aiokafka(bootstrap: str, topic: str, values: list[bytes]) -> list[float]:
    from aiokafka import AIOKafkaProducer

    async def send() -> list[float]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            took = []
            for value in values:
                began = time.monotonic()
                await asyncio.wait_for(producer.send_and_wait(topic, value, partition=0), DELIVERY_TIMEOUT_S)
                took.append(time.monotonic() - began)
            return took
        finally:
            await producer.stop()
    return asyncio.run(send())


CLIENTS: dict[str, Callable[[str, str, list[bytes]], list[float]]] = {
    "confluent-kafka": send_confluent, "kafka-python": send_kafka_python, "aiokafka": send_aiokafka}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_slow_follower_raises_acks_all_latency_and_loses_nothing(tidelog_cluster: Cluster, tidelog_topic: Any,
                                                                  client: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = tidelog_topic(replication_factor=3, configs={"min.insync.replicas": 2})
    leader = tidelog_cluster.leader_of(topic)
    follower = next(r for r in tidelog_cluster.partition(topic)["isr"] if r != leader)
    bootstrap = tidelog_cluster.bootstrap_servers
    CLIENTS[client](bootstrap, topic, [b"warm-up"])  # connections and metadata out of the way
    with tidelog_cluster.delay("Fetch", FOLLOWER_DELAY_MS, broker=leader,
                               client_id=f"broker-{follower}-fetcher-{leader}") as slow:
        took = CLIENTS[client](bootstrap, topic, [b"v%d" % i for i in range(RECORDS)])
    assert slow.fired >= RECORDS  # at least one held fetch per acknowledged write
    # every acks=all write waited for the slow follower's next fetch, itself held: measured 303-415 ms
    assert min(took) >= FOLLOWER_DELAY_MS / 1000 * 0.9, took
    assert tidelog_cluster.wait_for_isr(topic, 0, 3)  # it never left the ISR for good
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "recipe-count"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] == RECORDS + 1
    finally:
        consumer.close()


SLOW_LINK_MS = 150


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_slow_link_to_a_follower_raises_acks_all_latency_and_loses_nothing(tidelog_cluster: Cluster,
                                                                             tidelog_topic: Any, client: str) -> None:
    """The same follower, slowed by its network instead: every byte between it and the leader is
    relayed SLOW_LINK_MS late each way (`slow_link`, a delay proxy; skipped without root/iptables)."""
    from confluent_kafka import Consumer, TopicPartition

    topic = tidelog_topic(replication_factor=3, configs={"min.insync.replicas": 2})
    leader = tidelog_cluster.leader_of(topic)
    follower = next(r for r in tidelog_cluster.partition(topic)["isr"] if r != leader)
    bootstrap = tidelog_cluster.bootstrap_servers
    CLIENTS[client](bootstrap, topic, [b"warm-up"])
    with tidelog_cluster.slow_link(leader, follower, delay_ms=SLOW_LINK_MS) as slow:
        took = CLIENTS[client](bootstrap, topic, [b"v%d" % i for i in range(RECORDS)])
    assert slow.relayed() >= 1  # the follower's fetch connection went through the delay
    # each write waits for the follower's fetch answer and its next fetch, both held on the link
    assert min(took) >= SLOW_LINK_MS / 1000, took
    assert tidelog_cluster.wait_for_isr(topic, 0, 3)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "recipe-count-link"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] == RECORDS + 1
    finally:
        consumer.close()
