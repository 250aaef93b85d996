"""Reading a transactional partition as a client does, for the transaction tests."""

from __future__ import annotations

import time
from typing import Any

import pytest

from localcluster.launcher import LocalCluster

confluent_kafka: Any = pytest.importorskip("confluent_kafka")

READ_TIMEOUT_S = 30.0  # one read to the partition end, a cluster under test load included


def read_partition(cluster: LocalCluster, topic: str, isolation: str, count: int, *,
                   group_id: str) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) a confluent-kafka consumer of `isolation` (read_committed or
    read_uncommitted) reads from partition 0 of `topic`: at least `count` records, stopping at
    the partition end (read_committed: the LSO); an AssertionError names what it read when it
    gets fewer within READ_TIMEOUT_S."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": group_id,
        "enable.auto.commit": "false", "isolation.level": isolation, "enable.partition.eof": "true",
        "fetch.wait.max.ms": "100"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while time.monotonic() < deadline:  # bounded by the deadline
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                if len(got) >= count:
                    return got
                continue
            got.append((msg.key(), msg.value()))
        raise AssertionError(f"{isolation} consumer read {got}, expected {count} records")
    finally:
        consumer.close()
