"""Real clients against a real cluster: 3 controllers + 1 broker (node 4 on 127.0.0.4), all processes.

kcat -L lists the broker; a topic created through the admin API is produced to with
confluent-kafka (acks=1, and once per compression codec) and read back by assigning
partitions (no consumer group): keys, values and offsets exactly; kcat -C -e reads the same.
/metrics counts what happened. Every process is stopped in teardown (LocalCluster's exit).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from common.prometheus import samples
from tests.integration.cluster_fixtures import (
    BROKER_ID,
    http,
    running_cluster,
    wait_until,
)
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")
KCAT = shutil.which("kcat") or shutil.which("kafkacat")

CLIENT_TIMEOUT_S = 20.0
RECORDS = 300
CODECS = ("gzip", "lz4", "zstd", "snappy")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("broker-clients") / "cluster") as started:
        yield started  # stopped on exit even on failure; running_cluster checks a clean exit
    assert (started.brokers[0].spec.directory / "data" / ".kafka_cleanshutdown").exists()


def kcat(*args: str) -> str:
    assert KCAT is not None
    done = subprocess.run([KCAT, *args], capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return done.stdout


def create_topic(cluster: LocalCluster, name: str, partitions: int) -> None:
    status, answer = http(f"{cluster.admin_url}/v1/topics", "POST",
                          {"name": name, "partitions": partitions, "replication_factor": 1})
    assert status == 201, answer

    def led() -> bool:  # the broker leads every partition and answers Metadata for them
        metadata = confluent_kafka.Producer(
            {"bootstrap.servers": cluster.bootstrap_servers}).list_topics(name, timeout=5)
        topic = metadata.topics.get(name)
        return (topic is not None and topic.error is None and len(topic.partitions) == partitions
                and all(p.leader == BROKER_ID for p in topic.partitions.values()))
    wait_until(f"broker {BROKER_ID} leading {name}", led)


def produce(cluster: LocalCluster, topic: str, records: list[tuple[int, bytes, bytes]],
            **config: str) -> list[tuple[int, int, bytes, bytes]]:
    """Produce (partition, key, value) rows; the delivered (partition, offset, key, value)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "1",
                                         "linger.ms": "5", **config})
    delivered: list[tuple[int, int, bytes, bytes]] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    for partition, key, value in records:
        producer.produce(topic, value=value, key=key, partition=partition, on_delivery=report)
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "records left undelivered"
    assert not errors, errors
    return delivered


def consume(cluster: LocalCluster, topic: str, ends: dict[int, int]) -> list[tuple[int, int, bytes, bytes]]:
    """Every record of the partitions up to `ends` (partition -> next offset), by assignment."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                                         "enable.auto.commit": "false", "fetch.wait.max.ms": "100"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in ends])
        got: list[tuple[int, int, bytes, bytes]] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < sum(ends.values()) and time.monotonic() < deadline:  # bounded by the deadline
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        return got
    finally:
        consumer.close()


def rows(count: int, partitions: int, tag: str) -> list[tuple[int, bytes, bytes]]:
    return [(i % partitions, f"{tag}-key-{i}".encode(), f"{tag}-value-{i}-".encode() * (1 + i % 7))
            for i in range(count)]


def expected_offsets(records: list[tuple[int, bytes, bytes]]) -> list[tuple[int, int, bytes, bytes]]:
    next_offset: dict[int, int] = {}
    out = []
    for partition, key, value in records:
        offset = next_offset.get(partition, 0)
        next_offset[partition] = offset + 1
        out.append((partition, offset, key, value))
    return out


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_lists_the_broker(cluster: LocalCluster) -> None:
    listing = kcat("-L", "-b", cluster.bootstrap_servers or "", "-m", "10")
    assert "1 brokers:" in listing, listing
    assert f"broker {BROKER_ID} at {cluster.bootstrap_servers}" in listing, listing


def test_produce_acks_1_and_consume_by_assignment(cluster: LocalCluster) -> None:
    create_topic(cluster, "plain", 2)
    records = rows(RECORDS, 2, "plain")
    delivered = produce(cluster, "plain", records)
    expected = expected_offsets(records)
    assert sorted(delivered) == sorted(expected)
    got = consume(cluster, "plain", {0: RECORDS // 2, 1: RECORDS // 2})
    assert sorted(got) == sorted(expected)
    if KCAT is not None:  # kcat reads the same partition to its end and exits
        lines = kcat("-C", "-e", "-q", "-b", cluster.bootstrap_servers or "", "-t", "plain", "-p", "0",
                     "-o", "beginning", "-f", "%o %k %s\n").splitlines()
        assert lines == [f"{o} {k.decode()} {v.decode()}" for p, o, k, v in expected if p == 0]


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batches_round_trip(cluster: LocalCluster, codec: str) -> None:
    topic = f"compressed-{codec}"
    create_topic(cluster, topic, 1)
    records = rows(100, 1, codec)
    delivered = produce(cluster, topic, records, **{"compression.type": codec})
    expected = expected_offsets(records)
    assert sorted(delivered) == expected
    assert consume(cluster, topic, {0: 100}) == expected


def test_metrics_count_the_traffic(cluster: LocalCluster) -> None:
    create_topic(cluster, "metered", 1)
    assert len(produce(cluster, "metered", rows(10, 1, "metered"))) == 10  # traffic of its own
    broker = cluster.brokers[0].spec
    status, text = http(broker.metrics_url)
    assert status == 200
    body = text.decode()
    values = samples(body)
    assert values["tidelog_broker_bytes_in_total"] > 0 and values["tidelog_broker_bytes_out_total"] > 0
    assert values["tidelog_broker_connections_total"] >= 1
    assert values['tidelog_broker_requests_total{api="PRODUCE"}'] >= 1, body
    assert values['tidelog_broker_request_latency_ms_bucket{le="+Inf"}'] == values[
        "tidelog_broker_request_latency_ms_count"]
    assert values["tidelog_broker_partitions_led"] >= 1  # the topics created above (RF 1)
    assert values["tidelog_broker_under_replicated_partitions"] == 0


def test_a_consumers_fetch_raises_its_topics_bytes_out(cluster: LocalCluster) -> None:
    """Kafka's BytesOutPerSec{topic}: the topic's counter grows by the record bytes a consumer
    read, and another topic's does not move."""
    create_topic(cluster, "consumed", 1)
    create_topic(cluster, "unread", 1)
    produce(cluster, "consumed", rows(20, 1, "consumed"))
    produce(cluster, "unread", rows(20, 1, "unread"))

    def topic_bytes_out() -> dict[str, float]:
        status, text = http(cluster.brokers[0].spec.metrics_url)
        assert status == 200
        values = samples(text.decode())
        return {t: values.get(f'tidelog_broker_topic_bytes_out_total{{topic="{t}"}}', 0.0)
                for t in ("consumed", "unread")}

    before = topic_bytes_out()
    assert len(consume(cluster, "consumed", {0: 20})) == 20
    after = topic_bytes_out()
    assert after["consumed"] - before["consumed"] >= sum(len(k) + len(v) for _, k, v in rows(20, 1, "consumed"))
    assert after["unread"] == before["unread"] == 0
