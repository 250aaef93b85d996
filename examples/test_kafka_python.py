"""Testing an application that uses kafka-python against a real tidelog cluster.

The fixtures come from the tidelog pytest plugin. Consumer groups are not in tidelog yet, so the
consumer reads by assigning partitions (no group.id).
"""

from __future__ import annotations

import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tidelog.testing import Cluster


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 30.0) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(values) < expected and time.monotonic() < deadline:  # bounded by the deadline
            for records in consumer.poll(timeout_ms=200).values():
                values += [record.value for record in records]
        return values
    finally:
        consumer.close()


def test_produce_and_consume(tidelog_bootstrap: str, tidelog_topic) -> None:
    topic = tidelog_topic(partitions=2)
    producer = KafkaProducer(bootstrap_servers=tidelog_bootstrap, acks="all")
    futures = [producer.send(topic, key=b"k%d" % (i % 5), value=b"v%d" % i) for i in range(100)]
    producer.flush(30)
    assert all(f.get(timeout=10).offset >= 0 for f in futures)
    producer.close()

    values = read_all(tidelog_bootstrap, topic, partitions=2, expected=100)
    assert sorted(values) == sorted(b"v%d" % i for i in range(100))


def test_idempotent_producer_survives_leader_kill(tidelog_cluster: Cluster, tidelog_topic) -> None:
    """Kill the partition leader between two halves of a stream: every record is there exactly once."""
    topic = tidelog_topic(partitions=1, replication_factor=3, configs={"min.insync.replicas": 2})
    producer = KafkaProducer(bootstrap_servers=tidelog_cluster.bootstrap_servers, acks="all",
                             enable_idempotence=True, linger_ms=5, retries=2**31 - 1,
                             delivery_timeout_ms=60_000, request_timeout_ms=10_000)
    futures = [producer.send(topic, value=b"%d" % i) for i in range(500)]
    old_leader = tidelog_cluster.kill_leader(topic, 0)  # the sender thread still has some of those 500 in flight
    futures += [producer.send(topic, value=b"%d" % i) for i in range(500, 1000)]
    producer.flush(60)
    assert all(f.get(timeout=60).offset >= 0 for f in futures)
    producer.close()

    assert tidelog_cluster.leader_of(topic, 0) != old_leader.node_id
    values = read_all(tidelog_cluster.bootstrap_servers, topic, partitions=1, expected=1000)
    assert sorted(values, key=int) == [b"%d" % i for i in range(1000)]  # nothing lost, nothing twice
