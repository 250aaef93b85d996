"""Recipes (issue 33): Produce failures an application must survive, injected inside the broker
with tidelog's request-level faults, each with confluent-kafka, kafka-python and aiokafka.

- NOT_LEADER_OR_FOLLOWER once: the client refreshes its metadata, retries, and the record lands
  once (`cluster.inject`).
- A Produce whose answer is lost (`cluster.drop_connection(when="after")`: the broker appended the
  record, then closed the connection instead of answering): the client retries; with idempotence
  the broker recognises the retry (same producer id and sequence) and the record is stored once;
  without it, twice. This is what enable.idempotence is for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tidelog.testing import Cluster

DELIVERY_TIMEOUT_S = 30.0


def stored(cluster: Cluster, topic: str) -> int:
    """How many records partition 0 holds (its high watermark; the log starts at 0)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "recipe-count"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def send_confluent(bootstrap: str, topic: str, value: bytes, idempotent: bool) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": idempotent, "acks": "all",
                         "linger.ms": 0})
    outcomes: list[Any] = []
    producer.produce(topic, value, partition=0, on_delivery=lambda error, _: outcomes.append(error))
    assert producer.flush(DELIVERY_TIMEOUT_S) == 0 and outcomes == [None]


def send_kafka_python(bootstrap: str, topic: str, value: bytes, idempotent: bool) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=idempotent, acks="all", retries=5)
    try:
        producer.send(topic, value, partition=0).get(timeout=DELIVERY_TIMEOUT_S)
    finally:
        producer.close(timeout=5)


def send_aiokafka(bootstrap: str, topic: str, value: bytes, idempotent: bool) -> None:
    from aiokafka import AIOKafkaProducer

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=idempotent, acks="all")
        await producer.start()
        try:
            await asyncio.wait_for(producer.send_and_wait(topic, value, partition=0), DELIVERY_TIMEOUT_S)
        finally:
            await producer.stop()
    asyncio.run(send())


CLIENTS: dict[str, Callable[[str, str, bytes, bool], None]] = {
    "confluent-kafka": send_confluent, "kafka-python": send_kafka_python, "aiokafka": send_aiokafka}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_not_leader_once_is_retried_and_lands_once(tidelog_cluster: Cluster, tidelog_topic: Any,
                                                   client: str) -> None:
    topic = tidelog_topic()
    with tidelog_cluster.inject("Produce", "NOT_LEADER_OR_FOLLOWER", times=1, topic=topic) as fault:
        CLIENTS[client](tidelog_cluster.bootstrap_servers, topic, b"order-1", True)
    assert fault.fired == 1  # the client did see the error
    assert stored(tidelog_cluster, topic) == 1


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize(("idempotent", "copies"), [(True, 1), (False, 2)], ids=["idempotent", "not-idempotent"])
def test_a_lost_produce_answer_duplicates_only_without_idempotence(
        tidelog_cluster: Cluster, tidelog_topic: Any, client: str, idempotent: bool, copies: int) -> None:
    topic = tidelog_topic()
    with tidelog_cluster.drop_connection("Produce", when="after", times=1, topic=topic) as fault:
        CLIENTS[client](tidelog_cluster.bootstrap_servers, topic, b"payment-1", idempotent)
    assert fault.fired == 1
    assert stored(tidelog_cluster, topic) == copies
