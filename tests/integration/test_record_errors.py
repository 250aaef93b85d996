"""KIP-467 record_errors with real producers against a real cluster (3 controllers + broker 4):
a batch holding keyless records for a compacted topic, or records outside the topic's
timestamp window, fails as a whole, and the client tells the bad records from the good ones.

- confluent-kafka (librdkafka): each bad record fails with INVALID_RECORD (when several are bad,
  else the partition's code); each good record of the batch with _INVALID_DIFFERENT_RECORD;
- kafka-python: each bad record fails with its own message, each good one as "part of a batch
  which had one or more invalid records";
- nothing of a rejected batch is stored: the next record is at offset 0.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.cluster_fixtures import BROKER_ID, running_cluster, wait_until
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")
kafka = pytest.importorskip("kafka")

CLIENT_TIMEOUT_S = 20.0
KEYS = [b"a", None, b"c", None]  # records 1 and 3 are bad
LINGER_MS = 500  # long enough for the four records to leave in one batch


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("record-errors") / "cluster") as started:
        yield started  # every process stopped on exit, even on failure


def create_topic(cluster: LocalCluster, name: str, configs: dict[str, str]) -> None:
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics([confluent_admin.NewTopic(name, 1, 1, config=configs)])
    futures[name].result(CLIENT_TIMEOUT_S)

    def led() -> bool:
        topic = admin.list_topics(name, timeout=5).topics.get(name)
        return topic is not None and topic.error is None and topic.partitions[0].leader == BROKER_ID
    wait_until(f"broker {BROKER_ID} leading {name}", led)


def confluent_send(cluster: LocalCluster, topic: str, records: list[tuple[bytes | None, int]]) -> list[Any]:
    """One batch of `records` (key, timestamp); each record's delivery error (None: stored)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                                         "retries": 0, "enable.idempotence": False,
                                         "linger.ms": LINGER_MS})
    errors: dict[int, Any] = {}
    for index, (key, timestamp) in enumerate(records):
        producer.produce(topic, value=b"v", key=key, timestamp=timestamp,
                         on_delivery=lambda err, _m, i=index: errors.__setitem__(i, err))
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    return [errors[i] for i in range(len(records))]


def test_confluent_kafka_tells_keyless_records_from_the_rest(cluster: LocalCluster) -> None:
    create_topic(cluster, "compacted", {"cleanup.policy": "compact"})
    errors = confluent_send(cluster, "compacted", [(key, 0) for key in KEYS])
    codes = [e.code() for e in errors]
    different = confluent_kafka.KafkaError._INVALID_DIFFERENT_RECORD
    assert codes == [different, confluent_kafka.KafkaError.INVALID_RECORD, different,
                     confluent_kafka.KafkaError.INVALID_RECORD]
    # the Python binding shows only the code's text (librdkafka keeps the record's message in
    # its own errstr, which the delivery report does not carry): kafka-python shows the message
    assert confluent_send(cluster, "compacted", [(b"k", 0)]) == [None]
    assert_log_end(cluster, "compacted", 1)  # the record after: nothing of the refused batch was stored


def test_kafka_python_tells_records_out_of_the_window_from_the_rest(cluster: LocalCluster) -> None:
    create_topic(cluster, "window", {"message.timestamp.before.max.ms": "60000",
                                     "message.timestamp.after.max.ms": "60000"})
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1, retries=0,
                                   linger_ms=LINGER_MS)
    try:
        now = int(time.time() * 1000)
        stale = now - 3_600_000
        futures = [producer.send("window", b"v", key=b"k", timestamp_ms=ts) for ts in (now, stale, now)]
        producer.flush(CLIENT_TIMEOUT_S)
        errors = [f.exception for f in futures]
    finally:
        producer.close()
    bad = errors[1]
    # one bad record: it fails with the partition's own error, and its message names it
    assert isinstance(bad, kafka.errors.InvalidTimestampError), errors
    assert f"Timestamp {stale} of message with offset 1 is out of range" in str(bad)
    for good in (errors[0], errors[2]):
        assert not isinstance(good, kafka.errors.InvalidTimestampError)
        assert "part of a batch which had one" in str(good)
    assert_log_end(cluster, "window", 0)


def assert_log_end(cluster: LocalCluster, topic: str, expected: int) -> None:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "group.id": "never-joined", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0),
                                                   timeout=CLIENT_TIMEOUT_S)
    finally:
        consumer.close()
    assert (low, high) == (0, expected)
