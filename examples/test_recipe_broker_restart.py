"""Recipe (issue 33): a broker restart under an idempotent producer, with confluent-kafka,
kafka-python and aiokafka.

The application keeps one producer open while the partition's leader is killed (clients move to
the new leader) and then started again from its data (it catches up and rejoins the ISR). Records
sent before, during and after are all stored, once each, in the order sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tidelog.testing import Cluster

PER_PHASE = 20
DELIVERY_TIMEOUT_S = 60.0  # the first send after the kill waits for the new leader's metadata


def run_confluent(bootstrap: str, topic: str, phases: list[Callable[[], None]]) -> None:
    """Send PER_PHASE records, then run each phase and send PER_PHASE more after it."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000)})
    sent = 0
    for phase in [lambda: None, *phases]:
        phase()
        for _ in range(PER_PHASE):
            producer.produce(topic, b"%d" % sent, partition=0)
            sent += 1
        assert producer.flush(DELIVERY_TIMEOUT_S) == 0


def run_kafka_python(bootstrap: str, topic: str, phases: list[Callable[[], None]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                             delivery_timeout_ms=int(DELIVERY_TIMEOUT_S * 1000))
    try:
        sent = 0
        for phase in [lambda: None, *phases]:
            phase()
            futures = []
            for _ in range(PER_PHASE):
                futures.append(producer.send(topic, b"%d" % sent, partition=0))
                sent += 1
            for future in futures:
                future.get(timeout=DELIVERY_TIMEOUT_S)
    finally:
        producer.close(timeout=5)


def run_aiokafka(bootstrap: str, topic: str, phases: list[Callable[[], None]]) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                    request_timeout_ms=int(DELIVERY_TIMEOUT_S * 1000))
        await producer.start()
        try:
            sent = 0
            for phase in [lambda: None, *phases]:
                await asyncio.to_thread(phase)  # the cluster's helpers block: off the event loop
                pending = []
                for _ in range(PER_PHASE):
                    pending.append(await producer.send(topic, b"%d" % sent, partition=0))
                    sent += 1
                await asyncio.wait_for(asyncio.gather(*pending), DELIVERY_TIMEOUT_S)
        finally:
            await producer.stop()
    asyncio.run(run())


CLIENTS: dict[str, Callable[[str, str, list[Callable[[], None]]], None]] = {
    "confluent-kafka": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


def stored_values(cluster: Cluster, topic: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "recipe-read",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        for _ in range(expected * 10):  # bounded: at most expected * 10 polls of 0.5 s
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
            if len(values) >= expected and message is None:
                break
        return values
    finally:
        consumer.close()


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_records_sent_across_a_broker_restart_are_stored_once_in_order(tidelog_cluster: Cluster,
                                                                        tidelog_topic: Any, client: str) -> None:
    topic = tidelog_topic(replication_factor=3, configs={"min.insync.replicas": 2})
    killed: list[Any] = []

    def kill_leader() -> None:
        killed.append(tidelog_cluster.kill_leader(topic))  # returns once clients see the new leader

    def restart() -> None:
        killed[0].undo()  # started again from its data: registered, unfenced, known to every broker

    CLIENTS[client](tidelog_cluster.bootstrap_servers, topic, [kill_leader, restart])
    assert tidelog_cluster.wait_for_isr(topic, 0, 3)  # the restarted broker caught up
    expected = [b"%d" % i for i in range(3 * PER_PHASE)]
    assert stored_values(tidelog_cluster, topic, len(expected)) == expected
