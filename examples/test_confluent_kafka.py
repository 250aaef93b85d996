"""Testing an application that uses confluent-kafka against a real tidelog cluster.

Run with `pytest examples/`: the tidelog pytest plugin (installed with tidelog) provides the
fixtures; nothing here is tidelog-specific but them. Consumer groups are not in tidelog yet,
so the consumers read by assigning partitions.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tidelog.testing import Cluster


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 30.0) -> list[bytes]:
    """Every value in the topic, reading each partition from the start (no consumer group)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-no-commits",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:  # bounded by the deadline
            message = consumer.poll(0.1)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    if len(at_end) == partitions and len(values) >= expected:
                        break
                    continue
                raise AssertionError(f"consumer error: {message.error()}")
            values.append(message.value())
        return values
    finally:
        consumer.close()


def test_produce_and_consume(tidelog_bootstrap: str, tidelog_topic) -> None:
    topic = tidelog_topic(partitions=3)
    producer = Producer({"bootstrap.servers": tidelog_bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce(topic, key=b"k%d" % (i % 7), value=b"v%d" % i)
    assert producer.flush(30) == 0

    values = read_all(tidelog_bootstrap, topic, partitions=3, expected=100)
    assert sorted(values) == sorted(b"v%d" % i for i in range(100))


def test_idempotent_producer_survives_leader_kill(tidelog_cluster: Cluster, tidelog_topic) -> None:
    """Kill the partition leader while the application writes: every record is there exactly once."""
    topic = tidelog_topic(partitions=1, replication_factor=3, configs={"min.insync.replicas": 2})
    producer = Producer({"bootstrap.servers": tidelog_cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60_000})
    acked: list[bytes] = []
    failed: list[str] = []

    def delivered(error, message) -> None:
        if error is None:
            acked.append(message.value())
        else:
            failed.append(error.name())

    def application() -> None:  # the code under test: writes 2,000 records, a few every millisecond
        for i in range(2000):
            producer.produce(topic, value=b"%d" % i, on_delivery=delivered)
            producer.poll(0.001)

    writer = threading.Thread(target=application)
    writer.start()
    deadline = time.monotonic() + 30
    while len(acked) < 300 and time.monotonic() < deadline:  # mid-stream: some written, more to come
        time.sleep(0.01)
    old_leader = tidelog_cluster.kill_leader(topic, 0)  # returns once clients see the new leader
    writer.join(60)
    assert producer.flush(60) == 0

    assert failed == []
    assert len(acked) == 2000
    assert tidelog_cluster.leader_of(topic, 0) != old_leader.node_id
    values = read_all(tidelog_cluster.bootstrap_servers, topic, partitions=1, expected=2000)
    assert sorted(values, key=int) == [b"%d" % i for i in range(2000)]  # nothing lost, nothing twice
