"""Recompression and LogAppendTime on a replicated topic (1 controller + brokers 2-4, RF=3):
the leader rewrites the batches confluent-kafka produces in gzip into the topic's zstd and
stamps LogAppendTime; the followers copy the leader's bytes, so every replica's segment files
are byte-identical and a consumer reads the records back unchanged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from common.record_batch import CompressionType, TimestampType, iter_batches
from tests.integration.replication_fixtures import (
    BROKERS,
    create_topic,
    replica_log_bytes,
    replicated_cluster,
    wait_full_isr,
    wait_replicas_caught_up,
)
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")

CLIENT_TIMEOUT_S = 20.0
TOPIC = "zstd-append-time"
RECORDS = [(f"key-{i}".encode(), f"value-{i} ".encode() * 30) for i in range(500)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with replicated_cluster(tmp_path_factory.mktemp("topic-configs-rf3") / "cluster") as (started, _):
        yield started  # every process stopped on exit, even on failure


def test_followers_copy_the_leaders_recompressed_stamped_batches(cluster: LocalCluster) -> None:
    create_topic(cluster, TOPIC, partitions=1, configs={
        "compression.type": "zstd", "message.timestamp.type": "LogAppendTime", "min.insync.replicas": "2"})
    wait_full_isr(cluster, TOPIC, 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                                         "compression.type": "gzip", "linger.ms": "20"})
    errors: list[object] = []
    for key, value in RECORDS:
        producer.produce(TOPIC, value=value, key=key, timestamp=1_000,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0 and not errors, errors
    wait_replicas_caught_up(cluster, TOPIC, 1)

    stored = {broker: replica_log_bytes(cluster, broker, TOPIC, 0) for broker in BROKERS}
    assert len(set(stored.values())) == 1, "replicas differ"
    headers = [h for _, h in iter_batches(stored[BROKERS[0]])]
    assert headers and {h.compression for h in headers} == {CompressionType.ZSTD}
    assert {h.timestamp_type for h in headers} == {TimestampType.LOG_APPEND_TIME}
    assert all(h.max_timestamp > 1_000 for h in headers)

    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "group.id": "never-joined", "enable.auto.commit": False})
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        got: list[tuple[bytes, bytes]] = []
        while len(got) < len(RECORDS):
            batch = consumer.consume(len(RECORDS), CLIENT_TIMEOUT_S)
            assert batch, f"no records after {len(got)}"
            for message in batch:
                assert message.error() is None, message.error()
                assert message.timestamp()[0] == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME
                got.append((message.key(), message.value()))
    finally:
        consumer.close()
    assert got == RECORDS
