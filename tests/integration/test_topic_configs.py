"""Kafka's topic configs with real clients against a real cluster (3 controllers + broker 4,
whose config sets the broker default compression.type=zstd):

- compression.type: each codec (and `producer`, and the broker default) with records produced
  by confluent-kafka in another codec; a kafka-python consumer reads them back identical and
  `tidelog dump-log` shows the codec of every stored batch;
- message.timestamp.type=LogAppendTime seen by a consumer and in the produce response;
- INVALID_TIMESTAMP (KIP-937) and MESSAGE_TOO_LARGE from kafka-python's producer;
- bad configs refused with INVALID_CONFIG naming the key, through CreateTopics (kafka-python)
  and the admin HTTP API, nothing created;
- DescribeConfigs lists Kafka 3.9's whole set with the right sources.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.integration.cluster_fixtures import (
    BROKER_ID,
    broker_log_dir,
    http,
    running_cluster,
    wait_until,
)
from tests.unit.test_topic_config_set import KAFKA_39_DEFAULTS
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")
kafka = pytest.importorskip("kafka")
kafka_admin = pytest.importorskip("kafka.admin")
kafka_errors = pytest.importorskip("kafka.errors")

CLIENT_TIMEOUT_S = 20.0
CLI_TIMEOUT_S = 30.0
BROKER_PROPERTIES = {"compression.type": "zstd"}
RECORDS = [(f"key-{i}".encode(), f"value-{i}-".encode() * 40) for i in range(200)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("topic-configs") / "cluster", BROKER_PROPERTIES) as started:
        yield started  # every process stopped on exit, even on failure


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[object]:
    client = kafka_admin.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers,
                                          request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    yield client
    client.close()


def create_topic(cluster: LocalCluster, admin: object, name: str, configs: dict[str, str]) -> None:
    admin.create_topics([kafka_admin.NewTopic(name, 1, 1, topic_configs=configs)])  # type: ignore[attr-defined]

    def led() -> bool:
        metadata = confluent_kafka.Producer(
            {"bootstrap.servers": cluster.bootstrap_servers}).list_topics(name, timeout=5)
        topic = metadata.topics.get(name)
        return topic is not None and topic.error is None and topic.partitions[0].leader == BROKER_ID
    wait_until(f"broker {BROKER_ID} leading {name}", led)


def produce_confluent(cluster: LocalCluster, topic: str, codec: str, timestamp_ms: int = 0) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                                         "linger.ms": "20", "compression.type": codec})
    errors: list[object] = []
    for key, value in RECORDS:
        producer.produce(topic, value=value, key=key, timestamp=timestamp_ms,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "records left undelivered"
    assert not errors, errors


def consume_kafka_python(cluster: LocalCluster, topic: str, count: int) -> list[object]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                                   enable_auto_commit=False, consumer_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        records = []
        for message in consumer:
            records.append(message)
            if len(records) == count:
                break
        return records
    finally:
        consumer.close()


def stored_codecs(cluster: LocalCluster, topic: str) -> list[str]:
    """compresscodec of every stored batch, as `tidelog dump-log` prints them."""
    segments = sorted((broker_log_dir(cluster) / f"{topic}-0").glob("*.log"))
    result = subprocess.run([sys.executable, "-m", "tidelog", "dump-log", *map(str, segments)],
                            capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False)
    assert result.returncode == 0, result.stderr
    return re.findall(r"compresscodec: (\w+)", result.stdout)


# (topic's compression.type or None for the broker default, producer's codec, codec stored)
CODECS = [
    ("uncompressed", "gzip", "NONE"), ("gzip", "snappy", "GZIP"), ("snappy", "lz4", "SNAPPY"),
    ("lz4", "zstd", "LZ4"), ("zstd", "none", "ZSTD"), ("producer", "snappy", "SNAPPY"),
    (None, "gzip", "ZSTD"),
]


@pytest.mark.parametrize(("topic_codec", "producer_codec", "stored"), CODECS,
                         ids=[f"{t or 'broker-default'}-from-{p}" for t, p, _ in CODECS])
def test_compression_type_recompresses_and_records_come_back_identical(
        cluster: LocalCluster, admin: object, topic_codec: str | None, producer_codec: str, stored: str) -> None:
    topic = f"codec-{topic_codec or 'default'}"
    create_topic(cluster, admin, topic, {"compression.type": topic_codec} if topic_codec else {})
    produce_confluent(cluster, topic, producer_codec)
    got = consume_kafka_python(cluster, topic, len(RECORDS))
    assert [(m.offset, m.key, m.value) for m in got] == [(i, k, v) for i, (k, v) in enumerate(RECORDS)]
    codecs = stored_codecs(cluster, topic)
    assert codecs and set(codecs) == {stored}, codecs


def test_log_append_time_is_what_consumers_and_the_produce_response_see(
        cluster: LocalCluster, admin: object) -> None:
    create_topic(cluster, admin, "append-time", {"message.timestamp.type": "LogAppendTime"})
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        before = int(time.time() * 1000)
        metadata = producer.send("append-time", b"v", timestamp_ms=1_000).get(timeout=CLIENT_TIMEOUT_S)
        after = int(time.time() * 1000)
    finally:
        producer.close()
    assert before <= metadata.timestamp <= after  # the response's log_append_time, not 1000
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "group.id": "never-joined", "enable.auto.commit": False})
    try:
        consumer.assign([confluent_kafka.TopicPartition("append-time", 0, 0)])
        message = consumer.poll(CLIENT_TIMEOUT_S)
    finally:
        consumer.close()
    assert message is not None and message.error() is None
    assert message.timestamp() == (confluent_kafka.TIMESTAMP_LOG_APPEND_TIME, metadata.timestamp)


def test_a_timestamp_outside_the_window_is_invalid_timestamp(cluster: LocalCluster, admin: object) -> None:
    create_topic(cluster, admin, "window", {"message.timestamp.before.max.ms": "60000",
                                            "message.timestamp.after.max.ms": "60000"})
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1, retries=0)
    try:
        now = int(time.time() * 1000)
        for stale in (now - 3_600_000, now + 3_600_000):
            with pytest.raises(kafka_errors.InvalidTimestampError):
                producer.send("window", b"v", timestamp_ms=stale).get(timeout=CLIENT_TIMEOUT_S)
        fine = producer.send("window", b"v", timestamp_ms=now).get(timeout=CLIENT_TIMEOUT_S)
    finally:
        producer.close()
    assert fine.offset == 0  # the refused ones stored nothing


def test_a_batch_over_max_message_bytes_is_message_too_large(cluster: LocalCluster, admin: object) -> None:
    create_topic(cluster, admin, "small", {"max.message.bytes": "1000", "compression.type": "producer"})
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1, retries=0)
    try:
        with pytest.raises(kafka_errors.MessageSizeTooLargeError):
            producer.send("small", b"x" * 2000).get(timeout=CLIENT_TIMEOUT_S)
        assert producer.send("small", b"x" * 100).get(timeout=CLIENT_TIMEOUT_S).offset == 0
    finally:
        producer.close()


# (config, value) each refused with INVALID_CONFIG naming the key
BAD = [("compression.type", "brotli"), ("compresion.type", "gzip"), ("compression.zstd.level", "99"),
       ("message.timestamp.before.max.ms", "soon"), ("remote.storage.enable", "true"),
       ("segment.jitter.ms", "-1"), ("max.message.bytes", "-1")]


@pytest.mark.parametrize(("key", "value"), BAD, ids=[k for k, _ in BAD])
def test_bad_config_is_invalid_config_naming_the_key(cluster: LocalCluster, admin: object,
                                                     key: str, value: str) -> None:
    name = f"bad-{key.replace('.', '-')}"
    with pytest.raises(kafka_errors.InvalidConfigurationError, match=re.escape(key)):
        admin.create_topics([kafka_admin.NewTopic(name, 1, 1, topic_configs={key: value})])  # type: ignore[attr-defined]
    status, answer = http(f"{cluster.admin_url}/v1/topics", "POST",
                          {"name": name, "partitions": 1, "replication_factor": 1, "configs": {key: value}})
    assert 400 <= status < 500 and b"INVALID_CONFIG" in answer and key.encode() in answer, answer
    assert name not in admin.list_topics()  # type: ignore[attr-defined]


def test_describe_configs_lists_kafkas_whole_set(cluster: LocalCluster, admin: object) -> None:
    create_topic(cluster, admin, "described", {"compression.type": "lz4", "preallocate": "true"})
    client = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = confluent_admin.ConfigResource(confluent_admin.ResourceType.TOPIC, "described")
    entries = client.describe_configs([resource], request_timeout=CLIENT_TIMEOUT_S)[resource].result(
        timeout=CLIENT_TIMEOUT_S)
    Source = confluent_admin.ConfigSource
    expected = {**KAFKA_39_DEFAULTS, "compression.type": "lz4", "preallocate": "true"}
    assert {name: entry.value or "" for name, entry in entries.items()} == expected
    assert entries["compression.type"].source == Source.DYNAMIC_TOPIC_CONFIG.value
    assert entries["compression.zstd.level"].source == Source.DEFAULT_CONFIG.value
    assert entries["remote.storage.enable"].source == Source.DEFAULT_CONFIG.value
    [(_, shown)] = [(n, e) for n, e in entries.items() if n == "compression.type"]
    assert "compression.type" in shown.synonyms


def test_changing_compression_type_on_a_live_topic_applies_to_the_next_batches(
        cluster: LocalCluster, admin: object) -> None:
    create_topic(cluster, admin, "altered", {"compression.type": "producer"})
    produce_confluent(cluster, "altered", "snappy")
    status, answer = http(f"{cluster.admin_url}/v1/topics/altered/configs", "PATCH",
                          {"configs": {"compression.type": "gzip"}})
    assert status == 200, answer

    def applied() -> bool:  # the broker applies the committed config from its metadata image
        produce_confluent(cluster, "altered", "snappy")
        return stored_codecs(cluster, "altered")[-1] == "GZIP"
    wait_until("the broker storing gzip after the change", applied)
    codecs = stored_codecs(cluster, "altered")
    assert codecs[0] == "SNAPPY" and codecs[-1] == "GZIP", codecs  # old batches stay as stored
    got = consume_kafka_python(cluster, "altered", 2 * len(RECORDS))
    assert [(m.key, m.value) for m in got[:2 * len(RECORDS)]] == RECORDS * 2
