"""What the transaction tests share: their RF=3 cluster, its addresses, new topics with every
replica in the ISR, and reading a transactional topic as a client does."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from common.kafka_client import KafkaClient
from localcluster.launcher import LocalCluster
from tests.integration.replication_fixtures import create_topic, replicated_cluster, wait_full_isr

confluent_kafka: Any = pytest.importorskip("confluent_kafka")

READ_TIMEOUT_S = 30.0  # one read to the partition end, a cluster under test load included
READ_ALL_S = 60.0  # one read of a whole topic, a cluster just restarted included
SETTLE_S = 2.0  # a reader that has what it expects keeps reading this long (to catch any extra record)


def txn_cluster(name: str, properties: Mapping[str, str]) -> Callable[..., Iterator[LocalCluster]]:
    """A module-scoped `cluster` fixture: 1 controller and 3 brokers with `properties`, stopped
    (paused nodes resumed first) when the module's tests are done, failed or not.

        cluster = txn_cluster("txn-eos", PROPERTIES)
    """
    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
        with replicated_cluster(tmp_path_factory.mktemp(name), properties) as (started, _):
            yield started
    return cluster


def bootstrap(cluster: LocalCluster) -> str:
    servers = cluster.bootstrap_servers
    assert servers is not None
    return servers


def hosts(cluster: LocalCluster) -> list[tuple[str, int]]:
    return [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in bootstrap(cluster).split(","))]


def client_of(cluster: LocalCluster, client_id: str) -> KafkaClient:
    """A raw client bootstrapped from every broker (the caller opens it: `with client_of(...)`)."""
    return KafkaClient(hosts(cluster), client_id=client_id)


def new_topic(cluster: LocalCluster, name: str, partitions: int, configs: Mapping[str, str] | None = None) -> str:
    """An RF=3 topic whose partitions all have a leader and a full ISR, known to every broker."""
    create_topic(cluster, name, partitions=partitions, configs=configs)
    wait_full_isr(cluster, name, partitions)
    return name


def read_values(cluster: LocalCluster, topic: str, isolation: str, expected: int, *, partitions: int,
                settle_s: float = SETTLE_S, timeout_s: float = READ_ALL_S) -> list[tuple[int, bytes]]:
    """(partition, value) of every record a confluent-kafka consumer of `isolation`
    (read_committed or read_uncommitted) reads from the start of partitions 0..`partitions`-1,
    in the order it reads them: it stops `settle_s` after reaching `expected` records (anything
    more is read too) or at `timeout_s`, whatever it has by then."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap(cluster), "group.id": f"reader-{topic}-{isolation}",
        "enable.auto.commit": False, "isolation.level": isolation, "fetch.wait.max.ms": 100})
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        settled_at: float | None = None
        while time.monotonic() < deadline:  # bounded by the deadline
            got += [(m.partition(), m.value()) for m in consumer.consume(500, 0.3) if m.error() is None]
            if len(got) >= expected:
                settled_at = settled_at or time.monotonic() + settle_s
                if time.monotonic() >= settled_at:
                    break
    finally:
        consumer.close()
    return got


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
