"""Recipes (issue 33): offset commits that fail, injected inside the group coordinator with tidelog's
request-level faults, each with confluent-kafka, kafka-python and aiokafka.

- A rebalance mid-commit: the coordinator answers the commit REBALANCE_IN_PROGRESS (as Kafka does
  while the group is rebalancing). The commit raises (confluent-kafka: REBALANCE_IN_PROGRESS;
  kafka-python and aiokafka: CommitFailedError); the application polls (the client rejoins the
  group) and commits the offset it processed up to again, and that offset is the one committed.
  (Committing "the current positions" instead would commit nothing on aiokafka right after the
  rejoin: the positions are fetched again first.)
- The coordinator moved: the commit is answered NOT_COORDINATOR. The client looks the coordinator
  up again (FindCoordinator) and retries the commit itself; usually the application sees nothing,
  but librdkafka sometimes rejoins the group meanwhile and its retry fails UNKNOWN_MEMBER_ID (seen
  once in a few runs), so the application's commit loop is what makes the recipe hold.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from tidelog.testing import Cluster

RECORDS = 5
DEADLINE_S = 30.0
COMMIT_ATTEMPTS = 20  # the application's own bound on commits in a row, each after a poll
POLL_S = 0.5  # between two commits: the client rejoins the group inside its poll
METADATA_MAX_AGE_MS = 1000  # kafka-python, aiokafka: a new topic's partitions are seen within a second


def produce(cluster: Cluster, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
    for i in range(RECORDS):
        producer.produce(topic, b"v%d" % i, partition=0)
    assert producer.flush(DEADLINE_S) == 0


def committed(cluster: Cluster, topic: str, group: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        consumer.close()


def consume_and_commit_confluent(bootstrap: str, topic: str, group: str) -> list[str]:
    """Read RECORDS records in a group, then commit them; the commit errors the application saw."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    seen: list[str] = []
    try:
        consumer.subscribe([topic])
        read, deadline = 0, time.monotonic() + DEADLINE_S
        while read < RECORDS and time.monotonic() < deadline:  # bounded by the deadline
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read += 1
        assert read == RECORDS
        for _ in range(COMMIT_ATTEMPTS):
            try:
                consumer.commit(offsets=[TopicPartition(topic, 0, RECORDS)], asynchronous=False)
                return seen
            except KafkaException as exc:
                seen.append(exc.args[0].name())
                consumer.poll(POLL_S)  # the application carries on: a rejoin happens here if one is due
        raise AssertionError(f"no commit succeeded: {seen}")
    finally:
        consumer.close()


def consume_and_commit_kafka_python(bootstrap: str, topic: str, group: str) -> list[str]:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.errors import KafkaError

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, metadata_max_age_ms=METADATA_MAX_AGE_MS)
    seen: list[str] = []
    try:
        # a group joined before kafka-python's metadata names the new topic is assigned nothing
        # ("No partition metadata for topic") and stayed so in some runs: learn the topic first
        assert consumer.partitions_for_topic(topic), "kafka-python does not see the topic"
        consumer.subscribe([topic])
        read, deadline = 0, time.monotonic() + DEADLINE_S
        while read < RECORDS and time.monotonic() < deadline:  # bounded by the deadline
            read += sum(len(r) for r in consumer.poll(timeout_ms=200).values())
        assert read == RECORDS
        for _ in range(COMMIT_ATTEMPTS):
            try:
                consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(RECORDS, "", -1)})
                return seen
            except KafkaError as exc:
                seen.append(type(exc).__name__)
                consumer.poll(timeout_ms=int(POLL_S * 1000))
        raise AssertionError(f"no commit succeeded: {seen}")
    finally:
        consumer.close()


def consume_and_commit_aiokafka(bootstrap: str, topic: str, group: str) -> list[str]:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import KafkaError

    async def run() -> list[str]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                    enable_auto_commit=False, metadata_max_age_ms=METADATA_MAX_AGE_MS)
        await consumer.start()
        seen: list[str] = []
        try:
            read, deadline = 0, time.monotonic() + DEADLINE_S
            while read < RECORDS and time.monotonic() < deadline:  # bounded by the deadline
                read += sum(len(r) for r in (await consumer.getmany(timeout_ms=200)).values())
            assert read == RECORDS
            for _ in range(COMMIT_ATTEMPTS):
                try:
                    await consumer.commit({TopicPartition(topic, 0): RECORDS})
                    return seen
                except KafkaError as exc:
                    seen.append(type(exc).__name__)
                    await consumer.getmany(timeout_ms=int(POLL_S * 1000))
            raise AssertionError(f"no commit succeeded: {seen}")
        finally:
            await consumer.stop()
    return asyncio.run(run())


CLIENTS: dict[str, Callable[[str, str, str], list[str]]] = {
    "confluent-kafka": consume_and_commit_confluent, "kafka-python": consume_and_commit_kafka_python,
    "aiokafka": consume_and_commit_aiokafka}


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("error", ["REBALANCE_IN_PROGRESS", "NOT_COORDINATOR"])
def test_a_failed_commit_is_recovered_and_the_offset_is_committed(tidelog_cluster: Cluster, tidelog_topic: Any,
                                                                  client: str, error: str) -> None:
    topic = tidelog_topic()
    group = f"{topic}-group"
    produce(tidelog_cluster, topic)
    with tidelog_cluster.inject("OffsetCommit", error, times=1, group=group) as fault:
        seen = CLIENTS[client](tidelog_cluster.bootstrap_servers, topic, group)
    assert fault.fired == 1
    if error == "REBALANCE_IN_PROGRESS":  # a rebalance reaches the application: it must commit again
        assert seen, "the commit during the rebalance should have failed"
    assert committed(tidelog_cluster, topic, group) == RECORDS
