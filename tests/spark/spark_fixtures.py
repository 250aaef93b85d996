"""Shared parts of the Spark tests: a real 3-broker cluster, one real SparkSession, records.

`spark_cluster` starts controller 1 and brokers 2-4 as processes on 127.0.0.1-4 (small
heartbeat and controlled-shutdown timeouts) and stops them all on exit, even on failure.
`spark_session` is a local[2] session on loopback with the UI off and workers on this
interpreter (the measured facts of /work/shared/spark-notes.md), stopped on exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka

from tests.integration.cluster_fixtures import http, spawn_node, wait_until
from localcluster.launcher import LocalCluster, free_ports

HOSTS = tuple(f"127.0.0.{n}" for n in range(1, 5))
BROKER_IDS = (2, 3, 4)
READY_S = 60.0  # two cores shared with other test runs: be generous
CLIENT_TIMEOUT_S = 60.0
SPARK_TIMEOUT_S = 120  # an int: StreamingQuery.awaitTermination is typed so
PROPERTIES = {"broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000",
              "controlled.shutdown.timeout.ms": "8000"}
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class Record:
    """One record as produced, with the offset the broker gave it."""
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


@contextlib.contextmanager
def spark_cluster(root: Path) -> Iterator[LocalCluster]:
    """Controller 1 + brokers 2, 3, 4, forked from the test zygote as the integration clusters'
    nodes are (cluster_fixtures.spawn_node); every process stopped on exit, even on failure."""
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    with LocalCluster.start(root, controllers=1, raft_port=raft_port, admin_port=admin_port, brokers=3,
                            kafka_port=kafka_port, metrics_port=metrics_port, ready_timeout=READY_S,
                            extra_properties=PROPERTIES, spawn=spawn_node) as cluster:
        yield cluster


@contextlib.contextmanager
def spark_session(app: str) -> Iterator[Any]:
    """One local[2] SparkSession with the tidelog source registered; stopped on exit."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark import register

    session = (SparkSession.builder.master("local[2]").appName(app)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        register(session)
        yield session
    finally:
        session.stop()


def create_topic(cluster: LocalCluster, name: str, partitions: int, replication_factor: int) -> None:
    """Create through the admin API and wait until every partition has a leader."""
    status, answer = http(f"{cluster.admin_url}/v1/topics", "POST",
                          {"name": name, "partitions": partitions, "replication_factor": replication_factor,
                           "configs": {}})
    assert status == 201, answer

    def led() -> bool:
        status, answer = http(f"{cluster.admin_url}/v1/topics/{name}")
        return status == 200 and all(p["leader"] != NO_LEADER for p in json.loads(answer)["partitions"])
    wait_until(f"every partition of {name} led", led, timeout_s=READY_S)


def leaders(cluster: LocalCluster, name: str) -> dict[int, int]:
    status, answer = http(f"{cluster.admin_url}/v1/topics/{name}")
    assert status == 200, answer
    return {p["partition"]: p["leader"] for p in json.loads(answer)["partitions"]}


def make_records(count: int, partitions: int, *, base_ms: int | None = None, prefix: str = "") -> list[Record]:
    """`count` records spread round-robin, keys k<i>, some with headers, one null key per 10."""
    base = base_ms if base_ms is not None else (int(time.time()) - 600) * 1000
    return [Record(partition=i % partitions, offset=-1, key=None if i % 10 == 9 else f"{prefix}k{i}".encode(),
                   value=f"{prefix}value-{i}-".encode() * 3,
                   headers=((("h", f"{i}".encode()), ("z", b"")) if i % 3 == 0 else ()), timestamp_ms=base + i)
            for i in range(count)]


def produce(bootstrap: str, topic: str, records: Sequence[Record]) -> list[Record]:
    """Produce to the given partitions (acks=all, idempotent); the records with their offsets."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                         "linger.ms": 5, "log_level": 3})
    delivered: dict[int, int] = {}
    errors: list[Any] = []

    def report(index: int) -> Any:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered[index] = msg.offset()
        return on_delivery
    # A partition added a moment ago may not be in every broker's metadata yet: wait for it.
    wanted = {r.partition for r in records if r.partition is not None}
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while time.monotonic() < deadline:  # bounded by the deadline
        known = producer.list_topics(topic, timeout=5).topics.get(topic)
        if known is not None and known.error is None and wanted <= set(known.partitions):
            break
        time.sleep(0.1)
    for index, r in enumerate(records):
        producer.produce(topic, value=r.value, key=r.key, partition=r.partition, headers=list(r.headers) or None,
                         timestamp=r.timestamp_ms, on_delivery=report(index))
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "records left undelivered"
    assert not errors, errors[:3]
    return [Record(r.partition, delivered[i], r.key, r.value, r.headers, r.timestamp_ms)
            for i, r in enumerate(records)]


def consume_partitions(bootstrap: str, topic: str, ends: dict[int, int]) -> list[tuple[Any, Any, bytes | None]]:
    """(partition, offset, key) of every record below `ends`, read by assignment."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests-never-joined",
                                         "enable.auto.commit": False, "log_level": 3})
    got: list[tuple[Any, Any, bytes | None]] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p, end in ends.items() if end > 0])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < sum(ends.values()) and time.monotonic() < deadline:  # bounded by the deadline
            for msg in consumer.consume(500, 0.5):
                assert msg.error() is None, msg.error()
                got.append((msg.partition(), msg.offset(), msg.key()))
        return got
    finally:
        consumer.close()
